/*
 * The Query template cache (src/native/query-cache.c): texts separated by NUL are normalised,
 * looked up, and on a miss given an entry whose kind, parts and holes come from the input; a
 * template is filled with each text's own values. A small capacity makes the generations turn
 * over. Checks: a hit has the looked-up key, a filled message is a well-formed Query of the
 * expected length, and nothing leaks or is read out of bounds.
 */
#include <string.h>

#include "fuzz-normalise.h"
#include "query-cache.h"

/* An entry for the normalised key: `kind`, and a template cutting the key into parts at
 * positions and with holes chosen by the input. */
static cache_entry_t *make_entry(const normalised_t *n, uint64_t hash, input_t *in) {
  cache_entry_t *e = calloc(1, sizeof *e);
  e->hash = hash;
  e->kind = (entry_kind_t)(take_byte(in) % 3);
  REQUIRE(bytes_append(&e->key, n->key.data, n->key.len) == 0);
  size_t holes = n->count ? take_byte(in) % 5 : 0;
  e->part_ends = malloc((holes + 1) * sizeof *e->part_ends);
  e->holes = malloc((holes ? holes : 1) * sizeof *e->holes);
  REQUIRE(bytes_append(&e->parts, n->key.data, n->key.len) == 0);
  uint32_t end = 0;
  for (size_t i = 0; i < holes; i++) {
    if (end < n->key.len) end += take_byte(in) % (n->key.len - end + 1);
    e->part_ends[i] = end;
    e->holes[i] = take_byte(in) % n->count;
  }
  e->part_ends[holes] = (uint32_t)n->key.len;
  e->hole_count = holes;
  e->value_count = n->count;
  return e;
}

static void check_filled(const cache_entry_t *e, const uint8_t *text, const normalised_t *n) {
  size_t expected = 5 + e->parts.len + 1, len = 0;
  for (size_t i = 0; i < e->hole_count; i++) expected += n->values[e->holes[i]].len;
  uint8_t *message = fill_query_template(e, text, n, &len);
  REQUIRE(message != NULL && len == expected && message[0] == 'Q' && message[len - 1] == 0);
  uint32_t length = (uint32_t)message[1] << 24 | (uint32_t)message[2] << 16 |
                    (uint32_t)message[3] << 8 | message[4];
  REQUIRE(length == len - 1);
  free(message);
}

/* Parameters: the capacity (1 byte); then texts separated by NUL, each starting with the bytes
 * that shape its entry. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  input_t in = {data, size};
  query_cache_t cache;
  REQUIRE(query_cache_init(&cache, 1 + take_byte(&in) % 8) == 0);
  normalised_t n = {0};
  while (in.len > 0) {
    const uint8_t *nul = memchr(in.data, 0, in.len);
    size_t len = nul ? (size_t)(nul - in.data) : in.len;
    input_t shape = {in.data, len < 8 ? len : 8};
    uint8_t *text = malloc(len ? len : 1);
    memcpy(text, in.data, len);
    in.data += len + (nul != NULL);
    in.len -= len + (nul != NULL);
    if (normalise_query(text, len, &keys, &n) == NORMALISED) {
      require_values_inside(&n, len);
      uint64_t hash = query_cache_hash(&n.key);
      cache_entry_t *e = query_cache_get(&cache, &n.key, hash);
      if (!e) query_cache_put(&cache, e = make_entry(&n, hash, &shape));
      REQUIRE(e->key.len == n.key.len &&
              (n.key.len == 0 || memcmp(e->key.data, n.key.data, n.key.len) == 0));
      if (e->kind == ENTRY_TEMPLATE && e->value_count == n.count) check_filled(e, text, &n);
    }
    free(text);
  }
  normalised_free(&n);
  query_cache_free(&cache);
  return 0;
}
