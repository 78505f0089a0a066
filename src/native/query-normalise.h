/*
 * The simple protocol's cache key: a Query text with its string and numeric literals replaced
 * by placeholders $1, $2... in order, everything else (comments too) kept byte for byte. Texts
 * that differ only in literal values share one key and one rewrite template.
 */
#ifndef PGFENCE_QUERY_NORMALISE_H
#define PGFENCE_QUERY_NORMALISE_H
#include "bytes.h"

typedef struct {
  uint32_t start, len;
} span_t;

typedef struct {
  bytes_t key;
  span_t *literals; /* where each placeholder's literal is in the text */
  size_t count, cap;
} normalised_t;

enum { NORMALISED = 0, NOT_NORMALISABLE = 1, NORMALISE_FAILED = -1 };

/* Fills `out` (reusing its memory). NOT_NORMALISABLE: the text has $n parameters of its own,
 * so it must take the uncached path; NORMALISE_FAILED: out of memory. */
int normalise_query(const uint8_t *sql, size_t n, normalised_t *out);

void normalised_free(normalised_t *out);

#endif
