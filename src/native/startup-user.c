/*
 * Reads a StartupMessage's parameters as src/wire/startup-packet.ts does (name and value
 * NUL-terminated, an empty name last; the last of a repeated name counts), to find whom a login
 * is for without asking JavaScript. Anything it does not read as a plain login is JavaScript's.
 */
#include <string.h>

#include "bytes.h"
#include "protocol-codes.h"
#include "startup-user.h"

#define PROTOCOL_3_0 ((uint32_t)PROTOCOL_3_MAJOR << 16)

static int named(const uint8_t *text, size_t len, const char *name) {
  return len == strlen(name) && memcmp(text, name, len) == 0;
}

int startup_user(const uint8_t *packet, size_t len, const char *asked_always, const uint8_t **user,
                 size_t *user_len) {
  if (len < MIN_STARTUP_PACKET || read_u32(packet + 4) != PROTOCOL_3_0) return 0;
  const uint8_t *database = NULL;
  size_t database_len = 0, pos = 8;
  *user = NULL;
  *user_len = 0;
  while (pos < len && packet[pos] != 0) {
    const uint8_t *name = packet + pos;
    const uint8_t *name_end = memchr(name, 0, len - pos);
    if (!name_end) return 0;
    const uint8_t *value = name_end + 1;
    const uint8_t *value_end = memchr(value, 0, (size_t)(packet + len - value));
    if (!value_end) return 0;
    size_t name_len = (size_t)(name_end - name), value_len = (size_t)(value_end - value);
    if (named(name, name_len, "replication")) return 0;
    if (named(name, name_len, "user")) *user = value, *user_len = value_len;
    if (named(name, name_len, "database")) database = value, database_len = value_len;
    pos = (size_t)(value_end - packet) + 1;
  }
  if (pos != len - 1 || *user_len == 0) return 0;
  return !(database && named(database, database_len, asked_always));
}
