/* A client's login in C up to its authentication (client-login.c). */
#ifndef PGFENCE_CLIENT_LOGIN_H
#define PGFENCE_CLIENT_LOGIN_H
#include <node_api.h>

#include "relay-side.h"

typedef struct setup setup_t;
typedef struct login login_t;
typedef struct accepted accepted_t;

napi_value js_client_logins(napi_env env, napi_callback_info info);
napi_value js_logins_remember(napi_env env, napi_callback_info info);
napi_value js_login_start(napi_env env, napi_callback_info info);
napi_value js_login_close(napi_env env, napi_callback_info info);
napi_value js_login_read(napi_env env, napi_callback_info info);
napi_value js_logins_tls(napi_env env, napi_callback_info info);

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

/* The logins' setup a JavaScript value is (clientLogins), or NULL. */
setup_t *logins_setup(napi_env env, napi_value value);

/* While held, C answers no login from memory: every choice goes to JavaScript, which may refuse
 * (client-accept.c holds it while more connections are under way than logins have room for). */
void logins_hold_recall(setup_t *setup, int held);

/*
 * A login on a descriptor C accepted (client-accept.h), which becomes the login's: its end is
 * told through the acceptor (accepted_leave) instead of a done callback, with a duplicate of
 * the descriptor for JavaScript, and with the login's JavaScript value only once it
 * authenticated. Returns the login's place among the acceptor's, for the acceptor to fill in,
 * or NULL when it cannot start (the descriptor is then still the caller's).
 */
accepted_t *login_accept(setup_t *setup, uv_loop_t *loop, int fd);

/*
 * Lending in C (login-lend.c): an accepted login that authenticated with nothing sent after its
 * last message may be served on a pool's server connection without JavaScript choosing first,
 * and relayed quietly: JavaScript is told LENT (login_report_lent) only when it must take part.
 */
enum lend_result { LEND_NONE, LEND_QUIET, LEND_FAILED };
typedef struct {
  /* LEND_QUIET: the login was lent a connection (the answer and the greeting went to the client,
   * `answer` first) and a relay carries it; LEND_NONE: none to lend, nothing sent; LEND_FAILED:
   * the answer went out but no relay could be made (the login closes the client). */
  int (*lend)(void *lender, side_t *client, const uint8_t *packet, size_t len,
              const uint8_t *answer, size_t answer_len);
} login_lender_t;

/* Tells JavaScript of a quiet lease (LENT, with the relay, the link, the client's descriptor
 * for JavaScript, the relay's or a duplicate of it, and in remainingMs how long ago it was
 * lent; inside TLS, with a channel lent to the relay, whose plaintext end JavaScript speaks on
 * once the relay gives the connection back); returns JavaScript's answer (NULL when it threw, or
 * when no channel could be made). The login no longer counts as under way. In a handle scope. */
napi_value login_report_lent(side_t *side, napi_value relay, napi_value link, int fd);

/* A quiet lease ended without a report (its link back on the shelf, or out of memory). */
void login_lent_over(side_t *side);

/* Logins accepted from now on may be lent through `lender` (NULL: none is). */
void logins_lend_with(setup_t *setup, const login_lender_t *lender, void *ctx);

/* An accepted login reads what its client sent already, as a readable poll would (it may end
 * meanwhile). */
void login_read_now(login_t *login);

/* An accepted login under way that ran out of time: it ends TIMED_OUT. */
void login_time_out(login_t *login);

/* An accepted login under way closed with nothing told (a shutdown). */
void login_abandon(login_t *login);

#endif
