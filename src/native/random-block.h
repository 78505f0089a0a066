/* Cryptographically random bytes for the addon's logins (random-block.c). */
#ifndef PGFENCE_RANDOM_BLOCK_H
#define PGFENCE_RANDOM_BLOCK_H
#include <stddef.h>
#include <stdint.h>

/* Fills out[0..n) (n at most RANDOM_BLOCK_BYTES); returns 0, or -1 when OpenSSL could not. */
#define RANDOM_BLOCK_BYTES 4096
int random_take(uint8_t *out, size_t n);

#endif
