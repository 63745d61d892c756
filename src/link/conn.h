/*
 * A command connection to one Redis server, shared by every thread of a
 * client with automatic pipelining.
 *
 * There is no I/O thread in the request path. A lone calling thread writes
 * its command straight to the socket; the first thread that needs a reply
 * reads for everybody (the "driver") and hands each reply to the thread
 * waiting for it, in order. Commands queued while an earlier request is in
 * flight are left to the driver, which sends them all in one write with the
 * next reply it reads (Redis answers a connection in order, so they lose
 * nothing by it). So a lone caller costs exactly one round trip, like a
 * plain synchronous client, while many callers share the socket and their
 * commands travel together, as an event loop's would. When the driver has
 * its reply it sends what is left to it and passes the role to the oldest
 * waiter.
 *
 * Every request completes by callback (dlock__request): a blocking caller
 * (dlock__conn_call, or send and wait) is a waiter whose requests'
 * completion stores each reply and wakes it once the last is in, and an
 * event loop submits requests whose completion is its own callback
 * (dlock__conn_submit).
 */
#ifndef DLOCK_CONN_H
#define DLOCK_CONN_H

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "locator.h"
#include "net/net.h"
#include "stats.h"
#include "url.h"

typedef struct dlock__conn dlock__conn;

typedef struct dlock__conn_cfg {
  const dlock__endpoint *ep; /* not copied: must outlive the connection */
  int64_t connect_timeout_ms;
  int64_t command_timeout_ms;
  /* TLS settings for a rediss:// endpoint, else NULL; not copied. */
  const dlock__tls *tls;
  /* For a redis-sentinel:// URL: where the master is found at each
   * (re)connect, instead of 'ep'; else NULL. Not copied. */
  const dlock__locator *locator;
  /* The client's statistics, or NULL; not copied. */
  dlock__stats *stats;
  /* How long a caller waiting for a reply looks at the socket before it
   * sleeps, in us (0: never; see spin_us in dlock.h). */
  int64_t spin_us;
} dlock__conn_cfg;

/* The statistics the connection counts in (its cfg's), or NULL. */
dlock__stats *dlock__conn_stats(const dlock__conn *c);

/* Creates an unconnected connection. 0 or DLOCK_ENOMEM. */
int dlock__conn_new(const dlock__conn_cfg *cfg, dlock__conn **out);

/* When the next reconnection may be tried (CLOCK_MONOTONIC us); 0 when
 * connected. */
int64_t dlock__conn_retry_at(dlock__conn *c);

/* Connects now (if not connected) and waits for the handshake, reporting
 * why it cannot: bounded by the connect and command timeouts, and by
 * 'deadline_us' (CLOCK_MONOTONIC; INT64_MAX: none), past which a
 * handshake still unanswered fails the connection with DLOCK_EIO. */
int dlock__conn_open(dlock__conn *c, int64_t deadline_us);

/*
 * Sends 'n' formatted commands (one pipelined batch) and waits for their
 * replies until 'deadline_us' (CLOCK_MONOTONIC; 0 means now + the command
 * timeout). On 0, replies[i] holds each reply (error replies included),
 * owned by the caller. On failure (DLOCK_EIO, DLOCK_EPROTO,
 * DLOCK_ECANCELED...) every replies[i] is NULL and nothing is left to free.
 * A connection that fails is closed and opened again by a later call.
 */
int dlock__conn_call(dlock__conn *c, size_t n, char *const *cmds,
                     const size_t *lens, redisReply **replies,
                     int64_t deadline_us);

/*
 * A request: one command in line on the connection, which completes it
 * exactly once by calling 'done' with its reply (handed over, error replies
 * included) or, without a reply, with a DLOCK_E* code and the text that
 * explains it (the connection's failure, or a deadline that passed). After
 * 'done' the connection no longer touches the request: one that the
 * connection allocated (dlock__conn_submit) it frees; a waiter's lives in
 * its dlock__pending. 'done' runs in whichever thread completes it (the
 * one reading the reply, failing the connection, or giving up at a
 * deadline), with the connection's mutex held: it must not block nor call
 * into the connection.
 */
struct dlock__request;
typedef void (*dlock__conn_done)(struct dlock__request *r, redisReply *reply,
                                 int err, const char *detail);

typedef struct dlock__request {
  struct dlock__request *next;
  dlock__conn_done done; /* NULL: completed (given up on); the reply is
                            dropped when it comes */
  void *arg;             /* for 'done' */
  int64_t sent_us;
  /* A submitted request's deadline, at which it completes with DLOCK_EIO
   * (a waiter's requests follow their waiter's deadline: INT64_MAX). */
  int64_t deadline_us;
  /* How long the server may hold the reply back on purpose (a WAIT's
   * timeout), allowed on top of the command timeout before the
   * connection counts as dead. */
  int64_t block_ms;
  /* Allocated by the connection, which frees it once completed; a request
   * not owned is a waiter's (dlock__conn_send). */
  int owned;
  /* What a waiter's completion stored, for the waiter to collect. */
  redisReply *reply;
  int err; /* DLOCK_E* when it failed without a reply */
} dlock__request;

/*
 * Requests sent and not yet answered, so that one thread can send to
 * several servers at once and then collect the replies (RedLock): the
 * waiter, whose requests' completion stores each reply and wakes it when
 * the last is in. Lives on the caller's stack; the fields are the
 * connection's business.
 */
typedef struct dlock__caller {
  dlock__conn *conn;
#ifdef __linux__
  /* The futex word saying why the caller was woken (conn.c), so that a
   * caller whose replies are in returns without taking the connection's
   * mutex. Owned by the connection, not by this frame. */
  struct dlock__wake_slot *slot;
#else
  pthread_cond_t cv;
#endif
  size_t remaining; /* requests still without an answer */
  int64_t start_us;
  int64_t deadline_us;
  int64_t idle_us;  /* paced (> 0): the deadline moves with each reply */
  int64_t limit_us; /* paced: the deadline never moves past this */
  int waiting;      /* in dlock__conn_wait, able to take over reading */
  int want_ready;   /* dlock__conn_open: drives until the handshake is done */
  int want_idle;    /* dlock__conn_pump: drives while submissions are out */
  int64_t until_us; /* the end of this turn of waiting (wait_until) */
  /* Waiting among others (dlock__conn_wait_any): a pipe that is written to
   * whenever the caller is woken, so that one poll() hears it. NULL: none. */
  const int *notify_fd;
  /* The first of its requests to fail: the code, and why (last: only
   * written with the code, it is not cleared for each call). */
  int err;
  char detail[256];
} dlock__caller;

#define DLOCK__PENDING_LOCAL 4

typedef struct dlock__pending {
  dlock__conn *conn;
  dlock__request *reqs;
  dlock__request local[DLOCK__PENDING_LOCAL];
  size_t n;
  int rc;
  dlock__caller me; /* last, its failure text at the very end (conn.c) */
} dlock__pending;

/* The two halves of dlock__conn_call. Every send must be followed by a
 * wait on the same 'p', whatever the send returned. */
int dlock__conn_send(dlock__conn *c, size_t n, char *const *cmds,
                     const size_t *lens, int64_t deadline_us,
                     dlock__pending *p);
int dlock__conn_wait(dlock__pending *p, redisReply **replies);

/*
 * dlock__conn_wait for a while: returns DLOCK__CONN_AGAIN when 'until_us'
 * passes first, having taken nothing, the requests still the caller's (a
 * later wait, or wait_until, collects them), so that one thread can wait
 * on several servers in turn and take the replies as they come. Past the
 * caller's deadline it is dlock__conn_wait. A wait always looks at what
 * has arrived before it returns DLOCK__CONN_AGAIN.
 */
#define DLOCK__CONN_AGAIN 1
int dlock__conn_wait_until(dlock__pending *p, redisReply **replies,
                           int64_t until_us);

/*
 * Waits on several sends at once, on the connections of different
 * servers (or the same one): returns the index of one in 'ps' whose
 * replies are all in (or that failed), to be taken with dlock__conn_wait
 * without waiting, or -1 when 'until_us' passes first (the sends are
 * still the caller's). NULL entries (taken already) are skipped. The
 * caller reads every connection nobody else reads, all in one poll(),
 * and is told through a pipe when a thread reading one of the others
 * completes its requests or hands it the reading; a send past its own
 * deadline is given up on, as dlock__conn_wait does.
 */
int dlock__conn_wait_any(dlock__pending *const *ps, size_t n, int64_t until_us);

/* Moves the caller's deadline to now: the next wait takes the replies that
 * have come and gives up on the rest (as at a deadline: the requests stay
 * in line, their replies dropped). */
void dlock__conn_expire(dlock__pending *p);

/*
 * A send for a long pipelined batch (a renewal round of many thousand
 * locks), whose replies take longer than one command timeout to arrive:
 * the caller gives up only when the connection has delivered no reply for
 * 'idle_ms' (counted from the send, then from each reply), or at
 * 'limit_us'. Waited for with dlock__conn_wait.
 */
int dlock__conn_send_paced(dlock__conn *c, size_t n, char *const *cmds,
                           const size_t *lens, int64_t idle_ms,
                           int64_t limit_us, dlock__pending *p);

/*
 * Sends one formatted command whose completion comes by callback rather
 * than to a waiting caller, for an event loop: 'done' is called exactly
 * once (see dlock__request) with the reply, or with the error and its
 * detail when the connection fails, or with DLOCK_EIO once 'deadline_us'
 * (CLOCK_MONOTONIC; 0 means now + the command timeout) passes first (the
 * late reply is then dropped). Returns 0, or an error (no connection yet
 * in its back-off, out of memory, in a child of fork()) with nothing sent
 * and 'done' never called.
 *
 * The completion comes from the thread that reads the reply: a blocking
 * caller of this connection that drives it, or dlock__conn_pump; until one
 * reads, submitted requests wait (also past their deadlines).
 */
int dlock__conn_submit(dlock__conn *c, const char *cmd, size_t len,
                       int64_t deadline_us, dlock__conn_done done, void *arg);

/* Forgets the submitted requests in flight whose 'arg' is 'arg' (an
 * operation that ends before their answers): their completion is never
 * called, and their replies are dropped when they come. */
void dlock__conn_abandon(dlock__conn *c, const void *arg);

/* Reads replies and completes submitted requests (at their deadlines too)
 * until none is left in flight (0) or 'until_us' passes
 * (DLOCK__CONN_AGAIN). When another thread reads, it completes them and
 * this one looks again every millisecond. */
int dlock__conn_pump(dlock__conn *c, int64_t until_us);

/*
 * For a connection that an event loop drives (it has no blocking callers,
 * only submissions): what it waits for, a descriptor ('*fd', -1: none)
 * becoming ready for '*events' (POLLIN, POLLOUT), or the time '*until_us'
 * (CLOCK_MONOTONIC; INT64_MAX: none). Ask again after every service and
 * submission: the answer changes with the connection's state. '*socket'
 * numbers the sockets the connection has made, so that a new socket that
 * got the descriptor number of a closed one is told apart.
 */
void dlock__conn_watch(dlock__conn *c, int *fd, short *events,
                       int64_t *until_us, unsigned *socket);

/* Does everything that can be done without waiting: the connect and its
 * handshake, writing, reading and completing replies, and the deadlines.
 * Completions run inside it (see dlock__request). */
void dlock__conn_service(dlock__conn *c);

/* Makes every call in progress fail with DLOCK_ECANCELED (later calls are
 * refused by the client, see dlock_client_shutdown). */
void dlock__conn_cancel(dlock__conn *c);

/* Closes and frees 'c'; no call may be in progress. NULL is ignored. */
void dlock__conn_free(dlock__conn *c);

/*
 * In a child of fork(): frees 'c' without waiting for anyone or writing
 * anything, closing only this process's copy of the socket. Returns 0, or
 * -1 (nothing freed) when a thread of the parent was working on it at the
 * fork, so that its state cannot be trusted. NULL is ignored.
 */
int dlock__conn_forget(dlock__conn *c);

#endif
