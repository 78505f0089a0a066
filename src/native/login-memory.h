/* What JavaScript chose for earlier logins, kept to answer the next ones alike (login-memory.c). */
#ifndef PGFENCE_LOGIN_MEMORY_H
#define PGFENCE_LOGIN_MEMORY_H
#include <stddef.h>
#include <stdint.h>

#include <stdlib.h>
#include <string.h>

#define LOGIN_MEMORY_BUCKETS 64
/* Users beyond this many are not remembered: their logins ask JavaScript, as all did before. */
#define LOGIN_MEMORY_USERS 4096

typedef struct remembered remembered_t;

typedef struct {
  remembered_t *buckets[LOGIN_MEMORY_BUCKETS];
  size_t users;
  /* The one-byte answers to an SSLRequest and a GSSENCRequest, once known. */
  uint8_t request_answers[2], requests_known[2];
} login_memory_t;

void login_memory_init(login_memory_t *memory);

/* The choice remembered for `user` (its bytes, as JavaScript gave them, `choice_len` of them), or
 * NULL. */
const uint8_t *login_memory_find(const login_memory_t *memory, const uint8_t *user, size_t len,
                                 size_t *choice_len);

/* Remembers `choice` for `user`; a user already remembered, or one too many, is left as it is. */
void login_memory_keep(login_memory_t *memory, const uint8_t *user, size_t len,
                       const uint8_t *choice, size_t choice_len);

/* The one-byte answer remembered for a request code (an encryption request), or NULL. */
const uint8_t *login_memory_answer(const login_memory_t *memory, uint32_t code);

/* Remembers the one-byte answer to a request code (other codes are not kept). */
void login_memory_keep_answer(login_memory_t *memory, uint32_t code, uint8_t answer);

/* Forgets everything (the user list changed). */
void login_memory_clear(login_memory_t *memory);

#endif
