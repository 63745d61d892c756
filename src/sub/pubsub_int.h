/*
 * What the pieces of the pub/sub layer share (see pubsub.h for what it
 * offers): the records of a subscription connection and of its channels,
 * and the calls between the files:
 *
 *   pubsub.c   the interface: each call goes to the connection that
 *              serves its channel or waiter
 *   shards.c   a cluster with sharded pub/sub: one connection per node,
 *              and waiters that follow their channel's slot
 *   pin.c      pinning a waiter for a releasing thread, and the slot a
 *              channel keeps for its user
 *   waiters.c  joining, waiting and leaving
 *   subconn.c  the connection and its thread: connecting, (re)subscribing
 *   subread.c  reading the connection and dispatching what it brings
 *   channels.c a channel's record, its line of waiters, and wake-ups
 *
 * each calling only those below it.
 *
 * Locking: 'mu' guards the channel list, the flags and every use of the
 * stream (src/link), which TLS requires too. Waiters talk to the thread
 * through the channel states and a self-pipe that wakes its poll().
 */
#ifndef DLOCK_PUBSUB_INT_H
#define DLOCK_PUBSUB_INT_H

#include "pubsub.h"

#include "link/stream.h"
#include "place.h"
#include "sentinel.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* A channel nobody waits on stays subscribed this long, so a lock that is
 * contended again and again does not pay SUBSCRIBE and UNSUBSCRIBE each
 * time. */
#define LINGER_US 500000
#define BACKOFF_FIRST_US 20000
#define BACKOFF_MAX_US 1000000

enum {
  SUB_NONE = DLOCK__SUB_NONE,
  SUB_SENT = DLOCK__SUB_SENT,
  SUB_ACTIVE = DLOCK__SUB_ACTIVE,
  SUB_LEAVING = DLOCK__SUB_LEAVING
};

struct dlock__sub {
  struct dlock__sub *next;
  struct dlock__pubsub *ps;
  char *name;
  size_t len;
  int refs;                   /* waiters that joined and have not left */
  dlock__waiter *head, *tail; /* ... in the order they joined */
  void *slot;  /* its user's, freed with it (dlock__pubsub_with_slot) */
  int state;   /* enum dlock__sub_state */
  int resync;  /* wake everyone once the subscription is back */
  int refused; /* Redis refused SUBSCRIBE (ACL): DLOCK_E* for joiners */
  /* Sharded pub/sub: the channel's slot is no longer this node's (Redis
   * said MOVED, or unsubscribed it when the slot moved away), or the
   * node's connection broke. It is not subscribed here again while its
   * waiters stay; each moves to the slot's master at its next wait. */
  int moved;
  dlock__wake_fn wake; /* how its messages wake waiters (NULL: the first) */
  char why[160];
  int64_t idle_since_us;
  pthread_cond_t ready; /* joiners waiting for the subscription */
};

struct dlock__pubsub {
  pthread_mutex_t mu;
  pthread_t thread;
  int pipe_fd[2];
  int reader_pipe[2];     /* wakes the waiter that is reading */
  dlock__waiter *reader;  /* the waiter reading the connection, or NULL */
  int waiting;            /* waiters on every channel */
  int thread_left_socket; /* the thread polls without the socket */
  const dlock__endpoint *ep;
  const dlock__tls *tls; /* for a rediss:// endpoint, else NULL */
  /* Where it connects: 'ep', the master the Sentinels name ('gen' the
   * generation of the master 'ctx' reaches), or a cluster's nodes, tried
   * in turn from 'node' (the last that worked). */
  dlock__place place;
  int node;
  unsigned gen;
  int64_t connect_timeout_ms, command_timeout_ms;
  dlock__sub *subs;
  /* How many channels 'subs' holds, readable without 'mu': most attempts
   * happen when there are none, and then need not take the mutex. */
  atomic_int nsubs;
  dlock__stream *ctx; /* the thread's */
  int connected;
  int stopping;
  int canceled;
  int64_t retry_at_us, backoff_us;
  int64_t connected_us; /* when the current connection was made */
  /* A connection to one cluster node that subscribes with SSUBSCRIBE. */
  int sharded;
  /* A client of a cluster with sharded pub/sub has no connection of its
   * own: 'shards' (one per node index, made at the first waiter for a
   * slot of that node, under 'mu') hold the subscriptions, and every call
   * goes to the shard of its channel or waiter. NULL otherwise. */
  dlock__pubsub **shards;
  /* The client's statistics (dlock__pubsub_set_stats), or NULL. */
  _Atomic(dlock__stats *) stats;
};

/* The statistics 'ps' counts in, or NULL. */
static inline dlock__stats *dlock__sub_stats(dlock__pubsub *ps) {
  return atomic_load_explicit(&ps->stats, memory_order_acquire);
}

/* ---- channels.c ---------------------------------------------------------- */

dlock__sub *dlock__sub_find(dlock__pubsub *ps, const char *name, size_t len);
/* A record for channel 'name' of 'ps', not yet in its list; NULL when out
 * of memory. */
dlock__sub *dlock__sub_new(dlock__pubsub *ps, const char *name, size_t len);
void dlock__sub_free(dlock__sub *s);
void dlock__sub_check_locked(const dlock__pubsub *ps, const dlock__sub *s);
/* Writes a byte to a self-pipe, and empties one. */
void dlock__sub_poke(int fd);
void dlock__sub_drain_pipe(int fd);
/* Wakes the connection's thread out of its poll(). */
void dlock__sub_poke_thread(dlock__pubsub *ps);
void dlock__sub_wake_locked(dlock__waiter *w);
void dlock__sub_wake_all_locked(dlock__sub *s);
void dlock__sub_wake_one_locked(dlock__sub *s, uint64_t value);
void dlock__sub_wake_n_locked(dlock__sub *s, int64_t n);
void dlock__sub_enqueue_locked(dlock__sub *s, dlock__waiter *w);
int dlock__sub_dequeue_locked(dlock__pubsub *ps, dlock__waiter *w);

/* ---- subread.c ----------------------------------------------------------- */

/* The connection is gone: every channel is to be subscribed again, after
 * a backoff. */
void dlock__sub_on_disconnect_locked(dlock__pubsub *ps);
void dlock__sub_read_replies_locked(dlock__pubsub *ps);
void dlock__sub_read_stale_locked(dlock__pubsub *ps);
void dlock__sub_read_as_waiter_locked(dlock__pubsub *ps, dlock__waiter *w,
                                      int64_t until_us);

/* ---- subconn.c ----------------------------------------------------------- */

/* A record with its settings and its mutex, and nothing else started; NULL
 * when out of memory. */
dlock__pubsub *dlock__subconn_new(const dlock__endpoint *ep,
                                  const dlock__tls *tls,
                                  struct dlock__sentinel *sentinel,
                                  struct dlock__cluster *cluster,
                                  int64_t connect_timeout_ms,
                                  int64_t command_timeout_ms);
/* Closes the pipes 'ps' has, destroys its mutex and frees it. */
void dlock__subconn_free(dlock__pubsub *ps);
/* One connection and its thread: to 'ep', the master 'sentinel' names, or
 * any node of 'cluster' ('sharded': the one node 'ep', subscribing with
 * SSUBSCRIBE). See dlock__pubsub_start. */
int dlock__subconn_start(const dlock__endpoint *ep, const dlock__tls *tls,
                         struct dlock__sentinel *sentinel,
                         struct dlock__cluster *cluster, int sharded,
                         int64_t connect_timeout_ms, int64_t command_timeout_ms,
                         int lazy, int64_t open_deadline_us,
                         dlock__pubsub **out);
/* dlock__pubsub_stop and dlock__pubsub_forget for one connection. */
void dlock__subconn_stop(dlock__pubsub *ps);
int dlock__subconn_forget(dlock__pubsub *ps);

/* ---- waiters.c ----------------------------------------------------------- */

/* dlock__pubsub_join_as, dlock__pubsub_join_active, dlock__pubsub_wait and
 * dlock__pubsub_cancel on one connection. */
int dlock__sub_join(dlock__pubsub *ps, const char *channel, size_t len,
                    int64_t deadline_us, dlock__waiter *w, dlock__wake_fn wake);
int dlock__sub_join_active(dlock__pubsub *ps, const char *channel, size_t len,
                           dlock__waiter *w, int *others);
int dlock__sub_wait(dlock__pubsub *ps, dlock__waiter *w, int64_t until_us);
void dlock__sub_cancel(dlock__pubsub *ps);

/* ---- shards.c ------------------------------------------------------------ */

/* The sharded client of 'cluster': no connection until the first join. */
int dlock__shards_start(const dlock__tls *tls, struct dlock__cluster *cluster,
                        int64_t connect_timeout_ms, int64_t command_timeout_ms,
                        dlock__pubsub **out);
/* The connection that serves 'channel': 'ps' itself, or for a sharded
 * client the shard of the master of the channel's slot, started when
 * 'make' is set and it has none yet. NULL with a code in '*rc' when there
 * is none. */
dlock__pubsub *dlock__shards_route(dlock__pubsub *ps, const char *channel,
                                   size_t len, int make, int *rc);
void dlock__shards_follow(dlock__pubsub *ps, dlock__waiter *w,
                          int64_t until_us);
void dlock__shards_cancel(dlock__pubsub *ps);
void dlock__shards_stop(dlock__pubsub *ps);
int dlock__shards_forget(dlock__pubsub *ps);

#endif
