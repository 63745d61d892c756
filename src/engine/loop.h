/*
 * The event loop's side of an async client (dlock_client_open_async): the
 * descriptors and the timer the application's loop watches for it, and
 * the operations in progress. Nothing here blocks or owns a thread: the
 * loop calls dlock__loop_action when a descriptor is ready or the timer
 * ran out, which services the connections (dlock__conn_service,
 * dlock__lsub_service), then runs the operations that became ready, then
 * tells the loop what to watch next.
 *
 * An operation (dlock__aop) is a small object with a 'run' step. It
 * becomes ready when its request is answered (the answer is kept in it),
 * when its channel wakes it, or at its time ('at_us'); the loop then runs
 * its step, which sends the next request, sets the next time, or ends the
 * operation with its callback. Callbacks run only from dlock__loop_action,
 * never from the verb that started the operation.
 */
#ifndef DLOCK_LOOP_H
#define DLOCK_LOOP_H

#include "engine.h"
#include "loopsub.h"
#include "replica.h"

#include <hiredis/hiredis.h>

typedef struct dlock__loop dlock__loop;

/* The descriptors a loop watches besides its links' (dlock__loop.fd). */
#define DLOCK__LOOP_SUB 0
#define DLOCK__LOOP_WATCHER 1
typedef struct dlock__aop dlock__aop;

struct dlock__aop {
  dlock__aop *prev, *next; /* the loop's operations in progress */
  dlock__aop *rnext;       /* the ready queue */
  int queued;
  dlock__loop *lp;
  /* The step, run when ready; and what it does at the client's close:
   * ends the operation with DLOCK_ECANCELED, giving back what it got. */
  void (*run)(dlock__aop *op);
  void (*cancel)(dlock__aop *op);
  int64_t at_us; /* ready at this time too (INT64_MAX: no timer) */
  /* Set by an operation whose answers can grant nothing (a plain
   * command): a close need not wait for them to give something back. */
  int grants_nothing;
  /* The answers to its requests in flight ('in_flight' counts those
   * without one yet): the first's 'reply' and the others' 'tail' (owned),
   * or the first failure's 'err' with 'detail'. */
  int in_flight;
  int nanswered;
  redisReply *reply;
  redisReply *tail[2];
  int err;
  char detail[256];
  /* Replica sync of a script call in flight (dlock__loop_eval): the
   * replicas waited for (-1: counted by an INFO riding after the call,
   * the WAIT sent once it is read), where the WAIT's and the INFO's
   * replies are in 'tail' (-1: not sent), and the script's reply kept
   * while a WAIT sent after it is awaited. */
  int wanted;
  int wait_at, info_at;
  redisReply *kept;
  /* On a cluster: the slot of the requests' key (-1: any node), the
   * requests as sent (kept until answered, to be sent again where a
   * redirection says), the redirections followed, replies to drop first
   * (ASKING's), and the time a refused batch goes again (0: none). */
  int slot;
  int nsent;
  char *sent[3];
  size_t sent_len[3];
  int redirects;
  int skip;
  int64_t resend_at;
  int64_t parked_us; /* held for a master that waits to reconnect since */
  /* A script call held until the cluster's pub/sub is known (its variant
   * depends on it), formatted and sent then. */
  const dlock__eval *eval_call;
  int eval_body, eval_synced;
};

/* What the application watches for one link of the routing (the one
 * server's, or a cluster node's): its descriptor and, on a cluster with
 * sharded pub/sub, that of its node's pub/sub connection. */
typedef struct dlock__lnode {
  int fd[2];
  int what[2];
  unsigned socket[2];
  dlock__lsub *sub; /* sharded pub/sub on this node, or NULL */
} dlock__lnode;

struct dlock__loop {
  dlock_client_t *c;
  dlock__lsub *sub;
  dlock_socket_cb on_socket;
  dlock_timer_cb on_timer;
  void *data;
  int attached;
  /* What the application watches now besides the links' descriptors
   * ('nodes'): the pub/sub connection's and the Sentinel watcher's
   * (indexed by DLOCK__LOOP_SUB and DLOCK__LOOP_WATCHER), and the timer it
   * was given. */
  int fd[2];
  int what[2];
  unsigned socket[2];
  dlock__watch_io watch; /* what the watcher waits for */
  unsigned watch_steps;
  int64_t timer_at;
  dlock__aop *ops, *ops_tail; /* in progress, oldest first */
  size_t nops;
  dlock__aop *ready, *ready_tail;
  int dispatching; /* inside dlock__loop_action (callbacks may re-enter) */
  int closing;
  int close_requested; /* closed from a callback: freed after the action */
  int64_t renew_at;    /* the watchdog's next round (INT64_MAX: none due) */
  /* Runs a round (async_lock.c), given at the loop's making so that the
   * loop does not call up into the verbs that call it. */
  void (*renew)(dlock__loop *lp);
  int renewing; /* renewals of the round in flight */
  /* What is watched per link (as many as the routing knows), whether
   * the pub/sub was probed (sharded or not), and the reads of the slot
   * map where there is one: due (a link failed), in flight, when, and
   * from which link next. */
  dlock__lnode *nodes;
  int nnodes;
  int probed; /* 0: not asked; 1: asked by 'probe_op'; 2: known */
  dlock__aop *probe_op;
  int refresh_due;
  int mapping;       /* a read of the slot map is in flight */
  int64_t mapped_us; /* when the last one was sent */
  int map_next;      /* the node asked next */
  /* Until when requests are held (see hold in loop.c; 0: none is): every
   * one held meanwhile goes again at that time, oldest operation first. */
  int64_t held_until;
};

/* Makes the loop of async client 'c', whose pub/sub connection finds its
 * server through 'locator' (Sentinel; else NULL: the client's endpoint),
 * and whose watchdog's rounds 'renew' runs. */
int dlock__loop_new(dlock_client_t *c, const dlock__locator *locator,
                    void (*renew)(dlock__loop *lp), dlock__loop **out);

/* Ends every operation with DLOCK_ECANCELED, giving back what was got and
 * not reported (this may wait for answers in flight, a command timeout at
 * most); the application is told to forget the descriptors and timer. */
void dlock__loop_cancel_all(dlock__loop *lp);
/* dlock__loop_cancel_all, then frees the loop. NULL is ignored. */
void dlock__loop_free(dlock__loop *lp);

int dlock__loop_attach(dlock__loop *lp, dlock_socket_cb on_socket,
                       dlock_timer_cb on_timer, void *data);
void dlock__loop_action(dlock__loop *lp, int fd, int events);

/* Adds 'op' (zeroed by the caller but for run and cancel) to the
 * operations in progress; it runs once made ready (dlock__loop_ready, an
 * answer, its time). */
void dlock__loop_add(dlock__loop *lp, dlock__aop *op);
/* Takes 'op' out; the caller frees it. */
void dlock__loop_remove(dlock__aop *op);
/* Runs 'op' at the next action (or the one in progress). */
void dlock__loop_ready(dlock__aop *op);

/* Sends one formatted command for 'op', whose answer makes it ready. 0,
 * or an error with nothing sent. */
int dlock__loop_send(dlock__aop *op, const char *cmd, size_t len);
/* The same for a script call that writes what must reach the replicas
 * (an acquisition, a renewal): EVALSHA, and in the same pipeline the WAIT
 * of replica sync (see dlock_options_t.replica_sync) and, once a second,
 * the INFO replication that counts the replicas. The step that takes the
 * answer calls dlock__loop_eval_answer, which sends the call again with
 * its body on NOSCRIPT. */
int dlock__loop_eval(dlock__aop *op, const dlock__eval *call);
/* The same without replica sync (a release, a give-back). */
int dlock__loop_eval_plain(dlock__aop *op, const dlock__eval *call);
/*
 * The answer to 'op's script call 'call': 0 with '*reply' (the caller's)
 * and, when 'sy' is not NULL, whether the replicas acknowledged it;
 * DLOCK__ACQ_INFLIGHT when something was sent again (the call with its
 * body on NOSCRIPT, or the WAIT once the replicas were counted: the step
 * runs again with that answer); or an error (an error reply as
 * dlock__eval_run says it, with the detail set).
 */
int dlock__loop_eval_answer(dlock__aop *op, const dlock__eval *call,
                            redisReply **reply, dlock__synced *sy);

/* The pub/sub connection that carries 'channel': on a cluster with
 * sharded pub/sub, that of the node serving its slot (made when new);
 * else the client's one. */
dlock__lsub *dlock__loop_sub_for(dlock__loop *lp, const char *channel,
                                 size_t len);

/* Tells the application what to watch after a verb started an
 * operation outside dlock__loop_action. */
void dlock__loop_poke(dlock__loop *lp);

/* ---- what the application watches (loop_watch.c) ----------------------- */

/* Tells the application what to watch now: the descriptors and the timer
 * (the earliest time an operation, the watchdog or a connection needs). */
void dlock__loop_update_watch(dlock__loop *lp);
/* Tells it to forget every descriptor and the timer (at the close). */
void dlock__loop_unwatch(dlock__loop *lp);
/* Services every connection: does what can be done without waiting. */
void dlock__loop_service(dlock__loop *lp);
/* Grows the links watched to as many as the routing knows: 0 or
 * DLOCK_ENOMEM. */
int dlock__loop_know_nodes(dlock__loop *lp);

/* Starts the watchdog's rounds, if they have not started, once a hold
 * with a watchdog was recorded: the next round is due a third of the
 * watchdog's timeout from now. */
void dlock__loop_watch_holds(dlock__loop *lp);

#endif
