/* Poll handles kept by descriptor number (poll-park.h). */
#define NAPI_VERSION 8
#include "poll-park.h"

#include <stdlib.h>

/* Descriptor numbers past this are not kept for: the slots stay at most 512 KiB. */
#define MAX_SLOTS 65536
#define FIRST_SLOTS 256

typedef struct {
  uv_loop_t *loop;
  napi_async_cleanup_hook_handle hook;
  uv_poll_t **slots; /* by descriptor number: a stopped handle for it, or NULL */
  int size;
  int closing; /* handles closing at the end */
} park_t;

/* This thread's park: each JavaScript thread runs its own environment and loop. */
static __thread park_t *park;

static void free_handle(uv_handle_t *handle) { free(handle); }

static void park_free(park_t *p) {
  napi_remove_async_cleanup_hook(p->hook);
  free(p->slots);
  free(p);
}

static void on_parked_closed(uv_handle_t *handle) {
  park_t *p = handle->data;
  free(handle);
  if (--p->closing == 0) park_free(p);
}

/* The environment ends: handles put from now on are closed, those kept are closed now. */
static void park_end(napi_async_cleanup_hook_handle hook, void *arg) {
  park_t *p = arg;
  park = NULL;
  p->closing = 1;
  for (int fd = 0; fd < p->size; fd++) {
    if (!p->slots[fd]) continue;
    p->slots[fd]->data = p;
    p->closing++;
    uv_close((uv_handle_t *)p->slots[fd], on_parked_closed);
  }
  if (--p->closing == 0) park_free(p);
}

int poll_park_open(napi_env env) {
  uv_loop_t *loop;
  if (park) return 0;
  park_t *p = calloc(1, sizeof *p);
  if (!p) return -1;
  p->slots = calloc(FIRST_SLOTS, sizeof *p->slots);
  if (!p->slots || napi_get_uv_event_loop(env, &loop) != napi_ok ||
      napi_add_async_cleanup_hook(env, park_end, p, &p->hook) != napi_ok) {
    free(p->slots);
    free(p);
    return -1;
  }
  p->loop = loop;
  p->size = FIRST_SLOTS;
  park = p;
  return 0;
}

uv_poll_t *poll_take(uv_loop_t *loop, int fd) {
  if (park && park->loop == loop && fd >= 0 && fd < park->size && park->slots[fd]) {
    uv_poll_t *poll = park->slots[fd];
    park->slots[fd] = NULL;
    return poll;
  }
  uv_poll_t *poll = malloc(sizeof *poll);
  if (poll && uv_poll_init(loop, poll, fd) == 0) return poll;
  free(poll);
  return NULL;
}

/* Room in the park for descriptor number `fd`. */
static int has_slot(park_t *p, int fd) {
  if (fd < p->size) return 1;
  if (fd >= MAX_SLOTS) return 0;
  int size = p->size;
  while (size <= fd) size *= 2;
  uv_poll_t **slots = realloc(p->slots, (size_t)size * sizeof *slots);
  if (!slots) return 0;
  for (int i = p->size; i < size; i++) slots[i] = NULL;
  p->slots = slots;
  p->size = size;
  return 1;
}

void poll_put(uv_poll_t *poll) {
  uv_os_fd_t fd = -1;
  uv_poll_stop(poll);
  if (park && park->loop == poll->loop && uv_fileno((uv_handle_t *)poll, &fd) == 0 && fd >= 0 &&
      has_slot(park, fd) && !park->slots[fd]) {
    poll->data = NULL;
    park->slots[fd] = poll;
    return;
  }
  uv_close((uv_handle_t *)poll, free_handle);
}
