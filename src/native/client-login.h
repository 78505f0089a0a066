/* A client's login in C up to its authentication (client-login.c). */
#ifndef PGFENCE_CLIENT_LOGIN_H
#define PGFENCE_CLIENT_LOGIN_H
#include <node_api.h>

napi_value js_client_logins(napi_env env, napi_callback_info info);
napi_value js_login_start(napi_env env, napi_callback_info info);
napi_value js_login_close(napi_env env, napi_callback_info info);

#endif
