/*
 * The client framer (src/native/framing.c) on arbitrary streams split at arbitrary points: what
 * it passes on and delivers, in order, is exactly the stream (up to where it reports a protocol
 * violation); every delivered message is whole and of an intercepted type; nothing is read or
 * kept beyond what it was given.
 */
#include <string.h>

#include "framing.h"
#include "fuzz-input.h"

typedef struct {
  const uint8_t *stream;
  size_t stream_len, out; /* bytes of the stream accounted for so far */
  const client_framer_t *framer;
  size_t deliveries, stop_after;
  int invalid;
} check_t;

static void account(check_t *c, const uint8_t *bytes, size_t n) {
  REQUIRE(n > 0 && c->out + n <= c->stream_len);
  REQUIRE(memcmp(c->stream + c->out, bytes, n) == 0);
  c->out += n;
}

static int on_forward(void *ctx, const uint8_t *bytes, size_t n, uint8_t *owned) {
  account(ctx, bytes, n);
  free(owned);
  return 0;
}

static int on_deliver(void *ctx, const uint8_t *message, size_t n, uint8_t *owned) {
  check_t *c = ctx;
  REQUIRE(n >= HEADER_BYTES && c->framer->intercept[message[0]]);
  uint32_t length = (uint32_t)message[1] << 24 | (uint32_t)message[2] << 16 |
                    (uint32_t)message[3] << 8 | message[4];
  REQUIRE((size_t)length + 1 == n);
  account(c, message, n);
  free(owned);
  return ++c->deliveries == c->stop_after ? -1 : 0;
}

static void on_invalid(void *ctx, const char *detail) {
  check_t *c = ctx;
  REQUIRE(!c->invalid && strlen(detail) > 0);
  c->invalid = 1;
}

static void on_message(void *ctx, const uint8_t *message, size_t available) {
  check_t *c = ctx;
  REQUIRE(available >= HEADER_BYTES && c->framer->valid[message[0]]);
}

static const client_sink_t sink = {on_forward, on_deliver, on_invalid, on_message};

/* Parameters: a split seed (4 bytes), the largest message (1 byte: 2^n), when delivery stops
 * the session (1 byte, 0: never); then the stream. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  input_t in = {data, size};
  uint32_t seed = 0;
  for (int i = 0; i < 4; i++) seed = seed << 8 | take_byte(&in);
  client_framer_t framer = {0};
  framer.max_message = (size_t)1 << (4 + take_byte(&in) % 24);
  for (const char *t = "BCcDdEFfHPpQSX"; *t; t++) framer.valid[(uint8_t)*t] = 1;
  for (const char *t = "QPX"; *t; t++) framer.intercept[(uint8_t)*t] = 1;
  size_t stop_after = take_byte(&in);
  check_t check = {.stream = in.data, .stream_len = in.len, .framer = &framer,
                   .stop_after = stop_after};
  size_t pos = 0;
  int status = 0;
  while (pos < in.len && status == 0) {
    size_t n = next_chunk(&seed, in.len - pos);
    /* A copy of exactly the chunk, so that reading past it is caught. */
    uint8_t *chunk = malloc(n);
    memcpy(chunk, in.data + pos, n);
    status = frame_client(&framer, &sink, &check, chunk, n);
    free(chunk);
    pos += n;
    /* Everything before a held message or a partial header has been passed on. */
    if (status == 0) {
      size_t pending = framer.state.holding ? framer.state.held.len : framer.state.header_len;
      REQUIRE(check.out + pending == pos);
    }
  }
  REQUIRE(status < 0 || check.out + framer.state.held.len + framer.state.header_len == in.len);
  REQUIRE(!check.invalid || status < 0);
  framer_free(&framer.state);
  return 0;
}
