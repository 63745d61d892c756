/*
 * Expirable-permit semaphores' verbs for an async client: an acquisition
 * is the acquisition machine run by the loop (loop_acq.h), each attempt
 * one permit under an id of its own, recorded as a blocking acquisition's
 * is (psem.c) so that the loop's watchdog renews it; a release is one
 * script call whose answer comes back by callback.
 */
#include "async.h"

#include "alloc.h"
#include "counter.h"
#include "error.h"
#include "loop_acq.h"
#include "monotime.h"
#include "observe.h"
#include "reply.h"

#include <stdio.h>
#include <string.h>

/* The checks both verbs make. */
static int check(dlock_psem_t *s, int has_cb) {
  if (s == NULL)
    return dlock__fail(DLOCK_EINVAL, "semaphore handle is NULL");
  if (!has_cb)
    return dlock__fail(DLOCK_EINVAL, "a callback must be given");
  if (s->o.c->loop == NULL)
    return dlock__fail(DLOCK_EINVAL, "the handle's client was not opened "
                                     "with dlock_client_open_async()");
  int rc = dlock__check_canceled(s->o.c);
  if (rc == 0 && s->o.c->loop->closing)
    rc = dlock__fail(DLOCK_ECANCELED, "the client is closing");
  return rc;
}

/* ---- giving a permit back without waiting for the answer ---------------- */

/* The release of a permit that the client cannot keep or report (too few
 * replicas acknowledged it, it could not be recorded, or its attempt got
 * no answer): sent, its answer dropped. */
typedef struct detached {
  dlock__aop op;
  unsigned char id[DLOCK__PERMIT_ID_BYTES]; /* the call's (sent again on
                                               NOSCRIPT) */
  dlock__counter_call call;
} detached;

static void detached_free(dlock__aop *op) {
  dlock__loop_remove(op);
  dlock__free(op);
}

static void detached_run(dlock__aop *op) {
  detached *d = (detached *)op;
  if (op->in_flight)
    return;
  redisReply *reply;
  if (dlock__loop_eval_answer(op, &d->call.call, &reply, NULL) ==
      DLOCK__ACQ_INFLIGHT)
    return;
  if (reply != NULL)
    freeReplyObject(reply);
  detached_free(op);
}

static void give_back_detached(dlock_psem_t *s, const unsigned char *id) {
  detached *d = dlock__calloc(1, sizeof(*d));
  if (d == NULL)
    return; /* the permit comes back when its lease ends */
  memcpy(d->id, id, sizeof(d->id));
  dlock__psem_release_call(&s->o.n, d->id, &d->call);
  d->op.run = detached_run;
  d->op.cancel = detached_free;
  dlock__loop_add(s->o.c->loop, &d->op);
  if (dlock__loop_eval_plain(&d->op, &d->call.call) != 0)
    detached_free(&d->op);
}

/* Forgets the record of permit 'owner' of 's', if there is one. */
static void forget(dlock_psem_t *s, uint64_t owner) {
  dlock_client_t *c = s->o.c;
  pthread_mutex_lock(&c->mu);
  dlock__hold *h = dlock__holds_find(&c->holds, s->o.n.name, s->o.n.len, owner,
                                     DLOCK__KIND_PERMIT);
  if (h != NULL)
    dlock__holds_remove(&c->holds, h);
  pthread_mutex_unlock(&c->mu);
}

/* ---- the acquisition ---------------------------------------------------- */

typedef struct psem_acq {
  dlock__lacq a; /* first */
  dlock_psem_t *s;
  int64_t wait_ms;
  int64_t lease_ms; /* as given: DLOCK_WATCHDOG or ms */
  int64_t lease;    /* what the script is sent */
  uint64_t owner;
  unsigned char id[DLOCK__PERMIT_ID_BYTES];
  dlock__counter_call call;
  int64_t sent_us;
  int64_t obs_start_us;  /* for the statistics (dlock__obs_begin) */
  dlock_permit_t permit; /* filled by a grant */
  dlock_psem_cb cb;
  void *data;
} psem_acq;

static int p_attempt(dlock__acq *m, int queue) {
  psem_acq *t = m->arg;
  (void)queue;
  memset(&t->call, 0, sizeof(t->call));
  dlock__psem_acquire_call(&t->s->o.n, t->lease, t->id, &t->call);
  t->sent_us = dlock__now_us();
  int rc = dlock__loop_eval(&t->a.op, &t->call.call);
  return rc != 0 ? rc : DLOCK__ACQ_INFLIGHT;
}

static int p_answer(dlock__lacq *a) {
  psem_acq *t = (psem_acq *)a;
  dlock_psem_t *s = t->s;
  redisReply *reply;
  dlock__synced sy;
  int rc = dlock__loop_eval_answer(&a->op, &t->call.call, &reply, &sy);
  if (rc != 0)
    return rc;
  rc = dlock__psem_answer(s, reply, &sy, t->owner, t->lease_ms, t->id,
                          t->sent_us, give_back_detached, &t->permit,
                          &a->m.busy.ttl_ms);
  if (rc == 1)
    a->m.pass = 0;
  if (rc == 0 && t->lease_ms == DLOCK_WATCHDOG)
    dlock__loop_watch_holds(a->op.lp);
  return rc;
}

/* An attempt that got no answer may have taken its permit: it is given
 * back (if it was taken, its release runs after it on the same
 * connection), and the next attempt goes under a new id, so that the two
 * are never confused. An error reply means the script did not run. */
static int p_may_ride(dlock__acq *m, int rc) {
  psem_acq *t = m->arg;
  if (!dlock__outcome_unknown(rc) ||
      strncmp(dlock_last_error(), "redis: ", 7) == 0)
    return 1;
  char why[300];
  snprintf(why, sizeof(why), "%s", dlock_last_error());
  give_back_detached(t->s, t->id);
  if (dlock__psem_new_owner(t->s, &t->owner) != 0)
    return 0;
  dlock__permit_id(t->s->o.c, t->owner, t->id);
  dlock__fail_text(rc, why);
  return 1;
}

static int p_timed_out(dlock__acq *m) {
  psem_acq *t = m->arg;
  return dlock__fail(DLOCK_ETIMEDOUT,
                     "semaphore \"%.100s\": no permit acquired within %lld ms",
                     t->s->o.n.name, (long long)t->wait_ms);
}

static const dlock__acq_ops psem_acq_ops = {
    .attempt = p_attempt,
    .may_ride = p_may_ride,
    .timed_out = p_timed_out,
};

static void p_report(dlock__lacq *a, int status) {
  psem_acq *t = (psem_acq *)a;
  dlock_psem_t *s = t->s;
  dlock_psem_cb cb = t->cb;
  void *data = t->data;
  dlock_permit_t permit = t->permit;
  dlock__obs_what w = {DLOCK_STATS_PSEM, s->o.n.name,  s->o.n.len,
                       t->owner,         permit.token, 1};
  status = dlock__obs_taken(s->o.c, &w, t->wait_ms, t->obs_start_us,
                            a->m.waited, status);
  dlock__free(t);
  cb(s, status, status == 0 ? &permit : NULL, data);
}

/* At the close: a permit granted and not reported, in an answer not
 * taken, or in an attempt still in flight is given back by its id (a
 * release of an id not taken changes nothing), which may block. */
static void p_give_back(dlock__lacq *a, int granted, int answered, int unknown,
                        int queued) {
  psem_acq *t = (psem_acq *)a;
  (void)queued;
  if (!granted && !answered && !unknown)
    return;
  dlock__counter_call back;
  dlock__psem_release_call(&t->s->o.n, t->id, &back);
  int64_t ignored;
  (void)dlock__counter_eval(t->s->o.c, &back, &ignored);
  forget(t->s, t->owner);
}

static const dlock__lacq_ops psem_lacq_ops = {p_answer, p_report, p_give_back};

int dlock_psem_acquire_async(dlock_psem_t *s, int64_t wait_ms, int64_t lease_ms,
                             dlock_psem_cb cb, void *data) {
  int rc = check(s, cb != NULL);
  if (rc == 0)
    rc = dlock__check_times(wait_ms, lease_ms);
  if (rc != 0)
    return rc;
  psem_acq *t = dlock__calloc(1, sizeof(*t));
  if (t == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory starting a wait");
  rc = dlock__psem_new_owner(s, &t->owner);
  if (rc != 0) {
    dlock__free(t);
    return rc;
  }
  t->s = s;
  t->wait_ms = wait_ms;
  t->lease_ms = lease_ms;
  t->lease =
      lease_ms == DLOCK_WATCHDOG ? s->o.c->opt.watchdog_timeout_ms : lease_ms;
  t->cb = cb;
  t->data = data;
  t->obs_start_us = dlock__obs_begin(s->o.c);
  dlock__permit_id(s->o.c, t->owner, t->id);
  dlock__acq *m = &t->a.m;
  dlock__acq_init(m, &psem_acq_ops, t, s->o.c, wait_ms, DLOCK__ACQ_BY_PUBSUB,
                  s->o.n.channel, s->o.n.channel_len);
  m->wake = dlock__wake_count;
  dlock__lacq_start(s->o.c->loop, &t->a, &psem_lacq_ops);
  return 0;
}

/* ---- the release -------------------------------------------------------- */

typedef struct psem_rel {
  dlock__aop op;
  dlock_psem_t *s;
  char id[DLOCK_PERMIT_ID_MAX];
  unsigned char raw[DLOCK__PERMIT_ID_BYTES]; /* the call's (sent again on
                                                NOSCRIPT) */
  uint64_t owner;
  int known;        /* a permit of this client, with a record */
  int64_t since_us; /* when it was taken (0: not known here) */
  uint64_t token;
  dlock__counter_call call;
  dlock_psem_cb cb;
  void *data;
} psem_rel;

/* Ends the release with 'status'; the record goes whatever the answer:
 * without one the permit is no longer renewed, and comes back when its
 * lease ends. */
static void rel_done(psem_rel *t, int status) {
  dlock_psem_t *s = t->s;
  dlock_psem_cb cb = t->cb;
  void *data = t->data;
  dlock__obs_what w = {DLOCK_STATS_PSEM, s->o.n.name, s->o.n.len,
                       t->owner,         t->token,    1};
  status = dlock__obs_given(s->o.c, &w, t->since_us, status);
  if (t->known)
    forget(s, t->owner);
  dlock__loop_remove(&t->op);
  dlock__free(t);
  cb(s, status, NULL, data);
}

static void rel_run(dlock__aop *op) {
  psem_rel *t = (psem_rel *)op;
  if (op->in_flight)
    return;
  redisReply *reply;
  int rc = dlock__loop_eval_answer(op, &t->call.call, &reply, NULL);
  if (rc == DLOCK__ACQ_INFLIGHT)
    return;
  int64_t result = 0;
  if (rc == 0) {
    rc = dlock__decode_integer(reply, &result);
    freeReplyObject(reply);
  }
  if (rc == 0) {
    int lost = 0;
    if (t->known) {
      dlock_client_t *c = t->s->o.c;
      pthread_mutex_lock(&c->mu);
      dlock__hold *h =
          dlock__holds_find(&c->holds, t->s->o.n.name, t->s->o.n.len, t->owner,
                            DLOCK__KIND_PERMIT);
      lost = h != NULL && h->lost;
      pthread_mutex_unlock(&c->mu);
    }
    rc = dlock__psem_release_outcome(&t->s->o.n, t->id, result, t->known, lost);
  }
  rel_done(t, rc);
}

static void rel_cancel(dlock__aop *op) {
  rel_done((psem_rel *)op, dlock__fail(DLOCK_ECANCELED, "the client was "
                                                        "closed"));
}

int dlock_psem_release_async(dlock_psem_t *s, const char *id, dlock_psem_cb cb,
                             void *data) {
  int rc = check(s, cb != NULL);
  if (rc == 0 && id == NULL)
    rc = dlock__fail(DLOCK_EINVAL, "the permit id is NULL");
  unsigned char raw[DLOCK__PERMIT_ID_BYTES];
  uint64_t owner = 0;
  int ours = 0;
  if (rc == 0)
    rc = dlock__permit_parse(s->o.c, id, raw, &owner, &ours);
  if (rc != 0)
    return rc;
  psem_rel *t = dlock__calloc(1, sizeof(*t));
  if (t == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory starting a release");
  t->s = s;
  t->owner = owner;
  t->cb = cb;
  t->data = data;
  memcpy(t->raw, raw, sizeof(t->raw));
  dlock__permit_hex(raw, sizeof(raw), t->id);
  dlock__psem_release_call(&s->o.n, t->raw, &t->call);
  /* A permit of this client has a record: the watchdog stops renewing
   * it, and its loss, if it was found lost, is reported. */
  if (ours) {
    dlock_client_t *c = s->o.c;
    pthread_mutex_lock(&c->mu);
    dlock__hold *h = dlock__holds_find(&c->holds, s->o.n.name, s->o.n.len,
                                       owner, DLOCK__KIND_PERMIT);
    t->known = h != NULL;
    if (h != NULL) {
      h->releasing++;
      t->since_us = h->held_us;
      t->token = h->token;
    }
    pthread_mutex_unlock(&c->mu);
  }
  t->op.run = rel_run;
  t->op.cancel = rel_cancel;
  dlock__loop_add(s->o.c->loop, &t->op);
  rc = dlock__loop_eval_plain(&t->op, &t->call.call);
  if (rc != 0) {
    if (t->known) {
      dlock_client_t *c = s->o.c;
      pthread_mutex_lock(&c->mu);
      dlock__hold *h = dlock__holds_find(&c->holds, s->o.n.name, s->o.n.len,
                                         owner, DLOCK__KIND_PERMIT);
      if (h != NULL)
        h->releasing--;
      pthread_mutex_unlock(&c->mu);
    }
    dlock__loop_remove(&t->op);
    dlock__free(t);
    return rc;
  }
  dlock__loop_poke(s->o.c->loop);
  return 0;
}
