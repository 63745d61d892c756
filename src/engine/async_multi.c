/*
 * A MultiLock's verbs for async clients: its parts' acquisitions are run
 * by their clients' loops all at once, and a rule over their outcomes
 * decides, as the blocking MultiLock does (multi.c): every part taken is
 * success; when one is taken by someone else, every part held is let go,
 * that one alone is waited for (holding nothing, so that two owners with
 * overlapping sets in any order cannot deadlock), and the round starts
 * again holding it. A round that fails with an error an outage causes (a
 * server down or restarting) is made again after the outage back-off,
 * holding nothing meanwhile, within the wait, as a single lock's wait
 * rides it (machine.c); so is a RedLock round that too few nodes
 * answered. The coordinator is driven by its parts' callbacks and its
 * pauses, so it runs from their loops, and reports from them.
 */
#include "async.h"

#include "alloc.h"
#include "composite.h"
#include "error.h"
#include "monotime.h"
#include "observe.h"
#include "sleep.h"

#include <stdio.h>
#include <string.h>

enum {
  ATTEMPT,
  RELEASE_THEN_WAIT,
  RELEASE_THEN_FAIL,
  RELEASE_THEN_RIDE,
  WAIT_ONE,
  UNLOCK,
  RED_ATTEMPT,
  RED_RELEASE,
  RED_UNLOCK
};

typedef struct multi_op multi_op;

typedef struct part_ref {
  multi_op *mo;
  size_t i;
} part_ref;

struct multi_op {
  dlock_t *l;
  uint64_t owner;
  int64_t wait_ms, lease_ms, deadline_us;
  dlock_done_cb cb;
  void *data;
  int phase, fresh;
  size_t pending; /* parts' callbacks still to come */
  size_t busy;    /* the part waited for alone */
  int err;        /* what ends a failed acquisition, with 'detail' */
  char detail[512];
  unsigned char *held;
  int *state; /* each part's outcome in this round */
  part_ref *refs;
  /* A RedLock's: when its round started, and how many rounds. */
  int64_t start_us;
  int rounds;
  /* Riding an outage: the ride (its end and back-off), and when the
   * pause before the next round ends. */
  dlock__riding ride;
  int64_t ride_at;
  /* For the statistics: when the operation began, whether a part was
   * waited for, and since when an unlock's whole was held. */
  int64_t obs_start_us, obs_since_us;
  int obs_waited;
  /* The pause before the next round (a RedLock's, or a ride's): a timer
   * of the loop of one of the parts. */
  struct op_pause {
    dlock__aop op;
    multi_op *mo;
  } pause;
};

static void free_op(multi_op *mo) {
  dlock__free(mo->held);
  dlock__free(mo->state);
  dlock__free(mo->refs);
  dlock__free(mo);
}

/* An operation whose parts could not even be asked ends at once, the
 * callback never called: its error, with the last failure's detail. */
static int abandon(multi_op *mo, int rc) {
  free_op(mo);
  return dlock__fail(rc, "%s", dlock_last_error());
}

static void finish(multi_op *mo, int status) {
  if (status != 0 && mo->detail[0] != '\0')
    dlock__fail_text(status, mo->detail);
  status = dlock__obs_whole_done(
      mo->l, mo->owner, mo->phase == UNLOCK || mo->phase == RED_UNLOCK,
      mo->wait_ms, mo->obs_start_us, mo->obs_waited, mo->obs_since_us, status);
  /* What the callback is given outlives the operation's record. */
  multi_op end = *mo;
  free_op(mo);
  end.cb(end.l, end.owner, status, end.data);
}

/* Remembers the first failure of a round, with its detail. */
static void note_failure(multi_op *mo, size_t i, int status) {
  mo->state[i] = status;
  if (mo->err == 0) {
    mo->err = status;
    mo->busy = i;
    snprintf(mo->detail, sizeof(mo->detail), "%s", dlock_last_error());
  }
}

static void part_done(dlock_t *part, uint64_t owner, int status, void *data);

static dlock__loop *loop_of_part(const multi_op *mo, size_t i) {
  return mo->l->subs[i]->c->loop;
}

/* Part 'i' acquired or released, counted with the whole (observe.h). */
static int part_acquire(multi_op *mo, size_t i, int64_t wait_ms) {
  dlock__obs_parts(1);
  int rc =
      dlock__async_acquire(loop_of_part(mo, i), mo->l->subs[i], mo->owner,
                           wait_ms, mo->lease_ms, 0, part_done, &mo->refs[i]);
  dlock__obs_parts(0);
  return rc;
}

static int part_release(multi_op *mo, size_t i) {
  dlock__obs_parts(1);
  int rc = dlock__async_release(loop_of_part(mo, i), mo->l->subs[i], mo->owner,
                                0, part_done, &mo->refs[i]);
  dlock__obs_parts(0);
  return rc;
}

/* ---- riding an outage, and the pause before a round ---------------------- */

/* Errors that a failover or a restart causes, and that go away: those a
 * single lock's acquisition rides (machine.c). */
static int outage_error(int err) {
  return err == DLOCK_EIO || err == DLOCK_ENOSYNC;
}

/* A ride that ends: the last failure stands, saying how many more times
 * it was tried and for how long. */
static void ride_over(multi_op *mo) {
  dlock__fail_text(mo->err, mo->detail);
  (void)dlock__outage_end(&mo->ride, mo->err);
  snprintf(mo->detail, sizeof(mo->detail), "%s", dlock_last_error());
}

/*
 * Whether a round that failed with 'mo->err' (its detail in 'mo->detail'),
 * an error an outage causes on part 'i', is made again, as the blocking
 * composites ride it (dlock__ride_on): only with a wait, within it (or
 * outage_wait_ms for a wait without end), unless riding is switched off.
 * 1 with the end of the pause before the next round in 'mo->ride_at',
 * by the outage back-off on that part's client (not before it may
 * connect again); else 0, the ride over.
 */
static int ride_on(multi_op *mo, size_t i) {
  dlock_client_t *c = mo->l->subs[i]->c;
  if (mo->wait_ms == 0 || c->opt.outage_wait_ms == 0)
    return 0;
  /* The ride keeps the detail of the failure that starts its pause. */
  dlock__fail_text(mo->err, mo->detail);
  mo->ride_at = dlock__outage_plan(
      c, &mo->ride, dlock__outage_until(c, mo->wait_ms, mo->deadline_us));
  if (mo->ride_at != 0)
    return 1;
  ride_over(mo);
  return 0;
}

static void pause_over(dlock__aop *op);
static void pause_cancel(dlock__aop *op);

/* Pauses, holding nothing, until 'at' (never past the deadline) on the
 * loop of part 'i', which then makes the next round (pause_over). */
static void pause_until(multi_op *mo, size_t i, int64_t at) {
  dlock__loop *lp = loop_of_part(mo, i);
  if (lp->closing) {
    mo->detail[0] = '\0';
    finish(mo, dlock__fail(DLOCK_ECANCELED, "the client is closing"));
    return;
  }
  memset(&mo->pause.op, 0, sizeof(mo->pause.op));
  mo->pause.mo = mo;
  mo->pause.op.run = pause_over;
  mo->pause.op.cancel = pause_cancel;
  dlock__loop_add(lp, &mo->pause.op);
  mo->pause.op.at_us = at < mo->deadline_us ? at : mo->deadline_us;
  /* From another loop's callback, this loop is told of its new timer. */
  dlock__loop_poke(lp);
}

/* ---- MultiLock ----------------------------------------------------------- */

/* Starts a round: every part not held yet, at once, without waiting.
 * Returns how many are in flight. */
static size_t start_round(multi_op *mo) {
  mo->phase = ATTEMPT;
  mo->err = 0;
  mo->detail[0] = '\0';
  for (size_t i = 0; i < mo->l->nsubs; i++) {
    mo->state[i] = 0;
    if (mo->held[i])
      continue;
    int rc = part_acquire(mo, i, 0);
    if (rc != 0)
      note_failure(mo, i, rc);
    else
      mo->pending++;
  }
  return mo->pending;
}

/* Lets go of every part held; what follows depends on the phase. */
static void release_held(multi_op *mo, int phase);

static void after_release(multi_op *mo) {
  if (mo->phase == RELEASE_THEN_FAIL) {
    finish(mo, mo->err);
    return;
  }
  if (mo->phase == RELEASE_THEN_RIDE) {
    pause_until(mo, mo->busy, mo->ride_at);
    return;
  }
  /* Waits for the busy part alone, within what is left of the wait. */
  mo->phase = WAIT_ONE;
  mo->obs_waited = 1;
  int64_t left = mo->deadline_us == INT64_MAX
                     ? DLOCK_WAIT_FOREVER
                     : (mo->deadline_us - dlock__now_us()) / 1000;
  if (left < 0)
    left = 0;
  int rc = part_acquire(mo, mo->busy, left);
  if (rc != 0) {
    snprintf(mo->detail, sizeof(mo->detail), "%s", dlock_last_error());
    finish(mo, rc);
    return;
  }
  mo->pending = 1;
}

static void end_round(multi_op *mo) {
  if (mo->err == 0) {
    finish(mo, dlock__record_composite(mo->l, mo->owner, mo->fresh));
    return;
  }
  /* A part's server down or restarting: every part is let go, and the
   * round made again, every part from the start, after the outage
   * back-off, as the blocking MultiLock does. */
  if (outage_error(mo->err) && ride_on(mo, mo->busy)) {
    release_held(mo, RELEASE_THEN_RIDE);
    return;
  }
  int wait_more =
      dlock__multi_waits_for_part(mo->err, mo->wait_ms, mo->deadline_us);
  release_held(mo, wait_more ? RELEASE_THEN_WAIT : RELEASE_THEN_FAIL);
}

static void release_held(multi_op *mo, int phase) {
  mo->phase = phase;
  for (size_t i = 0; i < mo->l->nsubs; i++) {
    if (!mo->held[i])
      continue;
    mo->held[i] = 0;
    if (part_release(mo, i) == 0)
      mo->pending++;
  }
  if (mo->pending == 0)
    after_release(mo);
}

/* The end of the whole MultiLock's unlock: as multi_release says it. */
static void end_unlock(multi_op *mo) {
  size_t n = mo->l->nsubs, notheld = 0, lost = 0;
  int other = 0;
  for (size_t i = 0; i < n; i++) {
    if (mo->state[i] == DLOCK_ELOST)
      lost++;
    else if (mo->state[i] == DLOCK_ENOTHELD)
      notheld++;
    else if (mo->state[i] != 0 && other == 0)
      other = mo->state[i];
  }
  if (notheld < n)
    dlock__drop_composite(mo->l, mo->owner, 0);
  mo->detail[0] = '\0';
  int rc = other != 0 ? dlock__fail(other, "a part's unlock failed")
                      : dlock__multi_unlock_outcome(n, lost, notheld);
  finish(mo, rc);
}

/* ---- RedLock ------------------------------------------------------------ */

/* Node 'i' did not answer the round with a grant or a refusal: the first
 * such node, and its failure's detail, are kept ('mo->busy'), to say why
 * too few answered and on which client to ride an outage. */
static void red_no_answer(multi_op *mo, size_t i, int status) {
  if (status == 0 || status == DLOCK_ETIMEDOUT || mo->busy < mo->l->nsubs)
    return;
  mo->busy = i;
  snprintf(mo->detail, sizeof(mo->detail), "%s", dlock_last_error());
}

/* Asks every node at once, without waiting. Returns how many are in
 * flight. */
static size_t red_round(multi_op *mo) {
  mo->phase = RED_ATTEMPT;
  mo->err = 0;
  mo->busy = mo->l->nsubs;
  mo->detail[0] = '\0';
  mo->start_us = dlock__now_us();
  mo->rounds++;
  for (size_t i = 0; i < mo->l->nsubs; i++) {
    int rc = part_acquire(mo, i, 0);
    mo->state[i] = rc;
    if (rc == 0)
      mo->pending++;
    else
      red_no_answer(mo, i, rc);
  }
  return mo->pending;
}

/* Makes the granting nodes issue the same tokens from now on when theirs
 * differ (see dlock_get_red). */
static void red_align_tokens(multi_op *mo) {
  uint64_t lo = UINT64_MAX, hi = 0;
  for (size_t i = 0; i < mo->l->nsubs; i++) {
    if (mo->state[i] != 0)
      continue;
    uint64_t t = dlock_token_as(mo->l->subs[i], mo->owner);
    lo = t < lo ? t : lo;
    hi = t > hi ? t : hi;
  }
  for (size_t i = 0; hi > lo && i < mo->l->nsubs; i++)
    if (mo->state[i] == 0)
      dlock__async_raise_token(loop_of_part(mo, i), mo->l->subs[i], hi);
}

static void red_retry(multi_op *mo);

static void red_end_round(multi_op *mo) {
  size_t n = mo->l->nsubs, granted = 0, answered = 0;
  for (size_t i = 0; i < n; i++) {
    granted += mo->state[i] == 0;
    answered += mo->state[i] == 0 || mo->state[i] == DLOCK_ETIMEDOUT;
  }
  char cause[sizeof(mo->detail)];
  snprintf(cause, sizeof(cause), "%s", mo->detail);
  int64_t validity = dlock__red_validity_ms(mo->l, mo->lease_ms, mo->start_us);
  mo->err = dlock__red_round_verdict(n, answered, granted, validity, mo->detail,
                                     sizeof(mo->detail));
  if (mo->err == 0) {
    red_align_tokens(mo);
    mo->detail[0] = '\0';
    finish(mo, dlock__record_composite(mo->l, mo->owner, mo->fresh));
    return;
  }
  if (mo->err == DLOCK_ENOQUORUM && mo->busy < n) {
    /* Why too few answered: the first node that did not. */
    size_t len = strlen(mo->detail);
    snprintf(mo->detail + len, sizeof(mo->detail) - len, "; node %zu: %s",
             mo->busy, cause);
  }
  /* Not held: what was granted is given back on every node. */
  mo->phase = RED_RELEASE;
  for (size_t i = 0; i < n; i++)
    if (mo->state[i] == 0 && part_release(mo, i) == 0)
      mo->pending++;
  if (mo->pending == 0)
    red_retry(mo);
}

/* After a round that did not hold it, and gave back what it got. Too many
 * nodes down or refusing (restarting, failing over): asked again after
 * the outage back-off, within the wait, as the blocking RedLock rides it.
 * Not a majority: another round after a random pause, within the wait.
 * Else the round's failure. */
static void red_retry(multi_op *mo) {
  if (mo->err == DLOCK_ENOQUORUM) {
    size_t i = mo->busy < mo->l->nsubs ? mo->busy : 0;
    if (ride_on(mo, i))
      pause_until(mo, i, mo->ride_at);
    else
      finish(mo, mo->err);
    return;
  }
  if (mo->wait_ms == 0 || dlock__now_us() >= mo->deadline_us) {
    finish(mo, mo->err);
    return;
  }
  pause_until(mo, 0,
              dlock__now_us() +
                  dlock__red_retry_ms(mo->rounds, dlock__jitter(), -1) * 1000);
}

/* The end of a RedLock's unlock: as the blocking one says it. */
static void red_end_unlock(multi_op *mo) {
  size_t n = mo->l->nsubs, ok = 0, lost = 0, failed = 0;
  for (size_t i = 0; i < n; i++) {
    ok += mo->state[i] == 0;
    lost += mo->state[i] == DLOCK_ELOST;
    failed += mo->state[i] != 0 && mo->state[i] != DLOCK_ELOST &&
              mo->state[i] != DLOCK_ENOTHELD;
  }
  dlock__drop_composite(mo->l, mo->owner, 0);
  mo->detail[0] = '\0';
  finish(mo, dlock__red_unlock_outcome(n, ok, lost, failed));
}

/* ---- what drives them ---------------------------------------------------- */

/* The pause is over: the next round, unless it was a ride's that reached
 * the ride's end (the last failure then stands). */
static void pause_over(dlock__aop *op) {
  multi_op *mo = ((struct op_pause *)op)->mo;
  if (op->at_us != INT64_MAX)
    return;
  dlock__loop_remove(op);
  int red = mo->l->kind->id == DLOCK_RED;
  int riding = !red || mo->err == DLOCK_ENOQUORUM;
  if (riding && dlock__now_us() >= mo->ride.until_us) {
    ride_over(mo);
    finish(mo, mo->err);
  } else if (!red) {
    if (start_round(mo) == 0)
      end_round(mo);
  } else if (red_round(mo) == 0) {
    finish(mo, mo->state[0]);
  }
}

/* At the client's close, during a pause: nothing is held then. */
static void pause_cancel(dlock__aop *op) {
  multi_op *mo = ((struct op_pause *)op)->mo;
  dlock__loop_remove(op);
  mo->detail[0] = '\0';
  finish(mo, dlock__fail(DLOCK_ECANCELED, "the client was closed"));
}

static void part_done(dlock_t *part, uint64_t owner, int status, void *data) {
  part_ref *ref = data;
  multi_op *mo = ref->mo;
  (void)part;
  (void)owner;
  mo->pending--;
  switch (mo->phase) {
  case ATTEMPT:
    if (status == 0)
      mo->held[ref->i] = 1;
    else
      note_failure(mo, ref->i, status);
    if (mo->pending == 0)
      end_round(mo);
    return;
  case WAIT_ONE:
    if (status != 0) {
      snprintf(mo->detail, sizeof(mo->detail), "%s", dlock_last_error());
      finish(mo, status);
      return;
    }
    mo->held[ref->i] = 1;
    if (start_round(mo) == 0)
      end_round(mo);
    return;
  case UNLOCK:
  case RED_UNLOCK:
    mo->state[ref->i] = status;
    if (mo->pending == 0 && mo->phase == UNLOCK)
      end_unlock(mo);
    else if (mo->pending == 0)
      red_end_unlock(mo);
    return;
  case RED_ATTEMPT:
    mo->state[ref->i] = status;
    red_no_answer(mo, ref->i, status);
    if (mo->pending == 0)
      red_end_round(mo);
    return;
  case RED_RELEASE:
    if (mo->pending == 0)
      red_retry(mo);
    return;
  default: /* a release before waiting, riding or failing */
    if (mo->pending == 0)
      after_release(mo);
    return;
  }
}

/* ---- the verbs ----------------------------------------------------------- */

static const char *kind_name(const dlock_t *l) {
  return l->kind->id == DLOCK_RED ? "RedLock" : "MultiLock";
}

static multi_op *new_op(dlock_t *l, uint64_t owner, dlock_done_cb cb,
                        void *data) {
  multi_op *mo = dlock__calloc(1, sizeof(*mo));
  if (mo == NULL)
    return NULL;
  mo->held = dlock__calloc(l->nsubs, 1);
  mo->state = dlock__calloc(l->nsubs, sizeof(*mo->state));
  mo->refs = dlock__calloc(l->nsubs, sizeof(*mo->refs));
  if (mo->held == NULL || mo->state == NULL || mo->refs == NULL) {
    free_op(mo);
    return NULL;
  }
  for (size_t i = 0; i < l->nsubs; i++)
    mo->refs[i] = (part_ref){mo, i};
  mo->l = l;
  mo->owner = owner;
  mo->cb = cb;
  mo->data = data;
  mo->obs_start_us = dlock__obs_begin(l->subs[0]->c);
  return mo;
}

/* Starts an acquisition with its first round ('round'). When no part
 * could even be asked, it is said at once, the callback never called. */
static int start_acquire(dlock_t *l, uint64_t owner, int64_t wait_ms,
                         int64_t lease_ms, dlock_done_cb cb, void *data,
                         size_t (*round)(multi_op *mo)) {
  multi_op *mo = new_op(l, owner, cb, data);
  if (mo == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory starting a %s",
                       kind_name(l));
  mo->wait_ms = wait_ms;
  mo->lease_ms = lease_ms;
  mo->deadline_us =
      wait_ms == DLOCK_WAIT_FOREVER ? INT64_MAX : dlock__deadline_ms(wait_ms);
  mo->fresh = !dlock__holds_any_part(l, owner);
  /* Every part failed: the first's code is the round's. */
  return round(mo) == 0 ? abandon(mo, mo->state[0]) : 0;
}

/* Starts an unlock ('phase'), every part at once. When no part could even
 * be asked, it is said at once, the callback never called. */
static int start_unlock(dlock_t *l, uint64_t owner, dlock_done_cb cb,
                        void *data, int phase) {
  multi_op *mo = new_op(l, owner, cb, data);
  if (mo == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory starting a %s",
                       kind_name(l));
  mo->phase = phase;
  mo->obs_since_us = dlock__obs_whole_since(l, owner);
  for (size_t i = 0; i < l->nsubs; i++) {
    mo->state[i] = part_release(mo, i);
    mo->pending += mo->state[i] == 0;
  }
  return mo->pending == 0 ? abandon(mo, mo->state[0]) : 0;
}

int dlock__async_multi_acquire(dlock_t *l, uint64_t owner, int64_t wait_ms,
                               int64_t lease_ms, dlock_done_cb cb, void *data) {
  return start_acquire(l, owner, wait_ms, lease_ms, cb, data, start_round);
}

int dlock__async_multi_release(dlock_t *l, uint64_t owner, dlock_done_cb cb,
                               void *data) {
  return start_unlock(l, owner, cb, data, UNLOCK);
}

int dlock__async_red_acquire(dlock_t *l, uint64_t owner, int64_t wait_ms,
                             int64_t lease_ms, dlock_done_cb cb, void *data) {
  return start_acquire(l, owner, wait_ms, lease_ms, cb, data, red_round);
}

int dlock__async_red_release(dlock_t *l, uint64_t owner, dlock_done_cb cb,
                             void *data) {
  /* Nothing to ask the nodes when no part was ever taken here. */
  int rc = dlock__red_unlock_known(l, owner);
  return rc != 0 ? rc : start_unlock(l, owner, cb, data, RED_UNLOCK);
}
