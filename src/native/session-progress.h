/*
 * Where a relayed session's requests stand, kept from the bytes the relay already frames, so
 * that the proxy can time requests out and tell a cut client what became of its transaction
 * without a JavaScript call per message.
 */
#ifndef PGFENCE_SESSION_PROGRESS_H
#define PGFENCE_SESSION_PROGRESS_H
#include <stddef.h>
#include <stdint.h>

typedef struct {
  uint32_t outstanding;     /* Query, Sync, FunctionCall sent, their ReadyForQuery not back */
  uint8_t status;           /* of the last ReadyForQuery: 'I', 'T' or 'E' */
  uint8_t may_commit;       /* a request since the session was last idle may be a COMMIT */
  uint8_t named_commit;     /* a named statement may be a COMMIT: any Bind may commit */
  uint8_t status_next;      /* the server's next byte is a ReadyForQuery status */
  uint8_t unsynced;         /* a client message since the last ReadyForQuery of all requests:
                             * the session is not between transactions (Parse ... Flush) */
  uint64_t progress_at;     /* loop time (ms) of the last server bytes, or of the first request */
  uint64_t transactions;    /* ReadyForQuery 'I' seen: transactions ended, for metrics */
} progress_t;

/* A client message starts: its header and the `avail` bytes of it at hand (maybe not all). */
void progress_client_message(progress_t *p, const uint8_t *message, size_t avail, uint64_t now);

/* A server message header (type byte) was read. */
void progress_server_header(progress_t *p, uint8_t type);

/* The first byte of a server message body (a ReadyForQuery's status, when one was announced). */
void progress_server_body(progress_t *p, uint8_t first);

#endif
