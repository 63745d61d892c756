/*
 * The checks of the public calls' arguments (see args.h).
 */
#include "args.h"

#include "error.h"

int dlock__check_bound(const char *what, int64_t v, int64_t min, int64_t max,
                       const char *max_name, const char *unit) {
  if (v >= min && v <= max)
    return 0;
  return dlock__fail(DLOCK_EINVAL, "%s must be %lld..%s (%lld%s), got %lld",
                     what, (long long)min, max_name, (long long)max, unit,
                     (long long)v);
}

int dlock__check_permits(const char *what, int64_t n, int64_t min) {
  return dlock__check_bound(what, n, min, DLOCK_PERMITS_MAX,
                            "DLOCK_PERMITS_MAX", "");
}

/* A duration 'min'..DLOCK_DURATION_MAX_MS, or -1, which dlock.h calls
 * 'special'. */
static int check_duration(const char *what, int64_t v, int64_t min,
                          const char *special) {
  if ((v >= min || v == -1) && v <= DLOCK_DURATION_MAX_MS)
    return 0;
  return dlock__fail(DLOCK_EINVAL,
                     "%s must be %lld..DLOCK_DURATION_MAX_MS (%lld ms, about "
                     "31 years) or %s (-1), got %lld",
                     what, (long long)min, (long long)DLOCK_DURATION_MAX_MS,
                     special, (long long)v);
}

int dlock__check_wait(int64_t wait_ms) {
  return check_duration("wait_ms", wait_ms, 0, "DLOCK_WAIT_FOREVER");
}

int dlock__check_lease(int64_t lease_ms) {
  return check_duration("lease_ms", lease_ms, 1, "DLOCK_WATCHDOG");
}

int dlock__check_times(int64_t wait_ms, int64_t lease_ms) {
  int rc = dlock__check_lease(lease_ms);
  return rc != 0 ? rc : dlock__check_wait(wait_ms);
}

int dlock__check_name(const char *name, size_t len) {
  if (name == NULL)
    return dlock__fail(DLOCK_EINVAL, "name is NULL");
  if (len == 0)
    return dlock__fail(DLOCK_EINVAL, "name is empty");
  if (len > DLOCK_NAME_MAX)
    return dlock__fail(DLOCK_EINVAL, "name is %zu bytes long; the limit is %d",
                       len, DLOCK_NAME_MAX);
  return 0;
}

int dlock__check_object(dlock_client_t *c) { return dlock__check_blocking(c); }
