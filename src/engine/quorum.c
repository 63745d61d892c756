/*
 * The rules over a composite lock's parts, one place for the blocking
 * composites (multi.c, redlock.c) and the async ones (async_multi.c): pure
 * functions of what the parts answered, with no I/O and no waiting.
 */
#include "composite.h"

#include "error.h"
#include "monotime.h"

#include <stdio.h>

size_t dlock__red_quorum(size_t n) { return n / 2 + 1; }

int64_t dlock__red_validity_ms(const dlock_t *l, int64_t lease_ms,
                               int64_t start_us) {
  /* The lease the nodes keep, less the time spent asking and the
   * allowance for clock drift between them. */
  int64_t lease = lease_ms == DLOCK_WATCHDOG
                      ? l->subs[0]->c->opt.watchdog_timeout_ms
                      : lease_ms;
  int64_t elapsed_ms = (dlock__now_us() - start_us) / 1000;
  return lease - elapsed_ms - (lease / 100 + 2);
}

int dlock__red_round_verdict(size_t n, size_t answered, size_t granted,
                             int64_t validity_ms, char *detail, size_t len) {
  size_t quorum = dlock__red_quorum(n);
  if (granted >= quorum && validity_ms > 0)
    return 0;
  if (answered < quorum) {
    snprintf(detail, len, "RedLock: only %zu of %zu nodes answered; %zu needed",
             answered, n, quorum);
    return DLOCK_ENOQUORUM;
  }
  snprintf(detail, len,
           "RedLock: %zu of %zu nodes granted it (validity %lld ms); %zu "
           "needed",
           granted, n, (long long)validity_ms, quorum);
  return DLOCK_ETIMEDOUT;
}

int64_t dlock__red_retry_ms(int rounds, uint64_t jitter, int64_t ttl_ms) {
  /* Random, so that competing owners do not split the nodes between them
   * again; a little longer each round; never past a holder's lease. */
  int64_t delay_ms = 5 + (int64_t)(jitter % 45) + rounds;
  if (ttl_ms >= 0 && ttl_ms < delay_ms)
    delay_ms = ttl_ms;
  return delay_ms;
}

int dlock__red_unlock_outcome(size_t n, size_t ok, size_t lost, size_t failed) {
  size_t quorum = dlock__red_quorum(n);
  if (ok >= quorum)
    return 0;
  if (ok == 0 && lost == 0 && failed == 0)
    return dlock__fail(DLOCK_ENOTHELD, "RedLock is not held by this owner");
  if (ok + failed < quorum && lost > 0)
    return dlock__fail(DLOCK_ELOST,
                       "RedLock lost: only %zu of %zu nodes still held it", ok,
                       n);
  return dlock__fail(DLOCK_ENOQUORUM,
                     "RedLock released on %zu of %zu nodes; %zu unreachable",
                     ok, n, failed);
}

int dlock__multi_waits_for_part(int err, int64_t wait_ms, int64_t deadline_us) {
  return err == DLOCK_ETIMEDOUT && wait_ms != 0 &&
         dlock__now_us() < deadline_us;
}

int dlock__multi_unlock_outcome(size_t n, size_t lost, size_t notheld) {
  if (lost > 0)
    return dlock__fail(DLOCK_ELOST, "%zu of the %zu locks were lost while held",
                       lost, n);
  if (notheld == n)
    return dlock__fail(DLOCK_ENOTHELD, "none of the %zu locks is held", n);
  return 0;
}
