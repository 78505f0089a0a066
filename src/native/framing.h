/*
 * Message boundaries in both directions of a session, without Node: the client's stream is
 * framed (type and length checked, intercepted types gathered whole, the rest passed on as
 * views of the chunk), the server's is followed so that ErrorResponses and ParameterStatus
 * messages can be reported. relay.c feeds them from its sockets; the fuzz targets feed them
 * arbitrary bytes.
 */
#ifndef PGFENCE_FRAMING_H
#define PGFENCE_FRAMING_H
#include "bytes.h"
#include "protocol-codes.h"

/* Reported server messages larger than this are followed but not reported. */
#define MAX_REPORTED_MESSAGE (64 * 1024)

/* Where one direction's byte stream stands in its message sequence. */
typedef struct {
  uint8_t header[HEADER_BYTES];
  size_t header_len;
  size_t remaining; /* bytes of the current message still to come, passed through */
  bytes_t held;     /* a message gathered whole, when its type is collected */
  size_t held_total;
  int holding;
  int withholding; /* the held message goes out only once whole (server ErrorResponses and
                    * NoticeResponses) */
  int drop_completion; /* a NoticeResponse was replaced: drop a CommandComplete right after it */
} framer_t;

/* Where the client's bytes go. `owned` is NULL for a view of the chunk being framed (valid
 * until the push returns), else the heap block holding the bytes, which the callee takes over.
 * Both return -1 once the session stopped. */
typedef struct {
  int (*forward)(void *ctx, const uint8_t *bytes, size_t n, uint8_t *owned);
  /* One whole message of an intercepted type, header included. */
  int (*deliver)(void *ctx, const uint8_t *message, size_t n, uint8_t *owned);
  /* The client broke the protocol: nothing more is framed. */
  void (*invalid)(void *ctx, const char *detail);
  /* A valid message starts: its header and the bytes of it at hand (at least the header). */
  void (*message)(void *ctx, const uint8_t *message, size_t available);
} client_sink_t;

typedef struct {
  framer_t state;
  uint8_t valid[256];     /* the frontend message types */
  uint8_t intercept[256]; /* the types delivered whole */
  size_t max_message;
} client_framer_t;

/* Frames one chunk of client bytes into `sink`. Returns -1 when the session stopped or memory
 * ran out, else 0. */
int frame_client(client_framer_t *f, const client_sink_t *sink, void *ctx, const uint8_t *chunk,
                 size_t n);

typedef struct {
  /* Bytes for the client: a view of the chunk, or (`copy`) bytes that do not outlive the call.
   * Returns -1 when the session stopped or memory ran out. */
  int (*forward)(void *ctx, const uint8_t *bytes, size_t n, int copy);
  /* A whole ErrorResponse, NoticeResponse or ParameterStatus. A `withheld` one (an
   * ErrorResponse or NoticeResponse) was not forwarded: the callee sends it, or what replaces
   * it. Returns -1 when the session stopped, 1 when it replaced a withheld message, else 0. A
   * NoticeResponse replaced stands for its statement's outcome (an ErrorResponse): the
   * CommandComplete right after it is dropped, as a failed statement has none. */
  int (*report)(void *ctx, const uint8_t *message, size_t n, int withheld);
  /* A message's type, once its header is whole. */
  void (*header)(void *ctx, uint8_t type);
  /* The first byte of each run of body bytes. */
  void (*body)(void *ctx, uint8_t first);
} server_sink_t;

/* Follows the server's boundaries through one chunk, passing its bytes to `sink`. An
 * ErrorResponse or NoticeResponse, and a header split across chunks, is held back until whole. Returns -1 when
 * the session stopped or memory ran out, else 0. */
int scan_server(framer_t *f, const server_sink_t *sink, void *ctx, const uint8_t *chunk,
                size_t n);

int at_boundary(const framer_t *f);
void framer_free(framer_t *f);

#endif
