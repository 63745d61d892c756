/*
 * Count-down latches (Redisson's RCountDownLatch): the count is a string
 * under the latch's name, deleted when it reaches zero, at which point
 * "redisson_countdownlatch__channel__{name}" is told "0" and every waiter
 * of every client wakes.
 */
#include "alloc.h"
#include "semaphore.h"

#include "engine.h" /* until the semaphore is split */
#include "error.h"
#include "reply.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* The largest count: Lua, which runs the scripts, counts in doubles. */
#define COUNT_MAX INT64_C(9007199254740992)

struct dlock_latch {
  dlock_client_t *c;
  char *name;
  size_t len;
  char *channel; /* redisson_countdownlatch__channel__{name} */
  size_t channel_len;
};

int dlock_latch_getn(dlock_client_t *c, const char *name, size_t len,
                     dlock_latch_t **out) {
  if (out != NULL)
    *out = NULL;
  if (c == NULL || out == NULL)
    return dlock__fail(DLOCK_EINVAL, "client and out must not be NULL");
  int rc = dlock__check_object(c);
  if (rc == 0)
    rc = dlock__check_name(name, len);
  if (rc != 0)
    return rc;
  static const char prefix[] = "redisson_countdownlatch__channel__{";
  size_t plen = sizeof(prefix) - 1;
  dlock_latch_t *l = dlock__calloc(1, sizeof(*l));
  if (l != NULL && (l->name = dlock__memdup(name, len)) != NULL)
    l->channel = dlock__malloc(plen + len + 2);
  if (l == NULL || l->channel == NULL) {
    dlock_latch_free(l);
    return dlock__fail(DLOCK_ENOMEM, "out of memory creating a latch");
  }
  /* Redisson puts the braces round the name whatever it holds. */
  memcpy(l->channel, prefix, plen);
  memcpy(l->channel + plen, name, len);
  l->channel[plen + len] = '}';
  l->channel[plen + len + 1] = '\0';
  l->channel_len = plen + len + 1;
  l->c = c;
  l->len = len;
  *out = l;
  return 0;
}

int dlock_latch_get(dlock_client_t *c, const char *name, dlock_latch_t **out) {
  return dlock_latch_getn(c, name, name != NULL ? strlen(name) : 0, out);
}

void dlock_latch_free(dlock_latch_t *l) {
  if (l == NULL)
    return;
  dlock__free(l->name);
  dlock__free(l->channel);
  dlock__free(l);
}

const char *dlock_latch_name(const dlock_latch_t *l, size_t *len) {
  if (len != NULL)
    *len = l != NULL ? l->len : 0;
  return l != NULL ? l->name : NULL;
}

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

int dlock_latch_try_set_count(dlock_latch_t *l, int64_t count) {
  if (l == NULL)
    return dlock__fail(DLOCK_EINVAL, "latch handle is NULL");
  if (count < 1 || count > COUNT_MAX)
    return dlock__fail(DLOCK_EINVAL,
                       "count must be 1..2^53 (%" PRId64 "), got %" PRId64,
                       COUNT_MAX, count);
  int rc = dlock__check_object(l->c);
  if (rc != 0)
    return rc;
  char n[24];
  snprintf(n, sizeof(n), "%" PRId64, count);
  const char *argv[] = {l->name, l->channel, n};
  const size_t lens[] = {l->len, l->channel_len, strlen(n)};
  dlock__eval call = {&dlock__script_latch_set, 2, 1, argv, lens};
  int64_t set;
  rc = eval_integer(l->c, &call, &set);
  return rc != 0 ? rc : set == 1;
}

int dlock_latch_count_down(dlock_latch_t *l, int64_t *left) {
  if (left != NULL)
    *left = 0;
  if (l == NULL)
    return dlock__fail(DLOCK_EINVAL, "latch handle is NULL");
  int rc = dlock__check_object(l->c);
  if (rc != 0)
    return rc;
  const char *argv[] = {l->name, l->channel};
  const size_t lens[] = {l->len, l->channel_len};
  dlock__eval call = {&dlock__script_latch_count_down, 2, 0, argv, lens};
  int64_t n;
  rc = eval_integer(l->c, &call, &n);
  if (rc != 0)
    return rc;
  if (n < 0)
    return dlock__fail(DLOCK_EINVAL,
                       "latch \"%.100s\" is at zero or has no count: "
                       "counting down would take it below zero; nothing "
                       "was changed",
                       l->name);
  if (left != NULL)
    *left = n;
  return 0;
}

int dlock_latch_count(dlock_latch_t *l, int64_t *out) {
  if (out != NULL)
    *out = 0;
  if (l == NULL || out == NULL)
    return dlock__fail(DLOCK_EINVAL, "latch and out must not be NULL");
  int rc = dlock__check_object(l->c);
  if (rc != 0)
    return rc;
  const char *argv[] = {"GET", l->name};
  const size_t lens[] = {3, l->len};
  redisReply *r;
  rc = dlock__command(l->c, 2, argv, lens, &r);
  if (rc != 0)
    return rc;
  int64_t n = 0;
  if (r->type == REDIS_REPLY_ERROR)
    rc = dlock__fail(DLOCK_ENOTLOCK, "\"%.100s\" is not a latch: %.*s", l->name,
                     (int)r->len, r->str);
  else if (dlock__decode_number(r, 0, &n) != 0)
    rc = dlock__fail(DLOCK_ENOTLOCK,
                     "\"%.100s\" holds a string that is not a count", l->name);
  freeReplyObject(r);
  if (rc == 0)
    *out = n > 0 ? n : 0;
  return rc;
}

static int latch_attempt(void *arg, int64_t *sleep_ms, int *pass) {
  int64_t n;
  int rc = dlock_latch_count(arg, &n);
  if (rc != 0)
    return rc;
  /* Only the zero message can open it; nothing to bound the sleep. */
  *sleep_ms = -1;
  *pass = 0;
  return n > 0;
}

int dlock_latch_await(dlock_latch_t *l, int64_t wait_ms) {
  if (l == NULL)
    return dlock__fail(DLOCK_EINVAL, "latch handle is NULL");
  int rc = dlock__check_wait(wait_ms);
  if (rc == 0)
    rc = dlock__check_object(l->c);
  if (rc != 0)
    return rc;
  char what[160];
  snprintf(what, sizeof(what), "latch \"%.100s\" not at zero", l->name);
  return dlock__wait_for(l->c, l->channel, l->channel_len, DLOCK__WAKE_LATCH, 0,
                         wait_ms, latch_attempt, NULL, l, what);
}
