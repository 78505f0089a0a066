#include "query-cache.h"

#include "protocol-codes.h"

static size_t entry_bytes(const cache_entry_t *e) { return e->key.len + e->parts.len; }

static int table_init(cache_table_t *t, size_t generation) {
  size_t buckets = 16;
  while (buckets < generation * 2) buckets *= 2;
  t->buckets = calloc(buckets, sizeof *t->buckets);
  t->mask = buckets - 1;
  t->count = 0;
  t->bytes = 0;
  return t->buckets ? 0 : -1;
}

static void table_clear(cache_table_t *t) {
  for (size_t i = 0; i <= t->mask; i++) {
    cache_entry_t *e = t->buckets[i];
    while (e) {
      cache_entry_t *next = e->next;
      cache_entry_free(e);
      e = next;
    }
    t->buckets[i] = NULL;
  }
  t->count = 0;
  t->bytes = 0;
}

int query_cache_init(query_cache_t *cache, size_t capacity) {
  cache->generation = capacity / 2 ? capacity / 2 : 1;
  if (table_init(&cache->young, cache->generation) < 0) return -1;
  if (table_init(&cache->old, cache->generation) < 0) {
    free(cache->young.buckets);
    return -1;
  }
  return 0;
}

void query_cache_free(query_cache_t *cache) {
  table_clear(&cache->young);
  table_clear(&cache->old);
  free(cache->young.buckets);
  free(cache->old.buckets);
}

void cache_entry_free(cache_entry_t *e) {
  bytes_free(&e->key);
  bytes_free(&e->parts);
  free(e->part_ends);
  free(e->holes);
  free(e);
}

/* FNV-1a. */
uint64_t query_cache_hash(const bytes_t *key) {
  uint64_t h = 14695981039346656037ULL;
  for (size_t i = 0; i < key->len; i++) h = (h ^ key->data[i]) * 1099511628211ULL;
  return h;
}

/* Finds the entry and, when `unlink`, takes it out of the table. */
static cache_entry_t *table_find(cache_table_t *t, const bytes_t *key, uint64_t hash, int unlink) {
  cache_entry_t **link = &t->buckets[hash & t->mask];
  for (cache_entry_t *e = *link; e; link = &e->next, e = e->next) {
    if (e->hash != hash || e->key.len != key->len ||
        (key->len > 0 && memcmp(e->key.data, key->data, key->len) != 0))
      continue;
    if (unlink) {
      *link = e->next;
      t->count--;
      t->bytes -= entry_bytes(e);
    }
    return e;
  }
  return NULL;
}

static void table_insert(cache_table_t *t, cache_entry_t *e) {
  cache_entry_t **head = &t->buckets[e->hash & t->mask];
  e->next = *head;
  *head = e;
  t->count++;
  t->bytes += entry_bytes(e);
}

void query_cache_put(query_cache_t *cache, cache_entry_t *entry) {
  if (cache->young.count >= cache->generation || cache->young.bytes >= QUERY_CACHE_BYTES / 2) {
    /* The young generation becomes the old one; the old one's entries go. */
    cache_table_t dropped = cache->old;
    cache->old = cache->young;
    table_clear(&dropped);
    cache->young = dropped;
  }
  table_insert(&cache->young, entry);
}

cache_entry_t *query_cache_get(query_cache_t *cache, const bytes_t *key, uint64_t hash) {
  cache_entry_t *e = table_find(&cache->young, key, hash, 0);
  if (e) return e;
  e = table_find(&cache->old, key, hash, 1);
  if (e) query_cache_put(cache, e);
  return e;
}

uint8_t *fill_query_template(const cache_entry_t *e, const uint8_t *text,
                             const normalised_t *normalised, size_t *message_len) {
  size_t len = HEADER_BYTES + e->parts.len + 1;
  for (size_t i = 0; i < e->hole_count; i++) len += normalised->values[e->holes[i]].len;
  uint8_t *message = malloc(len);
  if (!message) return NULL;
  message[0] = FRONTEND_QUERY;
  write_u32(message + 1, (uint32_t)(len - 1));
  uint8_t *pos = message + HEADER_BYTES;
  uint32_t part_start = 0;
  for (size_t i = 0;; i++) {
    size_t part_len = e->part_ends[i] - part_start;
    if (part_len > 0) memcpy(pos, e->parts.data + part_start, part_len);
    pos += part_len;
    part_start = e->part_ends[i];
    if (i == e->hole_count) break;
    const span_t *value = &normalised->values[e->holes[i]];
    memcpy(pos, value_bytes(normalised, text, value), value->len);
    pos += value->len;
  }
  *pos = 0;
  *message_len = len;
  return message;
}
