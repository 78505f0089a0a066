/* A growable byte string, shared by the relay and the query cache, and the protocol's
 * big-endian 32-bit integers. */
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

/* The big-endian (network order) 32-bit integer at `p`. */
static inline uint32_t read_u32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline void write_u32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}

static inline void bytes_free(bytes_t *b) {
  free(b->data);
  b->data = NULL;
  b->len = b->cap = 0;
}

#endif
