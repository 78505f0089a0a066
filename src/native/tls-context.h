/*
 * The JavaScript side of tls-settings.h: tlsContext({ server: boolean, verify: boolean,
 * ca?: Buffer, cert?: Buffer, key?: Buffer }) → a context for tlsStart (tls-channel.h), made
 * once per proxy from the config (src/net/native-tls.ts). Without `ca`, a verifying client
 * trusts the system's CAs.
 */
#ifndef PGFENCE_TLS_CONTEXT_H
#define PGFENCE_TLS_CONTEXT_H
#include <node_api.h>
#include <openssl/ssl.h>

napi_value js_tls_context(napi_env env, napi_callback_info info);

/* The context a JavaScript value wraps, or NULL. */
SSL_CTX *tls_context_of(napi_env env, napi_value value);

#endif
