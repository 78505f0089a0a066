#define NAPI_VERSION 8
#include "tcp-keepalive.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

/* The kernel counts keepalive timers in whole seconds; never 0. */
static int seconds(uint32_t ms) { return ms < 1000 ? 1 : (int)(ms / 1000); }

napi_value js_set_keepalive(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4], result;
  int32_t fd = -1;
  uint32_t idle = 0, interval = 0, count = 0;
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  int ok = argc == 4 && napi_get_value_int32(env, argv[0], &fd) == napi_ok &&
           napi_get_value_uint32(env, argv[1], &idle) == napi_ok &&
           napi_get_value_uint32(env, argv[2], &interval) == napi_ok &&
           napi_get_value_uint32(env, argv[3], &count) == napi_ok && fd >= 0;
  if (ok && idle == 0) {
    int off = 0;
    ok = setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &off, sizeof off) == 0;
  } else if (ok) {
    int on = 1, idle_s = seconds(idle), interval_s = seconds(interval);
    int probes = count ? (int)count : 1;
    ok = setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on) == 0 &&
         setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof idle_s) == 0 &&
         setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof interval_s) == 0 &&
         setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes) == 0;
  }
  napi_get_boolean(env, ok, &result);
  return result;
}
