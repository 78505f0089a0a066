/*
 * A byte-level PostgreSQL lexer, the C twin of src/rewrite/lexer.ts: just enough to tell
 * comments, string literals, numbers, parameters and quoted identifiers apart. Bytes >= 0x80
 * are identifier characters, as in PostgreSQL's scanner, so UTF-8 and single-byte encodings
 * lex alike.
 */
#define _GNU_SOURCE /* memmem */
#include "query-normalise.h"

#include <stdio.h>
#include <string.h>

typedef enum { T_COMMENT, T_STRING, T_NUMBER, T_PARAM, T_QUOTED, T_WORD, T_OTHER } kind_t;

static int is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
static int is_letter(uint8_t c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }
static int is_ident_start(uint8_t c) { return is_letter(c) || c == '_' || c >= 0x80; }
static int is_ident_char(uint8_t c) { return is_ident_start(c) || is_digit(c) || c == '$'; }
static int is_hex_digit(uint8_t c) {
  return is_digit(c) || (c >= 'A' && c <= 'F') || (c >= 'a' && c <= 'f');
}
/* PostgreSQL's whitespace, ASCII \s. */
static int is_space(uint8_t c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/* The byte at i, or 0 past the end (no lexer rule matches NUL). */
static uint8_t at(const uint8_t *s, size_t n, size_t i) { return i < n ? s[i] : 0; }

static size_t line_end(const uint8_t *s, size_t n, size_t i) {
  const uint8_t *nl = memchr(s + i, '\n', n - i);
  return nl ? (size_t)(nl - s) : n;
}

/* PostgreSQL block comments nest. */
static size_t block_comment_end(const uint8_t *s, size_t n, size_t i) {
  int depth = 0;
  while (i < n) {
    if (s[i] == '/' && at(s, n, i + 1) == '*') {
      depth++;
      i += 2;
    } else if (s[i] == '*' && at(s, n, i + 1) == '/') {
      i += 2;
      if (--depth == 0) return i;
    } else {
      i++;
    }
  }
  return n;
}

/* End of a quoted run from just after the opening quote; a doubled quote is an escaped one. */
static size_t quoted_end(const uint8_t *s, size_t n, size_t i, uint8_t quote, int backslash) {
  while (i < n) {
    if (backslash && s[i] == '\\') {
      i += 2;
    } else if (s[i] == quote) {
      if (at(s, n, i + 1) != quote) return i + 1;
      i += 2;
    } else {
      i++;
    }
  }
  return n;
}

static size_t digits_end(const uint8_t *s, size_t n, size_t i) {
  while (i < n && (is_digit(s[i]) || s[i] == '_')) i++;
  return i;
}

/* 42, 4.2, .42, 4e2, 1_000, 0x2A, 0o52, 0b101010. */
static size_t number_end(const uint8_t *s, size_t n, size_t i) {
  uint8_t second = at(s, n, i + 1);
  if (s[i] == '0' && (second == 'x' || second == 'X' || second == 'o' || second == 'O' ||
                      second == 'b' || second == 'B')) {
    i += 2;
    while (i < n && (is_hex_digit(s[i]) || s[i] == '_')) i++;
    return i;
  }
  i = digits_end(s, n, i);
  if (at(s, n, i) == '.') i = digits_end(s, n, i + 1);
  if (at(s, n, i) == 'e' || at(s, n, i) == 'E') {
    size_t k = i + 1;
    if (at(s, n, k) == '+' || at(s, n, k) == '-') k++;
    if (is_digit(at(s, n, k))) i = digits_end(s, n, k);
  }
  return i;
}

/* $1 (a parameter), $tag$…$tag$ (a string), or a lone $. */
static kind_t scan_dollar(const uint8_t *s, size_t n, size_t i, size_t *end) {
  if (is_digit(at(s, n, i + 1))) {
    size_t j = i + 1;
    while (j < n && is_digit(s[j])) j++;
    *end = j;
    return T_PARAM;
  }
  size_t j = i + 1;
  if (j < n && is_ident_start(s[j])) {
    j++;
    while (j < n && is_ident_char(s[j]) && s[j] != '$') j++;
  }
  if (at(s, n, j) != '$') {
    *end = i + 1;
    return T_OTHER;
  }
  size_t tag_len = j + 1 - i;
  for (size_t k = j + 1; k + tag_len <= n; k++) {
    if (s[k] == '$' && memcmp(s + k, s + i, tag_len) == 0) {
      *end = k + tag_len;
      return T_STRING;
    }
  }
  *end = n;
  return T_STRING;
}

static kind_t scan_token(const uint8_t *s, size_t n, size_t i, size_t *end) {
  uint8_t c = s[i], next = at(s, n, i + 1);
  if (c == '-' && next == '-') return *end = line_end(s, n, i), T_COMMENT;
  if (c == '/' && next == '*') return *end = block_comment_end(s, n, i), T_COMMENT;
  if (c == '\'') return *end = quoted_end(s, n, i + 1, '\'', 0), T_STRING;
  if (c == '"') return *end = quoted_end(s, n, i + 1, '"', 0), T_QUOTED;
  if ((c == 'E' || c == 'e') && next == '\'')
    return *end = quoted_end(s, n, i + 2, '\'', 1), T_STRING;
  if ((c == 'B' || c == 'b' || c == 'X' || c == 'x' || c == 'N' || c == 'n') && next == '\'')
    return *end = quoted_end(s, n, i + 2, '\'', 0), T_STRING;
  if ((c == 'U' || c == 'u') && next == '&') {
    uint8_t quote = at(s, n, i + 2);
    if (quote == '\'' || quote == '"') {
      *end = quoted_end(s, n, i + 3, quote, 0);
      return quote == '\'' ? T_STRING : T_QUOTED;
    }
  }
  if (c == '$') return scan_dollar(s, n, i, end);
  if (is_digit(c) || (c == '.' && is_digit(next))) return *end = number_end(s, n, i), T_NUMBER;
  if (is_ident_start(c)) {
    size_t j = i + 1;
    while (j < n && is_ident_char(s[j])) j++;
    return *end = j, T_WORD;
  }
  return *end = i + 1, T_OTHER;
}

static int push_span(span_t **spans, size_t *count, size_t *cap, span_t span) {
  if (*count == *cap) {
    size_t grown = *cap ? *cap * 2 : 16;
    span_t *more = realloc(*spans, grown * sizeof *more);
    if (!more) return -1;
    *spans = more;
    *cap = grown;
  }
  (*spans)[(*count)++] = span;
  return 0;
}

static int add_literal(normalised_t *out, size_t start, size_t end) {
  span_t literal = {(uint32_t)start, (uint32_t)(end - start), 0};
  if (push_span(&out->values, &out->count, &out->cap, literal) < 0) return -1;
  char placeholder[24];
  int len = snprintf(placeholder, sizeof placeholder, "$%zu", out->count);
  return bytes_append(&out->key, (const uint8_t *)placeholder, (size_t)len);
}

/* ---- comment values: the reading of src/rewrite/comment-token.ts, where it is certain ---- */

enum { NO_VALUE = 0, VALUE = 1, UNSURE = 2 };

/* Is c one of the (ASCII) bytes of `set`? */
static int is_one_of(uint8_t c, const char *set) { return c != 0 && strchr(set, c) != NULL; }

static const uint8_t *find(const uint8_t *s, size_t n, const char *needle, size_t len) {
  return len <= n ? memmem(s, n, needle, len) : NULL;
}

/* Skips ASCII spaces; UNSURE when a non-ASCII byte could be part of a Unicode space, which the
 * rewriter's \s matches. */
static int skip_spaces(const uint8_t *c, size_t n, size_t *i) {
  while (*i < n && is_space(c[*i])) (*i)++;
  return *i < n && c[*i] >= 0x80 ? UNSURE : NO_VALUE;
}

/* `key=value` or `key='value'` after a space, comma, '*', '/' or '-': the value's span in the
 * comment. */
static int comment_value(const uint8_t *c, size_t n, const char *key, span_t *value) {
  size_t key_len = strlen(key);
  const uint8_t *found = find(c, n, key, key_len);
  if (!found) return NO_VALUE;
  size_t at = (size_t)(found - c) + key_len;
  if (find(found + 1, n - (size_t)(found + 1 - c), key, key_len)) return UNSURE;
  uint8_t before = found > c ? found[-1] : ' ';
  if (before >= 0x80) return UNSURE;
  if (!is_space(before) && !is_one_of(before, ",*/-")) return NO_VALUE;
  if (skip_spaces(c, n, &at) == UNSURE) return UNSURE;
  if (at == n || c[at] != '=') return NO_VALUE;
  at++;
  if (skip_spaces(c, n, &at) == UNSURE) return UNSURE;
  size_t start = at, end;
  if (at < n && c[at] == '\'') {
    const uint8_t *close = memchr(c + at + 1, '\'', n - at - 1);
    if (!close) return NO_VALUE;
    start = at + 1;
    end = (size_t)(close - c);
  } else {
    end = at;
    while (end < n && !is_space(c[end]) && !is_one_of(c[end], ",'*/") && c[end] < 0x80)
      end++;
    if (end < n && c[end] >= 0x80) return UNSURE;
    if (end == start) return NO_VALUE;
  }
  for (size_t i = start; i < end; i++) {
    /* URL-decoding and E'' quoting are left to the rewriter. */
    if (c[i] == '%' || c[i] == '\\' || c[i] >= 0x80) return UNSURE;
  }
  *value = (span_t){(uint32_t)start, (uint32_t)(end - start), 0};
  return VALUE;
}

/* A token PostgreSQL takes as is: 1 to 19 digits, at most 2^63-1. */
static int is_valid_token(const uint8_t *v, size_t len) {
  if (len == 0 || len > 19) return 0;
  for (size_t i = 0; i < len; i++)
    if (!is_digit(v[i])) return 0;
  return len < 19 || memcmp(v, "9223372036854775807", 19) <= 0;
}

/* The value as a SQL literal in `quoted`, as one of the values still to come. */
static int add_comment_value(normalised_t *out, const uint8_t *comment, span_t value) {
  span_t quoted = {(uint32_t)out->quoted.len, value.len + 2, 1};
  if (bytes_append(&out->quoted, (const uint8_t *)"'", 1) < 0 ||
      bytes_append(&out->quoted, comment + value.start, value.len) < 0 ||
      bytes_append(&out->quoted, (const uint8_t *)"'", 1) < 0)
    return -1;
  return push_span(&out->pending, &out->pending_count, &out->pending_cap, quoted);
}

/* A comment in the key: a marker when it carries values (which follow the literals), else a
 * space. Returns NORMALISED, NOT_NORMALISABLE or NORMALISE_FAILED. */
static int add_comment(normalised_t *out, const uint8_t *c, size_t n, const comment_keys_t *keys) {
  span_t token, resource;
  int has_token = comment_value(c, n, keys->token, &token);
  int has_resource = comment_value(c, n, keys->resource, &resource);
  if (has_token == UNSURE || has_resource == UNSURE) return NOT_NORMALISABLE;
  if (!has_token && !has_resource) {
    return bytes_append(&out->key, (const uint8_t *)" ", 1) < 0 ? NORMALISE_FAILED : NORMALISED;
  }
  char marker[8];
  int len = snprintf(marker, sizeof marker, "/*@%s%s*/",
                     !has_token ? "" : is_valid_token(c + token.start, token.len) ? "v" : "t",
                     has_resource ? "r" : "");
  if (bytes_append(&out->key, (const uint8_t *)marker, (size_t)len) < 0 ||
      (has_token && add_comment_value(out, c, token) < 0) ||
      (has_resource && add_comment_value(out, c, resource) < 0))
    return NORMALISE_FAILED;
  return NORMALISED;
}

int normalise_query(const uint8_t *sql, size_t n, const comment_keys_t *keys, normalised_t *out) {
  out->key.len = out->quoted.len = 0;
  out->count = out->pending_count = 0;
  size_t i = 0, copied = 0;
  while (i < n) {
    if (is_space(sql[i])) {
      i++;
      continue;
    }
    size_t end;
    kind_t kind = scan_token(sql, n, i, &end);
    if (kind == T_PARAM) return NOT_NORMALISABLE;
    if (kind == T_STRING || kind == T_NUMBER || kind == T_COMMENT) {
      if (bytes_append(&out->key, sql + copied, i - copied) < 0) return NORMALISE_FAILED;
      int status = kind == T_COMMENT ? add_comment(out, sql + i, end - i, keys)
                                     : add_literal(out, i, end) < 0 ? NORMALISE_FAILED
                                                                    : NORMALISED;
      if (status != NORMALISED) return status;
      copied = end;
    }
    i = end;
  }
  /* An empty text may come without memory (a NULL pointer): no arithmetic on it. */
  if (n > copied && bytes_append(&out->key, sql + copied, n - copied) < 0) return NORMALISE_FAILED;
  for (size_t k = 0; k < out->pending_count; k++) {
    if (push_span(&out->values, &out->count, &out->cap, out->pending[k]) < 0)
      return NORMALISE_FAILED;
  }
  return NORMALISED;
}

const uint8_t *value_bytes(const normalised_t *out, const uint8_t *sql, const span_t *value) {
  return (value->quoted_value ? out->quoted.data : sql) + value->start;
}
