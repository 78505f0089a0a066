/*
 * The TLS settings of pgfence's connections as OpenSSL contexts, with the parameters Node's own
 * TLS path uses: TLS 1.2 at least, no renegotiation (refused, as Node refuses a client's); as
 * a client the configured CAs, and with verification the certificate chain and the host name or
 * IP checked; as a server the configured certificate chain and key. No Node API here: the fuzz
 * targets make their contexts with it too.
 */
#ifndef PGFENCE_TLS_SETTINGS_H
#define PGFENCE_TLS_SETTINGS_H
#include <openssl/ssl.h>
#include <stddef.h>

/* A context for one leg; NULL when out of memory. */
SSL_CTX *tls_new_context(int server, int verify);

int tls_context_is_server(SSL_CTX *ctx);

/* Trusts every certificate of a PEM bundle. Returns -1 when it holds none or is not PEM. */
int tls_trust_pem(SSL_CTX *ctx, const void *pem, size_t len);

/* Presents the PEM certificate (then its chain) with the PEM key. Returns -1 when they cannot be
 * used (unreadable, or not a pair). */
int tls_use_identity_pem(SSL_CTX *ctx, const void *cert, size_t cert_len, const void *key,
                         size_t key_len);

/* SNI for a host name, and the name or IP the peer's certificate must match when the context
 * verifies. Returns -1 when out of memory. */
int tls_configure_peer_name(SSL *ssl, const char *host);

#endif
