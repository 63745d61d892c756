/*
 * Releasing a single lock: the idempotent release with its latch, retried
 * through an outage; the undo of an attempt whose outcome is unknown; and
 * the forced release.
 */
#include "alloc.h"
#include "engine.h"
#include "observe.h"

#include "error.h"
#include "monotime.h"
#include "proto/format.h"
#include "reply.h"

#include <string.h>

/*
 * Unlock latches. A release writes redisson_unlock_latch:{name}:<request>
 * with its answer, so that a copy of the same request run again (a retry
 * after a lost reply) answers the same instead of releasing twice. Once the
 * answer of a request sent only once is in, no copy of it can run any more
 * and the latch is useless: it goes on the list below, and the next
 * acquisition or release script of the client deletes it (its names come
 * after the script's own keys), at no cost of a command or a round trip. A
 * retried request keeps its latch for its full lifetime, as a copy sent on
 * the connection that failed may still be run after the retry's answer.
 * On one server every call of a client goes there; on a cluster a latch
 * rides only with a call of its own slot (its own lock's, mostly).
 */

void dlock__latch_done(dlock_client_t *c, char *key, size_t len) {
  pthread_mutex_lock(&c->mu);
  dlock__done_latches *d = &c->done;
  if (d->n < DLOCK__DONE_LATCHES_MAX) {
    d->key[d->n] = key;
    d->len[d->n++] = len;
    key = NULL;
  }
  pthread_mutex_unlock(&c->mu);
  /* A full list: this one expires with its lifetime, as before. */
  dlock__free(key);
}

void dlock__done_latches_clear(dlock_client_t *c) {
  for (int i = 0; i < c->done.n; i++)
    dlock__free(c->done.key[i]);
  c->done.n = 0;
}

const dlock__eval *dlock__with_done_latches(dlock_client_t *c,
                                            const dlock__eval *call,
                                            dlock__latch_call *lc) {
  lc->taken.n = 0;
  if (call->nkeys + call->nargs + DLOCK__DONE_LATCHES_MAX > 48)
    return call;
  /* On a cluster a script may touch keys of its own slot only: the
   * latches of locks in other slots wait for a call of theirs. */
  int shard = dlock__route_shard(&c->route, call->argv[0], call->lens[0]);
  pthread_mutex_lock(&c->mu);
  if (shard == DLOCK__ROUTE_ONE_SHARD) {
    lc->taken = c->done;
    c->done.n = 0;
  } else {
    int kept = 0;
    for (int i = 0; i < c->done.n; i++) {
      if (dlock__route_shard(&c->route, c->done.key[i], c->done.len[i]) ==
          shard) {
        lc->taken.key[lc->taken.n] = c->done.key[i];
        lc->taken.len[lc->taken.n++] = c->done.len[i];
      } else {
        c->done.key[kept] = c->done.key[i];
        c->done.len[kept++] = c->done.len[i];
      }
    }
    c->done.n = kept;
  }
  pthread_mutex_unlock(&c->mu);
  if (lc->taken.n == 0)
    return call;
  int k = call->nkeys, n = lc->taken.n;
  memcpy(lc->argv, call->argv, (size_t)k * sizeof(*lc->argv));
  memcpy(lc->lens, call->lens, (size_t)k * sizeof(*lc->lens));
  for (int i = 0; i < n; i++) {
    lc->argv[k + i] = lc->taken.key[i];
    lc->lens[k + i] = lc->taken.len[i];
  }
  memcpy(lc->argv + k + n, call->argv + k,
         (size_t)call->nargs * sizeof(*lc->argv));
  memcpy(lc->lens + k + n, call->lens + k,
         (size_t)call->nargs * sizeof(*lc->lens));
  lc->call = *call;
  lc->call.nkeys = k + n;
  lc->call.argv = lc->argv;
  lc->call.lens = lc->lens;
  return &lc->call;
}

/* After the call, answered or not: a latch it may not have deleted expires
 * with its lifetime. */
void dlock__latch_call_end(dlock__latch_call *lc) {
  for (int i = 0; i < lc->taken.n; i++)
    dlock__free(lc->taken.key[i]);
  lc->taken.n = 0;
}

void dlock__release_end(dlock__release *r) {
  dlock__free(r->latch);
  r->latch = NULL;
}

/* The lease text, the latch's lifetime and a latch key of its own for a
 * release; 'r->lease_ms' is set. */
static int make_latch(dlock_t *l, dlock__release *r) {
  dlock_client_t *c = l->c;
  dlock__fmt_i64(r->lease, r->lease_ms);
  /* The latch must outlive every retry of this request; the scripts take
   * no duration beyond DLOCK_DURATION_MAX_MS (and nobody waits that long). */
  int64_t latch_ms = c->opt.command_timeout_ms * (c->opt.unlock_retries + 2) +
                     c->opt.outage_wait_ms;
  dlock__fmt_i64(r->latch_ttl, latch_ms < DLOCK_DURATION_MAX_MS
                                   ? latch_ms
                                   : DLOCK_DURATION_MAX_MS);
  /* "<client id>:<sequence>", built without stdio (a hot path). */
  char request[DLOCK__FIELD_MAX];
  size_t id_len = strlen(c->id);
  memcpy(request, c->id, id_len);
  request[id_len] = ':';
  dlock__fmt_u64(request + id_len + 1,
                 (uint64_t)atomic_fetch_add(&c->request_seq, 1));
  /* One allocation per unlock, on its hot path. */
  return dlock__prefixed_suffix("redisson_unlock_latch", l->name, l->len,
                                request, &r->latch, &r->latch_len);
}

int dlock__undo_begin(dlock_t *l, uint64_t owner, int64_t believed,
                      dlock__release *r) {
  dlock_client_t *c = l->c;
  memset(r, 0, sizeof(*r));
  pthread_mutex_lock(&c->mu);
  dlock__hold *h =
      dlock__holds_find(&c->holds, l->name, l->len, owner, l->kind->id);
  /* Only a hold that stays needs a lease restored. */
  r->lease_ms = h != NULL ? h->lease_ms : c->opt.watchdog_timeout_ms;
  pthread_mutex_unlock(&c->mu);
  dlock__fmt_i64(r->count, believed + 1);
  return make_latch(l, r);
}

int dlock__undo_run(dlock_t *l, dlock__release *r, const dlock__eval *call) {
  int64_t left;
  int rc = dlock__eval_integer(l, call, &left);
  dlock__release_end(r);
  return rc;
}

/* After an unlock's command got no answer through an outage: the pause
 * before it is sent again (1 after it), or 0 when outage_wait_ms have
 * passed since the first failure (the ride's end, set then) or the client
 * is shutting down. */
static int ride_again(dlock_client_t *c, dlock__riding *ride) {
  return dlock__outage_next(c, ride, DLOCK_EIO,
                            dlock__deadline_ms(c->opt.outage_wait_ms)) == 0;
}

int dlock__release_begin(dlock_t *l, uint64_t owner, dlock__release *r) {
  dlock_client_t *c = l->c;
  memset(r, 0, sizeof(*r));
  /* An attempt of this owner whose outcome is unknown is given back
   * first: undone after this release, it would take back holds this
   * release leaves. Through an outage (a killed connection, a failover)
   * that is tried again as the release itself would be; when it cannot be
   * done, neither can the release: it fails as an unlock without an
   * answer does. */
  dlock__riding ride;
  memset(&ride, 0, sizeof(ride));
  int rc;
  while ((rc = dlock__unsettled_settle(l, owner)) == DLOCK_EIO &&
         ride_again(c, &ride)) {
  }
  if (rc != 0) {
    dlock__release_failed(l, owner);
    return rc;
  }
  pthread_mutex_lock(&c->mu);
  dlock__hold *h =
      dlock__holds_find(&c->holds, l->name, l->len, owner, l->kind->id);
  int lost = h != NULL && h->lost;
  r->known = h != NULL;
  r->abandoned = h != NULL && h->abandoned;
  r->lease_ms = h != NULL ? h->lease_ms : c->opt.watchdog_timeout_ms;
  r->lost = lost;
  dlock__fmt_i64(r->count, h != NULL && !lost ? h->count : 0);
  if (lost && --h->count <= 0)
    dlock__holds_remove(&c->holds, h);
  pthread_mutex_unlock(&c->mu);
  /* A hold found lost is still released on the server, in case it is in
   * fact there (a renewal that was under way when the client gave up on
   * Redis ran after all); the caller is told DLOCK_ELOST whatever comes. */
  rc = make_latch(l, r);
  if (rc != 0)
    return rc;
  /* From here the release is sent: a renewal that runs in Redis just after
   * it must not call the hold lost. */
  pthread_mutex_lock(&c->mu);
  h = dlock__holds_find(&c->holds, l->name, l->len, owner, l->kind->id);
  if (h != NULL)
    h->releasing++;
  pthread_mutex_unlock(&c->mu);
  return 0;
}

/* Applies Redis's answer to a release: the holds left, or -1 for none. */
static int finish_release(dlock_t *l, uint64_t owner, int64_t left, int known,
                          int abandoned) {
  dlock_client_t *c = l->c;
  /* An abandoned hold (its unlock failed) found gone was released by that
   * unlock after all, or expired as intended. */
  if (left < 0 && abandoned)
    left = 0;
  pthread_mutex_lock(&c->mu);
  dlock__hold *h =
      dlock__holds_find(&c->holds, l->name, l->len, owner, l->kind->id);
  if (h != NULL && h->releasing > 0)
    h->releasing--;
  if (h != NULL && left > 0) {
    h->count = (int)left;
  } else if (h != NULL && left < 0 && h->count > 1) {
    /* Lost with more holds outstanding: the rest report it too. */
    h->lost = 1;
    h->count--;
  } else if (h != NULL) {
    dlock__obs_hold_ends(c, h);
    dlock__holds_remove(&c->holds, h);
  }
  pthread_mutex_unlock(&c->mu);
  if (left >= 0)
    return 0;
  if (known)
    dlock__obs_lost(c->stats, l->name, l->len, owner);
  if (known)
    return dlock__fail(DLOCK_ELOST,
                       "lock \"%.100s\" was no longer held at unlock (its "
                       "lease expired or it was deleted)",
                       l->name);
  char field[DLOCK__FIELD_MAX];
  dlock__kind_field(l, owner, field);
  return dlock__fail(DLOCK_ENOTHELD,
                     "attempt to unlock lock \"%.100s\", not held by owner %s",
                     l->name, field);
}

/* Ends the mark dlock__release_begin put on the owner's hold, with
 * 'failed' when the unlock got no answer. An unlock that failed (Redis
 * unreachable, or an error reply) may leave the lock held there. The
 * watchdog must not keep it alive for ever, so a last hold is left to
 * expire with its lease, and marked abandoned: the owner's next lock or
 * unlock finishes the release first. */
static void end_releasing(dlock_t *l, uint64_t owner, int failed) {
  dlock_client_t *c = l->c;
  pthread_mutex_lock(&c->mu);
  dlock__hold *h =
      dlock__holds_find(&c->holds, l->name, l->len, owner, l->kind->id);
  if (h != NULL && h->releasing > 0)
    h->releasing--;
  if (failed && h != NULL && h->count <= 1) {
    h->watchdog = 0;
    h->abandoned = 1;
  } else if (failed && h != NULL) {
    /* Not the last hold: the failed unlock consumes its hold all the same
     * (it may have been applied). The scripts set the server's count from
     * the client's, so the owner's next call brings the server in line. */
    h->count--;
  }
  pthread_mutex_unlock(&c->mu);
}

void dlock__release_failed(dlock_t *l, uint64_t owner) {
  end_releasing(l, owner, 1);
}

int dlock__release_send(dlock_t *l, uint64_t owner, dlock__release *r,
                        const dlock__eval *call, redisReply **reply) {
  dlock_client_t *c = l->c;
  int rc, attempt;
  *reply = NULL;
  /* A release whose reply was lost (a timeout, a dropped connection) is
   * sent again, with the same latch, on a fresh connection: the latch makes
   * a copy that runs twice answer the same. Each attempt has its own
   * command timeout, so an unlock takes at most (unlock_retries + 1) of
   * them. */
  dlock__latch_call lc;
  const dlock__eval *sent = dlock__with_done_latches(c, call, &lc);
  /* Through an outage (a failover: the server unreachable, then READONLY
   * or LOADING) it goes on being sent, after the unlock_retries, until
   * outage_wait_ms have passed since the first failure. */
  dlock__synced sy;
  dlock__riding ride;
  memset(&ride, 0, sizeof(ride));
  /* Before a retry: not before the connection may be opened again, and a
   * server that said "not now" (LOADING) gets a moment too, so that a
   * retry is a real attempt and not an instant "not connected". */
  dlock__backoff retry = DLOCK__BACKOFF_RETRY;
  for (attempt = 0;; attempt++) {
    rc = dlock__eval_write(c, 1, sent, reply, 0, &sy);
    if (rc != DLOCK_EIO || r->lost)
      break;
    if (ride.until_us == 0) {
      ride.first_us = dlock__now_us();
      ride.until_us = dlock__deadline_ms(c->opt.outage_wait_ms);
    }
    dlock__stat(c->stats, DLOCK__ST_UNLOCK_RETRIES);
    if (attempt < c->opt.unlock_retries) {
      dlock__backoff_pause(c, &retry, INT64_MAX);
      continue;
    }
    if (!ride_again(c, &ride))
      break;
  }
  dlock__latch_call_end(&lc);
  /* A release that fell short is done on the master all the same (a
   * failover may bring the lock back, until its lease ends); a hand-over
   * that fell short is not reported to its new holder (handover.c). */
  r->unsynced = rc == 0 && !sy.ok;
  if (rc == 0 && attempt == 0) {
    /* Answered, and sent once: its latch can go (see latch_done). */
    dlock__latch_done(c, r->latch, r->latch_len);
    r->latch = NULL;
  }
  if (rc != 0 && r->lost) {
    dlock__release_end(r);
    end_releasing(l, owner, 0);
    return dlock__lost_error(l);
  }
  if (rc != 0)
    dlock__release_failed(l, owner);
  dlock__release_end(r);
  return rc;
}

int dlock__release_run(dlock_t *l, uint64_t owner, dlock__release *r,
                       const dlock__eval *call) {
  redisReply *reply;
  int rc = dlock__release_send(l, owner, r, call, &reply);
  return rc != 0 ? rc : dlock__finish_release(l, owner, reply, r);
}

int dlock__release_apply(dlock_t *l, uint64_t owner, int64_t left,
                         const dlock__release *r) {
  if (r->lost) {
    end_releasing(l, owner, 0);
    return dlock__lost_error(l);
  }
  return finish_release(l, owner, left, r->known, r->abandoned);
}

int dlock__finish_release(dlock_t *l, uint64_t owner, redisReply *reply,
                          const dlock__release *r) {
  int64_t left = 0;
  int rc = r->lost ? 0 : dlock__decode_integer(reply, &left);
  freeReplyObject(reply);
  return rc != 0 ? rc : dlock__release_apply(l, owner, left, r);
}

int dlock__eval_integer(dlock_t *l, const dlock__eval *call, int64_t *out) {
  redisReply *reply;
  dlock__synced sy;
  int rc = dlock__eval_write(l->c, 1, call, &reply, 0, &sy);
  if (rc != 0)
    return rc;
  rc = dlock__decode_integer(reply, out);
  freeReplyObject(reply);
  return rc;
}

int dlock__run_release_call(dlock_t *l, uint64_t owner, dlock__release *r,
                            int undo) {
  dlock__call call;
  dlock__call_init(&call);
  int rc = l->kind->release_call(l, owner, r, &call);
  if (rc != 0)
    dlock__release_end(r);
  else if (undo)
    rc = dlock__undo_run(l, r, &call.eval);
  else
    rc = dlock__release_run(l, owner, r, &call.eval);
  dlock__call_free(&call);
  return rc;
}

/* Runs the kind's leave call for 'owner' with 'believed' holds. */
static int leave(dlock_t *l, uint64_t owner, int64_t believed) {
  dlock__call call;
  dlock__call_init(&call);
  int64_t removed;
  int rc = l->kind->leave_call(l, owner, believed, &call);
  if (rc == 0)
    rc = dlock__eval_integer(l, &call.eval, &removed);
  dlock__call_free(&call);
  return rc;
}

int dlock__leave_queue(dlock_t *l, uint64_t owner) {
  if (l->kind->leave_call == NULL)
    return 0;
  return leave(l, owner, dlock__believed_count(l, owner));
}

int dlock__undo(dlock_t *l, uint64_t owner, int64_t believed) {
  /* An attempt from no holds of a kind with a queue may have queued the
   * owner or been handed the lock from the queue: leaving the queue gives
   * back both. Any other attempt has the owner's count set back by the
   * release script. */
  if (believed == 0 && l->kind->leave_call != NULL)
    return leave(l, owner, 0);
  dlock__release r;
  int rc = dlock__undo_begin(l, owner, believed, &r);
  if (rc != 0) {
    dlock__release_end(&r);
    return rc;
  }
  return dlock__run_release_call(l, owner, &r, 1);
}

int dlock__force_release(dlock_t *l) {
  dlock__call call;
  dlock__call_init(&call);
  int64_t deleted = 0;
  int rc = l->kind->force_call(l, &call);
  if (rc == 0)
    rc = dlock__eval_integer(l, &call.eval, &deleted);
  dlock__call_free(&call);
  return rc != 0 ? rc : deleted > 0;
}
