/* JavaScript strings as C strings, for the addon's settings. */
#ifndef PGFENCE_NAPI_STRING_H
#define PGFENCE_NAPI_STRING_H
#include <node_api.h>
#include <stdlib.h>

/* A JavaScript string as a C string (latin1: keys and host names are ASCII); NULL when it is not
 * a string or memory ran out. The caller frees it. */
static inline char *latin1_string(napi_env env, napi_value value) {
  size_t len = 0;
  if (napi_get_value_string_latin1(env, value, NULL, 0, &len) != napi_ok) return NULL;
  char *text = malloc(len + 1);
  if (text) napi_get_value_string_latin1(env, value, text, len + 1, &len);
  return text;
}

#endif
