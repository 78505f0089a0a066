/*
 * Reading and writing one relayed socket, plain or inside TLS, behind one interface: the relay
 * and the TLS channel's pump call these and never read(2) or SSL_read directly. A TLS stream
 * may hold bytes the socket will not announce again (decrypted but not yet taken, or bytes
 * handed over from a previous reader): stream_pending() says so, and they must be read before
 * the relay waits on the descriptor.
 */
#ifndef PGFENCE_STREAM_IO_H
#define PGFENCE_STREAM_IO_H
#include <openssl/ssl.h>
#include <sys/types.h>

#include "bytes.h"

typedef struct {
  int fd;
  SSL *ssl;      /* NULL: plain TCP */
  bytes_t early; /* bytes received before this reader took over: read first */
  size_t early_at;
  int filled;          /* the last TLS read stopped because the buffer was full */
  int read_wants_write; /* TLS: the last read waits for the socket to be writable */
  int write_wants_read; /* TLS: the last write waits for the socket to be readable */
} stream_io_t;

enum { STREAM_CLOSED = -1, STREAM_FAILED = -2 };

/* Reads what is at hand into buf: the byte count, 0 when nothing is (would block), or
 * STREAM_CLOSED (the peer closed; with TLS: close_notify, or EOF) or STREAM_FAILED (*detail
 * says why). */
ssize_t stream_read(stream_io_t *io, uint8_t *buf, size_t cap, const char **detail);

/* Writes what the socket takes now: the byte count (maybe 0), or STREAM_FAILED. */
ssize_t stream_write(stream_io_t *io, const uint8_t *p, size_t n, const char **detail);

/* Bytes are at hand without the descriptor becoming readable. */
int stream_pending(const stream_io_t *io);

/* Says goodbye at the TLS level (close_notify), if the stream is TLS; the socket stays open. */
void stream_close_notify(stream_io_t *io);

void stream_io_free(stream_io_t *io);

/* The failure (SSL_get_error's) is the peer's EOF without close_notify, which counts as a close,
 * as it does for Node; the error queue is then cleared. */
int tls_peer_left(int ssl_error);

/* The reason for the last TLS failure, as OpenSSL words it. */
const char *tls_error_text(void);

#endif
