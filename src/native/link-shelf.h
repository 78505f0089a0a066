/*
 * A pool's idle server connections that a login in C may be lent (login-lend.c): each a server
 * link waiting between sessions (server-link.h), put on the shelf by JavaScript with what a
 * login needs to be served on it without JavaScript: the startup packet a client must have sent,
 * byte for byte (the connection carries that client's settings), the greeting that follows the
 * login's answer (ParameterStatus, BackendKeyData, ReadyForQuery), the relay's settings, and the
 * reset that makes the connection so again after the client (DISCARD ALL and what follows it).
 * A lent connection whose client says goodbye cleanly comes back to the shelf in C (shelf_return):
 * reset there, and lent again once its answer is clean, with a new cancel key in its greeting.
 *
 * JavaScript API (src/relay/link-shelf.ts):
 *   linkShelf(transactionPool) → shelf; a transaction pool's lends a client's descriptor to
 *     JavaScript as a duplicate (login-lend.c), and puts a connection a quiet lease left back
 *     waiting without a reset
 *   shelve(shelf, link, packet, greeting, settings, lendForMs, reset, resetQueries, resetMs,
 *     onEnd) → whether the link was shelved (false: it no longer waits); onEnd: what C tells of
 *     the link's end once a quiet lease put it back; `settings`: [frontendTypes,
 *     maxMessageBytes, interceptTypes, statementNeedles, queryCache] (relay()'s, in its order);
 *     lendForMs: how long it may be lent from now (-1: no limit); `reset`: resetQueries simple
 *     Queries, the first a DISCARD ALL, answered within resetMs or the link ends
 *   shelfReturns(shelf) → [link, processId, secretKey, transactions, ...] for each link quiet
 *     leases put back since the last call, once: the key its next client is greeted with and
 *     their clients' transactions; last, link undefined, the transactions of those whose link
 *     left the shelf since; or undefined: none
 *   unshelve(shelf, link) → whether it was on the shelf, waiting (false: a login took it, or it
 *     ended; a link still resetting is ended, JavaScript told)
 */
#ifndef PGFENCE_LINK_SHELF_H
#define PGFENCE_LINK_SHELF_H
#include <node_api.h>
#include <stdint.h>

#include "bytes.h"
#include "relay-settings.h"
#include "server-link.h"

typedef struct link_shelf link_shelf_t;
typedef struct shelf_entry shelf_entry_t;

/* A lease JavaScript has not heard of (login-lend.c), in its shelf's list. */
typedef struct shelf_quiet {
  struct shelf_quiet *prev, *next;
} shelf_quiet_t;

/* What a login is lent: the link, still waiting, and what to serve it with, which stays the
 * entry's; the entry is the caller's, for shelf_return or shelf_entry_drop. */
typedef struct {
  server_link_t *link;
  const bytes_t *greeting;
  const relay_settings_t *settings;
  shelf_entry_t *entry;
} shelf_lend_t;

/* The shelf a JavaScript value is (linkShelf), or NULL. */
link_shelf_t *shelf_of(napi_env env, napi_value value);

/* Takes the link shelved for `packet` off the shelf, if one still waits and may be lent at
 * `now` (uv_now); returns 0 then, -1 when there is none. */
int shelf_lend(link_shelf_t *shelf, const uint8_t *packet, size_t len, uint64_t now,
               shelf_lend_t *out);

/* A lent entry's link, let go by its relay (link_keep) after a clean goodbye, goes back on the
 * shelf: its reset goes out, and its next client is greeted with `key` (8 bytes: process id,
 * secret). `on_event` is told if the link fails or ends from now on (server-link.h). */
void shelf_return(shelf_entry_t *entry, server_link_t *link, const uint8_t key[8],
                  napi_value on_event);

/* Whether a lent entry's link may come back to the shelf at `now` without JavaScript. */
int shelf_may_return(const shelf_entry_t *entry, uint64_t now);

/* As shelf_return, JavaScript not asked: the link tells its end as it did when shelved, and the
 * return is noted in the entry, with the key and the client's transactions, until JavaScript
 * takes it in (shelfReturns). A transaction pool's link is not reset: it waits at once. */
void shelf_return_quietly(shelf_entry_t *entry, server_link_t *link, const uint8_t key[8],
                          double transactions);

/* Whether the shelf is a transaction pool's (linkShelf). */
int shelf_transactions(const link_shelf_t *shelf);

/* The head of the shelf's quiet leases (their list is the lender's to keep). */
shelf_quiet_t *shelf_quiet(link_shelf_t *shelf);

/* A lent entry that does not come back. */
void shelf_entry_drop(shelf_entry_t *entry);

napi_value js_link_shelf(napi_env env, napi_callback_info info);
napi_value js_shelve(napi_env env, napi_callback_info info);
napi_value js_unshelve(napi_env env, napi_callback_info info);
napi_value js_shelf_returns(napi_env env, napi_callback_info info);

#endif
