/*
 * The server's side of a SCRAM-SHA-256 exchange (RFC 5802, RFC 7677) as the client login runs it
 * in C (client-login.c): pure functions on whole message bodies, no sockets, so that they can be
 * fuzzed alone. They check what src/auth/scram.ts's ScramServerExchange checks, in the same
 * order, and fail with the same reasons (LOGIN_FAILURE_*, login-codes.h), whose words are
 * JavaScript's.
 */
#ifndef PGFENCE_SCRAM_SERVER_H
#define PGFENCE_SCRAM_SERVER_H
#include <stddef.h>
#include <stdint.h>

#define SCRAM_KEY_BYTES 32
/* The server's part of the nonce, before base64 (24 characters after). */
#define SCRAM_SERVER_NONCE_BYTES 18

typedef struct {
  uint8_t stored_key[SCRAM_KEY_BYTES], server_key[SCRAM_KEY_BYTES];
  char *suffix; /* ",s=<salt>,i=<iterations>": the verifier's part of server-first, owned */
  char *gs2;    /* the client's GS2 header ("n,," or "y,,", with an authzid) */
  char *bare;   /* client-first-message-bare */
  char *server_first;
  size_t nonce_len; /* the nonce is server_first + 2, this long */
} scram_server_t;

/* A SASLInitialResponse's body (after its type and length): the mechanism, then client-first.
 * Makes server-first from `server_nonce`. Returns 0, or a LOGIN_FAILURE_* reason. */
int scram_initial(scram_server_t *s, const uint8_t *body, size_t n,
                  const uint8_t server_nonce[SCRAM_SERVER_NONCE_BYTES]);

/* A SASLResponse's body: client-final. On a right proof returns 0 with the client's ClientKey
 * (what a pooler logs in to PostgreSQL with) and the server's signature (server-final's v=);
 * else a LOGIN_FAILURE_* reason (LOGIN_FAILURE_WRONG_PROOF for a wrong proof). */
int scram_final(scram_server_t *s, const uint8_t *body, size_t n,
                uint8_t client_key[SCRAM_KEY_BYTES], uint8_t server_signature[SCRAM_KEY_BYTES]);

/* Frees what the exchange made (not `suffix`'s owner's business: it is freed too). */
void scram_free(scram_server_t *s);

#endif
