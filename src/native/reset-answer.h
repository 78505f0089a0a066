/*
 * The server's answer to a pooled connection's reset, read without Node (reset-answer.c): the
 * server-link (server-link.c) feeds it the bytes as they come; the fuzz target feeds it
 * arbitrary streams split anywhere.
 */
#ifndef PGFENCE_RESET_ANSWER_H
#define PGFENCE_RESET_ANSWER_H
#include <stddef.h>
#include <stdint.h>

#include "bytes.h"

/* The reset's answers are small; anything larger is not one. */
#define MAX_ANSWER_MESSAGE (1024 * 1024)

typedef struct {
  bytes_t in;       /* bytes of a message not yet whole */
  bytes_t statuses; /* the ParameterStatus messages returned so far */
  int ready_due;    /* ReadyForQuery messages still to come */
  int completions, discarded, failed;
} reset_answer_t;

enum { ANSWER_FAILED = -1, ANSWER_PENDING = 0, ANSWER_CLEAN = 1 };

/* Waits for the answers to `ready` simple Queries, the first a DISCARD ALL. */
void reset_answer_start(reset_answer_t *a, int ready);

/* Takes the next bytes: ANSWER_PENDING until the last ReadyForQuery; then ANSWER_CLEAN when no
 * answer was an error, the first completion was DISCARD ALL's, the last ReadyForQuery is idle
 * and nothing followed it; else (or on a length out of bounds, or memory running out)
 * ANSWER_FAILED. Once it has said CLEAN or FAILED, it says FAILED to anything more. */
int reset_answer_feed(reset_answer_t *a, const uint8_t *p, size_t n);

void reset_answer_free(reset_answer_t *a);

#endif
