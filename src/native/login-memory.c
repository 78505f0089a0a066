/*
 * A small hash table of users to the verifier JavaScript chose for them, so that a user's next
 * logins are decided in C: a call into JavaScript and a decoding of the startup packet there
 * less per login.
 */
#include "login-memory.h"
#include "protocol-codes.h"

/* The user's bytes, then the choice's, in one allocation. */
struct remembered {
  remembered_t *next;
  size_t user_len, choice_len;
  uint8_t bytes[];
};

/* FNV-1a. */
static size_t bucket_of(const uint8_t *p, size_t n) {
  uint32_t hash = 2166136261u;
  for (size_t i = 0; i < n; i++) hash = (hash ^ p[i]) * 16777619u;
  return hash % LOGIN_MEMORY_BUCKETS;
}

void login_memory_init(login_memory_t *memory) { memset(memory, 0, sizeof *memory); }

/* Where a request code's answer is kept, or -1. */
static int request_slot(uint32_t code) {
  return code == SSL_REQUEST_CODE ? 0 : code == GSSENC_REQUEST_CODE ? 1 : -1;
}

const uint8_t *login_memory_answer(const login_memory_t *memory, uint32_t code) {
  int slot = request_slot(code);
  return slot >= 0 && memory->requests_known[slot] ? &memory->request_answers[slot] : NULL;
}

void login_memory_keep_answer(login_memory_t *memory, uint32_t code, uint8_t answer) {
  int slot = request_slot(code);
  if (slot < 0) return;
  memory->request_answers[slot] = answer;
  memory->requests_known[slot] = 1;
}

const uint8_t *login_memory_find(const login_memory_t *memory, const uint8_t *user, size_t len,
                                 size_t *choice_len) {
  for (remembered_t *r = memory->buckets[bucket_of(user, len)]; r; r = r->next) {
    if (r->user_len != len || memcmp(r->bytes, user, len) != 0) continue;
    *choice_len = r->choice_len;
    return r->bytes + len;
  }
  return NULL;
}

void login_memory_keep(login_memory_t *memory, const uint8_t *user, size_t len,
                       const uint8_t *choice, size_t choice_len) {
  size_t known;
  if (memory->users >= LOGIN_MEMORY_USERS || login_memory_find(memory, user, len, &known)) return;
  remembered_t *r = malloc(sizeof *r + len + choice_len);
  if (!r) return;
  r->user_len = len;
  r->choice_len = choice_len;
  memcpy(r->bytes, user, len);
  memcpy(r->bytes + len, choice, choice_len);
  size_t bucket = bucket_of(user, len);
  r->next = memory->buckets[bucket];
  memory->buckets[bucket] = r;
  memory->users++;
}

void login_memory_clear(login_memory_t *memory) {
  for (size_t i = 0; i < LOGIN_MEMORY_BUCKETS; i++) {
    for (remembered_t *r = memory->buckets[i], *next; r; r = next) {
      next = r->next;
      free(r);
    }
  }
  login_memory_init(memory);
}
