/*
 * A relay made in C, for a login lent a server connection in C (login-lend.c): JavaScript
 * hears of the session once, with the relay's value, and gives its callbacks back.
 */
#ifndef PGFENCE_RELAY_H
#define PGFENCE_RELAY_H
#include <node_api.h>

#include "link-shelf.h"
#include "relay-settings.h"
#include "relay-side.h"
#include "server-link.h"

/* A relay of `client`, an authenticated login's side, and `link`, a waiting server link lent
 * with the shelf's `entry`, whose session starts idle, with the entry's `settings`, which it
 * borrows. It does not relay until relay_lent_start. At the client's clean goodbye, JavaScript
 * consenting, the link goes back to the shelf in C (shelf_return). Returns its JavaScript value
 * and sets `*out`, the entry the relay's; NULL, with nothing taken over, when it cannot be made.
 * In a handle scope. */
napi_value relay_lent(napi_env env, side_t *client, server_link_t *link,
                      const relay_settings_t *settings, shelf_entry_t *entry, relay_t **out);

/* Starts a relay_lent with JavaScript's [onMessage, onServerMessage, onClose]; anything else
 * stops it, closing both sides, and gives -1. */
int relay_lent_start(relay_t *r, napi_value callbacks);

#endif
