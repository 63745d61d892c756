/*
 * The verbs of an async client (dlock_trylock_async and its kin): a single
 * lock's acquisition is the acquisition machine (machine.h), the same as
 * a blocking caller's, run by the loop (loop.h) instead of a waiting
 * thread: its attempts go out as requests whose answers come back by
 * callback, it waits on the loop's pub/sub (loopsub.h), and its pauses
 * are the loop's timers. An unlock is the kind's release call sent the
 * same way; the watchdog's renewals are a timer of the loop.
 */
#include "async.h"
#include "loop_acq.h"
#include "observe.h"
#include "proto/format.h"
#include "reply.h"
#include "sem_kinds.h"
#include "watchdog.h"

#include "alloc.h"
#include "error.h"
#include "machine.h"
#include "monotime.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

typedef struct lock_op {
  dlock__lacq a; /* first: an acquisition is a machine run by the loop */
  dlock_t *l;
  uint64_t owner;
  int64_t wait_ms, lease_ms;
  dlock_done_cb cb;
  void *data;
  dlock__call call; /* the attempt or release in flight */
  int has_call;
  int64_t sent_us;
  int shares; /* it shares the lock with the loop's other waiters */
  /* An attempt got no answer, or a grant too few replicas acknowledged,
   * and no later attempt was answered: what it may have taken is given
   * back when the acquisition ends (see "Owing an undo"). */
  int owes_undo;
  /* For the statistics and events: when the acquisition began, and the
   * hold an unlock releases as it was before. */
  int64_t obs_start_us;
  dlock__obs_hold obs_before;
  /* Releasing. */
  int finished, status;
  char detail[256];
  dlock__release r;
  int sends;
  dlock__backoff retry;
  /* A release that hands the lock to a waiter of this loop (handover.c):
   * the waiter, pinned until the answer (NULL once it left: the client
   * is closing), where it waits, and its owner. */
  int handing;
  dlock__lwaiter *next;
  dlock__lsub *next_sub;
  uint64_t next_owner;
  int64_t next_lease;
} lock_op;

static lock_op *of_machine(dlock__acq *m) { return m->arg; }

/* A new lock or unlock ('what') of 'owner' on 'l', which ends by calling
 * 'cb' with 'data'; NULL, with the failure set, when memory is short. */
static lock_op *new_op(dlock_t *l, uint64_t owner, dlock_done_cb cb, void *data,
                       const char *what) {
  lock_op *o = dlock__calloc(1, sizeof(*o));
  if (o == NULL) {
    dlock__fail(DLOCK_ENOMEM, "out of memory starting %s", what);
    return NULL;
  }
  o->l = l;
  o->owner = owner;
  o->cb = cb;
  o->data = data;
  return o;
}

static dlock__loop *loop_of(lock_op *o) { return o->a.op.lp; }

static void drop_call(lock_op *o) {
  if (o->has_call)
    dlock__call_free(&o->call);
  o->has_call = 0;
}

/* Ends the operation with 'status' (its detail is the last failure's);
 * the callback runs at the next run, from the loop. */
static void finish(lock_op *o, int status) {
  o->finished = 1;
  o->status = status;
  snprintf(o->detail, sizeof(o->detail), "%s",
           status != 0 ? dlock_last_error() : "");
  dlock__loop_ready(&o->a.op);
}

/* Runs the callback of a finished operation and frees it; the detail of
 * a failure is set already. */
static void call_back(lock_op *o, int status) {
  drop_call(o);
  dlock_done_cb cb = o->cb;
  dlock_t *l = o->l;
  uint64_t owner = o->owner;
  void *data = o->data;
  dlock__free(o);
  cb(l, owner, status, data);
}

/* The same for an unlock (not a machine), counted as a blocking unlock
 * is. */
static void report(lock_op *o) {
  dlock__loop_remove(&o->a.op);
  if (o->status != 0)
    dlock__fail_text(o->status, o->detail);
  call_back(o, dlock__obs_unlocked(o->l, o->owner, &o->obs_before, o->status));
}

/* ---- fire-and-forget calls ---------------------------------------------- */

/* A script call whose answer nobody waits for: the give-back of an
 * attempt that got no answer, a fair waiter leaving its queue. Its answer
 * is dropped (NOSCRIPT: sent again with the body). */
typedef struct detached {
  dlock__aop op;
  dlock__call call;
  dlock__release r;
} detached;

static void detached_run(dlock__aop *op) {
  detached *d = (detached *)op;
  redisReply *reply = NULL;
  int rc = dlock__loop_eval_answer(op, &d->call.eval, &reply, NULL);
  if (rc == DLOCK__ACQ_INFLIGHT)
    return;
  if (reply != NULL)
    freeReplyObject(reply);
  dlock__call_free(&d->call);
  dlock__release_end(&d->r);
  dlock__loop_remove(op);
  dlock__free(d);
}

static void detached_cancel(dlock__aop *op) {
  detached *d = (detached *)op;
  dlock__call_free(&d->call);
  dlock__release_end(&d->r);
  dlock__loop_remove(op);
  dlock__free(d);
}

/* Sends the call that 'build' makes into 'd' (already set up), detached. */
static void send_detached(dlock__loop *lp, detached *d) {
  d->op.run = detached_run;
  d->op.cancel = detached_cancel;
  dlock__loop_add(lp, &d->op);
  if (dlock__loop_eval_plain(&d->op, &d->call.eval) != 0)
    detached_cancel(&d->op);
}

/* Gives back what an attempt of 'owner' that got no answer may have
 * taken, with 'believed' holds before it (as dlock__undo, detached). */
static void undo_detached(dlock__loop *lp, dlock_t *l, uint64_t owner,
                          int64_t believed) {
  detached *d = dlock__calloc(1, sizeof(*d));
  if (d == NULL)
    return;
  dlock__call_init(&d->call);
  int rc;
  if (believed == 0 && l->kind->leave_call != NULL) {
    rc = l->kind->leave_call(l, owner, 0, &d->call);
  } else {
    rc = dlock__undo_begin(l, owner, believed, &d->r);
    if (rc == 0)
      rc = l->kind->release_call(l, owner, &d->r, &d->call);
  }
  if (rc != 0) {
    dlock__call_free(&d->call);
    dlock__release_end(&d->r);
    dlock__free(d);
    return;
  }
  send_detached(lp, d);
}

static void leave_detached(dlock__loop *lp, dlock_t *l, uint64_t owner) {
  if (l->kind->leave_call == NULL)
    return;
  detached *d = dlock__calloc(1, sizeof(*d));
  if (d == NULL)
    return;
  dlock__call_init(&d->call);
  if (l->kind->leave_call(l, owner, dlock__believed_count(l, owner),
                          &d->call) != 0) {
    dlock__call_free(&d->call);
    dlock__free(d);
    return;
  }
  send_detached(lp, d);
}

void dlock__async_raise_token(dlock__loop *lp, dlock_t *part, uint64_t token) {
  detached *d = dlock__calloc(1, sizeof(*d));
  if (d == NULL)
    return;
  dlock__call_init(&d->call);
  size_t n = dlock__fmt_u64(d->call.num[0], token);
  const char *argv[] = {part->token_key, d->call.num[0]};
  const size_t lens[] = {part->token_key_len, n};
  dlock__call_set(&d->call, &dlock__script_raise_token, 1, argv, lens, 2);
  send_detached(lp, d);
}

/* ---- the machine's steps ------------------------------------------------ */

/*
 * Owing an undo ('owes_undo'). What an attempt without an answer may have
 * taken is given back once the acquisition ends without the lock, not at
 * once. The machine tries again after an outage pause, and an undo sent
 * meanwhile could reach Redis after that next attempt (a request held for
 * a master that fails over goes when the map is read again), and take
 * back the grant it got. The next attempt needs no undo before it: it
 * sets the owner's count from the client's.
 */

/* Before an attempt: a hold found lost is reported (no round trip). */
static int a_prepare(dlock__acq *m) {
  lock_op *o = of_machine(m);
  dlock_client_t *c = o->l->c;
  pthread_mutex_lock(&c->mu);
  dlock__hold *h = dlock__holds_find(&c->holds, o->l->name, o->l->len, o->owner,
                                     o->l->kind->id);
  int lost = h != NULL && h->lost;
  pthread_mutex_unlock(&c->mu);
  return lost ? dlock__lost_error(o->l) : 0;
}

static int a_attempt(dlock__acq *m, int queue) {
  lock_op *o = of_machine(m);
  dlock_t *l = o->l;
  dlock__ask ask = {o->owner, o->lease_ms, dlock__believed_count(l, o->owner),
                    queue};
  drop_call(o);
  dlock__call_init(&o->call);
  o->has_call = 1;
  int rc = l->kind->acquire_call(l, &ask, &o->call);
  o->sent_us = dlock__now_us();
  if (rc == 0)
    rc = dlock__loop_eval(&o->a.op, &o->call.eval);
  if (rc != 0) {
    drop_call(o);
    return rc;
  }
  return DLOCK__ACQ_INFLIGHT;
}

/* The answer to the attempt in flight: what the attempt returns. */
static int attempt_answer(dlock__lacq *a) {
  lock_op *o = (lock_op *)a;
  redisReply *reply;
  dlock__synced sy;
  int rc = dlock__loop_eval_answer(&o->a.op, &o->call.eval, &reply, &sy);
  if (rc == DLOCK__ACQ_INFLIGHT)
    return rc;
  drop_call(o);
  if (rc != 0)
    return rc;
  /* An answer supersedes an earlier attempt that got none: the scripts
   * set the owner's count from the client's, so what that one may have
   * taken is now either this grant or gone. */
  o->owes_undo = 0;
  dlock__acquired got;
  if (!sy.ok && dlock__decode_acquire(reply, &got) == 0 && got.held) {
    /* Granted on the master only: not reported held, and given back (the
     * owner's holds set back to what it had) unless an attempt after it
     * is answered. */
    freeReplyObject(reply);
    o->owes_undo = 1;
    return dlock__sync_fail(o->l->c, &sy, "lock", o->l->name, o->l->len);
  }
  rc = dlock__finish_acquire(o->l, o->owner, o->lease_ms, reply, o->sent_us,
                             &o->a.m.busy);
  if (rc == 0 && o->lease_ms == DLOCK_WATCHDOG)
    dlock__loop_watch_holds(loop_of(o));
  return rc;
}

static int a_take_handed(dlock__acq *m, uint64_t token) {
  lock_op *o = of_machine(m);
  if (o->l->kind->handed == NULL ||
      o->l->kind->handed(o->l, o->lease_ms) == DLOCK__HANDED_RETAKE)
    return a_attempt(m, 1);
  int rc = dlock__record_grant(o->l, o->owner, o->lease_ms, token, m->tried_us);
  if (rc == 0 && o->lease_ms == DLOCK_WATCHDOG)
    dlock__loop_watch_holds(loop_of(o));
  return rc;
}

/* A hand-over that came as the wait ended: taken when the wait ran out
 * (as a last attempt would have), given back by the queue's leave
 * otherwise (give_up follows). */
static int a_late_grant(dlock__acq *m, uint64_t token, int why) {
  lock_op *o = of_machine(m);
  if (why != DLOCK_ETIMEDOUT || o->l->kind->handed == NULL ||
      o->l->kind->handed(o->l, o->lease_ms) != DLOCK__HANDED_RECORD)
    return why;
  return dlock__record_grant(o->l, o->owner, o->lease_ms, token, m->tried_us) ==
                 0
             ? 0
             : why;
}

static void a_give_up(dlock__acq *m) {
  lock_op *o = of_machine(m);
  leave_detached(loop_of(o), o->l, o->owner);
}

static void a_unknown(dlock__acq *m) {
  lock_op *o = of_machine(m);
  o->owes_undo = 1;
}

static int a_timed_out(dlock__acq *m) {
  lock_op *o = of_machine(m);
  return dlock__lock_timed_out(o->l, o->wait_ms);
}

/* A new waiter that shares the lock (see dlock__async_acquire) queues
 * behind the loop's waiters rather than try ahead of them, unless it
 * holds the lock: as a blocking waiter does behind its client's threads. */
static int a_queues_behind(dlock__acq *m) {
  lock_op *o = of_machine(m);
  return o->shares && dlock__believed_count(o->l, o->owner) == 0;
}

static const dlock__acq_ops async_lock_ops = {
    .prepare = a_prepare,
    .attempt = a_attempt,
    .take_handed = a_take_handed,
    .late_grant = a_late_grant,
    .give_up = a_give_up,
    .unknown = a_unknown,
    .timed_out = a_timed_out,
    .queues_behind = a_queues_behind,
};

static void lock_report(dlock__lacq *a, int status) {
  lock_op *o = (lock_op *)a;
  /* Not granted, so the owner's count is still what it was when the
   * attempt went out: the undo sets its holds back to that. */
  if (o->owes_undo && status != 0)
    undo_detached(loop_of(o), o->l, o->owner,
                  dlock__believed_count(o->l, o->owner));
  o->owes_undo = 0;
  /* Counted and raised as a blocking acquisition is, from the loop. */
  status = dlock__obs_acquired(o->l, o->owner, o->wait_ms, o->obs_start_us,
                               a->m.waited, status);
  call_back(o, status);
}

/* At the close: a grant not reported, or an answer not taken, is given
 * back; an attempt in flight is settled later; a queue place is left. */
static void lock_give_back(dlock__lacq *a, int granted, int answered,
                           int unknown, int queued) {
  lock_op *o = (lock_op *)a;
  if (answered && o->has_call) {
    redisReply *reply;
    if (dlock__loop_eval_answer(&a->op, &o->call.eval, &reply, NULL) == 0)
      granted = dlock__finish_acquire(o->l, o->owner, o->lease_ms, reply,
                                      o->sent_us, &a->m.busy) == 0;
  }
  if (unknown || o->owes_undo)
    dlock__note_unsettled(o->l, o->owner);
  o->owes_undo = 0;
  if (queued)
    (void)dlock__leave_queue(o->l, o->owner);
  if (granted)
    (void)dlock__release_hold(o->l, o->owner);
}

static const dlock__lacq_ops lock_lacq_ops = {attempt_answer, lock_report,
                                              lock_give_back};

int dlock__async_acquire(dlock__loop *lp, dlock_t *l, uint64_t owner,
                         int64_t wait_ms, int64_t lease_ms, int cohort,
                         dlock_done_cb cb, void *data) {
  lock_op *o = new_op(l, owner, cb, data, "a lock");
  if (o == NULL)
    return DLOCK_ENOMEM;
  o->wait_ms = wait_ms;
  o->lease_ms = lease_ms;
  o->obs_start_us = dlock__obs_start(l);
  char *channel = l->channel;
  size_t channel_len = l->channel_len;
  int by_pubsub = l->kind->wait_by == DLOCK__WAIT_PUBSUB;
  if (by_pubsub && wait_ms != 0 && l->kind->wait_channel != NULL) {
    int rc = l->kind->wait_channel(l, owner, &channel, &channel_len);
    if (rc != 0) {
      dlock__free(o);
      return rc;
    }
  }
  dlock__acq *m = &o->a.m;
  dlock__acq_init(m, &async_lock_ops, o, l->c, wait_ms,
                  by_pubsub ? DLOCK__ACQ_BY_PUBSUB : DLOCK__ACQ_BY_BACKOFF,
                  channel, channel_len);
  m->free_channel = channel != l->channel;
  m->wake = dlock__wake_lock;
  m->join_early = 1;
  m->ride_restarts = 1;
  /* A waiter of a kind that takes hand-overs inside the client says the
   * lease it wants, and holds back after its loop's run of them
   * (cohort.h). */
  int shares = o->shares = cohort && l->kind->no_barging;
  m->pause_if_woken = shares;
  m->who.owner = owner;
  m->who.lease_ms = shares ? lease_ms : 0;
  dlock__lacq_start(lp, &o->a, &lock_lacq_ops);
  return 0;
}

/* ---- unlocking ---------------------------------------------------------- */

/* ---- handing the lock to a waiter of the loop ---------------------------
 */

/* Ends the pin of the waiter the release chose with 'outcome' and
 * 'token'. One that left already (the client is closing) cannot take up
 * the hand-over: the lock it was handed is released now (the close may
 * block), and one that may have been handed it is settled later, as after
 * an attempt without an answer. */
static void resolve_next(lock_op *o, uint64_t token, int outcome,
                         int may_have_run) {
  o->handing = 0;
  if (o->next != NULL) {
    dlock__lwaiter *w = o->next;
    o->next = NULL;
    dlock__cohort_loop_resolve(o->next_sub, w, token, outcome);
  } else if (token != 0 &&
             dlock__record_grant(o->l, o->next_owner, o->next_lease, token,
                                 dlock__now_us()) == 0) {
    (void)dlock__release_hold(o->l, o->next_owner);
  } else if (token != 0 || may_have_run) {
    dlock__note_unsettled(o->l, o->next_owner);
  }
}

/* The hand-over's answer ('rc', and 'reply' when 0) applied: the unlock's
 * result. */
static int handover_answered(lock_op *o, int rc, redisReply *reply) {
  uint64_t token = 0;
  int outcome = DLOCK__RESOLVE_FAILED;
  if (rc == 0) {
    rc = dlock__handover_answered(o->l, o->owner, &o->r, reply, &token,
                                  &outcome);
  } else if (o->r.lost) {
    rc = dlock__release_apply(o->l, o->owner, 0, &o->r);
  } else {
    dlock__release_failed(o->l, o->owner);
  }
  /* No answer: the script may have run, and handed it over. */
  resolve_next(o, token, outcome,
               token != 0 || (rc != 0 && dlock__outcome_unknown(rc)));
  return rc;
}

/* Makes the release 'o' (begun, its call not built) a hand-over to the
 * first waiter of the loop asleep on the lock's channel, if the rules of
 * handover.c allow one: 1 when it is, 0 when the release goes as usual. */
static int plan_handover(dlock__loop *lp, lock_op *o) {
  dlock_t *l = o->l;
  if (!dlock__handover_eligible(l, &o->r))
    return 0;
  dlock__lsub *sub = dlock__loop_sub_for(lp, l->channel, l->channel_len);
  int at_cap;
  dlock__lwaiter *next =
      dlock__cohort_loop_reserve(sub, l->channel, l->channel_len, o->owner,
                                 DLOCK__HANDOVER_RUN_MAX, &at_cap, &o->next);
  if (next == NULL)
    return 0;
  const dlock__cohort_member *to = next->owner_data;
  o->handing = 1;
  o->next_sub = sub;
  o->next_owner = to->owner;
  o->next_lease = to->lease_ms;
  if (dlock__handover_call(l, o->owner, &o->r, to->owner, to->lease_ms, at_cap,
                           &o->call) != 0) {
    resolve_next(o, 0, DLOCK__RESOLVE_FAILED, 0);
    dlock__call_free(&o->call);
    dlock__call_init(&o->call);
    return 0;
  }
  return 1;
}

static void release_run(dlock__aop *op) {
  lock_op *o = (lock_op *)op;
  dlock_t *l = o->l;
  if (o->finished) {
    report(o);
    return;
  }
  if (op->at_us != INT64_MAX || op->in_flight)
    return;
  if (o->sends == 0 || (op->reply == NULL && op->err == 0)) {
    /* The retry's pause is over: the same call, the same latch. */
    o->sends++;
    int rc = dlock__loop_eval_plain(op, &o->call.eval);
    if (rc != 0) {
      dlock__release_failed(l, o->owner);
      dlock__release_end(&o->r);
      if (o->handing)
        resolve_next(o, 0, DLOCK__RESOLVE_FAILED, o->sends > 1);
      finish(o, rc);
    }
    return;
  }
  redisReply *reply;
  int rc = dlock__loop_eval_answer(op, &o->call.eval, &reply, NULL);
  if (rc == DLOCK__ACQ_INFLIGHT)
    return;
  if (rc == DLOCK_EIO && !o->r.lost && o->sends <= l->c->opt.unlock_retries) {
    /* A lost reply: sent again after a pause, with the same latch, so
     * that a copy that ran answers the same. */
    op->err = 0;
    op->at_us =
        dlock__backoff_next(l->c, &o->retry, dlock__now_us(), INT64_MAX);
    return;
  }
  if (o->handing) {
    rc = handover_answered(o, rc, reply);
  } else if (rc != 0 && o->r.lost) {
    rc = dlock__release_apply(l, o->owner, 0, &o->r);
  } else if (rc != 0) {
    dlock__release_failed(l, o->owner);
  } else {
    rc = dlock__finish_release(l, o->owner, reply, &o->r);
  }
  dlock__release_end(&o->r);
  finish(o, rc);
}

static void release_cancel(dlock__aop *op) {
  lock_op *o = (lock_op *)op;
  if (!o->finished) {
    /* Its answer may have come: applied, else the unlock stays unknown
     * and the hold is left to expire, as after an unlock without an
     * answer. */
    redisReply *reply;
    int answered =
        !op->in_flight && o->sends > 0 &&
        dlock__loop_eval_answer(op, &o->call.eval, &reply, NULL) == 0;
    if (o->handing) {
      /* The waiter is closing too: whatever the answer, it takes up
       * nothing now, and a hand-over that may have run is settled. */
      uint64_t token = 0;
      int outcome = DLOCK__RESOLVE_FAILED;
      if (answered)
        (void)dlock__handover_answered(o->l, o->owner, &o->r, reply, &token,
                                       &outcome);
      else
        dlock__release_failed(o->l, o->owner);
      if (o->next != NULL) {
        o->next->pin = NULL;
        o->next = NULL;
      }
      resolve_next(o, token, outcome, !answered && o->sends > 0);
    } else if (answered) {
      (void)dlock__finish_release(o->l, o->owner, reply, &o->r);
    } else {
      dlock__release_failed(o->l, o->owner);
    }
    dlock__release_end(&o->r);
  }
  o->finished = 1;
  o->status = dlock__fail(DLOCK_ECANCELED, "the client was closed");
  snprintf(o->detail, sizeof(o->detail), "%s", dlock_last_error());
  report(o);
}

int dlock__async_release(dlock__loop *lp, dlock_t *l, uint64_t owner,
                         int cohort, dlock_done_cb cb, void *data) {
  lock_op *o = new_op(l, owner, cb, data, "an unlock");
  if (o == NULL)
    return DLOCK_ENOMEM;
  dlock__backoff retry = DLOCK__BACKOFF_RETRY;
  o->retry = retry;
  dlock__obs_peek(l, owner, &o->obs_before);
  int rc = dlock__release_begin(l, owner, &o->r);
  if (rc == 0) {
    dlock__call_init(&o->call);
    o->has_call = 1;
    if (!(cohort && plan_handover(lp, o)))
      rc = l->kind->release_call(l, owner, &o->r, &o->call);
    if (rc != 0)
      dlock__release_failed(l, owner);
  }
  if (rc != 0) {
    dlock__release_end(&o->r);
    drop_call(o);
    dlock__free(o);
    return rc;
  }
  o->a.op.run = release_run;
  o->a.op.cancel = release_cancel;
  dlock__loop_add(lp, &o->a.op);
  release_run(&o->a.op);
  dlock__loop_poke(lp);
  return 0;
}

/* ---- the watchdog ------------------------------------------------------- */

/* One hold's renewal, sent as its own script call: the loop's requests
 * travel together anyway (group writes). */
typedef struct renew_op {
  dlock__aop op;
  dlock__renewal it;
  char lease[24];
  const char *argv[4];
  size_t lens[4];
  dlock__eval call;
  int64_t sent_us;
} renew_op;

static void renew_free(renew_op *r) {
  dlock__loop_remove(&r->op);
  dlock__renewal_free(&r->it);
  dlock__free(r);
}

static void renew_run(dlock__aop *op) {
  renew_op *r = (renew_op *)op;
  redisReply *reply;
  dlock__synced sy;
  int rc = dlock__loop_eval_answer(op, &r->call, &reply, &sy);
  if (rc == DLOCK__ACQ_INFLIGHT)
    return;
  /* A renewal the replicas did not acknowledge confirms nothing: the hold
   * is lost only when its lease runs out unconfirmed. */
  if (rc == 0 && !sy.ok) {
    freeReplyObject(reply);
    reply = NULL;
    rc = DLOCK_ENOSYNC;
  }
  int renewed = rc == 0 && reply->type == REDIS_REPLY_ARRAY &&
                reply->elements == 1 &&
                reply->element[0]->type == REDIS_REPLY_INTEGER &&
                reply->element[0]->integer == 1;
  if (reply != NULL)
    freeReplyObject(reply);
  dlock_client_t *c = op->lp->c;
  int lost = 0;
  pthread_mutex_lock(&c->mu);
  dlock__hold *h = dlock__holds_find(&c->holds, r->it.name, r->it.name_len,
                                     r->it.owner, r->it.kind);
  if (h != NULL && h->seq == r->it.seq && !h->lost) {
    if (renewed)
      h->confirmed_us = r->sent_us;
    else if (h->releasing == 0 &&
             (rc == 0 || dlock__now_us() - h->confirmed_us >=
                             dlock__ms_to_us(c->opt.watchdog_timeout_ms)))
      lost = h->lost = 1;
  }
  pthread_mutex_unlock(&c->mu);
  if (lost && c->opt.on_lost != NULL)
    c->opt.on_lost(c->opt.on_lost_data, r->it.name, r->it.name_len,
                   r->it.owner);
  renew_free(r);
}

static void renew_cancel(dlock__aop *op) { renew_free((renew_op *)op); }

typedef struct collect {
  dlock__loop *lp;
  size_t n;
} collect;

/* Sends the renewal of hold 'h' (with the client's mutex held). */
static void renew_one(dlock__hold *h, void *arg) {
  collect *col = arg;
  dlock__loop *lp = col->lp;
  dlock_client_t *c = lp->c;
  if (!h->watchdog || h->lost ||
      (h->kind != DLOCK_REENTRANT && h->kind != DLOCK_FAIR &&
       h->kind != DLOCK_READ && h->kind != DLOCK_WRITE &&
       h->kind != DLOCK_SPIN && h->kind != DLOCK_NONREENTRANT &&
       h->kind != DLOCK_NONREENTRANT_FAIR && h->kind != DLOCK__KIND_PERMIT))
    return;
  col->n++;
  renew_op *r = dlock__calloc(1, sizeof(*r));
  if (r == NULL || dlock__renewal_of(c, h, &r->it) != 0) {
    dlock__free(r);
    return;
  }
  snprintf(r->lease, sizeof(r->lease), "%" PRId64, c->opt.watchdog_timeout_ms);
  /* A permit's key is the zset "{name}:timeout", not the semaphore; a read
   * hold's script also has "{name}", where its timeout keys live. */
  int n = 0;
  r->argv[n] = h->kind == DLOCK__KIND_PERMIT ? r->it.prefix : r->it.name;
  r->lens[n++] =
      h->kind == DLOCK__KIND_PERMIT ? r->it.prefix_len : r->it.name_len;
  if (h->kind == DLOCK_READ) {
    r->argv[n] = r->it.prefix;
    r->lens[n++] = r->it.prefix_len;
  }
  int nkeys = n;
  r->argv[n] = r->lease;
  r->lens[n++] = strlen(r->lease);
  r->argv[n] = r->it.field;
  r->lens[n++] = r->it.field_len;
  r->call =
      (dlock__eval){h->kind == DLOCK_READ           ? &dlock__script_renew_read
                    : h->kind == DLOCK__KIND_PERMIT ? &dlock__script_psem_renew
                                                    : &dlock__script_renew,
                    nkeys, 2, r->argv, r->lens};
  r->op.run = renew_run;
  r->op.cancel = renew_cancel;
  dlock__loop_add(lp, &r->op);
  r->sent_us = dlock__now_us();
  if (dlock__loop_eval(&r->op, &r->call) != 0)
    renew_free(r);
}

void dlock__async_renew(dlock__loop *lp) {
  dlock_client_t *c = lp->c;
  collect col = {lp, 0};
  pthread_mutex_lock(&c->mu);
  dlock__holds_each(&c->holds, renew_one, &col);
  pthread_mutex_unlock(&c->mu);
  lp->renew_at = col.n > 0 ? dlock__after_ms(dlock__now_us(),
                                             c->opt.watchdog_timeout_ms / 3)
                           : INT64_MAX;
}
