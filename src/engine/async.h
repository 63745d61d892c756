/*
 * The verbs of an async client, run by its loop (async.c). Each returns 0
 * when the operation started (its callback runs later, from the loop) or
 * an error with the callback never called.
 */
#ifndef DLOCK_ASYNC_H
#define DLOCK_ASYNC_H

#include "loop.h"

int dlock__async_acquire(dlock__loop *lp, dlock_t *l, uint64_t owner,
                         int64_t wait_ms, int64_t lease_ms, dlock_done_cb cb,
                         void *data);
int dlock__async_release(dlock__loop *lp, dlock_t *l, uint64_t owner,
                         dlock_done_cb cb, void *data);

/* A MultiLock's (async_multi.c): its parts' clients all async. */
int dlock__async_multi_acquire(dlock_t *l, uint64_t owner, int64_t wait_ms,
                               int64_t lease_ms, dlock_done_cb cb, void *data);
int dlock__async_multi_release(dlock_t *l, uint64_t owner, dlock_done_cb cb,
                               void *data);

#endif
