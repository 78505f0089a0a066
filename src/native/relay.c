/*
 * The session data path in C: once a session is past authentication, both sockets of a plain
 * TCP session are relayed here, on Node's own event loop, the way PgBouncer relays them: one
 * read, one write per burst, no JavaScript call for a message the proxy does not inspect.
 *
 * Either socket may be inside TLS: the relay then reads and writes it through the TLS channel
 * that owns it (stream-io.h, tls-channel.h), and hands it back when it stops.
 *
 * Client→server bytes are framed (type and length checked) and the message types the session
 * asks for (Query, Parse...) are handed to JavaScript whole, which returns the bytes to send in
 * their place (a Terminate is the relay's own: deliver_goodbye); a Query whose literal-normalised text has a cached rewrite template is
 * rewritten here instead (query-cache.h). Server→client bytes pass untouched, except that an
 * ErrorResponse or a WARNING NoticeResponse is held until whole and JavaScript may replace it
 * (a replaced NoticeResponse's CommandComplete is dropped: framing.h); boundaries are followed
 * so that ErrorResponses and ParameterStatus messages can be reported and the proxy knows where
 * it may insert an error of its own.
 */
#define NAPI_VERSION 8
#include <errno.h>
#include <node_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>
#include <uv.h>

#include "bytes.h"
#include "client-accept.h"
#include "client-login.h"
#include "framing.h"
#include "link-shelf.h"
#include "login-lend.h"
#include "napi-string.h"
#include "poll-park.h"
#include "query-cache.h"
#include "query-normalise.h"
#include "random-block.h"
#include "release-memory.h"
#include "relay-side.h"
#include "relay.h"
#include "server-link.h"
#include "session-progress.h"
#include "stream-io.h"
#include "tcp-keepalive.h"
#include "tls-channel.h"
#include "tls-context.h"

#define READ_BYTES (64 * 1024)
#define MAX_SEGMENTS 64
/* Query texts longer than this take the uncached path through JavaScript. */
#define MAX_CACHED_QUERY (64 * 1024)

enum callback { ON_MESSAGE, ON_SERVER_MESSAGE, ON_CLOSE, CALLBACKS };

/* One read buffer per thread: every relay of the loop reads into it and is done with it before
 * the next read. */
static _Thread_local uint8_t read_buffer[READ_BYTES];
/* The normalised form of the Query being relayed, likewise shared. */
static _Thread_local normalised_t scratch;

/* A proxy's Query templates and the JavaScript function that makes a missing one. */
typedef struct {
  query_cache_t cache;
  comment_keys_t keys;
  napi_ref template_for;
  uint64_t hits, misses; /* lookups, read at metrics scrape time */
} shared_cache_t;

/* The bytes of one burst for one socket: views of the read buffer and owned copies. */
typedef struct {
  struct iovec iov[MAX_SEGMENTS];
  uint8_t *owned[MAX_SEGMENTS];
  int count, owned_count;
} batch_t;

struct relay {
  napi_env env;
  napi_ref callbacks[CALLBACKS];
  napi_async_context async;
  side_t own_client;
  side_t *client; /* own_client, or the side of the login in C it took over (client-login.h) */
  side_t *server; /* a server link's side (server-link.h); NULL once the relay stopped */
  uv_loop_t *loop;
  uv_timer_t kick; /* reads bytes a TLS stream holds, which no poll announces */
  client_framer_t from_client;
  framer_t from_server;
  char **needles; /* Query/Parse go to JavaScript only when they contain one; NULL: always */
  int needles_borrowed; /* the needles are a shelf entry's settings' (relay_lent) */
  shared_cache_t *queries; /* NULL: every Query that passes the needles goes to JavaScript */
  napi_ref queries_ref;    /* keeps `queries` alive while the relay runs */
  size_t needle_count;
  progress_t progress;
  int close_when_idle; /* report "idle" once the session is idle outside a transaction */
  int keeps_server;    /* a pool's server connection, which outlives the client */
  shelf_entry_t *lend; /* lent from the shelf (relay_lent): where a clean goodbye may return it */
  const relay_lender_t *lender; /* relay_lent's, while JavaScript has not heard of the relay */
  void *lease;
  int goodbye;         /* the client sent Terminate: the session ends as a "goodbye" */
  int stopped;
  int open_handles;
  int wrapper_alive;
};

/* What the addon keeps per instance (napi_set_instance_data). */
typedef struct {
  napi_ref relay_class;
  napi_ref progress_array;
  double *progress_slots; /* the Float64Array's memory, kept alive by progress_array */
} addon_data_t;

/* The progress slots: the carried fields, transactions, quietMs. */
#define COUNT_FIELD(name, member) +1
#define PROGRESS_SLOTS (CARRIED_PROGRESS(COUNT_FIELD, COUNT_FIELD, COUNT_FIELD) + 2)

static uint64_t loop_now(const relay_t *r) { return uv_now(r->loop); }

static uint8_t lower(uint8_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

/* Does the text contain one of the (lower-case ASCII) needles, in any letter case? */
static int contains_needle(const relay_t *r, const uint8_t *text, size_t n) {
  for (size_t i = 0; i < r->needle_count; i++) {
    const char *needle = r->needles[i];
    size_t len = strlen(needle);
    for (size_t at = 0; len <= n && at <= n - len; at++) {
      size_t k = 0;
      while (k < len && lower(text[at + k]) == (uint8_t)needle[k]) k++;
      if (k == len) return 1;
    }
  }
  return 0;
}

/* Query and Parse need the rewriter only when they can name a fenced table; a named Parse
 * always goes (transaction pooling keeps the client's named statements; they are made once). */
static int wants_message(const relay_t *r, const uint8_t *message, size_t n) {
  uint8_t type = message[0];
  if (r->needles == NULL || (type != FRONTEND_QUERY && type != FRONTEND_PARSE)) return 1;
  if (type == FRONTEND_PARSE && n > HEADER_BYTES && message[HEADER_BYTES] != 0) return 1;
  return contains_needle(r, message + HEADER_BYTES, n - HEADER_BYTES);
}

/* ---- calls into JavaScript ---- */

static napi_value string_value(napi_env env, const char *text);

/* Calls a JavaScript function; returns its result in *result (may be NULL). Returns 0, or -1
 * when it threw: the exception is cleared (the session is then closed). */
static int call_function(relay_t *r, napi_ref function, size_t argc, napi_value *argv,
                         napi_value *result) {
  napi_value fn, recv, ignored;
  /* A relay lent quietly has no JavaScript value until it is reported: its context is made when
   * it first calls JavaScript. */
  if (!r->async && napi_async_init(r->env, NULL, string_value(r->env, "pgfence.relay"),
                                   &r->async) != napi_ok)
    return -1;
  napi_get_reference_value(r->env, function, &fn);
  napi_get_global(r->env, &recv); /* napi_make_callback needs an object as receiver */
  napi_status status =
      napi_make_callback(r->env, r->async, recv, fn, argc, argv, result ? result : &ignored);
  if (status == napi_ok) return 0;
  bool pending = false;
  napi_is_exception_pending(r->env, &pending);
  if (pending) {
    napi_value error;
    napi_get_and_clear_last_exception(r->env, &error);
  }
  return -1;
}

/* A relay lent quietly is reported now, JavaScript giving it its callbacks (or stopping it). */
static int wake(relay_t *r) {
  void *lease = r->lease;
  r->lease = NULL;
  r->lender->wake(lease);
  return r->stopped || !r->callbacks[ON_CLOSE] ? -1 : 0;
}

static int call_js(relay_t *r, enum callback which, size_t argc, napi_value *argv,
                   napi_value *result) {
  if (r->lease && wake(r) < 0) return -1;
  return call_function(r, r->callbacks[which], argc, argv, result);
}

static napi_value buffer_copy(napi_env env, const uint8_t *p, size_t n) {
  napi_value value;
  void *ignored;
  napi_create_buffer_copy(env, n, p, &ignored, &value);
  return value;
}

static napi_value get_named(napi_env env, napi_value object, const char *name) {
  napi_value value;
  napi_get_named_property(env, object, name, &value);
  return value;
}

static napi_value string_value(napi_env env, const char *text) {
  napi_value value;
  napi_create_string_utf8(env, text, NAPI_AUTO_LENGTH, &value);
  return value;
}

static void relay_stop(relay_t *r);
static void relay_halt(relay_t *r, int keep);
static int server_keepable(const relay_t *r);

/* A lent session's clean goodbye (relay_lent): JavaScript is asked whether its connection goes
 * back to the shelf in C, as onClose("goodbye", undefined, processId, secretKey, transactions)
 * with the cancel key the next client is to get and the transactions relayed. It answers with
 * the function the link tells of its end from then on (server-link.h); with anything else, it
 * has taken the session back, as at any close. Returns -1 when JavaScript could not be asked. */
static int goodbye_to_shelf(relay_t *r) {
  uint8_t key[8];
  if (random_take(key, sizeof key) < 0) return -1;
  key[0] &= 0x7f; /* a positive process id, as PostgreSQL's */
  server_link_t *link = link_of_side(r->server);
  shelf_entry_t *entry = r->lend;
  /* Lent quietly, and the shelf may take it back: JavaScript hears of it when it next looks. */
  if (r->lease && shelf_may_return(entry, loop_now(r))) {
    void *lease = r->lease;
    r->lease = NULL;
    r->lend = NULL;
    link_keep(link);
    relay_halt(r, 1);
    shelf_return_quietly(entry, link, key, r->progress.transactions);
    r->lender->over(lease);
    return 0;
  }
  napi_env env = r->env;
  napi_value argv[5], answer = NULL;
  napi_valuetype type = napi_undefined;
  argv[0] = string_value(env, "goodbye");
  napi_get_undefined(env, &argv[1]);
  napi_create_uint32(env, read_u32(key), &argv[2]);
  napi_create_uint32(env, read_u32(key + 4), &argv[3]);
  napi_create_double(env, (double)r->progress.transactions, &argv[4]);
  if (call_js(r, ON_CLOSE, 5, argv, &answer) < 0 || r->stopped ||
      napi_typeof(env, answer, &type) != napi_ok || type != napi_function)
    return 0;
  entry = r->lend;
  r->lend = NULL;
  link_keep(link); /* a lent link has its JavaScript value already: nothing to make */
  relay_halt(r, 1);
  shelf_return(entry, link, key, answer);
  return 0;
}

/* One side closed, failed or broke the protocol: JavaScript takes the session over (it calls
 * stop() and closes both sockets); if it did not, the relay stops anyway. */
static void report_close(relay_t *r, const char *kind, const char *detail) {
  if (r->stopped) return;
  int client_left = strcmp(kind, "client") == 0;
  if (r->goodbye && (client_left || strcmp(kind, "server") == 0)) kind = "goodbye";
  napi_handle_scope scope;
  napi_open_handle_scope(r->env, &scope);
  int to_shelf = r->lend && r->goodbye && client_left && !detail && server_keepable(r);
  if (!to_shelf || goodbye_to_shelf(r) < 0) {
    napi_value argv[2] = {string_value(r->env, kind),
                          detail ? string_value(r->env, detail) : NULL};
    if (!detail) napi_get_undefined(r->env, &argv[1]);
    call_js(r, ON_CLOSE, 2, argv, NULL);
  }
  napi_close_handle_scope(r->env, scope);
  relay_stop(r);
}

/* ---- writing ---- */

static void batch_release(batch_t *b) {
  for (int i = 0; i < b->owned_count; i++) free(b->owned[i]);
  b->count = b->owned_count = 0;
}

/* Writes what the socket takes now; queues the rest. Returns -1 when the socket failed. */
static int flush_out(side_t *s);

static int batch_flush(side_t *s, batch_t *b) {
  int first = 0;
  size_t offset = 0;
  /* TLS: one buffer, so that a burst becomes as few records as it can. */
  if (s->out.len == 0 && b->count > 0 && !s->io.ssl) {
    ssize_t n;
    do n = b->count == 1 ? write(s->io.fd, b->iov[0].iov_base, b->iov[0].iov_len)
                         : writev(s->io.fd, b->iov, b->count);
    while (n < 0 && errno == EINTR);
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      batch_release(b);
      return -1;
    }
    size_t written = n < 0 ? 0 : (size_t)n;
    while (first < b->count && written >= b->iov[first].iov_len) written -= b->iov[first++].iov_len;
    offset = written;
  }
  for (int i = first; i < b->count; i++) {
    const uint8_t *base = (const uint8_t *)b->iov[i].iov_base + (i == first ? offset : 0);
    size_t len = b->iov[i].iov_len - (i == first ? offset : 0);
    if (bytes_append(&s->out, base, len) < 0) {
      batch_release(b);
      return -1;
    }
  }
  batch_release(b);
  return s->io.ssl && s->out.len > 0 ? flush_out(s) : 0;
}

static int batch_add(side_t *s, batch_t *b, const uint8_t *p, size_t n, uint8_t *owned) {
  if (n == 0) {
    free(owned);
    return 0;
  }
  if (b->count == MAX_SEGMENTS && batch_flush(s, b) < 0) {
    free(owned);
    return -1;
  }
  b->iov[b->count].iov_base = (void *)p;
  b->iov[b->count++].iov_len = n;
  if (owned) b->owned[b->owned_count++] = owned;
  return 0;
}

static int batch_add_copy(side_t *s, batch_t *b, const uint8_t *p, size_t n) {
  if (n == 0) return 0; /* e.g. a message JavaScript dropped: an empty Buffer has no data */
  uint8_t *copy = malloc(n);
  if (!copy) return -1;
  memcpy(copy, p, n);
  return batch_add(s, b, copy, n, copy);
}

/* Writes queued bytes once the socket can take them. Returns -1 when it failed. */
static int flush_out(side_t *s) {
  const char *detail = NULL;
  ssize_t n = stream_write(&s->io, s->out.data, s->out.len, &detail);
  if (n < 0) return -1;
  size_t done = (size_t)n;
  memmove(s->out.data, s->out.data + done, s->out.len - done);
  s->out.len -= done;
  return 0;
}

/* ---- client → server ---- */

/* What JavaScript made of a message offered to it. */
enum offered { THREW = -2, KEPT = 0, REPLACED = 1 };

/* Hands a whole message to a JavaScript function. Given `to`, a Buffer the function returns
 * goes into the batch for `to` in the message's place (REPLACED); anything else leaves the
 * message as it is (KEPT). THREW: the function threw; -1: memory ran out. */
static int offer_message(relay_t *r, enum callback which, const uint8_t *message, size_t n,
                         side_t *to, batch_t *b) {
  napi_handle_scope scope;
  napi_open_handle_scope(r->env, &scope);
  napi_value argv[1] = {buffer_copy(r->env, message, n)};
  napi_value result;
  int offered = call_js(r, which, 1, argv, &result) < 0 ? THREW : KEPT;
  bool is_buffer = false;
  if (offered == KEPT && to) napi_is_buffer(r->env, result, &is_buffer);
  if (is_buffer) {
    void *data;
    size_t len;
    napi_get_buffer_info(r->env, result, &data, &len);
    offered = batch_add_copy(to, b, data, len) < 0 ? -1 : REPLACED;
  }
  napi_close_handle_scope(r->env, scope);
  return offered;
}

/* A whole intercepted message: JavaScript returns the bytes to send instead (a Buffer), or
 * undefined to send it as it is. `owned` is the message's heap copy, if it has one. */
static int deliver_to_js(relay_t *r, batch_t *b, const uint8_t *message, size_t n,
                         uint8_t *owned) {
  int offered = offer_message(r, ON_MESSAGE, message, n, r->server, b);
  if (offered == KEPT && !r->stopped) return batch_add(r->server, b, message, n, owned);
  free(owned);
  if (offered == THREW) report_close(r, "client", "statement interception failed");
  return offered == REPLACED && !r->stopped ? 0 : -1;
}

/* ---- the Query template cache ---- */

/* The entry JavaScript made of templateFor(key): undefined (unchanged), null (exact only) or
 * { parts: Buffer[], holes: number[] }. NULL when out of memory. */
static cache_entry_t *entry_from_js(napi_env env, napi_value value, size_t value_count) {
  cache_entry_t *e = calloc(1, sizeof *e);
  if (!e) return NULL;
  napi_valuetype type;
  napi_typeof(env, value, &type);
  e->kind = type == napi_undefined ? ENTRY_UNCHANGED : ENTRY_EXACT;
  if (type != napi_object) return e;
  napi_value parts = get_named(env, value, "parts"), holes = get_named(env, value, "holes");
  uint32_t part_count = 0, hole_count = 0;
  napi_get_array_length(env, parts, &part_count);
  napi_get_array_length(env, holes, &hole_count);
  if (part_count == 0 || hole_count != part_count - 1) return e;
  e->part_ends = malloc(part_count * sizeof *e->part_ends);
  e->holes = malloc((hole_count ? hole_count : 1) * sizeof *e->holes);
  if (!e->part_ends || !e->holes) return cache_entry_free(e), NULL;
  for (uint32_t i = 0; i < part_count; i++) {
    napi_value part;
    void *data = NULL;
    size_t len = 0;
    napi_get_element(env, parts, i, &part);
    napi_get_buffer_info(env, part, &data, &len);
    if (bytes_append(&e->parts, data, len) < 0) return cache_entry_free(e), NULL;
    e->part_ends[i] = (uint32_t)e->parts.len;
  }
  for (uint32_t i = 0; i < hole_count; i++) {
    napi_value hole;
    napi_get_element(env, holes, i, &hole);
    napi_get_value_uint32(env, hole, &e->holes[i]);
    if (e->holes[i] >= value_count) return e; /* not a template for this key: exact only */
  }
  e->hole_count = hole_count;
  e->value_count = value_count;
  e->kind = ENTRY_TEMPLATE;
  return e;
}

/* Asks JavaScript for the template of the scratch key and caches it. NULL when the session
 * closed (the function threw, or memory ran out). */
static cache_entry_t *learn_template(relay_t *r, uint64_t hash) {
  napi_handle_scope scope;
  napi_open_handle_scope(r->env, &scope);
  napi_value argv[1] = {buffer_copy(r->env, scratch.key.data, scratch.key.len)};
  napi_value result;
  cache_entry_t *e = NULL;
  int failed = call_function(r, r->queries->template_for, 1, argv, &result);
  if (!failed && !r->stopped) e = entry_from_js(r->env, result, scratch.count);
  napi_close_handle_scope(r->env, scope);
  if (e) {
    e->hash = hash;
    if (bytes_append(&e->key, scratch.key.data, scratch.key.len) == 0) {
      query_cache_put(&r->queries->cache, e);
      return e;
    }
    cache_entry_free(e);
  }
  report_close(r, "client", failed ? "statement interception failed" : "out of memory");
  return NULL;
}

enum { ASK_JS = 1 };

/* A Query through the template cache: 0 or -1 (stopped) when it was sent, ASK_JS when only
 * JavaScript can rewrite it. */
static int deliver_cached_query(relay_t *r, batch_t *b, const uint8_t *message, size_t n,
                                uint8_t *owned) {
  /* A text with a NUL inside, or none at its end, is PostgreSQL's to refuse. */
  if (n <= HEADER_BYTES || n - HEADER_BYTES - 1 > MAX_CACHED_QUERY || message[n - 1] != 0)
    return ASK_JS;
  const uint8_t *text = message + HEADER_BYTES;
  size_t len = n - HEADER_BYTES - 1;
  if (memchr(text, 0, len) != NULL) return ASK_JS;
  if (normalise_query(text, len, &r->queries->keys, &scratch) != NORMALISED) return ASK_JS;
  uint64_t hash = query_cache_hash(&scratch.key);
  cache_entry_t *e = query_cache_get(&r->queries->cache, &scratch.key, hash);
  if (e) r->queries->hits++;
  else r->queries->misses++;
  if (!e && !(e = learn_template(r, hash))) {
    free(owned);
    return -1;
  }
  /* A key fixes its number of values; checked all the same, as the fill indexes by it. */
  if (e->kind == ENTRY_EXACT || (e->kind == ENTRY_TEMPLATE && e->value_count != scratch.count))
    return ASK_JS;
  if (e->kind == ENTRY_UNCHANGED) return batch_add(r->server, b, message, n, owned);
  size_t filled_len;
  uint8_t *filled = fill_query_template(e, text, &scratch, &filled_len);
  free(owned);
  return filled ? batch_add(r->server, b, filled, filled_len, filled) : -1;
}

/* A Terminate is noted, not offered to JavaScript: the session ends as a goodbye once the bytes
 * read with it are delivered (relay_read). It goes on to the server, unless the server
 * connection outlives the client. */
static int deliver_goodbye(relay_t *r, batch_t *b, const uint8_t *message, size_t n,
                           uint8_t *owned) {
  r->goodbye = 1;
  if (!r->keeps_server) return batch_add(r->server, b, message, n, owned);
  free(owned);
  return 0;
}

static int deliver(relay_t *r, batch_t *b, const uint8_t *message, size_t n, uint8_t *owned) {
  if (r->stopped) {
    free(owned);
    return -1;
  }
  if (message[0] == FRONTEND_TERMINATE) return deliver_goodbye(r, b, message, n, owned);
  if (!wants_message(r, message, n)) return batch_add(r->server, b, message, n, owned);
  if (message[0] == FRONTEND_QUERY && r->queries) {
    int status = deliver_cached_query(r, b, message, n, owned);
    if (status != ASK_JS) return status;
  }
  return deliver_to_js(r, b, message, n, owned);
}

/* The client framer's sink: bytes for the server, collected in the burst's batch. */
typedef struct {
  relay_t *relay;
  batch_t *batch;
} burst_t;

static int sink_forward(void *ctx, const uint8_t *bytes, size_t n, uint8_t *owned) {
  burst_t *burst = ctx;
  if (burst->relay->stopped) {
    free(owned);
    return -1;
  }
  return batch_add(burst->relay->server, burst->batch, bytes, n, owned);
}

static int sink_deliver(void *ctx, const uint8_t *message, size_t n, uint8_t *owned) {
  burst_t *burst = ctx;
  return deliver(burst->relay, burst->batch, message, n, owned);
}

static void sink_invalid(void *ctx, const char *detail) {
  report_close(((burst_t *)ctx)->relay, "invalid", detail);
}

static void sink_message(void *ctx, const uint8_t *message, size_t available) {
  relay_t *r = ((burst_t *)ctx)->relay;
  progress_client_message(&r->progress, message, available, loop_now(r));
}

static const client_sink_t to_server = {sink_forward, sink_deliver, sink_invalid, sink_message};

/* ---- server → client ---- */

static int server_forward(void *ctx, const uint8_t *bytes, size_t n, int copy) {
  burst_t *burst = ctx;
  side_t *to = burst->relay->client;
  return copy ? batch_add_copy(to, burst->batch, bytes, n)
              : batch_add(to, burst->batch, bytes, n, NULL);
}

/* Is a whole NoticeResponse a WARNING (by its non-localised severity, field V)? Only a WARNING
 * can say that a commit's wait for the synchronous standby was cancelled (server-notices.ts):
 * other notices pass without a call into JavaScript. */
static int is_warning(const uint8_t *message, size_t n) {
  size_t at = HEADER_BYTES;
  while (at < n && message[at] != 0) {
    uint8_t field = message[at++];
    const uint8_t *end = memchr(message + at, 0, n - at);
    if (end == NULL) return 0;
    size_t len = (size_t)(end - (message + at));
    if (field == ERROR_FIELD_TYPE_SEVERITY_NON_LOCALIZED) return len == 7 && memcmp(message + at, "WARNING", 7) == 0;
    at += len + 1;
  }
  return 0;
}

/* Reports a whole server message to JavaScript. A withheld one (an ErrorResponse or a
 * NoticeResponse) goes into the batch now: as JavaScript returns it (a Buffer: returns 1), or
 * as it is. */
static int report_server_message(void *ctx, const uint8_t *message, size_t n, int withheld) {
  burst_t *burst = ctx;
  relay_t *r = burst->relay;
  if (message[0] == BACKEND_NOTICE_RESPONSE && !is_warning(message, n))
    return batch_add_copy(r->client, burst->batch, message, n);
  side_t *to = withheld ? r->client : NULL;
  int offered = offer_message(r, ON_SERVER_MESSAGE, message, n, to, burst->batch);
  if (offered == KEPT || offered == THREW)
    offered = withheld ? batch_add_copy(r->client, burst->batch, message, n) : 0;
  return r->stopped ? -1 : offered;
}

static void server_header(void *ctx, uint8_t type) {
  progress_server_header(&((burst_t *)ctx)->relay->progress, type);
}

static void server_body(void *ctx, uint8_t first) {
  progress_server_body(&((burst_t *)ctx)->relay->progress, first);
}

static const server_sink_t from_server = {server_forward, report_server_message, server_header,
                                          server_body};

/* ---- the event loop side ---- */

/* Idle outside a transaction: every request answered, nothing sent since (a Parse without its
 * Sync opens one), nothing half sent either way. */
static int relay_idle(const relay_t *r) {
  const progress_t *p = &r->progress;
  return p->outstanding == 0 && !p->unsynced && p->status == TRANSACTION_STATUS_IDLE &&
         at_boundary(&r->from_client.state) && at_boundary(&r->from_server);
}

static int relay_read(relay_t *r, side_t *from) {
  const char *detail = NULL;
  ssize_t n = stream_read(&from->io, read_buffer, READ_BYTES, &detail);
  if (n == 0) return 0;
  int is_client = from == r->client;
  if (n < 0) {
    report_close(r, is_client ? "client" : "server", n == STREAM_FAILED ? detail : NULL);
    return -1;
  }
  side_t *to = is_client ? r->server : r->client;
  batch_t batch = {.count = 0, .owned_count = 0};
  burst_t burst = {r, &batch};
  int status;
  if (is_client) {
    status = frame_client(&r->from_client, &to_server, &burst, read_buffer, (size_t)n);
  } else {
    r->progress.progress_at = loop_now(r);
    status = scan_server(&r->from_server, &from_server, &burst, read_buffer, (size_t)n);
  }
  if (status < 0 || r->stopped) {
    batch_release(&batch);
    if (!r->stopped) report_close(r, "client", "out of memory");
    return -1;
  }
  if (batch_flush(to, &batch) < 0) {
    report_close(r, is_client ? "server" : "client", "write failed");
    return -1;
  }
  /* Nothing follows a Terminate: the session ends now, without a turn of the loop to wait for
   * the client's close (which a pool's connection would wait for too). */
  if (is_client && r->goodbye) {
    report_close(r, "client", NULL);
    return -1;
  }
  if (!is_client && r->close_when_idle && relay_idle(r)) {
    report_close(r, "idle", NULL);
    return -1;
  }
  return 0;
}

static int poll_events(relay_t *r, side_t *s) {
  side_t *peer = s == r->client ? r->server : r->client;
  /* Read from a side only while the bytes it sent last have all been taken by the peer. */
  int events = (peer->out.len == 0 ? UV_READABLE : 0) | (s->out.len > 0 ? UV_WRITABLE : 0);
  /* TLS may need the other direction to go on: a record to finish, a key update to answer. */
  if (s->io.read_wants_write && (events & UV_READABLE)) events |= UV_WRITABLE;
  if (s->io.write_wants_read && (events & UV_WRITABLE)) events |= UV_READABLE;
  return events;
}

/* Bytes a TLS stream holds that its peer has room for: read them without waiting on a poll. */
static int side_pending(relay_t *r, side_t *s) {
  return (poll_events(r, s) & UV_READABLE) && stream_pending(&s->io);
}

static void on_kick(uv_timer_t *timer);

static void kick_if_pending(relay_t *r) {
  if (!r->stopped && (side_pending(r, r->client) || side_pending(r, r->server)))
    uv_timer_start(&r->kick, on_kick, 0, 0);
}

static void update_polls(relay_t *r) {
  if (r->stopped) return;
  side_watch(r->client, poll_events(r, r->client));
  side_watch(r->server, poll_events(r, r->server));
}

static void on_poll(side_t *s, int status, int events) {
  relay_t *r = s->relay;
  if (r->stopped) return;
  int is_client = s == r->client;
  if (status < 0) return report_close(r, is_client ? "client" : "server", uv_strerror(status));
  if ((events & (UV_WRITABLE | UV_READABLE)) && s->out.len > 0 && flush_out(s) < 0)
    return report_close(r, is_client ? "client" : "server", strerror(errno));
  /* A client slow to take a result holds the server up: that is progress, not a silent server. */
  if ((events & UV_WRITABLE) && is_client) r->progress.progress_at = loop_now(r);
  int readable = (events & UV_READABLE) && (s->events & UV_READABLE);
  /* A TLS read that waited for the socket to be writable goes on now. */
  if ((events & UV_WRITABLE) && s->io.read_wants_write) readable = 1;
  if (readable && relay_read(r, s) < 0) return;
  update_polls(r);
  kick_if_pending(r);
}

static void on_kick(uv_timer_t *timer) {
  relay_t *r = timer->data;
  for (side_t *s = r->client; !r->stopped && s; s = s == r->client ? r->server : NULL)
    if (side_pending(r, s) && relay_read(r, s) < 0) return;
  update_polls(r);
  kick_if_pending(r);
}

/* ---- lifetime ---- */

static void free_needle_list(char **needles, size_t count) {
  for (size_t i = 0; i < count; i++) free(needles[i]);
  free(needles);
}

static void free_needles(relay_t *r) {
  if (!r->needles_borrowed) free_needle_list(r->needles, r->needle_count);
  r->needles_borrowed = 0;
}

static void relay_free_if_done(relay_t *r) {
  if (r->open_handles > 0 || r->wrapper_alive) return;
  free_needles(r);
  framer_free(&r->from_client.state);
  framer_free(&r->from_server);
  free(r);
}

static void handle_gone(relay_t *r) {
  if (--r->open_handles > 0) return;
  /* Both handles are gone: let go of the callbacks, so the session can be collected. */
  for (int i = 0; i < CALLBACKS; i++)
    if (r->callbacks[i]) napi_delete_reference(r->env, r->callbacks[i]);
  if (r->queries_ref) napi_delete_reference(r->env, r->queries_ref);
  if (r->async) napi_async_destroy(r->env, r->async);
  relay_free_if_done(r);
}

/* The client's side is the relay's own, or its login's, which closes the descriptor. */
static void on_client_closed(uv_handle_t *handle) {
  side_t *s = handle->data;
  relay_t *r = s->relay;
  bytes_free(&s->out);
  if (s == &r->own_client) {
    close(s->io.fd);
    stream_io_free(&s->io);
  } else {
    login_side_closed(s);
  }
  handle_gone(r);
}

static void on_kick_closed(uv_handle_t *handle) { handle_gone(handle->data); }

/* The server's side belongs to its link, which may outlive the relay. */
static void on_server_closed(uv_handle_t *handle) {
  relay_t *r = ((side_t *)handle->data)->relay;
  link_handle_closed(link_of_side(handle->data));
  handle_gone(r);
}

/* Stops relaying. `keep`: the server's side stays open, its link kept (link_keep) already. */
static void relay_halt(relay_t *r, int keep) {
  if (r->stopped) return;
  r->stopped = 1;
  if (r->lend) shelf_entry_drop(r->lend);
  r->lend = NULL;
  if (r->lease) r->lender->over(r->lease);
  r->lease = NULL;
  side_close(r->client, on_client_closed);
  if (keep) r->open_handles--;
  else side_close(r->server, on_server_closed);
  uv_close((uv_handle_t *)&r->kick, on_kick_closed);
  /* The TLS connections go back to their pumps, for JavaScript to finish the session with. */
  if (r->client->channel) tls_channel_resume(r->client->channel);
  if (!keep && r->server->channel) tls_channel_resume(r->server->channel);
  r->server = NULL;
}

static void relay_stop(relay_t *r) { relay_halt(r, 0); }

static void wrapper_finalize(napi_env env, void *data, void *hint) {
  (void)env;
  (void)hint;
  relay_t *r = data;
  r->wrapper_alive = 0;
  relay_free_if_done(r);
}

/* ---- JavaScript API ---- */

#define CHECK(call)                                                 \
  do {                                                              \
    if ((call) != napi_ok) {                                        \
      napi_throw_error(env, NULL, "pgfence relay: " #call " failed"); \
      return NULL;                                                  \
    }                                                               \
  } while (0)

typedef struct {
  const char *name;
  napi_callback fn;
} named_function_t;

static void define_functions(napi_env env, napi_value object, const named_function_t *fns,
                             size_t count) {
  for (size_t i = 0; i < count; i++) {
    napi_value fn;
    napi_create_function(env, fns[i].name, NAPI_AUTO_LENGTH, fns[i].fn, NULL, &fn);
    napi_set_named_property(env, object, fns[i].name, fn);
  }
}

static void fill_types(napi_env env, napi_value text, uint8_t table[256]) {
  char types[64] = {0};
  size_t len = 0;
  napi_get_value_string_latin1(env, text, types, sizeof types, &len);
  for (size_t i = 0; i < len; i++) table[(uint8_t)types[i]] = 1;
}

/* The server connection may serve another client as it is, after a reset: plain TCP, idle
 * outside a transaction, nothing of the session's left to write to it. */
static int server_keepable(const relay_t *r) {
  return !r->stopped && !r->server->channel && r->server->out.len == 0 && relay_idle(r);
}

/* Bytes for JavaScript: a Buffer, or undefined when there are none (no Buffer to make). */
static napi_value bytes_or_undefined(napi_env env, const bytes_t *bytes) {
  napi_value value;
  if (bytes && bytes->len > 0) return buffer_copy(env, bytes->data, bytes->len);
  napi_get_undefined(env, &value);
  return value;
}

/* stop(keepServer): [toClient, toServer, serverAtBoundary, serverLink], an array, since an
 * object's named properties cost a string lookup each: the bytes not yet written (undefined:
 * none), whether an error of the proxy's own may be sent to the client now, and, asked to keep
 * the server's side and able to (server_keepable), its link (server-link.h) still watching it.
 * Idempotent. */
static napi_value js_stop(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1], self, result, flag, link = NULL;
  bool keep = false;
  relay_t *r;
  CHECK(napi_get_cb_info(env, info, &argc, argv, &self, NULL));
  CHECK(napi_unwrap(env, self, (void **)&r));
  if (argc > 0) napi_get_value_bool(env, argv[0], &keep);
  CHECK(napi_create_array_with_length(env, 4, &result));
  /* Once stopped, a side may be gone: its bytes were handed over by the first stop. */
  napi_set_element(env, result, 0, bytes_or_undefined(env, r->stopped ? NULL : &r->client->out));
  napi_set_element(env, result, 1, bytes_or_undefined(env, r->stopped ? NULL : &r->server->out));
  napi_get_boolean(env, at_boundary(&r->from_server), &flag);
  napi_set_element(env, result, 2, flag);
  if (keep && server_keepable(r)) link = link_keep(link_of_side(r->server));
  int kept = link != NULL;
  if (!kept) napi_get_undefined(env, &link);
  napi_set_element(env, result, 3, link);
  if (!r->stopped) r->client->out.len = r->server->out.len = 0;
  relay_halt(r, kept);
  return result;
}

static void set_number(napi_env env, napi_value object, const char *name, double number) {
  napi_value value;
  napi_create_double(env, number, &value);
  napi_set_named_property(env, object, name, value);
}

/* A slot's value as a count, a byte or a flag: anything out of range reads as 0. */
static uint32_t slot_count(double value) {
  return value > 0 && value < 4294967296.0 ? (uint32_t)value : 0;
}

/* Where the session's requests stood when the relay took it over: the carried fields, as
 * JavaScript wrote them into the progress slots (progress() says how) before relay(). */
static void carry_progress(const double *slot, progress_t *p) {
#define READ_COUNT(name, member) p->member = slot_count(*slot++);
#define READ_BYTE(name, member) p->member = (uint8_t)slot_count(*slot++);
  CARRIED_PROGRESS(READ_COUNT, READ_BYTE, READ_BYTE)
#undef READ_COUNT
#undef READ_BYTE
}

/* progress(): where the session's requests stand (session-progress.h), for timeouts, for what
 * to tell a client the proxy cuts off, and for the relay that carries the session on; written
 * into the addon's progress slots (relayProgressSlots(), a Float64Array), not made an object
 * of: the carried fields in CARRIED_PROGRESS order (a letter as its code, a flag as 0 or 1),
 * then transactions and quietMs. */
static napi_value js_progress(napi_env env, napi_callback_info info) {
  napi_value self;
  relay_t *r;
  addon_data_t *data;
  CHECK(napi_get_cb_info(env, info, NULL, NULL, &self, NULL));
  CHECK(napi_unwrap(env, self, (void **)&r));
  CHECK(napi_get_instance_data(env, (void **)&data));
  const progress_t *p = &r->progress;
  double *slot = data->progress_slots;
#define WRITE(name, member) *slot++ = (double)p->member;
  CARRIED_PROGRESS(WRITE, WRITE, WRITE)
#undef WRITE
  *slot++ = (double)p->transactions;
  *slot = r->stopped ? 0 : (double)(loop_now(r) - p->progress_at);
  return NULL;
}

/* A side reads and writes a duplicate of `fd`, or, given a TLS channel (whose plaintext end
 * `fd` is), the TLS connection it borrows from the channel. */
static int init_side(relay_t *r, side_t *s, uv_loop_t *loop, int fd, tls_channel_t *channel) {
  s->relay = r;
  s->io.fd = channel ? tls_channel_lend(channel, fd, &s->io, &s->out) : dup(fd);
  if (s->io.fd < 0) return -1;
  s->channel = channel;
  if (side_open(s, loop) != 0) {
    close(s->io.fd);
    stream_io_free(&s->io);
    if (channel) tls_channel_resume(channel);
    return -1;
  }
  s->on_poll = on_poll;
  r->open_handles++;
  return 0;
}

/* The client's side: that of a login in C waiting for it (`login`), else the relay's own,
 * reading a duplicate of `fd` or the TLS connection of the channel `tls`. */
static int attach_client(napi_env env, relay_t *r, uv_loop_t *loop, int fd, napi_value login_value,
                         napi_value tls) {
  side_t *login = login_side_waiting(env, login_value);
  if (!login) {
    r->client = &r->own_client;
    return init_side(r, r->client, loop, fd, tls_channel_of(env, tls));
  }
  /* Its watch stays: the first update_polls finds it right, or starts it. */
  r->client = login;
  login->relay = r;
  login->on_poll = on_poll;
  r->open_handles++;
  return 0;
}

/* The server's side: a waiting link's (`link_value`), else a new link's, reading a duplicate of
 * `fd` or the TLS connection of the channel `tls_value`. */
static int attach_server(napi_env env, relay_t *r, uv_loop_t *loop, int fd, napi_value link_value,
                         napi_value tls_value) {
  server_link_t *link = link_waiting(env, link_value);
  if (link) {
    link_adopt(link, r);
    r->server = link_side(link);
    r->server->on_poll = on_poll; /* its watch stays: the first update_polls finds it right */
    r->open_handles++;
    return 0;
  }
  tls_channel_t *tls = tls_channel_of(env, tls_value);
  if (!(link = link_new(env))) return -1;
  r->server = link_side(link);
  if (init_side(r, r->server, loop, fd, tls) == 0) return 0;
  link_free_unopened(link);
  r->server = NULL;
  return -1;
}

static void on_failed_init_closed(uv_handle_t *handle) {
  side_t *s = handle->data;
  close(s->io.fd);
  stream_io_free(&s->io);
  bytes_free(&s->out);
  free_needles(s->relay);
  free(s->relay);
}

/* statementNeedles: an array of strings into *needles (NULL when it is not an array: every
 * Query and Parse goes to JavaScript). Returns -1 when out of memory. */
static int read_needles(napi_env env, napi_value value, char ***needles, size_t *count) {
  bool is_array = false;
  napi_is_array(env, value, &is_array);
  if (!is_array) return 0;
  uint32_t length = 0;
  napi_get_array_length(env, value, &length);
  *needles = calloc(length ? length : 1, sizeof **needles);
  if (!*needles) return -1;
  for (uint32_t i = 0; i < length; i++) {
    napi_value item;
    size_t len = 0;
    napi_get_element(env, value, i, &item);
    napi_get_value_string_latin1(env, item, NULL, 0, &len);
    char *needle = malloc(len + 1);
    if (!needle) return -1;
    (*needles)[(*count)++] = needle;
    napi_get_value_string_latin1(env, item, needle, len + 1, &len);
  }
  return 0;
}

/* The settings a config reload may change, in this order. */
enum setting { MAX_MESSAGE_BYTES, INTERCEPT_TYPES, STATEMENT_NEEDLES, QUERY_CACHE, SETTINGS };

/* What a relay's settings are read into: by a lent relay's shelf entry (relay-settings.h), which
 * lends the relays made with them the needles and the cache, or on the way into one relay. */
struct relay_settings {
  uint8_t valid[256];
  uint8_t intercept[256];
  size_t max_message;
  char **needles; /* NULL: every Query and Parse goes to JavaScript */
  size_t needle_count;
  shared_cache_t *queries;
  napi_ref queries_ref;
};

/* Reads the settings (setting order) into `out`, zeroed; -1 when out of memory (what was read
 * stays out's, to be freed with it). */
static int read_settings(napi_env env, const napi_value *settings, relay_settings_t *out) {
  double max_message = 0;
  napi_get_value_double(env, settings[MAX_MESSAGE_BYTES], &max_message);
  out->max_message = (size_t)max_message;
  fill_types(env, settings[INTERCEPT_TYPES], out->intercept);
  napi_value queries = settings[QUERY_CACHE];
  if (napi_unwrap(env, queries, (void **)&out->queries) == napi_ok)
    napi_create_reference(env, queries, 1, &out->queries_ref);
  else
    out->queries = NULL;
  return read_needles(env, settings[STATEMENT_NEEDLES], &out->needles, &out->needle_count);
}

/* The relay relays with `s` from its next message. `borrowed`: the needles and the cache stay
 * s's (relay_lent); else the relay frees them. */
static void take_settings(relay_t *r, const relay_settings_t *s, int borrowed) {
  memcpy(r->from_client.intercept, s->intercept, sizeof s->intercept);
  r->from_client.max_message = s->max_message;
  r->needles = s->needles;
  r->needle_count = s->needle_count;
  r->needles_borrowed = borrowed;
  r->queries = s->queries;
  r->queries_ref = borrowed ? NULL : s->queries_ref;
}

/* Takes the settings (setting order). Returns -1 when out of memory. */
static int configure(napi_env env, relay_t *r, const napi_value *settings) {
  relay_settings_t read = {0};
  int status = read_settings(env, settings, &read);
  free_needles(r);
  if (r->queries_ref) napi_delete_reference(env, r->queries_ref);
  take_settings(r, &read, 0);
  return status;
}

static relay_t *unwrap_relay(napi_env env, napi_callback_info info, napi_value *argv) {
  size_t argc = 1;
  napi_value self;
  relay_t *r = NULL;
  if (napi_get_cb_info(env, info, &argc, argv, &self, NULL) != napi_ok ||
      napi_unwrap(env, self, (void **)&r) != napi_ok)
    napi_throw_error(env, NULL, "pgfence relay: not a relay");
  return r;
}

/* update({ maxMessageBytes, interceptTypes, statementNeedles, queryCache }): a config reload;
 * takes effect from the next message. */
static napi_value js_update(napi_env env, napi_callback_info info) {
  napi_value argv[1], settings[SETTINGS];
  relay_t *r = unwrap_relay(env, info, argv);
  if (!r || r->stopped) return NULL;
  settings[MAX_MESSAGE_BYTES] = get_named(env, argv[0], "maxMessageBytes");
  settings[INTERCEPT_TYPES] = get_named(env, argv[0], "interceptTypes");
  settings[STATEMENT_NEEDLES] = get_named(env, argv[0], "statementNeedles");
  settings[QUERY_CACHE] = get_named(env, argv[0], "queryCache");
  if (configure(env, r, settings) < 0) report_close(r, "client", "out of memory");
  return NULL;
}

/* closeWhenIdle() → whether the session is idle outside a transaction now (the caller may stop
 * the relay at once); if not, "idle" is reported as soon as it is (shutdown, a pool wanting its
 * server connection back). */
static napi_value js_close_when_idle(napi_env env, napi_callback_info info) {
  napi_value argv[1], idle;
  relay_t *r = unwrap_relay(env, info, argv);
  if (!r) return NULL;
  r->close_when_idle = 1;
  napi_get_boolean(env, !r->stopped && relay_idle(r), &idle);
  return idle;
}
/* The relay's kick timer, which counts as a handle. */
static void init_kick(relay_t *r) {
  uv_timer_init(r->loop, &r->kick);
  r->kick.data = r;
  r->open_handles++;
}

/* The relay's JavaScript value and its async context (made already if it called JavaScript). */
static void wrap_relay(napi_env env, relay_t *r, napi_value wrapper) {
  if (!r->async) napi_async_init(env, wrapper, string_value(env, "pgfence.relay"), &r->async);
  napi_wrap(env, wrapper, r, wrapper_finalize, NULL, NULL);
  r->wrapper_alive = 1;
}

/* relay's arguments, in order: positional, since a property read by name costs a string made
 * and looked up each time, at every session's start. */
enum relay_argument {
  CLIENT_FD,
  SERVER_FD,
  FRONTEND_TYPES,
  SETTINGS_AT, /* the settings, in setting order */
  KEEPS_SERVER = SETTINGS_AT + SETTINGS,
  CLIENT_TLS,
  SERVER_TLS,
  SERVER_LINK,
  CLIENT_LOGIN,
  CALLBACKS_AT, /* the callbacks, in callback order */
  RELAY_ARGUMENTS = CALLBACKS_AT + CALLBACKS
};

/* relay(clientFd, serverFd, frontendTypes, maxMessageBytes, interceptTypes, statementNeedles,
 * queryCache, keepsServer, clientTls, serverTls, serverLink, clientLogin, onMessage,
 * onServerMessage, onClose), the session's progress so far in the progress slots
 * (carry_progress) → { stop(), progress(), update(), closeWhenIdle() }. The caller has stopped
 * reading both sockets and has nothing queued on them; the relay reads and writes duplicates of
 * their descriptors, or, given a server link that waits, the link's. */
static napi_value js_relay(napi_env env, napi_callback_info info) {
  size_t argc = RELAY_ARGUMENTS;
  napi_value argv[RELAY_ARGUMENTS], wrapper;
  int32_t client_fd, server_fd;
  uv_loop_t *loop;
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (argc < RELAY_ARGUMENTS) {
    napi_throw_error(env, NULL, "pgfence relay: relay() takes 15 arguments");
    return NULL;
  }
  CHECK(napi_get_value_int32(env, argv[CLIENT_FD], &client_fd));
  CHECK(napi_get_value_int32(env, argv[SERVER_FD], &server_fd));
  CHECK(napi_get_uv_event_loop(env, &loop));
  addon_data_t *data = NULL;
  napi_value constructor;
  CHECK(napi_get_instance_data(env, (void **)&data));
  CHECK(napi_get_reference_value(env, data->relay_class, &constructor));
  CHECK(napi_new_instance(env, constructor, 0, NULL, &wrapper));
  relay_t *r = calloc(1, sizeof *r);
  if (!r) {
    napi_throw_error(env, NULL, "pgfence relay: out of memory");
    return NULL;
  }
  r->env = env;
  carry_progress(data->progress_slots, &r->progress);
  r->progress.progress_at = uv_now(loop);
  fill_types(env, argv[FRONTEND_TYPES], r->from_client.valid);
  bool keeps_server = false;
  napi_get_value_bool(env, argv[KEEPS_SERVER], &keeps_server);
  r->keeps_server = keeps_server;
  r->loop = loop;
  if (configure(env, r, argv + SETTINGS_AT) < 0 ||
      attach_client(env, r, loop, client_fd, argv[CLIENT_LOGIN], argv[CLIENT_TLS]) < 0) {
    if (r->queries_ref) napi_delete_reference(env, r->queries_ref);
    free_needles(r);
    free(r);
    napi_throw_error(env, NULL, "pgfence relay: cannot watch the client socket");
    return NULL;
  }
  if (attach_server(env, r, loop, server_fd, argv[SERVER_LINK], argv[SERVER_TLS]) < 0) {
    if (r->queries_ref) napi_delete_reference(env, r->queries_ref);
    if (r->client->channel) tls_channel_resume(r->client->channel);
    /* The client's handle lives in r (both go once its close completes), or in its login. */
    if (r->client == &r->own_client) {
      side_close(r->client, on_failed_init_closed);
    } else {
      login_side_close(r->client);
      free_needles(r);
      free(r);
    }
    napi_throw_error(env, NULL, "pgfence relay: cannot watch the server socket");
    return NULL;
  }
  for (int i = 0; i < CALLBACKS; i++)
    napi_create_reference(env, argv[CALLBACKS_AT + i], 1, &r->callbacks[i]);
  wrap_relay(env, r, wrapper);
  init_kick(r);
  update_polls(r);
  kick_if_pending(r);
  return wrapper;
}

/* ---- a lent relay's settings, read once per shelf entry (relay-settings.h) ---- */

relay_settings_t *relay_settings_read(napi_env env, napi_value settings) {
  napi_value values[1 + SETTINGS];
  for (uint32_t i = 0; i < 1 + SETTINGS; i++)
    if (napi_get_element(env, settings, i, &values[i]) != napi_ok) return NULL;
  relay_settings_t *read = calloc(1, sizeof *read);
  if (!read) return NULL;
  fill_types(env, values[0], read->valid);
  if (read_settings(env, values + 1, read) < 0) {
    relay_settings_free(env, read);
    return NULL;
  }
  return read;
}

void relay_settings_free(napi_env env, relay_settings_t *settings) {
  if (!settings) return;
  free_needle_list(settings->needles, settings->needle_count);
  if (settings->queries_ref) napi_delete_reference(env, settings->queries_ref);
  free(settings);
}

relay_t *relay_lent(napi_env env, side_t *client, server_link_t *link,
                    const relay_settings_t *settings, shelf_entry_t *entry,
                    const relay_lender_t *lender, void *lease) {
  relay_t *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->env = env;
  r->loop = client->loop;
  r->progress.status = TRANSACTION_STATUS_IDLE;
  r->progress.progress_at = uv_now(r->loop);
  r->keeps_server = 1;
  memcpy(r->from_client.valid, settings->valid, sizeof settings->valid);
  take_settings(r, settings, 1);
  r->client = client;
  client->relay = r;
  client->on_poll = on_poll;
  link_adopt(link, r);
  r->server = link_side(link);
  r->server->on_poll = on_poll;
  r->lend = entry;
  r->lender = lender;
  r->lease = lease;
  r->open_handles += 2;
  init_kick(r);
  update_polls(r);
  kick_if_pending(r);
  return r;
}

napi_value relay_value(napi_env env, relay_t *r) {
  addon_data_t *data = NULL;
  napi_value constructor, wrapper;
  if (napi_get_instance_data(env, (void **)&data) != napi_ok ||
      napi_get_reference_value(env, data->relay_class, &constructor) != napi_ok ||
      napi_new_instance(env, constructor, 0, NULL, &wrapper) != napi_ok)
    return NULL;
  wrap_relay(env, r, wrapper);
  return wrapper;
}

int relay_lent_start(relay_t *r, napi_value callbacks) {
  napi_env env = r->env;
  napi_value fns[CALLBACKS];
  for (uint32_t i = 0; i < CALLBACKS; i++) {
    napi_valuetype type = napi_undefined;
    if (napi_get_element(env, callbacks, i, &fns[i]) != napi_ok ||
        napi_typeof(env, fns[i], &type) != napi_ok || type != napi_function) {
      relay_stop(r);
      return -1;
    }
  }
  for (int i = 0; i < CALLBACKS; i++) napi_create_reference(env, fns[i], 1, &r->callbacks[i]);
  return 0;
}

void relay_lent_stop(relay_t *r) { relay_stop(r); }

void *relay_take_lease(relay_t *r) {
  void *lease = r->lease;
  r->lease = NULL;
  return lease;
}

static void free_keys(comment_keys_t *keys) {
  free((char *)keys->token);
  free((char *)keys->resource);
}

static void shared_cache_finalize(napi_env env, void *data, void *hint) {
  (void)hint;
  shared_cache_t *shared = data;
  napi_delete_reference(env, shared->template_for);
  query_cache_free(&shared->cache);
  free_keys(&shared->keys);
  free(shared);
}

/* { token, resource }: the comment keys. Returns -1 when they are not strings or memory ran out. */
static int read_keys(napi_env env, napi_value object, comment_keys_t *keys) {
  keys->token = latin1_string(env, get_named(env, object, "token"));
  keys->resource = latin1_string(env, get_named(env, object, "resource"));
  return keys->token && keys->resource ? 0 : -1;
}

/* createQueryCache(capacity, { token, resource }, templateFor) → an object to pass as a relay's
 * queryCache. */
static napi_value js_create_query_cache(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3], wrapper;
  uint32_t capacity;
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  CHECK(napi_get_value_uint32(env, argv[0], &capacity));
  CHECK(napi_create_object(env, &wrapper));
  shared_cache_t *shared = calloc(1, sizeof *shared);
  if (!shared || read_keys(env, argv[1], &shared->keys) < 0 ||
      query_cache_init(&shared->cache, capacity) < 0) {
    if (shared) free_keys(&shared->keys);
    free(shared);
    napi_throw_error(env, NULL, "pgfence relay: the comment keys are strings; or out of memory");
    return NULL;
  }
  CHECK(napi_create_reference(env, argv[2], 1, &shared->template_for));
  CHECK(napi_wrap(env, wrapper, shared, shared_cache_finalize, NULL, NULL));
  return wrapper;
}

/* queryCacheStats(cache) → { hits, misses }: lookups so far, for metrics. */
static napi_value js_query_cache_stats(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1], result;
  shared_cache_t *shared;
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  CHECK(napi_unwrap(env, argv[0], (void **)&shared));
  CHECK(napi_create_object(env, &result));
  set_number(env, result, "hits", (double)shared->hits);
  set_number(env, result, "misses", (double)shared->misses);
  return result;
}

/* normaliseQuery(text: Buffer, { token, resource }) → { key: Buffer, values: Buffer[] }, or
 * null when the text takes the uncached path. For tests. */
static napi_value js_normalise_query(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2], result, values;
  void *data;
  size_t len;
  comment_keys_t keys = {NULL, NULL};
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  CHECK(napi_get_buffer_info(env, argv[0], &data, &len));
  int status = read_keys(env, argv[1], &keys) < 0
                   ? NORMALISE_FAILED
                   : normalise_query(data, len, &keys, &scratch);
  free_keys(&keys);
  if (status == NORMALISE_FAILED) {
    napi_throw_error(env, NULL, "pgfence relay: the comment keys are strings; or out of memory");
    return NULL;
  }
  if (status == NOT_NORMALISABLE) {
    CHECK(napi_get_null(env, &result));
    return result;
  }
  CHECK(napi_create_object(env, &result));
  napi_set_named_property(env, result, "key", buffer_copy(env, scratch.key.data, scratch.key.len));
  CHECK(napi_create_array_with_length(env, scratch.count, &values));
  for (size_t i = 0; i < scratch.count; i++) {
    const span_t *value = &scratch.values[i];
    napi_set_element(env, values, (uint32_t)i,
                     buffer_copy(env, value_bytes(&scratch, data, value), value->len));
  }
  napi_set_named_property(env, result, "values", values);
  return result;
}

/* The relay's class: its methods are made once, on the prototype, not for each relay. */
static napi_value js_relay_construct(napi_env env, napi_callback_info info) {
  napi_value self;
  napi_get_cb_info(env, info, NULL, NULL, &self, NULL);
  return self;
}

static void addon_data_finalize(napi_env env, void *data, void *hint) {
  (void)hint;
  addon_data_t *addon = data;
  napi_delete_reference(env, addon->relay_class);
  napi_delete_reference(env, addon->progress_array);
  free(addon);
}

/* relayProgressSlots() → the Float64Array progress() writes into (one per addon instance). */
static napi_value js_relay_progress_slots(napi_env env, napi_callback_info info) {
  (void)info;
  addon_data_t *data;
  napi_value array;
  CHECK(napi_get_instance_data(env, (void **)&data));
  CHECK(napi_get_reference_value(env, data->progress_array, &array));
  return array;
}

/* The addon's own data: the relay class and the progress slots. */
static int set_addon_data(napi_env env, napi_value constructor) {
  addon_data_t *data = calloc(1, sizeof *data);
  napi_value buffer, array;
  void *slots;
  if (!data) return -1;
  if (napi_create_arraybuffer(env, PROGRESS_SLOTS * sizeof(double), &slots, &buffer) != napi_ok ||
      napi_create_typedarray(env, napi_float64_array, PROGRESS_SLOTS, buffer, 0, &array) !=
          napi_ok ||
      napi_create_reference(env, array, 1, &data->progress_array) != napi_ok ||
      napi_create_reference(env, constructor, 1, &data->relay_class) != napi_ok ||
      napi_set_instance_data(env, data, addon_data_finalize, NULL) != napi_ok) {
    free(data);
    return -1;
  }
  data->progress_slots = slots;
  return 0;
}

static napi_value define_relay_class(napi_env env) {
  static const napi_property_descriptor methods[] = {
      {"stop", NULL, js_stop, NULL, NULL, NULL, napi_default_method, NULL},
      {"progress", NULL, js_progress, NULL, NULL, NULL, napi_default_method, NULL},
      {"update", NULL, js_update, NULL, NULL, NULL, napi_default_method, NULL},
      {"closeWhenIdle", NULL, js_close_when_idle, NULL, NULL, NULL, napi_default_method, NULL}};
  napi_value constructor;
  if (napi_define_class(env, "NativeRelay", NAPI_AUTO_LENGTH, js_relay_construct, NULL,
                        sizeof methods / sizeof *methods, methods, &constructor) != napi_ok ||
      set_addon_data(env, constructor) < 0) {
    napi_throw_error(env, NULL, "pgfence relay: cannot define the relay class");
    return NULL;
  }
  return constructor;
}

NAPI_MODULE_INIT() {
  if (!define_relay_class(env)) return NULL;
  /* Without a park, each socket's poll handle is made and closed as libuv's way is. */
  poll_park_open(env);
  static const named_function_t functions[] = {{"relay", js_relay},
                                               {"createQueryCache", js_create_query_cache},
                                               {"queryCacheStats", js_query_cache_stats},
                                               {"normaliseQuery", js_normalise_query},
                                               {"setKeepalive", js_set_keepalive},
                                               {"tlsContext", js_tls_context},
                                               {"tlsStart", js_tls_start},
                                               {"clientLogins", js_client_logins},
                                               {"loginsRemember", js_logins_remember},
                                               {"loginsTls", js_logins_tls},
                                               {"loginStart", js_login_start},
                                               {"loginClose", js_login_close},
                                               {"loginRead", js_login_read},
                                               {"acceptClients", js_accept_clients},
                                               {"acceptorListen", js_acceptor_listen},
                                               {"acceptorSettings", js_acceptor_settings},
                                               {"acceptorRoom", js_acceptor_room},
                                               {"acceptorPending", js_acceptor_pending},
                                               {"acceptorStop", js_acceptor_stop},
                                               {"acceptorCloseLogins", js_acceptor_close_logins},
                                               {"peerName", js_peer_name},
                                               {"linkReset", js_link_reset},
                                               {"linkShelf", js_link_shelf},
                                               {"shelve", js_shelve},
                                               {"unshelve", js_unshelve},
                                               {"shelfReturns", js_shelf_returns},
                                               {"shelfReport", js_shelf_report},
                                               {"loginsLend", js_logins_lend},
                                               {"linkClose", js_link_close},
                                               {"linkResetting", js_link_resetting},
                                               {"linkWatch", js_link_watch},
                                               {"releaseFreeMemory", js_release_free_memory},
                                               {"relayProgressSlots", js_relay_progress_slots}};
  define_functions(env, exports, functions, sizeof functions / sizeof *functions);
  return exports;
}
