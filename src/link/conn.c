/*
 * The shared command connection (see conn.h for the scheme).
 *
 * Locking: 'mu' guards everything in the struct and the stream (src/link:
 * the transport, hiredis's reader, the output buffer). The driver releases
 * 'mu' only around poll(), so the stream is never used by two threads at
 * once; the one exception is the writer's send() on a plain socket, which
 * touches the descriptor only (a TLS stream is written under 'mu', since
 * OpenSSL cannot read and write one connection from two threads). While a
 * driver polls, nobody may close the socket under it: a failure noticed by
 * another thread only shuts the socket down (and, while connecting, writes
 * to the wake-up pipe), which wakes the driver, and the driver closes it.
 *
 * Connecting: the sender that finds no connection starts one (resolving
 * the host name first, the one step that may block, with 'mu' released)
 * and queues its commands behind the handshake; the driver steps the connect
 * and the handshake (src/link/stream.c) as the socket becomes ready, exactly as
 * it reads replies, and writes the queued commands once it is done.
 */
#define _GNU_SOURCE
#include "conn.h"
#include "alloc.h"

#include <hiredis/sds.h>

#include "error.h"
#include "fork.h"
#include "link/stream.h"
#include "monotime.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#ifdef __linux__
#include <linux/futex.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

/* How many wake-ups a thread may owe when it releases the mutex; more are
 * made at once, under the mutex. */
#define WAKES_MAX 64

/* Reconnection back-off: the first retry is immediate (a restarted server
 * is usually back already), later ones wait longer, so that callers fail
 * fast while the server is down instead of each paying a connect timeout. */
#define BACKOFF_FIRST_US 20000
#define BACKOFF_MAX_US 1000000

typedef struct dlock__caller caller;
typedef struct dlock__request request;
typedef struct dlock__wake_slot dlock__wake_slot;

struct dlock__conn {
  pthread_mutex_t mu;
  dlock__conn_cfg cfg;
  dlock__stream *ctx;     /* NULL while disconnected */
  unsigned gen;           /* the Sentinel generation 'ctx' was made in */
  int discovering;        /* a thread looks the master up, outside 'mu' */
  request *head, *tail;   /* sent, awaiting replies, oldest first */
  int driving;            /* a thread is reading replies */
  int writing;            /* a thread is writing 'wbuf' (write_out_locked) */
  int socket_full;        /* the last write stopped at a full socket */
  sds wbuf;               /* output taken from ctx->obuf, to go out first */
  dlock__stream *sending; /* the stream a send() is under way on, if any */
  dlock__stream *zombie;  /* failed during that send; the writer frees it */
  int64_t retry_at_us;    /* no reconnect before this */
  int64_t backoff_us;
  int last_code;         /* why the last connection failed */
  int broken_code;       /* set by break_locked for the driver to report */
  int timed_out;         /* the failure being handled is a timeout */
  int64_t last_reply_us; /* when the last reply came */
  /* A pipe that wakes the driver's poll() when the connection is broken
   * by another thread (dlock__conn_cancel), also while it is still
   * connecting, when there may be no socket worth shutting down. */
  int wake_fd[2];
  /* A thread is resolving the host name with 'mu' released (link_locked);
   * others that need a connection wait for it. */
  int resolving;
  unsigned cancels; /* dlock__conn_cancel calls so far */
  char last_err[256];
  unsigned fork_gen; /* the process's fork count when it was made */
#ifdef __linux__
  /* Callers told under 'mu' why they are woken, still to be woken by
   * whoever releases 'mu' next (conn_unlock). */
  _Atomic uint32_t *wakes[WAKES_MAX];
  size_t nwakes;
  /* The callers' futex words (see below), guarded by their own mutex since
   * an answered caller gives its slot back without taking 'mu'. */
  pthread_mutex_t slots_mu;
  dlock__wake_slot *free_slots;
  dlock__wake_slot *all_slots;
#endif
};

/* ---- deadlines ----------------------------------------------------------- */

/*
 * When the caller gives up waiting. A plain caller has one deadline. A
 * paced caller (a long pipelined batch, see dlock__conn_send_paced) gives
 * up only when the connection has delivered no reply for its idle time, or
 * at its limit: a connection that keeps answering is alive, however long
 * the batch takes.
 */
static int64_t caller_deadline(const dlock__conn *c, const caller *me) {
  if (me->idle_us == 0)
    return me->deadline_us;
  int64_t d = me->deadline_us;
  if (c->last_reply_us > 0 && c->last_reply_us > d - me->idle_us)
    d = c->last_reply_us + me->idle_us;
  return d < me->limit_us ? d : me->limit_us;
}

/* When the caller stops waiting for now: its deadline, or sooner the end
 * of its turn on this connection (dlock__conn_wait_until), after which it
 * keeps its requests and may wait again. */
static int64_t wait_limit(const dlock__conn *c, const caller *me) {
  int64_t d = caller_deadline(c, me);
  return me->until_us < d ? me->until_us : d;
}

/* ---- invariants -----------------------------------------------------------
 */

/*
 * What holds whenever 'mu' is released, checked in debug builds (the
 * sanitizer runs are debug builds). One reader and one writer at most; a
 * socket being sent on outside 'mu' is the writer's; a connection being
 * opened is not there yet; without a connection nothing is queued or read;
 * every queued request either belongs to a caller that still counts it as
 * unanswered or was given up on.
 */
static void check_locked(const dlock__conn *c) {
#ifndef NDEBUG
  assert(c->driving == 0 || c->driving == 1);
  assert(c->writing == 0 || c->writing == 1);
  assert(c->sending == NULL || c->writing);
  assert(c->zombie == NULL || (c->zombie == c->sending && c->ctx != c->zombie));
  assert(c->ctx != NULL || (c->head == NULL && !c->driving));
  assert(!c->discovering || c->ctx == NULL);
  assert(c->broken_code == 0 || c->ctx != NULL);
  assert((c->head == NULL) == (c->tail == NULL));
  assert(c->tail == NULL || c->tail->next == NULL);
  for (const request *r = c->head; r != NULL; r = r->next) {
    assert(r->who == NULL || r->who->remaining > 0);
    assert(r->reply == NULL && r->err == 0);
  }
#ifdef __linux__
  assert(c->nwakes <= WAKES_MAX);
#endif
#else
  (void)c;
#endif
}

/* ---- waking callers ----------------------------------------------------- */

/* Why a parked caller was woken. */
enum { WAKE_NONE = 0, WAKE_DRIVE = 1, WAKE_DONE = 2 };

#ifdef __linux__
/*
 * On Linux a caller sleeps on a futex word rather than on a condition
 * variable tied to 'mu'. A condition variable would make every woken caller
 * take 'mu' again on its way out, and since the driver wakes callers while
 * it holds 'mu', each of them would first block on the mutex and be woken a
 * second time. Here the word is set under 'mu' (with the replies published
 * before it), the futex is woken only once 'mu' is released, and a caller
 * whose replies are all in returns without taking 'mu' at all.
 *
 * The wake-up may therefore come after its caller has returned (it timed
 * out and found its replies under 'mu'). So the word is not in the
 * caller's stack frame but in a slot the connection owns until
 * dlock__conn_free: a late wake-up reaches either a free slot or one that
 * another caller took since, and every sleeper checks its own word again
 * after waking, so a stray wake-up costs one extra look and nothing more.
 */
struct dlock__wake_slot {
  _Atomic uint32_t word;
  struct dlock__wake_slot *next_free; /* in the connection's free list */
  struct dlock__wake_slot *next_all;  /* every slot, to free them at the end */
};

static void futex_wake_one(_Atomic uint32_t *word) {
  syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* Gives the caller a slot: a free one, or a new one when all are taken
 * (there are never more than the most callers ever in flight at once). */
static int caller_init(dlock__conn *c, caller *me) {
  pthread_mutex_lock(&c->slots_mu);
  dlock__wake_slot *s = c->free_slots;
  if (s != NULL) {
    c->free_slots = s->next_free;
  } else {
    s = dlock__calloc(1, sizeof(*s));
    if (s != NULL) {
      s->next_all = c->all_slots;
      c->all_slots = s;
    }
  }
  pthread_mutex_unlock(&c->slots_mu);
  if (s == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory for a waiting caller");
  atomic_store_explicit(&s->word, WAKE_NONE, memory_order_relaxed);
  me->slot = s;
  return 0;
}

static void caller_destroy(dlock__conn *c, caller *me) {
  pthread_mutex_lock(&c->slots_mu);
  me->slot->next_free = c->free_slots;
  c->free_slots = me->slot;
  pthread_mutex_unlock(&c->slots_mu);
  me->slot = NULL;
}

static void free_slots(dlock__conn *c) {
  for (dlock__wake_slot *s = c->all_slots; s != NULL;) {
    dlock__wake_slot *next = s->next_all;
    dlock__free(s);
    s = next;
  }
  c->all_slots = c->free_slots = NULL;
}

/* Tells 'who' why it is woken; the wake-up itself waits for conn_unlock. */
static void notify_locked(dlock__conn *c, caller *who, uint32_t why) {
  assert(why != WAKE_DONE || who->remaining == 0);
  assert(why != WAKE_DRIVE || (who->remaining > 0 && who->waiting));
  _Atomic uint32_t *word = &who->slot->word;
  atomic_store_explicit(word, why, memory_order_release);
  if (c->nwakes < WAKES_MAX)
    c->wakes[c->nwakes++] = word;
  else
    futex_wake_one(word);
}

/* Wake-ups taken over from the connection, to be made outside 'mu'. */
typedef struct wake_batch {
  _Atomic uint32_t *words[WAKES_MAX];
  size_t n;
} wake_batch;

static void take_wakes_locked(dlock__conn *c, wake_batch *b) {
  b->n = c->nwakes;
  if (b->n > 0)
    memcpy(b->words, c->wakes, b->n * sizeof(b->words[0]));
  c->nwakes = 0;
}

static void make_wakes(wake_batch *b) {
  for (size_t i = 0; i < b->n; i++)
    futex_wake_one(b->words[i]);
}

/* Releases 'mu', then wakes the callers notified under it. */
static void conn_unlock(dlock__conn *c) {
  check_locked(c);
  wake_batch b;
  take_wakes_locked(c, &b);
  pthread_mutex_unlock(&c->mu);
  make_wakes(&b);
}

/*
 * Sleeps until notified or until the caller's deadline. Called with 'mu'
 * held and another thread driving. Returns 1 when the caller's requests are
 * all answered (or failed), with 'mu' released; 0 with 'mu' held again.
 */
static int park(dlock__conn *c, caller *me) {
  _Atomic uint32_t *word = &me->slot->word;
  atomic_store_explicit(word, WAKE_NONE, memory_order_relaxed);
  struct timespec ts = dlock__timespec_at(wait_limit(c, me));
  conn_unlock(c);
  uint32_t why;
  while ((why = atomic_load_explicit(word, memory_order_acquire)) ==
         WAKE_NONE) {
    /* FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC time. */
    if (syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_BITSET_PRIVATE,
                WAKE_NONE, &ts, NULL, FUTEX_BITSET_MATCH_ANY) != 0 &&
        errno == ETIMEDOUT)
      break;
  }
  if (why == WAKE_DONE)
    return 1;
  pthread_mutex_lock(&c->mu);
  return 0;
}
#else
/* Elsewhere a condition variable on 'mu' per caller. */
static int caller_init(dlock__conn *c, caller *me) {
  (void)c;
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  int rc = pthread_cond_init(&me->cv, &attr);
  pthread_condattr_destroy(&attr);
  if (rc != 0)
    return dlock__fail(DLOCK_ENOMEM, "pthread_cond_init failed");
  return 0;
}

static void caller_destroy(dlock__conn *c, caller *me) {
  (void)c;
  pthread_cond_destroy(&me->cv);
}

static void free_slots(dlock__conn *c) { (void)c; }

static void notify_locked(dlock__conn *c, caller *who, uint32_t why) {
  (void)c;
  (void)why;
  assert(why != WAKE_DONE || who->remaining == 0);
  assert(why != WAKE_DRIVE || (who->remaining > 0 && who->waiting));
  pthread_cond_signal(&who->cv);
}

typedef struct wake_batch {
  int unused;
} wake_batch;

static void take_wakes_locked(dlock__conn *c, wake_batch *b) {
  (void)c;
  (void)b;
}

static void make_wakes(wake_batch *b) { (void)b; }

static void conn_unlock(dlock__conn *c) {
  check_locked(c);
  pthread_mutex_unlock(&c->mu);
}

static int park(dlock__conn *c, caller *me) {
  struct timespec ts = dlock__timespec_at(wait_limit(c, me));
  pthread_cond_timedwait(&me->cv, &c->mu, &ts);
  return 0;
}
#endif

int dlock__conn_new(const dlock__conn_cfg *cfg, dlock__conn **out) {
  dlock__conn *c = dlock__calloc(1, sizeof(*c));
  if (c == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory creating a connection");
  if (pthread_mutex_init(&c->mu, NULL) != 0) {
    dlock__free(c);
    return dlock__fail(DLOCK_ENOMEM, "pthread_mutex_init failed");
  }
#ifdef __linux__
  if (pthread_mutex_init(&c->slots_mu, NULL) != 0) {
    pthread_mutex_destroy(&c->mu);
    dlock__free(c);
    return dlock__fail(DLOCK_ENOMEM, "pthread_mutex_init failed");
  }
#endif
  if (pipe2(c->wake_fd, O_CLOEXEC | O_NONBLOCK) != 0) {
    int rc = dlock__fail(DLOCK_EIO, "pipe2: %s", strerror(errno));
#ifdef __linux__
    pthread_mutex_destroy(&c->slots_mu);
#endif
    pthread_mutex_destroy(&c->mu);
    dlock__free(c);
    return rc;
  }
  c->wbuf = sdsempty();
  if (c->wbuf == NULL) {
    dlock__conn_free(c);
    return dlock__fail(DLOCK_ENOMEM, "out of memory creating a connection");
  }
  c->cfg = *cfg;
  c->fork_gen = dlock__fork_gen();
  *out = c;
  return 0;
}

/* ---- failure and reconnection ------------------------------------------- */

/* Fails every waiting request with 'code', closes the socket and arranges
 * the next reconnection. Only the driver, or anybody while there is no
 * driver, may call this. */
static void fail_all_locked(dlock__conn *c, int code, const char *why) {
  if (c->broken_code != 0) {
    /* The reason given by whoever broke the connection beats the driver's
     * view of it ("connection reset"). */
    code = c->broken_code;
    c->broken_code = 0;
  } else {
    snprintf(c->last_err, sizeof(c->last_err), "%s", why);
  }
  c->last_code = code;
  for (request *r = c->head; r != NULL;) {
    request *next = r->next;
    if (r->who == NULL) {
      dlock__free(r);
    } else {
      r->err = code;
      if (--r->who->remaining == 0)
        notify_locked(c, r->who, WAKE_DONE);
    }
    r = next;
  }
  c->head = c->tail = NULL;
  if (c->ctx != NULL) {
    if (c->ctx == c->sending) {
      /* A thread is sending on this socket outside 'mu': closing it now
       * could let the descriptor be reused under that send. It is only
       * shut down, and the writer frees it when it is back. */
      shutdown(dlock__stream_fd(c->ctx), SHUT_RDWR);
      c->zombie = c->ctx;
    } else {
      dlock__stream_free(c->ctx);
    }
    /* What the socket did not take goes with it; while a send is under way
     * 'wbuf' is the writer's, and it drops it when it sees the change. */
    if (!c->writing)
      sdsclear(c->wbuf);
    c->ctx = NULL;
  }

  /* A server that went silent (paused, overloaded) is given a moment
   * before the next connect, which would otherwise block a caller for the
   * whole handshake; one that closed the connection is usually back at
   * once (a restart), so the first retry there is immediate. */
  if (c->timed_out && c->backoff_us < BACKOFF_FIRST_US)
    c->backoff_us = BACKOFF_FIRST_US;
  c->timed_out = 0;
  c->retry_at_us = dlock__now_us() + c->backoff_us;
  c->backoff_us = c->backoff_us == 0 ? BACKOFF_FIRST_US : c->backoff_us * 2;
  if (c->backoff_us > BACKOFF_MAX_US)
    c->backoff_us = BACKOFF_MAX_US;
}

/* Wakes whoever polls the wake-up pipe: the driver, or a lookup through
 * the Sentinels. A full pipe already holds a wake-up, so a failed write
 * is fine. */
static void wake_pipe(dlock__conn *c) {
  char one = 1;
  ssize_t w = write(c->wake_fd[1], &one, 1);
  (void)w;
}

/* Fails the connection from a thread that may not be the driver: with a
 * driver polling the socket, the socket is only shut down (which wakes the
 * driver) and the driver closes it. */
static void break_locked(dlock__conn *c, int code, const char *why) {
  if (!c->driving) {
    fail_all_locked(c, code, why);
    return;
  }
  if (c->broken_code == 0) {
    c->broken_code = code;
    snprintf(c->last_err, sizeof(c->last_err), "%s", why);
  }
  shutdown(dlock__stream_fd(c->ctx), SHUT_RDWR);
  wake_pipe(c);
}

static void drain_wake(dlock__conn *c) {
  char buf[64];
  while (read(c->wake_fd[0], buf, sizeof(buf)) > 0) {
  }
}

static int is_ready(const dlock__conn *c) {
  return c->ctx != NULL && dlock__stream_ready(c->ctx);
}

/* An idle connection with something to read has been closed by the server
 * (a restart, a CLIENT KILL, an idle timeout): replace it before sending,
 * rather than lose the next command on it. */
static int idle_connection_is_dead(dlock__conn *c) {
  /* A connection that answered within the last millisecond is alive; the
   * check costs a system call, which a busy caller should not pay. */
  if (c->head != NULL || c->driving || c->writing || !is_ready(c) ||
      dlock__now_us() - c->last_reply_us < 1000)
    return 0;
  struct pollfd p = {.fd = dlock__stream_fd(c->ctx), .events = POLLIN};
  return poll(&p, 1, 0) != 0;
}

/* A lookup through the Sentinels started at cancel count 'cancels' ends
 * when dlock__conn_cancel is called meanwhile (it writes to the wake-up
 * pipe, which the lookup watches). */
typedef struct lookup_cancel {
  dlock__conn *c;
  unsigned cancels;
} lookup_cancel;

static int lookup_canceled(void *arg) {
  lookup_cancel *lc = arg;
  pthread_mutex_lock(&lc->c->mu);
  int canceled = lc->c->cancels != lc->cancels;
  pthread_mutex_unlock(&lc->c->mu);
  return canceled;
}

/*
 * Makes sure there is a connection, starting one if needed. Called and
 * returns with 'mu' held, and never waits for the server: the connect and
 * its handshake are driven by whoever waits for replies (drive_locked),
 * as the socket becomes ready, while the commands queue behind them. So a
 * thread sending to several servers (a RedLock) starts every connect at
 * once, and a server that accepts but does not answer holds nobody but
 * the callers waiting for it, each until its own deadline, and a cancel
 * ends the wait at once.
 */
static int link_locked(dlock__conn *c, int64_t deadline_us) {
  unsigned cancels = c->cancels;
  /* Another thread is finding this server outside 'mu' (resolving its host
   * name, or looking the master up through the Sentinels): this caller
   * waits for that, up to its own deadline, looking again every
   * millisecond (it happens only at a connect, and takes round trips). */
  while (c->resolving || c->discovering) {
    if (c->cancels != cancels)
      return dlock__fail(DLOCK_ECANCELED, "client is shutting down");
    if (dlock__now_us() >= deadline_us)
      return dlock__fail(DLOCK_EIO,
                         c->discovering
                             ? "no connection: the master is being looked up "
                               "through the Sentinels, and the deadline passed"
                             : "no reply from Redis: still resolving its host "
                               "name");
    conn_unlock(c);
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
    pthread_mutex_lock(&c->mu);
  }
  /* The master moved (+switch-master): nothing more goes to the old one,
   * which may take writes until it is told it is a replica. */
  if (c->ctx != NULL && c->cfg.locator != NULL &&
      c->gen != c->cfg.locator->gen(c->cfg.locator->ctx))
    break_locked(c, DLOCK_EIO, "the master moved (Sentinel's +switch-master)");
  if (c->ctx != NULL && !idle_connection_is_dead(c))
    return 0;
  if (c->ctx != NULL)
    fail_all_locked(c, DLOCK_EIO, "connection closed by the server");
  int64_t now = dlock__now_us();
  if (now < c->retry_at_us)
    return dlock__fail(c->last_code ? c->last_code : DLOCK_EIO,
                       "%s (next reconnect in %lld ms)", c->last_err,
                       (long long)((c->retry_at_us - now + 999) / 1000));
  dlock__stream *ctx = NULL;
  unsigned gen = 0;
  int rc;
  struct addrinfo *addrs = NULL;
  if (c->cfg.locator == NULL && c->cfg.ep->path == NULL) {
    /* Resolving may block on DNS: not under 'mu', which the callers of
     * this server, a cancel and the driver of any other request need. */
    c->resolving = 1;
    conn_unlock(c);
    rc = dlock__net_resolve(c->cfg.ep, &addrs);
    pthread_mutex_lock(&c->mu);
    c->resolving = 0;
    if (rc == 0 && c->cancels != cancels)
      rc = dlock__fail(DLOCK_ECANCELED, "client is shutting down");
    if (rc != 0) {
      dlock__net_addrs_free(addrs);
      if (rc != DLOCK_ECANCELED) {
        c->timed_out = 1;
        fail_all_locked(c, rc, dlock_last_error());
      }
      return rc;
    }
  }
  if (c->cfg.locator != NULL) {
    /* Discovery asks the Sentinels and confirms the master with ROLE, one
     * command at a time, waiting for the servers, for at most the connect
     * and command timeouts: outside 'mu', so that the other callers of
     * this connection wait for it only up to their own deadlines, and a
     * cancel is not held up. Meanwhile nobody else connects ('discovering'
     * is seen above), so 'ctx' stays NULL. */
    c->discovering = 1;
    conn_unlock(c);
    lookup_cancel lc = {c, cancels};
    dlock__cancel cancel = {c->wake_fd[0], lookup_canceled, &lc};
    rc = c->cfg.locator->open(c->cfg.locator->ctx,
                              dlock__deadline_ms(c->cfg.connect_timeout_ms +
                                                 c->cfg.command_timeout_ms),
                              &cancel, &ctx, &gen);
    pthread_mutex_lock(&c->mu);
    c->discovering = 0;
  } else
    rc = dlock__stream_start_at(c->cfg.ep, c->cfg.tls, addrs,
                                c->cfg.connect_timeout_ms,
                                c->cfg.command_timeout_ms, &ctx);
  if (rc != 0) {
    c->timed_out = 1;
    fail_all_locked(c, rc, dlock_last_error());
    return rc;
  }
  c->ctx = ctx;
  c->gen = gen;
  if (dlock__stream_ready(ctx)) {
    /* Sentinel discovery hands over a stream past its handshake: the
     * reconnect succeeded now rather than in drive_locked. */
    c->backoff_us = 0;
    c->last_code = 0;
  }
  return 0;
}

int64_t dlock__conn_retry_at(dlock__conn *c) {
  pthread_mutex_lock(&c->mu);
  int64_t at = c->ctx != NULL ? 0 : c->retry_at_us;
  conn_unlock(c);
  return at;
}

static void drive_locked(dlock__conn *c, caller *me);

/* An opener's deadline passed before the handshake was done: the
 * connection fails, as at the handshake's own deadline, and backs off. */
static void handshake_overdue_locked(dlock__conn *c, caller *me) {
  int rc = dlock__stream_overdue(c->ctx, dlock__now_us() - me->start_us);
  c->timed_out = 1;
  fail_all_locked(c, rc != 0 ? rc : DLOCK_EIO, dlock_last_error());
}

int dlock__conn_open(dlock__conn *c, int64_t deadline_us) {
  if (dlock__forked_since(c->fork_gen))
    return dlock__fail_forked();
  pthread_mutex_lock(&c->mu);
  c->retry_at_us = 0;
  int rc = link_locked(c, deadline_us);
  /* A caller without requests that drives until the handshake is done,
   * bounded by the connect and command timeouts (the stream's own) and by
   * its deadline. */
  caller me;
  memset(&me, 0, sizeof(me));
  me.want_ready = 1;
  me.waiting = 1;
  me.start_us = dlock__now_us();
  me.deadline_us = deadline_us;
  me.until_us = INT64_MAX;
  while (rc == 0 && c->ctx != NULL && !is_ready(c)) {
    if (dlock__now_us() >= deadline_us) {
      handshake_overdue_locked(c, &me);
      break;
    }
    if (!c->driving) {
      drive_locked(c, &me);
      continue;
    }
    /* Someone else drives this handshake (not at a client's start, where
     * this is called): look again shortly. */
    conn_unlock(c);
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
    pthread_mutex_lock(&c->mu);
  }
  if (rc == 0 && c->ctx == NULL)
    rc = dlock__fail_text(c->last_code ? c->last_code : DLOCK_EIO, c->last_err);
  conn_unlock(c);
  return rc;
}

/* ---- sending and receiving ---------------------------------------------- */

/*
 * Writes the pending output without blocking (group commit). Called with
 * 'mu' held, a connection and nobody writing; returns with 'mu' held. The
 * send() runs outside 'mu', so that other threads append their commands
 * meanwhile instead of blocking on the mutex; they leave the writing to
 * this thread, which sends whatever accumulated once its send() returns,
 * until nothing is left. Commands issued together thus reach the server in
 * one segment, which it reads and answers in one go, while a lone caller
 * still costs exactly one send(). Output the socket does not take (it is
 * full) stays in 'wbuf' for the driver, which writes it when the socket
 * drains. A TLS stream is written under 'mu' instead (OpenSSL must not
 * write while the driver reads): callers then queue behind the mutex, and
 * what they queued goes out in the writer's next turn.
 */
static void write_out_locked(dlock__conn *c) {
  dlock__stream *ctx = c->ctx;
  int err = 0;
  char tls_why[200] = "";
  c->writing = 1;
  c->socket_full = 0;
  for (;;) {
    if (sdslen(c->wbuf) == 0) {
      /* Take the output whole, leaving the stream an empty buffer (the one
       * just written) to append to. */
      sds empty = c->wbuf;
      c->wbuf = ctx->obuf;
      ctx->obuf = empty;
    }
    sds buf = c->wbuf;
    size_t len = sdslen(buf);
    if (len == 0)
      break;
    if (dlock__net_is_tls(ctx->net)) {
      /* Under 'mu' (see the top of this file). Commands that others append
       * meanwhile wait for the mutex and go out in the next turn. */
      long w = dlock__stream_write(ctx, buf, len);
      if (w < 0) {
        snprintf(tls_why, sizeof(tls_why), "write: %s", dlock_last_error());
        break;
      }
      sdsrange(c->wbuf, w, -1);
      if ((size_t)w < len) {
        c->socket_full = 1;
        break;
      }
      continue;
    }
    int fd = dlock__stream_fd(ctx);
    /* Callers to wake are woken after the send: woken first, they would
     * take the CPU from it and the server would wait for the commands. */
    wake_batch wakes;
    take_wakes_locked(c, &wakes);
    c->sending = ctx;
    check_locked(c);
    pthread_mutex_unlock(&c->mu);
    /* MSG_NOSIGNAL: a server that went away must give us EPIPE, not kill
     * the program with SIGPIPE. */
    ssize_t n = send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    int send_errno = errno;
    make_wakes(&wakes);
    pthread_mutex_lock(&c->mu);
    c->sending = NULL;
    if (c->ctx != ctx) {
      /* The connection failed meanwhile and its requests with it. Threads
       * that left their commands to this writer may have queued them on a
       * new connection since: those are written now. */
      sdsclear(c->wbuf);
      if (c->zombie != NULL) {
        dlock__stream_free(c->zombie);
        c->zombie = NULL;
      }
      ctx = c->ctx;
      /* A new connection still in its handshake takes no commands yet:
       * whoever drives it writes them once it is ready. */
      if (ctx == NULL || !dlock__stream_ready(ctx))
        break;
      continue;
    }
    if (n < 0) {
      if (send_errno == EINTR)
        continue;
      if (send_errno != EAGAIN && send_errno != EWOULDBLOCK)
        err = send_errno;
      c->socket_full = 1;
      break;
    }
    sdsrange(c->wbuf, n, -1);
    if ((size_t)n < len) {
      c->socket_full = 1;
      break;
    }
  }
  c->writing = 0;
  if (c->zombie != NULL) {
    dlock__stream_free(c->zombie);
    c->zombie = NULL;
  }
  if (err != 0) {
    char why[200];
    snprintf(why, sizeof(why), "write: %s", strerror(err));
    break_locked(c, DLOCK_EIO, why);
  } else if (tls_why[0] != '\0') {
    break_locked(c, DLOCK_EIO, tls_why);
  }
}

/* Output that nobody is writing (the socket was full). */
static int has_output(const dlock__conn *c) {
  return is_ready(c) && !c->writing &&
         (sdslen(c->wbuf) > 0 || sdslen(c->ctx->obuf) > 0);
}

/* Hands every complete reply in the read buffer to its request. */
static int dispatch_replies_locked(dlock__conn *c, caller *me) {
  for (;;) {
    void *reply = NULL;
    if (dlock__stream_reply(c->ctx, &reply) != 0)
      return DLOCK_EPROTO;
    if (reply == NULL)
      return 0;
    request *r = c->head;
    if (r == NULL) {
      /* A reply nobody asked for: the stream is out of step. */
      freeReplyObject(reply);
      return DLOCK_EPROTO;
    }
    c->head = r->next;
    if (c->head == NULL)
      c->tail = NULL;
    c->last_reply_us = dlock__now_us();
    if (r->who == NULL) {
      /* The caller gave up on it: the reply only keeps the stream in
       * step. */
      freeReplyObject(reply);
      dlock__free(r);
      continue;
    }
    r->reply = reply;
    assert(r->who->remaining > 0);
    if (--r->who->remaining == 0 && r->who != me)
      notify_locked(c, r->who, WAKE_DONE);
  }
}

/*
 * A caller whose own deadline passed gives up on its requests, while the
 * connection stays: its requests stay in line (as heap copies, since the
 * caller's stack is going away) so that the replies still pair up. Other
 * callers are not failed for one caller's shorter deadline (a watchdog
 * round bounded by a lease). Returns 0, or -1 when a copy cannot be made
 * (the connection must then be failed instead).
 */
static int give_up_requests_locked(dlock__conn *c, caller *me) {
  for (request **p = &c->head; *p != NULL;) {
    request *r = *p;
    if (r->who != me) {
      p = &r->next;
      continue;
    }
    request *copy = dlock__calloc(1, sizeof(*copy));
    if (copy == NULL)
      return -1;
    copy->next = r->next;
    copy->sent_us = r->sent_us;
    copy->block_ms = r->block_ms;
    *p = copy;
    if (c->tail == r)
      c->tail = copy;
    r->err = DLOCK_EIO;
    me->remaining--;
    me->gave_up = 1;
    p = &copy->next;
  }
  return 0;
}

/* The error of a caller that gave up at its own deadline. */
static int timed_out_error(const caller *me) {
  return dlock__fail(DLOCK_EIO, "no reply from Redis within %lld ms",
                     (long long)((dlock__now_us() - me->start_us) / 1000));
}

/* When the connection counts as dead: a whole command timeout without any
 * reply since its oldest request was sent. Replies come in order, so a
 * connection that keeps delivering them (a long pipelined batch) is alive
 * however long the oldest request has waited. */
static int64_t dead_at(const dlock__conn *c) {
  if (c->ctx != NULL && !dlock__stream_ready(c->ctx))
    return dlock__stream_deadline(c->ctx);
  if (c->head == NULL)
    return INT64_MAX;
  int64_t since =
      c->head->sent_us > c->last_reply_us ? c->head->sent_us : c->last_reply_us;
  return dlock__after_ms(since, c->cfg.command_timeout_ms + c->head->block_ms);
}

/* The driver sleeps in recv() rather than in poll() when it has longer to
 * wait than READ_SLICE_MS, on a plain connection (see
 * dlock__net_block_reads): one system call per reply instead of two. The
 * slice bounds each such sleep, after which the deadlines are looked at as
 * after a poll() that timed out. Output waiting for a socket that was full
 * needs poll(); output left to the driver (leave_to_driver) goes out after
 * the next reply, as it does after a poll() for that reply alone. */
#define READ_SLICE_MS 100
#define READ_BUF 16384

static int may_wait_in_recv(dlock__conn *c, int64_t wake) {
  return !(c->socket_full && has_output(c)) &&
         wake - dlock__now_us() > READ_SLICE_MS * 1000 &&
         dlock__stream_block_reads(c->ctx, READ_SLICE_MS) == 0;
}

/* The oldest waiting caller but 'me' reads next. A caller that sent but is
 * not waiting yet (a RedLock sending to every node first, or waiting on
 * another node for its turn) takes the role itself when it comes to wait. */
static void pass_role_locked(dlock__conn *c, caller *me) {
  for (request *r = c->head; r != NULL; r = r->next) {
    if (r->who != NULL && r->who != me && r->who->waiting) {
      notify_locked(c, r->who, WAKE_DRIVE);
      break;
    }
  }
}

/* Reads replies for everybody until the caller 'me' has all of its own, or
 * its deadline passes (it gives up on them), or the connection dies. */
static void drive_locked(dlock__conn *c, caller *me) {
  char why[200];
  assert(!c->driving && me->waiting);
  c->driving = 1;
  int polled = 0;
  while (c->ctx != NULL &&
         (me->remaining > 0 || (me->want_ready && !is_ready(c)))) {
    /* The caller's turn ends (after one look at what came), its requests
     * still its own. */
    if (polled && me->remaining > 0 && dlock__now_us() >= me->until_us)
      break;
    int ready = is_ready(c);
    if (!ready) {
      /* The connect and handshake, as far as they go without waiting. */
      int rc = dlock__stream_step(c->ctx);
      if (rc < 0) {
        /* A failed connect backs off like a timeout: callers fail fast
         * while the server stays away. */
        c->timed_out = 1;
        fail_all_locked(c, rc, dlock_last_error());
        break;
      }
      if (rc == 0) {
        c->backoff_us = 0;
        c->last_code = 0;
        /* What the callers queued meanwhile goes out now. */
        if (!c->writing)
          write_out_locked(c);
        continue;
      }
    }
    int64_t mine = wait_limit(c, me);
    int64_t wake = dead_at(c) < mine ? dead_at(c) : mine;
    /* Past a deadline the poll does not wait, but replies that already
     * arrived are still read: a caller that waited for another server
     * first (a RedLock) must not lose answers that came in time. */
    struct pollfd p[2] = {
        {.fd = dlock__stream_fd(c->ctx),
         .events = ready ? (short)(POLLIN | (has_output(c) ? POLLOUT : 0))
                         : dlock__stream_events(c->ctx)},
        {.fd = c->wake_fd[0], .events = POLLIN}};
    int in_recv = ready && may_wait_in_recv(c, wake);
    dlock__stream *ctx = c->ctx;
    char buf[READ_BUF];
    long got = 0;
    int got_errno = 0, n, poll_errno = 0;
    conn_unlock(c);
    if (in_recv) {
      /* What poll() would have said: readable (bytes, the end of the
       * stream or an error, for the read below), or nothing in time. */
      got = dlock__stream_recv_wait(ctx, buf, sizeof(buf), &got_errno);
      n = got < 0 && (got_errno == EAGAIN || got_errno == EWOULDBLOCK ||
                      got_errno == EINTR)
              ? 0
              : 1;
      p[0].revents = n ? POLLIN : 0;
    } else {
      /* A connected socket that another thread shuts down wakes the poll
       * (and the recv above) by itself; the pipe is polled only while
       * connecting, when shutting the socket down may not (and an extra
       * descriptor costs every round trip something). */
      n = poll(p, ready ? 1 : 2, dlock__ms_until(wake));
      poll_errno = errno;
    }
    pthread_mutex_lock(&c->mu);
    polled = 1;
    if (n < 0 && poll_errno != EINTR) {
      snprintf(why, sizeof(why), "poll: %s", strerror(poll_errno));
      fail_all_locked(c, DLOCK_EIO, why);
      break;
    }
    if (n > 0 && (p[1].revents & POLLIN))
      drain_wake(c);
    if (c->broken_code != 0) {
      /* Broken by another thread (a cancel, a failed write): the reason
       * is the one it gave. */
      fail_all_locked(c, c->broken_code, c->last_err);
      break;
    }
    if (!ready) {
      /* The handshake's own deadline is checked by the next step; the
       * caller's, here. An opener (dlock__conn_open) past its deadline
       * ends the connection it waits for. */
      if (c->ctx != NULL && me->want_ready && me->remaining == 0 &&
          dlock__now_us() >= caller_deadline(c, me)) {
        handshake_overdue_locked(c, me);
        break;
      }
      if (c->ctx != NULL && dlock__now_us() >= caller_deadline(c, me) &&
          dlock__now_us() < dead_at(c) && me->remaining > 0) {
        if (give_up_requests_locked(c, me) != 0)
          fail_all_locked(c, DLOCK_ENOMEM, "out of memory giving up a call");
        break;
      }
      continue;
    }
    if (n == 0 && c->ctx != NULL) {
      int64_t now = dlock__now_us();
      if (now >= dead_at(c)) {
        snprintf(why, sizeof(why), "no reply from Redis within %lld ms",
                 (long long)c->cfg.command_timeout_ms);
        c->timed_out = 1;
        fail_all_locked(c, DLOCK_EIO, why);
        break;
      }
      if (now >= caller_deadline(c, me)) {
        if (give_up_requests_locked(c, me) != 0)
          fail_all_locked(c, DLOCK_ENOMEM, "out of memory giving up a call");
        break;
      }
    }
    if (n <= 0)
      continue;
    if ((p[0].revents & POLLOUT) && has_output(c)) {
      /* A write error shuts the socket down and the read below fails. */
      write_out_locked(c);
      if (c->ctx == NULL)
        break;
    }
    if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      /* Nobody closes the driver's socket under it (see above). */
      assert(c->ctx == ctx);
      int read_rc =
          in_recv ? dlock__stream_take(ctx, got, got_errno, buf, sizeof(buf))
                  : dlock__stream_read(ctx);
      if (read_rc != 0) {
        snprintf(why, sizeof(why), "read: %s", dlock_last_error());
        fail_all_locked(c, DLOCK_EIO, why);
        break;
      }
      int rc = dispatch_replies_locked(c, me);
      if (rc != 0) {
        const char *proto = dlock__stream_proto_error(c->ctx);
        snprintf(why, sizeof(why), "bad reply from server: %s",
                 proto[0] != '\0' ? proto : "reply without a request");
        fail_all_locked(c, rc, why);
        break;
      }
      /* Commands left for the driver (leave_to_driver) go out now, in one
       * write, before the callers just answered are woken. */
      if (has_output(c)) {
        write_out_locked(c);
        if (c->ctx == NULL)
          break;
      }
    }
  }
  /* Nor are any left behind when the driver goes. */
  if (c->ctx != NULL && has_output(c))
    write_out_locked(c);
  c->driving = 0;
  pass_role_locked(c, me);
}

/* Reads one bulk string of a formatted command at '*p' (before 'end'):
 * 0 with its text and length, -1 when it is not one. */
static int bulk_at(const char **p, const char *end, const char **text,
                   long *len) {
  if (*p >= end || **p != '$')
    return -1;
  char *after;
  long n = strtol(*p + 1, &after, 10);
  if (after + 2 > end || after[0] != '\r' || after[1] != '\n' || n < 0 ||
      n > end - after - 4)
    return -1;
  *text = after + 2;
  *len = n;
  *p = after + 2 + n + 2;
  return 0;
}

/* How long the server may hold the reply to the formatted command 'cmd'
 * back on purpose: a WAIT's timeout (replica sync pipelines one after a
 * lock write, and a timeout longer than the command timeout must end with
 * WAIT's answer, not with the connection called dead); 0 for any other
 * command and for WAIT 0 (no limit, which dlock never sends). */
static int64_t blocking_ms(const char *cmd, size_t len) {
  static const char head[] = "*3\r\n";
  const char *end = cmd + len, *p = cmd + sizeof(head) - 1, *text;
  long n;
  if (len < sizeof(head) - 1 || memcmp(cmd, head, sizeof(head) - 1) != 0 ||
      bulk_at(&p, end, &text, &n) != 0 || n != 4 ||
      strncasecmp(text, "WAIT", 4) != 0 || bulk_at(&p, end, &text, &n) != 0 ||
      bulk_at(&p, end, &text, &n) != 0)
    return 0;
  int64_t ms = 0;
  for (long i = 0; i < n && ms < INT64_MAX / 20; i++) {
    if (text[i] < '0' || text[i] > '9')
      return 0;
    ms = ms * 10 + (text[i] - '0');
  }
  return ms;
}

/* Queues the requests on the socket. On failure none of them is queued. */
static int enqueue_locked(dlock__conn *c, size_t n, char *const *cmds,
                          const size_t *lens, request *reqs, caller *me) {
  for (size_t i = 0; i < n; i++) {
    if (dlock__stream_append(c->ctx, cmds[i], lens[i]) != 0) {
      /* The partial batch in the output buffer would desynchronise the
       * stream, so the connection goes. */
      break_locked(c, DLOCK_ENOMEM, "out of memory queueing a command");
      return DLOCK_ENOMEM;
    }
  }
  int64_t now = dlock__now_us();
  for (size_t i = 0; i < n; i++) {
    reqs[i].who = me;
    reqs[i].sent_us = now;
    reqs[i].block_ms = blocking_ms(cmds[i], lens[i]);
    if (c->tail != NULL)
      c->tail->next = &reqs[i];
    else
      c->head = &reqs[i];
    c->tail = &reqs[i];
  }
  return 0;
}

/*
 * Whether commands just queued are left for the driver to send with the
 * next reply it reads, rather than cost a send() of their own: while an
 * earlier request is in flight, Redis answers this connection's commands
 * in order, so these could not be answered before it anyway; sent as it
 * answers, they cost at most the one round trip that their own send would
 * have overlapped, and everything queued meanwhile goes out in one write,
 * as an event loop sends it. A lone caller (nothing in flight before its
 * own requests) always sends at once.
 */
static int leave_to_driver(const dlock__conn *c, const request *mine) {
  return c->driving && c->head != NULL && c->head != mine;
}

static int send_common(dlock__conn *c, size_t n, char *const *cmds,
                       const size_t *lens, int64_t deadline_us, int64_t idle_ms,
                       int64_t limit_us, dlock__pending *p) {
  memset(p, 0, sizeof(*p));
  p->conn = c;
  p->n = n;
  /* In a child of fork() the socket is the parent's: never touch it. */
  if (dlock__forked_since(c->fork_gen)) {
    p->rc = dlock__fail_forked();
    return p->rc;
  }
  p->reqs =
      n <= DLOCK__PENDING_LOCAL ? p->local : dlock__calloc(n, sizeof(request));
  if (p->reqs == NULL) {
    p->rc = dlock__fail(DLOCK_ENOMEM, "out of memory for %zu requests", n);
    return p->rc;
  }
  caller *me = &p->me;
  me->remaining = n;
  me->start_us = dlock__now_us();
  if (idle_ms > 0) {
    me->idle_us = idle_ms > INT64_MAX / 1000 ? INT64_MAX / 2 : idle_ms * 1000;
    me->limit_us = limit_us;
    me->deadline_us = dlock__deadline_ms(idle_ms);
  } else {
    me->deadline_us = deadline_us
                          ? deadline_us
                          : dlock__deadline_ms(c->cfg.command_timeout_ms);
  }
  p->rc = caller_init(c, me);
  if (p->rc != 0) {
    if (p->reqs != p->local)
      dlock__free(p->reqs);
    p->reqs = NULL;
    return p->rc;
  }

  pthread_mutex_lock(&c->mu);
  int rc = link_locked(c, caller_deadline(c, me));
  if (rc == 0)
    rc = enqueue_locked(c, n, cmds, lens, p->reqs, me);
  /* A thread already writing sends these commands too; on a connection
   * still in its handshake they wait for it (drive_locked). */
  if (rc == 0 && !c->writing && is_ready(c) && !leave_to_driver(c, p->reqs))
    write_out_locked(c);
  conn_unlock(c);
  p->rc = rc;
  return rc;
}

int dlock__conn_send(dlock__conn *c, size_t n, char *const *cmds,
                     const size_t *lens, int64_t deadline_us,
                     dlock__pending *p) {
  return send_common(c, n, cmds, lens, deadline_us, 0, 0, p);
}

int dlock__conn_send_paced(dlock__conn *c, size_t n, char *const *cmds,
                           const size_t *lens, int64_t idle_ms,
                           int64_t limit_us, dlock__pending *p) {
  return send_common(c, n, cmds, lens, 0, idle_ms > 0 ? idle_ms : 1, limit_us,
                     p);
}

int dlock__conn_wait(dlock__pending *p, redisReply **replies) {
  return dlock__conn_wait_until(p, replies, INT64_MAX);
}

void dlock__conn_expire(dlock__pending *p) {
  if (p->reqs == NULL)
    return;
  dlock__conn *c = p->conn;
  pthread_mutex_lock(&c->mu);
  int64_t now = dlock__now_us();
  if (p->me.deadline_us > now)
    p->me.deadline_us = now;
  if (p->me.idle_us > 0 && p->me.limit_us > now)
    p->me.limit_us = now;
  conn_unlock(c);
}

int dlock__conn_wait_until(dlock__pending *p, redisReply **replies,
                           int64_t until_us) {
  dlock__conn *c = p->conn;
  int rc = p->rc;
  if (p->reqs == NULL)
    return rc;
  pthread_mutex_lock(&c->mu);
  p->me.waiting = 1;
  p->me.until_us = until_us;
  int answered = 0; /* the replies came while parked; 'mu' is released */
  int tried = 0;
  while (rc == 0 && p->me.remaining > 0) {
    if (tried && dlock__now_us() >= until_us) {
      /* The turn is over: the requests stay this caller's, to be waited
       * for again, and the reading goes to whoever else waits. */
      p->me.waiting = 0;
      if (!c->driving)
        pass_role_locked(c, &p->me);
      conn_unlock(c);
      return DLOCK__CONN_AGAIN;
    }
    tried = 1;
    if (!c->driving) {
      drive_locked(c, &p->me);
      continue;
    }
    /* Someone else reads; past our own deadline we stop waiting for it. */
    if (park(c, &p->me)) {
      answered = 1;
      break;
    }
    /* Only while somebody still reads: a caller woken to take over the
     * reading (the driver left) reads what has come and passes the role
     * on in drive_locked even when its own time is up, or every other
     * caller would wait for replies that sit unread on the socket. */
    if (p->me.remaining > 0 && c->driving &&
        dlock__now_us() >= caller_deadline(c, &p->me)) {
      if (give_up_requests_locked(c, &p->me) != 0)
        break_locked(c, DLOCK_ENOMEM, "out of memory giving up a call");
    }
  }
  if (answered) {
    /* The usual case needs nothing more from the connection; a failure
     * takes 'mu' again for its explanation. */
    for (size_t i = 0; i < p->n && rc == 0; i++)
      rc = p->reqs[i].err;
    if (rc == 0)
      goto collect;
    rc = 0;
    pthread_mutex_lock(&c->mu);
  }
  p->me.waiting = 0;
#ifndef NDEBUG
  /* Nothing in the queue refers to this caller's frame any more. */
  for (const request *r = c->head; r != NULL; r = r->next)
    assert(r->who != &p->me);
  assert(p->rc != 0 || p->me.remaining == 0);
#endif
  if (rc == 0) {
    for (size_t i = 0; i < p->n && rc == 0; i++)
      rc = p->reqs[i].err;
    if (rc != 0 && p->me.gave_up)
      timed_out_error(&p->me);
    else if (rc != 0)
      dlock__fail_text(rc, c->last_err);
  }
  conn_unlock(c);
collect:
  caller_destroy(c, &p->me);
  for (size_t i = 0; i < p->n; i++) {
    if (rc == 0) {
      replies[i] = p->reqs[i].reply;
    } else {
      if (p->reqs[i].reply != NULL)
        freeReplyObject(p->reqs[i].reply);
      replies[i] = NULL;
    }
  }
  if (p->reqs != p->local)
    dlock__free(p->reqs);
  p->reqs = NULL;
  return rc;
}

int dlock__conn_call(dlock__conn *c, size_t n, char *const *cmds,
                     const size_t *lens, redisReply **replies,
                     int64_t deadline_us) {
  dlock__pending p;
  dlock__conn_send(c, n, cmds, lens, deadline_us, &p);
  return dlock__conn_wait(&p, replies);
}

void dlock__conn_cancel(dlock__conn *c) {
  pthread_mutex_lock(&c->mu);
  /* Only what is in flight fails: later calls are refused by the client
   * itself, while its own clean-up (a fair waiter leaving the queue) may
   * still talk to Redis. Callers waiting for a connect or its handshake
   * fail too, at once: the driver's poll() wakes on the pipe, and those
   * waiting for the host name to be resolved stop waiting. */
  c->cancels++;
  if (c->ctx != NULL)
    break_locked(c, DLOCK_ECANCELED, "client is shutting down");
  else if (c->discovering)
    wake_pipe(c);
  conn_unlock(c);
}

void dlock__conn_free(dlock__conn *c) {
  if (c == NULL)
    return;
  /* With no call in progress, only requests given up on are left. */
  while (c->head != NULL) {
    request *next = c->head->next;
    if (c->head->who == NULL)
      dlock__free(c->head);
    c->head = next;
  }
  if (c->ctx != NULL)
    dlock__stream_free(c->ctx);
  sdsfree(c->wbuf);
  free_slots(c);
  close(c->wake_fd[0]);
  close(c->wake_fd[1]);
#ifdef __linux__
  pthread_mutex_destroy(&c->slots_mu);
#endif
  pthread_mutex_destroy(&c->mu);
  dlock__free(c);
}

/* ---- after fork() ------------------------------------------------------- */

int dlock__conn_forget(dlock__conn *c) {
  if (c == NULL)
    return 0;
  /* Taken by a thread of the parent at the fork: what it guards may be
   * half changed. A writer or sender works outside 'mu' on 'wbuf' and the
   * context: the same. Left alone, then. */
  if (pthread_mutex_trylock(&c->mu) != 0)
    return -1;
#ifdef __linux__
  if (pthread_mutex_trylock(&c->slots_mu) != 0) {
    pthread_mutex_unlock(&c->mu);
    return -1;
  }
#endif
  if (c->writing || c->sending != NULL || c->discovering) {
#ifdef __linux__
    pthread_mutex_unlock(&c->slots_mu);
#endif
    pthread_mutex_unlock(&c->mu);
    return -1;
  }
  /* Requests given up on are the connection's; the others live in the
   * frames of parent threads, which are not this process's to free. */
  while (c->head != NULL) {
    request *next = c->head->next;
    if (c->head->who == NULL)
      dlock__free(c->head);
    c->head = next;
  }
  /* Only this process's copy of the descriptor is closed: nothing is sent
   * (no TLS goodbye), and the parent's connection goes on. */
  if (c->ctx != NULL)
    dlock__stream_abandon(c->ctx);
  sdsfree(c->wbuf);
  free_slots(c);
  close(c->wake_fd[0]);
  close(c->wake_fd[1]);
#ifdef __linux__
  pthread_mutex_unlock(&c->slots_mu);
  pthread_mutex_destroy(&c->slots_mu);
#endif
  pthread_mutex_unlock(&c->mu);
  pthread_mutex_destroy(&c->mu);
  dlock__free(c);
  return 0;
}
