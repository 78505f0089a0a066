/*
 * A TLS connection owned by C from its handshake on (src/net/native-tls.ts drives it):
 * JavaScript hands over a TCP descriptor after the plaintext SSLRequest/'S' exchange, C runs
 * the handshake on the event loop and then pumps TLS <-> plaintext through a socketpair, whose
 * other end JavaScript reads and writes as an ordinary socket. A client's login in C runs its
 * handshake itself and hands the connection over (tls_channel_adopt) when JavaScript takes the
 * client. When a session
 * moves to the native relay, the relay borrows the TLS connection itself (SSL_read/SSL_write
 * on the TCP socket) and the pump rests until the relay gives it back.
 *
 * JavaScript API:
 *   tlsContext({ server, ca?, cert?, key?, verify }) → a context (an SSL_CTX)
 *   tlsStart(context, fd, host, onDone(error, pairFd, peerClosed)) → a channel:
 *     { peerCertificate(), close() }. host: the name for SNI and, with verify, the name or IP the
 *     certificate must match. peerClosed: the handshake failed because the peer left.
 */
#ifndef PGFENCE_TLS_CHANNEL_H
#define PGFENCE_TLS_CHANNEL_H
#include <node_api.h>

#include "stream-io.h"

typedef struct tls_channel tls_channel_t;

napi_value js_tls_start(napi_env env, napi_callback_info info);

/* A channel for a TLS connection whose handshake ran in a login in C (client-login.c): it takes
 * `ssl` over, on a duplicate of `fd`, and pumps at once, or, given `lent`, is lent already to
 * the relay that reads `ssl` now (*lent: the channel, for the relay to give back with
 * tls_channel_resume). *js_fd gets JavaScript's plaintext end. Returns the channel's JavaScript
 * value, or NULL (`ssl` still the caller's). */
napi_value tls_channel_adopt(napi_env env, SSL *ssl, int fd, int *js_fd, tls_channel_t **lent);

/* The channel a JavaScript value wraps, if it is one that finished its handshake and is not
 * lent already; else NULL. */
tls_channel_t *tls_channel_of(napi_env env, napi_value value);

/* The relay borrows the TLS connection: the pump stops; `io` reads and writes it, starting with
 * the bytes for JavaScript the pump had not delivered (those still unread at `js_fd` included);
 * `out` gets the bytes JavaScript sent that the pump had not encrypted yet. Returns a duplicate
 * of the TCP descriptor for the relay to watch, or -1. */
int tls_channel_lend(tls_channel_t *ch, int js_fd, stream_io_t *io, bytes_t *out);

/* The relay stopped: the pump takes the connection back. */
void tls_channel_resume(tls_channel_t *ch);

#endif
