/*
 * The Query normaliser (src/native/query-normalise.c) on arbitrary texts: it reads nothing
 * outside the text, every value it reports lies inside the text (or its quoted comment values),
 * the key has one placeholder per literal, and the same text always gives the same result.
 */
#include <string.h>

#include "fuzz-normalise.h"

/* Occurrences of `$k` (not followed by a digit) in the key. */
static int has_placeholder(const bytes_t *key, size_t k) {
  char text[24];
  int len = snprintf(text, sizeof text, "$%zu", k);
  for (size_t at = 0; at + (size_t)len <= key->len; at++) {
    if (memcmp(key->data + at, text, (size_t)len) != 0) continue;
    size_t after = at + (size_t)len;
    if (after == key->len || key->data[after] < '0' || key->data[after] > '9') return 1;
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* A copy of exactly the text, so that reading past it is caught; an empty one has no memory,
   * like an empty Buffer's data through N-API. */
  uint8_t *text = size ? malloc(size) : NULL;
  if (size) memcpy(text, data, size);
  normalised_t first = {0}, second = {0};
  int status = normalise_query(text, size, &keys, &first);
  REQUIRE(status == NORMALISED || status == NOT_NORMALISABLE);
  REQUIRE(normalise_query(text, size, &keys, &second) == status);
  if (status == NORMALISED) {
    require_values_inside(&first, size);
    REQUIRE(first.count == second.count && first.key.len == second.key.len);
    REQUIRE(first.key.len == 0 || memcmp(first.key.data, second.key.data, first.key.len) == 0);
    for (size_t i = 0; i < first.count; i++) {
      if (!first.values[i].quoted_value) REQUIRE(has_placeholder(&first.key, i + 1));
    }
  }
  normalised_free(&first);
  normalised_free(&second);
  free(text);
  return 0;
}
