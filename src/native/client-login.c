/*
 * A client's login in C, up to its authentication: the StartupMessage, then the SCRAM-SHA-256
 * exchange (scram-server.h) against the verifier JavaScript chose for it, on the event loop,
 * without a JavaScript call per message. JavaScript is called to choose (with the startup
 * packet: a verifier, or nothing when the login is not one C takes), and when it is over. What
 * it chose for a user, or for an encryption request, is remembered (login-memory.h), and the
 * next such packet is answered alike without asking, while JavaScript lets C remember.
 * What to answer the client then (AuthenticationSASLFinal, AuthenticationOk and the greeting, or
 * an error) is JavaScript's to write: this file writes only AuthenticationSASL and
 * AuthenticationSASLContinue.
 *
 * JavaScript API (src/auth/native-login.ts):
 *   clientLogins(offer, choose, askedAlways) → logins: `offer`, the AuthenticationSASL message
 *     to send; choose(packet) → a Buffer: StoredKey, ServerKey, then ",s=<salt>,i=<iterations>"
 *     (check the client against it), or one byte to answer and read the next packet (an
 *     encryption request refused); or null: JavaScript takes the login. A verifier is
 *     remembered for the packet's user, when the packet is a plain login (startup-user.h) to a
 *     database other than `askedAlways`; a one-byte answer for the request's code.
 *   loginsRemember(logins, on): whether C may answer from what it remembers; off, it forgets
 *     all and asks JavaScript about every packet until turned on again
 *   loginsTls(logins, context): an SSLRequest answered 'S' starts TLS with `context` (tlsContext,
 *     tls-context.h): the handshake and the rest of the login run inside it, and JavaScript gets
 *     the connection as a TLS channel (tls-channel.h) when it takes the client over
 *   loginStart(logins, fd, done) → login; the descriptor stays the caller's (C reads a duplicate);
 *     with loginsTls, an SSLRequest read here falls back (only an accepted login takes TLS up)
 *     done(outcome, bytes, failure, detail): LOGIN_OUTCOME_* (login-codes.h), with its bytes in
 *     one Buffer:
 *       FALLBACK       every byte read, for JavaScript to go on from
 *       AUTHENTICATED  ClientKey, ServerKey, the answer (AuthenticationSASLFinal with
 *                      server-final, AuthenticationOk), the startup packet, then the bytes
 *                      after the client's last message
 *       REFUSED        the packet; failure: LOGIN_FAILURE_*; detail: the length or type it is
 *                      about (TLS_HANDSHAKE: OpenSSL's reason in place of the packet)
 *       CLOSED         none (undefined): the client left or its socket failed
 *   loginClose(login): stops a login under way; done is not called.
 *   loginRead(login, onBytes): an authenticated login no relay took reads the client for
 *     JavaScript: onBytes(chunk) for each read, onBytes(undefined) once at the client's end or a
 *     failed read; a return of false pauses reading until loginRead is called again
 */
#define NAPI_VERSION 8
#include <errno.h>
#include <fcntl.h>
#include <node_api.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "bytes.h"
#include "client-accept.h"
#include "client-login.h"
#include "login-codes.h"
#include "login-memory.h"
#include "napi-string.h"
#include "napi-tagged.h"
#include "protocol-codes.h"
#include "random-block.h"
#include "scram-server.h"
#include "startup-user.h"
#include "tls-channel.h"
#include "tls-context.h"

#define READ_BYTES (16 * 1024)
/* server-final: "v=", then the server's signature in base64 (padded). */
#define SERVER_FINAL_BYTES (2 + 4 * ((SCRAM_KEY_BYTES + 2) / 3))
#define SASL_FINAL_BYTES (HEADER_BYTES + 4 + SERVER_FINAL_BYTES)
#define ANSWER_BYTES (SASL_FINAL_BYTES + HEADER_BYTES + 4)
/* What an authenticated login reports first: ClientKey, ServerKey, the answer. */
#define AUTHENTICATED_HEAD (2 * SCRAM_KEY_BYTES + ANSWER_BYTES)
#define VERIFIER_BYTES (2 * SCRAM_KEY_BYTES)

static _Thread_local uint8_t read_buffer[READ_BYTES];

/* Mark the externals, so that no other value is taken for one. */
static const napi_type_tag SETUP_TAG = {0x7067666e6c6f6769ULL, 0x6e73657475703031ULL};
static const napi_type_tag LOGIN_TAG = {0x7067666e6c6f6769ULL, 0x6e6c6f67696e3031ULL};

struct setup {
  napi_env env;
  napi_ref choose;
  bytes_t offer;
  login_memory_t memory;
  int recall;         /* loginsRemember: answer from memory */
  int recall_held;    /* logins_hold_recall */
  char *asked_always; /* the database whose logins JavaScript always chooses for */
  napi_async_context async;
  const login_lender_t *lender; /* lending in C, when set (logins_lend_with) */
  void *lender_ctx;
  SSL_CTX *tls; /* the clients' TLS (loginsTls), or NULL */
  int logins;     /* logins that use this setup */
  int finalized;  /* the JavaScript value is gone */
};

/* HANDSHAKE: TLS, after an SSLRequest answered 'S'; HANDED: authenticated, the side kept for a
 * relay (client-login.h). */
enum phase { STARTUP, HANDSHAKE, INITIAL, FINAL, HANDED, OVER };

struct login {
  /* First, so that a relay's side finds its login. side.io.fd: a duplicate of the client's
   * descriptor, closed once the side is (side_close). */
  side_t side;
  setup_t *setup;
  napi_ref done;
  enum phase phase;
  bytes_t in, out, packet;
  scram_server_t scram;
  napi_ref reader; /* loginRead's onBytes, while JavaScript reads the client through the login */
  int handle_open, finalized;
  accepted_t entry; /* on a connection C accepted: told through entry.acceptor while under way */
  accepted_end_t lent_end; /* lent in C: how its lease is reported (login_report_lent) */
  uint64_t lent_at;        /* and when it was lent (uv_now) */
};

/* The setup outlives its JavaScript value while logins it started go on (they call `choose`). */
static void setup_free_if_done(setup_t *setup) {
  if (setup->logins > 0 || !setup->finalized) return;
  napi_delete_reference(setup->env, setup->choose);
  napi_async_destroy(setup->env, setup->async);
  bytes_free(&setup->offer);
  login_memory_clear(&setup->memory);
  SSL_CTX_free(setup->tls);
  free(setup->asked_always);
  free(setup);
}

static void login_free_if_done(login_t *login) {
  if (login->handle_open || !login->finalized) return;
  setup_t *setup = login->setup;
  bytes_free(&login->in);
  bytes_free(&login->out);
  bytes_free(&login->packet);
  scram_free(&login->scram);
  SSL_free(login->side.io.ssl);
  free(login);
  setup->logins--;
  setup_free_if_done(setup);
}

static void login_finalize(napi_env env, void *data, void *hint);

/* The login is done (authenticated or over): no more packets are read. */
static int done_reading(const login_t *login) { return login->phase >= HANDED; }

static void on_closed(uv_handle_t *handle) {
  login_t *login = handle->data;
  close(login->side.io.fd);
  login->handle_open = 0;
  login_free_if_done(login);
}

static void drop_reader(login_t *login) {
  if (!login->reader) return;
  napi_delete_reference(login->setup->env, login->reader);
  login->reader = NULL;
}

/* Ends the login: the descriptor's duplicate is let go before JavaScript reads the client. A
 * relay that took the side over closes it itself. */
static void stop(login_t *login) {
  drop_reader(login);
  if (login->phase == OVER || login->side.relay) return;
  login->phase = OVER;
  side_close(&login->side, on_closed);
}

static napi_value buffer_or_undefined(napi_env env, const uint8_t *p, size_t n, int present) {
  napi_value value;
  void *ignored;
  if (present) napi_create_buffer_copy(env, n, n ? p : (const uint8_t *)"", &ignored, &value);
  else napi_get_undefined(env, &value);
  return value;
}

/* Calls `fn` through MakeCallback (so that promise reactions run); an exception is cleared. */
static napi_value call(setup_t *setup, napi_value fn, size_t argc, napi_value *argv) {
  napi_value global, result = NULL;
  napi_get_global(setup->env, &global);
  if (napi_make_callback(setup->env, setup->async, global, fn, argc, argv, &result) != napi_ok) {
    napi_value exception;
    napi_get_and_clear_last_exception(setup->env, &exception);
    return NULL;
  }
  return result;
}

/* A report's bytes (see done above) in one Buffer: one allocation, where a Buffer each costs
 * Node an ArrayBuffer and its backing store each. Undefined when there are none to give. */
static napi_value report_bytes(napi_env env, const login_t *login, int outcome,
                               const uint8_t *keys) {
  size_t key_bytes = keys ? AUTHENTICATED_HEAD : 0;
  int authenticated = outcome == LOGIN_OUTCOME_AUTHENTICATED;
  size_t packet = authenticated || outcome == LOGIN_OUTCOME_REFUSED ? login->packet.len : 0;
  size_t rest = authenticated || outcome == LOGIN_OUTCOME_FALLBACK ? login->in.len : 0;
  napi_value value;
  uint8_t *data = NULL;
  if (outcome == LOGIN_OUTCOME_CLOSED ||
      napi_create_buffer(env, key_bytes + packet + rest, (void **)&data, &value) != napi_ok) {
    napi_get_undefined(env, &value);
    return value;
  }
  if (key_bytes) memcpy(data, keys, key_bytes);
  if (packet) memcpy(data + key_bytes, login->packet.data, packet);
  if (rest) memcpy(data + key_bytes + packet, login->in.data, rest);
  return value;
}

static void report_accepted(login_t *login, int outcome, const uint8_t *keys, int failure,
                            int detail);

static void report(login_t *login, int outcome, const uint8_t *keys, int failure, int detail) {
  if (done_reading(login)) return;
  if (outcome == LOGIN_OUTCOME_AUTHENTICATED) login->phase = HANDED;
  else stop(login);
  if (login->entry.acceptor) return report_accepted(login, outcome, keys, failure, detail);
  if (!login->done) return;
  napi_env env = login->setup->env;
  napi_handle_scope scope;
  napi_open_handle_scope(env, &scope);
  napi_value argv[4], fn;
  napi_create_int32(env, outcome, &argv[0]);
  argv[1] = report_bytes(env, login, outcome, keys);
  napi_create_int32(env, failure, &argv[2]);
  napi_create_int32(env, detail, &argv[3]);
  napi_get_reference_value(env, login->done, &fn);
  napi_delete_reference(env, login->done);
  login->done = NULL;
  call(login->setup, fn, 4, argv);
  napi_close_handle_scope(env, scope);
}

/* The JavaScript value of a login, made once (an accepted login gets one when it authenticates). */
static napi_value login_value(napi_env env, login_t *login) {
  napi_value external;
  napi_create_external(env, login, login_finalize, NULL, &external);
  napi_type_tag_object(env, external, &LOGIN_TAG);
  login->finalized = 0;
  return external;
}

/* A login inside TLS that JavaScript goes on with: its TLS connection goes to a channel, whose
 * plaintext end JavaScript speaks on (*plain_fd), and the login stops (the relay borrows the
 * channel's connection, not the login's watch). The channel's value, or NULL. */
static napi_value hand_tls_over(login_t *login, int *plain_fd) {
  napi_value channel = tls_channel_adopt(login->setup->env, login->side.io.ssl,
                                         login->side.io.fd, plain_fd, NULL);
  if (channel) login->side.io.ssl = NULL;
  stop(login);
  return channel;
}

/* An accepted login's end, told through its acceptor: with a duplicate of the client's
 * descriptor for JavaScript (the login's own closes with its handle, or stays with the watch),
 * and the login's value once it authenticated; inside TLS, with the channel and its plaintext
 * end instead of the login. A client that left is told only when the acceptor asks; one whose
 * descriptor cannot be duplicated (or whose TLS cannot be handed over) is closed. */
static void report_accepted(login_t *login, int outcome, const uint8_t *keys, int failure,
                            int detail) {
  accepted_end_t end = accepted_leave(&login->entry);
  int authenticated = outcome == LOGIN_OUTCOME_AUTHENTICATED;
  /* Inside TLS, JavaScript goes on with the client after these: it needs the connection. */
  int inside_tls = login->side.io.ssl && SSL_is_init_finished(login->side.io.ssl) &&
                   outcome != LOGIN_OUTCOME_CLOSED && outcome != LOGIN_OUTCOME_TIMED_OUT;
  int fd = -1, plain_fd = -1;
  if (outcome != LOGIN_OUTCOME_CLOSED || end.tell_closed)
    fd = fcntl(login->side.io.fd, F_DUPFD_CLOEXEC, 0);
  napi_env env = login->setup->env;
  napi_handle_scope scope;
  napi_open_handle_scope(env, &scope);
  napi_value channel = NULL;
  if (fd >= 0 && inside_tls && !(channel = hand_tls_over(login, &plain_fd))) {
    close(fd);
    fd = -1;
  }
  if (fd < 0) {
    napi_close_handle_scope(env, scope);
    if (authenticated) stop(login);
    return accepted_done(end.acceptor);
  }
  napi_value fn, argv[11];
  napi_create_int32(env, outcome, &argv[0]);
  argv[1] = report_bytes(env, login, outcome, keys);
  napi_create_int32(env, failure, &argv[2]);
  napi_create_int32(env, detail, &argv[3]);
  napi_create_int32(env, fd, &argv[4]);
  if (authenticated && !channel) argv[5] = login_value(env, login);
  else napi_get_undefined(env, &argv[5]);
  napi_create_double(env, end.remaining_ms, &argv[6]);
  napi_get_undefined(env, &argv[7]);
  napi_get_undefined(env, &argv[8]);
  if (channel) argv[9] = channel;
  else napi_get_undefined(env, &argv[9]);
  napi_create_int32(env, plain_fd, &argv[10]);
  napi_get_reference_value(env, end.callback, &fn);
  call(login->setup, fn, 11, argv);
  napi_close_handle_scope(env, scope);
  accepted_done(end.acceptor);
}

napi_value login_report_lent(side_t *side, napi_value relay, napi_value link, int fd) {
  login_t *login = (login_t *)side;
  napi_env env = login->setup->env;
  accepted_end_t *end = &login->lent_end;
  napi_value fn, argv[11] = {NULL};
  int plain_fd = -1;
  /* Inside TLS, JavaScript takes part through a channel, which the relay gives the connection to
   * when it stops. */
  if (side->io.ssl) {
    argv[9] = tls_channel_adopt(env, side->io.ssl, side->io.fd, &plain_fd, &side->channel);
    if (!argv[9]) {
      login_lent_over(side);
      return NULL;
    }
  } else {
    napi_get_undefined(env, &argv[9]);
  }
  napi_create_int32(env, plain_fd, &argv[10]);
  napi_create_int32(env, LOGIN_OUTCOME_LENT, &argv[0]);
  napi_get_undefined(env, &argv[1]);
  napi_create_int32(env, 0, &argv[2]);
  napi_create_int32(env, 0, &argv[3]);
  napi_create_int32(env, fd, &argv[4]);
  napi_get_undefined(env, &argv[5]);
  napi_create_double(env, (double)(uv_now(side->loop) - login->lent_at), &argv[6]);
  argv[7] = relay;
  argv[8] = link;
  napi_get_reference_value(env, end->callback, &fn);
  napi_value answer = call(login->setup, fn, 11, argv);
  login_lent_over(side);
  return answer;
}

void login_lent_over(side_t *side) {
  acceptor_t *acceptor = ((login_t *)side)->lent_end.acceptor;
  accepted_quiet(acceptor, -1);
  accepted_done(acceptor);
}

static void watch(login_t *login, int events) {
  if (!done_reading(login)) side_watch(&login->side, events);
}

/* Drops the first n bytes. */
static void consume(bytes_t *in, size_t n) {
  memmove(in->data, in->data + n, in->len - n);
  in->len -= n;
}

/* Watches for what the login waits on: the client's next bytes, and room for what is queued
 * (or, inside TLS, for a read that must write first). */
static void watch_client(login_t *login) {
  const stream_io_t *io = &login->side.io;
  watch(login, UV_READABLE | (login->out.len || io->read_wants_write ? UV_WRITABLE : 0));
}

/* Sends what is queued; -1 when the socket failed. */
static int flush(login_t *login) {
  const char *detail = NULL;
  ssize_t n = login->out.len
                  ? stream_write(&login->side.io, login->out.data, login->out.len, &detail)
                  : 0;
  if (n < 0) return -1;
  consume(&login->out, (size_t)n);
  watch_client(login);
  return 0;
}

enum choice { FALLBACK, CHECK, ANSWERED };

/* What a choice's bytes say (see choose below), taken into the login. */
static enum choice take_choice(login_t *login, const uint8_t *data, size_t n) {
  enum choice choice = n == 1 ? ANSWERED : n > VERIFIER_BYTES ? CHECK : FALLBACK;
  if (choice == ANSWERED && bytes_append(&login->out, data, 1) < 0) return FALLBACK;
  if (choice != CHECK) return choice;
  memcpy(login->scram.stored_key, data, SCRAM_KEY_BYTES);
  memcpy(login->scram.server_key, data + SCRAM_KEY_BYTES, SCRAM_KEY_BYTES);
  login->scram.suffix = malloc(n - VERIFIER_BYTES + 1);
  if (!login->scram.suffix) return FALLBACK;
  memcpy(login->scram.suffix, data + VERIFIER_BYTES, n - VERIFIER_BYTES);
  login->scram.suffix[n - VERIFIER_BYTES] = 0;
  return CHECK;
}

/* What a choice for a startup-phase packet is remembered by: an encryption request's code
 * (the packet's length is 8), or a plain login's user (startup-user.h); for anything else,
 * neither (no user, and a code login-memory.h keeps nothing for). */
typedef struct {
  uint32_t code;
  const uint8_t *user;
  size_t user_len;
} memory_key_t;

static memory_key_t memory_key(const setup_t *setup, const uint8_t *packet, size_t len) {
  memory_key_t key = {0, NULL, 0};
  if (len == MIN_STARTUP_PACKET) key.code = read_u32(packet + 4);
  else if (!startup_user(packet, len, setup->asked_always, &key.user, &key.user_len))
    key.user = NULL;
  return key;
}

/* What was chosen before for a packet with this key (see remember), or NULL. */
static const uint8_t *recalled(const setup_t *setup, memory_key_t key, size_t *n) {
  if (!setup->recall || setup->recall_held) return NULL;
  *n = 1;
  return key.user ? login_memory_find(&setup->memory, key.user, key.user_len, n)
                  : login_memory_answer(&setup->memory, key.code);
}

/* Keeps what JavaScript chose for a packet when the choice holds for every packet like it: an
 * encryption request's answer, a plain login's verifier (which depends on its user alone). */
static void remember(setup_t *setup, memory_key_t key, enum choice choice, const uint8_t *data,
                     size_t n) {
  if (!setup->recall) return;
  if (choice == ANSWERED && !key.user) login_memory_keep_answer(&setup->memory, key.code, data[0]);
  else if (choice == CHECK && key.user)
    login_memory_keep(&setup->memory, key.user, key.user_len, data, n);
}

/* Chooses for the startup packet at the head of `in`, from memory or by asking JavaScript: a
 * verifier to check the client against (CHECK), a one-byte answer to send before the next
 * packet (ANSWERED: an encryption request refused), or nothing (FALLBACK). */
static enum choice choose(login_t *login, size_t len) {
  setup_t *setup = login->setup;
  size_t n = 0;
  memory_key_t key = memory_key(setup, login->in.data, len);
  const uint8_t *known = recalled(setup, key, &n);
  if (known) return take_choice(login, known, n);
  napi_env env = setup->env;
  napi_handle_scope scope;
  napi_open_handle_scope(env, &scope);
  napi_value fn, argv[1], result;
  argv[0] = buffer_or_undefined(env, login->in.data, len, 1);
  napi_get_reference_value(env, setup->choose, &fn);
  result = call(setup, fn, 1, argv);
  void *data = NULL;
  bool is_buffer = false;
  enum choice choice = FALLBACK;
  if (result && napi_is_buffer(env, result, &is_buffer) == napi_ok && is_buffer &&
      napi_get_buffer_info(env, result, &data, &n) == napi_ok) {
    choice = take_choice(login, data, n);
    if (choice != FALLBACK) remember(setup, key, choice, data, n);
  }
  napi_close_handle_scope(env, scope);
  return choice;
}

static void read_client(login_t *login);

/* A step of the TLS handshake; once it is done, the startup packet is read inside TLS. A failed
 * handshake is refused with OpenSSL's reason in place of a packet, which JavaScript answers in
 * plaintext as it answers its own handshake's failure. */
static void handshake(login_t *login) {
  SSL *ssl = login->side.io.ssl;
  errno = 0;
  int ret = SSL_do_handshake(ssl);
  if (ret > 0) {
    login->phase = STARTUP;
    return read_client(login);
  }
  int error = SSL_get_error(ssl, ret);
  if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE)
    return watch(login, error == SSL_ERROR_WANT_READ ? UV_READABLE : UV_WRITABLE);
  /* The client left (its end, or a reset): no failure to tell of. */
  if ((error == SSL_ERROR_SYSCALL && ERR_peek_error() == 0) || tls_peer_left(error)) {
    ERR_clear_error();
    return report(login, LOGIN_OUTCOME_CLOSED, NULL, 0, 0);
  }
  const char *reason = tls_error_text();
  if (bytes_append(&login->packet, (const uint8_t *)reason, strlen(reason)) < 0)
    return report(login, LOGIN_OUTCOME_CLOSED, NULL, 0, 0);
  report(login, LOGIN_OUTCOME_REFUSED, NULL, LOGIN_FAILURE_TLS_HANDSHAKE, 0);
}

/* TLS after 'S', which went out whole: nothing was read after the request. */
static int start_tls(login_t *login) {
  SSL_CTX *ctx = login->setup->tls;
  SSL *ssl = ctx && login->out.len == 0 ? SSL_new(ctx) : NULL;
  if (!ssl || SSL_set_fd(ssl, login->side.io.fd) != 1) {
    SSL_free(ssl);
    return -1;
  }
  SSL_set_accept_state(ssl);
  login->side.io.ssl = ssl;
  login->phase = HANDSHAKE;
  handshake(login);
  return 0;
}

/* An encryption request that JavaScript answers: one inside TLS, or an SSLRequest when TLS is on
 * and the login cannot hand a TLS connection over (one JavaScript started: loginStart). */
static int request_for_javascript(const login_t *login, size_t len) {
  if (len != MIN_STARTUP_PACKET) return 0;
  return login->side.io.ssl || (login->setup->tls && !login->entry.acceptor &&
                                read_u32(login->in.data + 4) == SSL_REQUEST_CODE);
}

/* A whole startup-phase packet is at the head of `in` (with nothing after it: bytes sent before
 * an answer to an encryption request are JavaScript's to refuse): JavaScript chooses, then an
 * answer goes out (and TLS starts, after 'S'), or SCRAM starts. */
static void on_startup(login_t *login, size_t len) {
  enum choice choice = login->in.len == len && !request_for_javascript(login, len)
                           ? choose(login, len)
                           : FALLBACK;
  if (done_reading(login)) return; /* JavaScript closed the login while choosing */
  if (choice == FALLBACK) return report(login, LOGIN_OUTCOME_FALLBACK, NULL, 0, 0);
  if (choice == ANSWERED) {
    consume(&login->in, len);
    int tls = login->out.data[login->out.len - 1] == SSL_ACCEPTED;
    if (flush(login) < 0 || (tls && start_tls(login) < 0))
      report(login, LOGIN_OUTCOME_CLOSED, NULL, 0, 0);
    return;
  }
  if (bytes_append(&login->packet, login->in.data, len) < 0 ||
      bytes_append(&login->out, login->setup->offer.data, login->setup->offer.len) < 0)
    return report(login, LOGIN_OUTCOME_REFUSED, NULL, LOGIN_FAILURE_OUT_OF_MEMORY, 0);
  consume(&login->in, len);
  login->phase = INITIAL;
  if (flush(login) < 0) report(login, LOGIN_OUTCOME_CLOSED, NULL, 0, 0);
}

/* AuthenticationSASLContinue with server-first. */
static int send_continue(login_t *login) {
  size_t text = strlen(login->scram.server_first);
  uint8_t header[HEADER_BYTES + 4];
  header[0] = BACKEND_AUTHENTICATION;
  write_u32(header + 1, (uint32_t)(4 + 4 + text));
  write_u32(header + 5, AUTH_SASL_CONTINUE);
  if (bytes_append(&login->out, header, sizeof header) < 0 ||
      bytes_append(&login->out, (const uint8_t *)login->scram.server_first, text) < 0)
    return -1;
  return 0;
}

/* AuthenticationSASLFinal with server-final, then AuthenticationOk (ANSWER_BYTES): what the
 * client is answered ahead of its greeting. */
static void write_answer(uint8_t *out, const uint8_t signature[SCRAM_KEY_BYTES]) {
  char text[SERVER_FINAL_BYTES + 1]; /* EVP_EncodeBlock ends it with a NUL */
  memcpy(text, "v=", 2);
  EVP_EncodeBlock((unsigned char *)text + 2, signature, SCRAM_KEY_BYTES);
  out[0] = BACKEND_AUTHENTICATION;
  write_u32(out + 1, 4 + 4 + SERVER_FINAL_BYTES);
  write_u32(out + 5, AUTH_SASL_FINAL);
  memcpy(out + HEADER_BYTES + 4, text, SERVER_FINAL_BYTES);
  uint8_t *ok = out + SASL_FINAL_BYTES;
  ok[0] = BACKEND_AUTHENTICATION;
  write_u32(ok + 1, 8);
  write_u32(ok + 5, AUTH_OK);
}

/* One whole password message's body, in phase INITIAL or FINAL. */
static void on_password(login_t *login, const uint8_t *body, size_t n) {
  if (login->phase == INITIAL) {
    uint8_t nonce[SCRAM_SERVER_NONCE_BYTES];
    int failure = random_take(nonce, sizeof nonce) == 0
                      ? scram_initial(&login->scram, body, n, nonce)
                      : LOGIN_FAILURE_OUT_OF_MEMORY;
    if (!failure && send_continue(login) < 0) failure = LOGIN_FAILURE_OUT_OF_MEMORY;
    if (failure) return report(login, LOGIN_OUTCOME_REFUSED, NULL, failure, 0);
    login->phase = FINAL;
    if (flush(login) < 0) report(login, LOGIN_OUTCOME_CLOSED, NULL, 0, 0);
    return;
  }
  uint8_t head[AUTHENTICATED_HEAD], signature[SCRAM_KEY_BYTES];
  int failure = scram_final(&login->scram, body, n, head, signature);
  if (failure) return report(login, LOGIN_OUTCOME_REFUSED, NULL, failure, 0);
  memcpy(head + SCRAM_KEY_BYTES, login->scram.server_key, SCRAM_KEY_BYTES);
  write_answer(head + 2 * SCRAM_KEY_BYTES, signature);
  const login_lender_t *lender = login->setup->lender;
  int lent = lender && login->entry.acceptor && login->in.len == 0
                 ? lender->lend(login->setup->lender_ctx, &login->side, login->packet.data,
                                login->packet.len, head + 2 * SCRAM_KEY_BYTES, ANSWER_BYTES)
                 : LEND_NONE;
  if (lent == LEND_NONE) return report(login, LOGIN_OUTCOME_AUTHENTICATED, head, 0, 0);
  /* Lent: a relay holds the side, and the login counts as quiet until reported. Failed: the
   * answer went out, and the client is closed. */
  login->phase = HANDED;
  login->lent_at = uv_now(login->side.loop);
  login->lent_end = accepted_leave(&login->entry);
  if (lent == LEND_FAILED) {
    stop(login);
    return accepted_done(login->lent_end.acceptor);
  }
  accepted_quiet(login->lent_end.acceptor, 1);
}

/* Takes every whole packet at the head of `in`. */
static void advance(login_t *login) {
  while (!done_reading(login) && login->phase != HANDSHAKE) {
    if (login->phase == STARTUP) {
      if (login->in.len < 4) return;
      uint32_t len = read_u32(login->in.data);
      /* JavaScript answers a bad length as it always does. */
      if (len < MIN_STARTUP_PACKET || len > MAX_STARTUP_PACKET)
        return report(login, LOGIN_OUTCOME_FALLBACK, NULL, 0, 0);
      if (login->in.len < len) return;
      on_startup(login, len);
      continue;
    }
    if (login->in.len < HEADER_BYTES) return;
    uint32_t len = read_u32(login->in.data + 1);
    if (len < 4 || len > MAX_AUTH_MESSAGE - 1)
      return report(login, LOGIN_OUTCOME_REFUSED, NULL, LOGIN_FAILURE_MESSAGE_LENGTH, (int)len);
    if (login->in.len < (size_t)len + 1) return;
    uint8_t type = login->in.data[0];
    if (type != FRONTEND_PASSWORD)
      return report(login, LOGIN_OUTCOME_REFUSED, NULL, LOGIN_FAILURE_MESSAGE_TYPE, type);
    /* The body is copied out: a report hands `in` (what follows) to JavaScript. */
    size_t n = len - 4;
    uint8_t *body = malloc(n ? n : 1);
    if (!body) return report(login, LOGIN_OUTCOME_REFUSED, NULL, LOGIN_FAILURE_OUT_OF_MEMORY, 0);
    memcpy(body, login->in.data + HEADER_BYTES, n);
    consume(&login->in, len + 1);
    on_password(login, body, n);
    free(body);
  }
}

/* Gives one read to loginRead's callback (NULL: the client's end); whether to read on. */
static int pass(login_t *login, const uint8_t *p, size_t n) {
  napi_env env = login->setup->env;
  napi_handle_scope scope;
  napi_open_handle_scope(env, &scope);
  napi_value fn, chunk = buffer_or_undefined(env, p, n, p != NULL);
  napi_get_reference_value(env, login->reader, &fn);
  napi_value result = call(login->setup, fn, 1, &chunk);
  bool more = true;
  napi_valuetype type;
  if (result && napi_typeof(env, result, &type) == napi_ok && type == napi_boolean)
    napi_get_value_bool(env, result, &more);
  napi_close_handle_scope(env, scope);
  return more;
}

/* Reads the client for JavaScript until the socket is drained, the client ends or JavaScript
 * pauses; the callback may close the login or read through a socket of its own meanwhile. */
static void read_for_javascript(login_t *login, int status) {
  for (;;) {
    ssize_t n = status < 0 ? -1 : read(login->side.io.fd, read_buffer, sizeof read_buffer);
    if (n < 0 && status >= 0 && errno == EINTR) continue;
    if (n < 0 && status >= 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {
      side_watch(&login->side, 0);
      pass(login, NULL, 0);
      return drop_reader(login);
    }
    int more = pass(login, read_buffer, (size_t)n);
    if (login->phase != HANDED || !login->reader) return;
    if (!more) return side_watch(&login->side, 0);
    if ((size_t)n < sizeof read_buffer) return;
  }
}

static void on_poll(side_t *side, int status, int events) {
  login_t *login = (login_t *)side;
  /* Authenticated: what the client sends now is the session's, read by its relay, or by
   * JavaScript once it asks (loginRead). */
  if (login->phase == HANDED)
    return login->reader ? read_for_javascript(login, status) : side_watch(side, 0);
  if (status < 0) return report(login, LOGIN_OUTCOME_CLOSED, NULL, 0, 0);
  if (login->phase == HANDSHAKE) return handshake(login);
  if ((events & UV_WRITABLE) && flush(login) < 0)
    return report(login, LOGIN_OUTCOME_CLOSED, NULL, 0, 0);
  if ((events & UV_READABLE) || login->side.io.read_wants_write) read_client(login);
}

/* Reads what the client sent, plain or inside TLS, and takes the whole packets. */
static void read_client(login_t *login) {
  for (;;) {
    const char *detail = NULL;
    ssize_t n = stream_read(&login->side.io, read_buffer, sizeof read_buffer, &detail);
    if (n == 0) return watch_client(login);
    if (n < 0) return report(login, LOGIN_OUTCOME_CLOSED, NULL, 0, 0);
    if (bytes_append(&login->in, read_buffer, (size_t)n) < 0)
      return report(login, LOGIN_OUTCOME_REFUSED, NULL, LOGIN_FAILURE_OUT_OF_MEMORY, 0);
    advance(login);
    if (done_reading(login) || login->phase == HANDSHAKE) return;
    if ((size_t)n < sizeof read_buffer && !stream_pending(&login->side.io)) return;
  }
}

static void setup_finalize(napi_env env, void *data, void *hint) {
  setup_t *setup = data;
  setup->finalized = 1;
  setup_free_if_done(setup);
}

static void login_finalize(napi_env env, void *data, void *hint) {
  login_t *login = data;
  drop_reader(login);
  if (login->done) napi_delete_reference(env, login->done);
  login->done = NULL;
  login->finalized = 1;
  stop(login); /* authenticated, then dropped without a relay: its duplicate goes now */
  login_free_if_done(login);
}

static napi_value throw_error(napi_env env, const char *message) {
  napi_throw_error(env, NULL, message);
  return NULL;
}

napi_value js_client_logins(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3], external, name;
  void *offer = NULL;
  size_t offer_len = 0;
  napi_valuetype type;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 3 ||
      napi_get_buffer_info(env, argv[0], &offer, &offer_len) != napi_ok ||
      napi_typeof(env, argv[1], &type) != napi_ok || type != napi_function)
    return throw_error(env, "pgfence login: clientLogins(offer, choose, askedAlways)");
  setup_t *setup = calloc(1, sizeof *setup);
  if (!setup) return throw_error(env, "pgfence login: out of memory");
  if (bytes_append(&setup->offer, offer, offer_len) < 0 ||
      !(setup->asked_always = latin1_string(env, argv[2]))) {
    bytes_free(&setup->offer);
    free(setup);
    return throw_error(env, "pgfence login: clientLogins(offer, choose, askedAlways)");
  }
  login_memory_init(&setup->memory);
  setup->recall = 1;
  setup->env = env;
  napi_create_reference(env, argv[1], 1, &setup->choose);
  napi_create_external(env, setup, setup_finalize, NULL, &external);
  napi_type_tag_object(env, external, &SETUP_TAG);
  napi_create_string_utf8(env, "pgfence.login", NAPI_AUTO_LENGTH, &name);
  napi_async_init(env, external, name, &setup->async);
  return external;
}

napi_value js_logins_remember(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  setup_t *setup = NULL;
  bool on = false;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 2 ||
      !(setup = tagged(env, argv[0], &SETUP_TAG)) ||
      napi_get_value_bool(env, argv[1], &on) != napi_ok)
    return throw_error(env, "pgfence login: loginsRemember(logins, on)");
  if (!on) login_memory_clear(&setup->memory);
  setup->recall = on;
  return NULL;
}

/* A login on `fd`, which becomes its own, not watched yet; NULL when the descriptor cannot be
 * watched. Until it has a JavaScript value (login_value) it counts as finalized. */
static login_t *login_on(setup_t *setup, uv_loop_t *loop, int fd) {
  login_t *login = calloc(1, sizeof *login);
  if (!login) return NULL;
  login->side.io.fd = fd;
  if (side_open(&login->side, loop) != 0) {
    free(login);
    return NULL;
  }
  login->setup = setup;
  setup->logins++;
  login->side.on_poll = on_poll;
  login->handle_open = 1;
  login->finalized = 1;
  return login;
}

napi_value js_login_start(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  setup_t *setup = NULL;
  int32_t fd = -1;
  uv_loop_t *loop;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 3 ||
      !(setup = tagged(env, argv[0], &SETUP_TAG)) ||
      napi_get_value_int32(env, argv[1], &fd) != napi_ok ||
      napi_get_uv_event_loop(env, &loop) != napi_ok)
    return throw_error(env, "pgfence login: loginStart(logins, fd, done)");
  int own = dup(fd);
  login_t *login = own < 0 ? NULL : login_on(setup, loop, own);
  if (!login) {
    if (own >= 0) close(own);
    return throw_error(env, "pgfence login: cannot watch the socket");
  }
  napi_create_reference(env, argv[2], 1, &login->done);
  napi_value external = login_value(env, login);
  watch(login, UV_READABLE);
  return external;
}

accepted_t *login_accept(setup_t *setup, uv_loop_t *loop, int fd) {
  login_t *login = login_on(setup, loop, fd);
  if (!login) return NULL;
  login->entry.login = login;
  watch(login, UV_READABLE);
  return &login->entry;
}

void login_read_now(login_t *login) { on_poll(&login->side, 0, UV_READABLE); }

void login_time_out(login_t *login) { report(login, LOGIN_OUTCOME_TIMED_OUT, NULL, 0, 0); }

void login_abandon(login_t *login) {
  accepted_done(accepted_leave(&login->entry).acceptor);
  report(login, LOGIN_OUTCOME_CLOSED, NULL, 0, 0);
}

napi_value js_login_close(napi_env env, napi_callback_info info) {
  login_t *login = tagged_argument(env, info, &LOGIN_TAG);
  if (login) stop(login);
  return NULL;
}

napi_value js_login_read(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  login_t *login = NULL;
  napi_valuetype type;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 2 ||
      !(login = tagged(env, argv[0], &LOGIN_TAG)) ||
      napi_typeof(env, argv[1], &type) != napi_ok || type != napi_function)
    return throw_error(env, "pgfence login: loginRead(login, onBytes)");
  if (login->phase != HANDED || login->side.relay)
    return throw_error(env, "pgfence login: loginRead on a login that is not authenticated");
  drop_reader(login);
  napi_create_reference(env, argv[1], 1, &login->reader);
  side_watch(&login->side, UV_READABLE);
  return NULL;
}

napi_value js_logins_tls(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  setup_t *setup = NULL;
  SSL_CTX *ctx = NULL;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 2 ||
      !(setup = tagged(env, argv[0], &SETUP_TAG)) || !(ctx = tls_context_of(env, argv[1])))
    return throw_error(env, "pgfence login: loginsTls(logins, context)");
  /* The setup holds the context as long as it lives, whatever becomes of its JavaScript value. */
  SSL_CTX_up_ref(ctx);
  SSL_CTX_free(setup->tls);
  setup->tls = ctx;
  return NULL;
}

setup_t *logins_setup(napi_env env, napi_value value) { return tagged(env, value, &SETUP_TAG); }

void logins_hold_recall(setup_t *setup, int held) { setup->recall_held = held; }

void logins_lend_with(setup_t *setup, const login_lender_t *lender, void *ctx) {
  setup->lender = lender;
  setup->lender_ctx = ctx;
}

side_t *login_side_waiting(napi_env env, napi_value value) {
  login_t *login = tagged(env, value, &LOGIN_TAG);
  return login && login->phase == HANDED && !login->side.relay && !login->reader ? &login->side
                                                                                 : NULL;
}

void login_side_closed(side_t *side) {
  login_t *login = (login_t *)side;
  login->side.relay = NULL;
  login->phase = OVER;
  /* TLS: a channel took the connection over (login_report_lent), or the session ends here. */
  if (side->channel) side->io.ssl = NULL;
  else stream_close_notify(&side->io);
  close(side->io.fd);
  login->handle_open = 0;
  login_free_if_done(login);
}

void login_side_close(side_t *side) {
  login_t *login = (login_t *)side;
  login->side.relay = NULL;
  login->side.on_poll = on_poll;
  stop(login);
}
