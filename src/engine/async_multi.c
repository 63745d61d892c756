/*
 * A MultiLock's verbs for async clients: its parts' acquisitions are run
 * by their clients' loops all at once, and a rule over their outcomes
 * decides, as the blocking MultiLock does (multi.c): every part taken is
 * success; when one is taken by someone else, every part held is let go,
 * that one alone is waited for (holding nothing, so that two owners with
 * overlapping sets in any order cannot deadlock), and the round starts
 * again holding it. The coordinator is driven by its parts' callbacks, so
 * it runs from their loops, and reports from them.
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
  char detail[256];
  unsigned char *held;
  int *state; /* each part's outcome in this round */
  part_ref *refs;
  /* A RedLock's: when its round started, how many rounds, and the pause
   * between two rounds (a timer of its first part's loop). */
  int64_t start_us;
  int rounds;
  /* For the statistics: when the operation began, whether a part was
   * waited for, and since when an unlock's whole was held. */
  int64_t obs_start_us, obs_since_us;
  int obs_waited;
  struct red_pause {
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
  dlock_done_cb cb = mo->cb;
  dlock_t *l = mo->l;
  uint64_t owner = mo->owner;
  void *data = mo->data;
  free_op(mo);
  cb(l, owner, status, data);
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

/* Part 'i' acquired or released, counted with the whole (observe.h). */
static int part_acquire(multi_op *mo, size_t i, int64_t wait_ms) {
  dlock__obs_parts(1);
  int rc =
      dlock__async_acquire(mo->l->subs[i]->c->loop, mo->l->subs[i], mo->owner,
                           wait_ms, mo->lease_ms, part_done, &mo->refs[i]);
  dlock__obs_parts(0);
  return rc;
}

static int part_release(multi_op *mo, size_t i) {
  dlock__obs_parts(1);
  int rc = dlock__async_release(mo->l->subs[i]->c->loop, mo->l->subs[i],
                                mo->owner, part_done, &mo->refs[i]);
  dlock__obs_parts(0);
  return rc;
}

static dlock__loop *loop_of_part(const multi_op *mo, size_t i) {
  return mo->l->subs[i]->c->loop;
}

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

static void red_end_round(multi_op *mo);
static void red_retry(multi_op *mo);
static void red_end_unlock(multi_op *mo);

/* Asks every node at once, without waiting. Returns how many are in
 * flight. */
static size_t red_round(multi_op *mo) {
  mo->phase = RED_ATTEMPT;
  mo->err = 0;
  mo->detail[0] = '\0';
  mo->start_us = dlock__now_us();
  mo->rounds++;
  for (size_t i = 0; i < mo->l->nsubs; i++) {
    int rc = part_acquire(mo, i, 0);
    mo->state[i] = rc;
    if (rc == 0)
      mo->pending++;
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

static void red_end_round(multi_op *mo) {
  size_t n = mo->l->nsubs, granted = 0, answered = 0;
  for (size_t i = 0; i < n; i++) {
    granted += mo->state[i] == 0;
    answered += mo->state[i] == 0 || mo->state[i] == DLOCK_ETIMEDOUT;
  }
  int64_t validity = dlock__red_validity_ms(mo->l, mo->lease_ms, mo->start_us);
  mo->err = dlock__red_round_verdict(n, answered, granted, validity, mo->detail,
                                     sizeof(mo->detail));
  if (mo->err == 0) {
    red_align_tokens(mo);
    mo->detail[0] = '\0';
    finish(mo, dlock__record_composite(mo->l, mo->owner, mo->fresh));
    return;
  }
  /* Not held: what was granted is given back on every node. */
  mo->phase = RED_RELEASE;
  for (size_t i = 0; i < n; i++)
    if (mo->state[i] == 0 && part_release(mo, i) == 0)
      mo->pending++;
  if (mo->pending == 0)
    red_retry(mo);
}

static void red_pause_over(dlock__aop *op) {
  multi_op *mo = ((struct red_pause *)op)->mo;
  if (op->at_us != INT64_MAX)
    return;
  dlock__loop_remove(op);
  if (red_round(mo) == 0)
    finish(mo, mo->state[0]);
}

static void red_pause_cancel(dlock__aop *op) {
  multi_op *mo = ((struct red_pause *)op)->mo;
  dlock__loop_remove(op);
  mo->detail[0] = '\0';
  finish(mo, dlock__fail(DLOCK_ECANCELED, "the client was closed"));
}

/* After a round that did not hold it: another after a random pause,
 * within the wait (never longer than a holder's lease would be), or the
 * round's failure. */
static void red_retry(multi_op *mo) {
  if (mo->err == DLOCK_ENOQUORUM || mo->wait_ms == 0 ||
      dlock__now_us() >= mo->deadline_us) {
    finish(mo, mo->err);
    return;
  }
  dlock__loop *lp = loop_of_part(mo, 0);
  if (lp->closing) {
    finish(mo, dlock__fail(DLOCK_ECANCELED, "the client is closing"));
    return;
  }
  int64_t delay_us =
      dlock__red_retry_ms(mo->rounds, dlock__jitter(), -1) * 1000;
  int64_t at = dlock__now_us() + delay_us;
  memset(&mo->pause.op, 0, sizeof(mo->pause.op));
  mo->pause.mo = mo;
  mo->pause.op.run = red_pause_over;
  mo->pause.op.cancel = red_pause_cancel;
  dlock__loop_add(lp, &mo->pause.op);
  mo->pause.op.at_us = at < mo->deadline_us ? at : mo->deadline_us;
  /* From another loop's callback, this loop is told of its new timer. */
  dlock__loop_poke(lp);
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
    mo->state[ref->i] = status;
    if (mo->pending == 0)
      end_unlock(mo);
    return;
  case RED_ATTEMPT:
    mo->state[ref->i] = status;
    if (status != 0 && mo->err == 0)
      snprintf(mo->detail, sizeof(mo->detail), "%s", dlock_last_error());
    if (mo->pending == 0)
      red_end_round(mo);
    return;
  case RED_RELEASE:
    if (mo->pending == 0)
      red_retry(mo);
    return;
  case RED_UNLOCK:
    mo->state[ref->i] = status;
    if (mo->pending == 0)
      red_end_unlock(mo);
    return;
  default: /* a release before waiting or failing */
    if (mo->pending == 0)
      after_release(mo);
    return;
  }
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

int dlock__async_multi_acquire(dlock_t *l, uint64_t owner, int64_t wait_ms,
                               int64_t lease_ms, dlock_done_cb cb, void *data) {
  multi_op *mo = new_op(l, owner, cb, data);
  if (mo == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory starting a MultiLock");
  mo->wait_ms = wait_ms;
  mo->lease_ms = lease_ms;
  mo->deadline_us =
      wait_ms == DLOCK_WAIT_FOREVER ? INT64_MAX : dlock__deadline_ms(wait_ms);
  mo->fresh = !dlock__holds_any_part(l, owner);
  if (start_round(mo) == 0) {
    /* Nothing started (no part could be asked): said at once, the
     * callback never called. */
    return abandon(mo, mo->err);
  }
  return 0;
}

int dlock__async_multi_release(dlock_t *l, uint64_t owner, dlock_done_cb cb,
                               void *data) {
  multi_op *mo = new_op(l, owner, cb, data);
  if (mo == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory starting a MultiLock");
  mo->phase = UNLOCK;
  mo->obs_since_us = dlock__obs_whole_since(l, owner);
  for (size_t i = 0; i < l->nsubs; i++) {
    int rc = part_release(mo, i);
    if (rc != 0)
      mo->state[i] = rc;
    else
      mo->pending++;
  }
  if (mo->pending == 0) {
    return abandon(mo, mo->state[0]);
  }
  return 0;
}

int dlock__async_red_acquire(dlock_t *l, uint64_t owner, int64_t wait_ms,
                             int64_t lease_ms, dlock_done_cb cb, void *data) {
  multi_op *mo = new_op(l, owner, cb, data);
  if (mo == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory starting a RedLock");
  mo->wait_ms = wait_ms;
  mo->lease_ms = lease_ms;
  mo->deadline_us =
      wait_ms == DLOCK_WAIT_FOREVER ? INT64_MAX : dlock__deadline_ms(wait_ms);
  mo->fresh = !dlock__holds_any_part(l, owner);
  if (red_round(mo) == 0) {
    return abandon(mo, mo->state[0]);
  }
  return 0;
}

int dlock__async_red_release(dlock_t *l, uint64_t owner, dlock_done_cb cb,
                             void *data) {
  /* Nothing to ask the nodes when no part was ever taken here: said at
   * once, as the blocking RedLock says it, quick and exact while nodes are
   * down. */
  size_t known = 0;
  for (size_t i = 0; i < l->nsubs; i++)
    known += dlock__has_hold(l->subs[i], owner);
  if (known == 0) {
    dlock__drop_composite(l, owner, 1);
    return dlock__fail(DLOCK_ENOTHELD, "RedLock is not held by this owner");
  }
  multi_op *mo = new_op(l, owner, cb, data);
  if (mo == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory starting a RedLock");
  mo->phase = RED_UNLOCK;
  mo->obs_since_us = dlock__obs_whole_since(l, owner);
  for (size_t i = 0; i < l->nsubs; i++) {
    int rc = part_release(mo, i);
    mo->state[i] = rc;
    if (rc == 0)
      mo->pending++;
  }
  if (mo->pending == 0) {
    return abandon(mo, mo->state[0]);
  }
  return 0;
}
