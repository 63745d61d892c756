/*
 * Acquiring a single lock: one attempt of a kind's acquire call, the hold
 * table kept from its reply, a lock handed over by a release taken up,
 * and what must be settled before an owner tries again.
 */
#include "alloc.h"
#include "engine.h"
#include "observe.h"

#include "error.h"
#include "monotime.h"
#include "reply.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

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
    dlock__obs_recorded(c, h, a->count);
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
  dlock__mark_hold(l, owner, DLOCK__MARK_LOST);
  dlock__obs_lost(l->c->stats, l->name, l->len, owner);
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
    return dlock__lost_error(l);
  /* The owner's last unlock failed: finish it, so that this acquisition
   * is a new hold (with a new token) and not a silent continuation. */
  return abandoned ? dlock__release_hold(l, owner) : 0;
}

/* An acquisition granted on the master that too few replicas
 * acknowledged: it is not reported held. The grant is given back as an
 * undo gives back an attempt without an answer (the owner's holds set back
 * to what it had), at once, or by the settler when Redis does not answer
 * that either. */
static int give_back_unsynced(dlock_t *l, uint64_t owner,
                              const dlock__synced *sy) {
  int64_t believed = dlock__believed_count(l, owner);
  if (dlock__undo(l, owner, believed) != 0)
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
    return dlock__lost_error(l);
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
    dlock__release_hold(l, owner);
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
  size_t field_len = dlock__kind_field(l, owner, field);
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
  if (dlock__undo(l, owner, 0) != 0)
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
    dlock__release_hold(l, owner);
    return dlock__fail(DLOCK_ENOMEM, "out of memory recording a hold");
  }
  return 0;
}

int dlock__run_acquire(dlock_t *l, uint64_t owner, int64_t lease_ms,
                       const dlock__eval *call, dlock__busy *busy) {
  redisReply *reply;
  int64_t sent_us = dlock__now_us();
  dlock__latch_call lc;
  dlock__synced sy;
  const dlock__eval *sent = dlock__with_done_latches(l->c, call, &lc);
  int rc = dlock__eval_write(l->c, 1, sent, &reply, 0, &sy);
  dlock__latch_call_end(&lc);
  if (rc != 0)
    return rc;
  return finish_acquire(l, owner, lease_ms, reply, sent_us, busy, &sy);
}

int dlock__attempt(dlock_t *l, uint64_t owner, int64_t lease_ms, int queue,
                   dlock__busy *busy) {
  dlock__ask ask = {owner, lease_ms, dlock__believed_count(l, owner), queue};
  dlock__call call;
  dlock__call_init(&call);
  int rc = l->kind->acquire_call(l, &ask, &call);
  if (rc == 0)
    rc = dlock__run_acquire(l, owner, lease_ms, &call.eval, busy);
  dlock__call_free(&call);
  return rc;
}

int dlock__take_handed(dlock_t *l, uint64_t owner, int64_t lease_ms,
                       uint64_t token, int64_t since_us, dlock__busy *busy) {
  if (l->kind->handed(l, lease_ms) == DLOCK__HANDED_RETAKE)
    return dlock__attempt(l, owner, lease_ms, 1, busy);
  return dlock__record_grant(l, owner, lease_ms, token, since_us);
}
