/* The answer to a pooled connection's reset (reset-answer.h). */
#include "reset-answer.h"

#include <string.h>

#include "protocol-codes.h"

void reset_answer_start(reset_answer_t *a, int ready) {
  a->in.len = a->statuses.len = 0;
  a->ready_due = ready;
  a->completions = a->discarded = a->failed = 0;
}

/* One whole message. Returns 1 once the last ReadyForQuery is in. */
static int take_message(reset_answer_t *a, const uint8_t *message, size_t n) {
  const uint8_t *body = message + HEADER_BYTES;
  size_t body_len = n - HEADER_BYTES;
  switch (message[0]) {
    case BACKEND_PARAMETER_STATUS:
      if (bytes_append(&a->statuses, message, n) < 0) a->failed = 1;
      return 0;
    case BACKEND_ERROR_RESPONSE:
      a->failed = 1;
      return 0;
    case BACKEND_COMMAND_COMPLETE:
      if (a->completions++ == 0)
        a->discarded = body_len >= 11 && memcmp(body, "DISCARD ALL", 11) == 0;
      return 0;
    case BACKEND_READY_FOR_QUERY:
      if (body_len < 1 || *body != TRANSACTION_STATUS_IDLE) a->failed = 1;
      return --a->ready_due == 0;
    default:
      return 0;
  }
}

int reset_answer_feed(reset_answer_t *a, const uint8_t *p, size_t n) {
  if (a->ready_due <= 0 || bytes_append(&a->in, p, n) < 0) return ANSWER_FAILED;
  bytes_t *in = &a->in;
  size_t at = 0;
  while (in->len - at >= HEADER_BYTES) {
    uint32_t len = read_u32(in->data + at + 1);
    if (len < 4 || len > MAX_ANSWER_MESSAGE) return ANSWER_FAILED;
    if (in->len - at < (size_t)len + 1) break;
    int last = take_message(a, in->data + at, (size_t)len + 1);
    at += (size_t)len + 1;
    if (!last) continue;
    /* Nothing may follow the last answer: the server would be ahead of pgfence. */
    int clean = at == in->len && !a->failed && a->discarded;
    in->len = 0;
    return clean ? ANSWER_CLEAN : ANSWER_FAILED;
  }
  memmove(in->data, in->data + at, in->len - at);
  in->len -= at;
  return ANSWER_PENDING;
}

void reset_answer_free(reset_answer_t *a) {
  bytes_free(&a->in);
  bytes_free(&a->statuses);
}
