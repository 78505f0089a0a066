/* Clients accepted in C, each straight into a login in C (client-accept.c). */
#ifndef PGFENCE_CLIENT_ACCEPT_H
#define PGFENCE_CLIENT_ACCEPT_H
#include <node_api.h>
#include <stdint.h>

typedef struct acceptor acceptor_t;
typedef struct login login_t;

/* A login under way on a connection C accepted: its place among its acceptor's (held inside
 * the login). */
typedef struct accepted {
  struct accepted *prev, *next;
  acceptor_t *acceptor; /* NULL once the login left: reported, closed */
  login_t *login;
  uint64_t deadline; /* the loop's time (ms) by which the startup must be over */
} accepted_t;

/* What a login that leaves reports with: the acceptor's callback, whether a client that left is
 * told at all, how long its startup may still take in JavaScript (ms). */
typedef struct {
  acceptor_t *acceptor;
  napi_ref callback;
  int tell_closed;
  double remaining_ms;
} accepted_end_t;

/* The login is over in C (it reports, or closes): it is no longer under way. The acceptor lives
 * until accepted_done, so that its callback can be called meanwhile. */
accepted_end_t accepted_leave(accepted_t *entry);
void accepted_done(acceptor_t *acceptor);

/* A login that left (accepted_leave) but goes on quietly lent in C (+1), until it is reported
 * or over (-1): it counts against the room as one under way, with no deadline. */
void accepted_quiet(acceptor_t *acceptor, int change);

napi_value js_accept_clients(napi_env env, napi_callback_info info);
napi_value js_acceptor_listen(napi_env env, napi_callback_info info);
napi_value js_acceptor_settings(napi_env env, napi_callback_info info);
napi_value js_acceptor_room(napi_env env, napi_callback_info info);
napi_value js_acceptor_pending(napi_env env, napi_callback_info info);
napi_value js_acceptor_stop(napi_env env, napi_callback_info info);
napi_value js_acceptor_close_logins(napi_env env, napi_callback_info info);
napi_value js_peer_name(napi_env env, napi_callback_info info);

#endif
