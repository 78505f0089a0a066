/*
 * A byte-level PostgreSQL lexer, the C twin of src/rewrite/lexer.ts: just enough to tell
 * comments, string literals, numbers, parameters and quoted identifiers apart. Bytes >= 0x80
 * are identifier characters, as in PostgreSQL's scanner, so UTF-8 and single-byte encodings
 * lex alike.
 */
#include "query-normalise.h"

#include <stdio.h>

typedef enum { T_COMMENT, T_STRING, T_NUMBER, T_PARAM, T_QUOTED, T_WORD, T_OTHER } kind_t;

/* Dollar-quote tags longer than this are not looked for (as in the TypeScript lexer). */
#define MAX_DOLLAR_TAG 256

static int is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
static int is_letter(uint8_t c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }
static int is_ident_start(uint8_t c) { return is_letter(c) || c == '_' || c >= 0x80; }
static int is_ident_char(uint8_t c) { return is_ident_start(c) || is_digit(c) || c == '$'; }
static int is_hex_digit(uint8_t c) {
  return is_digit(c) || (c >= 'A' && c <= 'F') || (c >= 'a' && c <= 'f');
}
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
    while (j < n && j - i < MAX_DOLLAR_TAG - 1 && is_ident_char(s[j]) && s[j] != '$') j++;
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
  if ((c == 'E' || c == 'e') && next == '\'') return *end = quoted_end(s, n, i + 2, '\'', 1), T_STRING;
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

static int add_literal(normalised_t *out, size_t start, size_t end) {
  if (out->count == out->cap) {
    size_t cap = out->cap ? out->cap * 2 : 16;
    span_t *literals = realloc(out->literals, cap * sizeof *literals);
    if (!literals) return -1;
    out->literals = literals;
    out->cap = cap;
  }
  out->literals[out->count++] = (span_t){(uint32_t)start, (uint32_t)(end - start)};
  char placeholder[24];
  int len = snprintf(placeholder, sizeof placeholder, "$%zu", out->count);
  return bytes_append(&out->key, (const uint8_t *)placeholder, (size_t)len);
}

int normalise_query(const uint8_t *sql, size_t n, normalised_t *out) {
  out->key.len = 0;
  out->count = 0;
  size_t i = 0, copied = 0;
  while (i < n) {
    if (is_space(sql[i])) {
      i++;
      continue;
    }
    size_t end;
    kind_t kind = scan_token(sql, n, i, &end);
    if (kind == T_PARAM) return NOT_NORMALISABLE;
    if (kind == T_STRING || kind == T_NUMBER) {
      if (bytes_append(&out->key, sql + copied, i - copied) < 0 || add_literal(out, i, end) < 0)
        return NORMALISE_FAILED;
      copied = end;
    }
    i = end;
  }
  return bytes_append(&out->key, sql + copied, n - copied) < 0 ? NORMALISE_FAILED : NORMALISED;
}

void normalised_free(normalised_t *out) {
  bytes_free(&out->key);
  free(out->literals);
  out->literals = NULL;
  out->count = out->cap = 0;
}
