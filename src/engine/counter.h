/*
 * The engine's half of semaphores, expirable-permit semaphores and
 * count-down latches: their handles, the sending of the calls that
 * lock/sem_kinds.h builds, and the wait by pub/sub that they share.
 */
#ifndef DLOCK_COUNTER_H
#define DLOCK_COUNTER_H

#include "args.h"
#include "machine.h"
#include "sem_kinds.h"

/* What every such handle is: its client and its names. */
typedef struct dlock__counter {
  dlock_client_t *c;
  dlock__counter_names n;
} dlock__counter;

struct dlock_sem {
  dlock__counter o;
};
struct dlock_psem {
  dlock__counter o;
};
struct dlock_latch {
  dlock__counter o;
};

/* A new handle of 'type' (enum dlock__counter_type) on 'name', after
 * checking the client and the name; NULL with the error in '*rc'. */
void *dlock__counter_open(dlock_client_t *c, const char *name, size_t len,
                          int type, int *rc);
void dlock__counter_close(dlock__counter *o);

/*
 * Defines the functions every such handle has in dlock.h: dlock_X_getn,
 * dlock_X_get, dlock_X_free and dlock_X_name, for handle type dlock_X_t of
 * 'type'.
 */
#define DLOCK__COUNTER_HANDLE(X, type)                                         \
  int dlock_##X##_getn(dlock_client_t *c, const char *name, size_t len,        \
                       dlock_##X##_t **out) {                                  \
    int rc = 0;                                                                \
    if (out != NULL)                                                           \
      *out = c != NULL ? dlock__counter_open(c, name, len, type, &rc) : NULL;  \
    return c == NULL || out == NULL                                            \
               ? dlock__fail(DLOCK_EINVAL, "client and out must not be NULL")  \
               : rc;                                                           \
  }                                                                            \
  int dlock_##X##_get(dlock_client_t *c, const char *name,                     \
                      dlock_##X##_t **out) {                                   \
    return dlock_##X##_getn(c, name, name != NULL ? strlen(name) : 0, out);    \
  }                                                                            \
  void dlock_##X##_free(dlock_##X##_t *h) {                                    \
    if (h != NULL)                                                             \
      dlock__counter_close(&h->o);                                             \
  }                                                                            \
  const char *dlock_##X##_name(const dlock_##X##_t *h, size_t *len) {          \
    if (len != NULL)                                                           \
      *len = h != NULL ? h->o.n.len : 0;                                       \
    return h != NULL ? h->o.n.name : NULL;                                     \
  }

/* The checks every call on a handle makes: 'o' NULL (a handle or an out
 * pointer missing) fails with DLOCK_EINVAL and 'null_detail', else its
 * client must be usable (dlock__check_object). */
int dlock__counter_ready(dlock__counter *o, const char *null_detail);

/* Reads the object's own key (GET) after dlock__counter_ready, and
 * decodes the reply with 'outcome' into '*out' (set only on success). */
typedef int (*dlock__get_outcome_fn)(const dlock__counter_names *n,
                                     const redisReply *r, int64_t *out);
int dlock__counter_read(dlock__counter *o, const char *null_detail,
                        dlock__get_outcome_fn outcome, int64_t *out);

/* Runs one script call on 'c' and decodes its integer reply. */
int dlock__counter_eval(dlock_client_t *c, const dlock__counter_call *a,
                        int64_t *out);

/* The builder of a call on an object's names alone. */
typedef void (*dlock__names_call_fn)(const dlock__counter_names *n,
                                     dlock__counter_call *a);

/* Runs the call that 'build' makes on 'o' after dlock__counter_ready, as
 * dlock__counter_eval: 0 with its number in '*out', or an error. */
int dlock__counter_run(dlock__counter *o, const char *null_detail,
                       dlock__names_call_fn build, int64_t *out);

/* The try-set and add calls that both semaphores share (same key, same
 * channel, same meaning): try-set answers 1 when it set the permits, 0
 * when there were some already. */
int dlock__counter_try_set(dlock__counter *o, int64_t permits);
int dlock__counter_add(dlock__counter *o, int64_t delta, int64_t *free_after);

/*
 * Waits on 'channel' (woken as 'wake' says, see cohort.h) until
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
 * (dlock__cohort_reserve_permits), which counts them as the client's
 * still: it then returns DLOCK__HANDED. Otherwise returns 0,
 * DLOCK_ETIMEDOUT (with 'what' in the detail) or the attempt's error.
 * '*waited' (for the statistics) is set to whether it had to wait.
 */
#define DLOCK__HANDED DLOCK__ACQ_HANDED
typedef int (*dlock__attempt_fn)(void *arg, int64_t *sleep_ms, int *pass);
/* After an attempt failed with 'rc', an error an outage causes: 1 to try
 * again after a pause (within the wait), having made ready for it. */
typedef int (*dlock__retry_fn)(void *arg, int rc);
int dlock__wait_for(dlock_client_t *c, const char *channel, size_t channel_len,
                    dlock__wake_fn wake, int64_t permits, int64_t wait_ms,
                    dlock__attempt_fn attempt, dlock__retry_fn may_retry,
                    void *arg, const char *what, int *waited);

/* A fresh random owner number for a permit of 's', unused by the client's
 * other permits, so that its id says nothing about the holder: 0, or
 * DLOCK_EIO when no random number could be read. */
int dlock__psem_new_owner(dlock_psem_t *s, uint64_t *out);

/* How permit 'id' of 's' is given back when an attempt that took it
 * cannot report it. */
typedef void (*dlock__psem_give_back_fn)(dlock_psem_t *s,
                                         const unsigned char *id);

/* What the reply 'reply' (freed here) to the acquire call of permit 'id'
 * ('owner'), sent at 'sent_us' for 'lease_ms' as given (DLOCK_WATCHDOG or
 * ms) and replica-synced as 'sy' says, means for the attempt: 0 taken,
 * recorded for its renewal and its release, and described in '*out'; 1
 * not taken, with '*sleep_ms' until a permit may come back without a
 * message; or an error, the permit given back by 'give_back' if it was
 * taken. */
int dlock__psem_answer(dlock_psem_t *s, redisReply *reply,
                       const dlock__synced *sy, uint64_t owner,
                       int64_t lease_ms, const unsigned char *id,
                       int64_t sent_us, dlock__psem_give_back_fn give_back,
                       dlock_permit_t *out, int64_t *sleep_ms);

/* Adds 'n' (negative: takes away) to the permits the client holds of
 * semaphore 's'. 0, or DLOCK_ENOMEM. */
int dlock__sem_note_held(dlock_sem_t *s, int64_t n);

/* A plain semaphore's permits have no owner: an attempt that got no answer
 * may have taken them, and another would take as many again, never to be
 * released. Only the failures that took nothing are tried again: too few
 * replicas (the permits were given back) and Redis refusing the script
 * (READONLY, LOADING, MASTERDOWN: it did not run). ('arg' is unused.) */
int dlock__sem_may_retry(void *arg, int rc);

#endif
