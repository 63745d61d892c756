/*
 * The reentrant lock (Redisson's RLock), the spin lock (RSpinLock) and the
 * non-reentrant lock (Redisson's getNonReentrantLock), which share its
 * scripts and layout: the spin lock differs in how it waits, the
 * non-reentrant one in refusing an owner's second hold.
 */
#include "lock.h"

#include "error.h"
#include "proto/format.h"

#include <string.h>

int dlock__reentrant_acquire_call(dlock_t *l, const dlock__ask *a,
                                  dlock__call *out) {
  size_t field_len = dlock__field_plain(l, a->owner, out->field);
  size_t lease_len =
      dlock__fmt_i64(out->num[0], dlock__lease_for(l, a->lease_ms));
  size_t count_len = dlock__fmt_i64(out->num[1], a->believed);
  const char *argv[] = {l->name, l->token_key, out->num[0], out->field,
                        out->num[1]};
  const size_t lens[] = {l->len, l->token_key_len, lease_len, field_len,
                         count_len};
  dlock__call_set(out, &dlock__script_acquire, 2, argv, lens, 5);
  return 0;
}

int dlock__reentrant_release_call(dlock_t *l, uint64_t owner,
                                  const dlock__release *r, dlock__call *out) {
  size_t field_len = dlock__field_plain(l, owner, out->field);
  const char *argv[] = {l->name,  l->channel, r->latch,     "0",
                        r->lease, out->field, r->latch_ttl, r->count};
  const size_t lens[] = {
      l->len,           l->channel_len, r->latch_len,         1,
      strlen(r->lease), field_len,      strlen(r->latch_ttl), strlen(r->count)};
  dlock__call_set(out, &dlock__script_release, 3, argv, lens, 8);
  return 0;
}

int dlock__handover_call(dlock_t *l, uint64_t owner, const dlock__release *r,
                         uint64_t to, int64_t lease_ms, int at_cap,
                         dlock__call *out) {
  size_t from_len = dlock__field_plain(l, owner, out->field);
  size_t to_len = dlock__field_plain(l, to, out->field2);
  size_t lease_len = dlock__fmt_i64(out->num[0], dlock__lease_for(l, lease_ms));
  const char *argv[] = {
      l->name,     l->token_key, r->latch,     l->channel,         out->field,
      out->field2, out->num[0],  r->latch_ttl, at_cap ? "1" : "0", "0"};
  const size_t lens[] = {l->len,
                         l->token_key_len,
                         r->latch_len,
                         l->channel_len,
                         from_len,
                         to_len,
                         lease_len,
                         strlen(r->latch_ttl),
                         1,
                         1};
  dlock__call_set(out, &dlock__script_handover, 4, argv, lens, 10);
  return 0;
}

int dlock__decode_handover(const redisReply *r, int64_t *left, uint64_t *token,
                           int *outcome) {
  if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
      r->element[0]->type != REDIS_REPLY_INTEGER ||
      r->element[1]->type != REDIS_REPLY_INTEGER || r->element[1]->integer < 0)
    return dlock__fail(DLOCK_EPROTO, "unexpected reply to a lock hand-over");
  long long what = r->element[0]->integer;
  *token = (uint64_t)r->element[1]->integer;
  *left = what == -1 ? -1 : 0;
  if (what == 0 && *token > 0)
    *outcome = DLOCK__RESOLVE_HANDED;
  else if (what == 1)
    *outcome = DLOCK__RESOLVE_YIELDED;
  else if (what == 2 || what == 3)
    *outcome = DLOCK__RESOLVE_RELEASED;
  else if (what == -1)
    *outcome = DLOCK__RESOLVE_FAILED;
  else
    return dlock__fail(DLOCK_EPROTO, "unexpected reply to a lock hand-over");
  return 0;
}

/* Deleting the lock lets one waiter per client try ("0"). */
static int reentrant_force_call(dlock_t *l, dlock__call *out) {
  return dlock__force_plain_call(l, "0", out);
}

/* A lock handed over inside the client (handover.c) is held already. */
static int reentrant_handed(dlock_t *l, int64_t lease_ms) {
  (void)l;
  (void)lease_ms;
  return DLOCK__HANDED_RECORD;
}

const dlock__kind dlock__kind_reentrant = {
    .id = DLOCK_REENTRANT,
    .wait_by = DLOCK__WAIT_PUBSUB,
    .no_barging = 1,
    .acquire_call = dlock__reentrant_acquire_call,
    .release_call = dlock__reentrant_release_call,
    .force_call = reentrant_force_call,
    .handed = reentrant_handed,
};

const dlock__kind dlock__kind_spin = {
    .id = DLOCK_SPIN,
    .wait_by = DLOCK__WAIT_BACKOFF,
    .acquire_call = dlock__reentrant_acquire_call,
    .release_call = dlock__reentrant_release_call,
    .force_call = reentrant_force_call,
};

/* The reentrant acquisition, refused to an owner that holds the lock. An
 * owner whose field is on the server while the client counts no hold is
 * taking up a hold it was handed, or retrying an attempt whose reply was
 * lost (given back first, see settle.c): the script grants it as one
 * hold, as Redisson's would have. */
static int nonreentrant_acquire_call(dlock_t *l, const dlock__ask *a,
                                     dlock__call *out) {
  int rc = dlock__refuse_reentry(l, a);
  return rc != 0 ? rc : dlock__reentrant_acquire_call(l, a, out);
}

const dlock__kind dlock__kind_nonreentrant = {
    .id = DLOCK_NONREENTRANT,
    .wait_by = DLOCK__WAIT_PUBSUB,
    .no_barging = 1,
    .acquire_call = nonreentrant_acquire_call,
    .release_call = dlock__reentrant_release_call,
    .force_call = reentrant_force_call,
    .handed = reentrant_handed,
};
