/* Poll handles kept, stopped, by descriptor number for the next socket given that number.
 * libuv's uv_poll_init costs three system calls (an epoll add and delete that check the
 * descriptor can be polled, and FIONBIO) on every connection; the kernel gives a new socket the
 * lowest free number, so the number a closed connection leaves is mostly the next one's, and
 * its stopped handle watches the next socket without them. One park per JavaScript thread, for
 * its loop; its handles are closed when the thread's environment ends. */
#ifndef PGFENCE_POLL_PARK_H
#define PGFENCE_POLL_PARK_H
#include <node_api.h>
#include <uv.h>

/* Opens the park of this thread's loop (once per addon instance): 0, or -1 without one. */
int poll_park_open(napi_env env);

/* A stopped poll handle for `fd`, a nonblocking socket, on `loop`; NULL when it cannot be
 * watched. */
uv_poll_t *poll_take(uv_loop_t *loop, int fd);

/* Stops `poll`, which its owner no longer needs: kept for its descriptor number (whose owner
 * closes the descriptor next), or closed and freed. */
void poll_put(uv_poll_t *poll);

#endif
