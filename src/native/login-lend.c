/*
 * Lending in C: a login accepted in C that authenticated is served at once on a server link
 * JavaScript shelved for its startup packet (link-shelf.h), without JavaScript choosing: the
 * answer and the greeting go to the client in one write, a relay is made in C over the login's
 * side and the link's, and JavaScript is told once (LENT), giving the relay its callbacks.
 *
 * JavaScript API (src/relay/link-shelf.ts):
 *   loginsLend(logins, shelf, clientReadsAgain): logins accepted from now on may be lent from
 *     `shelf`; with clientReadsAgain (a transaction pool's), JavaScript is given a duplicate of
 *     the client's descriptor, to read the client itself once the relay stops
 */
#define NAPI_VERSION 8
#include <errno.h>
#include <fcntl.h>
#include <node_api.h>
#include <sys/uio.h>
#include <unistd.h>
#include <uv.h>

#include "login-lend.h"

#include "client-login.h"
#include "link-shelf.h"
#include "relay.h"

typedef struct {
  shelf_lend_t lent;
  side_t *client;
  relay_t *relay;
  int fd; /* the client's duplicate for JavaScript (lending to transaction pools), else -1 */
} lease_t;

/* One lease at a time: a report runs lend, values and answered before anything else. */
static _Thread_local lease_t current;

/* Queues what the client did not take of `p` after `sent` of it was written; -1 when out of
 * memory. */
static int queue_rest(side_t *client, const uint8_t *p, size_t n, size_t *sent) {
  size_t skip = *sent < n ? *sent : n;
  *sent -= skip;
  return bytes_append(&client->out, p + skip, n - skip);
}

static void *lend(void *lender, side_t *client, const uint8_t *packet, size_t len,
                  const uint8_t *answer, size_t answer_len) {
  if (shelf_lend(lender, packet, len, uv_now(client->poll.loop), &current.lent) < 0) return NULL;
  current.client = client;
  current.relay = NULL;
  current.fd = -1;
  const bytes_t *greeting = current.lent.greeting;
  struct iovec iov[2] = {{(void *)answer, answer_len}, {greeting->data, greeting->len}};
  ssize_t n;
  do n = writev(client->io.fd, iov, 2);
  while (n < 0 && errno == EINTR);
  /* What the socket did not take, the relay sends; a failed socket, it reports. */
  size_t sent = n > 0 ? (size_t)n : 0;
  if (queue_rest(client, answer, answer_len, &sent) < 0 ||
      queue_rest(client, greeting->data, greeting->len, &sent) < 0)
    client->out.len = 0; /* the relay's first write then fails the client: nothing half sent */
  return &current;
}

static int values(void *lease, napi_env env, napi_value out[2]) {
  lease_t *l = lease;
  out[0] = relay_lent(env, l->client, l->lent.link, l->lent.settings, l->lent.entry, &l->relay);
  if (!out[0]) {
    if (l->fd >= 0) close(l->fd);
    shelf_entry_drop(l->lent.entry);
    link_end(l->lent.link); /* JavaScript closes the connection it thought idle */
    return -1;
  }
  out[1] = link_js_value(l->lent.link);
  return 0;
}

static void answered(void *lease, napi_value answer) {
  relay_lent_start(((lease_t *)lease)->relay, answer);
}

static int relay_descriptor(void *lease, int own) { return own; }

/* A transaction pool's client reads again from JavaScript when its connection goes back to the
 * pool between transactions: JavaScript gets a duplicate of its descriptor, made before the
 * lend so that nothing fails after the greeting went out. */
static void *lend_duplicating(void *lender, side_t *client, const uint8_t *packet, size_t len,
                              const uint8_t *answer, size_t answer_len) {
  int fd = fcntl(client->io.fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return NULL;
  lease_t *l = lend(lender, client, packet, len, answer, answer_len);
  if (!l) close(fd);
  else l->fd = fd;
  return l;
}

static int duplicate_descriptor(void *lease, int own) { return ((lease_t *)lease)->fd; }

static const login_lender_t LENDER = {lend, values, answered, relay_descriptor};
static const login_lender_t DUPLICATING_LENDER = {lend_duplicating, values, answered,
                                                  duplicate_descriptor};

napi_value js_logins_lend(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  setup_t *setup = NULL;
  link_shelf_t *shelf = NULL;
  bool duplicate = false;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 3 ||
      !(setup = logins_setup(env, argv[0])) || !(shelf = shelf_of(env, argv[1])) ||
      napi_get_value_bool(env, argv[2], &duplicate) != napi_ok) {
    napi_throw_error(env, NULL, "pgfence login: loginsLend(logins, shelf, clientReadsAgain)");
    return NULL;
  }
  logins_lend_with(setup, duplicate ? &DUPLICATING_LENDER : &LENDER, shelf);
  return NULL;
}
