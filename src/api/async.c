/*
 * The async verbs (dlock.h, "Event loops"): checked here, run by the
 * client's loop (engine/async.c).
 */
#include "async.h"
#include "args.h"

#include "error.h"

/* The checks every async verb on a lock makes. */
static int check_lock(dlock_t *l, dlock_done_cb cb) {
  if (l == NULL || cb == NULL)
    return dlock__fail(DLOCK_EINVAL, "lock handle and callback must be given");
  if (l->c == NULL)
    return dlock__fail(DLOCK_EINVAL,
                       "MultiLock and RedLock have no async verbs yet: "
                       "lock their parts, or use a blocking client");
  if (l->c->loop == NULL)
    return dlock__fail(DLOCK_EINVAL, "the lock's client was not opened with "
                                     "dlock_client_open_async()");
  if (l->kind->acquire_call == NULL || l->kind->release_call == NULL)
    return dlock__fail(DLOCK_EINVAL, "this kind of lock has no async verbs");
  int rc = dlock__check_canceled(l->c);
  if (rc == 0 && l->c->loop->closing)
    rc = dlock__fail(DLOCK_ECANCELED, "the client is closing");
  return rc;
}

int dlock_trylock_async(dlock_t *l, uint64_t owner, int64_t wait_ms,
                        int64_t lease_ms, dlock_done_cb cb, void *data) {
  int rc = check_lock(l, cb);
  if (rc == 0)
    rc = dlock__check_times(wait_ms, lease_ms);
  if (rc != 0)
    return rc;
  return dlock__async_acquire(l->c->loop, l, owner, wait_ms, lease_ms, cb,
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
  return dlock__async_release(l->c->loop, l, owner, cb, data);
}
