/* A relayed socket's watch (relay-side.h). */
#include "relay-side.h"

#include "poll-park.h"

static void dispatch(uv_poll_t *handle, int status, int events) {
  side_t *s = handle->data;
  s->on_poll(s, status, events);
}

int side_open(side_t *s, uv_loop_t *loop) {
  s->poll = poll_take(loop, s->io.fd);
  if (!s->poll) return -1;
  s->poll->data = s;
  s->loop = loop;
  s->events = 0;
  return 0;
}

/* No system call: an idle handle's close only waits for the loop's closing phase, where the
 * poll handle's close would have ended. */
void side_close(side_t *s, uv_close_cb on_closed) {
  poll_put(s->poll);
  s->poll = NULL;
  s->events = 0;
  uv_idle_init(s->loop, &s->closing);
  s->closing.data = s;
  uv_close((uv_handle_t *)&s->closing, on_closed);
}

void side_watch(side_t *s, int events) {
  if (events == s->events || !s->poll) return;
  s->events = events;
  if (events) uv_poll_start(s->poll, events, dispatch);
  else uv_poll_stop(s->poll);
}
