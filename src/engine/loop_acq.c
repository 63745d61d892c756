/*
 * The acquisition machine run by an async client's loop (see
 * loop_acq.h): its channel on the loop's pub/sub, and the step that the
 * loop runs whenever an answer, a wake-up or a time comes.
 */
#include "loop_acq.h"

#include "alloc.h"
#include "error.h"
#include "monotime.h"

#include <stdio.h>

/* ---- the channel: the loop's pub/sub ------------------------------------ */

static void on_channel(dlock__lwaiter *w, int ev) {
  dlock__lacq *a = w->arg;
  if (ev == 3) {
    a->rejoin = 1;
    dlock__loop_ready(&a->op);
    return;
  }
  if (ev == 4) {
    /* Its pin ended with nothing for it: its time may have come meanwhile. */
    if (a->m.state == DLOCK__ACQ_WAIT)
      dlock__loop_ready(&a->op);
    return;
  }
  if (ev <= 0 && a->rejoining) {
    a->rejoining = 0; /* looked again already (see rejoin) */
    return;
  }
  if (ev <= 0) {
    a->join_done = 1;
    a->join_ev = ev;
    dlock__loop_ready(&a->op);
    return;
  }
  if (ev > a->wake_ev)
    a->wake_ev = ev;
  if (a->m.state == DLOCK__ACQ_WAIT) {
    a->op.at_us = INT64_MAX;
    dlock__loop_ready(&a->op);
  }
}

/* The pub/sub connection the machine's channel is on: chosen at its
 * join (a cluster's sharded channel is on its slot's node), and kept. */
static dlock__lsub *sub_of(dlock__lacq *a) {
  if (a->sub == NULL)
    a->sub = dlock__loop_sub_for(a->op.lp, a->m.channel, a->m.channel_len);
  return a->sub;
}

static int chan_join_active(dlock__acq *m, int *others) {
  dlock__lacq *a = dlock__lacq_of(m);
  a->rejoining = 0; /* this join's answer is the machine's */
  return dlock__lsub_join(sub_of(a), m->channel, m->channel_len, m->wake, 0,
                          &a->lw, 1, others);
}

static int chan_join(dlock__acq *m, int64_t deadline_us) {
  dlock__lacq *a = dlock__lacq_of(m);
  a->rejoining = 0; /* this join's answer is the machine's */
  int rc = dlock__lsub_join(sub_of(a), m->channel, m->channel_len, m->wake,
                            deadline_us, &a->lw, 0, NULL);
  return rc == 1 ? 0 : rc == 0 ? DLOCK__ACQ_INFLIGHT : rc;
}

static void chan_leave(dlock__acq *m) {
  dlock__lacq *a = dlock__lacq_of(m);
  /* A wake-up it got and did not use (it ends with the thing taken by an
   * attempt of its own, or out of time) goes to the next waiter, who
   * would otherwise sleep until the holder's TTL. */
  if (a->wake_ev == 1)
    dlock__lsub_pass(sub_of(a), &a->lw);
  /* A hand-over that came after the wait ended is the machine's late
   * grant (see finish in machine.c). */
  if (a->wake_ev == 2)
    m->w.value = a->lw.value;
  dlock__lsub_leave(sub_of(a), &a->lw);
  /* A join after this one looks again (the slot may have moved), and its
   * answer is the machine's. */
  a->sub = NULL;
  a->rejoining = 0;
  a->wake_ev = 0;
}

static void chan_pass(dlock__acq *m) {
  dlock__lacq *a = dlock__lacq_of(m);
  dlock__lsub_pass(sub_of(a), &a->lw);
}

static int64_t chan_pause(dlock__acq *m) {
  dlock__lacq *a = dlock__lacq_of(m);
  return dlock__cohort_loop_pause(sub_of(a), &a->lw);
}

static const dlock__acq_chan loop_chan = {chan_join_active, chan_join,
                                          chan_leave, chan_pass, chan_pause};

/* ---- running the machine ------------------------------------------------ */

/* Ends it with 'status'; the report runs at the next run, from the loop. */
static void finish(dlock__lacq *a, int status) {
  dlock__acq *m = &a->m;
  if (m->free_channel)
    dlock__free(m->channel);
  m->channel = NULL;
  a->finished = 1;
  a->status = status;
  snprintf(a->detail, sizeof(a->detail), "%s",
           status != 0 ? dlock_last_error() : "");
  dlock__loop_ready(&a->op);
}

static void report(dlock__lacq *a) {
  dlock__loop_remove(&a->op);
  if (a->status != 0)
    dlock__fail_text(a->status, a->detail);
  a->ops->report(a, a->status);
}

/* The wake-up kept for the machine, taken. */
static int take_wake(dlock__lacq *a) {
  int ev = a->wake_ev;
  a->wake_ev = 0;
  a->lw.awake = 0;
  a->m.w.taken = ev == 2 ? a->lw.value : 0;
  return ev;
}

/* Steps the machine until it waits for something: an answer, a wake-up
 * or a time. */
static void drive(dlock__lacq *a) {
  dlock__acq *m = &a->m;
  for (;;) {
    switch (dlock__acq_step(m)) {
    case DLOCK__ACQ_DONE:
      finish(a, dlock__acq_report(m));
      return;
    case DLOCK__ACQ_SENT:
      return;
    case DLOCK__ACQ_WAIT:
      if (m->joined && a->wake_ev != 0) {
        m->pending = take_wake(a);
        continue;
      }
      a->op.at_us = m->wait_by == DLOCK__ACQ_BY_BACKOFF
                        ? dlock__backoff_next(m->c, &m->spin, dlock__now_us(),
                                              m->until_us)
                        : m->until_us;
      return;
    default: /* HOLD, RIDE: a pause */
      a->op.at_us = m->until_us;
      return;
    }
  }
}

/* What the machine was waiting for came: 0 to step on, 1 not yet. */
static int take_event(dlock__lacq *a) {
  dlock__acq *m = &a->m;
  switch (m->state) {
  case DLOCK__ACQ_SENT:
    if (m->sent == DLOCK__ACQ_JOIN) {
      if (!a->join_done)
        return 1;
      a->join_done = 0;
      m->pending = a->join_ev;
      return 0;
    }
    if (a->op.in_flight)
      return 1;
    m->pending = a->ops->answer(a);
    return m->pending == DLOCK__ACQ_INFLIGHT;
  case DLOCK__ACQ_WAIT:
    /* Pinned by a release handing it the lock: it stays for the outcome,
     * whatever came meanwhile (kept), even past its deadline. */
    if (a->lw.pin != NULL)
      return 1;
    if (a->wake_ev != 0)
      m->pending = take_wake(a);
    else if (a->op.at_us != INT64_MAX)
      return 1; /* not its time yet */
    else
      m->pending = 0;
    a->op.at_us = INT64_MAX;
    return 0;
  case DLOCK__ACQ_HOLD:
  case DLOCK__ACQ_RIDE:
    return a->op.at_us != INT64_MAX;
  default:
    return 0;
  }
}

/* The channel moved to another node (its slot did): the waiter leaves
 * it and joins it where the map now says it is, and makes an attempt,
 * since a release may have come in between. Until the new join is
 * answered, messages may be missed: the attempt and the TTL cover that. */
static void rejoin(dlock__lacq *a) {
  dlock__acq *m = &a->m;
  a->rejoin = 0;
  if (a->lw.ch == NULL || m->channel == NULL)
    return;
  dlock__lsub_leave(sub_of(a), &a->lw);
  a->sub = NULL;
  a->op.lp->refresh_due = 1;
  int64_t by = dlock__deadline_ms(a->op.lp->c->opt.command_timeout_ms);
  int rc = dlock__lsub_join(sub_of(a), m->channel, m->channel_len, m->wake, by,
                            &a->lw, 0, NULL);
  if (m->state == DLOCK__ACQ_SENT && m->sent == DLOCK__ACQ_JOIN) {
    /* Its first join, still unanswered: answered by this one. */
    if (rc != 0) {
      a->join_done = 1;
      a->join_ev = rc == 1 ? 0 : rc;
    }
    return;
  }
  a->rejoining = rc == 0;
  if (a->wake_ev == 0)
    a->wake_ev = 1;
  if (m->state == DLOCK__ACQ_WAIT)
    a->op.at_us = INT64_MAX;
}

/* Says whether the machine sleeps on its channel now, where a release in
 * the loop may pin it (cohort.h): after every step the loop runs. */
static void note_parked(dlock__lacq *a) {
  a->lw.parked = !a->finished && a->m.state == DLOCK__ACQ_WAIT && a->m.joined;
}

static void lacq_run(dlock__aop *op) {
  dlock__lacq *a = (dlock__lacq *)op;
  /* A pinned waiter moves once its pin ends. */
  if (a->rejoin && !a->finished && a->lw.pin == NULL)
    rejoin(a);
  if (a->finished) {
    report(a);
    return;
  }
  if (take_event(a) == 0)
    drive(a);
  note_parked(a);
}

/* At the client's close: whatever the machine has is given back, and the
 * callback told DLOCK_ECANCELED. */
static void lacq_cancel(dlock__aop *op) {
  dlock__lacq *a = (dlock__lacq *)op;
  dlock__acq *m = &a->m;
  int attempt =
      !a->finished && m->state == DLOCK__ACQ_SENT && m->sent != DLOCK__ACQ_JOIN;
  /* A hand-over it was told of and has not taken up: the lock is its
   * owner's in Redis, as after an attempt without an answer. (Still
   * pinned, it is left to the release, which learns of it here.) */
  int handed = !a->finished && a->wake_ev == 2 && m->who.lease_ms != 0;
  if (a->lw.ch != NULL)
    dlock__lsub_leave(sub_of(a), &a->lw);
  a->ops->give_back(a, a->finished && a->status == 0, attempt && !op->in_flight,
                    (attempt && op->in_flight) || handed,
                    !a->finished && m->tried && m->wait_ms != 0);
  if (m->free_channel)
    dlock__free(m->channel);
  m->channel = NULL;
  a->finished = 1;
  a->status = dlock__fail(DLOCK_ECANCELED, "the client was closed");
  snprintf(a->detail, sizeof(a->detail), "%s", dlock_last_error());
  report(a);
}

void dlock__lacq_start(dlock__loop *lp, dlock__lacq *a,
                       const dlock__lacq_ops *ops) {
  a->ops = ops;
  a->m.chan = &loop_chan;
  a->lw.on = on_channel;
  a->lw.arg = a;
  a->lw.owner_data = &a->m.who;
  a->op.run = lacq_run;
  a->op.cancel = lacq_cancel;
  dlock__loop_add(lp, &a->op);
  drive(a);
  note_parked(a);
  dlock__loop_poke(lp);
}
