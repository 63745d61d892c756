/*
 * The reentrant lock (Redisson's RLock) and the spin lock (RSpinLock),
 * which share its scripts and differ only in how they wait.
 */
#include "lock.h"

#include "error.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static int reentrant_try_acquire(dlock_t *l, uint64_t owner, int64_t lease_ms,
                                 int queue, int64_t *ttl_ms) {
  (void)queue;
  dlock_client_t *c = l->c;
  char field[DLOCK__FIELD_MAX], lease[24], believed[24];
  size_t field_len = dlock__field_plain(l, owner, field);
  snprintf(lease, sizeof(lease), "%" PRId64,
           lease_ms == DLOCK_WATCHDOG ? c->opt.watchdog_timeout_ms : lease_ms);
  snprintf(believed, sizeof(believed), "%" PRId64,
           dlock__believed_count(l, owner));
  const char *argv[] = {l->name, l->token_key, lease, field, believed};
  const size_t lens[] = {l->len, l->token_key_len, strlen(lease), field_len,
                         strlen(believed)};
  dlock__eval call = {&dlock__script_acquire, 2, 3, argv, lens};
  return dlock__run_acquire(l, owner, lease_ms, &call, ttl_ms);
}

static int reentrant_release(dlock_t *l, uint64_t owner) {
  dlock__release r;
  int rc = dlock__release_begin(l, owner, &r);
  if (rc != 0) {
    dlock__release_end(&r);
    return rc;
  }
  char field[DLOCK__FIELD_MAX];
  size_t field_len = dlock__field_plain(l, owner, field);
  const char *argv[] = {l->name, l->channel, r.latch, "0",
                        r.lease, field,      r.latch_ttl};
  const size_t lens[] = {l->len,          l->channel_len, r.latch_len,
                         1,               strlen(r.lease), field_len,
                         strlen(r.latch_ttl)};
  dlock__eval call = {&dlock__script_release, 3, 4, argv, lens};
  return dlock__release_run(l, owner, &r, &call);
}

static int reentrant_force_release(dlock_t *l) {
  const char *argv[] = {l->name, l->channel, "0"};
  const size_t lens[] = {l->len, l->channel_len, 1};
  dlock__eval call = {&dlock__script_force_release, 2, 1, argv, lens};
  redisReply *reply;
  int rc = dlock__eval_run(l->c->conn, 1, &call, &reply, 0);
  if (rc != 0)
    return rc;
  int deleted = reply->type == REDIS_REPLY_INTEGER && reply->integer > 0;
  freeReplyObject(reply);
  return deleted;
}

const dlock__kind dlock__kind_reentrant = {
    .id = DLOCK_REENTRANT,
    .wait_by = DLOCK__WAIT_PUBSUB,
    .try_acquire = reentrant_try_acquire,
    .release = reentrant_release,
    .field = dlock__field_plain,
    .force_release = reentrant_force_release,
};

const dlock__kind dlock__kind_spin = {
    .id = DLOCK_SPIN,
    .wait_by = DLOCK__WAIT_BACKOFF,
    .try_acquire = reentrant_try_acquire,
    .release = reentrant_release,
    .field = dlock__field_plain,
    .force_release = reentrant_force_release,
};
