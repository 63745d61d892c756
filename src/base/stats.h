/*
 * A client's statistics and its event hook, kept where every layer can
 * reach them: a connection counts the commands it sends, the pub/sub
 * reader the messages it reads, the engine its acquisitions. Every count
 * is a relaxed atomic addition, so that the hot path takes no lock, made in
 * one of a few shards that threads are spread over, so that threads on
 * different cores do not take turns at one cache line; reading adds the
 * shards up. A client opened with its statistics off and no on_event has
 * no block at all, and each place that would count costs the one test of
 * a NULL pointer.
 */
#ifndef DLOCK_STATS_H
#define DLOCK_STATS_H

#include "dlock.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

/* The counters, in the order of their fields in dlock_stats_t (which has
 * failed_by_code between 'failed' and 'waits'). */
enum dlock__stat_counter {
  DLOCK__ST_ACQUIRED,
  DLOCK__ST_REENTRANT,
  DLOCK__ST_REFUSED,
  DLOCK__ST_TIMED_OUT,
  DLOCK__ST_FAILED,
  DLOCK__ST_WAITS,
  DLOCK__ST_RELEASED,
  DLOCK__ST_UNLOCKS,
  DLOCK__ST_UNLOCK_RETRIES,
  DLOCK__ST_HANDOVERS,
  DLOCK__ST_LOST,
  DLOCK__ST_WATCHDOG_ROUNDS,
  DLOCK__ST_RENEWED,
  DLOCK__ST_SYNC_WAITS,
  DLOCK__ST_SYNC_SHORTFALLS,
  DLOCK__ST_RECONNECTS,
  DLOCK__ST_FAILOVERS,
  DLOCK__ST_REDIRECTIONS,
  DLOCK__ST_SCRIPT_RELOADS,
  DLOCK__ST_COMMANDS,
  DLOCK__ST_PIPELINES,
  DLOCK__ST_MESSAGES,
  DLOCK__ST_WAKEUPS,
  DLOCK__ST_PUBSUB_RECONNECTS, /* after 'top' in dlock_stats_t */
  DLOCK__ST_COUNT
};

/* The kinds other than the single locks (dlock_stats_kind_t less one),
 * each with these counters and histograms (dlock_kind_stats_t). */
#define DLOCK__KINDS (DLOCK_STATS_KINDS - 1)
enum dlock__kind_counter {
  DLOCK__KC_ACQUIRED,
  DLOCK__KC_REFUSED,
  DLOCK__KC_TIMED_OUT,
  DLOCK__KC_FAILED,
  DLOCK__KC_WAITS,
  DLOCK__KC_RELEASED,
  DLOCK__KC_COUNT
};
enum dlock__kind_hist { DLOCK__KH_ACQUIRE, DLOCK__KH_WAIT, DLOCK__KH_HOLD };
#define DLOCK__KH_COUNT 3

/* The histograms, in the order of their fields in dlock_stats_t. */
enum dlock__stat_hist {
  DLOCK__H_ACQUIRE,
  DLOCK__H_WAIT,
  DLOCK__H_HOLD,
  DLOCK__H_COUNT
};

/* A histogram's share in one shard; its count is the sum of its buckets. */
typedef struct dlock__hist {
  _Atomic uint64_t sum_us, max_us;
  _Atomic uint64_t buckets[DLOCK_STATS_BUCKETS];
} dlock__hist;

/* How many shards the counts are spread over. */
#define DLOCK__STAT_SHARDS 8

/* One shard: everything counted, and room after it so that the next
 * shard's first counters do not share its last cache line. */
typedef struct dlock__stat_shard {
  _Atomic uint64_t c[DLOCK__ST_COUNT];
  _Atomic uint64_t by_code[DLOCK_STATS_CODES];
  dlock__hist h[DLOCK__H_COUNT];
  _Atomic uint64_t kc[DLOCK__KINDS][DLOCK__KC_COUNT];
  dlock__hist kh[DLOCK__KINDS][DLOCK__KH_COUNT];
  char pad[64];
} dlock__stat_shard;

/* The contended names: a small table under its own mutex, touched only by
 * acquisitions that waited, which have spent a round trip at least. */
typedef struct dlock__top {
  pthread_mutex_t mu;
  size_t n;
  dlock_lock_stats_t e[DLOCK_STATS_TOP];
} dlock__top;

typedef struct dlock__stats {
  dlock__stat_shard shard[DLOCK__STAT_SHARDS];
  dlock__top top;
  dlock_event_cb on_event; /* NULL: no event is built */
  void *on_event_data;
} dlock__stats;

/* A new block with 'on_event' (may be NULL), or NULL when out of memory. */
dlock__stats *dlock__stats_new(dlock_event_cb on_event, void *data);
void dlock__stats_free(dlock__stats *st);

/* The calling thread's shard number plus one, 0 until it is given one
 * (dlock__stat_slot_take). */
extern _Thread_local unsigned dlock__stat_slot;
unsigned dlock__stat_slot_take(void);

/* The calling thread's shard of 'st'. */
static inline dlock__stat_shard *dlock__stat_mine(dlock__stats *st) {
  unsigned slot = dlock__stat_slot;
  return &st->shard[slot != 0 ? slot - 1 : dlock__stat_slot_take()];
}

/* Adds 1 (or 'n') to counter 'which' of 'st', which may be NULL. */
static inline void dlock__stat(dlock__stats *st, int which) {
  if (st != NULL)
    atomic_fetch_add_explicit(&dlock__stat_mine(st)->c[which], 1,
                              memory_order_relaxed);
}
static inline void dlock__stat_add(dlock__stats *st, int which, uint64_t n) {
  if (st != NULL)
    atomic_fetch_add_explicit(&dlock__stat_mine(st)->c[which], n,
                              memory_order_relaxed);
}

/* Adds 1 to counter 'which' (enum dlock__kind_counter) of 'kind' (a
 * dlock_stats_kind_t other than DLOCK_STATS_LOCK) in 'st', which may be
 * NULL. */
static inline void dlock__stat_kind(dlock__stats *st, int kind, int which) {
  if (st != NULL)
    atomic_fetch_add_explicit(&dlock__stat_mine(st)->kc[kind - 1][which], 1,
                              memory_order_relaxed);
}

/* Records a sample of 'us' in histogram 'which' (enum dlock__kind_hist)
 * of 'kind'. */
void dlock__stat_kind_time(dlock__stats *st, int kind, int which, int64_t us);

/* Whether events are to be built for 'st'. */
static inline int dlock__events_on(const dlock__stats *st) {
  return st != NULL && st->on_event != NULL;
}

/* Records a sample of 'us' microseconds in histogram 'which'. */
void dlock__stat_time(dlock__stats *st, int which, int64_t us);

/* Counts a failure with DLOCK_E* code 'err'. */
void dlock__stat_failed(dlock__stats *st, int err);

/* Counts a wait of 'wait_us' for lock 'name' in the contended names,
 * 'timed_out' when it ended without the lock. */
void dlock__stat_contended(dlock__stats *st, const char *name, size_t len,
                           int timed_out, int64_t wait_us);

/* Calls the event hook with 'e', when there is one. The caller holds none
 * of dlock's locks. */
void dlock__event(dlock__stats *st, const dlock_event_t *e);

/* Bumps counter 'which' and raises an event of 'kind' that names no lock
 * (a reconnect, a failover), with 'count' and 'err'. */
void dlock__stat_event(dlock__stats *st, int which, int kind, uint64_t count,
                       int err);

/* Copies 'st' (NULL: all zeros) into 'out', a struct of this library's
 * own size. */
void dlock__stats_read(dlock__stats *st, dlock_stats_t *out);

#endif
