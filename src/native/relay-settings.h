/*
 * A lent relay's settings (relay.h), read from JavaScript once, when its link is shelved
 * (link-shelf.h), rather than at every login lent that link: the client's message types, the
 * message size limit, the types handed to JavaScript, the statement needles and the query cache.
 * The relays made with them borrow the needles and the cache: the shelf entry that holds them
 * outlives the relays' use of them (a relay lent from it stops before it is freed).
 */
#ifndef PGFENCE_RELAY_SETTINGS_H
#define PGFENCE_RELAY_SETTINGS_H
#include <node_api.h>

typedef struct relay_settings relay_settings_t;

/* Reads [frontendTypes, maxMessageBytes, interceptTypes, statementNeedles, queryCache] (relay()'s
 * settings, in its order); NULL when memory runs out or it is no such array. */
relay_settings_t *relay_settings_read(napi_env env, napi_value settings);

void relay_settings_free(napi_env env, relay_settings_t *settings);

#endif
