/*
 * The pub/sub connection and its thread (see pubsub.h).
 *
 * Locking: 'mu' guards the channel list, the flags and every use of the
 * stream (src/link), which TLS requires too. Waiters talk to the thread through
 * the channel states and a self-pipe that wakes its poll().
 *
 * Reading: a waiter that goes to sleep while nobody else reads the
 * connection reads it itself (it becomes the "reader", polling the socket
 * instead of sleeping on its condition variable), and the thread leaves
 * the socket alone meanwhile. The message that wakes the reader then
 * reaches it without a hand-off from another thread, which on a busy
 * machine costs as much as a round trip. Waiters that are not the reader
 * are woken by whoever read their message; the reader itself is woken
 * through a second pipe when someone else wakes it (a resubscription, a
 * cancellation).
 */
#define _GNU_SOURCE
#include "pubsub.h"
#include "alloc.h"

#include "conn.h"
#include "error.h"
#include "link/stream.h"
#include "monotime.h"
#include "proto/slot.h"
#include "sentinel.h"
#include "topo/cluster.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <hiredis/sds.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A channel nobody waits on stays subscribed this long, so a lock that is
 * contended again and again does not pay SUBSCRIBE and UNSUBSCRIBE each
 * time. */
#define LINGER_US 500000
#define BACKOFF_FIRST_US 20000
#define BACKOFF_MAX_US 1000000
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
/* How often a reserved waiter looks again whether its reservation ended
 * (it is woken when it does; this only bounds a missed wake-up). */
#define RESERVED_RECHECK_US 100000

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
  int refs; /* waiters that joined and have not left */
  /* Of the attempts that followed an unlock message, the share that failed,
   * in thousandths (a moving average over about the last eight). */
  int failed_permille;
  int handover_run;           /* hand-overs inside the client in a row */
  int64_t run_started_us;     /* ... since the first of them */
  int64_t yield_until_us;     /* see YIELD_US, RUN_SHARE_DIVISOR */
  dlock__waiter *head, *tail; /* ... in the order they joined */
  int state;                  /* enum dlock__sub_state */
  int resync;                 /* wake everyone once the subscription is back */
  int refused; /* Redis refused SUBSCRIBE (ACL): DLOCK_E* for joiners */
  /* Sharded pub/sub: the channel's slot is no longer this node's (Redis
   * said MOVED, or unsubscribed it when the slot moved away), or the
   * node's connection broke. It is not subscribed here again while its
   * waiters stay; each moves to the slot's master at its next wait. */
  int moved;
  int wake; /* enum dlock__wake: how its messages wake waiters */
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
  /* For a redis-sentinel:// URL, where the master is found, and the
   * generation of the master 'ctx' reaches; else NULL. */
  dlock__sentinel *sentinel;
  /* For a redis-cluster:// URL, the nodes tried in turn from 'node' (the
   * last that worked), else NULL. */
  struct dlock__cluster *cluster;
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
};

/* See dlock__cluster_nnodes: a node index is below this. */
#define SHARDS_MAX 512

static void init_monotonic_cond(pthread_cond_t *cv) {
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(cv, &attr);
  pthread_condattr_destroy(&attr);
}

static void poke(int fd);

static void poke_thread(dlock__pubsub *ps) { poke(ps->pipe_fd[1]); }

static dlock__sub *find_sub(dlock__pubsub *ps, const char *name, size_t len) {
  for (dlock__sub *s = ps->subs; s != NULL; s = s->next)
    if (s->len == len && memcmp(s->name, name, len) == 0)
      return s;
  return NULL;
}

/*
 * The invariants of a channel's record, checked where it changes (compiled
 * out with NDEBUG). Its waiters form a list of 'refs' entries that all
 * point back at it; a state other than NONE means a command or a
 * subscription on the current connection, so there is none without one.
 * LEAVING may have waiters: they joined after the UNSUBSCRIBE was sent, and
 * the channel is subscribed again once its reply is in.
 */
static void check_sub_locked(const dlock__pubsub *ps, const dlock__sub *s) {
#ifndef NDEBUG
  int n = 0;
  const dlock__waiter *last = NULL;
  for (const dlock__waiter *w = s->head; w != NULL; w = w->next) {
    assert(w->sub == s);
    last = w;
    n++;
  }
  assert(s->tail == last);
  assert(n == s->refs);
  assert(s->state >= SUB_NONE && s->state <= SUB_LEAVING);
  assert(ps->connected || s->state == SUB_NONE);
  assert(ps->reader == NULL || ps->reader->reading);
#else
  (void)ps;
  (void)s;
#endif
}

static void free_sub(dlock__sub *s) {
  pthread_cond_destroy(&s->ready);
  dlock__free(s->name);
  dlock__free(s);
}

static void poke(int fd) {
  char b = 1;
  /* A full pipe already guarantees a wake-up, so EAGAIN is fine. */
  ssize_t n = write(fd, &b, 1);
  (void)n;
}

static void wake_locked(dlock__waiter *w) {
  w->permit = 1;
  if (w->reading)
    poke(w->sub->ps->reader_pipe[1]);
  else
    pthread_cond_signal(&w->cv);
}

/* Gives every waiter of 's' a reason to try again. */
static void wake_all_locked(dlock__sub *s) {
  for (dlock__waiter *w = s->head; w != NULL; w = w->next)
    wake_locked(w);
}

/* Wakes the first waiter in line that is not awake already, handing it
 * 'grant' (a token, or 0). */
static void wake_one_locked(dlock__sub *s, uint64_t grant) {
  for (dlock__waiter *w = s->head; w != NULL; w = w->next)
    if (!w->permit) {
      w->grant = grant;
      wake_locked(w);
      return;
    }
  /* Everyone is awake already. A hand-over is still kept: it comes on its
   * owner's own channel, where that owner is the one waiter, and a newer
   * one replaces an older that the waiter has not taken (which may be
   * stale: see dlock__busy). */
  if (grant != 0 && s->head != NULL && s->head->grant < grant)
    s->head->grant = grant;
}

/* Wakes up to 'n' waiters of 's' that are not awake already, first in
 * line first. A waiter reserved for a hand-over is skipped: it is told its
 * own outcome, and the permits this message announces are for others. */
static void wake_n_locked(dlock__sub *s, int64_t n) {
  for (dlock__waiter *w = s->head; w != NULL && n > 0; w = w->next)
    if (!w->permit && !w->reserved) {
      wake_locked(w);
      n--;
    }
}

/* The number a message of a counted channel carries (a semaphore's free
 * permits): 1 for one that is not a number, so that a message of an
 * unknown form still wakes someone. */
static int64_t count_of(const redisReply *r) {
  if (r->type != REDIS_REPLY_STRING || r->len == 0 || r->len > 18)
    return 1;
  int64_t n = 0;
  size_t i = r->str[0] == '-' ? 1 : 0;
  if (i == r->len)
    return 1;
  for (; i < r->len; i++) {
    if (r->str[i] < '0' || r->str[i] > '9')
      return 1;
    n = n * 10 + (r->str[i] - '0');
  }
  return r->str[0] == '-' ? -n : n;
}

/* The token of a "grant:<token>" message, or 0 for any other message. */
static uint64_t grant_of(const redisReply *r) {
  static const char prefix[] = "grant:";
  size_t n = sizeof(prefix) - 1;
  if (r->type != REDIS_REPLY_STRING || r->len <= n || r->len > n + 20 ||
      memcmp(r->str, prefix, n) != 0)
    return 0;
  uint64_t token = 0;
  for (size_t i = n; i < r->len; i++) {
    if (r->str[i] < '0' || r->str[i] > '9')
      return 0;
    token = token * 10 + (uint64_t)(r->str[i] - '0');
  }
  return token;
}

/* ---- the thread -----------------------------------------------------------
 */

static void on_disconnect_locked(dlock__pubsub *ps) {
  int64_t now = dlock__now_us();
  /* A connection that worked for a while ends a run of failures: the next
   * attempt comes at once. One that breaks soon after it was made (a server
   * that completes the handshake, then hangs up or answers SUBSCRIBE out of
   * step) counts as one more failure, so that such a server is not
   * connected to again and again in a tight loop. */
  if (ps->connected && now - ps->connected_us >= BACKOFF_MAX_US)
    ps->backoff_us = 0;
  if (ps->ctx != NULL) {
    dlock__stream_free(ps->ctx);
    ps->ctx = NULL;
  }
  ps->connected = 0;
  /* A waiter polling the socket just closed would never hear of it. */
  if (ps->reader != NULL)
    poke(ps->reader_pipe[1]);
  ps->retry_at_us = now + ps->backoff_us;
  ps->backoff_us = ps->backoff_us ? ps->backoff_us * 2 : BACKOFF_FIRST_US;
  if (ps->backoff_us > BACKOFF_MAX_US)
    ps->backoff_us = BACKOFF_MAX_US;
  for (dlock__sub *s = ps->subs; s != NULL; s = s->next) {
    s->state = SUB_NONE;
    s->resync = 1;
    /* The node may have failed for good (a failover): the waiters look
     * the slot's master up again and subscribe there. */
    if (ps->sharded && s->refs > 0) {
      s->moved = 1;
      wake_all_locked(s);
    }
    pthread_cond_broadcast(&s->ready);
    check_sub_locked(ps, s);
  }
}

/* Asked by a reconnect when the thread's pipe is poked: a stop ends it at
 * once rather than after the server's answer or the timeouts. Any other
 * poke (a new subscription) is taken care of once the connect is done,
 * since the loop then looks at every channel anyway. */
static int stop_requested(void *arg) {
  dlock__pubsub *ps = arg;
  pthread_mutex_lock(&ps->mu);
  int stop = ps->stopping;
  pthread_mutex_unlock(&ps->mu);
  return stop;
}

/* A stream to the server, or to the master a Sentinel names; 'cancel_fd'
 * (-1: none) ends a plain connect at once when a stop is requested. */
static int open_stream(dlock__pubsub *ps, int cancel_fd, dlock__stream **out,
                       unsigned *gen) {
  *gen = 0;
  if (ps->sentinel != NULL) {
    dlock__cancel stop = {cancel_fd, cancel_fd >= 0 ? stop_requested : NULL,
                          ps};
    return dlock__sentinel_open(ps->sentinel, INT64_MAX, &stop, out, gen);
  }
  if (ps->cluster != NULL) {
    /* Any node will do: the first that answers, from the last that did. */
    int n = dlock__cluster_nnodes(ps->cluster), rc = DLOCK_EIO;
    for (int k = 0; k < n && rc != 0; k++) {
      int i = (ps->node + k) % n;
      rc = dlock__stream_open(dlock__cluster_node_ep(ps->cluster, i), ps->tls,
                              ps->connect_timeout_ms, ps->command_timeout_ms,
                              cancel_fd, cancel_fd >= 0 ? stop_requested : NULL,
                              ps, out);
      if (rc == 0)
        ps->node = i;
      if (cancel_fd >= 0 && stop_requested(ps))
        break;
    }
    return rc;
  }
  return dlock__stream_open(ps->ep, ps->tls, ps->connect_timeout_ms,
                            ps->command_timeout_ms, cancel_fd,
                            cancel_fd >= 0 ? stop_requested : NULL, ps, out);
}

static void try_connect_locked(dlock__pubsub *ps) {
  if (ps->connected || dlock__now_us() < ps->retry_at_us)
    return;
  pthread_mutex_unlock(&ps->mu);
  dlock__stream *ctx = NULL;
  unsigned gen = 0;
  int rc = open_stream(ps, ps->pipe_fd[0], &ctx, &gen);
  pthread_mutex_lock(&ps->mu);
  if (rc != 0) {
    on_disconnect_locked(ps);
    return;
  }
  ps->ctx = ctx;
  ps->gen = gen;
  ps->connected = 1;
  ps->connected_us = dlock__now_us();
}

/* Appends one SUBSCRIBE or UNSUBSCRIBE for every channel in 'from'. */
static int append_batch(dlock__stream *ctx, const char *verb, int n,
                        const char **argv, size_t *lens) {
  argv[0] = verb;
  lens[0] = strlen(verb);
  return n > 0 ? dlock__stream_append_argv(ctx, n + 1, argv, lens) : 0;
}

/* Brings the server's subscriptions in line with the waiters and returns
 * the next time something is due (linger expiry), or 0. */
static int64_t sync_subscriptions_locked(dlock__pubsub *ps) {
  int64_t now = dlock__now_us(), next_due = 0;
  size_t total = 0;
  for (dlock__sub *s = ps->subs; s != NULL; s = s->next)
    total++;
  const char **sub_argv = dlock__malloc((total + 1) * sizeof(*sub_argv));
  size_t *sub_lens = dlock__malloc((total + 1) * sizeof(*sub_lens));
  const char **uns_argv = dlock__malloc((total + 1) * sizeof(*uns_argv));
  size_t *uns_lens = dlock__malloc((total + 1) * sizeof(*uns_lens));
  int nsub = 0, nuns = 0;
  for (dlock__sub **p = &ps->subs; *p != NULL;) {
    dlock__sub *s = *p;
    if (s->refs == 0 && s->state == SUB_NONE) {
      *p = s->next;
      free_sub(s);
      atomic_fetch_sub(&ps->nsubs, 1);
      continue;
    }
    p = &s->next;
    if (!ps->connected || sub_argv == NULL || sub_lens == NULL ||
        uns_argv == NULL || uns_lens == NULL)
      continue;
    if (s->refs > 0 && s->state == SUB_NONE && !s->refused && !s->moved) {
      sub_argv[1 + nsub] = s->name;
      sub_lens[1 + nsub++] = s->len;
      s->state = SUB_SENT;
    } else if (s->refs > 0 && s->state == SUB_ACTIVE) {
      /* Its last waiter leaves without waking the thread: the thread
       * looks again within LINGER_US, in time for the channel's linger,
       * which counts from the leave. */
      if (next_due == 0 || now + LINGER_US < next_due)
        next_due = now + LINGER_US;
    } else if (s->refs == 0 && s->state == SUB_ACTIVE) {
      int64_t due = s->idle_since_us + LINGER_US;
      if (due <= now) {
        uns_argv[1 + nuns] = s->name;
        uns_lens[1 + nuns++] = s->len;
        s->state = SUB_LEAVING;
      } else if (next_due == 0 || due < next_due) {
        next_due = due;
      }
    }
  }
  if (ps->connected && sub_argv != NULL && sub_lens != NULL &&
      uns_argv != NULL && uns_lens != NULL) {
    int bad = 0;
    if (ps->sharded) {
      /* SSUBSCRIBE takes the channels of one slot only: one each. Each
       * command's verb goes over the previous one's channel, which is
       * written out already. */
      for (int i = 0; i < nsub && !bad; i++)
        bad = append_batch(ps->ctx, "SSUBSCRIBE", 1, &sub_argv[i],
                           &sub_lens[i]) != 0;
      for (int i = 0; i < nuns && !bad; i++)
        bad = append_batch(ps->ctx, "SUNSUBSCRIBE", 1, &uns_argv[i],
                           &uns_lens[i]) != 0;
    } else {
      bad = append_batch(ps->ctx, "SUBSCRIBE", nsub, sub_argv, sub_lens) != 0 ||
            append_batch(ps->ctx, "UNSUBSCRIBE", nuns, uns_argv, uns_lens) != 0;
    }
    if (bad)
      on_disconnect_locked(ps);
#ifndef NDEBUG
    /* Every channel with waiters is subscribed, or on its way to be (a
     * LEAVING one once its UNSUBSCRIBE is answered), or was refused. */
    int waiting = 0;
    for (dlock__sub *s = ps->subs; s != NULL; s = s->next) {
      check_sub_locked(ps, s);
      assert(!ps->connected || s->refs == 0 || s->refused || s->moved ||
             s->state != SUB_NONE);
      waiting += s->refs;
    }
    assert(waiting == ps->waiting);
#endif
  } else if (ps->connected) {
    next_due = now + 10000; /* out of memory: try again shortly */
  }
  dlock__free((void *)sub_argv);
  dlock__free(sub_lens);
  dlock__free((void *)uns_argv);
  dlock__free(uns_lens);
  return next_due;
}

static int is_str(const redisReply *r, const char *s) {
  return (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) &&
         r->len == strlen(s) && memcmp(r->str, s, r->len) == 0;
}

/* An error reply answers the SUBSCRIBE in flight (a user without the
 * permission): its joiners are told, and it is not sent again while they
 * wait. */
static void refuse_pending_locked(dlock__pubsub *ps, const redisReply *r) {
  /* A node that does not own the slot (any more) answers SSUBSCRIBE with
   * MOVED: the channel's waiters are woken to try and then move (see
   * dlock__sub.moved). Mid-migration (ASK, TRYAGAIN) or without a
   * working cluster (CLUSTERDOWN) they are not woken, which would have
   * them ask the same node again and again: they sleep by the lock's TTL
   * and move then. */
  int moved = ps->sharded && r->len >= 5 && memcmp(r->str, "MOVED", 5) == 0;
  int elsewhere =
      moved || (ps->sharded &&
                ((r->len >= 3 && memcmp(r->str, "ASK", 3) == 0) ||
                 (r->len >= 8 && memcmp(r->str, "TRYAGAIN", 8) == 0) ||
                 (r->len >= 11 && memcmp(r->str, "CLUSTERDOWN", 11) == 0)));
  for (dlock__sub *s = ps->subs; s != NULL; s = s->next) {
    if (s->state != SUB_SENT)
      continue;
    s->state = SUB_NONE;
    if (elsewhere) {
      s->moved = 1;
      if (moved)
        wake_all_locked(s);
      pthread_cond_broadcast(&s->ready);
      continue;
    }
    s->refused = dlock__fail_reply(r->str, r->len);
    snprintf(s->why, sizeof(s->why), "SUBSCRIBE refused: %.120s", r->str);
    pthread_cond_broadcast(&s->ready);
  }
}

/* Handles one reply or message. Returns -1 when it cannot answer anything
 * this client sent (the stream is out of step): the connection is then
 * dropped and every subscription made again. */
static int handle_reply_locked(dlock__pubsub *ps, const redisReply *r) {
  if (r->type == REDIS_REPLY_ERROR) {
    refuse_pending_locked(ps, r);
    return 0;
  }
  /* Every other reply on a subscribed connection is a pub/sub frame that
   * names its channel. An integer, a string, a nil or a short array answers
   * nothing this client sent (a server or proxy in the wrong state): the
   * stream is out of step, and the server's subscriptions may not be what
   * this client thinks they are. */
  if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 ||
      r->element[1]->type != REDIS_REPLY_STRING)
    return -1;
  const redisReply *kind = r->element[0], *chan = r->element[1];
  dlock__sub *s = find_sub(ps, chan->str, chan->len);
  if (s == NULL)
    return 0;
  if (ps->sharded) {
    /* Sharded pub/sub names its frames with an 's' in front. */
    if (kind->type != REDIS_REPLY_STRING || kind->len < 2 ||
        kind->str[0] != 's')
      return -1;
    static const redisReply plain[3] = {
        {.type = REDIS_REPLY_STRING, .str = (char *)"message", .len = 7},
        {.type = REDIS_REPLY_STRING, .str = (char *)"subscribe", .len = 9},
        {.type = REDIS_REPLY_STRING, .str = (char *)"unsubscribe", .len = 11}};
    const redisReply *k = NULL;
    for (int i = 0; i < 3 && k == NULL; i++)
      if (kind->len == plain[i].len + 1 &&
          memcmp(kind->str + 1, plain[i].str, plain[i].len) == 0)
        k = &plain[i];
    if (k == NULL)
      return -1;
    kind = k;
    /* An SUNSUBSCRIBE this client did not send: Redis drops a sharded
     * subscription when its slot moves to another node. */
    if (kind == &plain[2] && s->state != SUB_LEAVING) {
      s->state = SUB_NONE;
      s->moved = 1;
      wake_all_locked(s);
      pthread_cond_broadcast(&s->ready);
      check_sub_locked(ps, s);
      return 0;
    }
  }
  if (is_str(kind, "message") && s->wake == DLOCK__WAKE_COUNT) {
    /* A semaphore's release announces the free permits: that many
     * waiters may succeed, and no more. */
    wake_n_locked(s, count_of(r->element[2]));
  } else if (is_str(kind, "message") && s->wake == DLOCK__WAKE_LATCH) {
    /* A latch at zero opens for everyone; "1" (a new count) closes it,
     * which a waiter finds out by looking. */
    if (is_str(r->element[2], "0"))
      wake_all_locked(s);
  } else if (is_str(kind, "message")) {
    if (is_str(r->element[2], "1"))
      wake_all_locked(s);
    else
      wake_one_locked(s, grant_of(r->element[2]));
  } else if (is_str(kind, "subscribe")) {
    /* SENT, or NONE after a refusal of another SUBSCRIBE in flight: Redis
     * says it is subscribed, and it is (the linger drops it if nobody
     * waits). A confirmation while ACTIVE or LEAVING answers nothing sent:
     * a SUBSCRIBE is only ever sent from NONE. */
    if (s->state == SUB_ACTIVE || s->state == SUB_LEAVING)
      return -1;
    s->state = SUB_ACTIVE;
    pthread_cond_broadcast(&s->ready);
    if (s->resync) {
      s->resync = 0;
      wake_all_locked(s);
    }
  } else if (is_str(kind, "unsubscribe")) {
    if (s->state != SUB_LEAVING)
      return -1;
    s->state = SUB_NONE;
    /* Waiters that joined while the UNSUBSCRIBE was on its way need the
     * channel again, and one that nobody needs is to be forgotten: either
     * way the thread has work, and it may be asleep in poll() while a
     * waiter reads the connection, so it is told. */
    if (!pthread_equal(pthread_self(), ps->thread))
      poke_thread(ps);
  }
  check_sub_locked(ps, s);
  return 0;
}

static void read_replies_locked(dlock__pubsub *ps) {
  if (dlock__stream_read(ps->ctx) != 0) {
    on_disconnect_locked(ps);
    return;
  }
  for (;;) {
    void *reply = NULL;
    if (dlock__stream_reply(ps->ctx, &reply) != 0) {
      on_disconnect_locked(ps);
      return;
    }
    if (reply == NULL)
      return;
    int rc = handle_reply_locked(ps, reply);
    freeReplyObject(reply);
    if (rc != 0) {
      on_disconnect_locked(ps);
      return;
    }
  }
}

/* Whether Redis owes this client the answer to a SUBSCRIBE or an
 * UNSUBSCRIBE. */
static int replies_due_locked(const dlock__pubsub *ps) {
  for (const dlock__sub *s = ps->subs; s != NULL; s = s->next)
    if (s->state == SUB_SENT || s->state == SUB_LEAVING)
      return 1;
  return 0;
}

/*
 * Reads what has arrived while nobody read the connection (the thread
 * leaves it alone while nobody waits), before a waiter joins: those
 * messages were sent before the waiter's first attempt, so they are news
 * to nobody, and must not wake it for an attempt bound to fail. Reading
 * happens under 'mu' only, whoever reads, so this is safe whether or not
 * a reader or the thread polls the socket; it is skipped when either
 * does, as then nothing is left unread for long.
 */
static void read_stale_locked(dlock__pubsub *ps) {
  if (!ps->thread_left_socket || ps->reader != NULL || !ps->connected ||
      ps->ctx == NULL)
    return;
  read_replies_locked(ps);
  /* The connection broke: the thread, polling without it, reconnects. */
  if (!ps->connected)
    poke_thread(ps);
}

static void drain_pipe(int fd) {
  char buf[64];
  while (read(fd, buf, sizeof(buf)) > 0) {
  }
}

static void *pubsub_main(void *arg) {
  dlock__pubsub *ps = arg;
  pthread_mutex_lock(&ps->mu);
  while (!ps->stopping) {
    /* The master moved: the subscriptions follow it at once (unlocks are
     * published there now), without waiting for the old one to go. */
    if (ps->connected && ps->sentinel != NULL &&
        ps->gen != dlock__sentinel_gen(ps->sentinel)) {
      on_disconnect_locked(ps);
      ps->retry_at_us = 0;
    }
    try_connect_locked(ps);
    int64_t due = sync_subscriptions_locked(ps);
    if (!ps->connected && (due == 0 || ps->retry_at_us < due))
      due = ps->retry_at_us;
    struct pollfd p[2] = {{.fd = ps->pipe_fd[0], .events = POLLIN},
                          {.fd = -1, .events = POLLIN}};
    if (ps->connected) {
      int done = 0;
      if (dlock__stream_flush(ps->ctx, &done) != 0) {
        on_disconnect_locked(ps);
        continue;
      }
      /* A waiter reading the socket gets the replies; the thread still
       * writes what is pending. With nobody waiting and no reply due, the
       * socket is left alone too: the messages then are of lingering
       * channels, for nobody, and the unlock a process publishes itself
       * would otherwise wake its own thread just as the process it is
       * meant for has to run. They are read later, by the thread once
       * a reply is due or a waiter waits, or by the next joiner (see
       * read_stale_locked). */
      p[1].fd = dlock__stream_fd(ps->ctx);
      int reads =
          ps->reader == NULL && (ps->waiting > 0 || replies_due_locked(ps));
      p[1].events = reads ? POLLIN : 0;
      if (!done)
        p[1].events |= POLLOUT;
#ifdef POLLRDHUP
      /* Unread, the socket is still watched for the server hanging up,
       * so that the connection is made again before anyone needs it. */
      if (ps->reader == NULL && !reads)
        p[1].events |= POLLRDHUP;
#endif
      if (p[1].events == 0)
        p[1].fd = -1;
    }
    ps->thread_left_socket = p[1].fd == -1 || !(p[1].events & POLLIN);
    pthread_mutex_unlock(&ps->mu);
    int n = poll(p, 2, due ? dlock__ms_until(due) : -1);
    pthread_mutex_lock(&ps->mu);
    if (n <= 0)
      continue;
    if (p[0].revents & POLLIN)
      drain_pipe(ps->pipe_fd[0]);
    short gone = POLLHUP | POLLERR;
#ifdef POLLRDHUP
    gone |= POLLRDHUP;
#endif
    if (ps->connected && (p[1].revents & (POLLIN | gone)))
      read_replies_locked(ps);
  }
  pthread_mutex_unlock(&ps->mu);
  return NULL;
}

/* ---- the waiters' side -----------------------------------------------------
 */

static int start_one(const dlock__endpoint *ep, const dlock__tls *tls,
                     dlock__sentinel *sentinel, struct dlock__cluster *cluster,
                     int sharded, int64_t connect_timeout_ms,
                     int64_t command_timeout_ms, int lazy,
                     int64_t open_deadline_us, dlock__pubsub **out) {
  dlock__pubsub *ps = dlock__calloc(1, sizeof(*ps));
  if (ps == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory starting pub/sub");
  ps->sharded = sharded;
  ps->ep = ep;
  ps->tls = tls;
  ps->sentinel = sentinel;
  ps->cluster = cluster;
  ps->connect_timeout_ms = connect_timeout_ms;
  ps->command_timeout_ms = command_timeout_ms;
  if (pipe2(ps->pipe_fd, O_CLOEXEC | O_NONBLOCK) != 0) {
    int rc = dlock__fail(DLOCK_EIO, "pipe2: %s", strerror(errno));
    dlock__free(ps);
    return rc;
  }
  if (pipe2(ps->reader_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    int rc = dlock__fail(DLOCK_EIO, "pipe2: %s", strerror(errno));
    close(ps->pipe_fd[0]);
    close(ps->pipe_fd[1]);
    dlock__free(ps);
    return rc;
  }
  pthread_mutex_init(&ps->mu, NULL);
  /* Connect before returning, so the first waiter finds it ready; a lazy
   * client whose server is down leaves that to the thread. */
  int rc = ps->sentinel != NULL || ps->cluster != NULL
               ? open_stream(ps, -1, &ps->ctx, &ps->gen)
               : dlock__stream_open_until(ep, tls, connect_timeout_ms,
                                          command_timeout_ms, open_deadline_us,
                                          -1, NULL, NULL, &ps->ctx);
  if (rc == 0) {
    ps->connected = 1;
    ps->connected_us = dlock__now_us();
  } else if (rc == DLOCK_EIO && lazy) {
    ps->backoff_us = BACKOFF_FIRST_US;
    ps->retry_at_us = dlock__now_us() + ps->backoff_us;
    rc = 0;
  }
  if (rc == 0 && pthread_create(&ps->thread, NULL, pubsub_main, ps) != 0)
    rc = dlock__fail(DLOCK_ENOMEM, "pthread_create failed");
  if (rc != 0) {
    dlock__stream_free(ps->ctx);
    close(ps->pipe_fd[0]);
    close(ps->pipe_fd[1]);
    close(ps->reader_pipe[0]);
    close(ps->reader_pipe[1]);
    pthread_mutex_destroy(&ps->mu);
    dlock__free(ps);
    return rc;
  }
  *out = ps;
  return 0;
}

int dlock__pubsub_start(const dlock__endpoint *ep, const dlock__tls *tls,
                        dlock__sentinel *sentinel,
                        struct dlock__cluster *cluster,
                        int64_t connect_timeout_ms, int64_t command_timeout_ms,
                        int lazy, int64_t open_deadline_us,
                        dlock__pubsub **out) {
  if (cluster == NULL || !dlock__cluster_sharded(cluster))
    return start_one(ep, tls, sentinel, cluster, 0, connect_timeout_ms,
                     command_timeout_ms, lazy, open_deadline_us, out);
  /* Sharded pub/sub: the connections are made per node as waiters come. */
  dlock__pubsub *ps = dlock__calloc(1, sizeof(*ps));
  dlock__pubsub **shards = dlock__calloc(SHARDS_MAX, sizeof(*shards));
  if (ps == NULL || shards == NULL) {
    dlock__free(ps);
    dlock__free(shards);
    return dlock__fail(DLOCK_ENOMEM, "out of memory starting pub/sub");
  }
  ps->shards = shards;
  ps->tls = tls;
  ps->cluster = cluster;
  ps->connect_timeout_ms = connect_timeout_ms;
  ps->command_timeout_ms = command_timeout_ms;
  pthread_mutex_init(&ps->mu, NULL);
  *out = ps;
  return 0;
}

/* The shard of a sharded client that subscribes 'channel': that of the
 * master of its slot, started when 'make' is set and it has none yet.
 * NULL with a code in '*rc' when there is none. */
static dlock__pubsub *shard_of(dlock__pubsub *ps, const char *channel,
                               size_t len, int make, int *rc) {
  int idx =
      dlock__cluster_owner(ps->cluster, dlock__key_slot(channel, len), rc);
  if (idx < 0)
    return NULL;
  if (idx >= SHARDS_MAX) {
    *rc = dlock__fail(DLOCK_EPROTO, "cluster has too many nodes");
    return NULL;
  }
  pthread_mutex_lock(&ps->mu);
  dlock__pubsub *sh = ps->shards[idx];
  int canceled = ps->canceled;
  pthread_mutex_unlock(&ps->mu);
  *rc = 0;
  if (canceled)
    *rc = dlock__fail(DLOCK_ECANCELED, "client is shutting down");
  if (canceled || sh != NULL || !make)
    return canceled ? NULL : sh;
  /* Lazily: a node that is down is tried again by the shard's thread, and
   * its waiters sleep by the lock's TTL meanwhile. The connect happens
   * without the mutex, so that a slow node holds up no other; of two made
   * at once, the first installed stays. */
  dlock__pubsub *made = NULL;
  *rc = start_one(dlock__cluster_node_ep(ps->cluster, idx), ps->tls, NULL, NULL,
                  1, ps->connect_timeout_ms, ps->command_timeout_ms, 1,
                  dlock__deadline_ms(ps->connect_timeout_ms), &made);
  if (*rc != 0)
    return NULL;
  pthread_mutex_lock(&ps->mu);
  if (ps->shards[idx] == NULL && !ps->canceled) {
    ps->shards[idx] = made;
    made = NULL;
  }
  sh = ps->shards[idx];
  canceled = ps->canceled;
  pthread_mutex_unlock(&ps->mu);
  dlock__pubsub_stop(made);
  if (canceled) {
    *rc = dlock__fail(DLOCK_ECANCELED, "client is shutting down");
    return NULL;
  }
  return sh;
}

void dlock__pubsub_poke(dlock__pubsub *ps) {
  if (ps != NULL && ps->shards == NULL)
    poke_thread(ps);
}

void dlock__pubsub_cancel(dlock__pubsub *ps) {
  if (ps->shards != NULL) {
    pthread_mutex_lock(&ps->mu);
    ps->canceled = 1;
    for (int i = 0; i < SHARDS_MAX; i++)
      if (ps->shards[i] != NULL)
        dlock__pubsub_cancel(ps->shards[i]);
    pthread_mutex_unlock(&ps->mu);
    return;
  }
  pthread_mutex_lock(&ps->mu);
  ps->canceled = 1;
  for (dlock__sub *s = ps->subs; s != NULL; s = s->next) {
    for (dlock__waiter *w = s->head; w != NULL; w = w->next)
      pthread_cond_signal(&w->cv);
    pthread_cond_broadcast(&s->ready);
  }
  if (ps->reader != NULL)
    poke(ps->reader_pipe[1]);
  pthread_mutex_unlock(&ps->mu);
}

void dlock__pubsub_stop(dlock__pubsub *ps) {
  if (ps == NULL)
    return;
  if (ps->shards != NULL) {
    for (int i = 0; i < SHARDS_MAX; i++)
      dlock__pubsub_stop(ps->shards[i]);
    dlock__free(ps->shards);
    pthread_mutex_destroy(&ps->mu);
    dlock__free(ps);
    return;
  }
  pthread_mutex_lock(&ps->mu);
  ps->stopping = 1;
  pthread_mutex_unlock(&ps->mu);
  poke_thread(ps);
  pthread_join(ps->thread, NULL);
  dlock__stream_free(ps->ctx);
  while (ps->subs != NULL) {
    dlock__sub *next = ps->subs->next;
    free_sub(ps->subs);
    ps->subs = next;
  }
  close(ps->pipe_fd[0]);
  close(ps->pipe_fd[1]);
  close(ps->reader_pipe[0]);
  close(ps->reader_pipe[1]);
  pthread_mutex_destroy(&ps->mu);
  dlock__free(ps);
}

static dlock__sub *new_sub(dlock__pubsub *ps, const char *name, size_t len) {
  dlock__sub *s = dlock__calloc(1, sizeof(*s));
  if (s == NULL || (s->name = dlock__memdup(name, len)) == NULL) {
    dlock__free(s);
    return NULL;
  }
  s->ps = ps;
  s->len = len;
  init_monotonic_cond(&s->ready);
  return s;
}

/* Puts 'w' at the end of the line of 's'. */
static void enqueue_locked(dlock__sub *s, dlock__waiter *w) {
  w->next = NULL;
  w->sub = s;
  w->permit = 0;
  w->reading = 0;
  w->grant = 0;
  w->reserved = 0;
  w->parked = 0;
  init_monotonic_cond(&w->cv);
  if (s->tail != NULL)
    s->tail->next = w;
  else
    s->head = w;
  s->tail = w;
  s->refs++;
  s->ps->waiting++;
  check_sub_locked(s->ps, s);
}

/* Takes 'w' out of its line; a wake-up it did not take goes to the next
 * waiter, so that none is lost. Returns 1 when the channel has nobody
 * waiting now, and lingers. */
static int dequeue_locked(dlock__pubsub *ps, dlock__waiter *w) {
  dlock__sub *s = w->sub;
  dlock__waiter *prev = NULL;
  for (dlock__waiter *x = s->head; x != w; x = x->next)
    prev = x;
  if (prev != NULL)
    prev->next = w->next;
  else
    s->head = w->next;
  if (s->tail == w)
    s->tail = prev;
  pthread_cond_destroy(&w->cv);
  ps->waiting--;
  /* A wake-up not taken goes on; a hand-over does not (it was meant for
   * this waiter's owner, who took the lock up by its own attempt). */
  if (w->permit)
    wake_one_locked(s, 0);
  int idle = --s->refs == 0;
  if (idle)
    s->idle_since_us = dlock__now_us();
  check_sub_locked(ps, s);
  return idle;
}

int dlock__pubsub_join(dlock__pubsub *ps, const char *channel, size_t len,
                       int64_t deadline_us, dlock__waiter *w) {
  return dlock__pubsub_join_as(ps, channel, len, deadline_us, w,
                               DLOCK__WAKE_LOCK);
}

void dlock__pubsub_pass(dlock__pubsub *ps, dlock__waiter *w) {
  ps = w->sub->ps;
  pthread_mutex_lock(&ps->mu);
  for (dlock__waiter *x = w->sub->head; x != NULL; x = x->next)
    if (x != w && !x->permit) {
      wake_locked(x);
      break;
    }
  pthread_mutex_unlock(&ps->mu);
}

int dlock__pubsub_join_as(dlock__pubsub *ps, const char *channel, size_t len,
                          int64_t deadline_us, dlock__waiter *w, int wake) {
  if (ps->shards != NULL) {
    int rc;
    if ((ps = shard_of(ps, channel, len, 1, &rc)) == NULL)
      return rc;
  }
  pthread_mutex_lock(&ps->mu);
  if (ps->canceled) {
    pthread_mutex_unlock(&ps->mu);
    return dlock__fail(DLOCK_ECANCELED, "client is shutting down");
  }
  dlock__sub *s = find_sub(ps, channel, len);
  if (s == NULL) {
    if ((s = new_sub(ps, channel, len)) == NULL) {
      pthread_mutex_unlock(&ps->mu);
      return dlock__fail(DLOCK_ENOMEM, "out of memory joining a channel");
    }
    s->next = ps->subs;
    ps->subs = s;
    atomic_fetch_add(&ps->nsubs, 1);
  }
  if (s->refs == 0) {
    s->refused = 0; /* permissions may have changed: ask again */
    s->moved = 0;   /* the slot map said this node: try it */
  }
  /* Each channel name belongs to one kind of object, so every waiter on
   * it asks for the same. */
  s->wake = wake;
  read_stale_locked(ps);
  enqueue_locked(s, w);
  if (s->state != SUB_ACTIVE)
    poke_thread(ps);
  while (s->state != SUB_ACTIVE && !s->refused && !s->moved && ps->connected &&
         !ps->canceled && dlock__now_us() < deadline_us) {
    struct timespec ts = dlock__timespec_at(deadline_us);
    pthread_cond_timedwait(&s->ready, &ps->mu, &ts);
  }
  int rc = ps->canceled ? DLOCK_ECANCELED : s->refused;
  /* Out of time (or connection) before Redis confirmed the subscription:
   * the waiter sleeps by the lock's TTL, and is woken to try again once the
   * subscription is confirmed, since an unlock message sent before that
   * went to nobody. */
  if (rc == 0 && s->state != SUB_ACTIVE)
    s->resync = 1;
  char why[sizeof(s->why)];
  snprintf(why, sizeof(why), "%s", s->why);
  int poke_after = rc != 0 && dequeue_locked(ps, w);
  pthread_mutex_unlock(&ps->mu);
  if (poke_after)
    poke_thread(ps);
  if (rc == DLOCK_ECANCELED)
    return dlock__fail(DLOCK_ECANCELED, "client is shutting down");
  if (rc != 0)
    return dlock__fail(rc, "%s", why);
  return 0;
}

int dlock__pubsub_join_active(dlock__pubsub *ps, const char *channel,
                              size_t len, dlock__waiter *w, int *others) {
  if (ps->shards != NULL) {
    int rc;
    if ((ps = shard_of(ps, channel, len, 0, &rc)) == NULL)
      return 0;
  }
  if (atomic_load(&ps->nsubs) == 0)
    return 0;
  pthread_mutex_lock(&ps->mu);
  dlock__sub *s = find_sub(ps, channel, len);
  if (s != NULL)
    read_stale_locked(ps);
  int joined = s != NULL && s->state == SUB_ACTIVE && !ps->canceled;
  if (joined) {
    *others = s->refs;
    enqueue_locked(s, w);
  }
  pthread_mutex_unlock(&ps->mu);
  return joined;
}

int dlock__pubsub_state(dlock__pubsub *ps, const char *channel, size_t len,
                        int *refs) {
  if (ps->shards != NULL) {
    int rc;
    if ((ps = shard_of(ps, channel, len, 0, &rc)) == NULL) {
      if (refs != NULL)
        *refs = 0;
      return -1;
    }
  }
  pthread_mutex_lock(&ps->mu);
  dlock__sub *s = find_sub(ps, channel, len);
  int state = s != NULL ? s->state : -1;
  if (refs != NULL)
    *refs = s != NULL ? s->refs : 0;
  pthread_mutex_unlock(&ps->mu);
  return state;
}

int dlock__pubsub_parked(dlock__pubsub *ps, const char *channel, size_t len) {
  if (ps->shards != NULL) {
    int rc;
    if ((ps = shard_of(ps, channel, len, 0, &rc)) == NULL)
      return 0;
  }
  int n = 0;
  pthread_mutex_lock(&ps->mu);
  dlock__sub *s = find_sub(ps, channel, len);
  for (dlock__waiter *w = s != NULL ? s->head : NULL; w != NULL; w = w->next)
    n += w->parked;
  pthread_mutex_unlock(&ps->mu);
  return n;
}

int dlock__pubsub_thread_reads(dlock__pubsub *ps) {
  if (ps->shards != NULL)
    return 0;
  pthread_mutex_lock(&ps->mu);
  int reads = !ps->thread_left_socket;
  pthread_mutex_unlock(&ps->mu);
  return reads;
}

/* Reads the connection until 'until_us' at most or something arrives, as
 * the reader (see the top of this file). Returns with 'mu' held, as it
 * was called. */
static void read_as_waiter_locked(dlock__pubsub *ps, dlock__waiter *w,
                                  int64_t until_us) {
  int fd = dlock__stream_fd(ps->ctx);
  ps->reader = w;
  w->reading = 1;
  /* The thread, polling the socket too, would wake with this reader on
   * the message, and they would take turns at the mutex before the reader
   * could act on it: two threads woken where one is enough, on the way
   * from an unlock to the next attempt. It is told now, while nothing is
   * due, to poll without the socket (once 'mu' is free for it). */
  int tell = !ps->thread_left_socket;
  pthread_mutex_unlock(&ps->mu);
  if (tell)
    poke_thread(ps);
  struct pollfd p[2] = {{.fd = fd, .events = POLLIN},
                        {.fd = ps->reader_pipe[0], .events = POLLIN}};
  int64_t left = until_us - dlock__now_us();
  struct timespec ts = {(time_t)(left / 1000000),
                        (long)(left % 1000000) * 1000};
  int n = ppoll(p, 2, left > 0 ? &ts : &(struct timespec){0, 0}, NULL);
  pthread_mutex_lock(&ps->mu);
  w->reading = 0;
  ps->reader = NULL;
  if (n > 0 && (p[1].revents & POLLIN))
    drain_pipe(ps->reader_pipe[0]);
  /* The connection may have been replaced meanwhile: read only the one
   * that was polled. */
  if (n > 0 && (p[0].revents & (POLLIN | POLLHUP | POLLERR)) && ps->connected &&
      ps->ctx != NULL && dlock__stream_fd(ps->ctx) == fd) {
    read_replies_locked(ps);
    /* The reader found the connection broken: the thread, which may be
     * polling without it, reconnects. */
    if (!ps->connected)
      poke_thread(ps);
  }
}

/*
 * A waiter of a sharded client whose channel's slot moved (or whose node's
 * connection broke) joins the channel again on the slot's master now, as
 * the slot map says once read again. It joins the same node again when
 * the map still names it, and is told again if that is still wrong.
 */
static void follow_slot(dlock__pubsub *ps, dlock__waiter *w, int64_t until_us) {
  dlock__pubsub *sh = w->sub->ps;
  pthread_mutex_lock(&sh->mu);
  int moved = w->sub->moved && !w->permit && !w->reserved;
  int wake = w->sub->wake;
  char *name = moved ? dlock__memdup(w->sub->name, w->sub->len) : NULL;
  size_t len = w->sub->len;
  pthread_mutex_unlock(&sh->mu);
  if (name == NULL)
    return;
  dlock__pubsub_leave(sh, w);
  dlock__cluster_mark_stale(ps->cluster);
  int64_t deadline = dlock__deadline_ms(ps->command_timeout_ms);
  if (deadline > until_us)
    deadline = until_us;
  /* When no master is known or reachable now, the waiter stays with the
   * old node (which tells it again): it must stay joined somewhere. */
  if (dlock__pubsub_join_as(ps, name, len, deadline, w, wake) != 0)
    (void)dlock__pubsub_join_as(sh, name, len, 0, w, wake);
  dlock__free(name);
  /* An unlock published between the waiter's last attempt and this
   * subscription reached nobody: the waiter tries once more now, as after
   * a reconnect. */
  sh = w->sub->ps;
  pthread_mutex_lock(&sh->mu);
  wake_locked(w);
  pthread_mutex_unlock(&sh->mu);
}

int dlock__pubsub_wait(dlock__pubsub *ps, dlock__waiter *w, int64_t until_us) {
  if (ps->shards != NULL) {
    follow_slot(ps, w, until_us);
    ps = w->sub->ps;
  }
  pthread_mutex_lock(&ps->mu);
  int was_reader = 0;
  w->parked = 1;
  /* A semaphore's waiter reserved for a hand-over stays for it even when a
   * message woke it meanwhile: going on to an attempt of its own, it could
   * take permits in Redis as well as the ones handed to it. */
  while (!w->permit || (w->reserved && w->permits > 0)) {
    /* A reserved waiter stays for the outcome, which a releasing thread
     * brings within one command, whatever its own deadline. */
    int64_t now = dlock__now_us(), limit = until_us;
    if (w->reserved)
      limit = now + RESERVED_RECHECK_US;
    else if (ps->canceled || now >= until_us)
      break;
    if (ps->reader == NULL && ps->connected && ps->ctx != NULL) {
      read_as_waiter_locked(ps, w, limit);
      was_reader = 1;
      continue;
    }
    struct timespec ts = dlock__timespec_at(limit);
    pthread_cond_timedwait(&w->cv, &ps->mu, &ts);
  }
  /* The thread left the socket to this reader: it takes it back while
   * others still wait. */
  if (was_reader && ps->thread_left_socket && ps->waiting > 1)
    poke_thread(ps);
  w->parked = 0;
  int rc = 0;
  if (ps->canceled)
    rc = dlock__fail(DLOCK_ECANCELED, "client is shutting down");
  else if (w->permit) {
    w->permit = 0;
    rc = w->grant != 0 ? 2 : 1;
  }
  pthread_mutex_unlock(&ps->mu);
  return rc;
}

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
  if (ps->shards != NULL) {
    int rc;
    if ((ps = shard_of(ps, channel, len, 0, &rc)) == NULL)
      return NULL;
  }
  if (atomic_load(&ps->nsubs) == 0)
    return NULL;
  pthread_mutex_lock(&ps->mu);
  dlock__sub *s = find_sub(ps, channel, len);
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
    wake_locked(w);
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
       * (wake_n_locked): it tries, after its hold-back. */
      w->grant = 0;
      wake_locked(w);
    } else if (w->reading) {
      /* Released for everyone: the unlock message wakes the waiter like
       * any other; it only has to notice that it is no longer reserved. */
      poke(ps->reader_pipe[1]);
    } else {
      pthread_cond_signal(&w->cv);
    }
  }
  pthread_mutex_unlock(&ps->mu);
}

void dlock__pubsub_leave(dlock__pubsub *ps, dlock__waiter *w) {
  ps = w->sub->ps;
  pthread_mutex_lock(&ps->mu);
  /* A releasing thread is handing this waiter the lock: wait for it. */
  while (w->reserved) {
    struct timespec ts =
        dlock__timespec_at(dlock__now_us() + RESERVED_RECHECK_US);
    pthread_cond_timedwait(&w->cv, &ps->mu, &ts);
  }
  /* Not even when the channel has nobody waiting now: the thread finds
   * that out by itself within LINGER_US (see sync_subscriptions_locked),
   * which is soon enough for the linger, and a poke here would wake it
   * just as this waiter's caller goes on with the lock it got. */
  (void)dequeue_locked(ps, w);
  pthread_mutex_unlock(&ps->mu);
}

/* ---- after fork() ------------------------------------------------------- */

int dlock__pubsub_forget(dlock__pubsub *ps) {
  if (ps == NULL)
    return 0;
  if (ps->shards != NULL) {
    if (pthread_mutex_trylock(&ps->mu) != 0)
      return -1;
    /* A shard that cannot be forgotten is left as it is (it leaks in the
     * child): the others are, and so is this. */
    int rc = 0;
    for (int i = 0; i < SHARDS_MAX; i++)
      if (ps->shards[i] != NULL) {
        if (dlock__pubsub_forget(ps->shards[i]) == 0)
          ps->shards[i] = NULL;
        else
          rc = -1;
      }
    pthread_mutex_unlock(&ps->mu);
    if (rc != 0)
      return rc;
    pthread_mutex_destroy(&ps->mu);
    dlock__free(ps->shards);
    dlock__free(ps);
    return 0;
  }
  /* Taken by a parent thread at the fork: the channel list may be half
   * changed. */
  if (pthread_mutex_trylock(&ps->mu) != 0)
    return -1;
  /* No join (the thread is the parent's), no condition variable destroyed
   * (one a parent thread waited on would wait for it for ever), no poke
   * (the pipes are shared with the parent's thread). The waiters live in
   * the parent's threads' frames. */
  while (ps->subs != NULL) {
    dlock__sub *next = ps->subs->next;
    dlock__free(ps->subs->name);
    dlock__free(ps->subs);
    ps->subs = next;
  }
  /* This process's copy of the descriptor only, and no TLS goodbye. */
  dlock__stream_abandon(ps->ctx);
  close(ps->pipe_fd[0]);
  close(ps->pipe_fd[1]);
  close(ps->reader_pipe[0]);
  close(ps->reader_pipe[1]);
  pthread_mutex_unlock(&ps->mu);
  pthread_mutex_destroy(&ps->mu);
  dlock__free(ps);
  return 0;
}
