/*
 * The reentrant lock (Redisson's RLock) and the spin lock (RSpinLock),
 * which share its scripts and differ only in how they wait.
 */
#include "alloc.h"
#include "lock.h"

#include "error.h"
#include "proto/format.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

void dlock__reentrant_acquire_call(dlock_t *l, uint64_t owner, int64_t lease_ms,
                                   dlock__call_args *a) {
  dlock_client_t *c = l->c;
  size_t field_len = dlock__field_plain(l, owner, a->field);
  dlock__fmt_i64(a->lease, lease_ms == DLOCK_WATCHDOG
                               ? c->opt.watchdog_timeout_ms
                               : lease_ms);
  dlock__fmt_i64(a->count, dlock__believed_count(l, owner));
  a->argv[0] = l->name;
  a->lens[0] = l->len;
  a->argv[1] = l->token_key;
  a->lens[1] = l->token_key_len;
  a->argv[2] = a->lease;
  a->lens[2] = strlen(a->lease);
  a->argv[3] = a->field;
  a->lens[3] = field_len;
  a->argv[4] = a->count;
  a->lens[4] = strlen(a->count);
  dlock__eval call = {&dlock__script_acquire, 2, 3, a->argv, a->lens};
  a->call = call;
}

static int reentrant_try_acquire(dlock_t *l, uint64_t owner, int64_t lease_ms,
                                 int queue, dlock__busy *busy) {
  (void)queue;
  dlock__call_args a;
  dlock__reentrant_acquire_call(l, owner, lease_ms, &a);
  return dlock__run_acquire(l, owner, lease_ms, &a.call, busy);
}

void dlock__reentrant_release_call(dlock_t *l, uint64_t owner,
                                   const dlock__release *r,
                                   dlock__call_args *a) {
  size_t field_len = dlock__field_plain(l, owner, a->field);
  const char *argv[] = {l->name,  l->channel, r->latch,     "0",
                        r->lease, a->field,   r->latch_ttl, r->count};
  const size_t lens[] = {
      l->len,           l->channel_len, r->latch_len,         1,
      strlen(r->lease), field_len,      strlen(r->latch_ttl), strlen(r->count)};
  memcpy(a->argv, argv, sizeof(argv));
  memcpy(a->lens, lens, sizeof(lens));
  dlock__eval call = {&dlock__script_release, 3, 5, a->argv, a->lens};
  a->call = call;
}

static int reentrant_release(dlock_t *l, uint64_t owner) {
  dlock__release r;
  int rc = dlock__release_begin(l, owner, &r);
  if (rc != 0) {
    dlock__release_end(&r);
    return rc;
  }
  if (l->kind->no_barging && (rc = dlock__handover_release(l, owner, &r)) != 1)
    return rc;
  dlock__call_args a;
  dlock__reentrant_release_call(l, owner, &r, &a);
  return dlock__release_run(l, owner, &r, &a.call);
}

/* An attempt without an answer is given back by the release script itself,
 * with the count to go back to (see settle.c). */
static int reentrant_undo(dlock_t *l, uint64_t owner, int64_t believed) {
  dlock__release r;
  int rc = dlock__undo_begin(l, owner, believed, &r);
  if (rc != 0) {
    dlock__release_end(&r);
    return rc;
  }
  dlock__call_args a;
  dlock__reentrant_release_call(l, owner, &r, &a);
  return dlock__undo_run(l, &r, &a.call);
}

/* Deleting the lock lets one waiter per client try ("0"). */
static int reentrant_force_release(dlock_t *l) {
  return dlock__force_release_plain(l, "0");
}

/* A lock handed over inside the client (handover.c) is held already. */
static int reentrant_granted(dlock_t *l, uint64_t owner, int64_t lease_ms,
                             uint64_t token, int64_t since_us,
                             dlock__busy *busy) {
  (void)busy;
  return dlock__record_grant(l, owner, lease_ms, token, since_us);
}

const dlock__kind dlock__kind_reentrant = {
    .id = DLOCK_REENTRANT,
    .wait_by = DLOCK__WAIT_PUBSUB,
    .no_barging = 1,
    .try_acquire = reentrant_try_acquire,
    .granted = reentrant_granted,
    .undo = reentrant_undo,
    .release = reentrant_release,
    .field = dlock__field_plain,
    .force_release = reentrant_force_release,
};

const dlock__kind dlock__kind_spin = {
    .id = DLOCK_SPIN,
    .wait_by = DLOCK__WAIT_BACKOFF,
    .try_acquire = reentrant_try_acquire,
    .undo = reentrant_undo,
    .release = reentrant_release,
    .field = dlock__field_plain,
    .force_release = reentrant_force_release,
};
