/*
 * The server scanner (src/native/framing.c) on arbitrary streams split at arbitrary points: it
 * reports exactly the ErrorResponse and ParameterStatus messages a whole-stream reading finds,
 * each whole, and ends at a boundary exactly when the stream does.
 */
#include <string.h>

#include "framing.h"
#include "fuzz-input.h"

static uint32_t length_at(const uint8_t *p) {
  return (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 | p[4];
}

typedef struct {
  const uint8_t *stream;
  size_t len, pos; /* where the reference reading of the stream stands */
  size_t reports, stop_after;
} check_t;

/* The next message the reference reading reports, or NULL; `pos` moves past it. */
static const uint8_t *next_reported(check_t *c, size_t *n) {
  while (c->len - c->pos >= HEADER_BYTES) {
    const uint8_t *m = c->stream + c->pos;
    uint32_t length = length_at(m);
    size_t total = HEADER_BYTES + (length < 4 ? 0 : (size_t)length - 4);
    if (total > c->len - c->pos) return NULL;
    c->pos += total;
    if ((m[0] == 'E' || m[0] == 'S') && total <= MAX_REPORTED_MESSAGE) {
      *n = total;
      return m;
    }
  }
  return NULL;
}

static int on_report(void *ctx, const uint8_t *message, size_t n) {
  check_t *c = ctx;
  size_t expected_len = 0;
  const uint8_t *expected = next_reported(c, &expected_len);
  REQUIRE(expected != NULL && expected_len == n && memcmp(expected, message, n) == 0);
  return ++c->reports == c->stop_after ? -1 : 0;
}

static void on_header(void *ctx, uint8_t type) { (void)ctx, (void)type; }
static void on_body(void *ctx, uint8_t first) { (void)ctx, (void)first; }

static const server_sink_t sink = {on_report, on_header, on_body};

/* Parameters: a split seed (4 bytes), after how many reports the session stops (1 byte, 0:
 * never); then the stream. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  input_t in = {data, size};
  uint32_t seed = 0;
  for (int i = 0; i < 4; i++) seed = seed << 8 | take_byte(&in);
  size_t stop_after = take_byte(&in);
  check_t check = {.stream = in.data, .len = in.len, .stop_after = stop_after};
  framer_t scanner = {0};
  size_t pos = 0;
  while (pos < in.len && (check.stop_after == 0 || check.reports < check.stop_after)) {
    size_t n = next_chunk(&seed, in.len - pos);
    uint8_t *chunk = malloc(n);
    memcpy(chunk, in.data + pos, n);
    scan_server(&scanner, &sink, &check, chunk, n);
    free(chunk);
    pos += n;
  }
  if (pos == in.len && (check.stop_after == 0 || check.reports < check.stop_after)) {
    size_t ignored;
    REQUIRE(next_reported(&check, &ignored) == NULL);
    REQUIRE(at_boundary(&scanner) == (check.pos == in.len));
  }
  framer_free(&scanner);
  return 0;
}
