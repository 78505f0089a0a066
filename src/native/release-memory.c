/*
 * After a wave of connections closes and the proxy has collected its JavaScript heap, the
 * sessions' native memory (sockets, relays, Buffer backing stores) is free but stays resident
 * in glibc's heap, between blocks still in use. malloc_trim gives those pages back; elsewhere
 * this does nothing.
 */
#define NAPI_VERSION 8
#include "release-memory.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

napi_value js_release_free_memory(napi_env env, napi_callback_info info) {
  (void)info;
#ifdef __GLIBC__
  malloc_trim(0);
#endif
  napi_value undefined;
  napi_get_undefined(env, &undefined);
  return undefined;
}
