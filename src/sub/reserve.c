/*
 * The rules by which a client's waiters share a lock among themselves and
 * with other clients (see pubsub.h): the pause before an attempt on a
 * contended lock, and the reservation of a waiter by a releasing thread
 * of the client that hands it the lock (or a semaphore's permits), with
 * the hold-back after a run of such hand-overs.
 */
#include "pubsub_int.h"

#include "monotime.h"

#include <pthread.h>
#include <stdatomic.h>

/* The widest pause before an attempt after an unlock message, when every
 * such attempt of this client fails (see dlock__pubsub_contention_pause):
 * a few round trips of a loaded server. */
#define CONTENTION_PAUSE_MAX_US 300
/* From this share of failed attempts after unlock messages (thousandths),
 * the lock counts as contended across clients. */
#define CONTENDED_PERMILLE 100
/* How long the waiters of a client that released a lock for every client
 * (after handing it over inside the client several times in a row) hold
 * back their next attempt: longer than the widest contention pause plus a
 * round trip, so that another client's woken waiter gets there first. */
#define YIELD_US (CONTENTION_PAUSE_MAX_US + 400)
/* After a run of hand-overs, the client's waiters hold back at least this
 * fraction of the run's time (first hand-over to the release that ends
 * it, i.e. the last three of its four holds): the lock is then free for
 * other clients about an eighth of the time the client keeps it, which is
 * all a client that polls without listening can be given, as it cannot be
 * seen. */
#define RUN_SHARE_DIVISOR 6

int64_t dlock__pubsub_contention_pause(dlock__pubsub *ps, dlock__waiter *w,
                                       uint64_t random) {
  ps = w->sub->ps;
  pthread_mutex_lock(&ps->mu);
  /* The same window for every contending client, whoever has been
   * winning: a window that shrank with a client's success would let the
   * client that wins most win ever more. */
  int64_t window = w->sub->failed_permille >= CONTENDED_PERMILLE
                       ? CONTENTION_PAUSE_MAX_US
                       : 0;
  int64_t yield = w->sub->yield_until_us - dlock__now_us();
  pthread_mutex_unlock(&ps->mu);
  if (yield > 0)
    return yield;
  return window > 0 ? (int64_t)(random % (uint64_t)(window + 1)) : 0;
}

void dlock__pubsub_note_attempt(dlock__pubsub *ps, dlock__waiter *w,
                                int failed) {
  ps = w->sub->ps;
  pthread_mutex_lock(&ps->mu);
  dlock__sub *s = w->sub;
  s->failed_permille += ((failed ? 1000 : 0) - s->failed_permille) / 8;
  pthread_mutex_unlock(&ps->mu);
}

/* Whether a releasing thread may hand 'w' what it releases: a lock of
 * 'owner' (permits 0), or that many of a semaphore's permits. */
static int takes_handover(const dlock__waiter *w, uint64_t owner,
                          int64_t permits) {
  if (w->permit || w->reserved)
    return 0;
  /* Permits go only to a waiter that is asleep: one in the middle of an
   * attempt could take permits in Redis as well, and hold twice as many
   * as it counts. */
  if (permits > 0)
    return w->parked && w->permits > 0 && w->permits <= permits;
  return w->lease_ms != 0 && w->owner != owner;
}

static dlock__waiter *reserve(dlock__pubsub *ps, const char *channel,
                              size_t len, uint64_t owner, int64_t permits,
                              int max_run, int *at_cap) {
  *at_cap = 0;
  int rc;
  if ((ps = dlock__shards_route(ps, channel, len, 0, &rc)) == NULL)
    return NULL;
  if (atomic_load(&ps->nsubs) == 0)
    return NULL;
  pthread_mutex_lock(&ps->mu);
  dlock__sub *s = dlock__sub_find(ps, channel, len);
  dlock__waiter *chosen = NULL;
  if (s != NULL)
    for (dlock__waiter *w = s->head; w != NULL; w = w->next)
      if (takes_handover(w, owner, permits)) {
        chosen = w;
        break;
      }
  if (chosen != NULL) {
    chosen->reserved = 1;
    *at_cap = s->handover_run >= max_run;
    if (!*at_cap && s->handover_run++ == 0)
      s->run_started_us = dlock__now_us();
  } else if (s != NULL) {
    s->handover_run = 0;
  }
  pthread_mutex_unlock(&ps->mu);
  return chosen;
}

dlock__waiter *dlock__pubsub_reserve(dlock__pubsub *ps, const char *channel,
                                     size_t len, uint64_t owner, int max_run,
                                     int *at_cap) {
  return reserve(ps, channel, len, owner, 0, max_run, at_cap);
}

dlock__waiter *dlock__pubsub_reserve_permits(dlock__pubsub *ps,
                                             const char *channel, size_t len,
                                             int64_t permits, int max_run,
                                             int *at_cap) {
  return reserve(ps, channel, len, 0, permits, max_run, at_cap);
}

void dlock__pubsub_resolve(dlock__pubsub *ps, dlock__waiter *w, uint64_t token,
                           int outcome) {
  ps = w->sub->ps;
  pthread_mutex_lock(&ps->mu);
  w->reserved = 0;
  if (outcome == DLOCK__RESOLVE_HANDED) {
    w->grant = token;
    dlock__sub_wake_locked(w);
  } else {
    dlock__sub *s = w->sub;
    if (outcome == DLOCK__RESOLVE_YIELDED ||
        outcome == DLOCK__RESOLVE_RELEASED) {
      int64_t now = dlock__now_us(), hold = 0;
      if (s->handover_run > 0 && s->run_started_us > 0)
        hold = (now - s->run_started_us) / RUN_SHARE_DIVISOR;
      if (outcome == DLOCK__RESOLVE_YIELDED && hold < YIELD_US)
        hold = YIELD_US;
      s->yield_until_us = now + hold;
    }
    s->handover_run = 0;
    if (outcome == DLOCK__RESOLVE_FAILED || w->permits > 0) {
      /* A semaphore's waiter was skipped by the release's message
       * (dlock__sub_wake_n_locked): it tries, after its hold-back. */
      w->grant = 0;
      dlock__sub_wake_locked(w);
    } else if (w->reading) {
      /* Released for everyone: the unlock message wakes the waiter like
       * any other; it only has to notice that it is no longer reserved. */
      dlock__sub_poke(ps->reader_pipe[1]);
    } else {
      pthread_cond_signal(&w->cv);
    }
  }
  pthread_mutex_unlock(&ps->mu);
}
