/*
 * A relay made in C, for a login lent a server connection in C (login-lend.c). It relays at once,
 * quietly: JavaScript hears of it only when it must take part (a message or an end for it, or
 * the lender reporting it when JavaScript asks), and a clean goodbye before that puts the link
 * back on the shelf without JavaScript (shelf_return_quietly).
 */
#ifndef PGFENCE_RELAY_H
#define PGFENCE_RELAY_H
#include <node_api.h>

#include "link-shelf.h"
#include "relay-settings.h"
#include "relay-side.h"
#include "server-link.h"

/* What a relay lent quietly tells its lender of the lease it was made for. */
typedef struct {
  /* JavaScript must take part: the lease is reported, which gives the relay its callbacks
   * (relay_value, relay_lent_start) or stops it. In a handle scope. */
  void (*wake)(void *lease);
  /* The lease is over unreported: the client said goodbye cleanly and the link went back on the
   * shelf, or the relay stopped (out of memory). */
  void (*over)(void *lease);
} relay_lender_t;

/* A relay of `client`, an authenticated login's side, and `link`, a waiting server link lent
 * with the shelf's `entry`, whose session starts idle, with the entry's `settings`, which it
 * borrows. It relays at once, unreported until `lender` is told to wake `lease`. NULL, with
 * nothing taken over, when out of memory. */
relay_t *relay_lent(napi_env env, side_t *client, server_link_t *link,
                    const relay_settings_t *settings, shelf_entry_t *entry,
                    const relay_lender_t *lender, void *lease);

/* The JavaScript value of a relay_lent, made at its report; NULL when it cannot be made. */
napi_value relay_value(napi_env env, relay_t *r);

/* Gives a relay_lent JavaScript's [onMessage, onServerMessage, onClose]; anything else stops
 * it, closing both sides, and gives -1. */
int relay_lent_start(relay_t *r, napi_value callbacks);

/* Stops a relay_lent whose report failed, closing both sides. */
void relay_lent_stop(relay_t *r);

/* The relay's lease (a relay_lent's until reported or over), which it no longer wakes: the
 * lender reports it (shelfReport). */
void *relay_take_lease(relay_t *r);

#endif
