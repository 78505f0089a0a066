#define NAPI_VERSION 8
#include "tls-context.h"

#include <openssl/err.h>
#include <stdio.h>

#include "tls-settings.h"

typedef struct {
  void *data;
  size_t len;
} pem_t;

static pem_t pem_of(napi_env env, napi_value object, const char *name) {
  napi_value value;
  bool is_buffer = false;
  pem_t pem = {NULL, 0};
  if (napi_get_named_property(env, object, name, &value) == napi_ok &&
      napi_is_buffer(env, value, &is_buffer) == napi_ok && is_buffer)
    napi_get_buffer_info(env, value, &pem.data, &pem.len);
  return pem;
}

static int flag_of(napi_env env, napi_value object, const char *name) {
  napi_value value;
  bool flag = false;
  napi_get_named_property(env, object, name, &value);
  napi_get_value_bool(env, value, &flag);
  return flag;
}

/* The settings into a new context; NULL when they cannot be used. */
static SSL_CTX *context_from(napi_env env, napi_value settings) {
  int server = flag_of(env, settings, "server"), verify = flag_of(env, settings, "verify");
  pem_t ca = pem_of(env, settings, "ca"), cert = pem_of(env, settings, "cert"),
        key = pem_of(env, settings, "key");
  SSL_CTX *ctx = tls_new_context(server, verify);
  int ok = ctx != NULL;
  if (ok && ca.data) ok = tls_trust_pem(ctx, ca.data, ca.len) == 0;
  else if (ok && verify) ok = SSL_CTX_set_default_verify_paths(ctx) == 1;
  if (ok && server)
    ok = cert.data && key.data &&
         tls_use_identity_pem(ctx, cert.data, cert.len, key.data, key.len) == 0;
  if (ok) return ctx;
  SSL_CTX_free(ctx);
  return NULL;
}

/* Marks the JavaScript objects that wrap a context. */
static const napi_type_tag CONTEXT_TAG = {0x7067666e63746c73ULL, 0x636f6e7465787431ULL};

static void context_finalize(napi_env env, void *data, void *hint) { SSL_CTX_free(data); }

napi_value js_tls_context(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1], wrapper;
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  SSL_CTX *ctx = argc == 1 ? context_from(env, argv[0]) : NULL;
  if (!ctx) {
    const char *reason = ERR_reason_error_string(ERR_get_error());
    ERR_clear_error();
    char message[256];
    snprintf(message, sizeof message, "pgfence tls: cannot use the TLS settings: %s",
             reason ? reason : "missing certificate or key");
    napi_throw_error(env, NULL, message);
    return NULL;
  }
  napi_create_object(env, &wrapper);
  napi_wrap(env, wrapper, ctx, context_finalize, NULL, NULL);
  napi_type_tag_object(env, wrapper, &CONTEXT_TAG);
  return wrapper;
}

SSL_CTX *tls_context_of(napi_env env, napi_value value) {
  SSL_CTX *ctx = NULL;
  bool tagged = false;
  napi_valuetype type;
  if (napi_typeof(env, value, &type) != napi_ok || type != napi_object ||
      napi_check_object_type_tag(env, value, &CONTEXT_TAG, &tagged) != napi_ok || !tagged)
    return NULL;
  return napi_unwrap(env, value, (void **)&ctx) == napi_ok ? ctx : NULL;
}
