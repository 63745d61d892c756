/*
 * The rules by which a client's waiters share a lock among themselves and
 * with other clients (see cohort.h): the pause before an attempt on a
 * contended lock, and the reservation of a waiter by a releasing thread
 * of the client that hands it the lock (or a semaphore's permits), with
 * the hold-back after a run of such hand-overs. Pub/sub pins the waiter
 * these rules choose, and keeps their state for each channel in its slot
 * (dlock__pubsub_with_slot), under its mutex.
 */
#include "cohort.h"

#include "alloc.h"
#include "lock.h"
#include "monotime.h"

/* The widest pause before an attempt after an unlock message, when every
 * such attempt of this client fails (see dlock__cohort_contention_pause):
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

/* What the client keeps for a channel, in its slot. */
typedef struct cohort_channel {
  /* Of the attempts that followed an unlock message, the share that failed,
   * in thousandths (a moving average over about the last eight). */
  int failed_permille;
  int handover_run;       /* hand-overs inside the client in a row */
  int64_t run_started_us; /* ... since the first of them */
  int64_t yield_until_us; /* see YIELD_US, RUN_SHARE_DIVISOR */
} cohort_channel;

/* The channel's state, made when 'make' is set and there is none yet
 * (NULL when out of memory, or not made: all zeros, as a new one). */
static cohort_channel *channel_of(void **slot, int make) {
  if (*slot == NULL && make)
    *slot = dlock__calloc(1, sizeof(cohort_channel));
  return *slot;
}

/* ---- the contention pause ------------------------------------------------
 */

typedef struct pause_read {
  int64_t window, yield;
} pause_read;

static void read_pause(void **slot, void *arg) {
  const cohort_channel *ch = channel_of(slot, 0);
  pause_read *p = arg;
  /* The same window for every contending client, whoever has been
   * winning: a window that shrank with a client's success would let the
   * client that wins most win ever more. */
  p->window = ch != NULL && ch->failed_permille >= CONTENDED_PERMILLE
                  ? CONTENTION_PAUSE_MAX_US
                  : 0;
  p->yield = (ch != NULL ? ch->yield_until_us : 0) - dlock__now_us();
}

int64_t dlock__cohort_contention_pause(dlock__pubsub *ps, dlock__waiter *w,
                                       uint64_t random) {
  pause_read p;
  dlock__pubsub_with_slot(ps, w, read_pause, &p);
  if (p.yield > 0)
    return p.yield;
  return p.window > 0 ? (int64_t)(random % (uint64_t)(p.window + 1)) : 0;
}

static void note_failed(void **slot, void *arg) {
  int failed = *(const int *)arg;
  /* A new channel's share is 0, and stays so after a success. */
  cohort_channel *ch = channel_of(slot, failed);
  if (ch != NULL)
    ch->failed_permille += ((failed ? 1000 : 0) - ch->failed_permille) / 8;
}

void dlock__cohort_note_attempt(dlock__pubsub *ps, dlock__waiter *w,
                                int failed) {
  dlock__pubsub_with_slot(ps, w, note_failed, &failed);
}

/* ---- hand-overs inside the client -----------------------------------------
 */

/* What a releasing thread hands over: a lock of 'owner' (permits 0), or
 * that many of a semaphore's permits; and what its reservation found. */
typedef struct handover_pick {
  uint64_t owner;
  int64_t permits;
  int max_run;
  int at_cap;
} handover_pick;

/* Whether a release may hand member 'm' of a waiter (not awake, not
 * reserved; 'parked' when it sleeps in its wait) what it releases. */
static int may_hand(const dlock__cohort_member *m, int parked,
                    const handover_pick *p) {
  if (m == NULL)
    return 0;
  /* Permits go only to a waiter that is asleep: one in the middle of an
   * attempt could take permits in Redis as well, and hold twice as many
   * as it counts. */
  if (p->permits > 0)
    return parked && m->permits > 0 && m->permits <= p->permits;
  return m->lease_ms != 0 && m->owner != p->owner;
}

static int takes_handover(const dlock__waiter *w, void *arg) {
  return may_hand(dlock__cohort_of(w), w->parked, arg);
}

/* Counts the run of hand-overs on the channel: one more when a waiter was
 * 'pinned', and a release without one ends it. */
static int count_run_of(void **slot, int pinned, void *arg) {
  handover_pick *p = arg;
  cohort_channel *ch = channel_of(slot, pinned);
  if (!pinned) {
    if (ch != NULL)
      ch->handover_run = 0;
    return 0;
  }
  /* Out of memory: no hand-over this time, the lock is released. */
  if (ch == NULL)
    return -1;
  p->at_cap = ch->handover_run >= p->max_run;
  if (!p->at_cap && ch->handover_run++ == 0)
    ch->run_started_us = dlock__now_us();
  return 0;
}

static int count_run(void **slot, dlock__waiter *pinned, void *arg) {
  return count_run_of(slot, pinned != NULL, arg);
}

static dlock__waiter *reserve(dlock__pubsub *ps, const char *channel,
                              size_t len, uint64_t owner, int64_t permits,
                              int max_run, int *at_cap) {
  handover_pick p = {owner, permits, max_run, 0};
  /* A semaphore's waiter stays in its wait once reserved (see
   * dlock__waiter.pin_holds). */
  dlock__waiter *w = dlock__pubsub_pin_first(ps, channel, len, permits > 0,
                                             takes_handover, count_run, &p);
  *at_cap = p.at_cap;
  return w;
}

dlock__waiter *dlock__cohort_reserve(dlock__pubsub *ps, const char *channel,
                                     size_t len, uint64_t owner, int max_run,
                                     int *at_cap) {
  return reserve(ps, channel, len, owner, 0, max_run, at_cap);
}

dlock__waiter *dlock__cohort_reserve_permits(dlock__pubsub *ps,
                                             const char *channel, size_t len,
                                             int64_t permits, int max_run,
                                             int *at_cap) {
  return reserve(ps, channel, len, 0, permits, max_run, at_cap);
}

/* Ends the run of hand-overs as 'outcome' (not DLOCK__RESOLVE_HANDED)
 * says: a release for every client sets the client's hold-back. */
static void end_run(void **slot, void *arg) {
  int outcome = *(const int *)arg;
  cohort_channel *ch = channel_of(slot, 1);
  if (ch == NULL)
    return;
  if (outcome == DLOCK__RESOLVE_YIELDED || outcome == DLOCK__RESOLVE_RELEASED) {
    int64_t now = dlock__now_us(), hold = 0;
    if (ch->handover_run > 0 && ch->run_started_us > 0)
      hold = (now - ch->run_started_us) / RUN_SHARE_DIVISOR;
    if (outcome == DLOCK__RESOLVE_YIELDED && hold < YIELD_US)
      hold = YIELD_US;
    ch->yield_until_us = now + hold;
  }
  ch->handover_run = 0;
}

/* Whether a waiter that was reserved wakes at the end of its reservation
 * with 'outcome' (not DLOCK__RESOLVE_HANDED), as a member 'm'. */
static int wakes_at_end(const dlock__cohort_member *m, int outcome) {
  return outcome == DLOCK__RESOLVE_FAILED || m->permits > 0;
}

void dlock__cohort_resolve(dlock__pubsub *ps, dlock__waiter *w, uint64_t token,
                           int outcome) {
  if (outcome == DLOCK__RESOLVE_HANDED) {
    dlock__pubsub_unpin(ps, w, 1, token, NULL, NULL);
    return;
  }
  /* A failed hand-over wakes the waiter to try. So does any end for a
   * semaphore's waiter, which the release's message skipped
   * (dlock__sub_wake_n_locked): it tries, after its hold-back. A lock
   * released for everyone is not woken: the unlock message wakes the
   * waiter like any other, and it only has to notice that it is no longer
   * reserved. */
  int wake = wakes_at_end(dlock__cohort_of(w), outcome);
  dlock__pubsub_unpin(ps, w, wake, 0, end_run, &outcome);
}

/* ---- the same rules for an event loop's waiters (loopsub.h) -------------
 */

int64_t dlock__cohort_loop_pause(dlock__lsub *s, dlock__lwaiter *w) {
  pause_read p = {0, 0};
  dlock__lsub_with_slot(s, w, read_pause, &p);
  return p.yield > 0 ? p.yield : 0;
}

/* Only a waiter asleep in its wait, whatever it waits for: the loop runs
 * one step at a time, and a waiter with an attempt of its own in flight
 * would take the lock, or be refused, whatever the hand-over does. */
static int loop_takes_handover(const dlock__lwaiter *w, void *arg) {
  return w->parked && may_hand(w->owner_data, w->parked, arg);
}

dlock__lwaiter *dlock__cohort_loop_reserve(dlock__lsub *s, const char *channel,
                                           size_t len, uint64_t owner,
                                           int max_run, int *at_cap,
                                           dlock__lwaiter **ref) {
  handover_pick p = {owner, 0, max_run, 0};
  dlock__lwaiter *w = dlock__lsub_pin_first(
      s, channel, len, loop_takes_handover, count_run_of, &p, ref);
  *at_cap = p.at_cap;
  return w;
}

void dlock__cohort_loop_resolve(dlock__lsub *s, dlock__lwaiter *w,
                                uint64_t token, int outcome) {
  if (outcome == DLOCK__RESOLVE_HANDED) {
    dlock__lsub_unpin(s, w, 1, token, NULL, NULL);
    return;
  }
  int wake = wakes_at_end(w->owner_data, outcome);
  dlock__lsub_unpin(s, w, wake, 0, end_run, &outcome);
}
