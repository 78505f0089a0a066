#include "session-progress.h"

#include <string.h>

#include "bytes.h"
#include "protocol-codes.h"

static int is_word_char(uint8_t c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '$' || c >= 0x80;
}

/* Is `word` (lower case) at `at`, in any letter case, with no identifier character around? */
static int word_at(const uint8_t *text, size_t n, size_t at, const char *word, size_t len) {
  if (at + len > n || (at > 0 && is_word_char(text[at - 1]))) return 0;
  for (size_t k = 0; k < len; k++)
    if ((text[at + k] | 0x20) != (uint8_t)word[k]) return 0;
  return at + len == n || !is_word_char(text[at + len]);
}

/* Lexical and conservative: COMMIT or END anywhere, even in a literal, counts. */
static int mentions_commit(const uint8_t *text, size_t n) {
  for (size_t at = 0; at < n; at++) {
    uint8_t c = text[at] | 0x20;
    if (c == 'c' && word_at(text, n, at, "commit", 6)) return 1;
    if (c == 'e' && word_at(text, n, at, "end", 3)) return 1;
  }
  return 0;
}

void progress_client_message(progress_t *p, const uint8_t *message, size_t avail, uint64_t now) {
  uint8_t type = message[0];
  uint32_t length = read_u32(message + 1);
  size_t total = (size_t)length + 1;
  int whole = avail >= total;
  const uint8_t *body = message + HEADER_BYTES;
  size_t body_len = whole ? total - HEADER_BYTES : 0;
  /* A Terminate asks for no answer and goes to no server connection that others reuse. */
  if (type == FRONTEND_TERMINATE) return;
  if (type == FRONTEND_COPY_DATA) p->progress_at = now; /* COPY data keeps an upload alive */
  p->unsynced = 1;
  if (type == FRONTEND_QUERY || type == FRONTEND_PARSE) {
    /* A message not at hand whole may be anything. */
    int commit = !whole || mentions_commit(body, body_len);
    p->may_commit |= commit;
    if (type == FRONTEND_PARSE && commit && (!whole || body[0] != 0)) p->named_commit = 1;
  } else if (type == FRONTEND_BIND && p->named_commit) {
    p->may_commit = 1;
  }
  if (type != FRONTEND_QUERY && type != FRONTEND_SYNC && type != FRONTEND_FUNCTION_CALL) return;
  if (p->outstanding++ == 0) p->progress_at = now;
}

void progress_server_header(progress_t *p, uint8_t type) {
  p->status_next = type == BACKEND_READY_FOR_QUERY;
}

void progress_server_body(progress_t *p, uint8_t first) {
  if (!p->status_next) return;
  p->status_next = 0;
  p->status = first;
  if (first == TRANSACTION_STATUS_IDLE) p->transactions++;
  if (p->outstanding > 0 && --p->outstanding == 0) p->may_commit = 0;
  if (p->outstanding == 0) p->unsynced = 0;
}
