/* Lending in C: a login in C served on a shelved server link (login-lend.c). */
#ifndef PGFENCE_LOGIN_LEND_H
#define PGFENCE_LOGIN_LEND_H
#include <node_api.h>

napi_value js_logins_lend(napi_env env, napi_callback_info info);
napi_value js_shelf_report(napi_env env, napi_callback_info info);

#endif
