/* Random bytes copied out of a block OpenSSL fills at once, as src/auth/random-block.ts does for
 * JavaScript: each login needs a nonce, and one RAND_bytes per 4 kB costs less than one per
 * nonce (each call sets its generator's cipher up again). Bytes handed out are wiped from the
 * block. One block per thread: the event loop's. */
#include "random-block.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <string.h>

static _Thread_local uint8_t block[RANDOM_BLOCK_BYTES];
static _Thread_local size_t used = RANDOM_BLOCK_BYTES;

int random_take(uint8_t *out, size_t n) {
  if (n > RANDOM_BLOCK_BYTES) return -1;
  if (used + n > RANDOM_BLOCK_BYTES) {
    if (RAND_bytes(block, RANDOM_BLOCK_BYTES) != 1) return -1;
    used = 0;
  }
  memcpy(out, block + used, n);
  OPENSSL_cleanse(block + used, n);
  used += n;
  return 0;
}
