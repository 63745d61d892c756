/*
 * The acquisition machine: the one wait for something that is taken, for
 * every lock kind, the semaphores and the latches.
 *
 *   prepare -> attempt -> (taken) -> join the channel -> attempt again
 *                 ^                         |
 *                 |      wait for a wake-up, a hand-over or the holder's
 *                 +----- TTL (pub/sub), or a back-off pause (spin)
 *   finish: leave the channel, take a grant that came late, give up a
 *   queue place; ride an outage within the deadline (an error a failover
 *   causes starts the machine again after a pause).
 *
 * What is being acquired comes as a table of steps (dlock__acq_ops), so
 * that a lock, a semaphore and a latch differ only in those. The states
 * and their transitions are explicit (dlock__acq_step); the only places
 * where a caller blocks are the waits dlock__acq_run makes between the
 * steps, on pub/sub or on the clock.
 */
#ifndef DLOCK_MACHINE_H
#define DLOCK_MACHINE_H

#include "cohort.h"
#include "engine.h"

typedef struct dlock__acq dlock__acq;

typedef struct dlock__acq_ops {
  /* Before the first attempt, and again after an outage pause: settles
   * what an earlier attempt left. NULL: nothing. 0 to go on. */
  int (*prepare)(dlock__acq *m);
  /* One attempt: 0 acquired, 1 taken ('m->busy' and 'm->pass' say more),
   * or an error. 'queue' is 0 for a single try that must leave no
   * trace. */
  int (*attempt)(dlock__acq *m, int queue);
  /* A release handed the thing to this waiter with 'token': as attempt.
   * NULL: a hand-over ends the wait, and the machine with
   * DLOCK__ACQ_HANDED. */
  int (*take_handed)(dlock__acq *m, uint64_t token);
  /* The machine ends with 'why' (not 0) after a hand-over with 'token'
   * came: returns what it ends with instead. NULL: DLOCK__ACQ_HANDED. */
  int (*late_grant)(dlock__acq *m, uint64_t token, int why);
  /* A waiter that tried ends without it: leaves its queue, if any. NULL:
   * nothing. */
  void (*give_up)(dlock__acq *m);
  /* After an attempt whose outcome is unknown: has it settled later.
   * NULL: nothing. */
  void (*unknown)(dlock__acq *m);
  /* An error a failover causes may be ridden (1), having made ready for
   * the next attempt. NULL: always. */
  int (*may_ride)(dlock__acq *m, int rc);
  /* The error of a wait that ran out. */
  int (*timed_out)(dlock__acq *m);
  /* 1 when a waiter that joined a channel with others of its client on
   * it queues behind them without trying (see DLOCK__ACQ_BEHIND). NULL:
   * never. */
  int (*queues_behind)(dlock__acq *m);
} dlock__acq_ops;

/* What the machine ends with when a release inside the client handed the
 * thing to its waiter and the ops take no hand-overs themselves. */
#define DLOCK__ACQ_HANDED 2

/* What an attempt (or a join of the channel) returns when its call went
 * out and its answer comes later, by callback: an event loop's machine.
 * The machine then stops in DLOCK__ACQ_SENT until its driver sets
 * 'pending' to the answer (what the attempt or join would have returned)
 * and steps it again. A blocking machine's calls never return it. */
#define DLOCK__ACQ_INFLIGHT 3

/*
 * The channel a machine that waits by pub/sub waits on. NULL in
 * dlock__acq.chan: the client's own pub/sub connection, where a join
 * waits for Redis's confirmation (the blocking driver). An event loop's
 * machine gives its own, whose join may answer later (INFLIGHT).
 */
typedef struct dlock__acq_chan {
  /* Joins only if the channel is subscribed already: 1 joined (with
   * '*others' the client's other waiters on it), 0 not, or an error. */
  int (*join_active)(dlock__acq *m, int *others);
  /* Joins, subscribing if need be: 0, DLOCK__ACQ_INFLIGHT, or an error. */
  int (*join)(dlock__acq *m, int64_t deadline_us);
  void (*leave)(dlock__acq *m);
  /* Hands a wake-up this waiter cannot use to the next in line. */
  void (*pass)(dlock__acq *m);
  /* The pause before an attempt after a wake-up (cohort.h), for this
   * channel; its waiters' attempts are not noted ('note_attempts' 0). */
  int64_t (*pause)(dlock__acq *m);
} dlock__acq_chan;

/* How a machine waits between its attempts. */
enum dlock__acq_wait {
  DLOCK__ACQ_BY_PUBSUB, /* on a channel, woken by its messages */
  DLOCK__ACQ_BY_BACKOFF /* paused by the spin back-off */
};

/* The states (dlock__acq.state). */
enum dlock__acq_state {
  DLOCK__ACQ_PREPARE, /* settle, join a live channel early */
  DLOCK__ACQ_ATTEMPT, /* one attempt */
  DLOCK__ACQ_JOIN,    /* join the channel, then attempt again */
  DLOCK__ACQ_PLAN,    /* choose how long the next wait lasts */
  DLOCK__ACQ_WAIT,    /* waiting: run by the driver (wake-up or time) */
  DLOCK__ACQ_HOLD,    /* holding back after a wake-up: run by the driver */
  DLOCK__ACQ_FINISH,  /* leave, late grant, give up */
  DLOCK__ACQ_RIDE,    /* pausing through an outage: run by the driver */
  DLOCK__ACQ_SENT,    /* an attempt or a join awaits its answer (INFLIGHT) */
  DLOCK__ACQ_DONE     /* 'rc' is the answer */
};

struct dlock__acq {
  /* What and how, set by dlock__acq_init. */
  const dlock__acq_ops *ops;
  void *arg;
  dlock_client_t *c;
  int64_t wait_ms, deadline_us;
  int wait_by;         /* enum dlock__acq_wait */
  dlock__wake_fn wake; /* how the channel's messages wake (cohort.h) */
  int join_early;      /* join a live channel before the first attempt */
  int pause_if_woken;  /* hold back after a wake-up (contention pause) */
  int note_attempts;   /* report woken attempts' outcomes (contention;
                          the client's pub/sub only) */
  int ride_restarts;   /* an outage restarts from 'prepare', having left */
  char *channel;       /* the channel waited on */
  size_t channel_len;
  int free_channel;            /* ... which the driver frees at the end */
  dlock__waiter w;             /* on the channel, as 'who' */
  dlock__cohort_member who;    /* the caller sets its owner, lease, permits */
  const dlock__acq_chan *chan; /* NULL: the client's pub/sub */

  /* Where it is. */
  int state;
  int rc;
  dlock__busy busy; /* what the latest attempt said */
  int pass;         /* ... and that its wake-up should go to another */
  int64_t tried_us; /* when the latest attempt was sent */
  int64_t until_us; /* the end of the current wait or pause */
  int joined;
  int woken;     /* the wait ended with a wake-up: pause, then attempt */
  int tried;     /* an attempt was made (a queue place may be held) */
  int pending;   /* the wait's outcome, for dlock__acq_step */
  int sent;      /* DLOCK__ACQ_SENT: what awaits its answer (a state) */
  int was_woken; /* the attempt in flight followed a wake-up */
  int waited;    /* it waited for another holder at least once */
  dlock__backoff spin;
  dlock__riding ride; /* riding an outage */
  /* The detail of the failure 'rc' says, kept from when it happened: what
   * runs after it (leaving the channel, giving up a queue place, settling)
   * may fail too, and must not change what the caller is told. The
   * drivers hand it to the caller (dlock_last_error()) at the end. */
  char detail[256];
};

/* The 'ttl_ms' of a machine that has not tried yet. */
#define DLOCK__ACQ_NOT_TRIED INT64_MIN

/* Sets 'm' up to acquire what 'ops' and 'arg' say within 'wait_ms'
 * (DLOCK_WAIT_FOREVER: no end) by 'wait_by', on 'channel' (not copied:
 * set 'free_channel' when the machine is to free it; NULL for a machine
 * that waits by back-off). The caller then sets the flags and the
 * waiter's fields it needs. */
void dlock__acq_init(dlock__acq *m, const dlock__acq_ops *ops, void *arg,
                     dlock_client_t *c, int64_t wait_ms, int wait_by,
                     const char *channel, size_t channel_len);

/* Runs the steps until the machine waits, pauses, awaits an answer or is
 * done; returns its state then (DLOCK__ACQ_WAIT, DLOCK__ACQ_HOLD,
 * DLOCK__ACQ_RIDE, DLOCK__ACQ_SENT or DLOCK__ACQ_DONE), with
 * 'm->until_us' the end of the wait or pause. After a wait, set
 * 'm->pending' to its outcome (as dlock__pubsub_wait's, or 0 when the
 * time ran out) before the next step; after DLOCK__ACQ_SENT, to the
 * answer. */
int dlock__acq_step(dlock__acq *m);

/* Makes the machine's failure the calling thread's dlock_last_error(), as
 * its drivers do once it is done: returns 'm->rc'. */
int dlock__acq_report(const dlock__acq *m);

/* The blocking driver: runs 'm' to the end, waiting where it waits, and
 * frees what it holds. Returns its answer, with its detail set. */
int dlock__acq_run(dlock__acq *m);

#endif
