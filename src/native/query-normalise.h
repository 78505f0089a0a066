/*
 * The simple protocol's cache key, byte for byte the text src/rewrite/normalise.ts makes: string
 * and numeric literals become placeholders $1, $2… in order; a comment carrying the fencing
 * token or resource key becomes a marker (its values become the next placeholders, as quoted
 * literals); any other comment becomes a space. Texts that differ only in those values share
 * one key and one rewrite template.
 */
#ifndef PGFENCE_QUERY_NORMALISE_H
#define PGFENCE_QUERY_NORMALISE_H
#include "bytes.h"

/* The comment keys (src/config/schema.ts: ASCII). */
typedef struct {
  const char *token, *resource;
} comment_keys_t;

/* One placeholder's value: bytes of the text, or of `quoted` when `quoted_value` is set. */
typedef struct {
  uint32_t start, len;
  int quoted_value;
} span_t;

typedef struct {
  bytes_t key;
  span_t *values; /* what each placeholder stands for, in placeholder order */
  size_t count, cap;
  bytes_t quoted; /* comment values, quoted as SQL literals */
  /* the comment values while the text is read: they follow the literals */
  span_t *pending;
  size_t pending_count, pending_cap;
} normalised_t;

enum { NORMALISED = 0, NOT_NORMALISABLE = 1, NORMALISE_FAILED = -1 };

/* Fills `out` (reusing its memory). NOT_NORMALISABLE: the text must take the uncached path (it
 * has $n parameters of its own, or a comment whose reading in C could differ from the
 * rewriter's, such as URL-encoded or non-ASCII values); NORMALISE_FAILED: out of memory. */
int normalise_query(const uint8_t *sql, size_t n, const comment_keys_t *keys, normalised_t *out);

/* The bytes a value stands for. */
const uint8_t *value_bytes(const normalised_t *out, const uint8_t *sql, const span_t *value);

#endif
