/* The user a StartupMessage names, when its login's answer may be remembered (startup-user.c). */
#ifndef PGFENCE_STARTUP_USER_H
#define PGFENCE_STARTUP_USER_H
#include <stddef.h>
#include <stdint.h>

/*
 * `packet` is one whole startup-phase packet (its length word counts `len`). Returns 1 and the
 * last `user` it names (not empty) when it is a well-formed StartupMessage of protocol 3.0 with
 * no `replication` parameter, whose last `database`, if any, is not `asked_always`: a login
 * whose choice depends on its user alone. Returns 0 for anything else, which JavaScript decides.
 */
int startup_user(const uint8_t *packet, size_t len, const char *asked_always, const uint8_t **user,
                 size_t *user_len);

#endif
