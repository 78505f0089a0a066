/* TCP keepalive with all three timers: Node sets only the idle time. */
#ifndef PGFENCE_TCP_KEEPALIVE_H
#define PGFENCE_TCP_KEEPALIVE_H
#include <node_api.h>

/* setKeepalive(fd, idleMs, intervalMs, count) → true when every option was applied; an idleMs
 * of 0 turns keepalive off (the config never holds 0). */
napi_value js_set_keepalive(napi_env env, napi_callback_info info);

#endif
