/*
 * Semaphores, expirable-permit semaphores and count-down latches: what
 * their files share with each other and with the watchdog.
 *
 * Their holds live in the client's hold table (holds.h) beside the locks',
 * under kinds of their own that no dlock_kind_t uses:
 *
 *   DLOCK__KIND_SEM     one record per client and semaphore (owner 0): the
 *                       permits acquired through the client, so that it
 *                       releases no more than that. Never renewed.
 *   DLOCK__KIND_PERMIT  one record per permit of an expirable-permit
 *                       semaphore, its owner a random number that, with
 *                       the client's, makes the permit id (see
 *                       dlock__permit_id); renewed by the watchdog when
 *                       taken with DLOCK_WATCHDOG.
 */
#ifndef DLOCK_SEMAPHORE_H
#define DLOCK_SEMAPHORE_H

#include "client.h"
#include "scripts.h"

#include <stdint.h>

#define DLOCK__KIND_SEM 64
#define DLOCK__KIND_PERMIT 65

/* The bytes of a permit id, as Redisson stores it in "{name}:timeout". */
#define DLOCK__PERMIT_ID_BYTES 16

extern const dlock__script dlock__script_sem_set;
extern const dlock__script dlock__script_sem_add;
extern const dlock__script dlock__script_sem_acquire;
extern const dlock__script dlock__script_sem_release;
extern const dlock__script dlock__script_sem_drain;
extern const dlock__script dlock__script_psem_acquire;
extern const dlock__script dlock__script_psem_release;
extern const dlock__script dlock__script_psem_renew;
extern const dlock__script dlock__script_psem_count;
extern const dlock__script dlock__script_latch_set;
extern const dlock__script dlock__script_latch_count_down;

/* The id of the permit that 'owner' stands for in client 'c': 8 bytes
 * that stand for the client (a hash of its id), then the owner, both
 * big-endian. */
void dlock__permit_id(const dlock_client_t *c, uint64_t owner,
                      unsigned char out[DLOCK__PERMIT_ID_BYTES]);

/* "{name}:timeout" (or "name:timeout" when the name holds a '{'), where an
 * expirable-permit semaphore keeps its permits; freed with dlock__free. */
int dlock__permit_zset(const char *name, size_t len, char **out,
                       size_t *out_len);

/*
 * Waits on 'channel' (woken as 'wake' says, see pubsub.h) until
 * 'attempt' succeeds or 'deadline_us' passes, for the objects that are not
 * a dlock_t. 'attempt' returns 0 when done, 1 when it must wait (with
 * '*sleep_ms' the longest it may sleep before trying again, -1 for as long
 * as it takes, and '*pass' set when a wake-up it could not use should go
 * to another waiter), or a negative code. The first attempt is made
 * before subscribing; with 'wait_ms' 0 it is the only one. An attempt
 * that fails with an error an outage causes is made again after a pause
 * within the wait, as a lock's is, when 'may_retry' (NULL: always)
 * allows it. A semaphore's waiter for 'permits' (> 0; 0 for others) may
 * instead be handed them by a release inside the client
 * (dlock__pubsub_reserve_permits), which counts them as the client's
 * still: it then returns DLOCK__HANDED. Otherwise returns 0,
 * DLOCK_ETIMEDOUT (with 'what' in the detail) or the attempt's error.
 */
#define DLOCK__HANDED 2
typedef int (*dlock__attempt_fn)(void *arg, int64_t *sleep_ms, int *pass);
/* After an attempt failed with 'rc', an error an outage causes: 1 to try
 * again after a pause (within the wait), having made ready for it. */
typedef int (*dlock__retry_fn)(void *arg, int rc);
int dlock__wait_for(dlock_client_t *c, const char *channel, size_t channel_len,
                    int wake, int64_t permits, int64_t wait_ms,
                    dlock__attempt_fn attempt, dlock__retry_fn may_retry,
                    void *arg, const char *what);

/* The checks every call on an object handle makes: 'c' usable (not
 * forked, not shutting down). */
int dlock__check_object(dlock_client_t *c);

/* wait_ms 0..DLOCK_DURATION_MAX_MS or DLOCK_WAIT_FOREVER. */
int dlock__check_wait(int64_t wait_ms);

/* A name of 1..DLOCK_NAME_MAX bytes. */
int dlock__check_name(const char *name, size_t len);

#endif
