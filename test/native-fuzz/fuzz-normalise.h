/* What the normaliser and template cache targets share: the default comment keys, and letting
 * go of a normalised text. */
#ifndef PGFENCE_FUZZ_NORMALISE_H
#define PGFENCE_FUZZ_NORMALISE_H
#include "fuzz-input.h"
#include "query-normalise.h"

static const comment_keys_t keys = {"fencing_token", "fencing_resource"};

/* Every value lies inside the text or the quoted comment values. */
static inline void require_values_inside(const normalised_t *n, size_t text_len) {
  for (size_t i = 0; i < n->count; i++) {
    const span_t *v = &n->values[i];
    size_t limit = v->quoted_value ? n->quoted.len : text_len;
    REQUIRE((size_t)v->start + v->len <= limit);
  }
}

static inline void normalised_free(normalised_t *n) {
  bytes_free(&n->key);
  bytes_free(&n->quoted);
  free(n->values);
  free(n->pending);
  *n = (normalised_t){0};
}

#endif
