/*
 * The server scanner (src/native/framing.c) on arbitrary streams split at arbitrary points: it
 * reports exactly the ErrorResponse, NoticeResponse and ParameterStatus messages a whole-stream
 * reading finds, each whole, and ends at a boundary exactly when the stream does. What it passes
 * on (forwarded bytes, and the messages it withheld) is always a prefix of the stream less the
 * CommandCompletes that follow a replaced NoticeResponse, and all of it at a boundary. Here a
 * NoticeResponse of odd length counts as replaced (by itself).
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
  uint8_t *out; /* what was passed on, in order */
  size_t out_len;
  uint8_t *expected; /* the stream as it should be passed on: dropped messages left out */
  size_t expected_len;
} check_t;

static size_t total_at(const uint8_t *m) {
  uint32_t length = length_at(m);
  return HEADER_BYTES + (length < 4 ? 0 : (size_t)length - 4);
}

static int replaces(const uint8_t *message, size_t n) { return message[0] == 'N' && (n & 1); }

/* The reference reading of the whole stream: what is passed on, with each dropped
 * CommandComplete left out (the incomplete tail as it is). */
static void expect_passed_on(check_t *c) {
  size_t pos = 0;
  int drop_next = 0;
  while (c->len - pos >= HEADER_BYTES && total_at(c->stream + pos) <= c->len - pos) {
    const uint8_t *m = c->stream + pos;
    size_t total = total_at(m);
    int reported = total <= MAX_REPORTED_MESSAGE;
    if (!(drop_next && m[0] == 'C' && reported)) {
      memcpy(c->expected + c->expected_len, m, total);
      c->expected_len += total;
    }
    drop_next = reported && replaces(m, total);
    pos += total;
  }
  memcpy(c->expected + c->expected_len, c->stream + pos, c->len - pos);
  c->expected_len += c->len - pos;
}

static int pass_on(check_t *c, const uint8_t *bytes, size_t n) {
  REQUIRE(c->out_len + n <= c->expected_len);
  memcpy(c->out + c->out_len, bytes, n);
  c->out_len += n;
  return 0;
}

static int on_forward(void *ctx, const uint8_t *bytes, size_t n, int copy) {
  (void)copy;
  return pass_on(ctx, bytes, n);
}

/* The next message the reference reading reports, or NULL; `pos` moves past it. */
static const uint8_t *next_reported(check_t *c, size_t *n) {
  while (c->len - c->pos >= HEADER_BYTES) {
    const uint8_t *m = c->stream + c->pos;
    size_t total = total_at(m);
    if (total > c->len - c->pos) return NULL;
    c->pos += total;
    if ((m[0] == 'E' || m[0] == 'N' || m[0] == 'S') && total <= MAX_REPORTED_MESSAGE) {
      *n = total;
      return m;
    }
  }
  return NULL;
}

static int on_report(void *ctx, const uint8_t *message, size_t n, int withheld) {
  check_t *c = ctx;
  REQUIRE(withheld == (message[0] == 'E' || message[0] == 'N'));
  if (withheld) pass_on(c, message, n);
  size_t expected_len = 0;
  const uint8_t *expected = next_reported(c, &expected_len);
  REQUIRE(expected != NULL && expected_len == n && memcmp(expected, message, n) == 0);
  if (++c->reports == c->stop_after) return -1;
  return replaces(message, n);
}

static void on_header(void *ctx, uint8_t type) { (void)ctx, (void)type; }
static void on_body(void *ctx, uint8_t first) { (void)ctx, (void)first; }

static const server_sink_t sink = {on_forward, on_report, on_header, on_body};

/* Parameters: a split seed (4 bytes), after how many reports the session stops (1 byte, 0:
 * never); then the stream. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  input_t in = {data, size};
  uint32_t seed = 0;
  for (int i = 0; i < 4; i++) seed = seed << 8 | take_byte(&in);
  size_t stop_after = take_byte(&in);
  check_t check = {.stream = in.data, .len = in.len, .stop_after = stop_after};
  check.out = malloc(in.len + 1);
  check.expected = malloc(in.len + 1);
  expect_passed_on(&check);
  framer_t scanner = {0};
  size_t pos = 0;
  while (pos < in.len && (check.stop_after == 0 || check.reports < check.stop_after)) {
    size_t n = next_chunk(&seed, in.len - pos);
    uint8_t *chunk = malloc(n);
    memcpy(chunk, in.data + pos, n);
    int status = scan_server(&scanner, &sink, &check, chunk, n);
    free(chunk);
    pos += n;
    REQUIRE(memcmp(check.out, check.expected, check.out_len) == 0);
    if (status < 0) break;
  }
  if (pos == in.len && (check.stop_after == 0 || check.reports < check.stop_after)) {
    size_t ignored;
    REQUIRE(next_reported(&check, &ignored) == NULL);
    REQUIRE(at_boundary(&scanner) == (check.pos == in.len));
    if (at_boundary(&scanner)) REQUIRE(check.out_len == check.expected_len);
  }
  free(check.out);
  free(check.expected);
  framer_free(&scanner);
  return 0;
}
