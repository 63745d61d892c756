/*
 * A client's statistics (see stats.h): the block, its histograms, the
 * table of contended names, the event hook, and the copy the public
 * dlock_client_stats() returns.
 */
#include "stats.h"

#include "alloc.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

_Thread_local unsigned dlock__stat_slot;

/* Threads are dealt shards in turn as they first count: a few threads get
 * one each, many share them evenly. */
unsigned dlock__stat_slot_take(void) {
  static atomic_uint next;
  unsigned slot = atomic_fetch_add_explicit(&next, 1, memory_order_relaxed) %
                  DLOCK__STAT_SHARDS;
  dlock__stat_slot = slot + 1;
  return slot;
}

dlock__stats *dlock__stats_new(dlock_event_cb on_event, void *data) {
  dlock__stats *st = dlock__calloc(1, sizeof(*st));
  if (st == NULL)
    return NULL;
  if (pthread_mutex_init(&st->top.mu, NULL) != 0) {
    dlock__free(st);
    return NULL;
  }
  st->on_event = on_event;
  st->on_event_data = data;
  return st;
}

void dlock__stats_free(dlock__stats *st) {
  if (st == NULL)
    return;
  pthread_mutex_destroy(&st->top.mu);
  dlock__free(st);
}

/* The bucket of a sample: the smallest i with us <= 2^i, the last bucket
 * for what is longer than the one before it. */
static int bucket_of(uint64_t us) {
  if (us <= 1)
    return 0;
  int i = 64 - __builtin_clzll(us - 1);
  return i < DLOCK_STATS_BUCKETS - 1 ? i : DLOCK_STATS_BUCKETS - 1;
}

static void hist_add(dlock__hist *h, int64_t us) {
  uint64_t v = us > 0 ? (uint64_t)us : 0;
  atomic_fetch_add_explicit(&h->buckets[bucket_of(v)], 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&h->sum_us, v, memory_order_relaxed);
  /* A new maximum is rare: the loop runs once, or not at all. */
  uint64_t max = atomic_load_explicit(&h->max_us, memory_order_relaxed);
  while (v > max &&
         !atomic_compare_exchange_weak_explicit(
             &h->max_us, &max, v, memory_order_relaxed, memory_order_relaxed)) {
  }
}

void dlock__stat_time(dlock__stats *st, int which, int64_t us) {
  if (st != NULL)
    hist_add(&dlock__stat_mine(st)->h[which], us);
}

void dlock__stat_kind_time(dlock__stats *st, int kind, int which, int64_t us) {
  if (st != NULL)
    hist_add(&dlock__stat_mine(st)->kh[kind - 1][which], us);
}

void dlock__stat_failed(dlock__stats *st, int err) {
  if (st == NULL)
    return;
  size_t i = err < 0 ? (size_t)-err : 0;
  if (i >= DLOCK_STATS_CODES)
    i = DLOCK_STATS_CODES - 1;
  dlock__stat_shard *mine = dlock__stat_mine(st);
  atomic_fetch_add_explicit(&mine->c[DLOCK__ST_FAILED], 1,
                            memory_order_relaxed);
  atomic_fetch_add_explicit(&mine->by_code[i], 1, memory_order_relaxed);
}

/*
 * The space-saving rule (Metwally, Agrawal and El Abbadi, 2005): a name in
 * the table is counted; a new one takes a free entry, or else the entry of
 * the least waited name, whose count it inherits. With k entries, any name
 * with more than 1/k of the waits is in the table, and no count is below
 * the truth.
 */
void dlock__stat_contended(dlock__stats *st, const char *name, size_t len,
                           int timed_out, int64_t wait_us) {
  if (st == NULL)
    return;
  if (len > DLOCK_STATS_NAME_MAX)
    len = DLOCK_STATS_NAME_MAX;
  dlock__top *t = &st->top;
  pthread_mutex_lock(&t->mu);
  dlock_lock_stats_t *e = NULL, *least = NULL;
  for (size_t i = 0; i < t->n && e == NULL; i++) {
    dlock_lock_stats_t *x = &t->e[i];
    if (x->name_len == len && memcmp(x->name, name, len) == 0)
      e = x;
    else if (least == NULL || x->waits < least->waits)
      least = x;
  }
  if (e == NULL) {
    uint64_t inherited = 0;
    if (t->n < DLOCK_STATS_TOP) {
      e = &t->e[t->n++];
    } else {
      e = least;
      inherited = least->waits;
    }
    memset(e, 0, sizeof(*e));
    memcpy(e->name, name, len);
    e->name_len = len;
    e->waits = inherited;
  }
  e->waits++;
  e->timeouts += timed_out != 0;
  e->wait_us += wait_us > 0 ? (uint64_t)wait_us : 0;
  pthread_mutex_unlock(&t->mu);
}

void dlock__event(dlock__stats *st, const dlock_event_t *e) {
  if (st != NULL && st->on_event != NULL)
    st->on_event(st->on_event_data, e);
}

void dlock__stat_event(dlock__stats *st, int which, int kind, uint64_t count,
                       int err) {
  if (st == NULL)
    return;
  dlock__stat(st, which);
  if (st->on_event != NULL)
    st->on_event(st->on_event_data,
                 &(dlock_event_t){.kind = kind, .count = count, .err = err});
}

/* Adds one histogram of every shard, the one at 'offset' bytes into a
 * shard, into 'out'. */
static void read_hist_at(dlock__stats *st, size_t offset,
                         dlock_histogram_t *out) {
  for (int k = 0; k < DLOCK__STAT_SHARDS; k++) {
    dlock__hist *h = (dlock__hist *)((char *)&st->shard[k] + offset);
    out->sum_us += atomic_load_explicit(&h->sum_us, memory_order_relaxed);
    uint64_t max = atomic_load_explicit(&h->max_us, memory_order_relaxed);
    if (max > out->max_us)
      out->max_us = max;
    for (int i = 0; i < DLOCK_STATS_BUCKETS; i++) {
      uint64_t n = atomic_load_explicit(&h->buckets[i], memory_order_relaxed);
      out->buckets[i] += n;
      out->count += n;
    }
  }
}

static void read_hist(dlock__stats *st, int which, dlock_histogram_t *out) {
  read_hist_at(st, offsetof(dlock__stat_shard, h) + which * sizeof(dlock__hist),
               out);
}

/* The counters and histograms of 'kind' (not DLOCK_STATS_LOCK). */
static void read_kind(dlock__stats *st, int kind, dlock_kind_stats_t *out) {
  uint64_t c[DLOCK__KC_COUNT] = {0};
  for (int k = 0; k < DLOCK__STAT_SHARDS; k++)
    for (int i = 0; i < DLOCK__KC_COUNT; i++)
      c[i] += atomic_load_explicit(&st->shard[k].kc[kind - 1][i],
                                   memory_order_relaxed);
  out->acquired = c[DLOCK__KC_ACQUIRED];
  out->refused = c[DLOCK__KC_REFUSED];
  out->timed_out = c[DLOCK__KC_TIMED_OUT];
  out->failed = c[DLOCK__KC_FAILED];
  out->waits = c[DLOCK__KC_WAITS];
  out->released = c[DLOCK__KC_RELEASED];
  dlock_histogram_t *h[DLOCK__KH_COUNT] = {&out->acquire, &out->wait,
                                           &out->hold};
  for (int i = 0; i < DLOCK__KH_COUNT; i++)
    read_hist_at(st,
                 offsetof(dlock__stat_shard, kh) +
                     ((size_t)(kind - 1) * DLOCK__KH_COUNT + (size_t)i) *
                         sizeof(dlock__hist),
                 h[i]);
}

static int by_waits(const void *a, const void *b) {
  const dlock_lock_stats_t *x = a, *y = b;
  return x->waits < y->waits ? 1 : x->waits > y->waits ? -1 : 0;
}

void dlock__stats_read(dlock__stats *st, dlock_stats_t *out) {
  memset(out, 0, sizeof(*out));
  out->struct_size = sizeof(*out);
  if (st == NULL)
    return;
  out->enabled = 1;
  uint64_t c[DLOCK__ST_COUNT] = {0};
  for (int k = 0; k < DLOCK__STAT_SHARDS; k++) {
    dlock__stat_shard *sh = &st->shard[k];
    for (int i = 0; i < DLOCK__ST_COUNT; i++)
      c[i] += atomic_load_explicit(&sh->c[i], memory_order_relaxed);
    for (int i = 0; i < DLOCK_STATS_CODES; i++)
      out->failed_by_code[i] +=
          atomic_load_explicit(&sh->by_code[i], memory_order_relaxed);
  }
  out->acquired = c[DLOCK__ST_ACQUIRED];
  out->reentrant = c[DLOCK__ST_REENTRANT];
  out->refused = c[DLOCK__ST_REFUSED];
  out->timed_out = c[DLOCK__ST_TIMED_OUT];
  out->failed = c[DLOCK__ST_FAILED];
  out->waits = c[DLOCK__ST_WAITS];
  out->released = c[DLOCK__ST_RELEASED];
  out->unlocks = c[DLOCK__ST_UNLOCKS];
  out->unlock_retries = c[DLOCK__ST_UNLOCK_RETRIES];
  out->handovers = c[DLOCK__ST_HANDOVERS];
  out->lost = c[DLOCK__ST_LOST];
  out->watchdog_rounds = c[DLOCK__ST_WATCHDOG_ROUNDS];
  out->renewed = c[DLOCK__ST_RENEWED];
  out->sync_waits = c[DLOCK__ST_SYNC_WAITS];
  out->sync_shortfalls = c[DLOCK__ST_SYNC_SHORTFALLS];
  out->reconnects = c[DLOCK__ST_RECONNECTS];
  out->failovers = c[DLOCK__ST_FAILOVERS];
  out->redirections = c[DLOCK__ST_REDIRECTIONS];
  out->script_reloads = c[DLOCK__ST_SCRIPT_RELOADS];
  out->commands = c[DLOCK__ST_COMMANDS];
  out->pipelines = c[DLOCK__ST_PIPELINES];
  out->messages = c[DLOCK__ST_MESSAGES];
  out->wakeups = c[DLOCK__ST_WAKEUPS];
  read_hist(st, DLOCK__H_ACQUIRE, &out->acquire);
  read_hist(st, DLOCK__H_WAIT, &out->wait);
  read_hist(st, DLOCK__H_HOLD, &out->hold);
  out->pubsub_reconnects = c[DLOCK__ST_PUBSUB_RECONNECTS];
  read_kind(st, DLOCK_STATS_SEMAPHORE, &out->semaphore);
  read_kind(st, DLOCK_STATS_PSEM, &out->psem);
  read_kind(st, DLOCK_STATS_LATCH, &out->latch);
  read_kind(st, DLOCK_STATS_MULTILOCK, &out->multilock);
  read_kind(st, DLOCK_STATS_REDLOCK, &out->redlock);
  pthread_mutex_lock(&st->top.mu);
  out->ntop = st->top.n;
  memcpy(out->top, st->top.e, st->top.n * sizeof(out->top[0]));
  pthread_mutex_unlock(&st->top.mu);
  qsort(out->top, out->ntop, sizeof(out->top[0]), by_waits);
}
