/*
 * Where a relayed session's requests stand, kept from the bytes the relay already frames, so
 * that the proxy can time requests out and tell a cut client what became of its transaction
 * without a JavaScript call per message.
 */
#ifndef PGFENCE_SESSION_PROGRESS_H
#define PGFENCE_SESSION_PROGRESS_H
#include <stddef.h>
#include <stdint.h>

#include "carried-progress.h"

#define PROGRESS_COUNT(name, member) uint32_t member;
#define PROGRESS_LETTER(name, member) uint8_t member;
#define PROGRESS_FLAG(name, member) uint8_t member;

typedef struct {
  /* What a relay taking the session over goes on from: carried-progress.h lists these fields
   * and says what each means. */
  CARRIED_PROGRESS(PROGRESS_COUNT, PROGRESS_LETTER, PROGRESS_FLAG)
  uint8_t status_next;      /* the server's next byte is a ReadyForQuery status */
  uint64_t progress_at;     /* loop time (ms) of the last server bytes, or of the first request */
  uint64_t transactions;    /* ReadyForQuery 'I' seen: transactions ended, for metrics */
} progress_t;

#undef PROGRESS_COUNT
#undef PROGRESS_LETTER
#undef PROGRESS_FLAG

/* A client message starts: its header and the `avail` bytes of it at hand (maybe not all). */
void progress_client_message(progress_t *p, const uint8_t *message, size_t avail, uint64_t now);

/* A server message header (type byte) was read. */
void progress_server_header(progress_t *p, uint8_t type);

/* The first byte of a server message body (a ReadyForQuery's status, when one was announced). */
void progress_server_body(progress_t *p, uint8_t first);

#endif
