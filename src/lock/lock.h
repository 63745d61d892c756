/*
 * Lock handles and lock kinds. Every kind is a dlock_t driven by the same
 * verbs; what differs lives in its dlock__kind.
 *
 * Single-lock kinds (reentrant, fair, spin, read, write) give one attempt
 * to acquire and one release as Lua scripts; handle.c waits between
 * attempts, by pub/sub or by back-off. Composite kinds (MultiLock, RedLock)
 * replace the whole acquisition.
 */
#ifndef DLOCK_LOCK_H
#define DLOCK_LOCK_H

#include "client.h"
#include "keys.h"
#include "scripts.h"

typedef struct dlock__kind dlock__kind;

struct dlock {
  dlock_client_t *c; /* NULL for a composite */
  const dlock__kind *kind;
  char *name; /* NUL-terminated copy; may contain NULs */
  size_t len;
  char *channel; /* where unlocks are announced (per kind) */
  size_t channel_len;
  char *token_key; /* redisson_lock_token:{name} */
  size_t token_key_len;
  dlock_t **subs; /* composite: the handles it is made of (not owned) */
  size_t nsubs;
  /* Composite: each owner's token and depth, so that a reentrant
   * acquisition keeps the token of the first one (guarded by 'cmu'). */
  struct dlock__chold *cholds;
  pthread_mutex_t cmu;
};

/* dlock__check_canceled on the handle's client, or on every part's client
 * of a composite: 0 when the handle may be used. */
int dlock__check_handle(dlock_t *l);

/* Frees what a composite handle owns (its records), not the handle. */
void dlock__composite_free(dlock_t *l);

enum dlock__wait_by { DLOCK__WAIT_PUBSUB, DLOCK__WAIT_BACKOFF };

/* What an attempt that found the lock taken learned. */
typedef struct dlock__busy {
  int64_t ttl_ms; /* how long to sleep at most; -1 unknown */
  /* The lock's fencing counter when the attempt ran (fair lock; 0 when
   * unknown). A hand-over message with a token no higher than this was sent
   * before the attempt, which took the lock up itself or found it given
   * back: it is stale, and must not be taken for a new one. */
  uint64_t counter;
} dlock__busy;

struct dlock__kind {
  dlock_kind_t id;
  int wait_by; /* enum dlock__wait_by */
  /* A new waiter does not try ahead of this client's threads already
   * waiting on the same channel (it queues behind them instead), so one
   * process's threads take turns rather than the releasing thread taking
   * the lock straight back. */
  int no_barging;
  /*
   * One attempt: 0 when 'owner' holds the lock afterwards (the hold table is
   * updated), 1 when another owner holds it ('*busy' says more), or an
   * error. 'queue' is 0 for a single try that must not leave a trace (a
   * fair lock does not enqueue then).
   */
  int (*try_acquire)(dlock_t *l, uint64_t owner, int64_t lease_ms, int queue,
                     dlock__busy *busy);
  /* A release handed the lock to waiting 'owner' with 'token' (its lease
   * counted from 'since_us' at the latest): as try_acquire. May be NULL
   * when the kind never does that. */
  int (*granted)(dlock_t *l, uint64_t owner, int64_t lease_ms, uint64_t token,
                 int64_t since_us, dlock__busy *busy);
  /* Called when a waiter stops waiting without the lock: 0, or an error
   * when Redis did not answer (the waiter may still be queued). May be
   * NULL. */
  int (*give_up)(dlock_t *l, uint64_t owner);
  /* Gives back whatever an attempt of 'owner' that got no answer may have
   * taken, 'believed' being the holds the owner had when it tried: its
   * holds are set back to that many (a hold granted from none is released
   * and the lock's waiters told), and a queue place is given up. Harmless
   * when the attempt never ran. 0 when Redis answered (see settle.c). */
  int (*undo)(dlock_t *l, uint64_t owner, int64_t believed);
  /* The channel a waiter of 'owner' listens on; NULL: l->channel. */
  int (*wait_channel)(dlock_t *l, uint64_t owner, char **out, size_t *len);
  /* Releases one hold of 'owner': 0, DLOCK_ENOTHELD, DLOCK_ELOST or error. */
  int (*release)(dlock_t *l, uint64_t owner);
  /* The hash field of 'owner' (the writer's has ":write"). */
  size_t (*field)(dlock_t *l, uint64_t owner, char buf[DLOCK__FIELD_MAX]);
  /* Deletes the lock and wakes waiters: 1 deleted, 0 none, or error. */
  int (*force_release)(dlock_t *l);
  /* Composite kinds only: the whole acquisition, and the queries. */
  int (*acquire)(dlock_t *l, uint64_t owner, int64_t wait_ms, int64_t lease_ms,
                 int64_t deadline_us);
  int (*query)(dlock_t *l, uint64_t owner, int what, int64_t *out);
  uint64_t (*token)(dlock_t *l, uint64_t owner);
  /* Frees what a composite keeps beyond the handle's names (its records),
   * when a handle whose 'subs' is set is freed. May be NULL. */
  void (*dispose)(dlock_t *l);
};

/* What dlock__kind.query answers. */
enum dlock__query {
  DLOCK__Q_LOCKED,
  DLOCK__Q_HELD,
  DLOCK__Q_COUNT,
  DLOCK__Q_TTL
};

extern const dlock__kind dlock__kind_reentrant;
extern const dlock__kind dlock__kind_spin;
extern const dlock__kind dlock__kind_fair;
extern const dlock__kind dlock__kind_read;
extern const dlock__kind dlock__kind_write;
extern const dlock__kind dlock__kind_multi;
extern const dlock__kind dlock__kind_red;

/* A query on a single lock, whatever its kind (composites use it on their
 * parts). */
int dlock__query_single(dlock_t *l, uint64_t owner, int what, int64_t *out);

/* Creates a handle of 'kind' on 'name' after checking the arguments. */
int dlock__handle_new(dlock_client_t *c, const dlock__kind *kind,
                      const char *name, size_t len, dlock_t **out);

/* The plain owner field "<client-id>:<owner>". */
size_t dlock__field_plain(dlock_t *l, uint64_t owner,
                          char buf[DLOCK__FIELD_MAX]);

/* ---- shared by the single-lock kinds (hashlock.c) ------------------------ */

/* Runs one script on the lock's client and decodes its integer reply. */
int dlock__eval_integer(dlock_t *l, const dlock__eval *call, int64_t *out);

/* Deletes the lock hash and publishes 'message' on its channel if there
 * was one: 1 deleted, 0 none, or an error. */
int dlock__force_release_plain(dlock_t *l, const char *message);

/* 1 when the client has a record of a hold of 'owner' (lost or not). */
int dlock__has_hold(dlock_t *l, uint64_t owner);

/* The hold count the client believes 'owner' has (0 when none or lost). */
int64_t dlock__believed_count(dlock_t *l, uint64_t owner);

/*
 * Runs one acquisition script (replying {1, token, count}, {0, ttl} or {0,
 * ttl, counter}) and, on success, records the hold. Returns 0, 1 (taken;
 * '*busy') or error.
 */
int dlock__run_acquire(dlock_t *l, uint64_t owner, int64_t lease_ms,
                       const dlock__eval *call, dlock__busy *busy);

/* A release in progress: what the hold table said, and the latch key. */
typedef struct dlock__release {
  int64_t lease_ms; /* lease to restore while still held */
  int known;        /* the client had a record of the hold */
  int abandoned;    /* ... whose last unlock had failed */
  int lost;         /* ... that was found lost: the answer is DLOCK_ELOST */
  char lease[24];
  char latch_ttl[24];
  char count[24]; /* the hold count the client believes in ("0": unknown) */
  char *latch;    /* redisson_unlock_latch:{name}:<request-id> */
  size_t latch_len;
  int unsynced; /* answered, but too few replicas acknowledged it */
} dlock__release;

/* Looks the hold up (failing with DLOCK_ELOST when the watchdog found it
 * lost) and makes the latch key. Pair with dlock__release_finish. */
int dlock__release_begin(dlock_t *l, uint64_t owner, dlock__release *r);

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

/* Hand-overs in a row before a release lets every client try: runs of
 * this many plus one acquisitions per client. Each run ends with the only
 * turn that costs a client an unlock message, its waiters' attempts (most
 * of which fail) and the pause of the other clients' woken waiters (see
 * dlock__pubsub_contention_pause), so the longer the runs, the more
 * acquisitions per second a contended lock serves and the fewer commands
 * each costs. Eight per turn keeps fewest/most over the clients' threads
 * near 0.9 and a waiter of another client waits no longer at the 99th
 * percentile than with four per turn (bench/ab.sh, contended). */
#define DLOCK__HANDOVER_RUN_MAX 7

/* After dlock__release_begin succeeded but no answer came: the hold stops
 * being renewed if it was the last (it expires with its lease) and is
 * marked abandoned, so the owner's next call finishes the release. */
void dlock__release_failed(dlock_t *l, uint64_t owner);

/* Lock-free frees of 'r' after a failed begin (safe to call always). */
void dlock__release_end(dlock__release *r);

/* A script call with the client's done unlock latches (see hashlock.c)
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

/* Room for one script call's arguments, owned by the caller's stack. */
typedef struct dlock__call_args {
  char field[DLOCK__FIELD_MAX];
  char lease[24];
  char count[24];
  const char *argv[8];
  size_t lens[8];
  dlock__eval call;
} dlock__call_args;

/* The reentrant (and spin) lock's acquire and release calls, built but not
 * sent, for RedLock to send to every node at once. */
void dlock__reentrant_acquire_call(dlock_t *l, uint64_t owner, int64_t lease_ms,
                                   dlock__call_args *a);
void dlock__reentrant_release_call(dlock_t *l, uint64_t owner,
                                   const dlock__release *r,
                                   dlock__call_args *a);

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

/* Pauses between the attempts of a call that rides out an outage
 * (services.c): a back-off from 20 ms to 640 ms with jitter, not before the
 * connection may be tried again, never past 'until_us'. 0, or
 * DLOCK_ECANCELED when the client shuts down meanwhile. */
int dlock__outage_pause(dlock_client_t *c, int *step, int64_t until_us);

/* Where a call that rides out an outage stands (services.c). Zeroed before
 * its first attempt. */
typedef struct dlock__riding {
  int64_t until_us, first_us; /* the ride's end and start; 0 before it */
  int step, tries;
} dlock__riding;

/* After an attempt that failed with 'rc', an error an outage causes: the
 * ride ends at 'until_us' (taken at the first failure). 0 after the pause
 * (dlock__outage_pause): try again. Else the code to return: 'rc', with
 * its detail, when there is no time for another attempt, or
 * DLOCK_ECANCELED. */
int dlock__outage_next(dlock_client_t *c, dlock__riding *r, int rc,
                       int64_t until_us);

/* 'rc', the last attempt's, with "(tried N more times over M ms)" added to
 * its detail when the call was tried again. */
int dlock__outage_end(const dlock__riding *r, int rc);

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

/* For a kind's undo: a release of 'believed' + 1 holds (its count
 * argument), with a latch of its own and without the hold table. Pair with
 * dlock__undo_run, or dlock__release_end on failure. */
int dlock__undo_begin(dlock_t *l, uint64_t owner, int64_t believed,
                      dlock__release *r);

/* Runs an undo's release script call and frees 'r'. 0 when Redis
 * answered, whatever the answer. */
int dlock__undo_run(dlock_t *l, dlock__release *r, const dlock__eval *call);

#endif
