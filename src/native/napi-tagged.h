/* Externals handed to JavaScript, marked with a type tag so that no other value passes for one. */
#ifndef PGFENCE_NAPI_TAGGED_H
#define PGFENCE_NAPI_TAGGED_H
#include <node_api.h>

/* The pointer an external tagged `tag` holds, or NULL. */
static inline void *tagged(napi_env env, napi_value value, const napi_type_tag *tag) {
  bool is = false;
  void *data = NULL;
  napi_valuetype type;
  if (napi_typeof(env, value, &type) != napi_ok || type != napi_external ||
      napi_check_object_type_tag(env, value, tag, &is) != napi_ok || !is ||
      napi_get_value_external(env, value, &data) != napi_ok)
    return NULL;
  return data;
}

/* The pointer held by a call's one argument, an external tagged `tag`; else NULL. */
static inline void *tagged_argument(napi_env env, napi_callback_info info,
                                    const napi_type_tag *tag) {
  size_t argc = 1;
  napi_value argv[1];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 1) return NULL;
  return tagged(env, argv[0], tag);
}

#endif
