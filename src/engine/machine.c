/*
 * The acquisition machine (see machine.h): its states, one function each,
 * and the blocking driver that waits between them.
 */
#include "machine.h"

#include "alloc.h"
#include "error.h"
#include "monotime.h"
#include "sleep.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

/* How long a waiter that queued behind its client's other waiters, without
 * trying, sleeps at most before it tries anyway: it does not know the
 * lock's lease, and the unlock that would wake it may never come. */
#define QUEUED_FIRST_WAIT_US 50000

void dlock__acq_init(dlock__acq *m, const dlock__acq_ops *ops, void *arg,
                     dlock_client_t *c, int64_t wait_ms, int wait_by,
                     const char *channel, size_t channel_len) {
  memset(m, 0, sizeof(*m));
  m->ops = ops;
  m->arg = arg;
  m->c = c;
  m->wait_ms = wait_ms;
  m->deadline_us =
      wait_ms == DLOCK_WAIT_FOREVER ? INT64_MAX : dlock__deadline_ms(wait_ms);
  m->wait_by = wait_by;
  m->channel = (char *)channel;
  m->channel_len = channel_len;
  m->busy.ttl_ms = DLOCK__ACQ_NOT_TRIED;
  dlock__backoff spin = DLOCK__BACKOFF_SPIN;
  dlock__backoff constant = DLOCK__BACKOFF_SPIN_CONSTANT;
  m->spin = c->opt.spin_backoff == DLOCK_BACKOFF_CONSTANT ? constant : spin;
  m->state = DLOCK__ACQ_PREPARE;
  m->w.owner_data = &m->who;
}

/* ---- the channel: the client's pub/sub, or the machine's own ----------- */

static int chan_join_active(dlock__acq *m, int *others) {
  if (m->chan != NULL)
    return m->chan->join_active(m, others);
  return dlock__pubsub_join_active(m->c->ps, m->channel, m->channel_len, &m->w,
                                   others);
}

static int chan_join(dlock__acq *m, int64_t deadline_us) {
  if (m->chan != NULL)
    return m->chan->join(m, deadline_us);
  return dlock__pubsub_join_as(m->c->ps, m->channel, m->channel_len,
                               deadline_us, &m->w, m->wake);
}

static void chan_leave(dlock__acq *m) {
  if (m->chan != NULL)
    m->chan->leave(m);
  else
    dlock__pubsub_leave(m->c->ps, &m->w);
}

static void chan_pass(dlock__acq *m) {
  if (m->chan != NULL)
    m->chan->pass(m);
  else
    dlock__pubsub_pass(m->c->ps, &m->w);
}

static int64_t chan_pause(dlock__acq *m) {
  if (m->chan != NULL)
    return m->chan->pause(m);
  return dlock__cohort_contention_pause(m->c->ps, &m->w, dlock__jitter());
}

/* The machine fails with 'rc', whose detail the calling thread's last
 * failure holds now: kept with the machine. */
static void failed(dlock__acq *m, int rc) {
  m->rc = rc;
  if (rc < 0)
    snprintf(m->detail, sizeof(m->detail), "%s", dlock_last_error());
}

int dlock__acq_report(const dlock__acq *m) {
  if (m->rc < 0)
    dlock__fail_text(m->rc, m->detail);
  return m->rc;
}

/* Ends the machine's run with 'rc' (leaving, giving up: see finish). */
static int to_finish(dlock__acq *m, int rc) {
  failed(m, rc);
  return DLOCK__ACQ_FINISH;
}

/* Errors that a failover or a restart causes, and that go away: Redis
 * unreachable or saying "not now" (DLOCK_EIO), too few replicas
 * acknowledging (DLOCK_ENOSYNC). */
static int rides_out(int rc) { return rc == DLOCK_EIO || rc == DLOCK_ENOSYNC; }

/*
 * Whether an attempt that failed with 'rc' is made again after a pause:
 * until the wait runs out (or outage_wait_ms after the first such error,
 * when the wait has no end). A retried acquisition is safe: the scripts
 * set the owner's count from the client's, not by adding, and the attempt
 * that got no answer is settled before the retry (a blocking client's
 * prepare) or once the machine ends without the lock (an event loop's,
 * whose undo could otherwise overtake the retry). 1 with 'm->until_us'
 * the end of the pause, or 0.
 */
static int ride(dlock__acq *m, int rc) {
  dlock_client_t *c = m->c;
  if (!rides_out(rc) || m->wait_ms == 0 || c->opt.outage_wait_ms == 0 ||
      (m->ops->may_ride != NULL && !m->ops->may_ride(m, rc)))
    return 0;
  int64_t at = dlock__outage_plan(
      c, &m->ride, dlock__outage_until(c, m->wait_ms, m->deadline_us));
  if (at == 0)
    return 0;
  m->until_us = at;
  m->rc = rc;
  return 1;
}

static int prepare(dlock__acq *m) {
  m->joined = m->woken = m->tried = 0;
  m->busy.ttl_ms = DLOCK__ACQ_NOT_TRIED;
  m->busy.counter = 0;
  int rc = m->ops->prepare != NULL ? m->ops->prepare(m) : 0;
  if (rc != 0)
    return to_finish(m, rc);
  if (m->wait_ms == 0 || m->wait_by != DLOCK__ACQ_BY_PUBSUB || !m->join_early)
    return DLOCK__ACQ_ATTEMPT;
  /* A waiter that is going to wait anyway joins a live subscription before
   * its first attempt, so it need not try again after joining. */
  int others = 0;
  rc = chan_join_active(m, &others);
  if (rc < 0)
    return to_finish(m, rc);
  m->joined = rc == 1;
  if (m->joined && others > 0 && m->ops->queues_behind != NULL &&
      m->ops->queues_behind(m)) {
    /* Others of this client wait already: queue behind them. */
    m->tried = 1;
    m->tried_us = dlock__now_us();
    return DLOCK__ACQ_PLAN;
  }
  return DLOCK__ACQ_ATTEMPT;
}

/* What follows an attempt that answered 'rc'. */
static int attempted(dlock__acq *m, int rc) {
  int woken = m->was_woken;
  if (woken && rc >= 0 && m->note_attempts)
    dlock__cohort_note_attempt(m->c->ps, &m->w, rc == 1);
  if (rc >= 0 && !m->ride_restarts)
    memset(&m->ride, 0, sizeof(m->ride));
  if (rc < 0 && !m->ride_restarts && ride(m, rc))
    return DLOCK__ACQ_RIDE;
  if (rc != 1 || m->wait_ms == 0)
    return to_finish(m, rc);
  /* The wake-up was for a free permit this waiter cannot use (it needs
   * more): another waiter of this client may need fewer. */
  if (woken && m->pass)
    chan_pass(m);
  if (m->wait_by == DLOCK__ACQ_BY_PUBSUB && !m->joined)
    return DLOCK__ACQ_JOIN;
  return DLOCK__ACQ_PLAN;
}

/* Stops until the answer of what went out comes (an event loop's). */
static int in_flight(dlock__acq *m, int what) {
  m->sent = what;
  return DLOCK__ACQ_SENT;
}

static int attempt(dlock__acq *m) {
  m->was_woken = m->woken;
  m->woken = 0;
  m->pass = 0;
  m->tried = 1;
  m->tried_us = dlock__now_us();
  int rc = m->ops->attempt(m, m->wait_ms != 0);
  if (rc == DLOCK__ACQ_INFLIGHT)
    return in_flight(m, DLOCK__ACQ_ATTEMPT);
  return attempted(m, rc);
}

/* Joins the channel, subscribing if the client is not subscribed yet, and
 * tries once more, so that a release between the first attempt and the
 * subscription is not missed. */
/* What follows a join that answered 'rc'. */
static int joined(dlock__acq *m, int rc) {
  if (rc != 0)
    return to_finish(m, rc);
  m->joined = 1;
  return DLOCK__ACQ_ATTEMPT;
}

static int join(dlock__acq *m) {
  int64_t join_by = dlock__deadline_ms(m->c->opt.command_timeout_ms);
  int rc = chan_join(m, join_by < m->deadline_us ? join_by : m->deadline_us);
  if (rc == DLOCK__ACQ_INFLIGHT)
    return in_flight(m, DLOCK__ACQ_JOIN);
  return joined(m, rc);
}

/* Sleeps until the holder's release message or its lease's end, whichever
 * is first, bounded by the deadline. */
static int plan(dlock__acq *m) {
  m->waited = 1;
  int64_t now = dlock__now_us(), until = m->deadline_us;
  if (m->busy.ttl_ms == DLOCK__ACQ_NOT_TRIED) {
    /* Not tried yet: there is always one attempt, whatever the wait. */
    if (now + QUEUED_FIRST_WAIT_US < until)
      until = now + QUEUED_FIRST_WAIT_US;
  } else if (now >= m->deadline_us) {
    return to_finish(m, 1);
  } else if (m->busy.ttl_ms >= 0 &&
             dlock__after_ms(now, m->busy.ttl_ms) < until) {
    /* Saturating: the TTL is whatever the holder set, up to what Redis
     * allows, whose microseconds may not fit. A lease that ends frees a
     * semaphore's permit without a message: the waiter tries again then. */
    until = dlock__after_ms(now, m->busy.ttl_ms);
  }
  m->until_us = until;
  return DLOCK__ACQ_WAIT;
}

/*
 * The token of the hand-over that woke the waiter, or 0 when there is none
 * or it is stale: a message sent before the latest attempt (see
 * dlock__busy.counter) may only now arrive, and the hold it announced was
 * taken up by an attempt or given back already, in this wait or an
 * earlier one of the same owner.
 */
static uint64_t fresh(const dlock__acq *m, uint64_t token) {
  return token > m->busy.counter ? token : 0;
}

/* The hand-over the wait just took ('w.taken'), and one that came since
 * the waiter stopped waiting, not taken ('w.value', read once it left). */
static uint64_t taken_grant(const dlock__acq *m) {
  return fresh(m, m->w.taken);
}
static uint64_t late_grant(const dlock__acq *m) { return fresh(m, m->w.value); }

/* What follows the take-up of a hand-over that answered 'rc' (1: taken
 * after all, wait again). */
static int taken_up(dlock__acq *m, int rc) {
  if (rc != 1)
    return to_finish(m, rc);
  return DLOCK__ACQ_PLAN;
}

/* What the wait ended with ('m->pending'). */
static int woke(dlock__acq *m) {
  int ev = m->pending;
  dlock__stat_add(m->c->stats, DLOCK__ST_WAKEUPS, ev > 0);
  /* A stale hand-over only says that something changed: try again. */
  if (ev == 2 && taken_grant(m) == 0)
    ev = 1;
  if (ev < 0)
    return to_finish(m, ev);
  if (ev == 2) {
    /* A release handed it over: it is held already. */
    if (m->ops->take_handed == NULL)
      return to_finish(m, DLOCK__ACQ_HANDED);
    int rc = m->ops->take_handed(m, m->w.taken);
    if (rc == DLOCK__ACQ_INFLIGHT)
      return in_flight(m, DLOCK__ACQ_WAIT);
    return taken_up(m, rc);
  }
  /* Woken by a message of the channel: hold back first, if contended. */
  m->woken = ev == 1 && m->pause_if_woken;
  int64_t pause = m->woken && m->joined ? chan_pause(m) : 0;
  if (pause <= 0)
    return DLOCK__ACQ_ATTEMPT; /* no hold-back due: no wait, no loop turn */
  m->until_us = dlock__now_us() + pause;
  return DLOCK__ACQ_HOLD;
}

/* The answer of what went out came: 'm->pending'. */
static int answered(dlock__acq *m) {
  switch (m->sent) {
  case DLOCK__ACQ_JOIN:
    return joined(m, m->pending);
  case DLOCK__ACQ_WAIT:
    return taken_up(m, m->pending);
  default:
    return attempted(m, m->pending);
  }
}

/* The answer of a machine that rode an outage and ends with an error of
 * one: it says how long it tried. */
static int done_riding(dlock__acq *m) {
  if (rides_out(m->rc))
    failed(m, dlock__outage_end(&m->ride, m->rc));
  return DLOCK__ACQ_DONE;
}

/* Leaves the channel, takes a hand-over that came too late, and gives up a
 * queue place; then rides an outage, or is done. */
static int finish(dlock__acq *m) {
  int rc = m->rc;
  if (rc == 1) {
    rc = m->ops->timed_out(m);
    failed(m, rc);
  }
  if (m->joined) {
    chan_leave(m);
    m->joined = 0;
    uint64_t grant = late_grant(m);
    if (grant != 0 && m->ops->late_grant != NULL)
      rc = m->ops->late_grant(m, grant, rc);
    else if (grant != 0)
      /* Handed the permits by a release inside the client: they are this
       * waiter's now. */
      rc = DLOCK__ACQ_HANDED;
  }
  if (rc != 0 && rc != DLOCK__ACQ_HANDED && m->tried && m->wait_ms != 0 &&
      m->ops->give_up != NULL)
    m->ops->give_up(m);
  /* The last attempt got no answer and may have run: what it took is given
   * back once Redis answers. */
  if (m->ops->unknown != NULL && dlock__outcome_unknown(rc))
    m->ops->unknown(m);
  m->rc = rc;
  if (!m->ride_restarts)
    return DLOCK__ACQ_DONE;
  return ride(m, rc) ? DLOCK__ACQ_RIDE : done_riding(m);
}

/* After the pause of an outage: the next try, unless the time is up (the
 * last error then stands). */
static int rode(dlock__acq *m) {
  if (dlock__now_us() >= m->ride.until_us) {
    failed(m, dlock__fail_text(m->rc, m->ride.why));
    return m->ride_restarts ? done_riding(m) : to_finish(m, m->rc);
  }
  return m->ride_restarts ? DLOCK__ACQ_PREPARE : DLOCK__ACQ_ATTEMPT;
}

/* The holding back after a wake-up is over: the attempt. */
static int held_back(dlock__acq *m) {
  (void)m;
  return DLOCK__ACQ_ATTEMPT;
}

/* Each state's step, which returns the next state. WAIT, HOLD and RIDE
 * are entered by the driver's wait, so their steps run once it is over. */
static int (*const steps[])(dlock__acq *m) = {
    [DLOCK__ACQ_PREPARE] = prepare, [DLOCK__ACQ_ATTEMPT] = attempt,
    [DLOCK__ACQ_JOIN] = join,       [DLOCK__ACQ_PLAN] = plan,
    [DLOCK__ACQ_WAIT] = woke,       [DLOCK__ACQ_HOLD] = held_back,
    [DLOCK__ACQ_FINISH] = finish,   [DLOCK__ACQ_RIDE] = rode,
    [DLOCK__ACQ_SENT] = answered,
};

int dlock__acq_step(dlock__acq *m) {
  for (;;) {
    assert(m->state >= 0 && m->state < DLOCK__ACQ_DONE);
    m->state = steps[m->state](m);
    if (m->state == DLOCK__ACQ_WAIT || m->state == DLOCK__ACQ_HOLD ||
        m->state == DLOCK__ACQ_RIDE || m->state == DLOCK__ACQ_SENT ||
        m->state == DLOCK__ACQ_DONE)
      return m->state;
  }
}

int dlock__acq_run(dlock__acq *m) {
  for (;;) {
    int state = dlock__acq_step(m);
    if (state == DLOCK__ACQ_DONE)
      break;
    /* A blocking machine's calls answer at once. */
    assert(state != DLOCK__ACQ_SENT);
    if (state == DLOCK__ACQ_WAIT && m->joined) {
      m->pending = dlock__pubsub_wait(m->c->ps, &m->w, m->until_us);
    } else if (state == DLOCK__ACQ_WAIT) {
      m->pending = dlock__backoff_pause(m->c, &m->spin, m->until_us);
    } else {
      /* A contention hold-back, or a pause through an outage. */
      dlock__sleep_us(m->until_us - dlock__now_us());
      int rc = state == DLOCK__ACQ_RIDE ? dlock__check_canceled(m->c) : 0;
      if (rc != 0) {
        failed(m, rc);
        break;
      }
    }
  }
  if (m->free_channel)
    dlock__free(m->channel);
  m->channel = NULL;
  return dlock__acq_report(m);
}
