#define NAPI_VERSION 8
#include "tls-channel.h"

#include <errno.h>
#include <openssl/err.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "napi-string.h"
#include "tls-context.h"
#include "tls-settings.h"

#define PUMP_BYTES (64 * 1024)

static _Thread_local uint8_t pump_buffer[PUMP_BYTES];

enum state { HANDSHAKE, PUMPING, LENT, CLOSED };

/* Marks the JavaScript objects that wrap a channel, so that nothing else is taken for one. */
static const napi_type_tag CHANNEL_TAG = {0x7067666e63746c73ULL, 0x6368616e6e656c31ULL};

struct tls_channel {
  napi_env env;
  enum state state;
  stream_io_t tls; /* the TCP socket inside TLS; tls.fd is owned */
  int pair_fd;     /* C's end of the socketpair; -1 until the handshake is done */
  uv_poll_t tcp_poll, pair_poll;
  int tcp_events, pair_events;
  bytes_t to_peer, to_js; /* plaintext the other side has not taken yet */
  int peer_done, js_done; /* that side closed or failed: nothing more comes from it */
  napi_ref on_done;       /* the handshake's callback, until it is called */
  napi_async_context async;
  int open_handles, wrapper_alive;
};

static void channel_free_if_done(tls_channel_t *ch) {
  if (ch->open_handles > 0 || ch->wrapper_alive) return;
  SSL_free(ch->tls.ssl);
  stream_io_free(&ch->tls);
  bytes_free(&ch->to_peer);
  bytes_free(&ch->to_js);
  free(ch);
}

static void on_closed(uv_handle_t *handle) {
  tls_channel_t *ch = handle->data;
  close(handle == (uv_handle_t *)&ch->tcp_poll ? ch->tls.fd : ch->pair_fd);
  if (--ch->open_handles == 0 && ch->async) napi_async_destroy(ch->env, ch->async);
  channel_free_if_done(ch);
}

/* Calls onDone(error, pairFd, peerClosed) once, through MakeCallback so that promise reactions
 * run. */
static void report_handshake(tls_channel_t *ch, const char *error, int js_fd, int peer_closed) {
  if (!ch->on_done) return;
  napi_env env = ch->env;
  napi_handle_scope scope;
  napi_open_handle_scope(env, &scope);
  napi_value argv[3], fn, global, ignored;
  if (error) napi_create_string_utf8(env, error, NAPI_AUTO_LENGTH, &argv[0]);
  else napi_get_null(env, &argv[0]);
  napi_create_int32(env, js_fd, &argv[1]);
  napi_get_boolean(env, peer_closed, &argv[2]);
  napi_get_reference_value(env, ch->on_done, &fn);
  napi_delete_reference(env, ch->on_done);
  ch->on_done = NULL;
  napi_get_global(env, &global);
  if (napi_make_callback(env, ch->async, global, fn, 3, argv, &ignored) != napi_ok) {
    napi_value exception;
    napi_get_and_clear_last_exception(env, &exception);
  }
  napi_close_handle_scope(env, scope);
}

/* The handshake's error when the peer left: compared by address. */
static const char PEER_CLOSED[] = "the peer closed the connection";

static void channel_close(tls_channel_t *ch, const char *handshake_error) {
  if (ch->state == CLOSED) return;
  if (ch->state != HANDSHAKE && !ch->peer_done) stream_close_notify(&ch->tls);
  ch->state = CLOSED;
  const char *error = handshake_error ? handshake_error : "the connection was closed";
  report_handshake(ch, error, -1, error == PEER_CLOSED);
  uv_close((uv_handle_t *)&ch->tcp_poll, on_closed);
  if (ch->pair_fd >= 0) uv_close((uv_handle_t *)&ch->pair_poll, on_closed);
}

static void watch(uv_poll_t *poll, int *current, int events, uv_poll_cb cb) {
  if (events == *current) return;
  *current = events;
  if (events) uv_poll_start(poll, events, cb);
  else uv_poll_stop(poll);
}

/* ---- the pump: TLS <-> socketpair while JavaScript speaks plaintext ---- */

static void on_pump_poll(uv_poll_t *handle, int status, int events);

static int flush_to_js(tls_channel_t *ch) {
  size_t done = 0;
  while (done < ch->to_js.len) {
    ssize_t n = write(ch->pair_fd, ch->to_js.data + done, ch->to_js.len - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n < 0) return -1;
    done += (size_t)n;
  }
  memmove(ch->to_js.data, ch->to_js.data + done, ch->to_js.len - done);
  ch->to_js.len -= done;
  return 0;
}

static int flush_to_peer(tls_channel_t *ch) {
  const char *detail = NULL;
  ssize_t n = stream_write(&ch->tls, ch->to_peer.data, ch->to_peer.len, &detail);
  if (n < 0) return -1;
  memmove(ch->to_peer.data, ch->to_peer.data + n, ch->to_peer.len - (size_t)n);
  ch->to_peer.len -= (size_t)n;
  return 0;
}

/* Peer → JavaScript: decrypts what is at hand while JavaScript keeps up. */
static int pump_from_peer(tls_channel_t *ch) {
  while (!ch->peer_done && ch->to_js.len == 0) {
    const char *detail = NULL;
    ssize_t n = stream_read(&ch->tls, pump_buffer, PUMP_BYTES, &detail);
    if (n == 0) break;
    if (n < 0) ch->peer_done = 1;
    else if (bytes_append(&ch->to_js, pump_buffer, (size_t)n) < 0 || flush_to_js(ch) < 0)
      return -1;
    if (!stream_pending(&ch->tls) && n > 0 && ch->to_js.len == 0) break;
  }
  return 0;
}

/* JavaScript → peer. */
static int pump_from_js(tls_channel_t *ch) {
  while (!ch->js_done && ch->to_peer.len == 0) {
    ssize_t n = read(ch->pair_fd, pump_buffer, PUMP_BYTES);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n <= 0) {
      ch->js_done = 1;
      break;
    }
    if (bytes_append(&ch->to_peer, pump_buffer, (size_t)n) < 0 || flush_to_peer(ch) < 0) return -1;
  }
  return 0;
}

static void pump(tls_channel_t *ch) {
  if (ch->state != PUMPING) return;
  if ((ch->to_js.len && flush_to_js(ch) < 0) || (ch->to_peer.len && flush_to_peer(ch) < 0) ||
      pump_from_peer(ch) < 0 || pump_from_js(ch) < 0)
    return channel_close(ch, NULL);
  /* A side that is gone, once what it sent was delivered, ends the connection both ways. */
  if ((ch->peer_done && ch->to_js.len == 0) || (ch->js_done && ch->to_peer.len == 0))
    return channel_close(ch, NULL);
  int tcp = (!ch->peer_done && ch->to_js.len == 0 ? UV_READABLE : 0) |
            (ch->to_peer.len || ch->tls.read_wants_write ? UV_WRITABLE : 0) |
            (ch->tls.write_wants_read ? UV_READABLE : 0);
  int pair = (!ch->js_done && ch->to_peer.len == 0 ? UV_READABLE : 0) |
             (ch->to_js.len ? UV_WRITABLE : 0);
  watch(&ch->tcp_poll, &ch->tcp_events, tcp, on_pump_poll);
  watch(&ch->pair_poll, &ch->pair_events, pair, on_pump_poll);
}

static void on_pump_poll(uv_poll_t *handle, int status, int events) {
  tls_channel_t *ch = handle->data;
  if (status < 0) return channel_close(ch, NULL);
  pump(ch);
}

/* ---- the handshake ---- */

/* The socketpair JavaScript speaks plaintext on; returns JavaScript's end, or -1. */
static int open_pair(tls_channel_t *ch, uv_loop_t *loop) {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) < 0) return -1;
  if (uv_poll_init(loop, &ch->pair_poll, fds[0]) != 0) {
    close(fds[0]);
    close(fds[1]);
    return -1;
  }
  ch->pair_fd = fds[0];
  ch->pair_poll.data = ch;
  ch->open_handles++;
  return fds[1];
}

static const char *handshake_error(tls_channel_t *ch) {
  long verified = SSL_get_verify_result(ch->tls.ssl);
  if (verified != X509_V_OK) {
    ERR_clear_error();
    return X509_verify_cert_error_string(verified);
  }
  return tls_error_text();
}

static void on_handshake_poll(uv_poll_t *handle, int status, int events) {
  tls_channel_t *ch = handle->data;
  if (status < 0) return channel_close(ch, uv_strerror(status));
  errno = 0;
  int ret = SSL_do_handshake(ch->tls.ssl);
  if (ret <= 0) {
    int error = SSL_get_error(ch->tls.ssl, ret);
    if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) {
      int wanted = error == SSL_ERROR_WANT_READ ? UV_READABLE : UV_WRITABLE;
      return watch(&ch->tcp_poll, &ch->tcp_events, wanted, on_handshake_poll);
    }
    if (error == SSL_ERROR_SYSCALL && ERR_peek_error() == 0)
      return channel_close(ch, errno && errno != ECONNRESET ? strerror(errno) : PEER_CLOSED);
    if (tls_peer_left(error)) return channel_close(ch, PEER_CLOSED);
    return channel_close(ch, handshake_error(ch));
  }
  int js_fd = open_pair(ch, handle->loop);
  if (js_fd < 0) return channel_close(ch, strerror(errno));
  ch->state = PUMPING;
  ch->tcp_events = -1; /* not what pump() asks for: it starts the poll afresh */
  report_handshake(ch, NULL, js_fd, 0);
  pump(ch);
}

/* ---- lending the connection to the relay ---- */

/* Reads what is left at a non-blocking descriptor into `into`. */
static int drain_fd(int fd, bytes_t *into) {
  for (;;) {
    ssize_t n = read(fd, pump_buffer, PUMP_BYTES);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK ? -1 : 0;
    if (bytes_append(into, pump_buffer, (size_t)n) < 0) return -1;
  }
}

int tls_channel_lend(tls_channel_t *ch, int js_fd, stream_io_t *io, bytes_t *out) {
  int poll_fd = dup(ch->tls.fd);
  if (poll_fd < 0) return -1;
  bytes_t early = {0};
  if (drain_fd(js_fd, &early) < 0 || bytes_append(&early, ch->to_js.data, ch->to_js.len) < 0 ||
      drain_fd(ch->pair_fd, &ch->to_peer) < 0 ||
      bytes_append(out, ch->to_peer.data, ch->to_peer.len) < 0) {
    bytes_free(&early);
    close(poll_fd);
    return -1;
  }
  ch->to_js.len = ch->to_peer.len = 0;
  watch(&ch->tcp_poll, &ch->tcp_events, 0, on_pump_poll);
  watch(&ch->pair_poll, &ch->pair_events, 0, on_pump_poll);
  ch->state = LENT;
  io->fd = poll_fd;
  io->ssl = ch->tls.ssl;
  io->early = early;
  io->early_at = 0;
  return poll_fd;
}

void tls_channel_resume(tls_channel_t *ch) {
  if (ch->state != LENT) return;
  ch->state = PUMPING;
  ch->tcp_events = ch->pair_events = -1;
  pump(ch);
}

/* ---- JavaScript API ---- */

static tls_channel_t *unwrap_this(napi_env env, napi_callback_info info) {
  napi_value self;
  tls_channel_t *ch = NULL;
  napi_get_cb_info(env, info, NULL, NULL, &self, NULL);
  napi_unwrap(env, self, (void **)&ch);
  return ch;
}

/* peerCertificate() → the DER of the peer's certificate, or undefined. */
static napi_value js_peer_certificate(napi_env env, napi_callback_info info) {
  tls_channel_t *ch = unwrap_this(env, info);
  napi_value result;
  napi_get_undefined(env, &result);
  X509 *cert = ch && ch->tls.ssl ? SSL_get1_peer_certificate(ch->tls.ssl) : NULL;
  unsigned char *der = NULL;
  int len = cert ? i2d_X509(cert, &der) : -1;
  if (len > 0) {
    void *ignored;
    napi_create_buffer_copy(env, (size_t)len, der, &ignored, &result);
  }
  OPENSSL_free(der);
  X509_free(cert);
  return result;
}

/* close(): ends a handshake under way (its callback gets an error); a pumping channel closes
 * when JavaScript closes its end. */
static napi_value js_close(napi_env env, napi_callback_info info) {
  tls_channel_t *ch = unwrap_this(env, info);
  if (ch && ch->state == HANDSHAKE) channel_close(ch, "the connection was closed");
  return NULL;
}

static void channel_finalize(napi_env env, void *data, void *hint) {
  tls_channel_t *ch = data;
  ch->wrapper_alive = 0;
  channel_free_if_done(ch);
}

tls_channel_t *tls_channel_of(napi_env env, napi_value value) {
  tls_channel_t *ch = NULL;
  bool tagged = false;
  napi_valuetype type;
  if (napi_typeof(env, value, &type) != napi_ok || type != napi_object ||
      napi_check_object_type_tag(env, value, &CHANNEL_TAG, &tagged) != napi_ok || !tagged ||
      napi_unwrap(env, value, (void **)&ch) != napi_ok)
    return NULL;
  return ch && ch->state == PUMPING ? ch : NULL;
}

static napi_value throw_error(napi_env env, const char *message) {
  napi_throw_error(env, NULL, message);
  return NULL;
}

/* An SSL for the context, for `host`: SNI, and the name or IP to verify when the context
 * verifies. NULL when out of memory. */
static SSL *new_ssl(SSL_CTX *ctx, const char *host, int fd) {
  SSL *ssl = SSL_new(ctx);
  if (!ssl || SSL_set_fd(ssl, fd) != 1) return SSL_free(ssl), NULL;
  if (tls_context_is_server(ctx)) {
    SSL_set_accept_state(ssl);
    return ssl;
  }
  SSL_set_connect_state(ssl);
  if (host && *host && tls_configure_peer_name(ssl, host) < 0) return SSL_free(ssl), NULL;
  return ssl;
}

/* The JavaScript value of a channel, made once: { peerCertificate(), close() }, wrapping it. */
static napi_value wrap(napi_env env, tls_channel_t *ch) {
  napi_value wrapper, fn, name;
  napi_create_object(env, &wrapper);
  napi_create_function(env, "peerCertificate", NAPI_AUTO_LENGTH, js_peer_certificate, NULL, &fn);
  napi_set_named_property(env, wrapper, "peerCertificate", fn);
  napi_create_function(env, "close", NAPI_AUTO_LENGTH, js_close, NULL, &fn);
  napi_set_named_property(env, wrapper, "close", fn);
  napi_create_string_utf8(env, "pgfence.tls", NAPI_AUTO_LENGTH, &name);
  napi_async_init(env, wrapper, name, &ch->async);
  napi_wrap(env, wrapper, ch, channel_finalize, NULL, NULL);
  napi_type_tag_object(env, wrapper, &CHANNEL_TAG);
  ch->wrapper_alive = 1;
  return wrapper;
}

/* A channel on a duplicate of `fd`, watched, with no TLS connection yet; NULL when it cannot
 * be. */
static tls_channel_t *channel_on(napi_env env, uv_loop_t *loop, int fd) {
  tls_channel_t *ch = calloc(1, sizeof *ch);
  if (!ch) return NULL;
  ch->env = env;
  ch->pair_fd = -1;
  ch->tls.fd = dup(fd);
  if (ch->tls.fd < 0 || uv_poll_init(loop, &ch->tcp_poll, ch->tls.fd) != 0) {
    if (ch->tls.fd >= 0) close(ch->tls.fd);
    free(ch);
    return NULL;
  }
  ch->tcp_poll.data = ch;
  ch->open_handles = 1;
  return ch;
}

napi_value js_tls_start(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4];
  int32_t fd = -1;
  uv_loop_t *loop;
  SSL_CTX *ctx = NULL;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 4 ||
      !(ctx = tls_context_of(env, argv[0])) || napi_get_value_int32(env, argv[1], &fd) != napi_ok ||
      napi_get_uv_event_loop(env, &loop) != napi_ok)
    return throw_error(env, "pgfence tls: tlsStart(context, fd, host, onDone)");
  tls_channel_t *ch = channel_on(env, loop, fd);
  if (!ch) return throw_error(env, "pgfence tls: cannot take the socket over");
  char *host = latin1_string(env, argv[2]);
  ch->tls.ssl = new_ssl(ctx, host, ch->tls.fd);
  free(host);
  if (!ch->tls.ssl) {
    uv_close((uv_handle_t *)&ch->tcp_poll, on_closed);
    return throw_error(env, "pgfence tls: cannot start the handshake");
  }
  napi_value wrapper = wrap(env, ch);
  napi_create_reference(env, argv[3], 1, &ch->on_done);
  ch->state = HANDSHAKE;
  ch->tcp_events = UV_READABLE | UV_WRITABLE; /* the first step runs once the socket is ready */
  uv_poll_start(&ch->tcp_poll, ch->tcp_events, on_handshake_poll);
  return wrapper;
}

napi_value tls_channel_adopt(napi_env env, SSL *ssl, int fd, int *js_fd, tls_channel_t **lent) {
  uv_loop_t *loop;
  tls_channel_t *ch =
      napi_get_uv_event_loop(env, &loop) == napi_ok ? channel_on(env, loop, fd) : NULL;
  if (!ch) return NULL;
  *js_fd = open_pair(ch, loop);
  /* The connection reads and writes the channel's descriptor from now on. */
  if (*js_fd < 0 || SSL_set_fd(ssl, ch->tls.fd) != 1) {
    if (*js_fd >= 0) close(*js_fd);
    channel_close(ch, NULL);
    return NULL;
  }
  ch->tls.ssl = ssl;
  napi_value wrapper = wrap(env, ch);
  if (lent) {
    ch->state = LENT;
    *lent = ch;
    return wrapper;
  }
  ch->state = PUMPING;
  ch->tcp_events = -1;
  pump(ch);
  return wrapper;
}
