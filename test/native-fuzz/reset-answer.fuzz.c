/*
 * The reset's answer (src/native/reset-answer.c) on arbitrary streams split at arbitrary points:
 * it says what a reading of the whole stream says (pending, clean or failed, and where), but
 * for bytes after a clean end: those fail it when they come with the last ReadyForQuery (a
 * later read finds them on a connection waiting, which server-link.c closes). A clean answer's
 * ParameterStatus messages are exactly those the stream holds before its end, in order.
 */
#include <string.h>

#include "fuzz-input.h"
#include "reset-answer.h"

static uint32_t length_at(const uint8_t *p) {
  return (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 | p[4];
}

/* The reference reading: the outcome of the whole stream (CLEAN whatever follows the end), the
 * bytes it takes to reach it, and the ParameterStatus messages before it. */
static int expected(const uint8_t *s, size_t len, int ready, size_t *end, uint8_t *statuses,
                    size_t *statuses_len) {
  size_t pos = 0;
  int failed = 0, completions = 0, discarded = 0;
  *statuses_len = 0;
  while (len - pos >= 5) {
    uint32_t length = length_at(s + pos);
    if (length < 4 || length > MAX_ANSWER_MESSAGE) return *end = len, ANSWER_FAILED;
    size_t total = 1 + (size_t)length;
    if (total > len - pos) break;
    const uint8_t *m = s + pos;
    pos += total;
    if (m[0] == 'S') {
      memcpy(statuses + *statuses_len, m, total);
      *statuses_len += total;
    } else if (m[0] == 'E') {
      failed = 1;
    } else if (m[0] == 'C' && completions++ == 0) {
      discarded = total >= 16 && memcmp(m + 5, "DISCARD ALL", 11) == 0;
    } else if (m[0] == 'Z') {
      if (total < 6 || m[5] != 'I') failed = 1;
      if (--ready > 0) continue;
      *end = pos;
      return !failed && discarded ? ANSWER_CLEAN : ANSWER_FAILED;
    }
  }
  *end = len;
  return ANSWER_PENDING;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  input_t in = {data, size};
  int ready = 1 + take_byte(&in) % 3;
  uint32_t seed = take_byte(&in);
  uint8_t *statuses = malloc(in.len + 1);
  size_t statuses_len = 0, end = 0;
  int want = expected(in.data, in.len, ready, &end, statuses, &statuses_len);

  reset_answer_t answer = {0};
  reset_answer_start(&answer, ready);
  int got = ANSWER_PENDING;
  size_t fed = 0;
  while (fed < in.len && got == ANSWER_PENDING) {
    size_t n = next_chunk(&seed, in.len - fed);
    got = reset_answer_feed(&answer, in.data + fed, n);
    fed += n;
  }
  if (want == ANSWER_CLEAN) REQUIRE(got == (fed == end ? ANSWER_CLEAN : ANSWER_FAILED));
  else if (want == ANSWER_PENDING) REQUIRE(got == ANSWER_PENDING && fed == in.len);
  else REQUIRE(got == ANSWER_FAILED);
  if (got == ANSWER_CLEAN) {
    REQUIRE(answer.statuses.len == statuses_len);
    REQUIRE(statuses_len == 0 || memcmp(answer.statuses.data, statuses, statuses_len) == 0);
  }
  if (got != ANSWER_PENDING)
    REQUIRE(reset_answer_feed(&answer, data, size ? 1 : 0) == ANSWER_FAILED);
  reset_answer_free(&answer);
  free(statuses);
  return 0;
}
