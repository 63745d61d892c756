/*
 * The async verbs (dlock.h, "Event loops"): checked here, run by the
 * client's loop (engine/async.c).
 */
#include "async.h"
#include "args.h"

#include "error.h"

/* The checks every async verb on a lock makes. A MultiLock's or a
 * RedLock's parts must all be on async clients. */
static int check_lock(dlock_t *l, dlock_done_cb cb) {
  if (l == NULL || cb == NULL)
    return dlock__fail(DLOCK_EINVAL, "lock handle and callback must be given");
  for (size_t i = 0; i < (l->c != NULL ? 1 : l->nsubs); i++) {
    dlock_client_t *c = l->c != NULL ? l->c : l->subs[i]->c;
    if (c->loop == NULL)
      return dlock__fail(DLOCK_EINVAL, "the lock's client was not opened "
                                       "with dlock_client_open_async()");
    int rc = dlock__check_canceled(c);
    if (rc == 0 && c->loop->closing)
      rc = dlock__fail(DLOCK_ECANCELED, "the client is closing");
    if (rc != 0)
      return rc;
  }
  if (l->c != NULL &&
      (l->kind->acquire_call == NULL || l->kind->release_call == NULL))
    return dlock__fail(DLOCK_EINVAL, "this kind of lock has no async verbs");
  return 0;
}

int dlock_trylock_async(dlock_t *l, uint64_t owner, int64_t wait_ms,
                        int64_t lease_ms, dlock_done_cb cb, void *data) {
  int rc = check_lock(l, cb);
  if (rc == 0)
    rc = dlock__check_times(wait_ms, lease_ms);
  if (rc != 0)
    return rc;
  if (l->c == NULL && l->kind->id == DLOCK_RED)
    return dlock__async_red_acquire(l, owner, wait_ms, lease_ms, cb, data);
  if (l->c == NULL)
    return dlock__async_multi_acquire(l, owner, wait_ms, lease_ms, cb, data);
  return dlock__async_acquire(l->c->loop, l, owner, wait_ms, lease_ms, 1, cb,
                              data);
}

int dlock_lock_async(dlock_t *l, uint64_t owner, int64_t lease_ms,
                     dlock_done_cb cb, void *data) {
  return dlock_trylock_async(l, owner, DLOCK_WAIT_FOREVER, lease_ms, cb, data);
}

int dlock_unlock_async(dlock_t *l, uint64_t owner, dlock_done_cb cb,
                       void *data) {
  int rc = check_lock(l, cb);
  if (rc != 0)
    return rc;
  if (l->c == NULL && l->kind->id == DLOCK_RED)
    return dlock__async_red_release(l, owner, cb, data);
  if (l->c == NULL)
    return dlock__async_multi_release(l, owner, cb, data);
  return dlock__async_release(l->c->loop, l, owner, 1, cb, data);
}
