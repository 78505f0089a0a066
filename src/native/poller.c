/* The addon's epoll instance, watched by libuv as one descriptor (poller.h). */
#include "poller.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <unistd.h>

/* Events taken from the epoll instance per wake-up; more wait for the next loop iteration. */
#define BATCH 64

struct poller {
  int epfd;
  uv_poll_t handle;
  int watched; /* descriptors in the epoll set: the loop stays alive while there are any */
  /* The batch being dispatched: a watcher that stops watching clears its own entries. */
  struct epoll_event *batch;
  int batch_count;
};

/* One per thread, as each event loop is a thread's. */
static _Thread_local poller_t *thread_poller;

static void on_poller_closed(uv_handle_t *handle) {
  poller_t *p = handle->data;
  close(p->epfd);
  free(p);
}

/* The environment ends: its loop's handle goes, and with it the epoll instance. */
static void poller_cleanup(void *arg) {
  poller_t *p = arg;
  if (thread_poller == p) thread_poller = NULL;
  uv_close((uv_handle_t *)&p->handle, on_poller_closed);
}

static int reported(const watcher_t *w, uint32_t ready) {
  int events = 0;
  if (ready & EPOLLIN) events |= WATCH_READABLE;
  if (ready & EPOLLOUT) events |= WATCH_WRITABLE;
  if (ready & (EPOLLERR | EPOLLHUP)) events |= w->events;
  return events & w->events;
}

static void on_ready(uv_poll_t *handle, int status, int events) {
  poller_t *p = handle->data;
  struct epoll_event batch[BATCH];
  int n;
  do n = epoll_wait(p->epfd, batch, BATCH, 0);
  while (n < 0 && errno == EINTR);
  p->batch = batch;
  p->batch_count = n < 0 ? 0 : n;
  for (int i = 0; i < p->batch_count; i++) {
    watcher_t *w = batch[i].data.ptr;
    int ready = w ? reported(w, batch[i].events) : 0;
    if (ready) w->cb(w, ready);
  }
  p->batch = NULL;
  p->batch_count = 0;
}

static poller_t *poller_for(napi_env env) {
  if (thread_poller) return thread_poller;
  uv_loop_t *loop;
  if (napi_get_uv_event_loop(env, &loop) != napi_ok) return NULL;
  poller_t *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->epfd = epoll_create1(EPOLL_CLOEXEC);
  if (p->epfd < 0 || uv_poll_init(loop, &p->handle, p->epfd) != 0) {
    if (p->epfd >= 0) close(p->epfd);
    free(p);
    return NULL;
  }
  p->handle.data = p;
  uv_poll_start(&p->handle, UV_READABLE, on_ready);
  uv_unref((uv_handle_t *)&p->handle);
  napi_add_env_cleanup_hook(env, poller_cleanup, p);
  return thread_poller = p;
}

int watcher_init(watcher_t *w, napi_env env, int fd, watch_cb cb, void *data) {
  w->poller = poller_for(env);
  w->fd = fd;
  w->events = 0;
  w->cb = cb;
  w->data = data;
  return w->poller ? 0 : -1;
}

static void forget_collected(poller_t *p, const watcher_t *w) {
  for (int i = 0; i < p->batch_count; i++)
    if (p->batch[i].data.ptr == w) p->batch[i].data.ptr = NULL;
}

static void count_watched(poller_t *p, int change) {
  p->watched += change;
  if (p->watched == 1 && change > 0) uv_ref((uv_handle_t *)&p->handle);
  else if (p->watched == 0) uv_unref((uv_handle_t *)&p->handle);
}

int watcher_set(watcher_t *w, int events) {
  if (events == w->events) return 0;
  poller_t *p = w->poller;
  struct epoll_event e = {.events = 0, .data.ptr = w};
  if (events & WATCH_READABLE) e.events |= EPOLLIN;
  if (events & WATCH_WRITABLE) e.events |= EPOLLOUT;
  int op = w->events == 0 ? EPOLL_CTL_ADD : events == 0 ? EPOLL_CTL_DEL : EPOLL_CTL_MOD;
  int failed = epoll_ctl(p->epfd, op, w->fd, &e) < 0;
  int failure = errno;
  /* A descriptor that leaves the set, or failed to change what it watches, watches nothing. */
  if (failed && op == EPOLL_CTL_MOD) epoll_ctl(p->epfd, EPOLL_CTL_DEL, w->fd, &e);
  if (op != EPOLL_CTL_ADD && (failed || op == EPOLL_CTL_DEL)) {
    forget_collected(p, w);
    count_watched(p, -1);
  }
  if (op == EPOLL_CTL_ADD && !failed) count_watched(p, 1);
  w->events = failed ? 0 : events;
  errno = failure;
  return failed ? -1 : 0;
}
