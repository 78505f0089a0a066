/* Handing the allocator's free memory back to the system (see release-memory.c). */
#ifndef PGFENCE_RELEASE_MEMORY_H
#define PGFENCE_RELEASE_MEMORY_H
#include <node_api.h>

/* releaseFreeMemory(): gives the C heap's free pages back to the system. */
napi_value js_release_free_memory(napi_env env, napi_callback_info info);

#endif
