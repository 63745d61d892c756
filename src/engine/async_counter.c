/*
 * Semaphores' and latches' verbs for an async client: an acquisition (a
 * semaphore's permits, a latch's zero) is the acquisition machine run by
 * the loop (loop_acq.h), as a lock's; a release or a count-down is one
 * script call whose answer comes back by callback.
 */
#include "async.h"

#include "alloc.h"
#include "counter.h"
#include "error.h"
#include "loop_acq.h"
#include "observe.h"
#include "proto/format.h"
#include "reply.h"

#include <stdio.h>
#include <string.h>

/* The checks every such verb makes. */
static int check(dlock__counter *o, int has_cb) {
  if (!has_cb)
    return dlock__fail(DLOCK_EINVAL, "a callback must be given");
  if (o->c->loop == NULL)
    return dlock__fail(DLOCK_EINVAL, "the handle's client was not opened "
                                     "with dlock_client_open_async()");
  int rc = dlock__check_canceled(o->c);
  if (rc == 0 && o->c->loop->closing)
    rc = dlock__fail(DLOCK_ECANCELED, "the client is closing");
  return rc;
}

/* Sends 'a' for 'op': its script call ('synced': with replica sync), or
 * (argc > 0 and no script) its plain command. */
static int send_call(dlock__aop *op, const dlock__counter_call *a, int synced) {
  if (a->call.script != NULL)
    return synced ? dlock__loop_eval(op, &a->call)
                  : dlock__loop_eval_plain(op, &a->call);
  char *cmd;
  int len = dlock__format_argv(&cmd, a->argc, a->argv, a->lens);
  if (len < 0)
    return dlock__fail(DLOCK_ENOMEM, "out of memory formatting a command");
  int rc = dlock__loop_send(op, cmd, (size_t)len);
  dlock__format_free(cmd);
  return rc;
}

/* The answer to 'a': the reply (the caller's) or an error. */
static int take_answer(dlock__aop *op, const dlock__counter_call *a,
                       redisReply **reply, dlock__synced *sy) {
  if (sy != NULL) {
    memset(sy, 0, sizeof(*sy));
    sy->ok = 1;
  }
  if (a->call.script != NULL)
    return dlock__loop_eval_answer(op, &a->call, reply, sy);
  *reply = NULL;
  if (op->err != 0)
    return dlock__fail(op->err, "%s", op->detail);
  redisReply *r = op->reply;
  op->reply = NULL;
  if (r->type == REDIS_REPLY_ERROR) {
    int rc = dlock__fail_reply(r->str, r->len);
    freeReplyObject(r);
    return rc;
  }
  *reply = r;
  return 0;
}

/* ---- acquisitions: a semaphore's permits, a latch's zero ---------------- */

typedef struct counter_acq {
  dlock__lacq a; /* first */
  dlock__counter *o;
  void *handle; /* the dlock_sem_t or dlock_latch_t */
  int latch;
  int64_t permits, wait_ms;
  dlock_client_t *c;    /* o's, kept: o may be freed before the close */
  int64_t obs_start_us; /* for the statistics (dlock__obs_begin) */
  dlock__counter_call call;
  dlock_sem_cb sem_cb;
  dlock_latch_cb latch_cb;
  void *data;
} counter_acq;

/* What a semaphore's (a release's too) or a latch's statistics count, on
 * client 'c'. An operation that the client's close ends may have outlived
 * its handle: it is counted without the handle's name. */
static dlock__obs_what counted(dlock_client_t *c, dlock__counter *o, int latch,
                               int64_t permits) {
  int gone = c->loop->closing;
  return (dlock__obs_what){latch ? DLOCK_STATS_LATCH : DLOCK_STATS_SEMAPHORE,
                           gone ? NULL : o->n.name,
                           gone ? 0 : o->n.len,
                           0,
                           0,
                           latch ? 0 : (uint64_t)permits};
}

static void give_back_detached(counter_acq *t);

static int c_attempt(dlock__acq *m, int queue) {
  counter_acq *t = m->arg;
  (void)queue;
  memset(&t->call, 0, sizeof(t->call));
  if (t->latch)
    dlock__counter_get_call(&t->o->n, &t->call);
  else
    dlock__sem_acquire_call(&t->o->n, t->permits, &t->call);
  int rc = send_call(&t->a.op, &t->call, 1);
  return rc != 0 ? rc : DLOCK__ACQ_INFLIGHT;
}

static int c_answer(dlock__lacq *a) {
  counter_acq *t = (counter_acq *)a;
  redisReply *reply;
  dlock__synced sy;
  int rc = take_answer(&a->op, &t->call, &reply, &sy);
  if (rc != 0)
    return rc;
  /* Only a release or a new count frees permits, and only the zero
   * message opens a latch: nothing bounds the sleep. */
  a->m.busy.ttl_ms = -1;
  if (t->latch) {
    int64_t n = 0;
    rc = dlock__latch_count_outcome(&t->o->n, reply, &n);
    freeReplyObject(reply);
    return rc != 0 ? rc : n > 0;
  }
  rc = dlock__sem_acquire_outcome(reply, &a->m.pass);
  freeReplyObject(reply);
  if (rc == 0 && !sy.ok) {
    /* Taken on the master only: given back, and not reported taken. */
    give_back_detached(t);
    return dlock__sync_fail(t->o->c, &sy, "semaphore", t->o->n.name,
                            t->o->n.len);
  }
  if (rc == 0 && dlock__sem_note_held(t->handle, t->permits) != 0)
    return dlock__fail(DLOCK_ENOMEM, "out of memory counting the permits held");
  return rc;
}

static int c_may_ride(dlock__acq *m, int rc) {
  counter_acq *t = m->arg;
  return t->latch || dlock__sem_may_retry(NULL, rc);
}

static int c_timed_out(dlock__acq *m) {
  counter_acq *t = m->arg;
  if (t->latch)
    return dlock__fail(DLOCK_ETIMEDOUT,
                       "latch \"%.100s\" not at zero within %lld ms",
                       t->o->n.name, (long long)t->wait_ms);
  return dlock__fail(DLOCK_ETIMEDOUT,
                     "semaphore \"%.100s\": %lld permits not acquired within "
                     "%lld ms",
                     t->o->n.name, (long long)t->permits,
                     (long long)t->wait_ms);
}

static const dlock__acq_ops counter_acq_ops = {
    .attempt = c_attempt,
    .may_ride = c_may_ride,
    .timed_out = c_timed_out,
};

static void c_report(dlock__lacq *a, int status) {
  counter_acq *t = (counter_acq *)a;
  void *handle = t->handle, *data = t->data;
  dlock_sem_cb sem_cb = t->sem_cb;
  dlock_latch_cb latch_cb = t->latch_cb;
  dlock__obs_what w = counted(t->c, t->o, t->latch, t->permits);
  status = dlock__obs_taken(t->c, &w, t->wait_ms, t->obs_start_us, a->m.waited,
                            status);
  dlock__free(t);
  if (latch_cb != NULL)
    latch_cb(handle, status, 0, data);
  else
    sem_cb(handle, status, data);
}

/* Gives a semaphore's permits back (at the close, which may block). */
static void give_permits_back(counter_acq *t) {
  dlock__counter_call back;
  dlock__sem_release_call(&t->o->n, t->permits, &back);
  int64_t ignored;
  if (dlock__counter_eval(t->o->c, &back, &ignored) == 0)
    dlock__sem_note_held(t->handle, -t->permits);
}

/* At the close: permits granted and not reported, or in an answer not
 * taken, are given back; an attempt in flight cannot be (a plain
 * semaphore's permits have no owner to find them by). */
static void c_give_back(dlock__lacq *a, int granted, int answered, int unknown,
                        int queued) {
  counter_acq *t = (counter_acq *)a;
  (void)unknown;
  (void)queued;
  if (t->latch)
    return;
  if (answered && c_answer(a) == 0)
    granted = 1;
  if (granted)
    give_permits_back(t);
}

static const dlock__lacq_ops counter_lacq_ops = {c_answer, c_report,
                                                 c_give_back};

/* Starts the acquisition 'asked', whose fields up to 'data' are set (a
 * semaphore's with 'sem_cb', a latch's with 'latch_cb') and the rest
 * zero. */
static int start_acquire(const counter_acq *asked) {
  counter_acq *t = dlock__malloc(sizeof(*t));
  if (t == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory starting a wait");
  *t = *asked;
  dlock__counter *o = t->o;
  t->c = o->c;
  t->obs_start_us = dlock__obs_begin(o->c);
  dlock__acq *m = &t->a.m;
  dlock__acq_init(m, &counter_acq_ops, t, o->c, t->wait_ms,
                  DLOCK__ACQ_BY_PUBSUB, o->n.channel, o->n.channel_len);
  m->wake = t->latch ? dlock__wake_latch : dlock__wake_count;
  m->who.permits = t->permits;
  dlock__lacq_start(o->c->loop, &t->a, &counter_lacq_ops);
  return 0;
}

int dlock_sem_acquire_async(dlock_sem_t *s, int64_t permits, int64_t wait_ms,
                            dlock_sem_cb cb, void *data) {
  if (s == NULL)
    return dlock__fail(DLOCK_EINVAL, "semaphore handle is NULL");
  int rc = check(&s->o, cb != NULL);
  if (rc == 0)
    rc = dlock__check_permits("permits", permits, 1);
  if (rc == 0)
    rc = dlock__check_wait(wait_ms);
  return rc != 0 ? rc
                 : start_acquire(&(counter_acq){.o = &s->o,
                                                .handle = s,
                                                .permits = permits,
                                                .wait_ms = wait_ms,
                                                .sem_cb = cb,
                                                .data = data});
}

int dlock_latch_await_async(dlock_latch_t *l, int64_t wait_ms,
                            dlock_latch_cb cb, void *data) {
  if (l == NULL)
    return dlock__fail(DLOCK_EINVAL, "latch handle is NULL");
  int rc = check(&l->o, cb != NULL);
  if (rc == 0)
    rc = dlock__check_wait(wait_ms);
  return rc != 0 ? rc
                 : start_acquire(&(counter_acq){.o = &l->o,
                                                .handle = l,
                                                .latch = 1,
                                                .wait_ms = wait_ms,
                                                .latch_cb = cb,
                                                .data = data});
}

/* ---- one call: a release, a count-down ---------------------------------- */

typedef struct counter_call_op {
  dlock__aop op;
  dlock__counter *o;
  dlock_client_t *c; /* o's, kept as an acquisition keeps it */
  void *handle;
  int latch;
  int64_t permits;
  dlock__counter_call call;
  dlock_sem_cb sem_cb;
  dlock_latch_cb latch_cb;
  void *data;
} counter_call_op;

static void call_done(counter_call_op *t, int status, int64_t value) {
  void *handle = t->handle, *data = t->data;
  dlock_sem_cb sem_cb = t->sem_cb;
  dlock_latch_cb latch_cb = t->latch_cb;
  /* A semaphore's release; not a count-down, nor a give-back (no permits
   * counted as held). */
  if (!t->latch && t->permits > 0) {
    dlock__obs_what w = counted(t->c, t->o, 0, t->permits);
    (void)dlock__obs_given(t->c, &w, 0, status);
  }
  dlock__loop_remove(&t->op);
  dlock__free(t);
  if (latch_cb != NULL)
    latch_cb(handle, status, value, data);
  else
    sem_cb(handle, status, data);
}

static void call_run(dlock__aop *op) {
  counter_call_op *t = (counter_call_op *)op;
  if (op->in_flight)
    return;
  redisReply *reply;
  int rc = take_answer(op, &t->call, &reply, NULL);
  if (rc == DLOCK__ACQ_INFLIGHT)
    return;
  int64_t n = 0;
  if (rc == 0) {
    rc = dlock__decode_integer(reply, &n);
    freeReplyObject(reply);
  }
  if (t->latch) {
    if (rc == 0)
      rc = dlock__latch_count_down_outcome(&t->o->n, n);
    call_done(t, rc, rc == 0 ? n : 0);
    return;
  }
  /* A refusal released nothing: the permits are the client's still.
   * Without an answer the release may have run. */
  if (rc != 0 && !dlock__outcome_unknown(rc))
    dlock__sem_note_held(t->handle, t->permits);
  call_done(t, rc, 0);
}

static void call_cancel(dlock__aop *op) {
  counter_call_op *t = (counter_call_op *)op;
  call_done(t, dlock__fail(DLOCK_ECANCELED, "the client was closed"), 0);
}

static int start_call(counter_call_op *t) {
  t->c = t->o->c;
  t->op.run = call_run;
  t->op.cancel = call_cancel;
  dlock__loop_add(t->o->c->loop, &t->op);
  int rc = send_call(&t->op, &t->call, 0);
  if (rc != 0) {
    dlock__loop_remove(&t->op);
    dlock__free(t);
    return rc;
  }
  dlock__loop_poke(t->o->c->loop);
  return 0;
}

static void ignored(dlock_sem_t *s, int status, void *data) {
  (void)s;
  (void)status;
  (void)data;
}

/* Gives back permits an attempt got but cannot keep (too few replicas
 * acknowledged them), not waiting for the answer. */
static void give_back_detached(counter_acq *t) {
  counter_call_op *g = dlock__calloc(1, sizeof(*g));
  if (g == NULL)
    return;
  g->o = t->o;
  g->handle = t->handle;
  g->permits = 0; /* never counted as held: nothing to count back */
  g->sem_cb = ignored;
  dlock__sem_release_call(&t->o->n, t->permits, &g->call);
  (void)start_call(g);
}

int dlock_sem_release_async(dlock_sem_t *s, int64_t permits, dlock_sem_cb cb,
                            void *data) {
  if (s == NULL)
    return dlock__fail(DLOCK_EINVAL, "semaphore handle is NULL");
  int rc = check(&s->o, cb != NULL);
  if (rc == 0)
    rc = dlock__check_permits("permits", permits, 1);
  if (rc != 0)
    return rc;
  /* Taken off the count before the release is sent, as a blocking
   * release does. */
  dlock_client_t *c = s->o.c;
  pthread_mutex_lock(&c->mu);
  dlock__hold *h =
      dlock__holds_find(&c->holds, s->o.n.name, s->o.n.len, 0, DLOCK__KIND_SEM);
  int64_t held = h != NULL ? h->count : 0;
  if (held >= permits) {
    h->count -= (int)permits;
    if (h->count == 0)
      dlock__holds_remove(&c->holds, h);
  }
  pthread_mutex_unlock(&c->mu);
  if (held < permits)
    return dlock__fail(DLOCK_ENOTHELD,
                       "cannot release %lld permits of semaphore \"%.100s\": "
                       "this client acquired %lld; nothing was changed",
                       (long long)permits, s->o.n.name, (long long)held);
  counter_call_op *t = dlock__calloc(1, sizeof(*t));
  if (t == NULL) {
    dlock__sem_note_held(s, permits);
    return dlock__fail(DLOCK_ENOMEM, "out of memory starting a release");
  }
  t->o = &s->o;
  t->handle = s;
  t->permits = permits;
  t->sem_cb = cb;
  t->data = data;
  dlock__sem_release_call(&s->o.n, permits, &t->call);
  rc = start_call(t);
  if (rc != 0)
    dlock__sem_note_held(s, permits);
  return rc;
}

int dlock_latch_count_down_async(dlock_latch_t *l, dlock_latch_cb cb,
                                 void *data) {
  if (l == NULL)
    return dlock__fail(DLOCK_EINVAL, "latch handle is NULL");
  int rc = check(&l->o, cb != NULL);
  if (rc != 0)
    return rc;
  counter_call_op *t = dlock__calloc(1, sizeof(*t));
  if (t == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory starting a count-down");
  t->o = &l->o;
  t->handle = l;
  t->latch = 1;
  t->latch_cb = cb;
  t->data = data;
  dlock__latch_count_down_call(&l->o.n, &t->call);
  return start_call(t);
}
