/*
 * A pooled server connection kept in C between the sessions it serves (server-link.c): the
 * relay's server side does not close when a client leaves cleanly, but goes on watching the
 * descriptor, writes the reset (DISCARD ALL and what JavaScript adds to it), reads its answer
 * and then waits, reporting an end or unexpected bytes, until the next session's relay takes
 * the side over. Nothing of the server connection is set up again per client: no duplicate
 * descriptor, no poll handle, and its Node socket never reads again while the link lives.
 *
 * JavaScript API (src/relay/server-link.ts):
 *   a relay's stop(true) → { ..., serverLink }: the link, when the session ended idle outside a
 *     transaction on a plain TCP server connection with nothing queued for it; else undefined
 *   relay(clientFd, -1, …, serverLink, …): the relay takes the link's side over
 *   linkReset(link, bytes, readyCount, onEvent): writes `bytes` (readyCount simple Queries)
 *     and reads their answers (events: link-events.h): onEvent(LINK_EVENT_RESET, statuses)
 *     once all came back without an error, the first a "DISCARD ALL", the last idle
 *     (statuses: the ParameterStatus messages among them), else onEvent(LINK_EVENT_FAILED);
 *     then, while the link waits, onEvent(LINK_EVENT_ENDED) if the server closes or sends
 *     anything. The link is closed after FAILED and ENDED.
 *   linkClose(link): closes the link's descriptor (the Node socket's own stays open)
 *   linkResetting(link) → whether its reset is under way
 *   linkWatch(fd, onEvent) → a waiting link on an idle connection's descriptor that JavaScript
 *     relayed last (its socket stopped): onEvent(LINK_EVENT_ENDED) if the server closes or
 *     sends anything before a relay takes it; the link is closed then
 */
#ifndef PGFENCE_SERVER_LINK_H
#define PGFENCE_SERVER_LINK_H
#include <node_api.h>

#include "relay-side.h"

typedef struct server_link server_link_t;

/* A new link for a relay's server side (not yet a JavaScript value), or NULL. */
server_link_t *link_new(napi_env env);
side_t *link_side(server_link_t *link);
server_link_t *link_of_side(side_t *side);

/* The link a JavaScript value is, if it waits between sessions (no relay holds it); else NULL. */
server_link_t *link_waiting(napi_env env, napi_value value);

/* The link a JavaScript value is, in any state; else NULL. */
server_link_t *link_of_value(napi_env env, napi_value value);

/* Whether the link waits between sessions, its reset answered and no relay holding it. */
int link_is_waiting(const server_link_t *link);

/* The link's JavaScript value (one it has already: a link that waited had one made). */
napi_value link_js_value(server_link_t *link);

/* Closes a waiting link as if the server had ended it: JavaScript is told ENDED. */
void link_end(server_link_t *link);

/* Whether the link's reset is under way (link_reset_in_c or linkReset). */
int link_is_resetting(const server_link_t *link);

/* A clean reset's answer, its ParameterStatus messages in `statuses`: the link waits. */
typedef void (*link_reset_done_t)(void *data, server_link_t *link, const bytes_t *statuses);

/* Resets a link a relay let go (link_keep), as linkReset does, with `on_event` told of a failure
 * or of an end later, but a clean answer told to `done` instead, JavaScript not called. */
void link_reset_in_c(server_link_t *link, const bytes_t *bytes, int ready, napi_value on_event,
                     link_reset_done_t done, void *data);

/* A link a relay let go (link_keep) with nothing to undo waits again at once, as after a clean
 * reset, `on_event` told of its end. */
void link_wait_in_c(server_link_t *link, napi_value on_event);

/* The relay takes the link's side over (a waiting link: link_waiting), keeping its JavaScript
 * value alive until link_keep or link_handle_closed. */
void link_adopt(server_link_t *link, relay_t *relay);

/* The relay lets the link's side go, still open; returns its JavaScript value (made now if it
 * has none), or NULL when out of memory (the caller then closes the side). */
napi_value link_keep(server_link_t *link);

/* Frees a link whose side never opened (its descriptor could not be watched). */
void link_free_unopened(server_link_t *link);

/* The side closed (under a relay or not): the descriptor is closed; the link is
 * freed once nothing refers to it. */
void link_handle_closed(server_link_t *link);

napi_value js_link_reset(napi_env env, napi_callback_info info);
napi_value js_link_close(napi_env env, napi_callback_info info);
napi_value js_link_resetting(napi_env env, napi_callback_info info);
napi_value js_link_watch(napi_env env, napi_callback_info info);

#endif
