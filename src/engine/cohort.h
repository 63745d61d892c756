/*
 * The rules by which a client's waiters share a lock, or a semaphore's
 * permits, among themselves and with other clients (cohort.c), and what
 * the messages of each kind's channel wake (wake.c). Pub/sub (sub/) only
 * keeps the channels and their waiters: it pins a waiter that these rules
 * choose, keeps their state with the channel, and asks the channel's
 * decoder what a message wakes.
 */
#ifndef DLOCK_COHORT_H
#define DLOCK_COHORT_H

#include "loopsub.h"
#include "pubsub.h"

#include <stddef.h>
#include <stdint.h>

/* Who a waiter is, for a release of its client that may hand it what it
 * releases: set before it joins, and pointed at by its
 * dlock__waiter.owner_data. */
typedef struct dlock__cohort_member {
  uint64_t owner;   /* whose waiter this is */
  int64_t lease_ms; /* the lease it asked for (0: it takes no lock) */
  /* The permits a semaphore's waiter waits for, which a release inside
   * the client may hand it (0: none, and for the waiter of any other
   * kind). */
  int64_t permits;
} dlock__cohort_member;

/* The member a waiter of the engine joined as. */
static inline const dlock__cohort_member *
dlock__cohort_of(const dlock__waiter *w) {
  return (const dlock__cohort_member *)w->owner_data;
}

/*
 * How contended the channel's lock is across clients, as seen by this
 * client's waiters: each attempt that follows an unlock message reports
 * whether it failed (another client got there first). Returns a pause, in
 * microseconds, drawn at random from a fixed window once a tenth or more
 * of such attempts fail (0 below that): waiters of every client woken by
 * the same unlock then try in random order rather than in the order Redis
 * delivers the message (which favours the same client every time), and
 * the losers' attempts stop competing with the winner's critical section.
 * A lock handed from one waiter to the next without rivals never pauses.
 */
int64_t dlock__cohort_contention_pause(dlock__pubsub *ps, dlock__waiter *w,
                                       uint64_t random);
void dlock__cohort_note_attempt(dlock__pubsub *ps, dlock__waiter *w,
                                int failed);

/*
 * For a releasing thread of this client: reserves the first waiter on
 * 'channel' that takes hand-overs (a lease_ms set), is not 'owner' and has
 * not been woken, so that it stays until dlock__cohort_resolve. Returns
 * NULL when there is none. '*at_cap' is set when the client has handed the
 * lock over 'max_run' times in a row on the channel: the lock is then to
 * be released for everyone.
 */
dlock__waiter *dlock__cohort_reserve(dlock__pubsub *ps, const char *channel,
                                     size_t len, uint64_t owner, int max_run,
                                     int *at_cap);

/* The same for a semaphore's release of 'permits': reserves the first
 * waiter on 'channel' that waits for at most that many permits, and is
 * asleep. */
dlock__waiter *dlock__cohort_reserve_permits(dlock__pubsub *ps,
                                             const char *channel, size_t len,
                                             int64_t permits, int max_run,
                                             int *at_cap);

/* Ends a reservation with 'outcome' (enum dlock__resolve; and 'token'
 * when handed over). */
void dlock__cohort_resolve(dlock__pubsub *ps, dlock__waiter *w, uint64_t token,
                           int outcome);

/*
 * The same rules for the waiters of an event loop's pub/sub (loopsub.h),
 * whose 'owner_data' is their member and whose channel's slot keeps the
 * same state. A reserved waiter is one asleep in its wait ('parked'),
 * pinned there until dlock__cohort_loop_resolve; '*ref' is where the
 * release keeps it, cleared if it leaves first (the client's close).
 *
 * The pause before a woken waiter's attempt is the hold-back after the
 * loop's own run of hand-overs alone: an application's loop has timers
 * of a millisecond, so the random window of a few hundred microseconds
 * would become a millisecond for every contended attempt: it cut the
 * throughput of 4 loops sharing a lock by about 40 % (bench_async), and
 * the hold-back alone rotates the lock among them.
 */
int64_t dlock__cohort_loop_pause(dlock__lsub *s, dlock__lwaiter *w);
dlock__lwaiter *dlock__cohort_loop_reserve(dlock__lsub *s, const char *channel,
                                           size_t len, uint64_t owner,
                                           int max_run, int *at_cap,
                                           dlock__lwaiter **ref);
void dlock__cohort_loop_resolve(dlock__lsub *s, dlock__lwaiter *w,
                                uint64_t token, int outcome);

/* How the messages of each kind's channel wake its waiters (wake.c), for
 * dlock__pubsub_join_as. A lock's: "1" wakes every waiter (Redisson's
 * read-write lock sends it when the write lock is released), a hand-over
 * ("grant:<token>") or any other message the first one. */
dlock__wakeup dlock__wake_lock(const char *msg, size_t len);
/* A semaphore's: the message is the number of free permits, and wakes
 * that many waiters (none for 0 or less; one if it is not a number). */
dlock__wakeup dlock__wake_count(const char *msg, size_t len);
/* A count-down latch's: "0" (the count reached zero) wakes every waiter,
 * anything else none. */
dlock__wakeup dlock__wake_latch(const char *msg, size_t len);

#endif
