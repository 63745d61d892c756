/*
 * What semaphores, expirable-permit semaphores and count-down latches share
 * in the engine: their handles, sending their calls, and the wait by
 * pub/sub (see counter.h).
 */
#include "counter.h"
#include "alloc.h"

#include "engine.h"
#include "error.h"
#include "monotime.h"
#include "pubsub.h"
#include "reply.h"
#include "sleep.h"

#include <stdio.h>
#include <string.h>

/* ---- handles --------------------------------------------------------------
 */

void *dlock__counter_open(dlock_client_t *c, const char *name, size_t len,
                          int type, int *rc) {
  *rc = dlock__check_object(c);
  if (*rc == 0)
    *rc = dlock__check_name(name, len);
  if (*rc != 0)
    return NULL;
  dlock__counter *o = dlock__calloc(1, sizeof(*o));
  if (o == NULL) {
    *rc = dlock__fail(DLOCK_ENOMEM, type == DLOCK__LATCH
                                        ? "out of memory creating a latch"
                                        : "out of memory creating a "
                                          "semaphore");
    return NULL;
  }
  *rc = dlock__counter_names_make(type, name, len, &o->n);
  if (*rc != 0) {
    dlock__free(o);
    return NULL;
  }
  o->c = c;
  return o;
}

void dlock__counter_close(dlock__counter *o) {
  dlock__counter_names_free(&o->n);
  dlock__free(o);
}

/* ---- calls ----------------------------------------------------------------
 */

int dlock__counter_ready(dlock__counter *o, const char *null_detail) {
  if (o == NULL)
    return dlock__fail(DLOCK_EINVAL, "%s", null_detail);
  return dlock__check_object(o->c);
}

int dlock__counter_read(dlock__counter *o, const char *null_detail,
                        dlock__get_outcome_fn outcome, int64_t *out) {
  int rc = dlock__counter_ready(o, null_detail);
  if (rc != 0)
    return rc;
  dlock__counter_call a;
  dlock__counter_get_call(&o->n, &a);
  redisReply *r;
  rc = dlock__command(o->c, a.argc, a.argv, a.lens, &r);
  if (rc != 0)
    return rc;
  int64_t n = 0;
  rc = outcome(&o->n, r, &n);
  freeReplyObject(r);
  if (rc == 0)
    *out = n;
  return rc;
}

int dlock__counter_eval(dlock_client_t *c, const dlock__counter_call *a,
                        int64_t *out) {
  redisReply *reply;
  dlock__synced sy;
  int rc = dlock__eval_write(c, 1, &a->call, &reply, 0, &sy);
  if (rc != 0)
    return rc;
  rc = dlock__decode_integer(reply, out);
  freeReplyObject(reply);
  return rc;
}

int dlock__counter_try_set(dlock__counter *o, int64_t permits) {
  int rc = dlock__check_permits("permits", permits, 0);
  if (rc == 0)
    rc = dlock__check_object(o->c);
  if (rc != 0)
    return rc;
  dlock__counter_call a;
  dlock__sem_set_call(&o->n, permits, &a);
  int64_t set;
  rc = dlock__counter_eval(o->c, &a, &set);
  return rc != 0 ? rc : set == 1;
}

int dlock__counter_add(dlock__counter *o, int64_t delta, int64_t *free_after) {
  if (free_after != NULL)
    *free_after = 0;
  int64_t magnitude = delta < 0 ? -(delta + 1) + 1 : delta;
  int rc = delta == 0 ? dlock__fail(DLOCK_EINVAL,
                                    "delta must not be 0: adding no permits "
                                    "is not a change")
                      : dlock__check_permits("|delta|", magnitude, 1);
  if (rc == 0)
    rc = dlock__check_object(o->c);
  if (rc != 0)
    return rc;
  dlock__counter_call a;
  dlock__sem_add_call(&o->n, magnitude, delta > 0, &a);
  int64_t now;
  rc = dlock__counter_eval(o->c, &a, &now);
  if (rc != 0)
    return rc;
  return dlock__sem_add_outcome(&o->n, magnitude, now, free_after);
}

/* ---- waiting --------------------------------------------------------------
 */

static int timed_out(const char *what, int64_t wait_ms) {
  return dlock__fail(DLOCK_ETIMEDOUT, "%s within %lld ms", what,
                     (long long)wait_ms);
}

/* Where a wait stands in riding out an outage. */
typedef struct riding {
  int64_t wait_ms, deadline_us;
  int64_t until_us; /* 0: no outage under way */
  int step;         /* the back-off's */
} riding;

/*
 * An attempt, made again after a pause when it fails with an error that a
 * failover or a restart causes (Redis unreachable or saying READONLY,
 * LOADING, MASTERDOWN; too few replicas acknowledging), as a lock's wait
 * does: until the wait ends, or outage_wait_ms after the first such error
 * for a wait without end. 'may_retry' (NULL: always) says whether this
 * error may be retried, and prepares the next attempt.
 */
static int attempt_riding(dlock_client_t *c, riding *r,
                          dlock__attempt_fn attempt, dlock__retry_fn may_retry,
                          void *arg, int64_t *sleep_ms, int *pass) {
  for (;;) {
    int rc = attempt(arg, sleep_ms, pass);
    if (rc >= 0) {
      r->until_us = 0;
      r->step = 0;
    }
    if ((rc != DLOCK_EIO && rc != DLOCK_ENOSYNC) || r->wait_ms == 0 ||
        c->opt.outage_wait_ms == 0 ||
        (may_retry != NULL && !may_retry(arg, rc)))
      return rc;
    int64_t now = dlock__now_us();
    if (r->until_us == 0)
      r->until_us = r->wait_ms == DLOCK_WAIT_FOREVER
                        ? dlock__after_ms(now, c->opt.outage_wait_ms)
                        : r->deadline_us;
    if (now >= r->until_us)
      return rc;
    char why[300];
    snprintf(why, sizeof(why), "%s", dlock_last_error());
    int prc = dlock__outage_pause(c, &r->step, r->until_us);
    if (prc != 0)
      return prc;
    if (dlock__now_us() >= r->until_us)
      return dlock__fail_text(rc, why); /* no time for another attempt */
  }
}

int dlock__wait_for(dlock_client_t *c, const char *channel, size_t channel_len,
                    int wake, int64_t permits, int64_t wait_ms,
                    dlock__attempt_fn attempt, dlock__retry_fn may_retry,
                    void *arg, const char *what) {
  int64_t deadline_us =
      wait_ms == DLOCK_WAIT_FOREVER ? INT64_MAX : dlock__deadline_ms(wait_ms);
  riding ride = {wait_ms, deadline_us, 0, 0};
  int64_t sleep_ms = -1;
  int pass = 0;
  int rc = attempt_riding(c, &ride, attempt, may_retry, arg, &sleep_ms, &pass);
  if (rc != 1)
    return rc;
  if (wait_ms == 0)
    return timed_out(what, wait_ms);
  /* Subscribed before the next attempt, so that a release between that
   * attempt and the sleep is heard. */
  dlock__waiter w;
  memset(&w, 0, sizeof(w));
  w.permits = permits;
  int64_t join_by = dlock__deadline_ms(c->opt.command_timeout_ms);
  rc = dlock__pubsub_join_as(c->ps, channel, channel_len,
                             join_by < deadline_us ? join_by : deadline_us, &w,
                             wake);
  if (rc != 0)
    return rc;
  int woken = 0;
  for (;;) {
    /* After a run of hand-overs inside the client ended with a release
     * for everyone, this client's waiters hold back a moment, so that a
     * waiter of another client gets the permits (see handover.c). */
    if (woken)
      dlock__sleep_us(
          dlock__pubsub_contention_pause(c->ps, &w, dlock__jitter()));
    pass = 0;
    rc = attempt_riding(c, &ride, attempt, may_retry, arg, &sleep_ms, &pass);
    if (rc != 1)
      break;
    /* The wake-up was for a free permit this waiter cannot use (it needs
     * more): another waiter of this client may need fewer. */
    if (woken && pass)
      dlock__pubsub_pass(c->ps, &w);
    int64_t now = dlock__now_us(), until = deadline_us;
    if (now >= deadline_us) {
      rc = timed_out(what, wait_ms);
      break;
    }
    /* A lease that ends frees a permit without a message: the waiter
     * tries again then. */
    if (sleep_ms >= 0 && dlock__after_ms(now, sleep_ms) < until)
      until = dlock__after_ms(now, sleep_ms);
    rc = dlock__pubsub_wait(c->ps, &w, until);
    if (rc < 0 || rc == 2)
      break;
    woken = rc > 0;
  }
  dlock__pubsub_leave(c->ps, &w);
  /* Handed the permits by a release inside the client: they are this
   * waiter's now. */
  if (w.grant != 0)
    rc = DLOCK__HANDED;
  return rc;
}
