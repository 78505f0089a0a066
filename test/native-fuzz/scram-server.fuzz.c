/*
 * The server's side of SCRAM-SHA-256 in C (src/native/scram-server.c) on arbitrary client
 * messages, against a fixed verifier. Invariants: each step fails only with its own reasons;
 * server-first is "r=", the client's nonce and the server's, then the verifier's suffix; a
 * client-final made right from any client-first the server took is accepted, with the client's
 * own ClientKey recovered and the signature RFC 5802 defines; and no client-final is accepted
 * unless its proof carries that ClientKey.
 */
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>
#include <string.h>

#include "fuzz-input.h"
#include "login-codes.h"
#include "scram-server.h"

static const char SUFFIX[] = ",s=c2FsdHNhbHRzYWx0c2FsdA==,i=4096";
static uint8_t client_key[SCRAM_KEY_BYTES], server_key[SCRAM_KEY_BYTES],
    stored_key[SCRAM_KEY_BYTES];

static void keys_once(void) {
  static int done;
  if (done) return;
  for (int i = 0; i < SCRAM_KEY_BYTES; i++) {
    client_key[i] = (uint8_t)(i * 7 + 1);
    server_key[i] = (uint8_t)(i * 13 + 5);
  }
  SHA256(client_key, SCRAM_KEY_BYTES, stored_key);
  done = 1;
}

static void hmac(const uint8_t *key, const char *text, size_t n, uint8_t out[SCRAM_KEY_BYTES]) {
  unsigned int len = 0;
  REQUIRE(HMAC(EVP_sha256(), key, SCRAM_KEY_BYTES, (const uint8_t *)text, n, out, &len));
}

/* client-final made right for the exchange so far, into `final` (NUL-terminated); the
 * signature the server must answer with, into `signature`. */
static size_t right_final(const scram_server_t *s, char *final, uint8_t signature[32]) {
  char proof_text[64], *binding = malloc(4 * strlen(s->gs2) / 3 + 8);
  REQUIRE(binding);
  EVP_EncodeBlock((uint8_t *)binding, (const uint8_t *)s->gs2, (int)strlen(s->gs2));
  int n = sprintf(final, "c=%s,r=%.*s", binding, (int)s->nonce_len, s->server_first + 2);
  free(binding);
  size_t auth_len = strlen(s->bare) + strlen(s->server_first) + (size_t)n + 2;
  char *auth = malloc(auth_len + 1);
  REQUIRE(auth);
  sprintf(auth, "%s,%s,%s", s->bare, s->server_first, final);
  uint8_t client_signature[SCRAM_KEY_BYTES], proof[SCRAM_KEY_BYTES];
  hmac(stored_key, auth, auth_len, client_signature);
  hmac(server_key, auth, auth_len, signature);
  free(auth);
  for (int i = 0; i < SCRAM_KEY_BYTES; i++) proof[i] = client_key[i] ^ client_signature[i];
  EVP_EncodeBlock((uint8_t *)proof_text, proof, SCRAM_KEY_BYTES);
  return (size_t)n + (size_t)sprintf(final + n, ",p=%s", proof_text);
}

/* Parameters: mode (1 byte: bit 0, answer with a right client-final; bit 1, then change one of
 * its bytes, at the next byte's position, by XOR with the one after), the length of the
 * SASLInitialResponse body (2 bytes); then that body, then the client-final to answer with
 * when the mode does not make one. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  keys_once();
  input_t in = {data, size};
  uint8_t mode = take_byte(&in);
  size_t initial_len = (size_t)take_byte(&in) << 8 | take_byte(&in);
  uint8_t where = take_byte(&in), change = take_byte(&in) | 1;
  if (initial_len > in.len) initial_len = in.len;
  const uint8_t *initial = in.data, *rest = in.data + initial_len;
  size_t rest_len = in.len - initial_len;

  scram_server_t s = {0};
  memcpy(s.stored_key, stored_key, SCRAM_KEY_BYTES);
  memcpy(s.server_key, server_key, SCRAM_KEY_BYTES);
  s.suffix = strdup(SUFFIX);
  REQUIRE(s.suffix);
  uint8_t nonce[SCRAM_SERVER_NONCE_BYTES] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  int failure = scram_initial(&s, initial, initial_len, nonce);
  REQUIRE(failure == 0 || failure == LOGIN_FAILURE_MECHANISM ||
          failure == LOGIN_FAILURE_CLIENT_FIRST || failure == LOGIN_FAILURE_NONCE);
  if (failure) {
    scram_free(&s);
    return 0;
  }
  size_t first_len = strlen(s.server_first);
  REQUIRE(memcmp(s.server_first, "r=", 2) == 0);
  REQUIRE(first_len == 2 + s.nonce_len + strlen(SUFFIX));
  REQUIRE(strcmp(s.server_first + 2 + s.nonce_len, SUFFIX) == 0);

  uint8_t key[SCRAM_KEY_BYTES], signature[SCRAM_KEY_BYTES], expected[SCRAM_KEY_BYTES];
  if (mode & 1) {
    char *final = malloc(first_len + 2 * strlen(s.gs2) + 128);
    REQUIRE(final);
    size_t n = right_final(&s, final, expected);
    int changed = (mode & 2) && n > 0;
    if (changed) final[where % n] ^= (char)change;
    failure = scram_final(&s, (const uint8_t *)final, n, key, signature);
    free(final);
    if (!changed) {
      REQUIRE(failure == 0);
      REQUIRE(memcmp(signature, expected, SCRAM_KEY_BYTES) == 0);
    }
  } else {
    failure = scram_final(&s, rest, rest_len, key, signature);
  }
  REQUIRE(failure == 0 || failure == LOGIN_FAILURE_WRONG_PROOF ||
          failure == LOGIN_FAILURE_CHANNEL_BINDING || failure == LOGIN_FAILURE_NONCE_MISMATCH ||
          failure == LOGIN_FAILURE_PROOF);
  if (failure == 0) REQUIRE(memcmp(key, client_key, SCRAM_KEY_BYTES) == 0);
  scram_free(&s);
  return 0;
}
