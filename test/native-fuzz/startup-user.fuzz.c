/*
 * A startup packet's user (src/native/startup-user.c) on arbitrary packets: it finds what a
 * reading of the packet as NUL-separated fields finds (the last user, none for a replication
 * connection or the database asked about always, protocol 3.0 only), and what login-memory.c
 * keeps for that user is what it finds again, until cleared.
 */
#include <string.h>

#include "fuzz-input.h"
#include "login-memory.h"
#include "startup-user.h"

/* The reference reading: fields split at each NUL, name and value taken in pairs. */
static int expected(const uint8_t *p, size_t len, const uint8_t **user, size_t *user_len) {
  if (len < 8 || p[4] != 0 || p[5] != 3 || p[6] != 0 || p[7] != 0) return 0;
  if (p[len - 1] != 0) return 0;
  const uint8_t *database = NULL;
  size_t database_len = 0, pos = 8;
  *user = NULL;
  *user_len = 0;
  for (;;) {
    size_t name = pos;
    while (pos < len && p[pos]) pos++;
    if (pos == len) return 0;
    size_t name_len = pos - name;
    if (name_len == 0) break;
    size_t value = ++pos;
    while (pos < len && p[pos]) pos++;
    if (pos == len) return 0;
    size_t value_len = pos++ - value;
    if (name_len == 11 && !memcmp(p + name, "replication", 11)) return 0;
    if (name_len == 4 && !memcmp(p + name, "user", 4)) *user = p + value, *user_len = value_len;
    if (name_len == 8 && !memcmp(p + name, "database", 8)) database = p + value, database_len = value_len;
  }
  if (pos != len - 1 || *user_len == 0) return 0;
  return !(database && database_len == 7 && !memcmp(database, "pgfence", 7));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 10000) return 0;
  uint8_t *packet = malloc(size ? size : 1);
  memcpy(packet, data, size);
  const uint8_t *user = NULL, *want_user = NULL;
  size_t user_len = 0, want_len = 0;
  int found = startup_user(packet, size, "pgfence", &user, &user_len);
  int want = expected(packet, size, &want_user, &want_len);
  REQUIRE(found == want);
  if (found) {
    REQUIRE(user == want_user && user_len == want_len);
    REQUIRE(user >= packet && user + user_len < packet + size && user[user_len] == 0);
    login_memory_t memory;
    login_memory_init(&memory);
    size_t n = 0;
    REQUIRE(login_memory_find(&memory, user, user_len, &n) == NULL);
    login_memory_keep(&memory, user, user_len, packet, size);
    const uint8_t *kept = login_memory_find(&memory, user, user_len, &n);
    REQUIRE(kept && n == size && memcmp(kept, packet, size) == 0);
    login_memory_keep_answer(&memory, 80877103, 'N');
    REQUIRE(*login_memory_answer(&memory, 80877103) == 'N');
    REQUIRE(login_memory_answer(&memory, 80877102) == NULL);
    login_memory_clear(&memory);
    REQUIRE(login_memory_find(&memory, user, user_len, &n) == NULL);
    REQUIRE(login_memory_answer(&memory, 80877103) == NULL);
  }
  free(packet);
  return 0;
}
