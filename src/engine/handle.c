/*
 * The verbs every kind shares, including the wait for a lock that is taken.
 * (Handles are made in object.c, of the kinds that registry.c names.)
 */
#include "alloc.h"
#include "lock.h"

#include "error.h"
#include "monotime.h"
#include "sleep.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- acquiring, with waiting ----------------------------------------------
 */

/* Both bounded by DLOCK_DURATION_MAX_MS (see dlock.h): beyond it, the
 * deadline and lease arithmetic here and in Redis would overflow. */
static int check_times(int64_t wait_ms, int64_t lease_ms) {
  if ((lease_ms <= 0 && lease_ms != DLOCK_WATCHDOG) ||
      lease_ms > DLOCK_DURATION_MAX_MS)
    return dlock__fail(DLOCK_EINVAL,
                       "lease_ms must be 1..DLOCK_DURATION_MAX_MS (%lld ms, "
                       "about 31 years) or DLOCK_WATCHDOG (-1), got %lld",
                       (long long)DLOCK_DURATION_MAX_MS, (long long)lease_ms);
  if ((wait_ms < 0 && wait_ms != DLOCK_WAIT_FOREVER) ||
      wait_ms > DLOCK_DURATION_MAX_MS)
    return dlock__fail(DLOCK_EINVAL,
                       "wait_ms must be 0..DLOCK_DURATION_MAX_MS (%lld ms, "
                       "about 31 years) or DLOCK_WAIT_FOREVER (-1), got %lld",
                       (long long)DLOCK_DURATION_MAX_MS, (long long)wait_ms);
  return 0;
}

int dlock__check_handle(dlock_t *l) {
  if (l->c != NULL)
    return dlock__check_canceled(l->c);
  /* A composite: each part's client, before any part is touched. */
  for (size_t i = 0; i < l->nsubs; i++) {
    int rc = dlock__check_canceled(l->subs[i]->c);
    if (rc != 0)
      return rc;
  }
  return 0;
}

static int timed_out(const dlock_t *l, int64_t wait_ms) {
  return dlock__fail(DLOCK_ETIMEDOUT,
                     "lock \"%.100s\" is held by another owner; not acquired "
                     "within %lld ms",
                     l->name, (long long)wait_ms);
}

/* Sleeps with exponential back-off and jitter (the spin lock's way):
 * 1 ms doubling to 128 ms, never past the deadline. */
static int backoff_sleep(dlock_client_t *c, int *step, int64_t until_us) {
  int64_t base_us = (int64_t)1000 << (*step < 7 ? *step : 7);
  if (*step < 7)
    (*step)++;
  /* Jitter keeps contending spinners from retrying in lockstep. */
  int64_t sleep_us =
      base_us / 2 + (int64_t)(dlock__jitter() % (uint64_t)(base_us / 2 + 1));
  int64_t now = dlock__now_us();
  if (now + sleep_us > until_us)
    sleep_us = until_us - now;
  if (sleep_us > 0) {
    struct timespec ts = {(time_t)(sleep_us / 1000000),
                          (long)(sleep_us % 1000000) * 1000};
    nanosleep(&ts, NULL);
  }
  return dlock__check_canceled(c);
}

/* The channel that announces this owner's turn: l->channel, or one the
 * kind builds (then to be freed with dlock__free). */
static int turn_channel(dlock_t *l, uint64_t owner, char **channel,
                        size_t *len) {
  *channel = l->channel;
  *len = l->channel_len;
  if (l->kind->wait_channel == NULL)
    return 0;
  return l->kind->wait_channel(l, owner, channel, len);
}

/* Says whose waiter 'w' is; a waiter of a kind that takes hand-overs
 * inside the client also gives the lease it wants. */
static void set_waiter(dlock_t *l, uint64_t owner, int64_t lease_ms,
                       dlock__waiter *w) {
  w->owner = owner;
  w->lease_ms = l->kind->no_barging ? lease_ms : 0;
  w->permits = 0; /* a lock's waiter, not a semaphore's */
}

/* Joins the channel that announces this owner's turn, subscribing if the
 * client is not subscribed yet. */
static int join_channel(dlock_t *l, uint64_t owner, int64_t deadline_us,
                        dlock__waiter *w) {
  dlock_client_t *c = l->c;
  char *channel;
  size_t channel_len;
  int rc = turn_channel(l, owner, &channel, &channel_len);
  if (rc != 0)
    return rc;
  int64_t join_by = dlock__deadline_ms(c->opt.command_timeout_ms);
  rc = dlock__pubsub_join(c->ps, channel, channel_len,
                          join_by < deadline_us ? join_by : deadline_us, w);
  if (channel != l->channel)
    dlock__free(channel);
  return rc;
}

/* Joins the channel only if the client is subscribed to it already (a
 * lock contended a moment ago), which is free: see
 * dlock__pubsub_join_active. 1 joined, 0 not, or an error. */
static int join_channel_if_active(dlock_t *l, uint64_t owner, dlock__waiter *w,
                                  int *others) {
  char *channel;
  size_t channel_len;
  int rc = turn_channel(l, owner, &channel, &channel_len);
  if (rc != 0)
    return rc;
  rc = dlock__pubsub_join_active(l->c->ps, channel, channel_len, w, others);
  if (channel != l->channel)
    dlock__free(channel);
  return rc;
}

/* A waiter stops waiting without the lock. When Redis does not answer its
 * leaving (a fair waiter stays queued, and a release may hand it the lock),
 * that is settled once Redis answers again. */
static void give_up(dlock_t *l, uint64_t owner) {
  if (l->kind->give_up != NULL && l->kind->give_up(l, owner) != 0)
    dlock__note_unsettled(l, owner);
}

/* How long a waiter that queued behind its client's other waiters, without
 * trying, sleeps at most before it tries anyway: it does not know the
 * lock's lease, and the unlock that would wake it may never come. */
#define QUEUED_FIRST_WAIT_US 50000

/* The 'ttl_ms' of a waiter that has not tried yet. */
#define NOT_TRIED INT64_MIN

/* The lock was handed to the owner just as its waiter stopped waiting
 * with 'why': it holds the lock. A waiter out of time takes it (it got it
 * at its deadline, as a last attempt would); any other gives it back. */
static int take_late_grant(dlock_t *l, uint64_t owner, int64_t lease_ms,
                           uint64_t token, int64_t since_us, int why) {
  dlock__busy busy = {-1, 0};
  if (l->kind->granted == NULL ||
      l->kind->granted(l, owner, lease_ms, token, since_us, &busy) != 0)
    return why;
  if (why == DLOCK_ETIMEDOUT)
    return 0;
  l->kind->release(l, owner);
  return why;
}

/*
 * The token of the hand-over that woke 'w', or 0 when there is none or it
 * is stale: a message sent before the waiter's latest attempt (see
 * dlock__busy.counter) may only now arrive, and the hold it announced was
 * taken up by an attempt or given back already, in this wait or an
 * earlier one of the same owner.
 */
static uint64_t fresh_grant(const dlock__waiter *w, const dlock__busy *busy) {
  return w->grant > busy->counter ? w->grant : 0;
}

/*
 * Sleeps until the holder's unlock message or its lease end, whichever is
 * first, bounded by the caller's deadline; then tries again, until the lock
 * is taken or the deadline passes. 'joined' is the channel's waiter record
 * when it was joined before the first attempt, or NULL: it is then joined and
 * tried once more, so that an unlock between the first attempt and the
 * subscription is not missed. 'busy' is what the first attempt said (its
 * ttl_ms NOT_TRIED when there was none: the waiter queued behind its
 * client's others), and 'tried_us' when it was sent: a lock handed over to
 * the waiter (see fair_release.lua) has had its lease running since some
 * time after the last attempt.
 */
static int wait_and_acquire(dlock_t *l, uint64_t owner, int64_t wait_ms,
                            int64_t lease_ms, int64_t deadline_us,
                            dlock__waiter *joined, dlock__busy busy,
                            int64_t tried_us) {
  dlock_client_t *c = l->c;
  int step = 0, rc = 0, tried = joined != NULL, woken = 0;
  dlock__waiter own, *sub = joined;
  if (sub == NULL && l->kind->wait_by == DLOCK__WAIT_PUBSUB) {
    set_waiter(l, owner, lease_ms, &own);
    rc = join_channel(l, owner, deadline_us, &own);
    sub = rc == 0 ? &own : NULL;
  }
  while (rc == 0) {
    if (!tried) {
      if (woken)
        dlock__sleep_us(
            dlock__pubsub_contention_pause(c->ps, sub, dlock__jitter()));
      tried_us = dlock__now_us();
      rc = l->kind->try_acquire(l, owner, lease_ms, 1, &busy);
      if (woken && rc >= 0)
        dlock__pubsub_note_attempt(c->ps, sub, rc == 1);
      if (rc != 1)
        break;
    }
    tried = 0;
    int64_t now = dlock__now_us(), until = deadline_us;
    if (busy.ttl_ms == NOT_TRIED) {
      /* Not tried yet: there is always one attempt, whatever the wait. */
      if (now + QUEUED_FIRST_WAIT_US < until)
        until = now + QUEUED_FIRST_WAIT_US;
    } else if (now >= deadline_us) {
      rc = timed_out(l, wait_ms);
      break;
    } else if (busy.ttl_ms >= 0 && dlock__after_ms(now, busy.ttl_ms) < until) {
      /* Saturating: the TTL is whatever the holder set, up to what Redis
       * allows, whose microseconds may not fit. */
      until = dlock__after_ms(now, busy.ttl_ms);
    }
    if (sub != NULL)
      rc = dlock__pubsub_wait(c->ps, sub, until);
    else
      rc = backoff_sleep(c, &step, until);
    /* A stale hand-over only says that something changed: try again. */
    if (rc == 2 && fresh_grant(sub, &busy) == 0)
      rc = 1;
    /* Woken by an unlock message of the shared channel. */
    woken = rc == 1 && l->kind->no_barging;
    if (rc == 2 && l->kind->granted != NULL) {
      /* The release handed the lock over: it is held already. */
      rc = l->kind->granted(l, owner, lease_ms, sub->grant, tried_us, &busy);
      if (rc != 1)
        break;
      tried = 1;
    }
    rc = rc < 0 ? rc : 0;
  }
  if (sub != NULL) {
    dlock__pubsub_leave(c->ps, sub);
    if (rc != 0 && fresh_grant(sub, &busy) != 0)
      rc = take_late_grant(l, owner, lease_ms, sub->grant, tried_us, rc);
  }
  if (rc != 0)
    give_up(l, owner);
  return rc;
}

/* A single lock's acquisition, once the arguments are checked. */
static int trylock_single(dlock_t *l, uint64_t owner, int64_t wait_ms,
                          int64_t lease_ms, int64_t deadline_us) {
  int rc = dlock__settle_before_acquire(l, owner);
  if (rc != 0)
    return rc;
  /* A waiter that is going to wait anyway joins a live subscription before
   * its first attempt, so it need not try again after joining. */
  dlock__waiter w, *sub = NULL;
  int others = 0;
  if (wait_ms != 0 && l->kind->wait_by == DLOCK__WAIT_PUBSUB) {
    set_waiter(l, owner, lease_ms, &w);
    rc = join_channel_if_active(l, owner, &w, &others);
    if (rc < 0)
      return rc;
    sub = rc == 1 ? &w : NULL;
  }
  dlock__busy busy = {NOT_TRIED, 0};
  if (sub != NULL && others > 0 && l->kind->no_barging &&
      dlock__believed_count(l, owner) == 0)
    /* Others of this client wait already: queue behind them. */
    return wait_and_acquire(l, owner, wait_ms, lease_ms, deadline_us, sub, busy,
                            dlock__now_us());
  int64_t tried_us = dlock__now_us();
  rc = l->kind->try_acquire(l, owner, lease_ms, wait_ms != 0, &busy);
  if (rc == 1 && wait_ms != 0)
    return wait_and_acquire(l, owner, wait_ms, lease_ms, deadline_us, sub, busy,
                            tried_us);
  if (sub != NULL) {
    dlock__pubsub_leave(l->c->ps, sub);
    if (rc < 0 && fresh_grant(sub, &busy) != 0)
      rc = take_late_grant(l, owner, lease_ms, sub->grant, tried_us, rc);
  }
  if (rc < 0 && wait_ms != 0)
    give_up(l, owner);
  return rc == 1 ? timed_out(l, wait_ms) : rc;
}

/* Errors that a failover or a restart causes, and that go away: Redis
 * unreachable or saying "not now" (DLOCK_EIO), too few replicas
 * acknowledging (DLOCK_ENOSYNC). */
static int rides_out(int rc) { return rc == DLOCK_EIO || rc == DLOCK_ENOSYNC; }

/* A single lock's acquisition, kept going through an outage: an attempt
 * that fails with an error a failover causes is made again, after a pause,
 * until the wait runs out (or outage_wait_ms after the first such error,
 * when the wait has no end). A retried acquisition is safe: the attempt
 * that got no answer is settled first (dlock__settle_before_acquire), and
 * the scripts set the owner's count from the client's, not by adding. */
static int trylock_riding(dlock_t *l, uint64_t owner, int64_t wait_ms,
                          int64_t lease_ms, int64_t deadline_us) {
  dlock_client_t *c = l->c;
  dlock__riding ride;
  memset(&ride, 0, sizeof(ride));
  int rc;
  for (;;) {
    rc = trylock_single(l, owner, wait_ms, lease_ms, deadline_us);
    /* The last attempt got no answer and may have run: what it took is
     * given back once Redis answers (settle.c). */
    if (dlock__outcome_unknown(rc))
      dlock__note_unsettled(l, owner);
    if (!rides_out(rc) || wait_ms == 0 || c->opt.outage_wait_ms == 0)
      break;
    int64_t until_us =
        wait_ms == DLOCK_WAIT_FOREVER
            ? dlock__after_ms(dlock__now_us(), c->opt.outage_wait_ms)
            : deadline_us;
    int next = dlock__outage_next(c, &ride, rc, until_us);
    if (next == DLOCK_ECANCELED)
      return next;
    if (next != 0)
      break;
  }
  return rides_out(rc) ? dlock__outage_end(&ride, rc) : rc;
}

int dlock_trylock_as(dlock_t *l, uint64_t owner, int64_t wait_ms,
                     int64_t lease_ms) {
  if (l == NULL)
    return dlock__fail(DLOCK_EINVAL, "lock handle is NULL");
  int rc = check_times(wait_ms, lease_ms);
  if (rc == 0)
    rc = dlock__check_handle(l);
  if (rc != 0)
    return rc;
  int64_t deadline_us =
      wait_ms == DLOCK_WAIT_FOREVER ? INT64_MAX : dlock__deadline_ms(wait_ms);
  if (l->kind->acquire != NULL)
    return l->kind->acquire(l, owner, wait_ms, lease_ms, deadline_us);
  return trylock_riding(l, owner, wait_ms, lease_ms, deadline_us);
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
  return rc != 0 ? rc : l->kind->release(l, owner);
}

int dlock_unlock(dlock_t *l) { return dlock_unlock_as(l, dlock_self()); }

uint64_t dlock_token_as(dlock_t *l, uint64_t owner) {
  /* In a child of fork() the records' mutexes may be held for ever. */
  if (l == NULL || dlock__check_handle(l) != 0)
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
