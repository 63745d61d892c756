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
  int64_t ttl_ms; /* how long to wait at most; -1 unknown */
  /* The lock's fencing counter when the attempt ran (fair lock; 0 when
   * unknown). A hand-over message with a token no higher than this was sent
   * before the attempt, which took the lock up itself or found it given
   * back: it is stale, and must not be taken for a new one. */
  uint64_t counter;
} dlock__busy;

/*
 * A script call a kind built, with the room for its arguments: the kind
 * fills 'eval' and points it into 'argv' and 'lens'. Key names the kind
 * had to allocate go into 'owned' and are freed by dlock__call_free, so a
 * built call is released the same way whatever the kind.
 */
#define DLOCK__CALL_ARGS 16
typedef struct dlock__call {
  dlock__eval eval;
  const char *argv[DLOCK__CALL_ARGS];
  size_t lens[DLOCK__CALL_ARGS];
  char field[DLOCK__FIELD_MAX];
  char field2[DLOCK__FIELD_MAX];
  char num[3][24];
  char *owned[3];
} dlock__call;

/* Makes 'call' own nothing: the engine does this before a kind builds
 * it, and frees it with dlock__call_free after, whatever the build
 * returned. */
void dlock__call_init(dlock__call *call);

/* Frees what a kind allocated for 'call' (nothing for most calls). */
void dlock__call_free(dlock__call *call);

/* Points 'out' at a call of 'script' on the 'n' arguments 'argv' and
 * 'lens' (copied; what they point to must outlive the call), the first
 * 'nkeys' of them keys. What 'out' owns is left as it is. */
void dlock__call_set(dlock__call *out, const dlock__script *script, int nkeys,
                     const char *const *argv, const size_t *lens, int n);

/* What an acquisition asks of a kind's acquire script. */
typedef struct dlock__ask {
  uint64_t owner;
  int64_t lease_ms; /* as asked: DLOCK_WATCHDOG or a lease */
  int64_t believed; /* the holds the client believes the owner has */
  int queue; /* 0 for a single try that must leave no trace (no queueing) */
} dlock__ask;

/* How a kind takes up a lock that a release handed to its waiter. */
enum dlock__handed {
  DLOCK__HANDED_RECORD = 1, /* it is held: record it, no round trip */
  DLOCK__HANDED_RETAKE = 2  /* take it up with an attempt of its own */
};

typedef struct dlock__release dlock__release;

/* Hand-overs in a row before a release lets every client try: runs of
 * this many plus one acquisitions per client. Each run ends with the only
 * turn that costs a client an unlock message, its waiters' attempts (most
 * of which fail) and the pause of the other clients' woken waiters (see
 * dlock__cohort_contention_pause), so the longer the runs, the more
 * acquisitions per second a contended lock serves and the fewer commands
 * each costs. Eight per turn keeps fewest/most over the clients' threads
 * near 0.9 and a waiter of another client waits no longer at the 99th
 * percentile than with four per turn (bench/ab.sh, contended). */
#define DLOCK__HANDOVER_RUN_MAX 7

/*
 * A lock kind. A single-lock kind (reentrant, spin, fair, read, write) is
 * a table of pure functions: each builds one script call from the handle
 * and what the engine tells it, and sends nothing, waits for nothing and
 * takes no mutex. The engine (src/engine/) runs the calls, decodes their
 * replies into outcomes, keeps the hold table, waits between attempts and
 * rides outages, the same way for every kind. A composite kind (MultiLock,
 * RedLock) is made of other handles and brings its own acquisition,
 * release and queries instead (see below).
 */
struct dlock__kind {
  dlock_kind_t id;
  int wait_by; /* enum dlock__wait_by */
  /* A new waiter does not try ahead of this client's threads already
   * waiting on the same channel (it queues behind them instead), so one
   * process's threads take turns rather than the releasing thread taking
   * the lock straight back. Such a kind's last release may also hand the
   * lock to one of those threads (handover.c). */
  int no_barging;
  /* The acquire script: replies {1, token, count}, {0, ttl} or {0, ttl,
   * counter} (see dlock__decode_acquire). */
  int (*acquire_call)(dlock_t *l, const dlock__ask *a, dlock__call *out);
  /* The release script for the release (or undo) 'r': replies the holds
   * left, or -1 when the owner held nothing. Settling an attempt whose
   * outcome is unknown runs it too, with 'r->count' one above the holds
   * to go back to (settle.c). */
  int (*release_call)(dlock_t *l, uint64_t owner, const dlock__release *r,
                      dlock__call *out);
  /* The script that takes a waiter out of a queue, and gives back a lock
   * handed to it meanwhile when 'believed' is 0; NULL when the kind has no
   * queue. It also settles an attempt from no holds whose outcome is
   * unknown. */
  int (*leave_call)(dlock_t *l, uint64_t owner, int64_t believed,
                    dlock__call *out);
  /* The script that deletes the lock and wakes its waiters: replies 1
   * deleted, 0 none. */
  int (*force_call)(dlock_t *l, dlock__call *out);
  /* How a lock handed to a waiter of 'lease_ms' is taken up: an enum
   * dlock__handed. NULL when no release of the kind hands a lock over. */
  int (*handed)(dlock_t *l, int64_t lease_ms);
  /* The channel a waiter of 'owner' listens on; NULL: l->channel. */
  int (*wait_channel)(dlock_t *l, uint64_t owner, char **out, size_t *len);
  /* The hash field of 'owner' (the writer's has ":write"); NULL: the
   * plain one (dlock__field_plain). */
  size_t (*field)(dlock_t *l, uint64_t owner, char buf[DLOCK__FIELD_MAX]);
  /* Composite kinds only: the whole acquisition and release, and the
   * queries. */
  int (*acquire)(dlock_t *l, uint64_t owner, int64_t wait_ms, int64_t lease_ms,
                 int64_t deadline_us);
  int (*release)(dlock_t *l, uint64_t owner);
  int (*force_release)(dlock_t *l);
  int (*query)(dlock_t *l, uint64_t owner, int what, int64_t *out);
  uint64_t (*token)(dlock_t *l, uint64_t owner);
  /* Frees what a composite keeps beyond the handle's names (its records),
   * when a handle whose 'subs' is set is freed. May be NULL. */
  void (*dispose)(dlock_t *l);
};

/* The lease a script is given for 'lease_ms' (the watchdog's timeout for
 * DLOCK_WATCHDOG). */
int64_t dlock__lease_for(const dlock_t *l, int64_t lease_ms);

/* A release in progress: what the hold table said, and the latch key. */
struct dlock__release {
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
};

/* The reentrant (and spin) lock's calls, which RedLock also sends to every
 * node at once. */
int dlock__reentrant_acquire_call(dlock_t *l, const dlock__ask *a,
                                  dlock__call *out);
int dlock__reentrant_release_call(dlock_t *l, uint64_t owner,
                                  const dlock__release *r, dlock__call *out);

/* The hand-over script (handover.lua) that releases the last hold of
 * 'owner' (begun as 'r') by handing the lock to waiting owner 'to' of the
 * same client with 'lease_ms', or, with 'at_cap', releases it for every
 * client. */
int dlock__handover_call(dlock_t *l, uint64_t owner, const dlock__release *r,
                         uint64_t to, int64_t lease_ms, int at_cap,
                         dlock__call *out);

/* How a hand-over's reservation of a waiter ended (engine/cohort.c). */
enum dlock__resolve {
  DLOCK__RESOLVE_HANDED,   /* the waiter holds the lock with the token
                              (a semaphore's waiter: its permits) */
  DLOCK__RESOLVE_FAILED,   /* the hand-over failed: it is woken to try */
  DLOCK__RESOLVE_RELEASED, /* released for every client after a run of
                              hand-overs; the unlock message wakes the
                              waiter like any other, and this client's
                              waiters hold back their next attempt for a
                              share of the run's time (cohort.c) */
  DLOCK__RESOLVE_YIELDED   /* ... and other clients listen: the hold-back
                              is also at least YIELD_US (cohort.c) */
};

/* Decodes the hand-over script's reply: {0, token} (handed over), {-1, 0}
 * (not held), {1, 0}, {2, 0} or {3, 0} (released for everyone; another
 * client listens, unknown, none does). Sets the holds left (-1: none) and
 * the outcome for the waiter (DLOCK__RESOLVE_*). */
int dlock__decode_handover(const redisReply *r, int64_t *left, uint64_t *token,
                           int *outcome);

/* DLOCK_EINVAL with its detail when 'a' asks a non-reentrant kind for a
 * lock its owner holds already (Redisson's non-reentrant locks refuse
 * that too); else 0. The client's hold table tells: an owner field is
 * written only by its own client. */
int dlock__refuse_reentry(const dlock_t *l, const dlock__ask *a);

/* The force-release call of a lock whose waiters all listen on its one
 * channel: deletes the lock hash and publishes 'message' if there was
 * one. */
int dlock__force_plain_call(dlock_t *l, const char *message, dlock__call *out);

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
extern const dlock__kind dlock__kind_nonreentrant;
extern const dlock__kind dlock__kind_nonreentrant_fair;
extern const dlock__kind dlock__kind_multi;
extern const dlock__kind dlock__kind_red;

/* A query on a single lock, whatever its kind (composites use it on their
 * parts). */
int dlock__query_single(dlock_t *l, uint64_t owner, int what, int64_t *out);

/* 1 when the client has a record of a hold of 'owner' (lost or not). */
int dlock__has_hold(dlock_t *l, uint64_t owner);

/* The hold count the client believes 'owner' has (0 when none or lost). */
int64_t dlock__believed_count(dlock_t *l, uint64_t owner);

/* What dlock__mark_hold sets on a hold. */
enum dlock__mark {
  DLOCK__MARK_LOST, /* lost: each of its unlocks will say so */
  DLOCK__MARK_PART  /* a composite's part: its end is not counted as a
                       single lock's */
};

/* Marks the hold of 'owner' on 'l' as 'mark' says (an enum dlock__mark),
 * when the client has one. */
void dlock__mark_hold(dlock_t *l, uint64_t owner, int mark);

/* DLOCK_ELOST with its detail: the lock was lost while held. */
int dlock__lost_error(const dlock_t *l);

/* Creates a handle of 'kind' on 'name' after checking the arguments. */
int dlock__handle_new(dlock_client_t *c, const dlock__kind *kind,
                      const char *name, size_t len, dlock_t **out);

/* The plain owner field "<client-id>:<owner>". */
size_t dlock__field_plain(dlock_t *l, uint64_t owner,
                          char buf[DLOCK__FIELD_MAX]);

/* The hash field of 'owner' in the lock of 'l', as its kind names it. */
size_t dlock__kind_field(dlock_t *l, uint64_t owner,
                         char buf[DLOCK__FIELD_MAX]);

#endif
