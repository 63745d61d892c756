/*
 * The fair lock (Redisson's RFairLock): owners get the lock in the order
 * they asked for it. Waiters queue in redisson_lock_queue:{name} with
 * deadlines in redisson_lock_timeout:{name}, and each listens on its own
 * channel, redisson_lock__channel:{name}:<owner-field>, so a release wakes
 * only the owner whose turn it is.
 */
#include "alloc.h"
#include "lock.h"

#include "error.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The queue, deadline and hand-over keys of a fair lock, built per call (a
 * fair lock handle is cheap, and these are only needed by its own
 * scripts). The hand-over hash, dlock_lock_grant:{name}, holds for each
 * queued dlock waiter the lease it is to be handed the lock with and the
 * time until which it counts as alive ("<lease>:<Unix ms>"). */
typedef struct fair_keys {
  char *queue, *timeouts, *grants;
  size_t queue_len, timeouts_len, grants_len;
} fair_keys;

static void free_keys(fair_keys *k) {
  dlock__free(k->queue);
  dlock__free(k->timeouts);
  dlock__free(k->grants);
}

static int make_keys(dlock_t *l, fair_keys *k) {
  memset(k, 0, sizeof(*k));
  int rc = dlock__prefixed("redisson_lock_queue", l->name, l->len, &k->queue,
                           &k->queue_len);
  if (rc == 0)
    rc = dlock__prefixed("redisson_lock_timeout", l->name, l->len, &k->timeouts,
                         &k->timeouts_len);
  if (rc == 0)
    rc = dlock__prefixed("dlock_lock_grant", l->name, l->len, &k->grants,
                         &k->grants_len);
  if (rc != 0)
    free_keys(k);
  return rc;
}

static int fair_try_acquire(dlock_t *l, uint64_t owner, int64_t lease_ms,
                            int queue, dlock__busy *busy) {
  dlock_client_t *c = l->c;
  fair_keys k;
  int rc = make_keys(l, &k);
  if (rc != 0)
    return rc;
  char field[DLOCK__FIELD_MAX], lease[24], wait[24], believed[24];
  size_t field_len = dlock__field_plain(l, owner, field);
  snprintf(lease, sizeof(lease), "%" PRId64,
           lease_ms == DLOCK_WATCHDOG ? c->opt.watchdog_timeout_ms : lease_ms);
  snprintf(wait, sizeof(wait), "%" PRId64, c->opt.fair_wait_timeout_ms);
  snprintf(believed, sizeof(believed), "%" PRId64,
           dlock__believed_count(l, owner));
  const char *argv[] = {
      l->name, k.queue, k.timeouts, l->token_key, l->channel,       k.grants,
      lease,   field,   wait,       believed,     queue ? "1" : "0"};
  const size_t lens[] = {l->len,
                         k.queue_len,
                         k.timeouts_len,
                         l->token_key_len,
                         l->channel_len,
                         k.grants_len,
                         strlen(lease),
                         field_len,
                         strlen(wait),
                         strlen(believed),
                         1};
  dlock__eval call = {&dlock__script_fair_acquire, 6, 5, argv, lens};
  rc = dlock__run_acquire(l, owner, lease_ms, &call, busy);
  free_keys(&k);
  return rc;
}

/* The lease a release hands over is cut to the wait allowance (see
 * fair_acquire.lua). When that is shorter than the lease asked for, the
 * owner takes the lock up itself, which restores the full lease; else the
 * hand-over needs no round trip at all. */
static int fair_granted(dlock_t *l, uint64_t owner, int64_t lease_ms,
                        uint64_t token, int64_t since_us, dlock__busy *busy) {
  int64_t lease =
      lease_ms == DLOCK_WATCHDOG ? l->c->opt.watchdog_timeout_ms : lease_ms;
  if (l->c->opt.fair_wait_timeout_ms < lease)
    return fair_try_acquire(l, owner, lease_ms, 1, busy);
  return dlock__record_grant(l, owner, lease_ms, token, since_us);
}

/* Takes 'owner' out of the queue; with 'count' (the holds the client
 * believes it has) 0, also gives back the lock if a release handed it over
 * meanwhile. */
static int fair_leave(dlock_t *l, uint64_t owner, int64_t count) {
  fair_keys k;
  int rc = make_keys(l, &k);
  if (rc != 0)
    return rc;
  char field[DLOCK__FIELD_MAX], believed[24], wait[24];
  size_t field_len = dlock__field_plain(l, owner, field);
  snprintf(believed, sizeof(believed), "%" PRId64, count);
  snprintf(wait, sizeof(wait), "%" PRId64, l->c->opt.fair_wait_timeout_ms);
  const char *argv[] = {l->name,  k.queue, k.timeouts, l->channel,
                        k.grants, field,   believed,   wait};
  const size_t lens[] = {l->len,           k.queue_len,  k.timeouts_len,
                         l->channel_len,   k.grants_len, field_len,
                         strlen(believed), strlen(wait)};
  dlock__eval call = {&dlock__script_fair_leave, 5, 3, argv, lens};
  int64_t removed;
  rc = dlock__eval_integer(l, &call, &removed);
  free_keys(&k);
  return rc;
}

/* A waiter that stops waiting leaves the queue at once, rather than
 * holding up everyone behind it until its deadline, and gives back the
 * lock if a release handed it over meanwhile. When Redis does not answer,
 * the caller has the leave settled later (see settle.c). */
static int fair_give_up(dlock_t *l, uint64_t owner) {
  return fair_leave(l, owner, dlock__believed_count(l, owner));
}

static int fair_wait_channel(dlock_t *l, uint64_t owner, char **out,
                             size_t *len) {
  char field[DLOCK__FIELD_MAX];
  size_t field_len = dlock__field_plain(l, owner, field);
  *len = l->channel_len + 1 + field_len;
  if ((*out = dlock__malloc(*len + 1)) == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory joining a channel");
  memcpy(*out, l->channel, l->channel_len);
  (*out)[l->channel_len] = ':';
  memcpy(*out + l->channel_len + 1, field, field_len + 1);
  return 0;
}

/* Runs the fair release script for 'r' (begun as a release, or as an
 * undo: see settle.c). */
static int fair_release_with(dlock_t *l, uint64_t owner, dlock__release *r,
                             int undo) {
  fair_keys k;
  int rc = make_keys(l, &k);
  if (rc != 0) {
    dlock__release_end(r);
    return rc;
  }
  char field[DLOCK__FIELD_MAX], wait[24];
  size_t field_len = dlock__field_plain(l, owner, field);
  snprintf(wait, sizeof(wait), "%" PRId64, l->c->opt.fair_wait_timeout_ms);
  const char *argv[] = {l->name,  k.queue,  k.timeouts,   l->channel,
                        r->latch, k.grants, l->token_key, "0",
                        r->lease, field,    r->latch_ttl, r->count,
                        wait};
  const size_t lens[] = {
      l->len,           k.queue_len,  k.timeouts_len,       l->channel_len,
      r->latch_len,     k.grants_len, l->token_key_len,     1,
      strlen(r->lease), field_len,    strlen(r->latch_ttl), strlen(r->count),
      strlen(wait)};
  dlock__eval call = {&dlock__script_fair_release, 7, 6, argv, lens};
  rc = undo ? dlock__undo_run(l, r, &call)
            : dlock__release_run(l, owner, r, &call);
  free_keys(&k);
  return rc;
}

static int fair_release(dlock_t *l, uint64_t owner) {
  dlock__release r;
  int rc = dlock__release_begin(l, owner, &r);
  if (rc != 0) {
    dlock__release_end(&r);
    return rc;
  }
  return fair_release_with(l, owner, &r, 0);
}

/* An attempt without an answer may have queued the owner, been handed the
 * lock from the queue, or taken it: an owner that held nothing leaves the
 * queue and gives back a lock it was handed (fair_leave.lua); one that
 * held it (never queued) has its count set back by the release script. */
static int fair_undo(dlock_t *l, uint64_t owner, int64_t believed) {
  if (believed == 0)
    return fair_leave(l, owner, 0);
  dlock__release r;
  int rc = dlock__undo_begin(l, owner, believed, &r);
  if (rc != 0) {
    dlock__release_end(&r);
    return rc;
  }
  return fair_release_with(l, owner, &r, 1);
}

static int fair_force_release(dlock_t *l) {
  fair_keys k;
  int rc = make_keys(l, &k);
  if (rc != 0)
    return rc;
  const char *argv[] = {l->name, k.queue, l->channel};
  const size_t lens[] = {l->len, k.queue_len, l->channel_len};
  dlock__eval call = {&dlock__script_fair_force_release, 3, 0, argv, lens};
  int64_t deleted;
  rc = dlock__eval_integer(l, &call, &deleted);
  free_keys(&k);
  return rc != 0 ? rc : deleted > 0;
}

const dlock__kind dlock__kind_fair = {
    .id = DLOCK_FAIR,
    .wait_by = DLOCK__WAIT_PUBSUB,
    .try_acquire = fair_try_acquire,
    .granted = fair_granted,
    .give_up = fair_give_up,
    .undo = fair_undo,
    .wait_channel = fair_wait_channel,
    .release = fair_release,
    .field = dlock__field_plain,
    .force_release = fair_force_release,
};
