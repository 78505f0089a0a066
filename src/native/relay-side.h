/* One socket of a relayed session, as the relay reads and writes it (relay.c). A pooled server
 * connection's side outlives its session in a server link (server-link.h). */
#ifndef PGFENCE_RELAY_SIDE_H
#define PGFENCE_RELAY_SIDE_H
#include <uv.h>

#include "bytes.h"
#include "stream-io.h"
#include "tls-channel.h"

typedef struct relay relay_t;
typedef struct side side_t;

/* Who reads a side now: its relay, or its server link. */
typedef void (*side_poll_cb)(side_t *side, int status, int events);

struct side {
  relay_t *relay; /* NULL while a server link's side waits between sessions */
  side_poll_cb on_poll;
  stream_io_t io; /* io.fd: the descriptor watched (a duplicate: closed once the side is) */
  tls_channel_t *channel; /* the TLS connection borrowed, or NULL for plain TCP */
  uv_loop_t *loop;
  uv_poll_t *poll;     /* from the thread's poll park (poll-park.h) while open */
  uv_idle_t closing;   /* closed in place of the poll handle, which goes back to the park */
  int events;   /* what the poll handle watches now */
  bytes_t out;  /* bytes for this socket that it has not taken yet */
};

/* Opens the side's watch of s->io.fd, a nonblocking socket, watching nothing yet: 0, or -1
 * when the descriptor cannot be watched. */
int side_open(side_t *s, uv_loop_t *loop);

/* Ends the side's watch: `on_closed` is called, as uv_close calls it, with a handle whose data
 * is the side, once the poll handle would have been closed; the descriptor is the caller's. */
void side_close(side_t *s, uv_close_cb on_closed);

/* Watches `events` (none: stops) for side->on_poll. Watching what it watches already costs
 * nothing; any change costs libuv two epoll_ctl calls, so a side changing hands keeps its
 * watch and changes only on_poll. */
void side_watch(side_t *s, int events);

#endif
