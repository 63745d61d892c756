/*
 * What the single-lock kinds share: running an acquisition script and
 * recording the hold, and the idempotent release with its latch.
 */
#include "alloc.h"
#include "lock.h"

#include "error.h"
#include "monotime.h"
#include "proto/format.h"
#include "proto/slot.h"
#include "reply.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The least pause before an unlock is sent again. */
#define RETRY_PAUSE_US 20000

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

/* Takes the latch name of a release answered on its first attempt. */
static void latch_done(dlock_client_t *c, char *key, size_t len) {
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

typedef dlock__latch_call latch_call;

static const dlock__eval *
with_done_latches(dlock_client_t *c, const dlock__eval *call, latch_call *lc) {
  lc->taken.n = 0;
  if (call->nkeys + call->nargs + DLOCK__DONE_LATCHES_MAX > 48)
    return call;
  pthread_mutex_lock(&c->mu);
  if (c->cluster == NULL) {
    lc->taken = c->done;
    c->done.n = 0;
  } else {
    /* On a cluster a script may touch keys of its own slot only: the
     * latches of locks in other slots wait for a call of theirs. */
    int slot = dlock__key_slot(call->argv[0], call->lens[0]), kept = 0;
    for (int i = 0; i < c->done.n; i++) {
      if (dlock__key_slot(c->done.key[i], c->done.len[i]) == slot) {
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
static void latch_call_end(latch_call *lc) {
  for (int i = 0; i < lc->taken.n; i++)
    dlock__free(lc->taken.key[i]);
  lc->taken.n = 0;
}

const dlock__eval *dlock__with_done_latches(dlock_client_t *c,
                                            const dlock__eval *call,
                                            dlock__latch_call *lc) {
  return with_done_latches(c, call, lc);
}

void dlock__latch_call_end(dlock__latch_call *lc) { latch_call_end(lc); }

void dlock__latch_done(dlock_client_t *c, char *key, size_t len) {
  latch_done(c, key, len);
}

int64_t dlock__believed_count(dlock_t *l, uint64_t owner) {
  dlock_client_t *c = l->c;
  pthread_mutex_lock(&c->mu);
  dlock__hold *h =
      dlock__holds_find(&c->holds, l->name, l->len, owner, l->kind->id);
  int64_t n = h != NULL && !h->lost ? h->count : 0;
  pthread_mutex_unlock(&c->mu);
  return n;
}

int dlock__has_hold(dlock_t *l, uint64_t owner) {
  dlock_client_t *c = l->c;
  pthread_mutex_lock(&c->mu);
  int known =
      dlock__holds_find(&c->holds, l->name, l->len, owner, l->kind->id) != NULL;
  pthread_mutex_unlock(&c->mu);
  return known;
}

/* Records a successful acquisition in the hold table. */
static int record_hold(dlock_t *l, uint64_t owner, const dlock__acquired *a,
                       int64_t lease_ms, int64_t sent_us) {
  dlock_client_t *c = l->c;
  pthread_mutex_lock(&c->mu);
  dlock__hold *h =
      dlock__holds_put(&c->holds, l->name, l->len, owner, l->kind->id);
  if (h != NULL) {
    /* A reentrant acquisition keeps the token of the hold it extends; a
     * first one (count 1 on the server) brings a new token. */
    if (h->count == 0 || a->count == 1)
      h->token = a->token;
    h->abandoned = 0;
    h->count = (int)a->count;
    h->watchdog = lease_ms == DLOCK_WATCHDOG;
    h->lease_ms = h->watchdog ? c->opt.watchdog_timeout_ms : lease_ms;
    h->lost = 0;
    h->confirmed_us = sent_us;
  }
  pthread_mutex_unlock(&c->mu);
  return h != NULL
             ? 0
             : dlock__fail(DLOCK_ENOMEM, "out of memory recording a hold");
}

/* Marks the owner's hold lost: each of its 'count' unlocks will say so. */
static void mark_lost(dlock_t *l, uint64_t owner) {
  dlock_client_t *c = l->c;
  pthread_mutex_lock(&c->mu);
  dlock__hold *h =
      dlock__holds_find(&c->holds, l->name, l->len, owner, l->kind->id);
  if (h != NULL)
    h->lost = 1;
  pthread_mutex_unlock(&c->mu);
}

static int lost_error(const dlock_t *l) {
  return dlock__fail(DLOCK_ELOST,
                     "lock \"%.100s\" was lost while held (its lease ran out "
                     "or it was deleted); unlock what this owner took",
                     l->name);
}

int dlock__settle_before_acquire(dlock_t *l, uint64_t owner) {
  dlock_client_t *c = l->c;
  int rc = dlock__unsettled_settle(l, owner);
  if (rc != 0)
    return rc;
  pthread_mutex_lock(&c->mu);
  dlock__hold *h =
      dlock__holds_find(&c->holds, l->name, l->len, owner, l->kind->id);
  int lost = h != NULL && h->lost, abandoned = h != NULL && h->abandoned;
  pthread_mutex_unlock(&c->mu);
  if (lost)
    return lost_error(l);
  /* The owner's last unlock failed: finish it, so that this acquisition
   * is a new hold (with a new token) and not a silent continuation. */
  return abandoned ? l->kind->release(l, owner) : 0;
}

/* An acquisition granted on the master that too few replicas
 * acknowledged: it is not reported held. The grant is given back as an
 * undo gives back an attempt without an answer (the owner's holds set back
 * to what it had), at once, or by the settler when Redis does not answer
 * that either. */
static int give_back_unsynced(dlock_t *l, uint64_t owner,
                              const dlock__synced *sy) {
  int64_t believed = dlock__believed_count(l, owner);
  if (l->kind->undo == NULL || l->kind->undo(l, owner, believed) != 0)
    dlock__unsettled_add(l, owner, believed);
  return dlock__sync_fail(l->c, sy, "lock", l->name, l->len);
}

static int finish_acquire(dlock_t *l, uint64_t owner, int64_t lease_ms,
                          redisReply *reply, int64_t sent_us, dlock__busy *busy,
                          const dlock__synced *sy) {
  dlock__acquired a;
  int rc = dlock__decode_acquire(reply, &a);
  freeReplyObject(reply);
  if (rc != 0)
    return rc;
  if (a.gone) {
    /* The owner asked again while its earlier hold had already expired:
     * the critical section it is in is no longer protected. */
    mark_lost(l, owner);
    return lost_error(l);
  }
  if (!a.held) {
    busy->ttl_ms = a.ttl_ms;
    busy->counter = a.counter;
    return 1;
  }
  if (sy != NULL && !sy->ok)
    return give_back_unsynced(l, owner, sy);
  if (record_hold(l, owner, &a, lease_ms, sent_us) != 0) {
    /* Not recorded means never renewed: give it back at once. */
    l->kind->release(l, owner);
    return dlock__fail(DLOCK_ENOMEM, "out of memory recording a hold");
  }
  return 0;
}

int dlock__finish_acquire(dlock_t *l, uint64_t owner, int64_t lease_ms,
                          redisReply *reply, int64_t sent_us,
                          dlock__busy *busy) {
  return finish_acquire(l, owner, lease_ms, reply, sent_us, busy, NULL);
}

int dlock__finish_acquire_synced(dlock_t *l, uint64_t owner, int64_t lease_ms,
                                 redisReply *reply, int64_t sent_us,
                                 dlock__busy *busy, const dlock__synced *sy) {
  return finish_acquire(l, owner, lease_ms, reply, sent_us, busy, sy);
}

/*
 * A hold handed over by a release (of this client or another) was written
 * by the releaser's connection, whose WAIT this client never sees. With
 * replica sync, the new holder confirms it with a renewal of its own, sent
 * with WAIT: replicas that acknowledge that write have everything the
 * master wrote before it, the hand-over included. 0 confirmed (or nothing
 * to confirm), else an error after the hold was given back.
 */
static int confirm_grant(dlock_t *l, uint64_t owner, int64_t lease_ms) {
  dlock_client_t *c = l->c;
  int wanted = dlock__sync_wanted(c);
  if (wanted <= 0)
    return wanted;
  char field[DLOCK__FIELD_MAX], lease[24];
  size_t field_len = l->kind->field(l, owner, field);
  snprintf(lease, sizeof(lease), "%" PRId64,
           lease_ms == DLOCK_WATCHDOG ? c->opt.watchdog_timeout_ms : lease_ms);
  const char *argv[] = {l->name, lease, field};
  const size_t lens[] = {l->len, strlen(lease), field_len};
  dlock__eval call = {&dlock__script_renew, 1, 2, argv, lens};
  redisReply *reply;
  dlock__synced sy;
  int rc = dlock__eval_write(c, 1, &call, &reply, 0, &sy);
  if (rc == 0) {
    int held = reply->type == REDIS_REPLY_ARRAY && reply->elements == 1 &&
               reply->element[0]->type == REDIS_REPLY_INTEGER &&
               reply->element[0]->integer == 1;
    freeReplyObject(reply);
    if (!held)
      return dlock__fail(DLOCK_EIO,
                         "lock \"%.100s\" was handed over but was gone "
                         "when its new holder confirmed it",
                         l->name);
    if (sy.ok)
      return 0;
    rc = dlock__sync_fail(c, &sy, "lock", l->name, l->len);
  }
  /* Unconfirmed: given back like an acquisition that was not synced. */
  if (l->kind->undo == NULL || l->kind->undo(l, owner, 0) != 0)
    dlock__unsettled_add(l, owner, 0);
  return rc;
}

int dlock__record_grant(dlock_t *l, uint64_t owner, int64_t lease_ms,
                        uint64_t token, int64_t since_us) {
  int rc = confirm_grant(l, owner, lease_ms);
  if (rc != 0)
    return rc;
  dlock__acquired a;
  memset(&a, 0, sizeof(a));
  a.held = 1;
  a.token = token;
  a.count = 1;
  if (record_hold(l, owner, &a, lease_ms, since_us) != 0) {
    l->kind->release(l, owner);
    return dlock__fail(DLOCK_ENOMEM, "out of memory recording a hold");
  }
  return 0;
}

int dlock__run_acquire(dlock_t *l, uint64_t owner, int64_t lease_ms,
                       const dlock__eval *call, dlock__busy *busy) {
  redisReply *reply;
  int64_t sent_us = dlock__now_us();
  latch_call lc;
  dlock__synced sy;
  const dlock__eval *sent = with_done_latches(l->c, call, &lc);
  int rc = dlock__eval_write(l->c, 1, sent, &reply, 0, &sy);
  latch_call_end(&lc);
  if (rc != 0)
    return rc;
  return finish_acquire(l, owner, lease_ms, reply, sent_us, busy, &sy);
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

int dlock__outcome_unknown(int rc) {
  /* No answer came: the command may have run. Out of memory is counted in,
   * as it may strike after the command was sent. */
  return rc == DLOCK_EIO || rc == DLOCK_EPROTO || rc == DLOCK_ECANCELED ||
         rc == DLOCK_ENOMEM;
}

void dlock__note_unsettled(dlock_t *l, uint64_t owner) {
  dlock_client_t *c = l->c;
  pthread_mutex_lock(&c->mu);
  dlock__hold *h =
      dlock__holds_find(&c->holds, l->name, l->len, owner, l->kind->id);
  /* A lost hold's unlocks, and an abandoned one's next call, release
   * whatever the owner has: an undo would only race with them. */
  int skip = h != NULL && (h->lost || h->abandoned);
  int64_t believed = h != NULL ? h->count : 0;
  pthread_mutex_unlock(&c->mu);
  if (!skip)
    dlock__unsettled_add(l, owner, believed);
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
 * before it is sent again, 1 after it, 0 when outage_wait_ms have passed
 * since the first failure ('*until_us', set then) or the client is
 * shutting down. */
static int ride_again(dlock_client_t *c, int64_t *until_us, int *step) {
  if (*until_us == 0)
    *until_us = dlock__deadline_ms(c->opt.outage_wait_ms);
  return dlock__now_us() < *until_us &&
         dlock__outage_pause(c, step, *until_us) == 0 &&
         dlock__now_us() < *until_us;
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
  int64_t ride_until = 0;
  int step = 0, rc;
  while ((rc = dlock__unsettled_settle(l, owner)) == DLOCK_EIO &&
         ride_again(c, &ride_until, &step)) {
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
    dlock__holds_remove(&c->holds, h);
  }
  pthread_mutex_unlock(&c->mu);
  if (left >= 0)
    return 0;
  if (known)
    return dlock__fail(DLOCK_ELOST,
                       "lock \"%.100s\" was no longer held at unlock (its "
                       "lease expired or it was deleted)",
                       l->name);
  char field[DLOCK__FIELD_MAX];
  l->kind->field(l, owner, field);
  return dlock__fail(DLOCK_ENOTHELD,
                     "attempt to unlock lock \"%.100s\", not held by owner %s",
                     l->name, field);
}

/* Sleeps until the connection may be opened again (a short back-off after
 * a timeout), so that a retry is a real attempt and not an instant "not
 * connected". */
static void wait_for_reconnect(dlock_client_t *c) {
  int64_t at = dlock__client_retry_at(c), now = dlock__now_us();
  /* A connected server that said "not now" (LOADING) gets a moment too. */
  if (at < now + RETRY_PAUSE_US)
    at = now + RETRY_PAUSE_US;
  if (at > now) {
    struct timespec ts = {(time_t)((at - now) / 1000000),
                          (long)((at - now) % 1000000) * 1000};
    nanosleep(&ts, NULL);
  }
}

/* An unlock that failed (Redis unreachable, or an error reply) may leave
 * the lock held there. The watchdog must not keep it alive for ever, so a
 * last hold is left to expire with its lease, and marked abandoned: the
 * owner's next lock or unlock finishes the release first. */
static void unmark_releasing(dlock_t *l, uint64_t owner) {
  dlock_client_t *c = l->c;
  pthread_mutex_lock(&c->mu);
  dlock__hold *h =
      dlock__holds_find(&c->holds, l->name, l->len, owner, l->kind->id);
  if (h != NULL && h->releasing > 0)
    h->releasing--;
  pthread_mutex_unlock(&c->mu);
}

void dlock__release_failed(dlock_t *l, uint64_t owner) {
  dlock_client_t *c = l->c;
  pthread_mutex_lock(&c->mu);
  dlock__hold *h =
      dlock__holds_find(&c->holds, l->name, l->len, owner, l->kind->id);
  if (h != NULL && h->releasing > 0)
    h->releasing--;
  if (h != NULL && h->count <= 1) {
    h->watchdog = 0;
    h->abandoned = 1;
  } else if (h != NULL) {
    /* Not the last hold: the failed unlock consumes its hold all the same
     * (it may have been applied). The scripts set the server's count from
     * the client's, so the owner's next call brings the server in line. */
    h->count--;
  }
  pthread_mutex_unlock(&c->mu);
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
  latch_call lc;
  const dlock__eval *sent = with_done_latches(c, call, &lc);
  /* Through an outage (a failover: the server unreachable, then READONLY
   * or LOADING) it goes on being sent, after the unlock_retries, until
   * outage_wait_ms have passed since the first failure. */
  dlock__synced sy;
  int64_t ride_until = 0;
  int step = 0;
  for (attempt = 0;; attempt++) {
    rc = dlock__eval_write(c, 1, sent, reply, 0, &sy);
    if (rc != DLOCK_EIO || r->lost)
      break;
    if (ride_until == 0)
      ride_until = dlock__deadline_ms(c->opt.outage_wait_ms);
    if (attempt < c->opt.unlock_retries) {
      wait_for_reconnect(c);
      continue;
    }
    if (!ride_again(c, &ride_until, &step))
      break;
  }
  latch_call_end(&lc);
  /* A release that fell short is done on the master all the same (a
   * failover may bring the lock back, until its lease ends); a hand-over
   * that fell short is not reported to its new holder (handover.c). */
  r->unsynced = rc == 0 && !sy.ok;
  if (rc == 0 && attempt == 0) {
    /* Answered, and sent once: its latch can go (see latch_done). */
    latch_done(c, r->latch, r->latch_len);
    r->latch = NULL;
  }
  if (rc != 0 && r->lost) {
    dlock__release_end(r);
    unmark_releasing(l, owner);
    return lost_error(l);
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
    unmark_releasing(l, owner);
    return lost_error(l);
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

int dlock__force_release_plain(dlock_t *l, const char *message) {
  /* The script deletes only a lock of the kind named here. */
  const char *kind = l->kind->id == DLOCK_READ || l->kind->id == DLOCK_WRITE
                         ? "rw"
                         : "exclusive";
  const char *argv[] = {l->name, l->channel, message, kind};
  const size_t lens[] = {l->len, l->channel_len, strlen(message), strlen(kind)};
  dlock__eval call = {&dlock__script_force_release, 2, 2, argv, lens};
  int64_t deleted;
  int rc = dlock__eval_integer(l, &call, &deleted);
  return rc != 0 ? rc : deleted > 0;
}
