/*
 * The rewrite templates of simple-protocol Query texts, by normalised text (query-normalise.h),
 * shared by every session of a proxy: a hit fills the template with the message's own literals
 * in C, so the usual fenced statement never calls into JavaScript. Bounded, in two generations
 * like src/rewrite/lru.ts: a hit in the young one is one lookup, and at most `capacity` entries
 * and about QUERY_CACHE_BYTES of texts are kept.
 */
#ifndef PGFENCE_QUERY_CACHE_H
#define PGFENCE_QUERY_CACHE_H
#include "bytes.h"
#include "query-normalise.h"

#define QUERY_CACHE_BYTES (64 * 1024 * 1024)

typedef enum {
  /* Forward the text as it is. */
  ENTRY_UNCHANGED,
  /* Upstream text: parts[0] literal[holes[0]] parts[1] … */
  ENTRY_TEMPLATE,
  /* Only the exact text can be rewritten (it does not parse with placeholders): ask JavaScript. */
  ENTRY_EXACT,
} entry_kind_t;

typedef struct cache_entry {
  struct cache_entry *next;
  uint64_t hash;
  entry_kind_t kind;
  bytes_t key;
  bytes_t parts;         /* the parts, back to back */
  uint32_t *part_ends;   /* where each part ends in `parts` */
  uint32_t *holes;       /* hole_count = part count - 1 */
  size_t hole_count;
  size_t value_count;    /* of the key's placeholders: the holes index these */
} cache_entry_t;

typedef struct {
  cache_entry_t **buckets;
  size_t mask, count;
  size_t bytes; /* of the entries' keys and parts */
} cache_table_t;

typedef struct {
  cache_table_t young, old;
  size_t generation;
} query_cache_t;

int query_cache_init(query_cache_t *cache, size_t capacity);
void query_cache_free(query_cache_t *cache);

uint64_t query_cache_hash(const bytes_t *key);
/* The entry for a key, or NULL. */
cache_entry_t *query_cache_get(query_cache_t *cache, const bytes_t *key, uint64_t hash);
/* Takes the entry over (its key included). */
void query_cache_put(query_cache_t *cache, cache_entry_t *entry);
void cache_entry_free(cache_entry_t *entry);

/* The Query message ('Q', length, text, NUL) for a template entry and the message's values;
 * NULL when out of memory. */
uint8_t *fill_query_template(const cache_entry_t *entry, const uint8_t *text,
                             const normalised_t *normalised, size_t *message_len);

#endif
