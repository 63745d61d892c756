/*
 * Lock handles: creation, key names, and the verbs every kind shares,
 * including the wait for a lock that is taken.
 */
#include "lock.h"

#include "error.h"
#include "monotime.h"

#include <stdlib.h>
#include <string.h>

int dlock__prefixed(const char *prefix, const char *name, size_t len,
                    char **out, size_t *out_len) {
  size_t plen = strlen(prefix);
  int tagged = memchr(name, '{', len) != NULL;
  size_t n = plen + 1 + len + (tagged ? 0 : 2);
  char *s = malloc(n + 1);
  if (s == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory building key names");
  char *p = s;
  memcpy(p, prefix, plen);
  p += plen;
  *p++ = ':';
  if (!tagged)
    *p++ = '{';
  memcpy(p, name, len);
  p += len;
  if (!tagged)
    *p++ = '}';
  *p = '\0';
  *out = s;
  *out_len = n;
  return 0;
}

static int check_name(const char *name, size_t len) {
  if (name == NULL)
    return dlock__fail(DLOCK_EINVAL, "lock name is NULL");
  if (len == 0)
    return dlock__fail(DLOCK_EINVAL, "lock name is empty");
  if (len > DLOCK_NAME_MAX)
    return dlock__fail(DLOCK_EINVAL,
                       "lock name is %zu bytes long; the limit is %d", len,
                       DLOCK_NAME_MAX);
  return 0;
}

int dlock__handle_new(dlock_client_t *c, const dlock__kind *kind,
                      const char *name, size_t len, dlock_t **out) {
  if (out != NULL)
    *out = NULL;
  if (c == NULL || out == NULL)
    return dlock__fail(DLOCK_EINVAL, "client and out must not be NULL");
  int rc = check_name(name, len);
  if (rc != 0)
    return rc;
  dlock_t *l = calloc(1, sizeof(*l));
  if (l == NULL || (l->name = malloc(len + 1)) == NULL) {
    free(l);
    return dlock__fail(DLOCK_ENOMEM, "out of memory creating a lock handle");
  }
  memcpy(l->name, name, len);
  l->name[len] = '\0';
  l->len = len;
  l->c = c;
  l->kind = kind;
  rc = dlock__prefixed("redisson_lock__channel", name, len, &l->channel,
                       &l->channel_len);
  if (rc == 0)
    rc = dlock__prefixed("redisson_lock_token", name, len, &l->token_key,
                         &l->token_key_len);
  if (rc != 0) {
    dlock_free(l);
    return rc;
  }
  *out = l;
  return 0;
}

int dlock_get(dlock_client_t *c, const char *name, dlock_t **out) {
  return dlock__handle_new(c, &dlock__kind_reentrant, name,
                           name ? strlen(name) : 0, out);
}

int dlock_getn(dlock_client_t *c, const char *name, size_t len,
               dlock_t **out) {
  return dlock__handle_new(c, &dlock__kind_reentrant, name, len, out);
}

void dlock_free(dlock_t *l) {
  if (l == NULL)
    return;
  free(l->name);
  free(l->channel);
  free(l->token_key);
  free(l);
}

const char *dlock_name(const dlock_t *l, size_t *len) {
  if (len != NULL)
    *len = l ? l->len : 0;
  return l ? l->name : NULL;
}

/* ---- acquiring, with waiting ---------------------------------------------- */

static int check_times(int64_t wait_ms, int64_t lease_ms) {
  if (lease_ms <= 0 && lease_ms != DLOCK_WATCHDOG)
    return dlock__fail(DLOCK_EINVAL,
                       "lease_ms must be > 0 or DLOCK_WATCHDOG (-1), got %lld",
                       (long long)lease_ms);
  if (wait_ms < 0 && wait_ms != DLOCK_WAIT_FOREVER)
    return dlock__fail(DLOCK_EINVAL,
                       "wait_ms must be >= 0 or DLOCK_WAIT_FOREVER (-1), got "
                       "%lld",
                       (long long)wait_ms);
  return 0;
}

static int timed_out(const dlock_t *l, int64_t wait_ms) {
  return dlock__fail(DLOCK_ETIMEDOUT,
                     "lock \"%.100s\" is held by another owner; not acquired "
                     "within %lld ms",
                     l->name, (long long)wait_ms);
}

/*
 * Sleeps until the holder's unlock message or its lease end, whichever is
 * first, bounded by the caller's deadline; then tries again. Subscribing
 * happens before the second attempt, so an unlock between the first attempt
 * and the subscription is seen by that attempt.
 */
static int wait_and_acquire(dlock_t *l, uint64_t owner, int64_t wait_ms,
                            int64_t lease_ms, int64_t deadline_us) {
  dlock_client_t *c = l->c;
  int64_t join_by = dlock__now_us() + c->opt.command_timeout_ms * 1000;
  dlock__sub *sub;
  int rc = dlock__pubsub_join(c->ps, l->channel, l->channel_len,
                              join_by < deadline_us ? join_by : deadline_us,
                              &sub);
  if (rc != 0)
    return rc;
  for (;;) {
    int64_t ttl_ms = -1;
    rc = l->kind->try_acquire(l, owner, lease_ms, &ttl_ms);
    if (rc != 1)
      break;
    int64_t now = dlock__now_us();
    if (now >= deadline_us) {
      rc = timed_out(l, wait_ms);
      break;
    }
    int64_t until = deadline_us;
    if (ttl_ms >= 0 && now + ttl_ms * 1000 < until)
      until = now + ttl_ms * 1000;
    rc = dlock__pubsub_wait(c->ps, sub, until);
    if (rc < 0)
      break;
  }
  dlock__pubsub_leave(c->ps, sub);
  return rc;
}

int dlock_trylock_as(dlock_t *l, uint64_t owner, int64_t wait_ms,
                     int64_t lease_ms) {
  if (l == NULL)
    return dlock__fail(DLOCK_EINVAL, "lock handle is NULL");
  int rc = check_times(wait_ms, lease_ms);
  if (rc == 0)
    rc = dlock__check_canceled(l->c);
  if (rc != 0)
    return rc;
  int64_t deadline_us = wait_ms == DLOCK_WAIT_FOREVER
                            ? INT64_MAX
                            : dlock__now_us() + wait_ms * 1000;
  int64_t ttl_ms;
  rc = l->kind->try_acquire(l, owner, lease_ms, &ttl_ms);
  if (rc != 1)
    return rc;
  if (wait_ms == 0)
    return timed_out(l, wait_ms);
  return wait_and_acquire(l, owner, wait_ms, lease_ms, deadline_us);
}

int dlock_trylock(dlock_t *l, int64_t wait_ms, int64_t lease_ms) {
  return dlock_trylock_as(l, dlock_self(), wait_ms, lease_ms);
}

int dlock_lock_as(dlock_t *l, uint64_t owner, int64_t lease_ms) {
  return dlock_trylock_as(l, owner, DLOCK_WAIT_FOREVER, lease_ms);
}

int dlock_lock(dlock_t *l, int64_t lease_ms) {
  return dlock_trylock_as(l, dlock_self(), DLOCK_WAIT_FOREVER, lease_ms);
}

int dlock_unlock_as(dlock_t *l, uint64_t owner) {
  if (l == NULL)
    return dlock__fail(DLOCK_EINVAL, "lock handle is NULL");
  int rc = dlock__check_canceled(l->c);
  return rc != 0 ? rc : l->kind->release(l, owner);
}

int dlock_unlock(dlock_t *l) { return dlock_unlock_as(l, dlock_self()); }

uint64_t dlock_token_as(dlock_t *l, uint64_t owner) {
  if (l == NULL)
    return 0;
  pthread_mutex_lock(&l->c->mu);
  dlock__hold *h = dlock__holds_find(&l->c->holds, l->name, l->len, owner);
  uint64_t token = h != NULL && !h->lost ? h->token : 0;
  pthread_mutex_unlock(&l->c->mu);
  return token;
}

uint64_t dlock_token(dlock_t *l) { return dlock_token_as(l, dlock_self()); }
