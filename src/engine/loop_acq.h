/*
 * The acquisition machine (machine.h) run by an async client's loop: the
 * same machine a blocking caller runs, its waits made of the loop's
 * timers and pub/sub (loopsub.h), its attempts requests whose answers
 * come back by callback. What is acquired (a lock, a semaphore's permits,
 * a latch's zero) gives the machine's ops, whose attempt sends its call
 * and returns DLOCK__ACQ_INFLIGHT, and these:
 */
#ifndef DLOCK_LOOP_ACQ_H
#define DLOCK_LOOP_ACQ_H

#include "loop.h"
#include "machine.h"

typedef struct dlock__lacq dlock__lacq;

typedef struct dlock__lacq_ops {
  /* The answer to the attempt in flight (in the operation's reply): what
   * the attempt returns, or DLOCK__ACQ_INFLIGHT when it was sent again. */
  int (*answer)(dlock__lacq *a);
  /* Ends it with 'status' (the last failure's detail is set): calls the
   * user's callback and frees 'a'. Runs from the loop. */
  void (*report)(dlock__lacq *a, int status);
  /* At the client's close, before DLOCK_ECANCELED is reported: gives back
   * what it may hold. 'granted': the machine ended with a grant not yet
   * reported; 'answered': an attempt's answer came and was not taken;
   * 'unknown': an attempt is in flight, or a release of the client handed
   * it the lock and it did not take it up yet; 'queued': it may hold a queue
   * place. May block (the close may). */
  void (*give_back)(dlock__lacq *a, int granted, int answered, int unknown,
                    int queued);
} dlock__lacq_ops;

struct dlock__lacq {
  dlock__aop op; /* first: the loop's view of it */
  const dlock__lacq_ops *ops;
  dlock__acq m; /* 'm.arg' is this struct (or the one it begins) */
  dlock__lwaiter lw;
  dlock__lsub *sub; /* where 'lw' joined (dlock__loop_sub_for) */
  int rejoin;       /* the channel moved: join it again where it is */
  int rejoining;    /* ... and that join's answer is awaited */
  int wake_ev;      /* a wake-up kept until the machine waits */
  int join_done;    /* the join's answer came: 'join_ev' */
  int join_ev;
  int finished, status;
  char detail[256];
};

/* The lacq whose machine 'm' is. */
static inline dlock__lacq *dlock__lacq_of(dlock__acq *m) {
  return (dlock__lacq *)m->arg;
}

/* Starts 'a', whose machine the caller set up (dlock__acq_init with 'a'
 * as its arg, and its flags): the first attempt goes out now, and
 * whatever it ends with is reported from the loop. */
void dlock__lacq_start(dlock__loop *lp, dlock__lacq *a,
                       const dlock__lacq_ops *ops);

#endif
