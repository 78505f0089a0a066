/* A client's login in C up to its authentication (client-login.c). */
#ifndef PGFENCE_CLIENT_LOGIN_H
#define PGFENCE_CLIENT_LOGIN_H
#include <node_api.h>

#include "relay-side.h"

napi_value js_client_logins(napi_env env, napi_callback_info info);
napi_value js_logins_remember(napi_env env, napi_callback_info info);
napi_value js_login_start(napi_env env, napi_callback_info info);
napi_value js_login_close(napi_env env, napi_callback_info info);
napi_value js_login_read(napi_env env, napi_callback_info info);

/*
 * A login that authenticated keeps its duplicate of the client's descriptor, watched, for the
 * session's relay to take over: no second duplicate and poll handle per session. Until then
 * what the client sends waits in the socket (the watch stops at the first event).
 */

/* The side of the login a JavaScript value is, if it authenticated and waits for a relay (one
 * that reads the client for JavaScript does not). */
side_t *login_side_waiting(napi_env env, napi_value value);

/* The relay that took the side closed its handle: the descriptor is closed, the login freed
 * once JavaScript has let go of it too. */
void login_side_closed(side_t *side);

/* A relay that took the side could not start: the login closes it. */
void login_side_close(side_t *side);

#endif
