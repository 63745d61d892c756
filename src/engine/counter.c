/*
 * What semaphores, expirable-permit semaphores and count-down latches share
 * in the engine: their handles, sending their calls, and the wait by
 * pub/sub (see counter.h).
 */
#include "counter.h"
#include "alloc.h"

#include "engine.h"
#include "error.h"
#include "machine.h"
#include "monotime.h"
#include "reply.h"
#include "sleep.h"

#include <stdio.h>
#include <string.h>

/* ---- handles --------------------------------------------------------------
 */

void *dlock__counter_open(dlock_client_t *c, const char *name, size_t len,
                          int type, int *rc) {
  /* Making a handle sends nothing: an async client's are made the same. */
  *rc = dlock__check_canceled(c);
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

/* dlock__counter_ready, then the call that 'build' makes on the names of
 * 'o', into 'a'. */
static int ready_call(dlock__counter *o, const char *null_detail,
                      dlock__names_call_fn build, dlock__counter_call *a) {
  int rc = dlock__counter_ready(o, null_detail);
  if (rc == 0)
    build(&o->n, a);
  return rc;
}

int dlock__counter_read(dlock__counter *o, const char *null_detail,
                        dlock__get_outcome_fn outcome, int64_t *out) {
  dlock__counter_call a;
  int rc = ready_call(o, null_detail, dlock__counter_get_call, &a);
  if (rc != 0)
    return rc;
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

int dlock__counter_run(dlock__counter *o, const char *null_detail,
                       dlock__names_call_fn build, int64_t *out) {
  dlock__counter_call a;
  int rc = ready_call(o, null_detail, build, &a);
  return rc != 0 ? rc : dlock__counter_eval(o->c, &a, out);
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

/* A counter's wait as the machine's steps (machine.h): the object's own
 * attempt, retried through an outage as its 'may_retry' allows. */
typedef struct counter_acq {
  dlock__attempt_fn attempt;
  dlock__retry_fn may_retry;
  void *arg;
  const char *what;
} counter_acq;

static int counter_attempt(dlock__acq *m, int queue) {
  (void)queue;
  counter_acq *t = m->arg;
  int64_t sleep_ms =
      m->busy.ttl_ms == DLOCK__ACQ_NOT_TRIED ? -1 : m->busy.ttl_ms;
  int rc = t->attempt(t->arg, &sleep_ms, &m->pass);
  m->busy.ttl_ms = sleep_ms;
  return rc;
}

static int counter_may_ride(dlock__acq *m, int rc) {
  counter_acq *t = m->arg;
  return t->may_retry == NULL || t->may_retry(t->arg, rc);
}

static int counter_timed_out(dlock__acq *m) {
  counter_acq *t = m->arg;
  return dlock__fail(DLOCK_ETIMEDOUT, "%s within %lld ms", t->what,
                     (long long)m->wait_ms);
}

/* A release of this client may hand a semaphore's waiter its permits
 * (take_handed NULL: the wait ends with DLOCK__HANDED); an error an outage
 * causes is retried in place, the waiter staying on its channel. */
static const dlock__acq_ops counter_ops = {
    .attempt = counter_attempt,
    .may_ride = counter_may_ride,
    .timed_out = counter_timed_out,
};

int dlock__wait_for(dlock_client_t *c, const char *channel, size_t channel_len,
                    dlock__wake_fn wake, int64_t permits, int64_t wait_ms,
                    dlock__attempt_fn attempt, dlock__retry_fn may_retry,
                    void *arg, const char *what, int *waited) {
  counter_acq t = {attempt, may_retry, arg, what};
  dlock__acq m;
  dlock__acq_init(&m, &counter_ops, &t, c, wait_ms, DLOCK__ACQ_BY_PUBSUB,
                  channel, channel_len);
  m.wake = wake;
  /* After a run of hand-overs inside the client ended with a release for
   * everyone, this client's waiters hold back a moment, so that a waiter
   * of another client gets the permits (see handover.c). */
  m.pause_if_woken = 1;
  m.who.permits = permits;
  int rc = dlock__acq_run(&m);
  *waited = m.waited;
  return rc;
}
