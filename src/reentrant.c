/*
 * The reentrant lock (Redisson's RLock): one attempt to acquire and one
 * release, as scripts over the lock hash.
 */
#include "lock.h"

#include "error.h"
#include "monotime.h"
#include "reply.h"
#include "scripts.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What the client believes 'owner' holds, sent so that the script can tell
 * a retried acquisition from a new one. */
static int64_t believed_count(dlock_client_t *c, const dlock_t *l,
                              uint64_t owner) {
  pthread_mutex_lock(&c->mu);
  dlock__hold *h = dlock__holds_find(&c->holds, l->name, l->len, owner);
  int64_t n = h != NULL && !h->lost ? h->count : 0;
  pthread_mutex_unlock(&c->mu);
  return n;
}

/* Records a successful acquisition in the hold table. */
static int record_hold(dlock_t *l, uint64_t owner, const dlock__acquired *a,
                       int64_t lease_ms, int64_t sent_us) {
  dlock_client_t *c = l->c;
  pthread_mutex_lock(&c->mu);
  dlock__hold *h = dlock__holds_put(&c->holds, l->name, l->len, owner);
  if (h != NULL) {
    /* A reentrant acquisition keeps the token of the hold it extends. */
    if (h->count == 0 || h->lost || a->count == 1)
      h->token = a->token;
    h->count = (int)a->count;
    h->kind = l->kind->id;
    h->watchdog = lease_ms == DLOCK_WATCHDOG;
    h->lease_ms = h->watchdog ? c->opt.watchdog_timeout_ms : lease_ms;
    h->lost = 0;
    h->confirmed_us = sent_us;
  }
  pthread_mutex_unlock(&c->mu);
  return h != NULL ? 0
                   : dlock__fail(DLOCK_ENOMEM, "out of memory recording a hold");
}

static int reentrant_try_acquire(dlock_t *l, uint64_t owner, int64_t lease_ms,
                                 int64_t *ttl_ms) {
  dlock_client_t *c = l->c;
  char field[DLOCK__FIELD_MAX], lease[24], believed[24];
  size_t field_len = dlock__owner_field(c, owner, field);
  int64_t sent_lease =
      lease_ms == DLOCK_WATCHDOG ? c->opt.watchdog_timeout_ms : lease_ms;
  snprintf(lease, sizeof(lease), "%" PRId64, sent_lease);
  snprintf(believed, sizeof(believed), "%" PRId64,
           believed_count(c, l, owner));
  const char *argv[] = {l->name, l->token_key, lease, field, believed};
  const size_t lens[] = {l->len, l->token_key_len, strlen(lease), field_len,
                         strlen(believed)};
  dlock__eval call = {&dlock__script_acquire, 2, 3, argv, lens};
  redisReply *reply;
  int64_t sent_us = dlock__now_us();
  int rc = dlock__eval_run(c->conn, 1, &call, &reply, 0);
  if (rc != 0)
    return rc;
  dlock__acquired a;
  rc = dlock__decode_acquire(reply, &a);
  freeReplyObject(reply);
  if (rc != 0)
    return rc;
  if (!a.held) {
    *ttl_ms = a.ttl_ms;
    return 1;
  }
  rc = record_hold(l, owner, &a, lease_ms, sent_us);
  if (rc != 0) {
    /* Not recorded means never renewed nor released: give it back now. */
    l->kind->release(l, owner);
    return dlock__fail(DLOCK_ENOMEM, "out of memory recording a hold");
  }
  return 0;
}

/* What the hold table says before a release: the lease to restore, and
 * whether the renewal already found the hold lost (then it is forgotten). */
static int prepare_release(dlock_t *l, uint64_t owner, int64_t *lease_ms,
                           int *known) {
  dlock_client_t *c = l->c;
  pthread_mutex_lock(&c->mu);
  dlock__hold *h = dlock__holds_find(&c->holds, l->name, l->len, owner);
  int lost = h != NULL && h->lost;
  *known = h != NULL;
  *lease_ms = h != NULL ? h->lease_ms : c->opt.watchdog_timeout_ms;
  if (lost)
    dlock__holds_remove(&c->holds, h);
  pthread_mutex_unlock(&c->mu);
  if (lost)
    return dlock__fail(DLOCK_ELOST,
                       "lock \"%.100s\" was lost while held (a renewal found "
                       "it expired or deleted)",
                       l->name);
  return 0;
}

/* Applies Redis's answer to a release: the holds left, or -1 for none. */
static int finish_release(dlock_t *l, uint64_t owner, int64_t left,
                          int known) {
  dlock_client_t *c = l->c;
  pthread_mutex_lock(&c->mu);
  dlock__hold *h = dlock__holds_find(&c->holds, l->name, l->len, owner);
  if (h != NULL && left > 0)
    h->count = (int)left;
  else if (h != NULL)
    dlock__holds_remove(&c->holds, h);
  pthread_mutex_unlock(&c->mu);
  if (left >= 0)
    return 0;
  if (known)
    return dlock__fail(DLOCK_ELOST,
                       "lock \"%.100s\" was no longer held at unlock (its "
                       "lease expired or it was deleted)",
                       l->name);
  char field[DLOCK__FIELD_MAX];
  dlock__owner_field(c, owner, field);
  return dlock__fail(DLOCK_ENOTHELD,
                     "attempt to unlock lock \"%.100s\", not held by owner %s",
                     l->name, field);
}

static int reentrant_release(dlock_t *l, uint64_t owner) {
  dlock_client_t *c = l->c;
  int64_t lease_ms;
  int known;
  int rc = prepare_release(l, owner, &lease_ms, &known);
  if (rc != 0)
    return rc;
  char field[DLOCK__FIELD_MAX], lease[24], latch_ttl[24];
  char request[DLOCK__FIELD_MAX];
  size_t field_len = dlock__owner_field(c, owner, field);
  snprintf(lease, sizeof(lease), "%" PRId64, lease_ms);
  /* The latch must outlive every retry of this request. */
  snprintf(latch_ttl, sizeof(latch_ttl), "%" PRId64,
           c->opt.command_timeout_ms * (c->opt.unlock_retries + 2));
  snprintf(request, sizeof(request), "%s:%" PRIuFAST64, c->id,
           (uint_fast64_t)atomic_fetch_add(&c->request_seq, 1));
  char *latch_prefix, *latch;
  size_t latch_prefix_len;
  rc = dlock__prefixed("redisson_unlock_latch", l->name, l->len, &latch_prefix,
                       &latch_prefix_len);
  if (rc != 0)
    return rc;
  size_t latch_len = latch_prefix_len + 1 + strlen(request);
  latch = malloc(latch_len + 1);
  if (latch == NULL) {
    free(latch_prefix);
    return dlock__fail(DLOCK_ENOMEM, "out of memory releasing a lock");
  }
  snprintf(latch, latch_len + 1, "%s:%s", latch_prefix, request);
  free(latch_prefix);

  const char *argv[] = {l->name, l->channel, latch, "0",
                        lease,   field,      latch_ttl};
  const size_t lens[] = {l->len, l->channel_len, latch_len, 1,
                         strlen(lease), field_len, strlen(latch_ttl)};
  dlock__eval call = {&dlock__script_release, 3, 4, argv, lens};
  redisReply *reply = NULL;
  /* A release whose reply was lost is sent again with the same request id;
   * the latch makes the second one return the first one's answer. All
   * attempts share one command timeout, so unlock never hangs. */
  int64_t deadline = dlock__now_us() + c->opt.command_timeout_ms * 1000;
  for (int attempt = 0;; attempt++) {
    rc = dlock__eval_run(c->conn, 1, &call, &reply, deadline);
    if (rc != DLOCK_EIO || attempt >= c->opt.unlock_retries ||
        dlock__now_us() >= deadline)
      break;
  }
  free(latch);
  if (rc != 0)
    return rc;
  int64_t left;
  rc = dlock__decode_integer(reply, &left);
  freeReplyObject(reply);
  return rc != 0 ? rc : finish_release(l, owner, left, known);
}

const dlock__kind dlock__kind_reentrant = {
    DLOCK__KIND_REENTRANT,
    reentrant_try_acquire,
    reentrant_release,
};
