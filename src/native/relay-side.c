/* A relayed socket's watch (relay-side.h). */
#include "relay-side.h"

static void dispatch(uv_poll_t *handle, int status, int events) {
  side_t *s = handle->data;
  s->on_poll(s, status, events);
}

void side_watch(side_t *s, int events) {
  if (events == s->events) return;
  s->events = events;
  if (events) uv_poll_start(&s->poll, events, dispatch);
  else uv_poll_stop(&s->poll);
}
