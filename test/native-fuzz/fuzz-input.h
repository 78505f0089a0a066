/* Reading a fuzz input as a few parameters followed by data, and failing loudly. */
#ifndef PGFENCE_FUZZ_INPUT_H
#define PGFENCE_FUZZ_INPUT_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
  const uint8_t *data;
  size_t len;
} input_t;

/* The next byte of the parameters (0 once they run out). */
static inline uint8_t take_byte(input_t *in) {
  if (in->len == 0) return 0;
  in->len--;
  return *in->data++;
}

/* A broken invariant: abort, so that libFuzzer keeps the input. */
#define REQUIRE(condition)                                                   \
  do {                                                                       \
    if (!(condition)) {                                                      \
      fprintf(stderr, "%s:%d: invariant broken: %s\n", __FILE__, __LINE__, #condition); \
      abort();                                                               \
    }                                                                        \
  } while (0)

/* Chunk sizes for splitting a stream, from a seed: mostly small, sometimes whole. */
static inline size_t next_chunk(uint32_t *seed, size_t left) {
  *seed = *seed * 1103515245u + 12345u;
  uint32_t r = *seed >> 16;
  size_t n = (r & 3) == 0 ? left : 1 + r % 13;
  return n < left ? n : left;
}

#endif
