/*
 * What the files of the shared command connection (see conn.h for the
 * scheme) have in common: the connection's state and the steps each file
 * lends the others. Only src/link/conn*.c include this.
 *
 *   conn.c         the request queue: sending, and waiting for the replies
 *                  (the blocking caller, a waiter)
 *   conn_submit.c  requests completed by callback, for an event loop
 *   conn_done.c    completing a request
 *   conn_wake.c    how a waiting caller sleeps and is woken (futex words
 *                  or condition variables), and the invariants
 *   conn_fail.c    failing the connection, and the reconnection back-off
 *   conn_open.c    connecting: resolving, Sentinel discovery, the handshake
 *   conn_write.c   writing the queued commands (group commit)
 *   conn_driver.c  the driver, which reads for everybody
 *   conn_life.c    creating, cancelling and freeing, also after fork()
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
 * A function named ..._locked is called with 'mu' held and returns with it
 * held (it may release it meanwhile, as the comment at its definition says).
 */
#ifndef DLOCK_CONN_INTERNAL_H
#define DLOCK_CONN_INTERNAL_H

#include "conn.h"

#include <hiredis/sds.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#ifdef __linux__
#include <stdatomic.h>
#endif

#include "link/stream.h"

/* How many wake-ups a thread may owe when it releases the mutex; more are
 * made at once, under the mutex. */
#define WAKES_MAX 64

typedef struct dlock__caller caller;
typedef struct dlock__request request;
typedef struct dlock__wake_slot dlock__wake_slot;

struct dlock__conn {
  pthread_mutex_t mu;
  dlock__conn_cfg cfg;
  dlock__stream *ctx;   /* NULL while disconnected */
  unsigned gen;         /* the Sentinel generation 'ctx' was made in */
  unsigned sockets;     /* streams made so far (tells sockets apart) */
  int discovering;      /* a thread looks the master up, outside 'mu' */
  request *head, *tail; /* sent, awaiting replies, oldest first */
  int driving;          /* a thread is reading replies */
  caller *driver;       /* the caller reading them */
  size_t nsubmitted;    /* dlock__conn_submit's requests in line */
  int writing;          /* a thread is writing 'wbuf' (conn_write.c) */
  int socket_full;      /* the last write stopped at a full socket */
  /* The driver's look at the socket before it sleeps (cfg.spin_us): the
   * looks in a row that caught nothing, and the waits left to sleep at
   * once after too many of those. */
  int spin_misses;
  int spin_skip;
  sds wbuf;               /* output taken from ctx->obuf, to go out first */
  dlock__stream *sending; /* the stream a send() is under way on, if any */
  dlock__stream *zombie;  /* failed during that send; the writer frees it */
  int64_t retry_at_us;    /* no reconnect before this */
  int64_t backoff_us;
  int last_code; /* why the last connection failed */
  /* Set by dlock__conn_break_locked for the driver to report. */
  int broken_code;
  int timed_out;         /* the failure being handled is a timeout */
  int64_t last_reply_us; /* when the last reply came */
  /* A pipe that wakes the driver's poll() when the connection is broken
   * by another thread (dlock__conn_cancel), also while it is still
   * connecting, when there may be no socket worth shutting down. */
  int wake_fd[2];
  /* A thread is resolving the host name with 'mu' released
   * (dlock__conn_link_locked); others that need a connection wait for it. */
  int resolving;
  unsigned cancels; /* dlock__conn_cancel calls so far */
  char last_err[256];
  unsigned fork_gen; /* the process's fork count when it was made */
  unsigned links;    /* connections made so far (statistics) */
  unsigned relinks;  /* reconnects still to be told, outside 'mu' */
#ifdef __linux__
  /* Callers told under 'mu' why they are woken, still to be woken by
   * whoever releases 'mu' next (dlock__conn_unlock). */
  _Atomic uint32_t *wakes[WAKES_MAX];
  size_t nwakes;
  /* The callers' futex words (conn_wake.c), guarded by their own mutex since
   * an answered caller gives its slot back without taking 'mu'. */
  pthread_mutex_t slots_mu;
  dlock__wake_slot *free_slots;
  dlock__wake_slot *all_slots;
#endif
};

/* ---- deadlines ---------------------------------------------------------- */

/*
 * When the caller gives up waiting. A plain caller has one deadline. A
 * paced caller (a long pipelined batch, see dlock__conn_send_paced) gives
 * up only when the connection has delivered no reply for its idle time, or
 * at its limit: a connection that keeps answering is alive, however long
 * the batch takes.
 */
static inline int64_t caller_deadline(const dlock__conn *c, const caller *me) {
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
static inline int64_t wait_limit(const dlock__conn *c, const caller *me) {
  int64_t d = caller_deadline(c, me);
  return me->until_us < d ? me->until_us : d;
}

static inline int is_ready(const dlock__conn *c) {
  return c->ctx != NULL && dlock__stream_ready(c->ctx);
}

/* Output that nobody is writing (the socket was full). */
static inline int has_output(const dlock__conn *c) {
  return is_ready(c) && !c->writing &&
         (sdslen(c->wbuf) > 0 || sdslen(c->ctx->obuf) > 0);
}

/* ---- completing requests (conn_done.c) ---------------------------------- */

/* Completes 'r', which is out of the line (see dlock__request): calls its
 * 'done' (a request given up on only drops the reply) and frees it when
 * the connection owns it. */
void dlock__conn_complete_locked(dlock__conn *c, request *r, redisReply *reply,
                                 int err, const char *detail);
/* Takes every request out of the line and completes it with 'err' and
 * 'detail'. */
void dlock__conn_complete_all_locked(dlock__conn *c, int err,
                                     const char *detail);
/* Completes the request at '*at' with DLOCK_EIO and 'detail', leaving a
 * request given up on in its place, so that the late reply still pairs
 * up: 0, or -1 when out of memory (nothing done; the connection must then
 * be failed). */
int dlock__conn_give_up_at_locked(dlock__conn *c, request **at,
                                  const char *detail);

/* The waiter whose request 'r' is, or NULL: the requests the connection
 * does not own are all waiters' (dlock__conn_send), which complete by
 * storing the reply for their waiter ('arg'). */
static inline caller *waiter_of(const request *r) {
  return r->owned ? NULL : (caller *)r->arg;
}

/* ---- the request queue (conn.c) ----------------------------------------- */

/* Queues the requests on the socket, each to be completed by 'done' with
 * 'arg'. On failure none of them is queued. */
int dlock__conn_enqueue_locked(dlock__conn *c, size_t n, char *const *cmds,
                               const size_t *lens, request *reqs,
                               dlock__conn_done done, void *arg);
/* Whether commands just queued, the first of them 'mine', are left for the
 * driver to send with the next reply it reads. */
int dlock__conn_leave_to_driver(const dlock__conn *c, const request *mine);

/* ---- waking callers (conn_wake.c) --------------------------------------- */

/* Why a parked caller was woken. */
enum { WAKE_NONE = 0, WAKE_DRIVE = 1, WAKE_DONE = 2 };

#ifdef __linux__
/* Wake-ups taken over from the connection, to be made outside 'mu'. */
typedef struct wake_batch {
  _Atomic uint32_t *words[WAKES_MAX];
  size_t n;
} wake_batch;
#else
typedef struct wake_batch {
  int unused;
} wake_batch;
#endif

/* What holds whenever 'mu' is released (checked in debug builds). */
void dlock__conn_check_locked(const dlock__conn *c);
/* Readies 'me' to be woken: 0 or DLOCK_ENOMEM. */
int dlock__conn_caller_init(dlock__conn *c, caller *me);
void dlock__conn_caller_destroy(dlock__conn *c, caller *me);
/* Frees every wake slot, at the end of the connection. */
void dlock__conn_free_slots(dlock__conn *c);
/* Tells 'who' why it is woken (WAKE_*); the wake-up itself waits for
 * dlock__conn_unlock. */
void dlock__conn_notify_locked(dlock__conn *c, caller *who, uint32_t why);
void dlock__conn_take_wakes_locked(dlock__conn *c, wake_batch *b);
void dlock__conn_make_wakes(wake_batch *b);
/* Releases 'mu', then wakes the callers notified under it. */
void dlock__conn_unlock(dlock__conn *c);
/* Sleeps until notified or until the caller's wait limit, with another
 * thread driving: 1 when all of the caller's requests are answered, with
 * 'mu' released; 0 with 'mu' held again. */
int dlock__conn_park(dlock__conn *c, caller *me);

/* ---- failure and reconnection (conn_fail.c) ----------------------------- */

/* Fails every waiting request, closes the socket and arranges the next
 * reconnection; only the driver, or anybody while there is no driver. */
void dlock__conn_fail_all_locked(dlock__conn *c, int code, const char *why);
/* Fails the connection from any thread (a driver closes it). */
void dlock__conn_break_locked(dlock__conn *c, int code, const char *why);
/* Wakes, and empties, the wake-up pipe. */
void dlock__conn_wake_pipe(dlock__conn *c);
void dlock__conn_drain_wake(dlock__conn *c);
/* Fails a connection whose opener's deadline passed in the handshake. */
void dlock__conn_handshake_overdue_locked(dlock__conn *c, caller *me);

/* ---- connecting (conn_open.c) ------------------------------------------- */

/* Makes sure there is a connection, starting one if needed, without
 * waiting for the server. */
int dlock__conn_link_locked(dlock__conn *c, int64_t deadline_us);

/* ---- writing (conn_write.c) --------------------------------------------- */

/* Writes the pending output without blocking; with a connection and
 * nobody writing. */
void dlock__conn_write_out_locked(dlock__conn *c);

/* ---- the driver (conn_driver.c) ----------------------------------------- */

/* Reads replies for everybody until 'me' has its own, or its wait limit
 * passes, or the connection dies; then passes the role on. */
void dlock__conn_drive_locked(dlock__conn *c, caller *me);

/* What dlock__conn_service does, with 'mu' held: by an event loop, or by
 * a caller that holds the reading role (conn_many.c). */
void dlock__conn_service_locked(dlock__conn *c);
/* Completes the request of every complete reply in the read buffer: 0, or
 * DLOCK_EPROTO when the stream is out of step. */
int dlock__conn_dispatch_locked(dlock__conn *c);
/* The earliest deadline of a submitted request in line (INT64_MAX: none). */
int64_t dlock__conn_submit_deadline(const dlock__conn *c);
/* Completes the submitted requests whose deadline has passed: 0, or -1
 * when out of memory (the connection must then be failed). */
int dlock__conn_expire_submitted_locked(dlock__conn *c);
/* When the connection counts as dead (a command timeout without a reply,
 * or the handshake's deadline); INT64_MAX when nothing is awaited. */
int64_t dlock__conn_dead_at(const dlock__conn *c);
/* Hands the reading to the oldest waiting caller but 'me'. */
void dlock__conn_pass_role_locked(dlock__conn *c, caller *me);
/* 'me' gives up on its requests at its deadline, the connection staying:
 * 0, or -1 when out of memory (the connection must then be failed). */
int dlock__conn_give_up_locked(dlock__conn *c, caller *me);

#endif
