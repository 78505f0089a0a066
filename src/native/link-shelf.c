/* Idle server links a login in C may be lent (link-shelf.h). */
#define NAPI_VERSION 8
#include "link-shelf.h"

#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "napi-tagged.h"
#include "protocol-codes.h"

static const napi_type_tag SHELF_TAG = {0x7067666e73686c66ULL, 0x6c696e6b73686c66ULL};

struct shelf_entry {
  struct shelf_entry *next;
  link_shelf_t *shelf;
  server_link_t *link;
  napi_ref value; /* the link's JavaScript value, kept alive while shelved */
  napi_ref on_end; /* what the link tells of its end once back on the shelf quietly */
  bytes_t packet, greeting, reset;
  int reset_queries;
  uint64_t reset_ms;
  relay_settings_t *settings; /* read once here, borrowed by each relay lent the link */
  uint64_t until;       /* uv_now past which it is not lent; UINT64_MAX: no limit */
  uint64_t reset_until; /* uv_now past which a reset under way ends the link */
  /* Its quiet returns JavaScript has not taken in (shelfReturns): one note however many, the
   * key its next client is greeted with and their clients' transactions. */
  struct shelf_entry *returned_next;
  int returned;
  uint8_t return_key[8];
  double return_transactions;
};

struct link_shelf {
  napi_env env;
  uv_loop_t *loop;
  shelf_entry_t *entries;
  shelf_quiet_t quiet; /* the head of the leases JavaScript has not heard of */
  shelf_entry_t *returned; /* the entries with quiet returns to take in, newest first */
  double dropped_transactions; /* those of quiet returns whose entry went before */
  uv_timer_t timer; /* the earliest reset_until of a reset under way */
  int lent;         /* entries out with a relay: the shelf is freed after them */
  int finalized, timer_open;
  int transactions; /* a transaction pool's (linkShelf's argument) */
};

link_shelf_t *shelf_of(napi_env env, napi_value value) {
  link_shelf_t *shelf = tagged(env, value, &SHELF_TAG);
  return shelf && !shelf->finalized ? shelf : NULL;
}

static void free_if_done(link_shelf_t *shelf) {
  if (!shelf->finalized || shelf->timer_open || shelf->lent > 0) return;
  free(shelf);
}

/* An entry that goes leaves its quiet returns' transactions to be counted without it. */
static void forget_returns(shelf_entry_t *entry) {
  if (!entry->returned) return;
  link_shelf_t *shelf = entry->shelf;
  shelf_entry_t **at = &shelf->returned;
  while (*at != entry) at = &(*at)->returned_next;
  *at = entry->returned_next;
  shelf->dropped_transactions += entry->return_transactions;
}

static void entry_free(napi_env env, shelf_entry_t *entry) {
  forget_returns(entry);
  if (entry->value) napi_delete_reference(env, entry->value);
  if (entry->on_end) napi_delete_reference(env, entry->on_end);
  relay_settings_free(env, entry->settings);
  bytes_free(&entry->packet);
  bytes_free(&entry->greeting);
  bytes_free(&entry->reset);
  free(entry);
}

/* Unlinks and frees the entry at `*at`. */
static void drop(link_shelf_t *shelf, shelf_entry_t **at) {
  shelf_entry_t *entry = *at;
  *at = entry->next;
  entry_free(shelf->env, entry);
}

int shelf_lend(link_shelf_t *shelf, const uint8_t *packet, size_t len, uint64_t now,
               shelf_lend_t *out) {
  for (shelf_entry_t **at = &shelf->entries; *at; at = &(*at)->next) {
    shelf_entry_t *entry = *at;
    /* A link that ended meanwhile waits no more: JavaScript hears of it and unshelves it. */
    if (!link_is_waiting(entry->link) || now > entry->until) continue;
    if (entry->packet.len != len || memcmp(entry->packet.data, packet, len) != 0) continue;
    *at = entry->next;
    shelf->lent++;
    out->link = entry->link;
    out->greeting = &entry->greeting;
    out->settings = entry->settings;
    out->entry = entry;
    return 0;
  }
  return -1;
}

/* Ends each link whose reset is overdue, then waits for the next. JavaScript, told of an end,
 * may change the shelf: the search starts again after each. */
static void on_timer(uv_timer_t *timer) {
  link_shelf_t *shelf = timer->data;
  uint64_t now = uv_now(shelf->loop), next;
  shelf_entry_t *entry;
  do {
    next = UINT64_MAX;
    for (entry = shelf->entries; entry; entry = entry->next) {
      if (!link_is_resetting(entry->link)) continue;
      if (entry->reset_until <= now) break;
      if (entry->reset_until < next) next = entry->reset_until;
    }
    if (entry) link_end(entry->link);
  } while (entry);
  if (next != UINT64_MAX) uv_timer_start(&shelf->timer, on_timer, next - now, 0);
}

static void arm(link_shelf_t *shelf, uint64_t at) {
  uint64_t now = uv_now(shelf->loop);
  uint64_t due = uv_timer_get_due_in(&shelf->timer);
  if (uv_is_active((uv_handle_t *)&shelf->timer) && due <= at - now) return;
  uv_timer_start(&shelf->timer, on_timer, at - now, 0);
}

/* Whether the ParameterStatus at `a` names what the one at `b` names. */
static int same_name(const uint8_t *a, const uint8_t *b) {
  const uint8_t *x = a + HEADER_BYTES, *y = b + HEADER_BYTES;
  size_t n = 1 + read_u32(a + 1) - HEADER_BYTES, m = 1 + read_u32(b + 1) - HEADER_BYTES;
  const uint8_t *end = memchr(x, 0, n);
  return end && (size_t)(end - x) < m && memcmp(x, y, (size_t)(end - x) + 1) == 0;
}

/* Whether the message at `at` is in the greeting. */
static int greeted(const uint8_t *message, size_t n, const bytes_t *greeting) {
  for (size_t g = 0; g + HEADER_BYTES <= greeting->len;) {
    size_t m = 1 + read_u32(greeting->data + g + 1);
    if (m == n && memcmp(greeting->data + g, message, n) == 0) return 1;
    g += m;
  }
  return 0;
}

/* A clean reset leaves each parameter it reports as the greeting has it (the DISCARD's value
 * may be followed by the client's setting, carried again): the connection is as it was when
 * shelved. Otherwise JavaScript's view of it is not, and it ends. */
static int statuses_greeted(const bytes_t *statuses, const bytes_t *greeting) {
  for (size_t at = 0; at + HEADER_BYTES <= statuses->len;) {
    const uint8_t *message = statuses->data + at;
    size_t n = 1 + read_u32(message + 1), later = at + n;
    while (later + HEADER_BYTES <= statuses->len && !same_name(message, statuses->data + later))
      later += 1 + read_u32(statuses->data + later + 1);
    int last = later + HEADER_BYTES > statuses->len;
    if (last && !greeted(message, n, greeting)) return 0;
    at += n;
  }
  return 1;
}

static void on_reset(void *data, server_link_t *link, const bytes_t *statuses) {
  shelf_entry_t *entry = data;
  if (!statuses_greeted(statuses, &entry->greeting)) link_end(link);
}

/* Where the greeting's BackendKeyData body starts: before ReadyForQuery (6 bytes), its 12. */
#define KEY_FROM_END (1 + 4 + 1 + 8)

/* The link goes back on the shelf (or ends, the shelf gone), its reset under way, or waiting
 * at once when there is nothing to undo. */
static void put_back(shelf_entry_t *entry, server_link_t *link, const uint8_t key[8],
                     napi_value on_event, int reset) {
  link_shelf_t *shelf = entry->shelf;
  napi_env env = shelf->env;
  shelf->lent--;
  memcpy(entry->greeting.data + entry->greeting.len - KEY_FROM_END, key, 8);
  if (!shelf->finalized) {
    entry->next = shelf->entries;
    shelf->entries = entry;
    if (reset) arm(shelf, entry->reset_until = uv_now(shelf->loop) + entry->reset_ms);
  }
  if (reset) link_reset_in_c(link, &entry->reset, entry->reset_queries, on_event, on_reset, entry);
  else link_wait_in_c(link, on_event);
  if (shelf->finalized) {
    link_end(link);
    entry_free(env, entry);
    free_if_done(shelf);
  }
}

void shelf_return(shelf_entry_t *entry, server_link_t *link, const uint8_t key[8],
                  napi_value on_event) {
  napi_env env = entry->shelf->env;
  napi_delete_reference(env, entry->on_end);
  napi_create_reference(env, on_event, 1, &entry->on_end);
  put_back(entry, link, key, on_event, 1);
}

int shelf_may_return(const shelf_entry_t *entry, uint64_t now) {
  return !entry->shelf->finalized && now <= entry->until;
}

/* Keeps a quiet return for JavaScript, in the entry's note: the latest key is the one that
 * counts, the client it greets being the link's only one since. */
static void note_return(shelf_entry_t *entry, const uint8_t key[8], double transactions) {
  if (!entry->returned) {
    entry->returned = 1;
    entry->returned_next = entry->shelf->returned;
    entry->shelf->returned = entry;
  }
  memcpy(entry->return_key, key, 8);
  entry->return_transactions += transactions;
}

void shelf_return_quietly(shelf_entry_t *entry, server_link_t *link, const uint8_t key[8],
                          double transactions) {
  link_shelf_t *shelf = entry->shelf;
  napi_value on_end;
  note_return(entry, key, transactions);
  napi_get_reference_value(shelf->env, entry->on_end, &on_end);
  /* A transaction pool's quiet client left nothing that outlives its transactions: JavaScript
   * intercepts what could (a statement that sets, prepares or keeps something, a ParameterStatus),
   * which would have reported the lease. So, as a client JavaScript serves that touched no
   * setting, it leaves the connection to the next without a reset. */
  put_back(entry, link, key, on_end, !shelf->transactions);
}

int shelf_transactions(const link_shelf_t *shelf) { return shelf->transactions; }

shelf_quiet_t *shelf_quiet(link_shelf_t *shelf) { return &shelf->quiet; }

void shelf_entry_drop(shelf_entry_t *entry) {
  link_shelf_t *shelf = entry->shelf;
  shelf->lent--;
  entry_free(shelf->env, entry);
  free_if_done(shelf);
}

static void on_timer_closed(uv_handle_t *handle) {
  link_shelf_t *shelf = handle->data;
  shelf->timer_open = 0;
  free_if_done(shelf);
}

static void shelf_finalize(napi_env env, void *data, void *hint) {
  link_shelf_t *shelf = data;
  shelf->finalized = 1;
  while (shelf->entries) drop(shelf, &shelf->entries);
  uv_close((uv_handle_t *)&shelf->timer, on_timer_closed);
}

static napi_value throw_error(napi_env env, const char *message) {
  napi_throw_error(env, NULL, message);
  return NULL;
}

napi_value js_link_shelf(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1], value;
  bool transactions = false;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 ||
      napi_get_value_bool(env, argv[0], &transactions) != napi_ok)
    return throw_error(env, "pgfence shelf: linkShelf(transactionPool)");
  link_shelf_t *shelf = calloc(1, sizeof *shelf);
  if (!shelf) return throw_error(env, "pgfence shelf: out of memory");
  shelf->env = env;
  shelf->transactions = transactions;
  shelf->quiet.next = shelf->quiet.prev = &shelf->quiet;
  if (napi_get_uv_event_loop(env, &shelf->loop) != napi_ok ||
      napi_create_external(env, shelf, shelf_finalize, NULL, &value) != napi_ok) {
    free(shelf);
    return throw_error(env, "pgfence shelf: linkShelf() failed");
  }
  uv_timer_init(shelf->loop, &shelf->timer);
  uv_unref((uv_handle_t *)&shelf->timer);
  shelf->timer.data = shelf;
  shelf->timer_open = 1;
  napi_type_tag_object(env, value, &SHELF_TAG);
  return value;
}

/* A Buffer's bytes copied into `out`; -1 when the value is no Buffer or memory runs out. */
static int copy_buffer(napi_env env, napi_value value, bytes_t *out) {
  void *data = NULL;
  size_t len = 0;
  if (napi_get_buffer_info(env, value, &data, &len) != napi_ok) return -1;
  return bytes_append(out, data, len);
}

/* A greeting ends in BackendKeyData, then ReadyForQuery: its key can be replaced in place. */
static int keyed_greeting(const bytes_t *greeting) {
  if (greeting->len < KEY_FROM_END + HEADER_BYTES) return 0;
  const uint8_t *key = greeting->data + greeting->len - KEY_FROM_END - HEADER_BYTES;
  return key[0] == BACKEND_BACKEND_KEY_DATA && read_u32(key + 1) == 12 &&
         greeting->data[greeting->len - 6] == BACKEND_READY_FOR_QUERY;
}

napi_value js_shelve(napi_env env, napi_callback_info info) {
  size_t argc = 10;
  napi_value argv[10], result;
  napi_valuetype on_end = napi_undefined;
  link_shelf_t *shelf = NULL;
  server_link_t *link = NULL;
  double lend_for = -1, reset_ms = 0;
  int32_t queries = 0;
  shelf_entry_t *entry = calloc(1, sizeof *entry);
  if (!entry || napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 9 ||
      !(shelf = shelf_of(env, argv[0])) || !(link = link_of_value(env, argv[1])) ||
      copy_buffer(env, argv[2], &entry->packet) < 0 ||
      copy_buffer(env, argv[3], &entry->greeting) < 0 || !keyed_greeting(&entry->greeting) ||
      !(entry->settings = relay_settings_read(env, argv[4])) ||
      napi_get_value_double(env, argv[5], &lend_for) != napi_ok ||
      copy_buffer(env, argv[6], &entry->reset) < 0 ||
      napi_get_value_int32(env, argv[7], &queries) != napi_ok || queries < 1 ||
      napi_get_value_double(env, argv[8], &reset_ms) != napi_ok || !(reset_ms >= 0) ||
      napi_typeof(env, argv[9], &on_end) != napi_ok || on_end != napi_function) {
    if (entry) entry_free(env, entry);
    return throw_error(env, "pgfence shelf: shelve(shelf, link, packet, greeting, settings, "
                            "lendForMs, reset, resetQueries, resetMs, onEnd)");
  }
  /* It ended, or a relay took it, since JavaScript last heard: not one to lend. */
  napi_get_boolean(env, link_is_waiting(link), &result);
  if (!link_is_waiting(link)) {
    entry_free(env, entry);
    return result;
  }
  entry->shelf = shelf;
  entry->link = link;
  entry->until = lend_for < 0 ? UINT64_MAX : uv_now(shelf->loop) + (uint64_t)lend_for;
  entry->reset_queries = queries;
  entry->reset_ms = (uint64_t)reset_ms;
  napi_create_reference(env, argv[1], 1, &entry->value);
  napi_create_reference(env, argv[9], 1, &entry->on_end);
  entry->next = shelf->entries;
  shelf->entries = entry;
  return result;
}

napi_value js_unshelve(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2], result;
  link_shelf_t *shelf = NULL;
  bool waited = false;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 2 ||
      !(shelf = shelf_of(env, argv[0])))
    return throw_error(env, "pgfence shelf: unshelve(shelf, link)");
  server_link_t *link = link_of_value(env, argv[1]);
  for (shelf_entry_t **at = &shelf->entries; link && *at; at = &(*at)->next) {
    shelf_entry_t *entry = *at;
    if (entry->link != link) continue;
    *at = entry->next;
    /* A reset under way cannot be taken back: the connection ends, JavaScript told. */
    if (link_is_resetting(link)) link_end(link);
    waited = link_is_waiting(link);
    entry_free(env, entry);
    break;
  }
  napi_get_boolean(env, waited, &result);
  return result;
}

/* Sets result[at..at+3] to a quiet return: the link (undefined: gone), its key, transactions. */
static void set_return(napi_env env, napi_value result, uint32_t at, napi_value link,
                       const uint8_t key[8], double transactions) {
  napi_value value;
  napi_set_element(env, result, at, link);
  napi_create_uint32(env, read_u32(key), &value);
  napi_set_element(env, result, at + 1, value);
  napi_create_uint32(env, read_u32(key + 4), &value);
  napi_set_element(env, result, at + 2, value);
  napi_create_double(env, transactions, &value);
  napi_set_element(env, result, at + 3, value);
}

napi_value js_shelf_returns(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1], result, none;
  link_shelf_t *shelf = NULL;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 ||
      !(shelf = shelf_of(env, argv[0])))
    return throw_error(env, "pgfence shelf: shelfReturns(shelf)");
  napi_get_undefined(env, &none);
  if (!shelf->returned && shelf->dropped_transactions == 0) return none;
  napi_create_array(env, &result);
  uint32_t at = 0;
  for (shelf_entry_t *entry = shelf->returned; entry; entry = entry->returned_next, at += 4) {
    napi_value link;
    napi_get_reference_value(env, entry->value, &link);
    set_return(env, result, at, link, entry->return_key, entry->return_transactions);
    entry->returned = 0;
    entry->return_transactions = 0;
  }
  shelf->returned = NULL;
  if (shelf->dropped_transactions != 0) {
    static const uint8_t NO_KEY[8] = {0};
    set_return(env, result, at, none, NO_KEY, shelf->dropped_transactions);
    shelf->dropped_transactions = 0;
  }
  return result;
}
