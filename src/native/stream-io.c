#include "stream-io.h"

#include <errno.h>
#include <openssl/err.h>
#include <string.h>
#include <unistd.h>

const char *tls_error_text(void) {
  unsigned long code = ERR_get_error();
  ERR_clear_error();
  const char *reason = code ? ERR_reason_error_string(code) : NULL;
  return reason ? reason : "TLS error";
}

static size_t take_early(stream_io_t *io, uint8_t *buf, size_t cap) {
  size_t n = io->early.len - io->early_at;
  if (n > cap) n = cap;
  memcpy(buf, io->early.data + io->early_at, n);
  io->early_at += n;
  if (io->early_at == io->early.len) {
    bytes_free(&io->early);
    io->early_at = 0;
  }
  return n;
}

static ssize_t plain_read(stream_io_t *io, uint8_t *buf, size_t cap, const char **detail) {
  ssize_t n;
  do n = read(io->fd, buf, cap);
  while (n < 0 && errno == EINTR);
  if (n > 0) return n;
  if (n == 0) return STREAM_CLOSED;
  if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
  *detail = strerror(errno);
  return STREAM_FAILED;
}

int tls_peer_left(int ssl_error) {
  if (ssl_error == SSL_ERROR_SSL &&
      ERR_GET_REASON(ERR_peek_error()) == SSL_R_UNEXPECTED_EOF_WHILE_READING) {
    ERR_clear_error();
    return 1;
  }
  return 0;
}

/* What an SSL call's failure means for the stream: 0 (would block) or a STREAM_ status. */
static ssize_t tls_status(stream_io_t *io, int ret, int writing, const char **detail) {
  int error = SSL_get_error(io->ssl, ret);
  if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) {
    int other = error == (writing ? SSL_ERROR_WANT_READ : SSL_ERROR_WANT_WRITE);
    if (writing) io->write_wants_read = other;
    else io->read_wants_write = other;
    return 0;
  }
  if (error == SSL_ERROR_ZERO_RETURN || tls_peer_left(error)) return STREAM_CLOSED;
  if (error == SSL_ERROR_SYSCALL && ERR_peek_error() == 0) {
    ERR_clear_error();
    if (errno == 0 || errno == ECONNRESET || errno == EPIPE) return STREAM_CLOSED;
    *detail = strerror(errno);
    return STREAM_FAILED;
  }
  *detail = tls_error_text();
  return STREAM_FAILED;
}

/* Takes the records at hand until the buffer is full. */
static ssize_t tls_read(stream_io_t *io, uint8_t *buf, size_t cap, const char **detail) {
  size_t total = 0;
  io->read_wants_write = 0;
  io->filled = 0;
  while (total < cap) {
    size_t n = 0;
    errno = 0;
    int ret = SSL_read_ex(io->ssl, buf + total, cap - total, &n);
    if (ret > 0) {
      total += n;
      /* Nothing buffered: the socket announces what comes next, without a read that fails. */
      if (!SSL_has_pending(io->ssl)) return (ssize_t)total;
      continue;
    }
    ssize_t status = tls_status(io, ret, 0, detail);
    /* What was read goes out first; a close or failure shows again at the next read. */
    if (total > 0) return (ssize_t)total;
    return status;
  }
  io->filled = 1;
  return (ssize_t)total;
}

ssize_t stream_read(stream_io_t *io, uint8_t *buf, size_t cap, const char **detail) {
  if (io->early.len > io->early_at) return (ssize_t)take_early(io, buf, cap);
  return io->ssl ? tls_read(io, buf, cap, detail) : plain_read(io, buf, cap, detail);
}

ssize_t stream_write(stream_io_t *io, const uint8_t *p, size_t n, const char **detail) {
  size_t done = 0;
  if (io->ssl) io->write_wants_read = 0;
  while (done < n) {
    if (io->ssl) {
      size_t written = 0;
      errno = 0;
      int ret = SSL_write_ex(io->ssl, p + done, n - done, &written);
      if (ret <= 0) {
        ssize_t status = tls_status(io, ret, 1, detail);
        return status < 0 ? status : (ssize_t)done;
      }
      done += written;
      continue;
    }
    ssize_t written = write(io->fd, p + done, n - done);
    if (written >= 0) {
      done += (size_t)written;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      break;
    } else if (errno != EINTR) {
      *detail = strerror(errno);
      return STREAM_FAILED;
    }
  }
  return (ssize_t)done;
}

int stream_pending(const stream_io_t *io) {
  if (io->early.len > io->early_at) return 1;
  return io->ssl && io->filled && SSL_has_pending(io->ssl);
}

void stream_close_notify(stream_io_t *io) {
  if (!io->ssl) return;
  /* One attempt: a peer gone or a full socket does not hold the close up. */
  if (SSL_shutdown(io->ssl) < 0) ERR_clear_error();
}

void stream_io_free(stream_io_t *io) {
  bytes_free(&io->early);
  io->early_at = 0;
}
