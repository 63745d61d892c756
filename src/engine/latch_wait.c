/*
 * Count-down latches (Redisson's RCountDownLatch): the count is a string
 * under the latch's name, deleted when it reaches zero, at which point
 * "redisson_countdownlatch__channel__{name}" is told "0" and every waiter
 * of every client wakes. The public calls send what lock/semaphore.c
 * builds, and the await waits (counter.c).
 */
#include "counter.h"

#include "cohort.h"
#include "engine.h"
#include "error.h"
#include "observe.h"
#include "reply.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

DLOCK__COUNTER_HANDLE(latch, DLOCK__LATCH)

int dlock_latch_try_set_count(dlock_latch_t *l, int64_t count) {
  if (l == NULL)
    return dlock__fail(DLOCK_EINVAL, "latch handle is NULL");
  int rc =
      dlock__check_bound("count", count, 1, DLOCK__LATCH_COUNT_MAX, "2^53", "");
  if (rc == 0)
    rc = dlock__check_object(l->o.c);
  if (rc != 0)
    return rc;
  dlock__counter_call a;
  dlock__latch_set_call(&l->o.n, count, &a);
  int64_t set;
  rc = dlock__counter_eval(l->o.c, &a, &set);
  return rc != 0 ? rc : set == 1;
}

int dlock_latch_count_down(dlock_latch_t *l, int64_t *left) {
  if (left != NULL)
    *left = 0;
  int64_t n;
  int rc = dlock__counter_run(l != NULL ? &l->o : NULL, "latch handle is NULL",
                              dlock__latch_count_down_call, &n);
  if (rc == 0)
    rc = dlock__latch_count_down_outcome(&l->o.n, n);
  if (rc == 0 && left != NULL)
    *left = n;
  return rc;
}

int dlock_latch_count(dlock_latch_t *l, int64_t *out) {
  if (out != NULL)
    *out = 0;
  return dlock__counter_read(l != NULL && out != NULL ? &l->o : NULL,
                             "latch and out must not be NULL",
                             dlock__latch_count_outcome, out);
}

static int latch_attempt(void *arg, int64_t *sleep_ms, int *pass) {
  int64_t n;
  int rc = dlock_latch_count(arg, &n);
  if (rc != 0)
    return rc;
  /* Only the zero message can open it; nothing to bound the sleep. */
  *sleep_ms = -1;
  *pass = 0;
  return n > 0;
}

int dlock_latch_await(dlock_latch_t *l, int64_t wait_ms) {
  if (l == NULL)
    return dlock__fail(DLOCK_EINVAL, "latch handle is NULL");
  int rc = dlock__check_wait(wait_ms);
  if (rc == 0)
    rc = dlock__check_object(l->o.c);
  if (rc != 0)
    return rc;
  int64_t start_us = dlock__obs_begin(l->o.c);
  char what[160];
  snprintf(what, sizeof(what), "latch \"%.100s\" not at zero", l->o.n.name);
  int waited = 0;
  rc = dlock__wait_for(l->o.c, l->o.n.channel, l->o.n.channel_len,
                       dlock__wake_latch, 0, wait_ms, latch_attempt, NULL, l,
                       what, &waited);
  dlock__obs_what w = {DLOCK_STATS_LATCH, l->o.n.name, l->o.n.len, 0, 0, 0};
  return dlock__obs_taken(l->o.c, &w, wait_ms, start_us, waited, rc);
}
