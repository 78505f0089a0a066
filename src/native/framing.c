#include "framing.h"

#include <stdio.h>

int at_boundary(const framer_t *f) {
  return f->header_len == 0 && f->remaining == 0 && !f->holding;
}

void framer_free(framer_t *f) { bytes_free(&f->held); }

/* ---- client → server ---- */

/* Checks a client header; returns the whole message size, or 0 after reporting it invalid. */
static size_t check_client_header(const client_framer_t *f, const client_sink_t *sink, void *ctx,
                                  const uint8_t *h) {
  char detail[64];
  uint32_t length = read_u32(h + 1);
  if (!f->valid[h[0]]) {
    snprintf(detail, sizeof detail, "invalid frontend message type %u", h[0]);
  } else if (length < 4 || length > f->max_message - 1) {
    snprintf(detail, sizeof detail, "invalid message length %u", length);
  } else {
    return (size_t)length + 1;
  }
  sink->invalid(ctx, detail);
  return 0;
}

static void start_held(framer_t *f, size_t total) {
  f->holding = 1;
  f->held_total = total;
  f->held.len = 0;
}

/* Adds bytes to the held message; returns how many it took. */
static size_t fill_held(framer_t *f, const uint8_t *p, size_t n) {
  size_t take = f->held_total - f->held.len;
  if (take > n) take = n;
  if (bytes_append(&f->held, p, take) < 0) return (size_t)-1;
  return take;
}

/* The held message is complete: hand its buffer over. */
static int deliver_held(framer_t *f, const client_sink_t *sink, void *ctx) {
  uint8_t *data = f->held.data;
  size_t len = f->held.len;
  f->held.data = NULL;
  f->held.len = f->held.cap = 0;
  f->holding = 0;
  return sink->deliver(ctx, data, len, data);
}

static int forward_run(const client_sink_t *sink, void *ctx, const uint8_t *chunk, size_t start,
                       size_t end) {
  return end > start ? sink->forward(ctx, chunk + start, end - start, NULL) : 0;
}

static int forward_copy(const client_sink_t *sink, void *ctx, const uint8_t *p, size_t n) {
  uint8_t *copy = malloc(n);
  if (!copy) return -1;
  memcpy(copy, p, n);
  return sink->forward(ctx, copy, n, copy);
}

/* A header that arrived split: completes it from the chunk. Returns the chunk bytes consumed,
 * or (size_t)-1 when the session stopped. */
static size_t finish_split_header(client_framer_t *cf, const client_sink_t *sink, void *ctx,
                                  const uint8_t *chunk, size_t n) {
  framer_t *f = &cf->state;
  size_t need = HEADER_BYTES - f->header_len;
  size_t take = need < n ? need : n;
  memcpy(f->header + f->header_len, chunk, take);
  f->header_len += take;
  if (f->header_len < HEADER_BYTES) return take;
  f->header_len = 0;
  size_t total = check_client_header(cf, sink, ctx, f->header);
  if (total == 0) return (size_t)-1;
  sink->message(ctx, f->header, HEADER_BYTES);
  if (cf->intercept[f->header[0]]) {
    start_held(f, total);
    if (bytes_append(&f->held, f->header, HEADER_BYTES) < 0) return (size_t)-1;
    if (total == HEADER_BYTES && deliver_held(f, sink, ctx) < 0) return (size_t)-1;
  } else {
    if (forward_copy(sink, ctx, f->header, HEADER_BYTES) < 0) return (size_t)-1;
    f->remaining = total - HEADER_BYTES;
  }
  return take;
}

int frame_client(client_framer_t *cf, const client_sink_t *sink, void *ctx, const uint8_t *chunk,
                 size_t end) {
  framer_t *f = &cf->state;
  size_t pos = 0, run = 0;
  while (pos < end) {
    if (f->remaining > 0) {
      size_t take = f->remaining < end - pos ? f->remaining : end - pos;
      f->remaining -= take;
      pos += take;
    } else if (f->holding) {
      size_t take = fill_held(f, chunk + pos, end - pos);
      if (take == (size_t)-1) return -1;
      pos += take;
      run = pos;
      if (f->held.len == f->held_total && deliver_held(f, sink, ctx) < 0) return -1;
    } else if (f->header_len > 0 || end - pos < HEADER_BYTES) {
      if (forward_run(sink, ctx, chunk, run, pos) < 0) return -1;
      size_t take = finish_split_header(cf, sink, ctx, chunk + pos, end - pos);
      if (take == (size_t)-1) return -1;
      pos += take;
      run = pos;
    } else {
      size_t total = check_client_header(cf, sink, ctx, chunk + pos);
      if (total == 0) return -1;
      sink->message(ctx, chunk + pos, end - pos);
      if (cf->intercept[chunk[pos]]) {
        if (forward_run(sink, ctx, chunk, run, pos) < 0) return -1;
        if (end - pos >= total) {
          if (sink->deliver(ctx, chunk + pos, total, NULL) < 0) return -1;
          pos += total;
        } else {
          start_held(f, total);
          size_t take = fill_held(f, chunk + pos, end - pos);
          if (take == (size_t)-1) return -1;
          pos += take;
        }
        run = pos;
      } else if (end - pos >= total) {
        pos += total;
      } else {
        f->remaining = total - (end - pos);
        pos = end;
      }
    }
  }
  return forward_run(sink, ctx, chunk, run, pos);
}

/* ---- server → client ---- */

/* Reports the message held whole; a withheld one is the sink's to send. A CommandComplete is
 * held only to be dropped. */
static int pass_held(framer_t *f, const server_sink_t *sink, void *ctx) {
  int withheld = f->withholding;
  uint8_t type = f->held.data[0];
  f->holding = f->withholding = 0;
  int status = type == BACKEND_COMMAND_COMPLETE
                   ? 0
                   : sink->report(ctx, f->held.data, f->held.len, withheld);
  f->held.len = 0;
  if (status < 0) return status;
  f->drop_completion = status == 1 && type == BACKEND_NOTICE_RESPONSE;
  return 0;
}

/* A whole server header: starts gathering the message when it is reported or dropped. */
static void start_server_message(framer_t *f) {
  uint32_t length = read_u32(f->header + 1);
  size_t body = length < 4 ? 0 : (size_t)length - 4;
  uint8_t type = f->header[0];
  int dropped = f->drop_completion && type == BACKEND_COMMAND_COMPLETE;
  int withheld = dropped || type == BACKEND_ERROR_RESPONSE || type == BACKEND_NOTICE_RESPONSE;
  f->drop_completion = 0;
  f->holding = f->withholding = 0;
  int reported = withheld || type == BACKEND_PARAMETER_STATUS;
  if (reported && body + HEADER_BYTES <= MAX_REPORTED_MESSAGE) {
    f->held.len = 0;
    f->holding = bytes_append(&f->held, f->header, HEADER_BYTES) == 0;
    f->withholding = f->holding && withheld;
  }
  f->remaining = body;
}

static int forward_view(const server_sink_t *sink, void *ctx, const uint8_t *chunk, size_t start,
                        size_t end) {
  return end > start ? sink->forward(ctx, chunk + start, end - start, 0) : 0;
}

int scan_server(framer_t *f, const server_sink_t *sink, void *ctx, const uint8_t *chunk,
                size_t end) {
  size_t pos = 0, run = 0;
  while (pos < end) {
    if (f->remaining > 0) {
      size_t take = f->remaining < end - pos ? f->remaining : end - pos;
      sink->body(ctx, chunk[pos]);
      if (f->holding && bytes_append(&f->held, chunk + pos, take) < 0) return -1;
      f->remaining -= take;
      pos += take;
      if (f->withholding) run = pos;
      if (f->remaining == 0 && f->holding && pass_held(f, sink, ctx) < 0) return -1;
      continue;
    }
    size_t had = f->header_len;
    size_t take = HEADER_BYTES - had;
    if (take > end - pos) take = end - pos;
    memcpy(f->header + had, chunk + pos, take);
    f->header_len += take;
    if (f->header_len < HEADER_BYTES) break; /* held back until the next chunk completes it */
    f->header_len = 0;
    sink->header(ctx, f->header[0]);
    start_server_message(f);
    if (f->withholding) {
      if (forward_view(sink, ctx, chunk, run, pos) < 0) return -1;
      run = pos + take;
    } else if (had > 0 && sink->forward(ctx, f->header, had, 1) < 0) {
      return -1;
    }
    pos += take;
    if (f->remaining == 0 && f->holding && pass_held(f, sink, ctx) < 0) return -1;
  }
  return forward_view(sink, ctx, chunk, run, pos);
}
