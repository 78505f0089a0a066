/*
 * Lending in C: a login accepted in C that authenticated is served at once on a server link
 * JavaScript shelved for its startup packet (link-shelf.h), without JavaScript choosing: the
 * answer and the greeting go to the client in one write, and a relay made in C over the login's
 * side and the link's carries the client, quietly. JavaScript is told (LENT, giving the relay its
 * callbacks) only when it must take part: the relay has a message or an end for it, or
 * JavaScript asks (shelfReport) before it reads or changes what a lease would change (its pools,
 * its sessions, the cancel keys). A client that says goodbye cleanly before that leaves its link
 * back on the shelf (shelf_return_quietly), and JavaScript never hears of it but for its count.
 * A login inside TLS is lent alike: the relay reads its TLS connection, and JavaScript, once
 * told, speaks to the client through a TLS channel the relay gives the connection to when it
 * stops (login_report_lent).
 *
 * JavaScript API (src/relay/link-shelf.ts):
 *   loginsLend(logins, shelf): logins accepted from now on may be lent from `shelf`; from a
 *     transaction pool's (linkShelf), JavaScript is given a duplicate of the client's descriptor,
 *     to read the client itself once the relay stops
 *   shelfReport(shelf): reports every quiet lease of the shelf now
 */
#define NAPI_VERSION 8
#include <errno.h>
#include <fcntl.h>
#include <node_api.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>
#include <uv.h>

#include "login-lend.h"

#include "client-login.h"
#include "link-shelf.h"
#include "relay.h"

/* A login lent a connection quietly: in its shelf's list until reported or over. */
typedef struct {
  shelf_quiet_t node; /* first: the list's node is the lease */
  shelf_lend_t lent;
  side_t *client;
  relay_t *relay;
  napi_env env;
  int duplicate; /* JavaScript gets a duplicate of the client's descriptor (a transaction pool) */
} lease_t;

typedef struct {
  link_shelf_t *shelf;
  napi_env env;
  int duplicate;
} lender_t;

/* Queues what the client did not take of `p` after `sent` of it was written; -1 when out of
 * memory. */
static int queue_rest(side_t *client, const uint8_t *p, size_t n, size_t *sent) {
  size_t skip = *sent < n ? *sent : n;
  *sent -= skip;
  return bytes_append(&client->out, p + skip, n - skip);
}

/* The answer and the greeting, in one write (inside TLS: one record); what the socket does not
 * take, the relay sends, and a failed socket, it reports. */
static void greet(side_t *client, const uint8_t *answer, size_t answer_len, const bytes_t *greeting) {
  if (client->io.ssl) {
    const char *detail = NULL;
    if (bytes_append(&client->out, answer, answer_len) < 0 ||
        bytes_append(&client->out, greeting->data, greeting->len) < 0) {
      client->out.len = 0;
      return;
    }
    ssize_t n = stream_write(&client->io, client->out.data, client->out.len, &detail);
    size_t sent = n > 0 ? (size_t)n : 0;
    memmove(client->out.data, client->out.data + sent, client->out.len - sent);
    client->out.len -= sent;
    return;
  }
  struct iovec iov[2] = {{(void *)answer, answer_len}, {greeting->data, greeting->len}};
  ssize_t n;
  do n = writev(client->io.fd, iov, 2);
  while (n < 0 && errno == EINTR);
  size_t sent = n > 0 ? (size_t)n : 0;
  if (queue_rest(client, answer, answer_len, &sent) < 0 ||
      queue_rest(client, greeting->data, greeting->len, &sent) < 0)
    client->out.len = 0; /* the relay's first write then fails the client: nothing half sent */
}

static void unlist(lease_t *l) {
  l->node.prev->next = l->node.next;
  l->node.next->prev = l->node.prev;
}

/* The lease ended unreported: its link back on the shelf, or its relay stopped. */
static void over(void *lease) {
  lease_t *l = lease;
  unlist(l);
  login_lent_over(l->client);
  free(l);
}

/* JavaScript hears of the lease: the relay's value, the link's and the client's descriptor (a
 * transaction pool's own duplicate, made now); its answer starts the relay, or stops it. */
static void wake(void *lease) {
  lease_t *l = lease;
  unlist(l);
  napi_env env = l->env;
  int fd = l->duplicate ? fcntl(l->client->io.fd, F_DUPFD_CLOEXEC, 0) : l->client->io.fd;
  napi_value relay = fd >= 0 ? relay_value(env, l->relay) : NULL;
  if (!relay) {
    if (l->duplicate && fd >= 0) close(fd);
    login_lent_over(l->client);
    relay_lent_stop(l->relay);
  } else {
    napi_value answer = login_report_lent(l->client, relay, link_js_value(l->lent.link), fd);
    if (!answer) napi_get_undefined(env, &answer);
    relay_lent_start(l->relay, answer);
  }
  free(l);
}

static const relay_lender_t RELAY_LENDER = {wake, over};

static int lend(void *ctx, side_t *client, const uint8_t *packet, size_t len,
                const uint8_t *answer, size_t answer_len) {
  lender_t *lender = ctx;
  lease_t *l = malloc(sizeof *l);
  if (!l) return LEND_NONE;
  if (shelf_lend(lender->shelf, packet, len, uv_now(client->loop), &l->lent) < 0) {
    free(l);
    return LEND_NONE;
  }
  l->client = client;
  l->env = lender->env;
  l->duplicate = lender->duplicate;
  greet(client, answer, answer_len, l->lent.greeting);
  shelf_quiet_t *head = shelf_quiet(lender->shelf);
  l->node.next = head;
  l->node.prev = head->prev;
  head->prev->next = &l->node;
  head->prev = &l->node;
  l->relay = relay_lent(l->env, client, l->lent.link, l->lent.settings, l->lent.entry,
                        &RELAY_LENDER, l);
  if (l->relay) return LEND_QUIET;
  unlist(l);
  shelf_entry_drop(l->lent.entry);
  link_end(l->lent.link); /* JavaScript closes the connection it thought idle */
  free(l);
  return LEND_FAILED;
}

static const login_lender_t LENDER = {lend};

static void lender_finalize(napi_env env, void *data, void *hint) { free(data); }

napi_value js_logins_lend(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  setup_t *setup = NULL;
  link_shelf_t *shelf = NULL;
  lender_t *lender = NULL;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 2 ||
      !(setup = logins_setup(env, argv[0])) || !(shelf = shelf_of(env, argv[1])) ||
      !(lender = malloc(sizeof *lender))) {
    napi_throw_error(env, NULL, "pgfence login: loginsLend(logins, shelf)");
    return NULL;
  }
  *lender = (lender_t){shelf, env, shelf_transactions(shelf)};
  /* The lender lives as long as the shelf's JavaScript value. */
  napi_add_finalizer(env, argv[1], lender, lender_finalize, NULL, NULL);
  logins_lend_with(setup, &LENDER, lender);
  return NULL;
}

napi_value js_shelf_report(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  link_shelf_t *shelf = NULL;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 ||
      !(shelf = shelf_of(env, argv[0]))) {
    napi_throw_error(env, NULL, "pgfence shelf: shelfReport(shelf)");
    return NULL;
  }
  shelf_quiet_t *head = shelf_quiet(shelf);
  /* Each report runs JavaScript, which may end other leases: the walk starts over after each. */
  while (head->next != head) {
    const lease_t *l = (const lease_t *)head->next;
    napi_handle_scope scope;
    napi_open_handle_scope(env, &scope);
    wake(relay_take_lease(l->relay));
    napi_close_handle_scope(env, scope);
  }
  return NULL;
}
