/*
 * The engine: what runs the kinds' script calls and keeps the client's
 * view of its holds. Every single-lock kind goes through the same
 * functions here: an attempt (acquire.c), a release with its latch
 * (release.c), the undo of an attempt whose outcome is unknown
 * (settle.c), a hand-over inside the client (handover.c), and the one
 * back-off policy of every wait and retry (backoff.c). The verbs and the
 * wait between attempts are in handle.c.
 */
#ifndef DLOCK_ENGINE_H
#define DLOCK_ENGINE_H

#include "lock.h"
#include "replica.h"

/* ---- plain commands (calls.c) -------------------------------------------- */

/* dlock__conn_call on the connection for 'key' (the node of its slot on a
 * cluster, where redirections are followed; 'key' NULL: any node), for
 * commands on keys of one slot that a redirection leaves unapplied. */
int dlock__client_call(dlock_client_t *c, const char *key, size_t key_len,
                       size_t n, char *const *cmds, const size_t *lens,
                       redisReply **replies, int64_t deadline_us);

/* Runs one plain command given as argv; the reply is the caller's. */
int dlock__command(dlock_client_t *c, int argc, const char **argv,
                   const size_t *lens, redisReply **out);

/* ---- running a kind's calls ---------------------------------------------- */

/* Runs one script call on the lock's client (with replica sync) and
 * decodes its integer reply. */
int dlock__eval_integer(dlock_t *l, const dlock__eval *call, int64_t *out);

/*
 * One attempt of 'owner' on single lock 'l': builds the kind's acquire
 * call, runs it and, on success, records the hold. Returns 0 (held), 1
 * (another owner holds it; '*busy' says more) or an error. 'queue' is 0
 * for a single try that must not leave a trace (a fair lock does not
 * enqueue then).
 */
int dlock__attempt(dlock_t *l, uint64_t owner, int64_t lease_ms, int queue,
                   dlock__busy *busy);

/* Takes up a lock that a release handed to waiting 'owner' with 'token'
 * (its lease counted from 'since_us' at the latest), as the kind says
 * (dlock__kind.handed): as dlock__attempt. */
int dlock__take_handed(dlock_t *l, uint64_t owner, int64_t lease_ms,
                       uint64_t token, int64_t since_us, dlock__busy *busy);

/* A waiter of 'owner' stops waiting without the lock: it leaves the
 * kind's queue, if the kind has one. 0, or an error when Redis did not
 * answer (the waiter may still be queued). */
int dlock__leave_queue(dlock_t *l, uint64_t owner);

/* DLOCK_ETIMEDOUT with its detail: 'l' was not acquired within
 * 'wait_ms'. */
int dlock__lock_timed_out(const dlock_t *l, int64_t wait_ms);

/* Releases one hold of 'owner' on single lock 'l': 0, DLOCK_ENOTHELD,
 * DLOCK_ELOST or an error. */
int dlock__release_hold(dlock_t *l, uint64_t owner);

/* Deletes single lock 'l' and wakes its waiters: 1 deleted, 0 none, or an
 * error. */
int dlock__force_release(dlock_t *l);

/*
 * Gives back whatever an attempt of 'owner' that got no answer may have
 * taken, 'believed' being the holds the owner had when it tried: its holds
 * are set back to that many (a hold granted from none is released and the
 * lock's waiters told), and a queue place is given up. Harmless when the
 * attempt never ran. 0 when Redis answered (see settle.c).
 */
int dlock__undo(dlock_t *l, uint64_t owner, int64_t believed);

/*
 * Runs one acquisition script call (replying {1, token, count}, {0, ttl}
 * or {0, ttl, counter}) and, on success, records the hold. Returns 0, 1
 * (taken; '*busy') or error.
 */
int dlock__run_acquire(dlock_t *l, uint64_t owner, int64_t lease_ms,
                       const dlock__eval *call, dlock__busy *busy);

/* Looks the hold up (failing with DLOCK_ELOST when the watchdog found it
 * lost) and makes the latch key. Pair with dlock__release_run, or
 * dlock__release_end on failure. */
int dlock__release_begin(dlock_t *l, uint64_t owner, dlock__release *r);

/* Runs the kind's release call for 'r' (a release begun with
 * dlock__release_begin, or an undo with dlock__undo_begin when 'undo'),
 * and frees 'r'. */
int dlock__run_release_call(dlock_t *l, uint64_t owner, dlock__release *r,
                            int undo);

/* Runs the release script (retried with the same latch on a lost reply),
 * applies its answer (holds left, or -1 for none) and frees 'r'. */
int dlock__release_run(dlock_t *l, uint64_t owner, dlock__release *r,
                       const dlock__eval *call);

/* The first half of dlock__release_run: sends the call, retried like an
 * unlock. On failure the hold is dealt with as after a failed unlock and
 * the error returned; on 0, '*reply' is Redis's answer. 'r' is freed
 * either way (its flags stay readable). */
int dlock__release_send(dlock_t *l, uint64_t owner, dlock__release *r,
                        const dlock__eval *call, redisReply **reply);

/* Applies a release's answer: the holds left, or -1 for none. */
int dlock__release_apply(dlock_t *l, uint64_t owner, int64_t left,
                         const dlock__release *r);

/* Releases the owner's last hold of a reentrant lock by handing it to a
 * waiting thread of the same client, when there is one and the client has
 * not done so too many times in a row (handover.c). Returns 1 when it did
 * not (the caller releases as usual, 'r' untouched), else the unlock's
 * result, with 'r' freed. */
int dlock__handover_release(dlock_t *l, uint64_t owner, dlock__release *r);

/* Whether release 'r' may hand the lock over inside the client: the last
 * hold, plain, of a kind that takes hand-overs. */
int dlock__handover_eligible(const dlock_t *l, const dlock__release *r);

/* Applies the hand-over script's 'reply' (freed) to the release 'r' of
 * 'owner', as dlock__release_apply does; sets what the reserved waiter is
 * told: the token it now holds the lock with (0: none) and the outcome
 * (enum dlock__resolve). Returns the unlock's result. */
int dlock__handover_answered(dlock_t *l, uint64_t owner,
                             const dlock__release *r, redisReply *reply,
                             uint64_t *token, int *outcome);

/* After dlock__release_begin succeeded but no answer came: the hold stops
 * being renewed if it was the last (it expires with its lease) and is
 * marked abandoned, so the owner's next call finishes the release. */
void dlock__release_failed(dlock_t *l, uint64_t owner);

/* Lock-free frees of 'r' after a failed begin (safe to call always). */
void dlock__release_end(dlock__release *r);

/* A script call with the client's done unlock latches (see release.c)
 * added after its keys, so that the script deletes them: those of the
 * call's slot on a cluster, all of them on one server. */
typedef struct dlock__latch_call {
  dlock__done_latches taken;
  const char *argv[48];
  size_t lens[48];
  dlock__eval call;
} dlock__latch_call;

/* 'call' itself, or the same call with the latches in 'lc'; pair with
 * dlock__latch_call_end once the call is answered or given up. */
const dlock__eval *dlock__with_done_latches(dlock_client_t *c,
                                            const dlock__eval *call,
                                            dlock__latch_call *lc);
void dlock__latch_call_end(dlock__latch_call *lc);

/* Takes the latch of a release answered on its first and only send (its
 * name, allocated), for a later script to delete. */
void dlock__latch_done(dlock_client_t *c, char *key, size_t len);

/* Records a hold that a release handed to 'owner' with 'token' (its lease
 * counted from 'since_us' at the latest). 0 or DLOCK_ENOMEM, after which
 * the lock has been given back. */
int dlock__record_grant(dlock_t *l, uint64_t owner, int64_t lease_ms,
                        uint64_t token, int64_t since_us);

/* The second half of dlock__run_acquire: decodes an acquisition reply
 * (taking it) and records the hold. */
int dlock__finish_acquire(dlock_t *l, uint64_t owner, int64_t lease_ms,
                          redisReply *reply, int64_t sent_us,
                          dlock__busy *busy);

/* The same for a grant whose write was followed by WAIT ('sy', see
 * sync.h): one that too few replicas acknowledged is given back and
 * refused with DLOCK_ENOSYNC. */
int dlock__finish_acquire_synced(dlock_t *l, uint64_t owner, int64_t lease_ms,
                                 redisReply *reply, int64_t sent_us,
                                 dlock__busy *busy, const dlock__synced *sy);

/* The second half of dlock__release_run: decodes a release reply (taking
 * it) and applies it, with what dlock__release_begin found in 'r'. */
int dlock__finish_release(dlock_t *l, uint64_t owner, redisReply *reply,
                          const dlock__release *r);

/* Before a single lock is acquired: DLOCK_ELOST when the owner's hold was
 * found lost (its unlocks report it), and an attempt whose outcome is
 * unknown (settle.c) and an abandoned hold's release are settled first. 0
 * to go on. */
int dlock__settle_before_acquire(dlock_t *l, uint64_t owner);

/* ---- back-off (backoff.c) ------------------------------------------------ */

/*
 * The one back-off policy of the engine: pauses that double from 'first_us'
 * up to 'first_us' << 'max_step', each a random time between half and the
 * whole of its step (so that retrying clients do not move in lockstep),
 * never past the caller's deadline. Used by the spin lock between its
 * attempts, by a call riding out an outage, by an unlock sent again, and
 * by the settling of unknown outcomes.
 */
typedef struct dlock__backoff {
  int64_t first_us;
  int max_step;
  int step;
  /* Not before the client's connection may be tried again (an outage:
   * a retry before then would only find it not connected). */
  int after_reconnect;
  /* Every pause exactly its step, without jitter (Redisson's constant
   * back-off). */
  int exact;
} dlock__backoff;

/* The spin lock's pauses: 1 ms doubling to 128 ms. */
#define DLOCK__BACKOFF_SPIN                                                    \
  { .first_us = 1000, .max_step = 7 }
/* ... or with spin_backoff DLOCK_BACKOFF_CONSTANT, 64 ms each. */
#define DLOCK__BACKOFF_SPIN_CONSTANT                                           \
  { .first_us = 64000, .exact = 1 }
/* An unlock sent again after a lost reply: at least 20 ms, and not
 * before the connection may be tried again. */
#define DLOCK__BACKOFF_RETRY                                                   \
  { .first_us = 40000, .after_reconnect = 1 }
/* The settling of unknown outcomes while Redis does not answer: from
 * 20 ms, doubling to about a second, not before the connection may be
 * tried again. */
#define DLOCK__BACKOFF_SETTLE                                                  \
  { .first_us = 40000, .max_step = 5, .after_reconnect = 1 }
/* A call riding an outage: 20 ms doubling to 640 ms, and not before the
 * connection may be tried again. */
#define DLOCK__BACKOFF_OUTAGE                                                  \
  { .first_us = 20000, .max_step = 5, .after_reconnect = 1 }

/* A cluster's TRYAGAIN or CLUSTERDOWN (a refusal made before the call
 * ran, while a slot migrates or the cluster heals): 2 ms doubling to
 * 128 ms, never past the call's deadline. */
#define DLOCK__BACKOFF_BUSY                                                    \
  { .first_us = 2000, .max_step = 6 }

/* When the next pause of 'b' ends, from 'now_us', bounded by 'until_us'
 * (and moves 'b' on a step). */
int64_t dlock__backoff_next(dlock_client_t *c, dlock__backoff *b,
                            int64_t now_us, int64_t until_us);

/* Sleeps the next pause of 'b'. 0, or DLOCK_ECANCELED (or DLOCK_EFORKED)
 * when the client shuts down meanwhile. */
int dlock__backoff_pause(dlock_client_t *c, dlock__backoff *b,
                         int64_t until_us);

/* The client's pause before a call that a cluster refused for now
 * (TRYAGAIN or CLUSTERDOWN: DLOCK__CLUSTER_BUSY) is made again: the busy
 * back-off (DLOCK__BACKOFF_BUSY) kept in '*step'; DLOCK_ETIMEDOUT without
 * waiting when it would end past 'until_us', else 0 after it, or
 * DLOCK_ECANCELED when the client shuts down meanwhile. */
int dlock__busy_pause(dlock_client_t *c, int *step, int64_t until_us);

/*
 * Riding out an outage: a call whose attempt failed with an error a
 * failover causes tries again after the outage back-off
 * (DLOCK__BACKOFF_OUTAGE) until the ride's end, taken at the first such
 * failure. One record and one rule for every call that does: the
 * acquisition machine, the composites, an unlock and the client's open.
 * Zeroed before the first attempt.
 */
typedef struct dlock__riding {
  int64_t until_us, first_us; /* the ride's end and start; 0 before it */
  int step, tries;
  char why[300]; /* the detail of the failure that started the last pause */
} dlock__riding;

/* The end of the next pause of 'r', whose ride ends at 'until_us' (taken
 * at its first call), or 0 when the ride is over. Counts the try and
 * keeps the current error's detail. Does not wait: for a machine that
 * waits itself. */
int64_t dlock__outage_plan(dlock_client_t *c, dlock__riding *r,
                           int64_t until_us);

/* dlock__outage_plan, then the pause, for a call that failed with 'rc'.
 * 0 after the pause: try again. Else the code to return: 'rc', with its
 * detail, when there is no time for another attempt, or DLOCK_ECANCELED
 * (or DLOCK_EFORKED) when the client shuts down meanwhile. */
int dlock__outage_next(dlock_client_t *c, dlock__riding *r, int rc,
                       int64_t until_us);

/* 'rc', the last attempt's, with "(tried N more times over M ms)" added to
 * its detail when the call was tried again. */
int dlock__outage_end(const dlock__riding *r, int rc);

/* The end of a ride for a call with 'wait_ms' and 'deadline_us': the
 * deadline, or outage_wait_ms from now for a wait without end. */
int64_t dlock__outage_until(dlock_client_t *c, int64_t wait_ms,
                            int64_t deadline_us);

/* ---- attempts whose outcome is unknown (settle.c) ------------------------ */

/* 1 when a call that failed with 'rc' may have run in Redis all the same
 * (no answer came: a timeout, a failed connection, a shutdown). */
int dlock__outcome_unknown(int rc);

/* After an attempt of 'owner' on 'l' that may have run in Redis without its
 * answer reaching the client (or a waiter that could not leave a fair
 * queue): records it to be undone as soon as Redis answers, unless the
 * owner's hold is lost or abandoned (its own unlock then settles the lock).
 * Never fails: unrecorded, a late grant expires with its lease. */
void dlock__note_unsettled(dlock_t *l, uint64_t owner);

/* Records the attempt with the owner's hold count 'believed' (see
 * dlock__note_unsettled) and wakes the background settling. */
void dlock__unsettled_add(dlock_t *l, uint64_t owner, int64_t believed);

/* Settles the owner's own unsettled attempt on 'l', if any, now (waiting
 * for the background one under way): 0 when there is none left, else the
 * error of an undo that Redis did not answer. */
int dlock__unsettled_settle(dlock_t *l, uint64_t owner);

/* 1 when 'owner' has an unsettled attempt on 'l' ('*believed' is then its
 * hold count), without waiting or settling anything. */
int dlock__unsettled_pending(dlock_t *l, uint64_t owner, int64_t *believed);

/* How many attempts of the client are unsettled (for tests). */
int dlock__unsettled_count(dlock_client_t *c);

/* The settler of 'c', which settles with 'undo' (dlock__undo, passed in
 * because the release scripts it runs settle first themselves); freeing
 * it stops its thread, and what is still unsettled then expires with its
 * lease. NULL is ignored by free. */
typedef int (*dlock__undo_fn)(dlock_t *l, uint64_t owner, int64_t believed);
int dlock__settler_new(dlock_client_t *c, dlock__undo_fn undo,
                       dlock__settler **out);
void dlock__settler_free(dlock__settler *st);
/* Frees the settler of a client inherited across fork(), touching neither
 * its thread nor its condition variable (both the parent's); 0, or -1 when
 * a parent thread held its mutex at the fork and it was left as it is. */
int dlock__settler_forget(dlock__settler *st);

/* Frees the latch names still waiting to be deleted (they expire by
 * themselves). */
void dlock__done_latches_clear(dlock_client_t *c);

/* For an undo: a release of 'believed' + 1 holds (its count argument),
 * with a latch of its own and without the hold table. Pair with
 * dlock__undo_run, or dlock__release_end on failure. */
int dlock__undo_begin(dlock_t *l, uint64_t owner, int64_t believed,
                      dlock__release *r);

/* Runs an undo's release script call and frees 'r'. 0 when Redis
 * answered, whatever the answer. */
int dlock__undo_run(dlock_t *l, dlock__release *r, const dlock__eval *call);

#endif
