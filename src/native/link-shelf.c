/* Idle server links a login in C may be lent (link-shelf.h). */
#define NAPI_VERSION 8
#include "link-shelf.h"

#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "napi-tagged.h"

static const napi_type_tag SHELF_TAG = {0x7067666e73686c66ULL, 0x6c696e6b73686c66ULL};

typedef struct entry {
  struct entry *next;
  server_link_t *link;
  napi_ref value; /* the link's JavaScript value, kept alive while shelved */
  bytes_t packet, greeting;
  napi_ref settings;
  uint64_t until; /* uv_now past which it is not lent; UINT64_MAX: no limit */
} entry_t;

struct link_shelf {
  napi_env env;
  uv_loop_t *loop;
  entry_t *entries;
};

link_shelf_t *shelf_of(napi_env env, napi_value value) { return tagged(env, value, &SHELF_TAG); }

static void entry_free(napi_env env, entry_t *entry, int keep_lent) {
  napi_delete_reference(env, entry->value);
  bytes_free(&entry->packet);
  if (!keep_lent) {
    bytes_free(&entry->greeting);
    napi_delete_reference(env, entry->settings);
  }
  free(entry);
}

/* Unlinks and frees the entry at `*at`. */
static void drop(link_shelf_t *shelf, entry_t **at) {
  entry_t *entry = *at;
  *at = entry->next;
  entry_free(shelf->env, entry, 0);
}

int shelf_lend(link_shelf_t *shelf, const uint8_t *packet, size_t len, uint64_t now,
               shelf_lend_t *out) {
  for (entry_t **at = &shelf->entries; *at;) {
    entry_t *entry = *at;
    /* A link that ended meanwhile waits no more: JavaScript hears of it and unshelves it. */
    if (!link_is_waiting(entry->link) || now > entry->until) {
      at = &entry->next;
      continue;
    }
    if (entry->packet.len != len || memcmp(entry->packet.data, packet, len) != 0) {
      at = &entry->next;
      continue;
    }
    *at = entry->next;
    out->link = entry->link;
    out->greeting = entry->greeting;
    out->settings = entry->settings;
    entry_free(shelf->env, entry, 1);
    return 0;
  }
  return -1;
}

static void shelf_finalize(napi_env env, void *data, void *hint) {
  link_shelf_t *shelf = data;
  while (shelf->entries) drop(shelf, &shelf->entries);
  free(shelf);
}

static napi_value throw_error(napi_env env, const char *message) {
  napi_throw_error(env, NULL, message);
  return NULL;
}

napi_value js_link_shelf(napi_env env, napi_callback_info info) {
  link_shelf_t *shelf = calloc(1, sizeof *shelf);
  napi_value value;
  if (!shelf) return throw_error(env, "pgfence shelf: out of memory");
  shelf->env = env;
  if (napi_get_uv_event_loop(env, &shelf->loop) != napi_ok ||
      napi_create_external(env, shelf, shelf_finalize, NULL, &value) != napi_ok) {
    free(shelf);
    return throw_error(env, "pgfence shelf: linkShelf() failed");
  }
  napi_type_tag_object(env, value, &SHELF_TAG);
  return value;
}

/* Frees an entry that never went on the shelf. */
static void entry_unmade(entry_t *entry) {
  bytes_free(&entry->packet);
  bytes_free(&entry->greeting);
  free(entry);
}

/* A Buffer's bytes copied into `out`; -1 when the value is no Buffer or memory runs out. */
static int copy_buffer(napi_env env, napi_value value, bytes_t *out) {
  void *data = NULL;
  size_t len = 0;
  if (napi_get_buffer_info(env, value, &data, &len) != napi_ok) return -1;
  return bytes_append(out, data, len);
}

napi_value js_shelve(napi_env env, napi_callback_info info) {
  size_t argc = 6;
  napi_value argv[6], result;
  link_shelf_t *shelf = NULL;
  server_link_t *link = NULL;
  double lend_for = -1;
  entry_t *entry = calloc(1, sizeof *entry);
  if (!entry || napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 6 ||
      !(shelf = shelf_of(env, argv[0])) || !(link = link_of_value(env, argv[1])) ||
      copy_buffer(env, argv[2], &entry->packet) < 0 ||
      copy_buffer(env, argv[3], &entry->greeting) < 0 ||
      napi_get_value_double(env, argv[5], &lend_for) != napi_ok) {
    if (entry) entry_unmade(entry);
    return throw_error(env,
                       "pgfence shelf: shelve(shelf, link, packet, greeting, settings, lendForMs)");
  }
  /* It ended, or a relay took it, since JavaScript last heard: not one to lend. */
  napi_get_boolean(env, link_is_waiting(link), &result);
  if (!link_is_waiting(link)) {
    entry_unmade(entry);
    return result;
  }
  entry->link = link;
  entry->until = lend_for < 0 ? UINT64_MAX : uv_now(shelf->loop) + (uint64_t)lend_for;
  napi_create_reference(env, argv[1], 1, &entry->value);
  napi_create_reference(env, argv[4], 1, &entry->settings);
  entry->next = shelf->entries;
  shelf->entries = entry;
  return result;
}

napi_value js_unshelve(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2], result;
  link_shelf_t *shelf = NULL;
  bool found = false;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 2 ||
      !(shelf = shelf_of(env, argv[0])))
    return throw_error(env, "pgfence shelf: unshelve(shelf, link)");
  server_link_t *link = link_of_value(env, argv[1]);
  for (entry_t **at = &shelf->entries; link && *at; at = &(*at)->next) {
    if ((*at)->link != link) continue;
    drop(shelf, at);
    found = true;
    break;
  }
  napi_get_boolean(env, found, &result);
  return result;
}
