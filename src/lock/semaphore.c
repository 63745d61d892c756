/*
 * Semaphores (Redisson's RSemaphore) and expirable-permit semaphores
 * (RPermitExpirableSemaphore), in Redisson's layout (see dlock.h), and the
 * wait by pub/sub that they and the count-down latch share.
 */
#define _GNU_SOURCE
#include "semaphore.h"
#include "alloc.h"

#include "engine.h" /* until the semaphore is split */
#include "error.h"
#include "monotime.h"
#include "proto/format.h"
#include "pubsub.h"
#include "reply.h"
#include "sleep.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

/* ---- shared -------------------------------------------------------------
 */

int dlock__check_object(dlock_client_t *c) { return dlock__check_canceled(c); }

int dlock__check_wait(int64_t wait_ms) {
  if ((wait_ms < 0 && wait_ms != DLOCK_WAIT_FOREVER) ||
      wait_ms > DLOCK_DURATION_MAX_MS)
    return dlock__fail(DLOCK_EINVAL,
                       "wait_ms must be 0..DLOCK_DURATION_MAX_MS (%lld ms, "
                       "about 31 years) or DLOCK_WAIT_FOREVER (-1), got %lld",
                       (long long)DLOCK_DURATION_MAX_MS, (long long)wait_ms);
  return 0;
}

int dlock__check_name(const char *name, size_t len) {
  if (name == NULL)
    return dlock__fail(DLOCK_EINVAL, "name is NULL");
  if (len == 0)
    return dlock__fail(DLOCK_EINVAL, "name is empty");
  if (len > DLOCK_NAME_MAX)
    return dlock__fail(DLOCK_EINVAL, "name is %zu bytes long; the limit is %d",
                       len, DLOCK_NAME_MAX);
  return 0;
}

/* FNV-1a over the client id: the client's half of its permit ids. Two
 * live clients never share an id (dlock.h), so neither do their permits
 * but for a 64-bit hash collision. */
static uint64_t client_hash(const dlock_client_t *c) {
  uint64_t h = 1469598103934665603ULL;
  for (const char *p = c->id; *p != '\0'; p++) {
    h ^= (unsigned char)*p;
    h *= 1099511628211ULL;
  }
  return h;
}

static void put_be64(unsigned char *out, uint64_t v) {
  for (int i = 7; i >= 0; i--) {
    out[i] = (unsigned char)(v & 0xff);
    v >>= 8;
  }
}

static uint64_t get_be64(const unsigned char *in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++)
    v = (v << 8) | in[i];
  return v;
}

void dlock__permit_id(const dlock_client_t *c, uint64_t owner,
                      unsigned char out[DLOCK__PERMIT_ID_BYTES]) {
  put_be64(out, client_hash(c));
  put_be64(out + 8, owner);
}

int dlock__permit_zset(const char *name, size_t len, char **out,
                       size_t *out_len) {
  return dlock__suffixed(name, len, "timeout", 7, out, out_len);
}

static int timed_out(const char *what, int64_t wait_ms) {
  return dlock__fail(DLOCK_ETIMEDOUT, "%s within %lld ms", what,
                     (long long)wait_ms);
}

/* Where a wait stands in riding out an outage. */
typedef struct riding {
  int64_t wait_ms, deadline_us;
  int64_t until_us; /* 0: no outage under way */
  int step;         /* the back-off's */
} riding;

/*
 * An attempt, made again after a pause when it fails with an error that a
 * failover or a restart causes (Redis unreachable or saying READONLY,
 * LOADING, MASTERDOWN; too few replicas acknowledging), as a lock's wait
 * does: until the wait ends, or outage_wait_ms after the first such error
 * for a wait without end. 'may_retry' (NULL: always) says whether this
 * error may be retried, and prepares the next attempt.
 */
static int attempt_riding(dlock_client_t *c, riding *r,
                          dlock__attempt_fn attempt, dlock__retry_fn may_retry,
                          void *arg, int64_t *sleep_ms, int *pass) {
  for (;;) {
    int rc = attempt(arg, sleep_ms, pass);
    if (rc >= 0) {
      r->until_us = 0;
      r->step = 0;
    }
    if ((rc != DLOCK_EIO && rc != DLOCK_ENOSYNC) || r->wait_ms == 0 ||
        c->opt.outage_wait_ms == 0 ||
        (may_retry != NULL && !may_retry(arg, rc)))
      return rc;
    int64_t now = dlock__now_us();
    if (r->until_us == 0)
      r->until_us = r->wait_ms == DLOCK_WAIT_FOREVER
                        ? dlock__after_ms(now, c->opt.outage_wait_ms)
                        : r->deadline_us;
    if (now >= r->until_us)
      return rc;
    char why[300];
    snprintf(why, sizeof(why), "%s", dlock_last_error());
    int prc = dlock__outage_pause(c, &r->step, r->until_us);
    if (prc != 0)
      return prc;
    if (dlock__now_us() >= r->until_us)
      return dlock__fail_text(rc, why); /* no time for another attempt */
  }
}

int dlock__wait_for(dlock_client_t *c, const char *channel, size_t channel_len,
                    int wake, int64_t permits, int64_t wait_ms,
                    dlock__attempt_fn attempt, dlock__retry_fn may_retry,
                    void *arg, const char *what) {
  int64_t deadline_us =
      wait_ms == DLOCK_WAIT_FOREVER ? INT64_MAX : dlock__deadline_ms(wait_ms);
  riding ride = {wait_ms, deadline_us, 0, 0};
  int64_t sleep_ms = -1;
  int pass = 0;
  int rc = attempt_riding(c, &ride, attempt, may_retry, arg, &sleep_ms, &pass);
  if (rc != 1)
    return rc;
  if (wait_ms == 0)
    return timed_out(what, wait_ms);
  /* Subscribed before the next attempt, so that a release between that
   * attempt and the sleep is heard. */
  dlock__waiter w;
  memset(&w, 0, sizeof(w));
  w.permits = permits;
  int64_t join_by = dlock__deadline_ms(c->opt.command_timeout_ms);
  rc = dlock__pubsub_join_as(c->ps, channel, channel_len,
                             join_by < deadline_us ? join_by : deadline_us, &w,
                             wake);
  if (rc != 0)
    return rc;
  int woken = 0;
  for (;;) {
    /* After a run of hand-overs inside the client ended with a release
     * for everyone, this client's waiters hold back a moment, so that a
     * waiter of another client gets the permits (see handover.c). */
    if (woken)
      dlock__sleep_us(
          dlock__pubsub_contention_pause(c->ps, &w, dlock__jitter()));
    pass = 0;
    rc = attempt_riding(c, &ride, attempt, may_retry, arg, &sleep_ms, &pass);
    if (rc != 1)
      break;
    /* The wake-up was for a free permit this waiter cannot use (it needs
     * more): another waiter of this client may need fewer. */
    if (woken && pass)
      dlock__pubsub_pass(c->ps, &w);
    int64_t now = dlock__now_us(), until = deadline_us;
    if (now >= deadline_us) {
      rc = timed_out(what, wait_ms);
      break;
    }
    /* A lease that ends frees a permit without a message: the waiter
     * tries again then. */
    if (sleep_ms >= 0 && dlock__after_ms(now, sleep_ms) < until)
      until = dlock__after_ms(now, sleep_ms);
    rc = dlock__pubsub_wait(c->ps, &w, until);
    if (rc < 0 || rc == 2)
      break;
    woken = rc > 0;
  }
  dlock__pubsub_leave(c->ps, &w);
  /* Handed the permits by a release inside the client: they are this
   * waiter's now. */
  if (w.grant != 0)
    rc = DLOCK__HANDED;
  return rc;
}

/* The integer element 'i' of an array reply; 0 or DLOCK_EPROTO. */
static int element(const redisReply *r, size_t i, int64_t *out) {
  if (r == NULL || r->type != REDIS_REPLY_ARRAY || i >= r->elements)
    return dlock__fail(DLOCK_EPROTO, "a semaphore script gave a bad reply");
  return dlock__decode_integer(r->element[i], out);
}

/* Runs one script call on 'c' and decodes its integer reply. */
static int eval_integer(dlock_client_t *c, const dlock__eval *call,
                        int64_t *out) {
  redisReply *reply;
  dlock__synced sy;
  int rc = dlock__eval_write(c, 1, call, &reply, 0, &sy);
  if (rc != 0)
    return rc;
  rc = dlock__decode_integer(reply, out);
  freeReplyObject(reply);
  return rc;
}

static int check_permits(const char *what, int64_t n, int64_t min) {
  if (n >= min && n <= DLOCK_PERMITS_MAX)
    return 0;
  return dlock__fail(DLOCK_EINVAL,
                     "%s must be %lld..DLOCK_PERMITS_MAX (%lld), "
                     "got %lld",
                     what, (long long)min, (long long)DLOCK_PERMITS_MAX,
                     (long long)n);
}

/* The try-set and add calls that both semaphores share (same key, same
 * channel, same meaning). */
static int try_set_permits(dlock_client_t *c, const char *name, size_t len,
                           const char *channel, size_t channel_len,
                           int64_t permits) {
  int rc = check_permits("permits", permits, 0);
  if (rc == 0)
    rc = dlock__check_object(c);
  if (rc != 0)
    return rc;
  char n[24];
  snprintf(n, sizeof(n), "%" PRId64, permits);
  const char *argv[] = {name, channel, n};
  const size_t lens[] = {len, channel_len, strlen(n)};
  dlock__eval call = {&dlock__script_sem_set, 2, 1, argv, lens};
  int64_t set;
  rc = eval_integer(c, &call, &set);
  return rc != 0 ? rc : set == 1;
}

static int add_permits(dlock_client_t *c, const char *name, size_t len,
                       const char *channel, size_t channel_len, int64_t delta,
                       int64_t *free_after) {
  if (free_after != NULL)
    *free_after = 0;
  int64_t magnitude = delta < 0 ? -(delta + 1) + 1 : delta;
  int rc = delta == 0 ? dlock__fail(DLOCK_EINVAL,
                                    "delta must not be 0: adding no permits "
                                    "is not a change")
                      : check_permits("|delta|", magnitude, 1);
  if (rc == 0)
    rc = dlock__check_object(c);
  if (rc != 0)
    return rc;
  char n[24];
  snprintf(n, sizeof(n), "%" PRId64, magnitude);
  const char *argv[] = {name, channel, n, delta > 0 ? "1" : "0"};
  const size_t lens[] = {len, channel_len, strlen(n), 1};
  dlock__eval call = {&dlock__script_sem_add, 2, 2, argv, lens};
  int64_t now;
  rc = eval_integer(c, &call, &now);
  if (rc != 0)
    return rc;
  if (now < 0)
    return dlock__fail(DLOCK_EINVAL,
                       "cannot take %lld permits away from semaphore "
                       "\"%.100s\": fewer are free; nothing was changed",
                       (long long)magnitude, name);
  if (free_after != NULL)
    *free_after = now;
  return 0;
}

/* ---- semaphores ---------------------------------------------------------
 */

struct dlock_sem {
  dlock_client_t *c;
  char *name;
  size_t len;
  char *channel; /* redisson_sc:{name} */
  size_t channel_len;
};

int dlock_sem_getn(dlock_client_t *c, const char *name, size_t len,
                   dlock_sem_t **out) {
  if (out != NULL)
    *out = NULL;
  if (c == NULL || out == NULL)
    return dlock__fail(DLOCK_EINVAL, "client and out must not be NULL");
  int rc = dlock__check_object(c);
  if (rc == 0)
    rc = dlock__check_name(name, len);
  if (rc != 0)
    return rc;
  dlock_sem_t *s = dlock__calloc(1, sizeof(*s));
  if (s == NULL || (s->name = dlock__memdup(name, len)) == NULL) {
    dlock__free(s);
    return dlock__fail(DLOCK_ENOMEM, "out of memory creating a semaphore");
  }
  s->c = c;
  s->len = len;
  rc = dlock__prefixed("redisson_sc", name, len, &s->channel, &s->channel_len);
  if (rc != 0) {
    dlock_sem_free(s);
    return rc;
  }
  *out = s;
  return 0;
}

int dlock_sem_get(dlock_client_t *c, const char *name, dlock_sem_t **out) {
  return dlock_sem_getn(c, name, name != NULL ? strlen(name) : 0, out);
}

void dlock_sem_free(dlock_sem_t *s) {
  if (s == NULL)
    return;
  dlock__free(s->name);
  dlock__free(s->channel);
  dlock__free(s);
}

const char *dlock_sem_name(const dlock_sem_t *s, size_t *len) {
  if (len != NULL)
    *len = s != NULL ? s->len : 0;
  return s != NULL ? s->name : NULL;
}

int dlock_sem_try_set_permits(dlock_sem_t *s, int64_t permits) {
  if (s == NULL)
    return dlock__fail(DLOCK_EINVAL, "semaphore handle is NULL");
  return try_set_permits(s->c, s->name, s->len, s->channel, s->channel_len,
                         permits);
}

int dlock_sem_add_permits(dlock_sem_t *s, int64_t delta, int64_t *free_after) {
  if (s == NULL)
    return dlock__fail(DLOCK_EINVAL, "semaphore handle is NULL");
  return add_permits(s->c, s->name, s->len, s->channel, s->channel_len, delta,
                     free_after);
}

/* Adds 'n' (negative: takes away) to the permits the client holds. 0, or
 * DLOCK_ENOMEM. */
static int note_held(dlock_sem_t *s, int64_t n) {
  dlock_client_t *c = s->c;
  pthread_mutex_lock(&c->mu);
  dlock__hold *h =
      dlock__holds_put(&c->holds, s->name, s->len, 0, DLOCK__KIND_SEM);
  if (h != NULL) {
    int64_t count = (int64_t)h->count + n;
    h->count = count < 0                   ? 0
               : count > DLOCK_PERMITS_MAX ? (int)DLOCK_PERMITS_MAX
                                           : (int)count;
    /* Never renewed, and never dropped as a lease run out. */
    h->lease_ms = DLOCK_DURATION_MAX_MS;
    h->confirmed_us = dlock__now_us();
    if (h->count == 0)
      dlock__holds_remove(&c->holds, h);
  }
  pthread_mutex_unlock(&c->mu);
  return h != NULL ? 0
                   : dlock__fail(DLOCK_ENOMEM, "out of memory counting the "
                                               "permits held");
}

int64_t dlock_sem_held(dlock_sem_t *s) {
  if (s == NULL || dlock__check_object(s->c) != 0)
    return 0;
  pthread_mutex_lock(&s->c->mu);
  dlock__hold *h =
      dlock__holds_find(&s->c->holds, s->name, s->len, 0, DLOCK__KIND_SEM);
  int64_t n = h != NULL ? h->count : 0;
  pthread_mutex_unlock(&s->c->mu);
  return n;
}

typedef struct sem_try {
  dlock_sem_t *s;
  int64_t permits;
  char n[24];
} sem_try;

static int sem_attempt(void *arg, int64_t *sleep_ms, int *pass) {
  sem_try *t = arg;
  dlock_sem_t *s = t->s;
  const char *argv[] = {s->name, t->n};
  const size_t lens[] = {s->len, strlen(t->n)};
  dlock__eval call = {&dlock__script_sem_acquire, 1, 1, argv, lens};
  redisReply *reply;
  dlock__synced sy;
  int rc = dlock__check_object(s->c);
  if (rc == 0)
    rc = dlock__eval_write(s->c, 1, &call, &reply, 0, &sy);
  if (rc != 0)
    return rc;
  int64_t taken = 0, free_permits = 0;
  rc = element(reply, 0, &taken);
  if (rc == 0)
    rc = element(reply, 1, &free_permits);
  freeReplyObject(reply);
  if (rc != 0)
    return rc;
  if (taken == 1 && !sy.ok) {
    /* Taken on the master only: given back, and not reported taken. */
    const char *rargv[] = {s->name, s->channel, t->n};
    const size_t rlens[] = {s->len, s->channel_len, strlen(t->n)};
    dlock__eval back = {&dlock__script_sem_release, 2, 1, rargv, rlens};
    int64_t ignored;
    eval_integer(s->c, &back, &ignored);
    return dlock__sync_fail(s->c, &sy, "semaphore", s->name, s->len);
  }
  if (taken == 1)
    return 0;
  /* No lease ends here: only a release or a new count frees permits. */
  *sleep_ms = -1;
  *pass = free_permits > 0;
  return 1;
}

/* A plain semaphore's permits have no owner: an attempt that got no answer
 * may have taken them, and another would take as many again, never to be
 * released. Only the failures that took nothing are tried again: too few
 * replicas (the permits were given back) and Redis refusing the script
 * (READONLY, LOADING, MASTERDOWN: it did not run). */
static int sem_may_retry(void *arg, int rc) {
  (void)arg;
  return rc == DLOCK_ENOSYNC || strncmp(dlock_last_error(), "redis: ", 7) == 0;
}

int dlock_sem_acquire(dlock_sem_t *s, int64_t permits, int64_t wait_ms) {
  if (s == NULL)
    return dlock__fail(DLOCK_EINVAL, "semaphore handle is NULL");
  int rc = check_permits("permits", permits, 1);
  if (rc == 0)
    rc = dlock__check_wait(wait_ms);
  if (rc == 0)
    rc = dlock__check_object(s->c);
  if (rc != 0)
    return rc;
  sem_try t = {s, permits, {0}};
  snprintf(t.n, sizeof(t.n), "%" PRId64, permits);
  char what[160];
  snprintf(what, sizeof(what),
           "semaphore \"%.100s\": %lld permits not acquired", s->name,
           (long long)permits);
  rc = dlock__wait_for(s->c, s->channel, s->channel_len, DLOCK__WAKE_COUNT,
                       permits, wait_ms, sem_attempt, sem_may_retry, &t, what);
  /* Handed over by a release of this client: counted already. */
  if (rc == DLOCK__HANDED)
    return 0;
  if (rc == 0 && note_held(s, permits) != 0) {
    /* Not counted, they could never be released: given back now. */
    const char *argv[] = {s->name, s->channel, t.n};
    const size_t lens[] = {s->len, s->channel_len, strlen(t.n)};
    dlock__eval call = {&dlock__script_sem_release, 2, 1, argv, lens};
    int64_t ignored;
    eval_integer(s->c, &call, &ignored);
    rc = dlock__fail(DLOCK_ENOMEM, "out of memory counting the permits held");
  }
  return rc;
}

int dlock_sem_release(dlock_sem_t *s, int64_t permits) {
  if (s == NULL)
    return dlock__fail(DLOCK_EINVAL, "semaphore handle is NULL");
  int rc = check_permits("permits", permits, 1);
  if (rc == 0)
    rc = dlock__check_object(s->c);
  if (rc != 0)
    return rc;
  dlock_client_t *c = s->c;
  /* A thread of this client waiting for these permits (or fewer) is
   * handed them: nothing changes in Redis, no message wakes the waiters of
   * every client to race for them, and the waiter needs no round trip.
   * After a run of such hand-overs they go back to Redis for everyone
   * (see handover.c for the lock's same scheme). The waiter is reserved
   * first, so that it stays to be told the outcome. */
  int at_cap = 0;
  dlock__waiter *next =
      dlock__pubsub_reserve_permits(c->ps, s->channel, s->channel_len, permits,
                                    DLOCK__HANDOVER_RUN_MAX, &at_cap);
  int64_t handed = next != NULL && !at_cap ? next->permits : 0;
  /* Taken off the count before the release is sent, so that two threads
   * cannot both give back the same permit. Permits handed over stay on
   * the count: they stay the client's, counted before their new holder
   * can give them back. */
  pthread_mutex_lock(&c->mu);
  dlock__hold *h =
      dlock__holds_find(&c->holds, s->name, s->len, 0, DLOCK__KIND_SEM);
  int64_t held = h != NULL ? h->count : 0;
  if (held >= permits) {
    h->count -= (int)(permits - handed);
    if (h->count == 0)
      dlock__holds_remove(&c->holds, h);
  }
  pthread_mutex_unlock(&c->mu);
  if (held < permits) {
    if (next != NULL)
      dlock__pubsub_resolve(c->ps, next, 0, DLOCK__RESOLVE_FAILED);
    return dlock__fail(DLOCK_ENOTHELD,
                       "cannot release %lld permits of semaphore \"%.100s\": "
                       "this client acquired %lld; nothing was changed (use "
                       "dlock_sem_add_permits to add permits)",
                       (long long)permits, s->name, (long long)held);
  }
  if (handed > 0) {
    dlock__pubsub_resolve(c->ps, next, 1, DLOCK__RESOLVE_HANDED);
    next = NULL;
    permits -= handed;
    if (permits == 0)
      return 0;
  }
  char n[24];
  snprintf(n, sizeof(n), "%" PRId64, permits);
  const char *argv[] = {s->name, s->channel, n};
  const size_t lens[] = {s->len, s->channel_len, strlen(n)};
  dlock__eval call = {&dlock__script_sem_release, 2, 1, argv, lens};
  int64_t free_now;
  rc = eval_integer(c, &call, &free_now);
  /* A refusal (the key is not a semaphore, a server error) released
   * nothing: the permits are the client's still. Without an answer the
   * release may have run, and sending it again could give back twice. */
  if (rc != 0 && !dlock__outcome_unknown(rc))
    note_held(s, permits);
  /* The waiter reserved at the end of a run: the release message wakes it
   * with the others, after its hold-back; if there was none, it tries. */
  if (next != NULL)
    dlock__pubsub_resolve(c->ps, next, 0,
                          rc == 0 ? DLOCK__RESOLVE_RELEASED
                                  : DLOCK__RESOLVE_FAILED);
  return rc;
}

int dlock_sem_available(dlock_sem_t *s, int64_t *out) {
  if (out != NULL)
    *out = 0;
  if (s == NULL || out == NULL)
    return dlock__fail(DLOCK_EINVAL, "semaphore and out must not be NULL");
  int rc = dlock__check_object(s->c);
  if (rc != 0)
    return rc;
  const char *argv[] = {"GET", s->name};
  const size_t lens[] = {3, s->len};
  redisReply *r;
  rc = dlock__command(s->c, 2, argv, lens, &r);
  if (rc != 0)
    return rc;
  int64_t n = 0;
  rc = r->type == REDIS_REPLY_ERROR ? dlock__fail_reply(r->str, r->len)
                                    : dlock__decode_number(r, 0, &n);
  freeReplyObject(r);
  if (rc == DLOCK_EPROTO)
    rc = dlock__fail(DLOCK_ENOTLOCK,
                     "\"%.100s\" holds a string that is not a number of "
                     "permits",
                     s->name);
  if (rc == 0)
    *out = n;
  return rc;
}

int dlock_sem_drain(dlock_sem_t *s, int64_t *out) {
  if (out != NULL)
    *out = 0;
  if (s == NULL)
    return dlock__fail(DLOCK_EINVAL, "semaphore handle is NULL");
  int rc = dlock__check_object(s->c);
  if (rc != 0)
    return rc;
  const char *argv[] = {s->name};
  const size_t lens[] = {s->len};
  dlock__eval call = {&dlock__script_sem_drain, 1, 0, argv, lens};
  int64_t n;
  rc = eval_integer(s->c, &call, &n);
  if (rc == 0 && n > 0)
    rc = note_held(s, n);
  if (rc == 0 && out != NULL)
    *out = n;
  return rc;
}

/* ---- expirable-permit semaphores -----------------------------------------
 */

struct dlock_psem {
  dlock_client_t *c;
  char *name;
  size_t len;
  char *channel; /* redisson_sc:{name} */
  size_t channel_len;
  char *zset; /* {name}:timeout */
  size_t zset_len;
  char *token_key; /* dlock_permit_token:{name} */
  size_t token_key_len;
};

int dlock_psem_getn(dlock_client_t *c, const char *name, size_t len,
                    dlock_psem_t **out) {
  if (out != NULL)
    *out = NULL;
  if (c == NULL || out == NULL)
    return dlock__fail(DLOCK_EINVAL, "client and out must not be NULL");
  int rc = dlock__check_object(c);
  if (rc == 0)
    rc = dlock__check_name(name, len);
  if (rc != 0)
    return rc;
  dlock_psem_t *s = dlock__calloc(1, sizeof(*s));
  if (s == NULL || (s->name = dlock__memdup(name, len)) == NULL) {
    dlock__free(s);
    return dlock__fail(DLOCK_ENOMEM, "out of memory creating a semaphore");
  }
  s->c = c;
  s->len = len;
  rc = dlock__prefixed("redisson_sc", name, len, &s->channel, &s->channel_len);
  if (rc == 0)
    rc = dlock__permit_zset(name, len, &s->zset, &s->zset_len);
  if (rc == 0)
    rc = dlock__prefixed("dlock_permit_token", name, len, &s->token_key,
                         &s->token_key_len);
  if (rc != 0) {
    dlock_psem_free(s);
    return rc;
  }
  *out = s;
  return 0;
}

int dlock_psem_get(dlock_client_t *c, const char *name, dlock_psem_t **out) {
  return dlock_psem_getn(c, name, name != NULL ? strlen(name) : 0, out);
}

void dlock_psem_free(dlock_psem_t *s) {
  if (s == NULL)
    return;
  dlock__free(s->name);
  dlock__free(s->channel);
  dlock__free(s->zset);
  dlock__free(s->token_key);
  dlock__free(s);
}

const char *dlock_psem_name(const dlock_psem_t *s, size_t *len) {
  if (len != NULL)
    *len = s != NULL ? s->len : 0;
  return s != NULL ? s->name : NULL;
}

int dlock_psem_try_set_permits(dlock_psem_t *s, int64_t permits) {
  if (s == NULL)
    return dlock__fail(DLOCK_EINVAL, "semaphore handle is NULL");
  return try_set_permits(s->c, s->name, s->len, s->channel, s->channel_len,
                         permits);
}

int dlock_psem_add_permits(dlock_psem_t *s, int64_t delta,
                           int64_t *free_after) {
  if (s == NULL)
    return dlock__fail(DLOCK_EINVAL, "semaphore handle is NULL");
  return add_permits(s->c, s->name, s->len, s->channel, s->channel_len, delta,
                     free_after);
}

static void to_hex(const unsigned char *b, size_t n, char *out) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = digits[b[i] >> 4];
    out[2 * i + 1] = digits[b[i] & 15];
  }
  out[2 * n] = '\0';
}

static int from_hex(const char *s, unsigned char *out, size_t n) {
  for (size_t i = 0; i < 2 * n; i++) {
    char ch = s[i];
    int v = ch >= '0' && ch <= '9'   ? ch - '0'
            : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
            : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
                                     : -1;
    if (v < 0)
      return -1;
    if (i % 2 == 0)
      out[i / 2] = (unsigned char)(v << 4);
    else
      out[i / 2] |= (unsigned char)v;
  }
  return s[2 * n] == '\0' ? 0 : -1;
}

/* A fresh random owner number for a permit, unused by the client's other
 * permits, so that its id says nothing about the holder. */
static int new_permit_owner(dlock_psem_t *s, uint64_t *out) {
  dlock_client_t *c = s->c;
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
    int used = dlock__holds_find(&c->holds, s->name, s->len, v,
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
  char lease[24];   /* what the script is sent */
  uint64_t owner;
  unsigned char id[DLOCK__PERMIT_ID_BYTES];
  dlock_permit_t *out;
} psem_try;

/* Records a permit just taken, for its renewal and its release. */
static int record_permit(psem_try *t, uint64_t token, int64_t sent_us) {
  dlock_client_t *c = t->s->c;
  pthread_mutex_lock(&c->mu);
  dlock__hold *h = dlock__holds_put(&c->holds, t->s->name, t->s->len, t->owner,
                                    DLOCK__KIND_PERMIT);
  if (h != NULL) {
    h->count = 1;
    h->token = token;
    h->watchdog = t->lease_ms == DLOCK_WATCHDOG;
    h->lease_ms = h->watchdog ? c->opt.watchdog_timeout_ms : t->lease_ms;
    h->lost = 0;
    h->abandoned = 0;
    h->confirmed_us = sent_us;
  }
  pthread_mutex_unlock(&c->mu);
  return h != NULL ? 0
                   : dlock__fail(DLOCK_ENOMEM, "out of memory recording a "
                                               "permit");
}

static int psem_give_back(dlock_psem_t *s, const unsigned char *id,
                          int64_t *result);

static int psem_attempt(void *arg, int64_t *sleep_ms, int *pass) {
  psem_try *t = arg;
  dlock_psem_t *s = t->s;
  const char *argv[] = {s->name,      s->zset,  s->channel,
                        s->token_key, t->lease, (const char *)t->id};
  const size_t lens[] = {s->len,           s->zset_len,      s->channel_len,
                         s->token_key_len, strlen(t->lease), sizeof(t->id)};
  dlock__eval call = {&dlock__script_psem_acquire, 4, 2, argv, lens};
  redisReply *reply;
  int rc = dlock__check_object(s->c);
  if (rc != 0)
    return rc;
  int64_t sent_us = dlock__now_us();
  dlock__synced sy;
  rc = dlock__eval_write(s->c, 1, &call, &reply, 0, &sy);
  if (rc != 0)
    return rc;
  int64_t taken = 0, a = 0, ends = 0;
  rc = element(reply, 0, &taken);
  if (rc == 0)
    rc = element(reply, 1, &a);
  if (rc == 0 && taken == 1)
    rc = element(reply, 2, &ends);
  freeReplyObject(reply);
  if (rc != 0)
    return rc;
  if (taken == 1 && !sy.ok) {
    /* Taken on the master only: given back, and not reported taken. */
    int64_t ignored;
    psem_give_back(s, t->id, &ignored);
    return dlock__sync_fail(s->c, &sy, "semaphore", s->name, s->len);
  }
  if (taken == 1) {
    rc = record_permit(t, (uint64_t)a, sent_us);
    if (rc != 0) {
      /* Not recorded means never renewed nor released: given back now. */
      int64_t ignored;
      psem_give_back(s, t->id, &ignored);
      return rc;
    }
    to_hex(t->id, sizeof(t->id), t->out->id);
    t->out->token = (uint64_t)a;
    t->out->owner = t->owner;
    t->out->expires_ms = ends;
    return 0;
  }
  /* Until the first lease among the permits taken ends, when one may come
   * back without a message. */
  *sleep_ms = a;
  *pass = 0;
  return 1;
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
  if (dlock__check_object(t->s->c) == 0)
    psem_give_back(t->s, t->id, &ignored);
  if (new_permit_owner(t->s, &t->owner) != 0)
    return 0;
  dlock__permit_id(t->s->c, t->owner, t->id);
  dlock__fail_text(rc, why);
  return 1;
}

int dlock_psem_acquire(dlock_psem_t *s, int64_t wait_ms, int64_t lease_ms,
                       dlock_permit_t *permit) {
  if (permit != NULL)
    memset(permit, 0, sizeof(*permit));
  if (s == NULL || permit == NULL)
    return dlock__fail(DLOCK_EINVAL, "semaphore and permit must not be NULL");
  int rc = 0;
  if ((lease_ms <= 0 && lease_ms != DLOCK_WATCHDOG) ||
      lease_ms > DLOCK_DURATION_MAX_MS)
    rc = dlock__fail(DLOCK_EINVAL,
                     "lease_ms must be 1..DLOCK_DURATION_MAX_MS (%lld ms, "
                     "about 31 years) or DLOCK_WATCHDOG (-1), got %lld",
                     (long long)DLOCK_DURATION_MAX_MS, (long long)lease_ms);
  if (rc == 0)
    rc = dlock__check_wait(wait_ms);
  if (rc == 0)
    rc = dlock__check_object(s->c);
  if (rc != 0)
    return rc;
  psem_try t;
  memset(&t, 0, sizeof(t));
  t.s = s;
  t.lease_ms = lease_ms;
  t.out = permit;
  snprintf(t.lease, sizeof(t.lease), "%" PRId64,
           lease_ms == DLOCK_WATCHDOG ? s->c->opt.watchdog_timeout_ms
                                      : lease_ms);
  rc = new_permit_owner(s, &t.owner);
  if (rc != 0)
    return rc;
  dlock__permit_id(s->c, t.owner, t.id);
  char what[160];
  snprintf(what, sizeof(what), "semaphore \"%.100s\": no permit acquired",
           s->name);
  rc = dlock__wait_for(s->c, s->channel, s->channel_len, DLOCK__WAKE_COUNT, 0,
                       wait_ms, psem_attempt, psem_may_retry, &t, what);
  if (rc != 0 && dlock__outcome_unknown(rc)) {
    /* The last attempt may have taken the permit without the answer
     * reaching here: give it back if Redis answers now (else it comes
     * back when its lease ends). The caller hears the attempt's error. */
    char detail[256];
    snprintf(detail, sizeof(detail), "%s", dlock_last_error());
    int64_t ignored;
    if (dlock__check_object(s->c) == 0)
      psem_give_back(s, t.id, &ignored);
    dlock__fail_text(rc, detail);
    memset(permit, 0, sizeof(*permit));
  }
  return rc;
}

/* Runs the release script for permit 'id': '*result' 1 given back within
 * its lease, 0 after it, -1 no such permit. */
static int psem_give_back(dlock_psem_t *s, const unsigned char *id,
                          int64_t *result) {
  char hex[2 * DLOCK__PERMIT_ID_BYTES + 1];
  to_hex(id, DLOCK__PERMIT_ID_BYTES, hex);
  const char *argv[] = {s->name, s->zset, s->channel, (const char *)id, hex};
  const size_t lens[] = {s->len, s->zset_len, s->channel_len,
                         DLOCK__PERMIT_ID_BYTES, 2 * DLOCK__PERMIT_ID_BYTES};
  dlock__eval call = {&dlock__script_psem_release, 3, 2, argv, lens};
  return eval_integer(s->c, &call, result);
}

int dlock_psem_release(dlock_psem_t *s, const char *id) {
  if (s == NULL || id == NULL)
    return dlock__fail(DLOCK_EINVAL, "semaphore and id must not be NULL");
  unsigned char raw[DLOCK__PERMIT_ID_BYTES];
  if (strnlen(id, 2 * DLOCK__PERMIT_ID_BYTES + 1) !=
          2 * DLOCK__PERMIT_ID_BYTES ||
      from_hex(id, raw, sizeof(raw)) != 0)
    return dlock__fail(DLOCK_EINVAL,
                       "permit id \"%.40s\" is not 32 hexadecimal digits", id);
  dlock_client_t *c = s->c;
  int rc = dlock__check_object(c);
  if (rc != 0)
    return rc;
  /* A permit of this client has a record: the watchdog stops renewing it,
   * and its loss, if it was found lost, is reported. */
  unsigned char mine[DLOCK__PERMIT_ID_BYTES];
  uint64_t owner = get_be64(raw + 8);
  dlock__permit_id(c, owner, mine);
  int ours = memcmp(mine, raw, 8) == 0;
  int known = 0, lost = 0;
  if (ours) {
    pthread_mutex_lock(&c->mu);
    dlock__hold *h = dlock__holds_find(&c->holds, s->name, s->len, owner,
                                       DLOCK__KIND_PERMIT);
    known = h != NULL;
    lost = h != NULL && h->lost;
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
    dlock__hold *h = dlock__holds_find(&c->holds, s->name, s->len, owner,
                                       DLOCK__KIND_PERMIT);
    if (h != NULL)
      dlock__holds_remove(&c->holds, h);
    pthread_mutex_unlock(&c->mu);
  }
  if (rc != 0)
    return rc;
  if (lost || result == 0 || (result < 0 && known))
    return dlock__fail(DLOCK_ELOST,
                       "permit %s of semaphore \"%.100s\" was lost while "
                       "held (its lease ended first): another holder may "
                       "have had it meanwhile",
                       id, s->name);
  if (result < 0)
    return dlock__fail(DLOCK_ENOTHELD,
                       "permit %s of semaphore \"%.100s\" is not taken: "
                       "never acquired, or released already",
                       id, s->name);
  return 0;
}

int dlock_psem_count(dlock_psem_t *s, int64_t *free_out, int64_t *taken_out) {
  if (free_out != NULL)
    *free_out = 0;
  if (taken_out != NULL)
    *taken_out = 0;
  if (s == NULL)
    return dlock__fail(DLOCK_EINVAL, "semaphore handle is NULL");
  int rc = dlock__check_object(s->c);
  if (rc != 0)
    return rc;
  const char *argv[] = {s->name, s->zset, s->channel};
  const size_t lens[] = {s->len, s->zset_len, s->channel_len};
  dlock__eval call = {&dlock__script_psem_count, 3, 0, argv, lens};
  redisReply *reply;
  dlock__synced sy;
  rc = dlock__eval_write(s->c, 1, &call, &reply, 0, &sy);
  if (rc != 0)
    return rc;
  int64_t free_permits = 0, taken = 0;
  rc = element(reply, 0, &free_permits);
  if (rc == 0)
    rc = element(reply, 1, &taken);
  freeReplyObject(reply);
  if (rc != 0)
    return rc;
  if (free_out != NULL)
    *free_out = free_permits < 0 ? 0 : free_permits;
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

enum { Q_TYPE, Q_GET, Q_PTTL, Q_ZTYPE, Q_ZRANGE, Q_COUNT };

static int decode_counter(redisReply **r, const char *name,
                          dlock_counter_info_t *info) {
  for (int i = 0; i < Q_COUNT; i++)
    if (r[i]->type == REDIS_REPLY_ERROR)
      return dlock__fail_reply(r[i]->str, r[i]->len);
  if (r[Q_TYPE]->type != REDIS_REPLY_STATUS ||
      r[Q_ZTYPE]->type != REDIS_REPLY_STATUS)
    return dlock__fail(DLOCK_EPROTO, "TYPE gave a bad reply");
  const char *type = r[Q_TYPE]->str, *ztype = r[Q_ZTYPE]->str;
  if (strcmp(type, "none") != 0 && strcmp(type, "string") != 0)
    return dlock__fail(DLOCK_ENOTLOCK,
                       "\"%.100s\" is a %s, not a semaphore or a latch", name,
                       type);
  if (strcmp(type, "string") == 0) {
    if (dlock__decode_number(r[Q_GET], 0, &info->count) != 0)
      return dlock__fail(DLOCK_ENOTLOCK,
                         "\"%.100s\" holds a string that is not a number",
                         name);
    info->exists = 1;
  }
  int64_t pttl = 0;
  if (dlock__decode_integer(r[Q_PTTL], &pttl) != 0)
    return DLOCK_EPROTO;
  info->ttl_ms = pttl == -2 ? 0 : pttl == -1 ? DLOCK_NO_EXPIRY : pttl;
  info->expirable = strcmp(ztype, "zset") == 0;
  const redisReply *z = r[Q_ZRANGE];
  if (!info->expirable)
    return 0;
  if (z->type != REDIS_REPLY_ARRAY || z->elements % 2 != 0)
    return dlock__fail(DLOCK_EPROTO, "ZRANGE gave a bad reply");
  info->permits = dlock__calloc(z->elements / 2 + 1, sizeof(*info->permits));
  if (info->permits == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory inspecting a semaphore");
  for (size_t i = 0; i + 1 < z->elements; i += 2) {
    const redisReply *m = z->element[i], *score = z->element[i + 1];
    if (m->type != REDIS_REPLY_STRING)
      continue;
    dlock_permit_info_t *p = &info->permits[info->npermits++];
    /* Redisson's current ids are 16 bytes; older ones their hex text. */
    if (m->len == DLOCK__PERMIT_ID_BYTES)
      to_hex((const unsigned char *)m->str, m->len, p->id);
    else
      snprintf(p->id, sizeof(p->id), "%.*s", (int)m->len, m->str);
    double at =
        score->type == REDIS_REPLY_STRING ? strtod(score->str, NULL) : 0;
    /* Redisson's mark of a permit without a lease. */
    p->expires_ms = at >= 922337203685477.0 ? DLOCK_NO_EXPIRY : (int64_t)at;
  }
  return 0;
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
  char *cmds[Q_COUNT] = {NULL};
  size_t lens[Q_COUNT];
  redisReply *r[Q_COUNT] = {NULL};
  rc = dlock__permit_zset(name, len, &zset, &zlen);
  if (rc == 0) {
    const char *type[] = {"TYPE", name};
    const size_t type_l[] = {4, len};
    const char *get[] = {"GET", name};
    const size_t get_l[] = {3, len};
    const char *pttl[] = {"PTTL", name};
    const size_t pttl_l[] = {4, len};
    const char *ztype[] = {"TYPE", zset};
    const size_t ztype_l[] = {4, zlen};
    const char *zrange[] = {"ZRANGE", zset, "0", "-1", "WITHSCORES"};
    const size_t zrange_l[] = {6, zlen, 1, 2, 10};
    int n[Q_COUNT];
    n[Q_TYPE] = dlock__format_argv(&cmds[Q_TYPE], 2, type, type_l);
    /* GET of a key of another type is an error reply, which TYPE explains
     * better: it is read only when TYPE says string (see decode_counter). */
    n[Q_GET] = dlock__format_argv(&cmds[Q_GET], 2, get, get_l);
    n[Q_PTTL] = dlock__format_argv(&cmds[Q_PTTL], 2, pttl, pttl_l);
    n[Q_ZTYPE] = dlock__format_argv(&cmds[Q_ZTYPE], 2, ztype, ztype_l);
    n[Q_ZRANGE] = dlock__format_argv(&cmds[Q_ZRANGE], 5, zrange, zrange_l);
    for (int i = 0; i < Q_COUNT; i++) {
      if (n[i] < 0)
        rc = dlock__fail(DLOCK_ENOMEM, "out of memory inspecting a semaphore");
      lens[i] = n[i] < 0 ? 0 : (size_t)n[i];
    }
  }
  if (rc == 0)
    rc = dlock__client_call(c, name, len, Q_COUNT, cmds, lens, r, 0);
  dlock_counter_info_t *info = NULL;
  if (rc == 0 && (info = dlock__calloc(1, sizeof(*info))) == NULL)
    rc = dlock__fail(DLOCK_ENOMEM, "out of memory inspecting a semaphore");
  if (rc == 0) {
    /* A key of another type makes GET (and ZRANGE) fail: TYPE says
     * what it is instead. */
    if (r[Q_TYPE]->type == REDIS_REPLY_STATUS &&
        strcmp(r[Q_TYPE]->str, "none") != 0 &&
        strcmp(r[Q_TYPE]->str, "string") != 0)
      rc = dlock__fail(DLOCK_ENOTLOCK,
                       "\"%.100s\" is a %s, not a semaphore or a latch", name,
                       r[Q_TYPE]->str);
    else if (r[Q_ZTYPE]->type == REDIS_REPLY_STATUS &&
             strcmp(r[Q_ZTYPE]->str, "none") != 0 &&
             strcmp(r[Q_ZTYPE]->str, "zset") != 0)
      rc = dlock__fail(DLOCK_ENOTLOCK,
                       "the permits of \"%.100s\" are a %s, not a zset", name,
                       r[Q_ZTYPE]->str);
    else
      rc = decode_counter(r, name, info);
  }
  for (int i = 0; i < Q_COUNT; i++) {
    if (cmds[i] != NULL)
      dlock__format_free(cmds[i]);
    if (r[i] != NULL)
      freeReplyObject(r[i]);
  }
  dlock__free(zset);
  if (rc != 0) {
    dlock_counter_info_free(info);
    return rc;
  }
  *out = info;
  return 0;
}
