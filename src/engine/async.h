/*
 * The verbs of an async client, run by its loop (async_lock.c). Each returns 0
 * when the operation started (its callback runs later, from the loop) or
 * an error with the callback never called (async_lock.c, async_counter.c,
 * async_multi.c).
 */
#ifndef DLOCK_ASYNC_H
#define DLOCK_ASYNC_H

#include "loop.h"

/* A lock's acquisition and release. With 'cohort' (a lock of its own, not
 * a composite's part), a waiter may be handed the lock by a release of
 * another owner in the same loop, and a release hands the lock to such a
 * waiter (handover.c says when). */
int dlock__async_acquire(dlock__loop *lp, dlock_t *l, uint64_t owner,
                         int64_t wait_ms, int64_t lease_ms, int cohort,
                         dlock_done_cb cb, void *data);
int dlock__async_release(dlock__loop *lp, dlock_t *l, uint64_t owner,
                         int cohort, dlock_done_cb cb, void *data);

/* The watchdog's round of an async client (the loop's 'renew'): renews
 * every hold of the client that has a watchdog, each as a script call of
 * its own, and sets the next round's time. */
void dlock__async_renew(dlock__loop *lp);

/* Makes RedLock part 'part' issue tokens above 'token' from now on (its
 * script sent, its answer not waited for: it goes before anything sent
 * after it on the same connection). */
void dlock__async_raise_token(dlock__loop *lp, dlock_t *part, uint64_t token);

/* A MultiLock's (async_multi.c): its parts' clients all async. */
int dlock__async_multi_acquire(dlock_t *l, uint64_t owner, int64_t wait_ms,
                               int64_t lease_ms, dlock_done_cb cb, void *data);
int dlock__async_multi_release(dlock_t *l, uint64_t owner, dlock_done_cb cb,
                               void *data);
/* A RedLock's: its parts, one per server, asked at once; a majority
 * granting it within the lease (less the time spent asking and the clock
 * drift) holds it. */
int dlock__async_red_acquire(dlock_t *l, uint64_t owner, int64_t wait_ms,
                             int64_t lease_ms, dlock_done_cb cb, void *data);
int dlock__async_red_release(dlock_t *l, uint64_t owner, dlock_done_cb cb,
                             void *data);

#endif
