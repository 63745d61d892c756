/*
 * Releasing one hold of a single lock (dlock__release_hold): a release for
 * every client, or a hand-over inside the client.
 *
 * Hand-over inside one client ("lock cohorting"). When the owner releasing
 * the last hold of a reentrant lock has threads of its own client waiting
 * for it, the lock goes straight to the first of them in one script:
 * no unlock message, so no waiter of any client wakes to try and fail, and
 * the waiter needs no round trip to take the lock up. After a few
 * hand-overs in a row the lock is released for every client when another
 * client waits for it (the script asks Redis how many clients listen on
 * the lock's channel), and this client's woken waiters then hold back
 * their attempt a moment, so that a waiter of another client gets it:
 * without that, the client that holds the lock would win nearly every
 * race for it, as its waiters, never failing, never pause.
 *
 * The release for every client comes after the run whether or not another
 * client listens: a client that polls without subscribing (Redisson's
 * RSpinLock, a tryLock() loop, a dlock spin lock) is invisible, and would
 * otherwise never find the lock free. The hold-back then lasts at least a
 * fixed share of the time the run took (see dlock__cohort_resolve), so the
 * lock is free for others that share of the time at least, and a poller
 * trying at any moment finds it free on about that share of its tries.
 *
 * The waiter is reserved first (dlock__cohort_reserve), so that it stays
 * to be told, and is told the outcome whatever it is: the token of its new
 * hold, or, when the hand-over failed, a wake-up to try for itself.
 */
#include "engine.h"

#include "cohort.h"
#include "error.h"

#include <string.h>

static int run_handover(dlock_t *l, uint64_t owner, dlock__release *r,
                        dlock__waiter *next, int at_cap) {
  dlock_client_t *c = l->c;
  dlock__call call;
  dlock__call_init(&call);
  const dlock__cohort_member *to = dlock__cohort_of(next);
  dlock__handover_call(l, owner, r, to->owner, to->lease_ms, at_cap, &call);
  redisReply *reply;
  int rc = dlock__release_send(l, owner, r, &call.eval, &reply);
  dlock__call_free(&call);
  if (rc != 0) {
    dlock__cohort_resolve(c->ps, next, 0, DLOCK__RESOLVE_FAILED);
    return rc;
  }
  uint64_t token;
  int outcome;
  rc = dlock__handover_answered(l, owner, r, reply, &token, &outcome);
  dlock__cohort_resolve(c->ps, next, token, outcome);
  return rc;
}

int dlock__handover_answered(dlock_t *l, uint64_t owner,
                             const dlock__release *r, redisReply *reply,
                             uint64_t *token, int *outcome) {
  int64_t left = 0;
  *token = 0;
  *outcome = DLOCK__RESOLVE_FAILED;
  int rc = r->lost ? 0 : dlock__decode_handover(reply, &left, token, outcome);
  freeReplyObject(reply);
  if (rc != 0) {
    dlock__release_failed(l, owner);
    *token = 0;
    *outcome = DLOCK__RESOLVE_FAILED;
    return rc;
  }
  rc = dlock__release_apply(l, owner, left, r);
  if (r->lost) {
    *token = 0;
    *outcome = DLOCK__RESOLVE_FAILED;
  }
  dlock__stat_add(l->c->stats, DLOCK__ST_HANDOVERS, *token != 0);
  return rc;
}

int dlock__handover_eligible(const dlock_t *l, const dlock__release *r) {
  /* Only a plain last hold: a lost or abandoned one, or one the client has
   * no record of, goes the usual way, which knows how to report them. */
  return l->kind->no_barging && !r->lost && r->known && !r->abandoned &&
         strcmp(r->count, "1") == 0;
}

int dlock__handover_release(dlock_t *l, uint64_t owner, dlock__release *r) {
  /* An event loop's client has no waiting threads to hand it to. */
  if (!dlock__handover_eligible(l, r) || l->c->ps == NULL)
    return 1;
  int at_cap;
  dlock__waiter *next =
      dlock__cohort_reserve(l->c->ps, l->channel, l->channel_len, owner,
                            DLOCK__HANDOVER_RUN_MAX, &at_cap);
  return next != NULL ? run_handover(l, owner, r, next, at_cap) : 1;
}

int dlock__release_hold(dlock_t *l, uint64_t owner) {
  dlock__release r;
  int rc = dlock__release_begin(l, owner, &r);
  if (rc != 0) {
    dlock__release_end(&r);
    return rc;
  }
  if ((rc = dlock__handover_release(l, owner, &r)) != 1)
    return rc;
  return dlock__run_release_call(l, owner, &r, 0);
}
