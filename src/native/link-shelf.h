/*
 * A pool's idle server connections that a login in C may be lent (login-lend.c): each a server
 * link waiting between sessions (server-link.h), put on the shelf by JavaScript with what a
 * login needs to be served on it without JavaScript: the startup packet a client must have sent,
 * byte for byte (the connection carries that client's settings), the greeting that follows the
 * login's answer (ParameterStatus, BackendKeyData, ReadyForQuery), and the relay's settings.
 *
 * JavaScript API (src/relay/link-shelf.ts):
 *   linkShelf() → shelf
 *   shelve(shelf, link, packet, greeting, settings, lendForMs) → whether the link was shelved
 *     (false: it no longer waits); `settings`: [frontendTypes, maxMessageBytes, interceptTypes,
 *     statementNeedles, queryCache] (relay()'s, in its order); lendForMs: how long it may be
 *     lent from now (-1: no limit)
 *   unshelve(shelf, link) → whether it was on the shelf (false: a login took it, or it ended)
 */
#ifndef PGFENCE_LINK_SHELF_H
#define PGFENCE_LINK_SHELF_H
#include <node_api.h>
#include <stdint.h>

#include "bytes.h"
#include "server-link.h"

typedef struct link_shelf link_shelf_t;

/* What a login is lent: the link, still waiting, and what to serve it with. */
typedef struct {
  server_link_t *link;
  bytes_t greeting;      /* the caller's to free */
  napi_ref settings;     /* the caller's to delete */
} shelf_lend_t;

/* The shelf a JavaScript value is (linkShelf), or NULL. */
link_shelf_t *shelf_of(napi_env env, napi_value value);

/* Takes the link shelved for `packet` off the shelf, if one still waits and may be lent at
 * `now` (uv_now); returns 0 then, -1 when there is none. */
int shelf_lend(link_shelf_t *shelf, const uint8_t *packet, size_t len, uint64_t now,
               shelf_lend_t *out);

napi_value js_link_shelf(napi_env env, napi_callback_info info);
napi_value js_shelve(napi_env env, napi_callback_info info);
napi_value js_unshelve(napi_env env, napi_callback_info info);

#endif
