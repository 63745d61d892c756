/*
 * Semaphores (Redisson's RSemaphore): the public calls, which send what
 * lock/semaphore.c builds, count the permits the client holds, and wait
 * (counter.c).
 */
#include "counter.h"

#include "cohort.h"
#include "engine.h"
#include "error.h"
#include "monotime.h"
#include "observe.h"
#include "reply.h"

#include <string.h>

DLOCK__COUNTER_HANDLE(sem, DLOCK__SEM)

int dlock_sem_try_set_permits(dlock_sem_t *s, int64_t permits) {
  if (s == NULL)
    return dlock__fail(DLOCK_EINVAL, "semaphore handle is NULL");
  return dlock__counter_try_set(&s->o, permits);
}

int dlock_sem_add_permits(dlock_sem_t *s, int64_t delta, int64_t *free_after) {
  if (s == NULL)
    return dlock__fail(DLOCK_EINVAL, "semaphore handle is NULL");
  return dlock__counter_add(&s->o, delta, free_after);
}

int dlock__sem_note_held(dlock_sem_t *s, int64_t n) {
  dlock_client_t *c = s->o.c;
  pthread_mutex_lock(&c->mu);
  dlock__hold *h =
      dlock__holds_put(&c->holds, s->o.n.name, s->o.n.len, 0, DLOCK__KIND_SEM);
  if (h != NULL) {
    int64_t count = (int64_t)h->count + n;
    h->count = count < 0                   ? 0
               : count > DLOCK_PERMITS_MAX ? (int)DLOCK_PERMITS_MAX
                                           : (int)count;
    /* Never renewed, and never dropped as a lease run out. */
    h->lease_ms = DLOCK_DURATION_MAX_MS;
    h->confirmed_us = dlock__now_us();
    if (h->count == 0)
      dlock__holds_remove(&c->holds, h);
  }
  pthread_mutex_unlock(&c->mu);
  return h != NULL ? 0
                   : dlock__fail(DLOCK_ENOMEM, "out of memory counting the "
                                               "permits held");
}

int64_t dlock_sem_held(dlock_sem_t *s) {
  if (s == NULL || dlock__check_canceled(s->o.c) != 0)
    return 0;
  pthread_mutex_lock(&s->o.c->mu);
  dlock__hold *h = dlock__holds_find(&s->o.c->holds, s->o.n.name, s->o.n.len, 0,
                                     DLOCK__KIND_SEM);
  int64_t n = h != NULL ? h->count : 0;
  pthread_mutex_unlock(&s->o.c->mu);
  return n;
}

typedef struct sem_try {
  dlock_sem_t *s;
  int64_t permits;
} sem_try;

/* Gives back 'permits' taken by an attempt whose outcome the caller cannot
 * use; the answer does not matter. */
static void give_back(dlock_sem_t *s, int64_t permits) {
  dlock__counter_call back;
  dlock__sem_release_call(&s->o.n, permits, &back);
  int64_t ignored;
  dlock__counter_eval(s->o.c, &back, &ignored);
}

static int sem_attempt(void *arg, int64_t *sleep_ms, int *pass) {
  sem_try *t = arg;
  dlock_sem_t *s = t->s;
  dlock__counter_call a;
  dlock__sem_acquire_call(&s->o.n, t->permits, &a);
  redisReply *reply;
  dlock__synced sy;
  int rc = dlock__check_object(s->o.c);
  if (rc == 0)
    rc = dlock__eval_write(s->o.c, 1, &a.call, &reply, 0, &sy);
  if (rc != 0)
    return rc;
  int free_pass = 0;
  rc = dlock__sem_acquire_outcome(reply, &free_pass);
  freeReplyObject(reply);
  if (rc < 0)
    return rc;
  if (rc == 0 && !sy.ok) {
    /* Taken on the master only: given back, and not reported taken. */
    give_back(s, t->permits);
    return dlock__sync_fail(s->o.c, &sy, "semaphore", s->o.n.name, s->o.n.len);
  }
  if (rc == 0)
    return 0;
  /* No lease ends here: only a release or a new count frees permits. */
  *sleep_ms = -1;
  *pass = free_pass;
  return 1;
}

int dlock__sem_may_retry(void *arg, int rc) {
  (void)arg;
  return rc == DLOCK_ENOSYNC || strncmp(dlock_last_error(), "redis: ", 7) == 0;
}

int dlock_sem_acquire(dlock_sem_t *s, int64_t permits, int64_t wait_ms) {
  if (s == NULL)
    return dlock__fail(DLOCK_EINVAL, "semaphore handle is NULL");
  int rc = dlock__check_permits("permits", permits, 1);
  if (rc == 0)
    rc = dlock__check_wait(wait_ms);
  if (rc == 0)
    rc = dlock__check_object(s->o.c);
  if (rc != 0)
    return rc;
  int64_t start_us = dlock__obs_begin(s->o.c);
  sem_try t = {s, permits};
  char what[160];
  snprintf(what, sizeof(what),
           "semaphore \"%.100s\": %lld permits not acquired", s->o.n.name,
           (long long)permits);
  int waited = 0;
  rc = dlock__wait_for(s->o.c, s->o.n.channel, s->o.n.channel_len,
                       dlock__wake_count, permits, wait_ms, sem_attempt,
                       dlock__sem_may_retry, &t, what, &waited);
  /* Handed over by a release of this client: counted already. */
  if (rc == DLOCK__HANDED)
    rc = 0;
  else if (rc == 0 && dlock__sem_note_held(s, permits) != 0) {
    /* Not counted, they could never be released: given back now. */
    give_back(s, permits);
    rc = dlock__fail(DLOCK_ENOMEM, "out of memory counting the permits held");
  }
  dlock__obs_what w = {DLOCK_STATS_SEMAPHORE, s->o.n.name, s->o.n.len, 0, 0,
                       (uint64_t)permits};
  return dlock__obs_taken(s->o.c, &w, wait_ms, start_us, waited, rc);
}

int dlock_sem_release(dlock_sem_t *s, int64_t permits) {
  if (s == NULL)
    return dlock__fail(DLOCK_EINVAL, "semaphore handle is NULL");
  int rc = dlock__check_permits("permits", permits, 1);
  if (rc == 0)
    rc = dlock__check_object(s->o.c);
  if (rc != 0)
    return rc;
  dlock_client_t *c = s->o.c;
  dlock__obs_what w = {DLOCK_STATS_SEMAPHORE, s->o.n.name, s->o.n.len, 0, 0,
                       (uint64_t)permits};
  /* A thread of this client waiting for these permits (or fewer) is
   * handed them: nothing changes in Redis, no message wakes the waiters of
   * every client to race for them, and the waiter needs no round trip.
   * After a run of such hand-overs they go back to Redis for everyone
   * (see handover.c for the lock's same scheme). The waiter is reserved
   * first, so that it stays to be told the outcome. */
  int at_cap = 0;
  dlock__waiter *next =
      dlock__cohort_reserve_permits(c->ps, s->o.n.channel, s->o.n.channel_len,
                                    permits, DLOCK__HANDOVER_RUN_MAX, &at_cap);
  int64_t handed =
      next != NULL && !at_cap ? dlock__cohort_of(next)->permits : 0;
  /* Taken off the count before the release is sent, so that two threads
   * cannot both give back the same permit. Permits handed over stay on
   * the count: they stay the client's, counted before their new holder
   * can give them back. */
  pthread_mutex_lock(&c->mu);
  dlock__hold *h =
      dlock__holds_find(&c->holds, s->o.n.name, s->o.n.len, 0, DLOCK__KIND_SEM);
  int64_t held = h != NULL ? h->count : 0;
  if (held >= permits) {
    h->count -= (int)(permits - handed);
    if (h->count == 0)
      dlock__holds_remove(&c->holds, h);
  }
  pthread_mutex_unlock(&c->mu);
  if (held < permits) {
    if (next != NULL)
      dlock__cohort_resolve(c->ps, next, 0, DLOCK__RESOLVE_FAILED);
    return dlock__fail(DLOCK_ENOTHELD,
                       "cannot release %lld permits of semaphore \"%.100s\": "
                       "this client acquired %lld; nothing was changed (use "
                       "dlock_sem_add_permits to add permits)",
                       (long long)permits, s->o.n.name, (long long)held);
  }
  if (handed > 0) {
    dlock__cohort_resolve(c->ps, next, 1, DLOCK__RESOLVE_HANDED);
    next = NULL;
    permits -= handed;
    if (permits == 0)
      return dlock__obs_given(c, &w, 0, 0);
  }
  dlock__counter_call a;
  dlock__sem_release_call(&s->o.n, permits, &a);
  int64_t free_now;
  rc = dlock__counter_eval(c, &a, &free_now);
  /* A refusal (the key is not a semaphore, a server error) released
   * nothing: the permits are the client's still. Without an answer the
   * release may have run, and sending it again could give back twice. */
  if (rc != 0 && !dlock__outcome_unknown(rc))
    dlock__sem_note_held(s, permits);
  /* The waiter reserved at the end of a run: the release message wakes it
   * with the others, after its hold-back; if there was none, it tries. */
  if (next != NULL)
    dlock__cohort_resolve(c->ps, next, 0,
                          rc == 0 ? DLOCK__RESOLVE_RELEASED
                                  : DLOCK__RESOLVE_FAILED);
  return dlock__obs_given(c, &w, 0, rc);
}

int dlock_sem_available(dlock_sem_t *s, int64_t *out) {
  if (out != NULL)
    *out = 0;
  return dlock__counter_read(s != NULL && out != NULL ? &s->o : NULL,
                             "semaphore and out must not be NULL",
                             dlock__sem_available_outcome, out);
}

int dlock_sem_drain(dlock_sem_t *s, int64_t *out) {
  if (out != NULL)
    *out = 0;
  int64_t n;
  int rc =
      dlock__counter_run(s != NULL ? &s->o : NULL, "semaphore handle is NULL",
                         dlock__sem_drain_call, &n);
  if (rc == 0 && n > 0)
    rc = dlock__sem_note_held(s, n);
  if (rc == 0 && out != NULL)
    *out = n;
  return rc;
}
