/*
 * The addon's own readiness poller: one epoll instance per event loop, which libuv watches as a
 * single descriptor. The relay and the login in C watch their sockets here rather than through
 * a uv_poll_t each, whose set-up checks every descriptor with an epoll_ctl pair and an ioctl,
 * and whose every change of interest removes the descriptor and adds it again: here a socket
 * costs one epoll_ctl to start watching, one per change and one to stop.
 *
 * Level-triggered, as uv_poll is: a callback that leaves bytes unread is called again. An error
 * or hang-up is reported as the events watched (the read or write that follows says what
 * happened). Interest in nothing removes the descriptor (an idle epoll entry would still report
 * a hang-up, again and again).
 */
#ifndef PGFENCE_POLLER_H
#define PGFENCE_POLLER_H
#include <node_api.h>
#include <uv.h>

/* The events watched and reported: libuv's values, so that callers keep their names. */
enum { WATCH_READABLE = UV_READABLE, WATCH_WRITABLE = UV_WRITABLE };

typedef struct poller poller_t;
typedef struct watcher watcher_t;
typedef void (*watch_cb)(watcher_t *w, int events);

struct watcher {
  poller_t *poller;
  int fd;
  int events; /* what is watched now; 0: not in the epoll set */
  watch_cb cb;
  void *data;
};

/* Prepares a watcher of fd on the env's loop (no system call but the poller's first). Returns
 * -1 when the poller cannot be made. */
int watcher_init(watcher_t *w, napi_env env, int fd, watch_cb cb, void *data);

/* Watches `events` (WATCH_READABLE | WATCH_WRITABLE, or 0 for nothing) from now on; events
 * already collected that are no longer watched are not reported. Returns -1 when epoll_ctl
 * failed (errno says why); the watcher then watches nothing. */
int watcher_set(watcher_t *w, int events);

#endif
