/*
 * The checks of the arguments the public calls take, shared by the engine's
 * objects so that each limit is worded once (see dlock.h for why there are
 * limits).
 */
#ifndef DLOCK_ARGS_H
#define DLOCK_ARGS_H

#include "client.h"

#include <stdint.h>

/* 'v' within min..max, where 'max_name' is how dlock.h names the bound and
 * 'unit' follows its value in the message ("" or " ms, about 31 years"). */
int dlock__check_bound(const char *what, int64_t v, int64_t min, int64_t max,
                       const char *max_name, const char *unit);

/* A count of permits: 'min'..DLOCK_PERMITS_MAX. */
int dlock__check_permits(const char *what, int64_t n, int64_t min);

/* wait_ms 0..DLOCK_DURATION_MAX_MS or DLOCK_WAIT_FOREVER. */
int dlock__check_wait(int64_t wait_ms);

/* lease_ms 1..DLOCK_DURATION_MAX_MS or DLOCK_WATCHDOG. */
int dlock__check_lease(int64_t lease_ms);

/* Both bounded by DLOCK_DURATION_MAX_MS (see dlock.h): beyond it, the
 * deadline and lease arithmetic here and in Redis would overflow. The
 * lease is checked first. */
int dlock__check_times(int64_t wait_ms, int64_t lease_ms);

/* A name of 1..DLOCK_NAME_MAX bytes. */
int dlock__check_name(const char *name, size_t len);

/* The checks every call on an object handle makes: 'c' usable (not
 * forked, not shutting down). */
int dlock__check_object(dlock_client_t *c);

#endif
