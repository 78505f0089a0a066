/*
 * Accepting clients in C: the listening sockets, duplicates of those Node bound, are watched by
 * the addon, and each connection accepted goes straight into a login in C (client-login.h),
 * inside TLS when the client asks for it and pgfence has it (loginsTls).
 * JavaScript hears of a connection only when its login ends: authenticated, fallen back, refused
 * or out of time, with the connection's descriptor. A client that leaves during its login (a
 * health check, a port probe) costs no JavaScript at all, unless JavaScript asks to be told.
 * A listener wakes only once a client has sent its first bytes (TCP_DEFER_ACCEPT, as PgBouncer
 * sets it): the kernel holds a connection that says nothing for up to the startup timeout, and
 * an accepted connection is read at once, in the same turn of the loop.
 * The startup timeout of the logins under way is kept here, and so is their number: C answers
 * no login from memory while more connections are open than JavaScript says there is room for,
 * so that JavaScript refuses it (53300, or 57P03 while it shuts down).
 *
 * JavaScript API (src/client/native-accept.ts):
 *   acceptClients(logins, onLogin) → acceptor; onLogin(outcome, bytes, failure, detail, fd, login,
 *     remainingMs): a login's end as loginStart's done reports it (client-login.c), with the
 *     client's descriptor (JavaScript's to close), the login's value when it authenticated (its
 *     watch, for a relay), and what is left of the startup timeout
 *   acceptorListen(acceptor, fd) → the descriptor watched: a duplicate of a bound TCP socket
 *   acceptorSettings(acceptor, timeoutMs, tellClosed): for connections accepted from now on
 *   acceptorRoom(acceptor, room): how many logins under way are allowed before JavaScript chooses
 *   acceptorPending(acceptor) → the logins under way, those lent in C unreported counted
 *   acceptorStop(acceptor): accepts no more (the logins under way go on)
 *   acceptorCloseLogins(acceptor): closes every login under way, with nothing told
 *   peerName(fd, out): out.address and out.port of a TCP descriptor's peer, as Node's getpeername
 */
#define _GNU_SOURCE /* accept4 */
#define NAPI_VERSION 8
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <node_api.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "client-accept.h"
#include "client-login.h"
#include "napi-tagged.h"

#define MAX_LISTENERS 4
/* Accepted per wake-up, so that a flood of connections does not starve the sessions. */
#define ACCEPTS_PER_WAKE 32
/* After running out of descriptors, accepting resumes this much later (ms). */
#define PAUSE_AFTER_EMFILE 100

static const napi_type_tag ACCEPTOR_TAG = {0x7067666e61636365ULL, 0x70746f7230303031ULL};

typedef struct {
  uv_poll_t poll;
  int fd;
  acceptor_t *acceptor;
} listener_t;

struct acceptor {
  napi_env env;
  uv_loop_t *loop;
  setup_t *setup;
  napi_ref logins; /* the setup's JavaScript value, kept while this lives */
  napi_ref on_login;
  listener_t *listeners[MAX_LISTENERS];
  int listening;
  accepted_t under_way; /* the list's head: logins under way, in the order accepted */
  int pending;
  int quiet; /* logins lent in C that JavaScript has not heard of (accepted_quiet) */
  int room;
  uint32_t timeout_ms;
  int tell_closed;
  uv_timer_t timer;   /* the earliest deadline, or the end of a pause */
  uint64_t due;       /* when the timer fires (0: stopped) */
  uint64_t paused_until; /* 0: accepting */
  int handles;        /* open handles: listeners and the timer */
  int leaving;        /* logins reporting now (accepted_leave, not yet accepted_done) */
  int finalized;
};

static void acceptor_free_if_done(acceptor_t *a) {
  if (!a->finalized || a->handles > 0 || a->leaving > 0 || a->pending > 0) return;
  napi_delete_reference(a->env, a->on_login);
  napi_delete_reference(a->env, a->logins);
  free(a);
}

static void hold_recall(acceptor_t *a) {
  logins_hold_recall(a->setup, a->pending + a->quiet > a->room);
}

static void on_timer(uv_timer_t *timer);

/* The timer fires at the earliest deadline of the logins under way, or when a pause ends. */
static void arm(acceptor_t *a) {
  uint64_t due = a->paused_until;
  for (accepted_t *e = a->under_way.next; e != &a->under_way; e = e->next)
    if (!due || e->deadline < due) due = e->deadline;
  a->due = due;
  if (!due) return (void)uv_timer_stop(&a->timer);
  uint64_t now = uv_now(a->loop);
  uv_timer_start(&a->timer, on_timer, due > now ? due - now : 0, 0);
}

static void on_listener(uv_poll_t *poll, int status, int events);

static void watch_listeners(acceptor_t *a, int on) {
  for (int i = 0; i < a->listening; i++)
    if (on) uv_poll_start(&a->listeners[i]->poll, UV_READABLE, on_listener);
    else uv_poll_stop(&a->listeners[i]->poll);
}

/* Out of descriptors: accepting pauses for a while rather than spinning on a full backlog. */
static void pause_accepting(acceptor_t *a) {
  watch_listeners(a, 0);
  a->paused_until = uv_now(a->loop) + PAUSE_AFTER_EMFILE;
  arm(a);
}

static void on_timer(uv_timer_t *timer) {
  acceptor_t *a = timer->data;
  uint64_t now = uv_now(a->loop);
  if (a->paused_until && a->paused_until <= now) {
    a->paused_until = 0;
    if (!a->finalized) watch_listeners(a, 1);
  }
  /* A report runs JavaScript, which may end other logins: the walk starts over after each. */
  accepted_t *e = a->under_way.next;
  while (e != &a->under_way) {
    if (e->deadline > now) {
      e = e->next;
      continue;
    }
    login_time_out(e->login);
    e = a->under_way.next;
  }
  arm(a);
}

static void start_login(acceptor_t *a, int fd) {
  accepted_t *e = login_accept(a->setup, a->loop, fd);
  if (!e) return (void)close(fd);
  e->acceptor = a;
  e->deadline = uv_now(a->loop) + a->timeout_ms;
  e->prev = a->under_way.prev;
  e->next = &a->under_way;
  a->under_way.prev->next = e;
  a->under_way.prev = e;
  a->pending++;
  hold_recall(a);
  /* A reload may have shortened the timeout: a later login can be due first. */
  if (!a->due || e->deadline < a->due) arm(a);
  /* A deferred accept comes with the client's first bytes: read them without another turn. */
  login_read_now(e->login);
}

static void on_listener(uv_poll_t *poll, int status, int events) {
  listener_t *l = poll->data;
  acceptor_t *a = l->acceptor;
  for (int i = 0; i < ACCEPTS_PER_WAKE; i++) {
    int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      start_login(a, fd);
      continue;
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    /* Out of descriptors or memory, or a listener gone bad: the backlog stays readable. */
    if (errno != EAGAIN && errno != EWOULDBLOCK) pause_accepting(a);
    return;
  }
}

accepted_end_t accepted_leave(accepted_t *e) {
  acceptor_t *a = e->acceptor;
  e->prev->next = e->next;
  e->next->prev = e->prev;
  e->prev = e->next = NULL;
  e->acceptor = NULL;
  a->pending--;
  a->leaving++;
  hold_recall(a);
  uint64_t now = uv_now(a->loop);
  accepted_end_t end = {a, a->on_login, a->tell_closed,
                        e->deadline > now ? (double)(e->deadline - now) : 0};
  return end;
}

void accepted_quiet(acceptor_t *a, int change) {
  a->quiet += change;
  hold_recall(a);
}

void accepted_done(acceptor_t *a) {
  a->leaving--;
  acceptor_free_if_done(a);
}

static void on_handle_closed(uv_handle_t *handle) {
  acceptor_t *a = handle->data;
  if (handle != (uv_handle_t *)&a->timer) {
    listener_t *l = (listener_t *)handle;
    close(l->fd);
    free(l);
  }
  a->handles--;
  acceptor_free_if_done(a);
}

static void stop_listening(acceptor_t *a) {
  for (int i = 0; i < a->listening; i++) {
    a->listeners[i]->poll.data = a;
    uv_close((uv_handle_t *)&a->listeners[i]->poll, on_handle_closed);
  }
  a->listening = 0;
  a->paused_until = 0;
}

static void close_logins(acceptor_t *a) {
  while (a->under_way.next != &a->under_way) login_abandon(a->under_way.next->login);
}

static void acceptor_finalize(napi_env env, void *data, void *hint) {
  acceptor_t *a = data;
  a->finalized = 1;
  stop_listening(a);
  close_logins(a);
  uv_close((uv_handle_t *)&a->timer, on_handle_closed);
}

static napi_value throw_error(napi_env env, const char *message) {
  napi_throw_error(env, NULL, message);
  return NULL;
}

napi_value js_accept_clients(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2], external;
  napi_valuetype type;
  setup_t *setup = NULL;
  uv_loop_t *loop;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 2 ||
      !(setup = logins_setup(env, argv[0])) || napi_typeof(env, argv[1], &type) != napi_ok ||
      type != napi_function || napi_get_uv_event_loop(env, &loop) != napi_ok)
    return throw_error(env, "pgfence accept: acceptClients(logins, onLogin)");
  acceptor_t *a = calloc(1, sizeof *a);
  if (!a) return throw_error(env, "pgfence accept: out of memory");
  a->env = env;
  a->loop = loop;
  a->setup = setup;
  a->under_way.next = a->under_way.prev = &a->under_way;
  a->timeout_ms = 15000;
  uv_timer_init(loop, &a->timer);
  a->timer.data = a;
  a->handles = 1;
  napi_create_reference(env, argv[0], 1, &a->logins);
  napi_create_reference(env, argv[1], 1, &a->on_login);
  napi_create_external(env, a, acceptor_finalize, NULL, &external);
  napi_type_tag_object(env, external, &ACCEPTOR_TAG);
  return external;
}

/* The acceptor a call's first argument is, and the call's other arguments (argc in, then out). */
static acceptor_t *acceptor_call(napi_env env, napi_callback_info info, size_t *argc,
                                 napi_value *argv) {
  if (napi_get_cb_info(env, info, argc, argv, NULL, NULL) != napi_ok || *argc < 1) return NULL;
  acceptor_t *a = tagged(env, argv[0], &ACCEPTOR_TAG);
  return a && !a->finalized ? a : NULL;
}

/* The kernel holds a connection until its first bytes arrive, for up to the startup timeout
 * (whole seconds); a connection still silent then is accepted, and its startup times out. */
static void defer_accept(const acceptor_t *a, int fd) {
  int seconds = (int)(((uint64_t)a->timeout_ms + 999) / 1000);
  setsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &seconds, sizeof seconds);
}

napi_value js_acceptor_listen(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2], result;
  int32_t fd = -1;
  acceptor_t *a = acceptor_call(env, info, &argc, argv);
  if (!a || argc < 2 || napi_get_value_int32(env, argv[1], &fd) != napi_ok || fd < 0)
    return throw_error(env, "pgfence accept: acceptorListen(acceptor, fd)");
  if (a->listening == MAX_LISTENERS) return throw_error(env, "pgfence accept: too many listeners");
  listener_t *l = calloc(1, sizeof *l);
  if (!l || (l->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0) {
    free(l);
    return throw_error(env, "pgfence accept: cannot take the listening socket");
  }
  if (uv_poll_init(a->loop, &l->poll, l->fd) != 0) {
    close(l->fd);
    free(l);
    return throw_error(env, "pgfence accept: cannot watch the listening socket");
  }
  l->acceptor = a;
  l->poll.data = l;
  defer_accept(a, l->fd);
  a->listeners[a->listening++] = l;
  a->handles++;
  if (!a->paused_until) uv_poll_start(&l->poll, UV_READABLE, on_listener);
  napi_create_int32(env, l->fd, &result);
  return result;
}

napi_value js_acceptor_settings(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  uint32_t timeout = 0;
  bool tell = false;
  acceptor_t *a = acceptor_call(env, info, &argc, argv);
  if (!a || argc < 3 || napi_get_value_uint32(env, argv[1], &timeout) != napi_ok ||
      napi_get_value_bool(env, argv[2], &tell) != napi_ok)
    return throw_error(env, "pgfence accept: acceptorSettings(acceptor, timeoutMs, tellClosed)");
  a->timeout_ms = timeout;
  a->tell_closed = tell;
  for (int i = 0; i < a->listening; i++) defer_accept(a, a->listeners[i]->fd);
  return NULL;
}

napi_value js_acceptor_room(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  int32_t room = 0;
  acceptor_t *a = acceptor_call(env, info, &argc, argv);
  if (!a || argc < 2 || napi_get_value_int32(env, argv[1], &room) != napi_ok)
    return throw_error(env, "pgfence accept: acceptorRoom(acceptor, room)");
  a->room = room;
  hold_recall(a);
  return NULL;
}

/* The acceptor a call's one argument is, while JavaScript holds it; else NULL. */
static acceptor_t *only_acceptor(napi_env env, napi_callback_info info) {
  acceptor_t *a = tagged_argument(env, info, &ACCEPTOR_TAG);
  return a && !a->finalized ? a : NULL;
}

napi_value js_acceptor_pending(napi_env env, napi_callback_info info) {
  napi_value result;
  acceptor_t *a = only_acceptor(env, info);
  napi_create_int32(env, a ? a->pending + a->quiet : 0, &result);
  return result;
}

napi_value js_acceptor_stop(napi_env env, napi_callback_info info) {
  acceptor_t *a = only_acceptor(env, info);
  if (!a) return NULL;
  stop_listening(a);
  arm(a);
  return NULL;
}

napi_value js_acceptor_close_logins(napi_env env, napi_callback_info info) {
  acceptor_t *a = only_acceptor(env, info);
  if (!a) return NULL;
  close_logins(a);
  arm(a);
  return NULL;
}

/* peerName(fd, out): as Node's TCP handle's getpeername, out.address and out.port of the
 * descriptor's peer (left unset when it has none); returns 0. */
napi_value js_peer_name(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2], value, zero;
  int32_t fd = -1;
  struct sockaddr_storage addr;
  socklen_t len = sizeof addr;
  char host[INET6_ADDRSTRLEN];
  int port;
  napi_create_int32(env, 0, &zero);
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 2 ||
      napi_get_value_int32(env, argv[0], &fd) != napi_ok ||
      getpeername(fd, (struct sockaddr *)&addr, &len) != 0)
    return zero;
  if (addr.ss_family == AF_INET) {
    struct sockaddr_in *in = (struct sockaddr_in *)&addr;
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    port = ntohs(in->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&addr;
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
    port = ntohs(in6->sin6_port);
  } else
    return zero;
  napi_create_string_utf8(env, host, NAPI_AUTO_LENGTH, &value);
  napi_set_named_property(env, argv[1], "address", value);
  napi_create_int32(env, port, &value);
  napi_set_named_property(env, argv[1], "port", value);
  return zero;
}
