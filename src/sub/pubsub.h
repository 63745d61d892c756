/*
 * Unlock notifications. Each client keeps one pub/sub connection, served by
 * its own thread. Waiters join a channel (shared by every waiter of the
 * client on that channel), sleep until a message or a deadline, and leave.
 * A message "0" wakes one waiter of the client, "1" wakes all of them
 * (Redisson's read-write lock uses it when the write lock is released).
 *
 * A client of a cluster with sharded pub/sub (dlock__cluster_sharded)
 * has one such connection and thread per master that has its waiters,
 * each subscribing with SSUBSCRIBE to the channels of that master's
 * slots; the calls below take the client's dlock__pubsub all the same
 * and find the right one by the channel or the waiter.
 *
 * A wake-up is kept by its waiter until taken, so a message that arrives
 * between a waiter's failed attempt and its sleep is not lost. After the
 * connection comes back, every waiter is woken once, because unlock
 * messages sent while it was down are gone.
 */
#ifndef DLOCK_PUBSUB_H
#define DLOCK_PUBSUB_H

#include <stddef.h>
#include <stdint.h>

#include "net/net.h"
#include "url.h"

#include <pthread.h>

struct dlock__sentinel;
struct dlock__cluster;

typedef struct dlock__pubsub dlock__pubsub;
typedef struct dlock__sub dlock__sub;

/*
 * One thread waiting on a channel, on the caller's stack from join to
 * leave. A client's waiters on a channel form a queue in the order they
 * joined: an unlock message wakes the first one that has no wake-up yet,
 * and a waiter keeps its place across attempts until it leaves. So a
 * process's threads take turns, and a thread that has just released cannot
 * take the wake-up meant for one that was waiting already.
 */
typedef struct dlock__waiter {
  struct dlock__waiter *next;
  dlock__sub *sub;
  pthread_cond_t cv;
  int permit;  /* woken and not yet taken */
  int reading; /* reading the connection itself, in ppoll (see subread.c) */
  /* The token of a lock handed to this waiter's owner by a release (a fair
   * lock's "grant:<token>" on the owner's own channel, or a hand-over
   * inside the client); 0 when none. */
  uint64_t grant;
  /* Set by the waiter before it joins, for hand-overs inside the client:
   * whose waiter this is, and the lease it asked for (0: it takes none). */
  uint64_t owner;
  int64_t lease_ms;
  /* Set by every waiter before it joins: the permits a semaphore's waiter
   * waits for, which a release inside the client may hand it (0: none, and
   * for the waiter of any other kind). */
  int64_t permits;
  int parked;   /* inside dlock__pubsub_wait, making no attempt of its own */
  int reserved; /* chosen by a releasing thread; see dlock__pubsub_reserve */
} dlock__waiter;

/* Connects the pub/sub connection ('tls' for a rediss:// endpoint, else
 * NULL; it must outlive the connection; 'sentinel' for a redis-sentinel://
 * URL, which then gives the master at each connect, else NULL; 'cluster'
 * for a redis-cluster:// URL, whose nodes are tried in turn at each
 * reconnect, as a cluster delivers a classic PUBLISH to every node) and
 * starts its thread. For a cluster where dlock__cluster_probe_sharded
 * found sharded pub/sub, it connects nothing yet: each master's
 * connection is made at the first join on one of its channels. The first
 * connect to a single server waits until 'open_deadline_us' at most
 * (CLOCK_MONOTONIC; INT64_MAX: the timeouts alone). With 'lazy', an unreachable
 * server is not an error: the thread keeps trying. */
int dlock__pubsub_start(const dlock__endpoint *ep, const dlock__tls *tls,
                        struct dlock__sentinel *sentinel,
                        struct dlock__cluster *cluster,
                        int64_t connect_timeout_ms, int64_t command_timeout_ms,
                        int lazy, int64_t open_deadline_us,
                        dlock__pubsub **out);

/* Wakes the thread, which then checks whether the master moved (a
 * redis-sentinel:// client: 'sentinel' given to dlock__pubsub_start) and
 * follows it. */
void dlock__pubsub_poke(dlock__pubsub *ps);

/* Wakes every waiter with DLOCK_ECANCELED, now and later. */
void dlock__pubsub_cancel(dlock__pubsub *ps);

/* Stops the thread and frees everything. NULL is ignored. */
void dlock__pubsub_stop(dlock__pubsub *ps);

/* In a child of fork(): frees 'ps' and closes this process's copies of its
 * descriptors, without joining, waking or waiting for anyone. 0, or -1
 * (nothing freed) when a parent thread was working on it at the fork. */
int dlock__pubsub_forget(dlock__pubsub *ps);

/*
 * Joins 'channel' and waits until Redis confirms the subscription (made
 * again after an UNSUBSCRIBE still on its way) or 'deadline_us' passes.
 * Without a working connection, or out of time, it returns 0 all the same:
 * the waiter then sleeps by the lock's TTL, and is woken once the
 * subscription is confirmed (a message sent before that was lost). 0,
 * DLOCK_ENOMEM,
 * DLOCK_ECANCELED, or DLOCK_EAUTH/DLOCK_ESERVER when Redis refuses the
 * subscription (an ACL user without SUBSCRIBE: use a spin lock).
 */
int dlock__pubsub_join(dlock__pubsub *ps, const char *channel, size_t len,
                       int64_t deadline_us, dlock__waiter *w);

/*
 * Joins 'channel' only if this client is already subscribed to it (a
 * waiter of the lock is there, or was a moment ago), which costs no round
 * trip. Returns 1 when joined, with '*others' set to the number of this
 * client's waiters already on it, and 0 when not joined. A waiter that
 * joins before its first attempt cannot miss an unlock that follows it.
 */
int dlock__pubsub_join_active(dlock__pubsub *ps, const char *channel,
                              size_t len, dlock__waiter *w, int *others);

/* How the messages of a channel wake its waiters. */
enum dlock__wake {
  /* A lock's: "1" wakes every waiter, a hand-over ("grant:<token>") or any
   * other message the first one. */
  DLOCK__WAKE_LOCK,
  /* A semaphore's: the message is the number of free permits, and wakes
   * that many waiters (none for 0 or less; one if it is not a number). */
  DLOCK__WAKE_COUNT,
  /* A count-down latch's: "0" (the count reached zero) wakes every waiter,
   * anything else none. */
  DLOCK__WAKE_LATCH
};

/* dlock__pubsub_join for a channel whose messages wake as 'wake' says
 * (dlock__pubsub_join is DLOCK__WAKE_LOCK). */
int dlock__pubsub_join_as(dlock__pubsub *ps, const char *channel, size_t len,
                          int64_t deadline_us, dlock__waiter *w, int wake);

/* Hands a wake-up on to the first other waiter in line that is not
 * awake: for a waiter that was woken but could not use its wake-up (it
 * needs more permits than are free), so that one that needs fewer tries. */
void dlock__pubsub_pass(dlock__pubsub *ps, dlock__waiter *w);

/* Sleeps until a wake-up (returns 1, or 2 when the lock was handed over:
 * see dlock__waiter.grant), 'until_us' (0), or cancellation. */
int dlock__pubsub_wait(dlock__pubsub *ps, dlock__waiter *w, int64_t until_us);

/*
 * How contended the channel's lock is across clients, as seen by this
 * client's waiters: each attempt that follows an unlock message reports
 * whether it failed (another client got there first). Returns a pause, in
 * microseconds, drawn at random from a fixed window once a tenth or more
 * of such attempts fail (0 below that): waiters of every client woken by
 * the same
 * unlock then try in random order rather than in the order Redis delivers
 * the message (which favours the same client every time), and the losers'
 * attempts stop competing with the winner's critical section. A lock
 * handed from one waiter to the next without rivals never pauses.
 */
int64_t dlock__pubsub_contention_pause(dlock__pubsub *ps, dlock__waiter *w,
                                       uint64_t random);
void dlock__pubsub_note_attempt(dlock__pubsub *ps, dlock__waiter *w,
                                int failed);

/*
 * For a releasing thread of this client: reserves the first waiter on
 * 'channel' that takes hand-overs (a lease_ms set), is not 'owner' and has
 * not been woken, so that it stays until dlock__pubsub_resolve. Returns
 * NULL when there is none. '*at_cap' is set when the client has handed the
 * lock over 'max_run' times in a row on the channel: the lock is then to
 * be released for everyone.
 */
dlock__waiter *dlock__pubsub_reserve(dlock__pubsub *ps, const char *channel,
                                     size_t len, uint64_t owner, int max_run,
                                     int *at_cap);

/* The same for a semaphore's release of 'permits': reserves the first
 * waiter on 'channel' that waits for at most that many permits. */
dlock__waiter *dlock__pubsub_reserve_permits(dlock__pubsub *ps,
                                             const char *channel, size_t len,
                                             int64_t permits, int max_run,
                                             int *at_cap);

/* How a reservation ended. */
enum dlock__resolve {
  DLOCK__RESOLVE_HANDED,   /* the waiter holds the lock with the token
                              (a semaphore's waiter: its permits) */
  DLOCK__RESOLVE_FAILED,   /* the hand-over failed: it is woken to try */
  DLOCK__RESOLVE_RELEASED, /* released for every client after a run of
                              hand-overs; the unlock message wakes the
                              waiter like any other, and this client's
                              waiters hold back their next attempt for a
                              share of the run's time (reserve.c) */
  DLOCK__RESOLVE_YIELDED   /* ... and other clients listen: the hold-back
                              is also at least YIELD_US (reserve.c) */
};

/* Ends a reservation with 'outcome' (and 'token' when handed over). */
void dlock__pubsub_resolve(dlock__pubsub *ps, dlock__waiter *w, uint64_t token,
                           int outcome);

/* Leaves the channel; it is unsubscribed once nobody waits for a while. */
void dlock__pubsub_leave(dlock__pubsub *ps, dlock__waiter *w);

/*
 * Where a channel's subscription stands: NONE (not subscribed), SENT
 * (SUBSCRIBE sent, not confirmed), ACTIVE (confirmed) or LEAVING
 * (UNSUBSCRIBE sent, not confirmed). A channel with waiters is never left
 * in NONE while connected, and a waiter's join succeeds only in ACTIVE.
 */
enum dlock__sub_state {
  DLOCK__SUB_NONE,
  DLOCK__SUB_SENT,
  DLOCK__SUB_ACTIVE,
  DLOCK__SUB_LEAVING
};

/* The state of 'channel' and, in '*refs', how many waiters are on it; -1
 * when the client has no record of the channel. For tests and
 * diagnostics. */
int dlock__pubsub_state(dlock__pubsub *ps, const char *channel, size_t len,
                        int *refs);

/* 1 when the thread's last poll() included the connection's socket (it
 * reads the messages itself), 0 when it left the socket to a waiter. For
 * tests. */
/* How many waiters on 'channel' are asleep in dlock__pubsub_wait (for
 * tests, which must know that a waiter sleeps before they release). */
int dlock__pubsub_parked(dlock__pubsub *ps, const char *channel, size_t len);

int dlock__pubsub_thread_reads(dlock__pubsub *ps);

#endif
