/* SHA256_Init and its kin: deprecated by OpenSSL 3 for EVP, which costs more here (hmac). */
#define OPENSSL_SUPPRESS_DEPRECATED
#include "scram-server.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <stdlib.h>
#include <string.h>

#include "login-codes.h"

static const char MECHANISM[] = "SCRAM-SHA-256";

/* A NUL-terminated copy of p[0..n), or NULL when memory ran out. */
static char *copy_text(const uint8_t *p, size_t n) {
  char *text = malloc(n + 1);
  if (!text) return NULL;
  memcpy(text, p, n);
  text[n] = 0;
  return text;
}

/* JavaScript's `.` matches no line terminator: \n, \r, U+2028 and U+2029 (E2 80 A8/A9). */
static int has_line_terminator(const uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (p[i] == '\n' || p[i] == '\r') return 1;
    if (p[i] == 0xe2 && i + 2 < n && p[i + 1] == 0x80 && (p[i + 2] == 0xa8 || p[i + 2] == 0xa9))
      return 1;
  }
  return 0;
}

/* The value of the last `name=` attribute of a comma-separated SCRAM message, as JavaScript's
 * attributes() keeps the last of repeated names; NULL when there is none. */
static const uint8_t *attribute(const uint8_t *p, size_t n, char name, size_t *len) {
  const uint8_t *found = NULL;
  size_t start = 0;
  while (start <= n) {
    const uint8_t *comma = memchr(p + start, ',', n - start);
    size_t end = comma ? (size_t)(comma - p) : n;
    if (end - start >= 2 && p[start] == name && p[start + 1] == '=') {
      found = p + start + 2;
      *len = end - start - 2;
    }
    start = end + 1;
  }
  return found;
}

static size_t base64_length(size_t n) { return 4 * ((n + 2) / 3); }

int scram_initial(scram_server_t *s, const uint8_t *body, size_t n,
                  const uint8_t server_nonce[SCRAM_SERVER_NONCE_BYTES]) {
  const uint8_t *nul = memchr(body, 0, n);
  if (!nul || (size_t)(nul - body) != sizeof MECHANISM - 1 || memcmp(body, MECHANISM, nul - body))
    return LOGIN_FAILURE_MECHANISM;
  /* The int32 length of client-first is skipped, as JavaScript does: the rest is client-first. */
  size_t at = (size_t)(nul - body) + 1 + 4;
  const uint8_t *first = body + (at < n ? at : n);
  size_t len = at < n ? n - at : 0;
  /* ^([ny]),(a=[^,]*)?,(.*)$ */
  if (len < 3 || (first[0] != 'n' && first[0] != 'y') || first[1] != ',')
    return LOGIN_FAILURE_CLIENT_FIRST;
  size_t gs2_len;
  if (first[2] == ',') {
    gs2_len = 3;
  } else {
    if (first[2] != 'a' || len < 4 || first[3] != '=') return LOGIN_FAILURE_CLIENT_FIRST;
    const uint8_t *comma = memchr(first + 4, ',', len - 4);
    if (!comma) return LOGIN_FAILURE_CLIENT_FIRST;
    gs2_len = (size_t)(comma - first) + 1;
  }
  const uint8_t *bare = first + gs2_len;
  size_t bare_len = len - gs2_len, nonce_len = 0;
  if (has_line_terminator(bare, bare_len)) return LOGIN_FAILURE_CLIENT_FIRST;
  const uint8_t *nonce = attribute(bare, bare_len, 'r', &nonce_len);
  if (!nonce || nonce_len == 0) return LOGIN_FAILURE_NONCE;
  for (size_t i = 0; i < nonce_len; i++)
    if (nonce[i] < 0x21 || nonce[i] > 0x7e) return LOGIN_FAILURE_NONCE;
  size_t suffix_len = strlen(s->suffix);
  size_t server_nonce_len = base64_length(SCRAM_SERVER_NONCE_BYTES);
  s->gs2 = copy_text(first, gs2_len);
  s->bare = copy_text(bare, bare_len);
  s->server_first = malloc(2 + nonce_len + server_nonce_len + suffix_len + 1);
  if (!s->gs2 || !s->bare || !s->server_first) return LOGIN_FAILURE_OUT_OF_MEMORY;
  char *out = s->server_first;
  memcpy(out, "r=", 2);
  memcpy(out + 2, nonce, nonce_len);
  EVP_EncodeBlock((unsigned char *)out + 2 + nonce_len, server_nonce, SCRAM_SERVER_NONCE_BYTES);
  memcpy(out + 2 + nonce_len + server_nonce_len, s->suffix, suffix_len + 1);
  s->nonce_len = nonce_len + server_nonce_len;
  return 0;
}

/* base64 of 32 bytes, padded (44 characters) or not (43), decoded; -1 when it is not that. */
static int decode_key(const uint8_t *p, size_t n, uint8_t key[SCRAM_KEY_BYTES]) {
  char text[45];
  if (n == 43) {
    memcpy(text, p, 43);
    text[43] = '=';
  } else if (n == 44 && p[43] == '=') {
    memcpy(text, p, 44);
  } else {
    return -1;
  }
  text[44] = 0;
  uint8_t decoded[33];
  if (EVP_DecodeBlock(decoded, (const unsigned char *)text, 44) != 33) return -1;
  memcpy(key, decoded, SCRAM_KEY_BYTES);
  return 0;
}

/* HMAC-SHA-256 (RFC 2104) on OpenSSL's SHA-256 functions, whose state lives on the stack:
 * keying an EVP_MAC context makes and frees three digest contexts through the provider layer,
 * which cost a login several times the hashing. */
static void hmac(const uint8_t key[SCRAM_KEY_BYTES], const uint8_t *text, size_t n,
                 uint8_t out[SCRAM_KEY_BYTES]) {
  uint8_t pad[SHA256_CBLOCK];
  SHA256_CTX ctx;
  memset(pad, 0x36, sizeof pad);
  for (int i = 0; i < SCRAM_KEY_BYTES; i++) pad[i] ^= key[i];
  SHA256_Init(&ctx);
  SHA256_Update(&ctx, pad, sizeof pad);
  SHA256_Update(&ctx, text, n);
  SHA256_Final(out, &ctx);
  for (size_t i = 0; i < sizeof pad; i++) pad[i] ^= 0x36 ^ 0x5c;
  SHA256_Init(&ctx);
  SHA256_Update(&ctx, pad, sizeof pad);
  SHA256_Update(&ctx, out, SCRAM_KEY_BYTES);
  SHA256_Final(out, &ctx);
  OPENSSL_cleanse(pad, sizeof pad);
  OPENSSL_cleanse(&ctx, sizeof ctx);
}

static void sha256_of(const uint8_t *p, size_t n, uint8_t out[SHA256_DIGEST_LENGTH]) {
  SHA256_CTX ctx;
  SHA256_Init(&ctx);
  SHA256_Update(&ctx, p, n);
  SHA256_Final(out, &ctx);
}

int scram_final(scram_server_t *s, const uint8_t *body, size_t n,
                uint8_t client_key[SCRAM_KEY_BYTES], uint8_t server_signature[SCRAM_KEY_BYTES]) {
  /* withoutProof: the message less a last attribute p= (/,p=[^,]*$/). */
  size_t without_proof = n;
  for (size_t i = n; i-- > 0;) {
    if (body[i] != ',') continue;
    if (i + 2 < n && body[i + 1] == 'p' && body[i + 2] == '=') without_proof = i;
    break;
  }
  size_t len = 0, gs2_len = strlen(s->gs2);
  const uint8_t *binding = attribute(body, n, 'c', &len);
  char *expected = malloc(base64_length(gs2_len) + 1);
  if (!expected) return LOGIN_FAILURE_OUT_OF_MEMORY;
  int expected_len = EVP_EncodeBlock((unsigned char *)expected, (const unsigned char *)s->gs2,
                                     (int)gs2_len);
  int bound = binding && len == (size_t)expected_len && !memcmp(binding, expected, len);
  free(expected);
  if (!bound) return LOGIN_FAILURE_CHANNEL_BINDING;
  const uint8_t *nonce = attribute(body, n, 'r', &len);
  if (!nonce || len != s->nonce_len || memcmp(nonce, s->server_first + 2, len))
    return LOGIN_FAILURE_NONCE_MISMATCH;
  const uint8_t *proof_text = attribute(body, n, 'p', &len);
  uint8_t proof[SCRAM_KEY_BYTES];
  if (!proof_text || decode_key(proof_text, len, proof)) return LOGIN_FAILURE_PROOF;
  /* AuthMessage = client-first-bare "," server-first "," client-final-without-proof */
  size_t bare_len = strlen(s->bare), first_len = strlen(s->server_first);
  size_t auth_len = bare_len + 1 + first_len + 1 + without_proof;
  uint8_t *auth = malloc(auth_len);
  if (!auth) return LOGIN_FAILURE_OUT_OF_MEMORY;
  memcpy(auth, s->bare, bare_len);
  auth[bare_len] = ',';
  memcpy(auth + bare_len + 1, s->server_first, first_len);
  auth[bare_len + 1 + first_len] = ',';
  memcpy(auth + bare_len + 2 + first_len, body, without_proof);
  uint8_t signature[SCRAM_KEY_BYTES], stored[SHA256_DIGEST_LENGTH];
  hmac(s->stored_key, auth, auth_len, signature);
  hmac(s->server_key, auth, auth_len, server_signature);
  free(auth);
  for (int i = 0; i < SCRAM_KEY_BYTES; i++) client_key[i] = proof[i] ^ signature[i];
  sha256_of(client_key, SCRAM_KEY_BYTES, stored);
  return CRYPTO_memcmp(stored, s->stored_key, SCRAM_KEY_BYTES) ? LOGIN_FAILURE_WRONG_PROOF : 0;
}

void scram_free(scram_server_t *s) {
  free(s->suffix);
  free(s->gs2);
  free(s->bare);
  free(s->server_first);
  memset(s, 0, sizeof *s);
}
