/*
 * Expirable-permit semaphores (Redisson's RPermitExpirableSemaphore): the
 * public calls, which send what lock/semaphore.c builds, record the permits
 * taken for their renewal and release, and wait (counter.c); and the
 * inspection of a semaphore or a latch.
 */
#define _GNU_SOURCE
#include "alloc.h"
#include "counter.h"

#include "cohort.h"
#include "engine.h"
#include "error.h"
#include "monotime.h"
#include "observe.h"
#include "reply.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

DLOCK__COUNTER_HANDLE(psem, DLOCK__PSEM)

int dlock_psem_try_set_permits(dlock_psem_t *s, int64_t permits) {
  if (s == NULL)
    return dlock__fail(DLOCK_EINVAL, "semaphore handle is NULL");
  return dlock__counter_try_set(&s->o, permits);
}

int dlock_psem_add_permits(dlock_psem_t *s, int64_t delta,
                           int64_t *free_after) {
  if (s == NULL)
    return dlock__fail(DLOCK_EINVAL, "semaphore handle is NULL");
  return dlock__counter_add(&s->o, delta, free_after);
}

int dlock__psem_new_owner(dlock_psem_t *s, uint64_t *out) {
  dlock_client_t *c = s->o.c;
  for (;;) {
    uint64_t v = 0;
    ssize_t n;
    do
      n = getrandom(&v, sizeof(v), 0);
    while (n < 0 && errno == EINTR);
    if (n != (ssize_t)sizeof(v))
      return dlock__fail(DLOCK_EIO, "getrandom: %s",
                         n < 0 ? strerror(errno) : "short read");
    if (v == 0)
      continue;
    pthread_mutex_lock(&c->mu);
    int used = dlock__holds_find(&c->holds, s->o.n.name, s->o.n.len, v,
                                 DLOCK__KIND_PERMIT) != NULL;
    pthread_mutex_unlock(&c->mu);
    if (!used) {
      *out = v;
      return 0;
    }
  }
}

typedef struct psem_try {
  dlock_psem_t *s;
  int64_t lease_ms; /* as given: DLOCK_WATCHDOG or ms */
  int64_t lease;    /* what the script is sent */
  uint64_t owner;
  unsigned char id[DLOCK__PERMIT_ID_BYTES];
  dlock_permit_t *out;
} psem_try;

/* Records permit 'owner' of 's' just taken with 'token' (the attempt sent
 * at 'sent_us', for 'lease_ms' as given), for its renewal and its release:
 * 0 or DLOCK_ENOMEM. */
static int psem_record(dlock_psem_t *s, uint64_t owner, int64_t lease_ms,
                       uint64_t token, int64_t sent_us) {
  dlock_client_t *c = s->o.c;
  pthread_mutex_lock(&c->mu);
  dlock__hold *h = dlock__holds_put(&c->holds, s->o.n.name, s->o.n.len, owner,
                                    DLOCK__KIND_PERMIT);
  if (h != NULL) {
    h->count = 1;
    h->token = token;
    h->watchdog = lease_ms == DLOCK_WATCHDOG;
    h->lease_ms = h->watchdog ? c->opt.watchdog_timeout_ms : lease_ms;
    h->lost = 0;
    h->abandoned = 0;
    h->confirmed_us = sent_us;
    h->held_us = c->stats != NULL ? dlock__now_us() : 0;
  }
  pthread_mutex_unlock(&c->mu);
  return h != NULL ? 0
                   : dlock__fail(DLOCK_ENOMEM, "out of memory recording a "
                                               "permit");
}

static int psem_give_back(dlock_psem_t *s, const unsigned char *id,
                          int64_t *result);

int dlock__psem_answer(dlock_psem_t *s, redisReply *reply,
                       const dlock__synced *sy, uint64_t owner,
                       int64_t lease_ms, const unsigned char *id,
                       int64_t sent_us, dlock__psem_give_back_fn give_back,
                       dlock_permit_t *out, int64_t *sleep_ms) {
  dlock__psem_taken got;
  int rc = dlock__psem_acquire_outcome(reply, &got);
  freeReplyObject(reply);
  if (rc < 0)
    return rc;
  if (rc == 1) {
    /* Until the first lease among the permits taken ends, when one may
     * come back without a message. */
    *sleep_ms = got.sleep_ms;
    return 1;
  }
  if (!sy->ok) {
    /* Taken on the master only: given back, and not reported taken. */
    give_back(s, id);
    return dlock__sync_fail(s->o.c, sy, "semaphore", s->o.n.name, s->o.n.len);
  }
  rc = psem_record(s, owner, lease_ms, got.token, sent_us);
  if (rc != 0) {
    /* Not recorded means never renewed nor released: given back now. */
    give_back(s, id);
    return rc;
  }
  dlock__permit_hex(id, DLOCK__PERMIT_ID_BYTES, out->id);
  out->token = got.token;
  out->owner = owner;
  out->expires_ms = got.expires_ms;
  return 0;
}

/* Gives permit 'id' of 's' back, waiting for the answer. */
static void give_back_now(dlock_psem_t *s, const unsigned char *id) {
  int64_t ignored;
  psem_give_back(s, id, &ignored);
}

static int psem_attempt(void *arg, int64_t *sleep_ms, int *pass) {
  psem_try *t = arg;
  dlock_psem_t *s = t->s;
  dlock__counter_call call;
  dlock__psem_acquire_call(&s->o.n, t->lease, t->id, &call);
  redisReply *reply;
  int rc = dlock__check_object(s->o.c);
  if (rc != 0)
    return rc;
  int64_t sent_us = dlock__now_us();
  dlock__synced sy;
  rc = dlock__eval_write(s->o.c, 1, &call.call, &reply, 0, &sy);
  if (rc != 0)
    return rc;
  rc = dlock__psem_answer(s, reply, &sy, t->owner, t->lease_ms, t->id, sent_us,
                          give_back_now, t->out, sleep_ms);
  if (rc == 1)
    *pass = 0;
  return rc;
}

/* An expirable permit is tried again under a new id after an attempt that
 * got no answer: that attempt's permit, if it was taken, is given back when
 * Redis answers, or else comes back at the end of its lease, and is never
 * confused with the next one. */
static int psem_may_retry(void *arg, int rc) {
  psem_try *t = arg;
  if (!dlock__outcome_unknown(rc) ||
      strncmp(dlock_last_error(), "redis: ", 7) == 0)
    return 1;
  char why[300];
  snprintf(why, sizeof(why), "%s", dlock_last_error());
  int64_t ignored;
  if (dlock__check_object(t->s->o.c) == 0)
    psem_give_back(t->s, t->id, &ignored);
  if (dlock__psem_new_owner(t->s, &t->owner) != 0)
    return 0;
  dlock__permit_id(t->s->o.c, t->owner, t->id);
  dlock__fail_text(rc, why);
  return 1;
}

int dlock_psem_acquire(dlock_psem_t *s, int64_t wait_ms, int64_t lease_ms,
                       dlock_permit_t *permit) {
  if (permit != NULL)
    memset(permit, 0, sizeof(*permit));
  if (s == NULL || permit == NULL)
    return dlock__fail(DLOCK_EINVAL, "semaphore and permit must not be NULL");
  int rc = dlock__check_times(wait_ms, lease_ms);
  if (rc == 0)
    rc = dlock__check_object(s->o.c);
  if (rc != 0)
    return rc;
  psem_try t;
  memset(&t, 0, sizeof(t));
  t.s = s;
  t.lease_ms = lease_ms;
  t.out = permit;
  t.lease =
      lease_ms == DLOCK_WATCHDOG ? s->o.c->opt.watchdog_timeout_ms : lease_ms;
  int64_t start_us = dlock__obs_begin(s->o.c);
  rc = dlock__psem_new_owner(s, &t.owner);
  if (rc != 0)
    return rc;
  dlock__permit_id(s->o.c, t.owner, t.id);
  char what[160];
  snprintf(what, sizeof(what), "semaphore \"%.100s\": no permit acquired",
           s->o.n.name);
  int waited = 0;
  rc = dlock__wait_for(s->o.c, s->o.n.channel, s->o.n.channel_len,
                       dlock__wake_count, 0, wait_ms, psem_attempt,
                       psem_may_retry, &t, what, &waited);
  if (rc != 0 && dlock__outcome_unknown(rc)) {
    /* The last attempt may have taken the permit without the answer
     * reaching here: give it back if Redis answers now (else it comes
     * back when its lease ends). The caller hears the attempt's error. */
    char detail[256];
    snprintf(detail, sizeof(detail), "%s", dlock_last_error());
    int64_t ignored;
    if (dlock__check_object(s->o.c) == 0)
      psem_give_back(s, t.id, &ignored);
    dlock__fail_text(rc, detail);
    memset(permit, 0, sizeof(*permit));
  }
  dlock__obs_what w = {DLOCK_STATS_PSEM, s->o.n.name,   s->o.n.len,
                       permit->owner,    permit->token, 1};
  return dlock__obs_taken(s->o.c, &w, wait_ms, start_us, waited, rc);
}

/* Runs the release script for permit 'id': '*result' 1 given back within
 * its lease, 0 after it, -1 no such permit. */
static int psem_give_back(dlock_psem_t *s, const unsigned char *id,
                          int64_t *result) {
  dlock__counter_call call;
  dlock__psem_release_call(&s->o.n, id, &call);
  return dlock__counter_eval(s->o.c, &call, result);
}

int dlock_psem_release(dlock_psem_t *s, const char *id) {
  if (s == NULL || id == NULL)
    return dlock__fail(DLOCK_EINVAL, "semaphore and id must not be NULL");
  unsigned char raw[DLOCK__PERMIT_ID_BYTES];
  uint64_t owner = 0;
  int ours = 0;
  dlock_client_t *c = s->o.c;
  int rc = dlock__permit_parse(c, id, raw, &owner, &ours);
  if (rc == 0)
    rc = dlock__check_object(c);
  if (rc != 0)
    return rc;
  /* A permit of this client has a record: the watchdog stops renewing it,
   * and its loss, if it was found lost, is reported. */
  int known = 0, lost = 0;
  dlock__obs_what w = {DLOCK_STATS_PSEM, s->o.n.name, s->o.n.len, owner, 0, 1};
  int64_t since_us = 0;
  if (ours) {
    pthread_mutex_lock(&c->mu);
    dlock__hold *h = dlock__holds_find(&c->holds, s->o.n.name, s->o.n.len,
                                       owner, DLOCK__KIND_PERMIT);
    known = h != NULL;
    lost = h != NULL && h->lost;
    if (h != NULL) {
      since_us = h->held_us;
      w.token = h->token;
    }
    if (h != NULL)
      h->releasing++;
    pthread_mutex_unlock(&c->mu);
  }
  int64_t result = 0;
  rc = psem_give_back(s, raw, &result);
  if (known) {
    /* Answered or not, the record goes: without an answer the permit is
     * no longer renewed and comes back when its lease ends. */
    pthread_mutex_lock(&c->mu);
    dlock__hold *h = dlock__holds_find(&c->holds, s->o.n.name, s->o.n.len,
                                       owner, DLOCK__KIND_PERMIT);
    if (h != NULL)
      dlock__holds_remove(&c->holds, h);
    pthread_mutex_unlock(&c->mu);
  }
  if (rc != 0)
    return rc;
  rc = dlock__psem_release_outcome(&s->o.n, id, result, known, lost);
  return dlock__obs_given(c, &w, since_us, rc);
}

int dlock_psem_count(dlock_psem_t *s, int64_t *free_out, int64_t *taken_out) {
  if (free_out != NULL)
    *free_out = 0;
  if (taken_out != NULL)
    *taken_out = 0;
  int rc = dlock__counter_ready(s != NULL ? &s->o : NULL,
                                "semaphore handle is NULL");
  if (rc != 0)
    return rc;
  dlock__counter_call call;
  dlock__psem_count_call(&s->o.n, &call);
  redisReply *reply;
  dlock__synced sy;
  rc = dlock__eval_write(s->o.c, 1, &call.call, &reply, 0, &sy);
  if (rc != 0)
    return rc;
  int64_t free_permits = 0, taken = 0;
  rc = dlock__psem_count_outcome(reply, &free_permits, &taken);
  freeReplyObject(reply);
  if (rc != 0)
    return rc;
  if (free_out != NULL)
    *free_out = free_permits;
  if (taken_out != NULL)
    *taken_out = taken;
  return 0;
}
/* ---- inspection ---------------------------------------------------------
 */

void dlock_counter_info_free(dlock_counter_info_t *info) {
  if (info == NULL)
    return;
  dlock__free(info->permits);
  dlock__free(info);
}

int dlock_inspect_counter(dlock_client_t *c, const char *name, size_t len,
                          dlock_counter_info_t **out) {
  if (out != NULL)
    *out = NULL;
  if (c == NULL || out == NULL)
    return dlock__fail(DLOCK_EINVAL, "client and out must not be NULL");
  int rc = dlock__check_name(name, len);
  if (rc == 0)
    rc = dlock__check_object(c);
  if (rc != 0)
    return rc;
  char *zset = NULL;
  size_t zlen = 0;
  char *cmds[DLOCK__CQ_COUNT] = {NULL};
  size_t lens[DLOCK__CQ_COUNT];
  redisReply *r[DLOCK__CQ_COUNT] = {NULL};
  rc = dlock__permit_zset(name, len, &zset, &zlen);
  if (rc == 0)
    rc = dlock__counter_queries(name, len, zset, zlen, cmds, lens);
  if (rc == 0)
    rc = dlock__client_call(c, name, len, DLOCK__CQ_COUNT, cmds, lens, r, 0);
  dlock_counter_info_t *info = NULL;
  if (rc == 0 && (info = dlock__calloc(1, sizeof(*info))) == NULL)
    rc = dlock__fail(DLOCK_ENOMEM, "out of memory inspecting a semaphore");
  if (rc == 0)
    rc = dlock__counter_info_decode(r, name, info);
  dlock__counter_queries_free(cmds);
  for (int i = 0; i < DLOCK__CQ_COUNT; i++)
    if (r[i] != NULL)
      freeReplyObject(r[i]);
  dlock__free(zset);
  if (rc != 0) {
    dlock_counter_info_free(info);
    return rc;
  }
  *out = info;
  return 0;
}
