/*
 * A pooled server connection kept in C between sessions (server-link.h): the reset written and
 * its answer read on the side a relay let go, then a watch until the next relay takes it.
 */
#define NAPI_VERSION 8
#include "server-link.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "link-events.h"
#include "napi-tagged.h"
#include "reset-answer.h"

#define READ_BYTES (16 * 1024)

static _Thread_local uint8_t read_buffer[READ_BYTES];

static const napi_type_tag LINK_TAG = {0x7067666e6c696e6bULL, 0x7365727665723031ULL};

enum state { KEPT, RESETTING, WAITING, CLOSING };

struct server_link {
  side_t side; /* first: a side's handles find their link */
  napi_env env;
  napi_ref value;    /* the JavaScript value: held strongly while a relay has the side */
  napi_ref on_event; /* linkReset's callback, until the link closes or a relay takes it */
  link_reset_done_t reset_done; /* link_reset_in_c's, until its answer or the link's close */
  void *reset_data;
  napi_async_context async;
  enum state state;
  reset_answer_t answer;
  int handle_open, value_alive, has_async;
};

server_link_t *link_new(napi_env env) {
  server_link_t *link = calloc(1, sizeof *link);
  if (link) link->env = env;
  return link;
}

side_t *link_side(server_link_t *link) { return &link->side; }

server_link_t *link_of_side(side_t *side) { return (server_link_t *)side; }

static void drop_callback(server_link_t *link) {
  if (link->on_event) napi_delete_reference(link->env, link->on_event);
  link->on_event = NULL;
}

static void free_if_done(server_link_t *link) {
  if (link->handle_open || link->value_alive || link->side.relay) return;
  drop_callback(link);
  if (link->value) napi_delete_reference(link->env, link->value);
  if (link->has_async) napi_async_destroy(link->env, link->async);
  reset_answer_free(&link->answer);
  free(link);
}

void link_free_unopened(server_link_t *link) { free(link); }

void link_handle_closed(server_link_t *link) {
  close(link->side.io.fd);
  stream_io_free(&link->side.io);
  bytes_free(&link->side.out);
  link->handle_open = 0;
  link->state = CLOSING;
  drop_callback(link);
  /* A relay held the value while it had the side: the value is JavaScript's alone again. */
  if (link->side.relay && link->value) napi_reference_unref(link->env, link->value, NULL);
  link->side.relay = NULL;
  free_if_done(link);
}

static void on_closed(uv_handle_t *handle) { link_handle_closed(handle->data); }

static void link_close(server_link_t *link) {
  if (!link->handle_open || link->state == CLOSING || link->side.relay) return;
  link->state = CLOSING;
  link->reset_done = NULL;
  side_close(&link->side, on_closed);
}

static void finalize(napi_env env, void *data, void *hint) {
  server_link_t *link = data;
  link->value_alive = 0;
  link_close(link); /* dropped without linkClose: its descriptor goes with it */
  free_if_done(link);
}

int link_is_waiting(const server_link_t *link) {
  return link->handle_open && link->state == WAITING && !link->side.relay;
}

int link_is_resetting(const server_link_t *link) {
  return link->handle_open && link->state == RESETTING;
}

server_link_t *link_of_value(napi_env env, napi_value value) {
  return tagged(env, value, &LINK_TAG);
}

server_link_t *link_waiting(napi_env env, napi_value value) {
  server_link_t *link = link_of_value(env, value);
  return link && link_is_waiting(link) ? link : NULL;
}

napi_value link_js_value(server_link_t *link) {
  napi_value value = NULL;
  napi_get_reference_value(link->env, link->value, &value);
  return value;
}

void link_adopt(server_link_t *link, relay_t *relay) {
  drop_callback(link);
  link->side.relay = relay;
  link->state = KEPT;
  napi_reference_ref(link->env, link->value, NULL);
}

static void on_poll(side_t *side, int status, int events);

napi_value link_keep(server_link_t *link) {
  napi_env env = link->env;
  napi_value value = NULL, name;
  if (link->value) {
    napi_get_reference_value(env, link->value, &value);
    napi_reference_unref(env, link->value, NULL);
  } else if (napi_create_external(env, link, finalize, NULL, &value) == napi_ok) {
    napi_type_tag_object(env, value, &LINK_TAG);
    napi_create_reference(env, value, 0, &link->value);
    napi_create_string_utf8(env, "pgfence.serverLink", NAPI_AUTO_LENGTH, &name);
    link->has_async = napi_async_init(env, value, name, &link->async) == napi_ok;
    link->value_alive = 1;
  }
  if (!value) return NULL;
  /* The side goes on watching as the relay left it; what it reads is the link's now. */
  link->side.on_poll = on_poll;
  link->side.relay = NULL;
  link->state = KEPT;
  link->handle_open = 1; /* open since the relay's init_side: the link closes it from now on */
  return value;
}

/* Tells JavaScript; FAILED and ENDED close the link first. */
static void report(server_link_t *link, int event) {
  napi_env env = link->env;
  napi_ref callback = link->on_event;
  link->on_event = NULL;
  if (event != LINK_EVENT_RESET) link_close(link);
  if (!callback) return;
  napi_handle_scope scope;
  napi_open_handle_scope(env, &scope);
  napi_value argv[2], fn, recv, ignored;
  void *copy;
  napi_create_int32(env, event, &argv[0]);
  bytes_t *statuses = &link->answer.statuses;
  napi_create_buffer_copy(env, statuses->len, statuses->data, &copy, &argv[1]);
  statuses->len = 0;
  napi_get_reference_value(env, callback, &fn);
  napi_get_global(env, &recv);
  /* A link still waiting keeps its callback for the end it may report later. */
  if (event == LINK_EVENT_RESET && link->state == WAITING) link->on_event = callback;
  else napi_delete_reference(env, callback);
  if (napi_make_callback(env, link->async, recv, fn, 2, argv, &ignored) != napi_ok) {
    napi_value error;
    bool pending = false;
    napi_is_exception_pending(env, &pending);
    if (pending) napi_get_and_clear_last_exception(env, &error);
  }
  napi_close_handle_scope(env, scope);
}

void link_end(server_link_t *link) { report(link, LINK_EVENT_ENDED); }

static void watch(server_link_t *link) {
  side_watch(&link->side, UV_READABLE | (link->side.out.len > 0 ? UV_WRITABLE : 0));
}

/* Writes what the socket takes of the queued bytes. Returns -1 when it failed. */
static int flush(server_link_t *link) {
  bytes_t *out = &link->side.out;
  while (out->len > 0) {
    ssize_t n = write(link->side.io.fd, out->data, out->len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
    memmove(out->data, out->data + n, out->len - (size_t)n);
    out->len -= (size_t)n;
  }
  return 0;
}

/* A clean answer to link_reset_in_c: its caller hears of it, JavaScript does not. */
static void told_in_c(server_link_t *link) {
  link_reset_done_t done = link->reset_done;
  link->reset_done = NULL;
  done(link->reset_data, link, &link->answer.statuses);
  link->answer.statuses.len = 0;
}

static void on_poll(side_t *side, int status, int events) {
  server_link_t *link = link_of_side(side);
  int event = link->state == WAITING ? LINK_EVENT_ENDED : LINK_EVENT_FAILED;
  if (status < 0 || ((events & UV_WRITABLE) && flush(link) < 0)) return report(link, event);
  while (events & UV_READABLE) {
    ssize_t n = read(link->side.io.fd, read_buffer, sizeof read_buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    /* An end, a failure, or bytes no one asked for. */
    if (n <= 0 || link->state != RESETTING) return report(link, event);
    int answer = reset_answer_feed(&link->answer, read_buffer, (size_t)n);
    if (answer == ANSWER_FAILED) return report(link, LINK_EVENT_FAILED);
    if (answer == ANSWER_CLEAN) {
      link->state = WAITING;
      if (link->reset_done) told_in_c(link);
      else report(link, LINK_EVENT_RESET);
      break;
    }
    if ((size_t)n < sizeof read_buffer) break;
  }
  if (link->state == RESETTING || link->state == WAITING) watch(link);
}

static napi_value throw_error(napi_env env, const char *message) {
  napi_throw_error(env, NULL, message);
  return NULL;
}

/* The link a JavaScript value is, if a relay does not hold it; else NULL. */
static server_link_t *unheld(napi_env env, napi_value value) {
  server_link_t *link = tagged(env, value, &LINK_TAG);
  return link && !link->side.relay ? link : NULL;
}

/* `on_event` hears of the link from now on. -1 when it is no longer kept (the server sent
 * something, or closed, since the relay let go: the link closed then), which it was told. */
static int tell_from_now(server_link_t *link, napi_value on_event) {
  drop_callback(link);
  napi_create_reference(link->env, on_event, 1, &link->on_event);
  if (link->state == KEPT) return 0;
  report(link, LINK_EVENT_FAILED);
  return -1;
}

/* Writes a reset's `ready` Queries and reads their answers; `on_event` hears a failure. */
static void start_reset(server_link_t *link, const void *bytes, size_t len, int ready,
                        napi_value on_event) {
  if (tell_from_now(link, on_event) < 0) return;
  link->state = RESETTING;
  reset_answer_start(&link->answer, ready);
  if (bytes_append(&link->side.out, bytes, len) < 0 || flush(link) < 0)
    return report(link, LINK_EVENT_FAILED);
  watch(link);
}

void link_wait_in_c(server_link_t *link, napi_value on_event) {
  if (tell_from_now(link, on_event) < 0) return;
  link->state = WAITING;
  watch(link);
}

napi_value js_link_reset(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4];
  void *bytes = NULL;
  size_t len = 0;
  int32_t ready = 0;
  server_link_t *link = NULL;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 4 ||
      !(link = unheld(env, argv[0])) ||
      napi_get_buffer_info(env, argv[1], &bytes, &len) != napi_ok ||
      napi_get_value_int32(env, argv[2], &ready) != napi_ok || ready < 1)
    return throw_error(env, "pgfence link: linkReset(link, bytes, readyCount, onEvent)");
  start_reset(link, bytes, len, ready, argv[3]);
  return NULL;
}

void link_reset_in_c(server_link_t *link, const bytes_t *bytes, int ready, napi_value on_event,
                     link_reset_done_t done, void *data) {
  link->reset_done = done;
  link->reset_data = data;
  start_reset(link, bytes->data, bytes->len, ready, on_event);
}

napi_value js_link_close(napi_env env, napi_callback_info info) {
  server_link_t *link = tagged_argument(env, info, &LINK_TAG);
  if (link) link_close(link);
  return NULL;
}

/* A link on an idle server connection's descriptor, for a connection that JavaScript relayed
 * last (a transaction pool's): C watches a duplicate, as after a clean reset, until a relay
 * takes it over or it ends (`on_event` is told ENDED then). */
napi_value js_link_watch(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2], value = NULL;
  int32_t fd = -1;
  uv_loop_t *loop = NULL;
  napi_valuetype type = napi_undefined;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 2 ||
      napi_get_value_int32(env, argv[0], &fd) != napi_ok || fd < 0 ||
      napi_typeof(env, argv[1], &type) != napi_ok || type != napi_function ||
      napi_get_uv_event_loop(env, &loop) != napi_ok)
    return throw_error(env, "pgfence link: linkWatch(fd, onEvent)");
  server_link_t *link = link_new(env);
  if (!link) return throw_error(env, "pgfence link: out of memory");
  link->side.io.fd = dup(fd);
  if (link->side.io.fd < 0 || side_open(&link->side, loop) != 0) {
    if (link->side.io.fd >= 0) close(link->side.io.fd);
    link_free_unopened(link);
    return throw_error(env, "pgfence link: the descriptor cannot be watched");
  }
  value = link_keep(link);
  if (!value) {
    side_close(&link->side, on_closed);
    return throw_error(env, "pgfence link: out of memory");
  }
  napi_create_reference(env, argv[1], 1, &link->on_event);
  link->state = WAITING;
  watch(link);
  return value;
}

napi_value js_link_resetting(napi_env env, napi_callback_info info) {
  server_link_t *link = tagged_argument(env, info, &LINK_TAG);
  napi_value result;
  napi_get_boolean(env, link && link_is_resetting(link), &result);
  return result;
}
