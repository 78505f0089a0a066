/* A growable byte string, shared by the relay and the query cache. */
#ifndef PGFENCE_BYTES_H
#define PGFENCE_BYTES_H
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  uint8_t *data;
  size_t len, cap;
} bytes_t;

/* Returns -1 when out of memory (the bytes are then unchanged). */
static inline int bytes_append(bytes_t *b, const uint8_t *p, size_t n) {
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + n) cap *= 2;
    uint8_t *data = realloc(b->data, cap);
    if (!data) return -1;
    b->data = data;
    b->cap = cap;
  }
  if (n) memcpy(b->data + b->len, p, n);
  b->len += n;
  return 0;
}

static inline void bytes_free(bytes_t *b) {
  free(b->data);
  b->data = NULL;
  b->len = b->cap = 0;
}

#endif
