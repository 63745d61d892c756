/*
 * The verbs every kind shares, including the wait for a lock that is taken.
 * (Handles are made in object.c, of the kinds that registry.c names.)
 */
#include "alloc.h"
#include "args.h"
#include "engine.h"
#include "machine.h"
#include "observe.h"

#include "error.h"
#include "monotime.h"
#include "sleep.h"

#include <stdio.h>
#include <string.h>

/* ---- acquiring, with waiting ----------------------------------------------
 */

/* The checks of a handle's verbs: 'blocking' for those that wait for
 * Redis, which an async client refuses. */
static int check_handle(dlock_t *l, int blocking) {
  int (*check)(dlock_client_t *) =
      blocking ? dlock__check_blocking : dlock__check_canceled;
  if (l->c != NULL)
    return check(l->c);
  /* A composite: each part's client, before any part is touched. */
  for (size_t i = 0; i < l->nsubs; i++) {
    int rc = check(l->subs[i]->c);
    if (rc != 0)
      return rc;
  }
  return 0;
}

int dlock__check_handle(dlock_t *l) { return check_handle(l, 1); }

int dlock__lock_timed_out(const dlock_t *l, int64_t wait_ms) {
  return dlock__fail(DLOCK_ETIMEDOUT,
                     "lock \"%.100s\" is held by another owner; not acquired "
                     "within %lld ms",
                     l->name, (long long)wait_ms);
}

/* A single lock's acquisition as the machine's steps (machine.h). */
typedef struct lock_acq {
  dlock_t *l;
  uint64_t owner;
  int64_t wait_ms, lease_ms;
} lock_acq;

static lock_acq *target(dlock__acq *m) { return m->arg; }

/* Before a single lock is acquired: a lost hold reported, an unknown
 * outcome and an abandoned hold's release settled (see
 * dlock__settle_before_acquire). */
static int lock_prepare(dlock__acq *m) {
  return dlock__settle_before_acquire(target(m)->l, target(m)->owner);
}

static int lock_attempt(dlock__acq *m, int queue) {
  lock_acq *t = target(m);
  return dlock__attempt(t->l, t->owner, t->lease_ms, queue, &m->busy);
}

/* A release handed the lock over (see fair_release.lua and handover.c):
 * its lease has been running since some time after the last attempt. */
static int lock_take_handed(dlock__acq *m, uint64_t token) {
  lock_acq *t = target(m);
  if (t->l->kind->handed == NULL) {
    m->tried_us = dlock__now_us();
    return dlock__attempt(t->l, t->owner, t->lease_ms, 1, &m->busy);
  }
  return dlock__take_handed(t->l, t->owner, t->lease_ms, token, m->tried_us,
                            &m->busy);
}

/* The lock was handed to the owner just as its waiter stopped waiting
 * with 'why': it holds the lock. A waiter out of time takes it (it got it
 * at its deadline, as a last attempt would); any other gives it back. */
static int lock_late_grant(dlock__acq *m, uint64_t token, int why) {
  lock_acq *t = target(m);
  dlock__busy busy = {-1, 0};
  if (why == 0 || t->l->kind->handed == NULL ||
      dlock__take_handed(t->l, t->owner, t->lease_ms, token, m->tried_us,
                         &busy) != 0)
    return why;
  if (why == DLOCK_ETIMEDOUT)
    return 0;
  dlock__release_hold(t->l, t->owner);
  return why;
}

/* A waiter stops waiting without the lock. When Redis does not answer its
 * leaving (a fair waiter stays queued, and a release may hand it the lock),
 * that is settled once Redis answers again. */
static void lock_give_up(dlock__acq *m) {
  if (dlock__leave_queue(target(m)->l, target(m)->owner) != 0)
    dlock__note_unsettled(target(m)->l, target(m)->owner);
}

static void lock_unknown(dlock__acq *m) {
  dlock__note_unsettled(target(m)->l, target(m)->owner);
}

static int lock_timed_out(dlock__acq *m) {
  return dlock__lock_timed_out(target(m)->l, target(m)->wait_ms);
}

/* A new waiter of a kind without barging queues behind its client's
 * waiters rather than try ahead of them, unless it holds the lock. */
static int lock_queues_behind(dlock__acq *m) {
  lock_acq *t = target(m);
  return t->l->kind->no_barging && dlock__believed_count(t->l, t->owner) == 0;
}

static const dlock__acq_ops lock_ops = {
    .prepare = lock_prepare,
    .attempt = lock_attempt,
    .take_handed = lock_take_handed,
    .late_grant = lock_late_grant,
    .give_up = lock_give_up,
    .unknown = lock_unknown,
    .timed_out = lock_timed_out,
    .queues_behind = lock_queues_behind,
};

/* A single lock's acquisition, once the arguments are checked: the
 * machine, waiting on the channel that announces this owner's turn
 * (l->channel, or one the kind builds) or by back-off, and riding an
 * outage within the wait (or outage_wait_ms after the first error of one,
 * when the wait has no end). */
static int trylock_single(dlock_t *l, uint64_t owner, int64_t wait_ms,
                          int64_t lease_ms) {
  int64_t start_us = dlock__obs_start(l);
  lock_acq t = {l, owner, wait_ms, lease_ms};
  dlock__acq m;
  char *channel = l->channel;
  size_t channel_len = l->channel_len;
  int by_pubsub = l->kind->wait_by == DLOCK__WAIT_PUBSUB;
  if (by_pubsub && wait_ms != 0 && l->kind->wait_channel != NULL) {
    int rc = l->kind->wait_channel(l, owner, &channel, &channel_len);
    if (rc != 0)
      return rc;
  }
  dlock__acq_init(&m, &lock_ops, &t, l->c, wait_ms,
                  by_pubsub ? DLOCK__ACQ_BY_PUBSUB : DLOCK__ACQ_BY_BACKOFF,
                  channel, channel_len);
  m.free_channel = channel != l->channel;
  m.wake = dlock__wake_lock;
  m.join_early = 1;
  m.pause_if_woken = m.note_attempts = l->kind->no_barging;
  m.ride_restarts = 1;
  /* Says whose waiter it is; a waiter of a kind that takes hand-overs
   * inside the client also gives the lease it wants. */
  m.who.owner = owner;
  m.who.lease_ms = l->kind->no_barging ? lease_ms : 0;
  m.who.permits = 0; /* a lock's waiter, not a semaphore's */
  int rc = dlock__acq_run(&m);
  return dlock__obs_acquired(l, owner, wait_ms, start_us, m.waited, rc);
}

int dlock_trylock_as(dlock_t *l, uint64_t owner, int64_t wait_ms,
                     int64_t lease_ms) {
  if (l == NULL)
    return dlock__fail(DLOCK_EINVAL, "lock handle is NULL");
  int rc = dlock__check_times(wait_ms, lease_ms);
  if (rc == 0)
    rc = dlock__check_handle(l);
  if (rc != 0)
    return rc;
  /* A composite, counted as a whole. */
  if (l->kind->acquire != NULL)
    return dlock__obs_whole_acquire(l, owner, wait_ms, lease_ms,
                                    wait_ms == DLOCK_WAIT_FOREVER
                                        ? INT64_MAX
                                        : dlock__deadline_ms(wait_ms));
  return trylock_single(l, owner, wait_ms, lease_ms);
}

int dlock_trylock(dlock_t *l, int64_t wait_ms, int64_t lease_ms) {
  return dlock_trylock_as(l, dlock_self(), wait_ms, lease_ms);
}

int dlock_lock_as(dlock_t *l, uint64_t owner, int64_t lease_ms) {
  return dlock_trylock_as(l, owner, DLOCK_WAIT_FOREVER, lease_ms);
}

int dlock_lock(dlock_t *l, int64_t lease_ms) {
  return dlock_trylock_as(l, dlock_self(), DLOCK_WAIT_FOREVER, lease_ms);
}

int dlock_unlock_as(dlock_t *l, uint64_t owner) {
  if (l == NULL)
    return dlock__fail(DLOCK_EINVAL, "lock handle is NULL");
  int rc = dlock__check_handle(l);
  if (rc != 0)
    return rc;
  if (l->c == NULL) /* a composite: counted as a whole, not by its parts */
    return dlock__obs_whole_release(l, owner);
  dlock__obs_hold before;
  dlock__obs_peek(l, owner, &before);
  rc = l->kind->release != NULL ? l->kind->release(l, owner)
                                : dlock__release_hold(l, owner);
  return dlock__obs_unlocked(l, owner, &before, rc);
}

int dlock_unlock(dlock_t *l) { return dlock_unlock_as(l, dlock_self()); }

uint64_t dlock_token_as(dlock_t *l, uint64_t owner) {
  /* In a child of fork() the records' mutexes may be held for ever. */
  if (l == NULL || check_handle(l, 0) != 0)
    return 0;
  if (l->kind->token != NULL)
    return l->kind->token(l, owner);
  pthread_mutex_lock(&l->c->mu);
  dlock__hold *h =
      dlock__holds_find(&l->c->holds, l->name, l->len, owner, l->kind->id);
  uint64_t token = h != NULL && !h->lost ? h->token : 0;
  pthread_mutex_unlock(&l->c->mu);
  return token;
}

uint64_t dlock_token(dlock_t *l) { return dlock_token_as(l, dlock_self()); }
