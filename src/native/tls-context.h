/*
 * TLS settings as OpenSSL contexts, made once per proxy from the config (src/server/native-tls.ts)
 * with the parameters Node's own TLS path uses: TLS 1.2 at least, no renegotiation; as a client,
 * the configured CA, and with verify-full the certificate chain and the host name or IP checked;
 * as a server, the configured certificate chain and key.
 *
 * JavaScript API: tlsContext({ server: boolean, verify: boolean, ca?: Buffer, cert?: Buffer,
 * key?: Buffer }) → a context for tlsStart (tls-channel.h).
 */
#ifndef PGFENCE_TLS_CONTEXT_H
#define PGFENCE_TLS_CONTEXT_H
#include <node_api.h>
#include <openssl/ssl.h>

napi_value js_tls_context(napi_env env, napi_callback_info info);

/* The context a JavaScript value wraps, or NULL. */
SSL_CTX *tls_context_of(napi_env env, napi_value value);

int tls_context_is_server(SSL_CTX *ctx);

/* SNI for a host name, and the name or IP the peer's certificate must match when the context
 * verifies. Returns -1 when out of memory. */
int tls_configure_peer_name(SSL *ssl, const char *host);

#endif
