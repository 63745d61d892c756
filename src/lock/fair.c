/*
 * The fair lock (Redisson's RFairLock) and its non-reentrant form
 * (getNonReentrantFairLock, which refuses an owner's second hold): owners
 * get the lock in the order they asked for it. Waiters queue in
 * redisson_lock_queue:{name} with deadlines in redisson_lock_timeout:{name},
 * and each listens on its own channel,
 * redisson_lock__channel:{name}:<owner-field>, so a release wakes only the
 * owner whose turn it is.
 */
#include "alloc.h"
#include "lock.h"

#include "error.h"
#include "proto/format.h"

#include <string.h>

/* The queue, deadline and hand-over keys of a fair lock, built per call
 * into the call's owned names (a fair lock handle is cheap, and these are
 * only needed by its own scripts). The hand-over hash,
 * dlock_lock_grant:{name}, holds for each queued dlock waiter the lease it
 * is to be handed the lock with and the time until which it counts as
 * alive ("<lease>:<Unix ms>"). */
enum { QUEUE, TIMEOUTS, GRANTS };

static int make_keys(dlock_t *l, dlock__call *out, size_t lens[3]) {
  static const char *const prefix[] = {
      "redisson_lock_queue", "redisson_lock_timeout", "dlock_lock_grant"};
  for (int i = 0; i < 3; i++) {
    int rc =
        dlock__prefixed(prefix[i], l->name, l->len, &out->owned[i], &lens[i]);
    if (rc != 0)
      return rc;
  }
  return 0;
}

static int fair_acquire_call(dlock_t *l, const dlock__ask *a,
                             dlock__call *out) {
  size_t k[3];
  int rc = make_keys(l, out, k);
  if (rc != 0)
    return rc;
  size_t field_len = dlock__field_plain(l, a->owner, out->field);
  size_t lease_len =
      dlock__fmt_i64(out->num[0], dlock__lease_for(l, a->lease_ms));
  size_t wait_len = dlock__fmt_i64(out->num[1], l->c->opt.fair_wait_timeout_ms);
  size_t believed_len = dlock__fmt_i64(out->num[2], a->believed);
  const char *argv[] = {l->name,      out->owned[QUEUE],   out->owned[TIMEOUTS],
                        l->token_key, l->channel,          out->owned[GRANTS],
                        out->num[0],  out->field,          out->num[1],
                        out->num[2],  a->queue ? "1" : "0"};
  const size_t lens[] = {
      l->len,    k[QUEUE],  k[TIMEOUTS], l->token_key_len, l->channel_len,
      k[GRANTS], lease_len, field_len,   wait_len,         believed_len,
      1};
  dlock__call_set(out, &dlock__script_fair_acquire, 6, argv, lens, 11);
  return 0;
}

/* The lease a release hands over is cut to the wait allowance (see
 * fair_acquire.lua). When that is shorter than the lease asked for, the
 * owner takes the lock up itself, which restores the full lease; else the
 * hand-over needs no round trip at all. */
static int fair_handed(dlock_t *l, int64_t lease_ms) {
  return l->c->opt.fair_wait_timeout_ms < dlock__lease_for(l, lease_ms)
             ? DLOCK__HANDED_RETAKE
             : DLOCK__HANDED_RECORD;
}

/* Takes 'owner' out of the queue; with 'believed' (the holds the client
 * believes it has) 0, also gives back the lock if a release handed it over
 * meanwhile. A waiter that stops waiting leaves the queue at once, rather
 * than holding up everyone behind it until its deadline; an attempt from
 * no holds that got no answer is settled the same way (it may have
 * queued the owner, or been handed the lock from the queue). */
static int fair_leave_call(dlock_t *l, uint64_t owner, int64_t believed,
                           dlock__call *out) {
  size_t k[3];
  int rc = make_keys(l, out, k);
  if (rc != 0)
    return rc;
  size_t field_len = dlock__field_plain(l, owner, out->field);
  size_t believed_len = dlock__fmt_i64(out->num[0], believed);
  size_t wait_len = dlock__fmt_i64(out->num[1], l->c->opt.fair_wait_timeout_ms);
  const char *argv[] = {l->name,     out->owned[QUEUE],  out->owned[TIMEOUTS],
                        l->channel,  out->owned[GRANTS], out->field,
                        out->num[0], out->num[1]};
  const size_t lens[] = {l->len,    k[QUEUE],  k[TIMEOUTS],  l->channel_len,
                         k[GRANTS], field_len, believed_len, wait_len};
  dlock__call_set(out, &dlock__script_fair_leave, 5, argv, lens, 8);
  return 0;
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

/* The fair release script for 'r' (a release, or an undo of an attempt
 * by an owner that held the lock, never queued: its count is set back). */
static int fair_release_call(dlock_t *l, uint64_t owner,
                             const dlock__release *r, dlock__call *out) {
  size_t k[3];
  int rc = make_keys(l, out, k);
  if (rc != 0)
    return rc;
  size_t field_len = dlock__field_plain(l, owner, out->field);
  size_t wait_len = dlock__fmt_i64(out->num[0], l->c->opt.fair_wait_timeout_ms);
  const char *argv[] = {
      l->name,    out->owned[QUEUE],  out->owned[TIMEOUTS], l->channel,
      r->latch,   out->owned[GRANTS], l->token_key,         "0",
      r->lease,   out->field,         r->latch_ttl,         r->count,
      out->num[0]};
  const size_t lens[] = {
      l->len,           k[QUEUE],  k[TIMEOUTS],          l->channel_len,
      r->latch_len,     k[GRANTS], l->token_key_len,     1,
      strlen(r->lease), field_len, strlen(r->latch_ttl), strlen(r->count),
      wait_len};
  dlock__call_set(out, &dlock__script_fair_release, 7, argv, lens, 13);
  return 0;
}

static int fair_force_call(dlock_t *l, dlock__call *out) {
  size_t k[3];
  int rc = make_keys(l, out, k);
  if (rc != 0)
    return rc;
  const char *argv[] = {l->name, out->owned[QUEUE], l->channel};
  const size_t lens[] = {l->len, k[QUEUE], l->channel_len};
  dlock__call_set(out, &dlock__script_fair_force_release, 3, argv, lens, 3);
  return 0;
}

const dlock__kind dlock__kind_fair = {
    .id = DLOCK_FAIR,
    .wait_by = DLOCK__WAIT_PUBSUB,
    .acquire_call = fair_acquire_call,
    .release_call = fair_release_call,
    .leave_call = fair_leave_call,
    .force_call = fair_force_call,
    .handed = fair_handed,
    .wait_channel = fair_wait_channel,
};

/* The fair acquisition, refused to an owner that holds the lock (before
 * it could queue behind itself). */
static int nonreentrant_fair_acquire_call(dlock_t *l, const dlock__ask *a,
                                          dlock__call *out) {
  int rc = dlock__refuse_reentry(l, a);
  return rc != 0 ? rc : fair_acquire_call(l, a, out);
}

const dlock__kind dlock__kind_nonreentrant_fair = {
    .id = DLOCK_NONREENTRANT_FAIR,
    .wait_by = DLOCK__WAIT_PUBSUB,
    .acquire_call = nonreentrant_fair_acquire_call,
    .release_call = fair_release_call,
    .leave_call = fair_leave_call,
    .force_call = fair_force_call,
    .handed = fair_handed,
    .wait_channel = fair_wait_channel,
};
