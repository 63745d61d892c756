/*
 * Unlock notifications. Each client keeps one pub/sub connection, served by
 * its own thread. Waiters join a channel (shared by every waiter of the
 * client on that channel), sleep until a message or a deadline, and leave.
 * What a message does to the waiters is the channel's decoder's to say
 * (dlock__wake_fn): pub/sub knows channels and waiters, and what a lock,
 * a semaphore or a latch means by its messages is the engine's.
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
#include "stats.h"
#include "url.h"

#include <pthread.h>

struct dlock__sentinel;
struct dlock__cluster;

typedef struct dlock__pubsub dlock__pubsub;
typedef struct dlock__sub dlock__sub;

/*
 * One thread waiting on a channel, on the caller's stack from join to
 * leave. A client's waiters on a channel form a queue in the order they
 * joined: a message that wakes one wakes the first one that has no wake-up
 * yet, and a waiter keeps its place across attempts until it leaves. So a
 * process's threads take turns, and a thread that has just released cannot
 * take the wake-up meant for one that was waiting already.
 */
typedef struct dlock__waiter {
  struct dlock__waiter *next;
  dlock__sub *sub;
  pthread_cond_t cv;
  int permit;  /* woken and not yet taken */
  int reading; /* reading the connection itself, in ppoll (see subread.c) */
  /* What the wake-up carried: a value a message's decoder gave
   * (DLOCK__WAKE_FIRST) or dlock__pubsub_unpin; 0 when none. It is
   * pub/sub's until the waiter takes the wake-up: dlock__pubsub_wait then
   * moves it to 'taken' and clears it, since a later wake-up (another
   * waiter's leave hands its own on) may write here meanwhile. */
  uint64_t value;
  /* The value the last wake-up taken carried (dlock__pubsub_wait returned
   * 2): the waiter's own. */
  uint64_t taken;
  /* Set by the joiner before it joins, and never read by pub/sub: what a
   * releasing thread's 'eligible' (dlock__pubsub_pin_first) needs to know
   * of the waiter; NULL for one that no release chooses. */
  void *owner_data;
  int parked; /* inside dlock__pubsub_wait, making no attempt of its own */
  int pinned; /* chosen by dlock__pubsub_pin_first, until unpinned */
  /* ... and stays in dlock__pubsub_wait until then, even when woken. */
  int pin_holds;
} dlock__waiter;

/*
 * What a message does to the waiters of its channel, as the channel's
 * decoder says: wakes nobody, every waiter, the first in line that is not
 * awake (handing it 'value', or 0), or up to 'count' of those that are not
 * awake and not pinned, first in line first.
 */
enum dlock__wake_how {
  DLOCK__WAKE_NONE,
  DLOCK__WAKE_ALL,
  DLOCK__WAKE_FIRST,
  DLOCK__WAKE_SOME
};

typedef struct dlock__wakeup {
  int how;        /* enum dlock__wake_how */
  int64_t count;  /* DLOCK__WAKE_SOME: how many */
  uint64_t value; /* DLOCK__WAKE_FIRST: what the wake-up carries */
} dlock__wakeup;

/* Decodes a message of a channel: 'msg' and 'len' are its bytes (NULL and
 * 0 for one that is not a string). Called with the connection's mutex
 * held, so it only looks at the message. */
typedef dlock__wakeup (*dlock__wake_fn)(const char *msg, size_t len);

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

/* Counts the messages 'ps' reads in 'st' (NULL: none), from now on. */
void dlock__pubsub_set_stats(dlock__pubsub *ps, dlock__stats *st);

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

/* dlock__pubsub_join for a channel whose messages 'wake' decodes (NULL:
 * every message wakes the first waiter that is not awake, with no value,
 * as for dlock__pubsub_join). Each channel name belongs to one kind of
 * object, so every waiter on it passes the same. */
int dlock__pubsub_join_as(dlock__pubsub *ps, const char *channel, size_t len,
                          int64_t deadline_us, dlock__waiter *w,
                          dlock__wake_fn wake);

/*
 * Joins 'channel' only if this client is already subscribed to it (a
 * waiter of the lock is there, or was a moment ago), which costs no round
 * trip. Returns 1 when joined, with '*others' set to the number of this
 * client's waiters already on it, and 0 when not joined. A waiter that
 * joins before its first attempt cannot miss an unlock that follows it.
 */
int dlock__pubsub_join_active(dlock__pubsub *ps, const char *channel,
                              size_t len, dlock__waiter *w, int *others);

/* Hands a wake-up on to the first other waiter in line that is not
 * awake: for a waiter that was woken but could not use its wake-up (it
 * needs more permits than are free), so that one that needs fewer tries. */
void dlock__pubsub_pass(dlock__pubsub *ps, dlock__waiter *w);

/* Sleeps until a wake-up (returns 1, or 2 when it carried a value, then
 * in dlock__waiter.taken), 'until_us' (0), or cancellation. A pinned waiter
 * stays until it is unpinned, whatever 'until_us'. */
int dlock__pubsub_wait(dlock__pubsub *ps, dlock__waiter *w, int64_t until_us);

/*
 * For a releasing thread of this client: pins the first waiter on
 * 'channel' that is not awake, not pinned already and 'eligible', so that
 * it stays (in dlock__pubsub_wait, or dlock__pubsub_leave) until
 * dlock__pubsub_unpin; with 'holds', it stays in its wait even when a
 * message wakes it meanwhile. Then, when the client has a record of the
 * channel, 'note' is told (with the connection's mutex still held) the
 * channel's slot (see dlock__pubsub_with_slot) and the waiter pinned, or
 * NULL; when it returns other than 0, the waiter is not pinned after all.
 * 'eligible' and 'note' are called under the mutex and must not call
 * pub/sub. Returns the waiter pinned, or NULL.
 */
typedef int (*dlock__pin_eligible_fn)(const dlock__waiter *w, void *arg);
typedef int (*dlock__pin_note_fn)(void **slot, dlock__waiter *pinned,
                                  void *arg);
dlock__waiter *dlock__pubsub_pin_first(dlock__pubsub *ps, const char *channel,
                                       size_t len, int holds,
                                       dlock__pin_eligible_fn eligible,
                                       dlock__pin_note_fn note, void *arg);

/* Ends the pin of 'w': first runs 'fn' on its channel's slot (NULL:
 * nothing), then with 'wake' wakes it with 'value' (see
 * dlock__waiter.value), and without it only has it look again (a message
 * wakes it, or its time runs out). */
typedef void (*dlock__slot_fn)(void **slot, void *arg);
void dlock__pubsub_unpin(dlock__pubsub *ps, dlock__waiter *w, int wake,
                         uint64_t value, dlock__slot_fn fn, void *arg);

/*
 * Runs 'fn' on the slot of the channel 'w' waits on, with the connection's
 * mutex held: a pointer that pub/sub keeps with the channel's record for
 * whoever uses the channel, and never reads. It is NULL until 'fn' sets it
 * to a block from dlock__calloc, which is freed with the record (once
 * nobody waits on the channel for a while; a waiter that follows its
 * channel to another node of a cluster finds a new one there).
 */
void dlock__pubsub_with_slot(dlock__pubsub *ps, dlock__waiter *w,
                             dlock__slot_fn fn, void *arg);

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
