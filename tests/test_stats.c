/*
 * Statistics and the event hook: the counters and histograms match what a
 * scripted run did (acquisitions, time-outs, a refusal, a lock lost by
 * deleting its key, a reconnect by restarting Redis, a Sentinel failover;
 * semaphores, expirable permits, latches, and MultiLocks and RedLocks
 * counted once as wholes; the pub/sub connection's reconnect),
 * on_event sees each event once and in order, the contended names are
 * ranked, the Prometheus text is well formed, a client with its
 * statistics off reports nothing, and sixteen threads counting at once
 * lose nothing (run under TSan in the sanitizer tree).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

#include "harness/sentinel_group.h"
#include "lock_util.h"

/* ---- an event recorder -------------------------------------------------- */

#define REC_MAX 4096

typedef struct rec_event {
  int kind;
  char name[64];
  uint64_t owner, token, count;
  int64_t wait_us, hold_us;
  int err;
  int what;
} rec_event;

/* Events as on_event saw them, in order, with a mutex of the test's own:
 * the hook is called from several threads (callers, the watchdog). */
typedef struct recorder {
  pthread_mutex_t mu;
  size_t n;
  rec_event ev[REC_MAX];
} recorder;

static void rec_init(recorder *r) {
  memset(r, 0, sizeof(*r));
  pthread_mutex_init(&r->mu, NULL);
}

static void on_event(void *data, const dlock_event_t *e) {
  recorder *r = data;
  pthread_mutex_lock(&r->mu);
  if (r->n < REC_MAX) {
    rec_event *x = &r->ev[r->n++];
    x->kind = e->kind;
    snprintf(x->name, sizeof(x->name), "%.*s",
             (int)(e->name_len < 63 ? e->name_len : 63),
             e->name != NULL ? e->name : "");
    x->owner = e->owner;
    x->token = e->token;
    x->count = e->count;
    x->wait_us = e->wait_us;
    x->hold_us = e->hold_us;
    x->err = e->err;
    x->what = e->what;
  }
  pthread_mutex_unlock(&r->mu);
}

/* A new recorder, freed with rec_free(). */
static recorder *rec_new(void) {
  recorder *r = malloc(sizeof(*r));
  if (r != NULL)
    rec_init(r);
  return r;
}

static void rec_free(recorder *r) {
  pthread_mutex_destroy(&r->mu);
  free(r);
}

/* A client of 's' whose events go to 'r'. */
static dlock_client_t *recorded_client(const rp_server_t *s, recorder *r) {
  dlock_options_t o;
  lu_options(&o, s);
  o.on_event = on_event;
  o.on_event_data = r;
  return lu_client_opts(&o);
}

/* How many recorded events are of 'kind'. */
static size_t rec_count(recorder *r, int kind) {
  pthread_mutex_lock(&r->mu);
  size_t k = 0;
  for (size_t i = 0; i < r->n; i++)
    k += r->ev[i].kind == kind;
  pthread_mutex_unlock(&r->mu);
  return k;
}

static dlock_stats_t stats_of(dlock_client_t *c) {
  dlock_stats_t s;
  dlock_client_stats(c, &s);
  return s;
}

/* Polls the statistics until the counter at 'offset' in them reaches
 * 'want' or 'limit_ms' pass; returns the last value. */
static uint64_t wait_stat(dlock_client_t *c, size_t offset, uint64_t want,
                          int64_t limit_ms) {
  int64_t until = lu_now_ms() + limit_ms;
  for (;;) {
    dlock_stats_t st = stats_of(c);
    uint64_t v;
    memcpy(&v, (const char *)&st + offset, sizeof(v));
    if (v >= want || lu_now_ms() >= until)
      return v;
    lu_sleep_ms(20);
  }
}

#define WAIT_STAT(c, field, want, limit_ms)                                    \
  wait_stat((c), offsetof(dlock_stats_t, field), (want), (limit_ms))

/* ---- the scripted run --------------------------------------------------- */

TEST(stats_count_a_scripted_run) {
  enum { N = 6, M = 3 };
  rp_server_t *s = lu_server(0);
  recorder *rec = rec_new();
  ASSERT_NOT_NULL(rec);
  dlock_client_t *a = recorded_client(s, rec);
  dlock_client_t *b = lu_client(s);

  /* N acquisitions and releases, one of them reentrant. */
  dlock_t *l = lu_get(a, "st:free");
  for (int i = 0; i < N; i++) {
    ASSERT_DLOCK_OK(dlock_lock(l, 10000));
    lu_sleep_ms(2);
    ASSERT_DLOCK_OK(dlock_unlock(l));
  }
  ASSERT_DLOCK_OK(dlock_lock(l, 10000));
  ASSERT_DLOCK_OK(dlock_lock(l, 10000));
  ASSERT_DLOCK_OK(dlock_unlock(l));
  lu_sleep_ms(2);
  ASSERT_DLOCK_OK(dlock_unlock(l));

  /* M waits that run out, and one try without a wait, on a lock another
   * client holds. */
  dlock_t *busy_b = lu_get(b, "st:busy"), *busy = lu_get(a, "st:busy");
  ASSERT_DLOCK_OK(dlock_lock(busy_b, 60000));
  for (int i = 0; i < M; i++)
    ASSERT_DLOCK_ERR(dlock_trylock(busy, 100, 10000), DLOCK_ETIMEDOUT);
  ASSERT_DLOCK_ERR(dlock_trylock(busy, 0, 10000), DLOCK_ETIMEDOUT);

  dlock_stats_t st = stats_of(a);
  ASSERT_EQ(st.struct_size, sizeof(st));
  ASSERT_EQ(st.enabled, 1);
  ASSERT_EQ(st.acquired, N + 2);
  ASSERT_EQ(st.reentrant, 1);
  ASSERT_EQ(st.timed_out, M);
  ASSERT_EQ(st.refused, 1);
  ASSERT_EQ(st.failed, 0);
  ASSERT_EQ(st.waits, M);
  ASSERT_EQ(st.released, N + 1);
  ASSERT_EQ(st.unlocks, N + 2);
  ASSERT_EQ(st.lost, 0);
  ASSERT_EQ(st.acquire.count, N + 2 + M + 1);
  ASSERT_EQ(st.wait.count, M);
  ASSERT_EQ(st.hold.count, N + 1);
  /* Each wait lasted its 100 ms at least; the buckets add up. */
  ASSERT_GE(st.wait.max_us, 100000);
  ASSERT_GE(dlock_histogram_quantile(&st.wait, 0.5), 65536);
  uint64_t sum = 0;
  for (int i = 0; i < DLOCK_STATS_BUCKETS; i++)
    sum += st.hold.buckets[i];
  ASSERT_EQ(sum, st.hold.count);
  ASSERT_GE(st.hold.sum_us, (uint64_t)N * 2000);
  /* Replica sync is on and the server has no replica: no WAIT was sent. */
  ASSERT_EQ(st.sync_shortfalls, 0);
  ASSERT_GE(st.commands, N + 2 + M + 1);
  ASSERT_GE(st.pipelines, 1);
  ASSERT_LE(st.pipelines, st.commands);
  /* The contended name. */
  ASSERT_EQ(st.ntop, 1);
  ASSERT_STR_EQ(st.top[0].name, "st:busy");
  ASSERT_EQ(st.top[0].waits, M);
  ASSERT_EQ(st.top[0].timeouts, M);

  /* The events of the calls above, in order: the caller's thread raised
   * them, and nothing else names these locks. */
  {
    int want[64], nw = 0;
    for (int i = 0; i < N; i++) {
      want[nw++] = DLOCK_EVENT_ACQUIRED;
      want[nw++] = DLOCK_EVENT_RELEASED;
    }
    want[nw++] = DLOCK_EVENT_ACQUIRED;
    want[nw++] = DLOCK_EVENT_ACQUIRED;
    want[nw++] = DLOCK_EVENT_RELEASED;
    for (int i = 0; i < M; i++) {
      want[nw++] = DLOCK_EVENT_WAITED;
      want[nw++] = DLOCK_EVENT_TIMED_OUT;
    }
    want[nw++] = DLOCK_EVENT_TIMED_OUT;
    int k = 0;
    uint64_t last_token = 0;
    pthread_mutex_lock(&rec->mu);
    for (size_t i = 0; i < rec->n; i++) {
      rec_event *e = &rec->ev[i];
      if (strncmp(e->name, "st:", 3) != 0)
        continue;
      ASSERT_LT(k, nw);
      if (e->kind != want[k])
        TEST_FAIL("event %d: %s, expected %s", k,
                  dlock_event_kind_name(e->kind),
                  dlock_event_kind_name(want[k]));
      ASSERT_EQ(e->owner, dlock_self());
      if (e->kind == DLOCK_EVENT_ACQUIRED) {
        /* Tokens grow; the reentrant one keeps its hold's. */
        ASSERT_GE(e->token, last_token);
        ASSERT_GT(e->token, 0);
        last_token = e->token;
      }
      if (e->kind == DLOCK_EVENT_RELEASED) {
        ASSERT_EQ(e->token, last_token);
        ASSERT_GE(e->hold_us, 1000);
      }
      if (e->kind == DLOCK_EVENT_TIMED_OUT)
        ASSERT_EQ(e->err, DLOCK_ETIMEDOUT);
      /* The acquisitions' hold counts: the reentrant one says 2. */
      if (e->kind == DLOCK_EVENT_ACQUIRED)
        ASSERT_EQ(e->count, k == 2 * N + 1 ? 2u : 1u);
      k++;
    }
    pthread_mutex_unlock(&rec->mu);
    ASSERT_EQ(k, nw);
  }

  /* A lock lost by deleting its key: the watchdog finds it (600 ms
   * lease, renewed every 200 ms). */
  dlock_t *w = lu_get(a, "st:lost");
  ASSERT_DLOCK_OK(dlock_lock(w, DLOCK_WATCHDOG));
  redisReply *r = rp_cmd(s, "DEL st:lost");
  ASSERT_NOT_NULL(r);
  freeReplyObject(r);
  ASSERT_EQ(WAIT_STAT(a, lost, 1, 20000), 1);
  ASSERT_DLOCK_ERR(dlock_unlock(w), DLOCK_ELOST);
  ASSERT_EQ(stats_of(a).lost, 1);
  ASSERT_EQ(rec_count(rec, DLOCK_EVENT_LOST), 1);
  ASSERT_GE(stats_of(a).watchdog_rounds, 1);
  ASSERT_GE(rec_count(rec, DLOCK_EVENT_RENEWAL_ROUND), 1);

  /* A reconnect: Redis restarted, the next call rides it out. */
  dlock_stats_t before = stats_of(a);
  ASSERT_EQ(rp_restart(s), 0);
  dlock_t *after = lu_get(a, "st:after");
  ASSERT_DLOCK_OK(dlock_lock(after, 10000));
  ASSERT_DLOCK_OK(dlock_unlock(after));
  st = stats_of(a);
  ASSERT_GE(st.reconnects, before.reconnects + 1);
  ASSERT_EQ(rec_count(rec, DLOCK_EVENT_RECONNECT), st.reconnects);
  /* A restarted server has no scripts: they were loaded again. */
  ASSERT_GE(st.script_reloads, before.script_reloads + 1);
  ASSERT_EQ(st.acquired, N + 3 + 1);

  dlock_free(after);
  dlock_free(w);
  dlock_free(busy);
  dlock_free(busy_b);
  dlock_free(l);
  dlock_client_close(a);
  dlock_client_close(b);
  rp_free(s);
  rec_free(rec);
}

/* How many recorded events are of 'kind' about 'what' (a
 * dlock_stats_kind_t) on a name that starts with 'prefix'. */
static size_t rec_count_of(recorder *r, int kind, int what,
                           const char *prefix) {
  pthread_mutex_lock(&r->mu);
  size_t k = 0;
  for (size_t i = 0; i < r->n; i++)
    k += r->ev[i].kind == kind && r->ev[i].what == what &&
         strncmp(r->ev[i].name, prefix, strlen(prefix)) == 0;
  pthread_mutex_unlock(&r->mu);
  return k;
}

/* ---- semaphores, expirable permits and latches -------------------------- */

/* A semaphore's acquisitions (N granted, M waits run out, one try without
 * a wait refused) and releases, an expirable permit held and released, a
 * latch awaited in vain and then at zero: each counted in its own group
 * and none as a single lock, with their events. */
TEST(stats_count_semaphores_and_latches) {
  enum { N = 4, M = 3 };
  rp_server_t *s = lu_server(1);
  recorder *rec = rec_new();
  ASSERT_NOT_NULL(rec);
  dlock_client_t *a = recorded_client(s, rec);

  dlock_sem_t *sem = NULL;
  ASSERT_DLOCK_OK(dlock_sem_get(a, "st:sem", &sem));
  ASSERT_EQ(dlock_sem_try_set_permits(sem, 2), 1);
  for (int i = 0; i < N; i++) {
    ASSERT_DLOCK_OK(dlock_sem_acquire(sem, 1, 1000));
    ASSERT_DLOCK_OK(dlock_sem_release(sem, 1));
  }
  ASSERT_DLOCK_OK(dlock_sem_acquire(sem, 2, 1000));
  for (int i = 0; i < M; i++)
    ASSERT_DLOCK_ERR(dlock_sem_acquire(sem, 1, 50), DLOCK_ETIMEDOUT);
  ASSERT_DLOCK_ERR(dlock_sem_acquire(sem, 1, 0), DLOCK_ETIMEDOUT);
  ASSERT_DLOCK_OK(dlock_sem_release(sem, 2));

  dlock_psem_t *ps = NULL;
  ASSERT_DLOCK_OK(dlock_psem_get(a, "st:psem", &ps));
  ASSERT_EQ(dlock_psem_try_set_permits(ps, 1), 1);
  dlock_permit_t p, q;
  ASSERT_DLOCK_OK(dlock_psem_acquire(ps, 1000, 60000, &p));
  ASSERT_DLOCK_ERR(dlock_psem_acquire(ps, 50, 60000, &q), DLOCK_ETIMEDOUT);
  lu_sleep_ms(2);
  ASSERT_DLOCK_OK(dlock_psem_release(ps, p.id));

  dlock_latch_t *latch = NULL;
  ASSERT_DLOCK_OK(dlock_latch_get(a, "st:latch", &latch));
  ASSERT_EQ(dlock_latch_try_set_count(latch, 1), 1);
  ASSERT_DLOCK_ERR(dlock_latch_await(latch, 50), DLOCK_ETIMEDOUT);
  ASSERT_DLOCK_OK(dlock_latch_count_down(latch, NULL));
  ASSERT_DLOCK_OK(dlock_latch_await(latch, 1000));

  dlock_stats_t st = stats_of(a);
  ASSERT_EQ(st.semaphore.acquired, N + 1);
  ASSERT_EQ(st.semaphore.timed_out, M);
  ASSERT_EQ(st.semaphore.refused, 1);
  ASSERT_EQ(st.semaphore.failed, 0);
  ASSERT_EQ(st.semaphore.waits, M);
  ASSERT_EQ(st.semaphore.released, N + 1);
  ASSERT_EQ(st.semaphore.acquire.count, N + 1 + M + 1);
  ASSERT_EQ(st.semaphore.wait.count, M);
  ASSERT_GE(st.semaphore.wait.max_us, 50000);
  ASSERT_EQ(st.semaphore.hold.count, 0);

  ASSERT_EQ(st.psem.acquired, 1);
  ASSERT_EQ(st.psem.timed_out, 1);
  ASSERT_EQ(st.psem.waits, 1);
  ASSERT_EQ(st.psem.released, 1);
  ASSERT_EQ(st.psem.hold.count, 1);
  ASSERT_GE(st.psem.hold.sum_us, 2000);

  ASSERT_EQ(st.latch.acquired, 1);
  ASSERT_EQ(st.latch.timed_out, 1);
  ASSERT_EQ(st.latch.refused, 0);
  ASSERT_EQ(st.latch.waits, 1);
  ASSERT_EQ(st.latch.released, 0);
  ASSERT_EQ(st.latch.acquire.count, 2);

  /* Nothing of it is a single lock's, nor a composite's. */
  ASSERT_EQ(st.acquired + st.timed_out + st.refused + st.failed, 0);
  ASSERT_EQ(st.waits + st.released + st.unlocks, 0);
  ASSERT_EQ(st.acquire.count + st.wait.count + st.hold.count, 0);
  ASSERT_EQ(st.multilock.acquire.count + st.redlock.acquire.count, 0);

  /* The events, each once, about what they were of. */
  ASSERT_EQ(
      rec_count_of(rec, DLOCK_EVENT_ACQUIRED, DLOCK_STATS_SEMAPHORE, "st:sem"),
      N + 1);
  ASSERT_EQ(
      rec_count_of(rec, DLOCK_EVENT_TIMED_OUT, DLOCK_STATS_SEMAPHORE, "st:sem"),
      M + 1);
  ASSERT_EQ(
      rec_count_of(rec, DLOCK_EVENT_WAITED, DLOCK_STATS_SEMAPHORE, "st:sem"),
      M);
  ASSERT_EQ(
      rec_count_of(rec, DLOCK_EVENT_RELEASED, DLOCK_STATS_SEMAPHORE, "st:sem"),
      N + 1);
  ASSERT_EQ(rec_count_of(rec, DLOCK_EVENT_ACQUIRED, DLOCK_STATS_LOCK, "st:"),
            0);
  {
    /* The permit's: its acquisition and release carry its token and
     * owner, in that order, after the wait that ran out. */
    int want[] = {DLOCK_EVENT_ACQUIRED, DLOCK_EVENT_WAITED,
                  DLOCK_EVENT_TIMED_OUT, DLOCK_EVENT_RELEASED};
    size_t k = 0;
    pthread_mutex_lock(&rec->mu);
    for (size_t i = 0; i < rec->n; i++) {
      rec_event *e = &rec->ev[i];
      if (e->what != DLOCK_STATS_PSEM)
        continue;
      ASSERT_LT(k, sizeof(want) / sizeof(want[0]));
      ASSERT_EQ(e->kind, want[k]);
      ASSERT_STR_EQ(e->name, "st:psem");
      if (e->kind == DLOCK_EVENT_ACQUIRED || e->kind == DLOCK_EVENT_RELEASED) {
        ASSERT_EQ(e->token, p.token);
        ASSERT_EQ(e->owner, p.owner);
      }
      if (e->kind == DLOCK_EVENT_RELEASED)
        ASSERT_GE(e->hold_us, 2000);
      k++;
    }
    pthread_mutex_unlock(&rec->mu);
    ASSERT_EQ(k, sizeof(want) / sizeof(want[0]));
  }
  ASSERT_EQ(
      rec_count_of(rec, DLOCK_EVENT_TIMED_OUT, DLOCK_STATS_LATCH, "st:latch"),
      1);
  ASSERT_EQ(
      rec_count_of(rec, DLOCK_EVENT_ACQUIRED, DLOCK_STATS_LATCH, "st:latch"),
      1);

  dlock_latch_free(latch);
  dlock_psem_free(ps);
  dlock_sem_free(sem);
  dlock_client_close(a);
  rp_free(s);
  rec_free(rec);
}

/* ---- MultiLocks and RedLocks --------------------------------------------- */

/* A MultiLock taken and released, and one whose part another client
 * holds; a RedLock over three servers taken and released: each counted
 * once as a whole, in its first part's client, and never as single locks
 * (which its parts are). */
TEST(stats_count_composites_once) {
  enum { NODES = 3 };
  rp_server_t *s[NODES];
  dlock_client_t *c[NODES];
  dlock_t *part[NODES], *node[NODES];
  recorder *rec = rec_new();
  ASSERT_NOT_NULL(rec);
  for (int i = 0; i < NODES; i++) {
    s[i] = lu_server(1);
    c[i] = recorded_client(s[i], rec);
    char name[32];
    snprintf(name, sizeof(name), "st:multi:%d", i);
    part[i] = lu_get(c[0], name);
    node[i] = lu_get(c[i], "st:red");
  }
  dlock_client_t *b = lu_client(s[0]);

  dlock_t *multi = NULL, *red = NULL;
  ASSERT_DLOCK_OK(dlock_get_multi(part, NODES, &multi));
  ASSERT_DLOCK_OK(dlock_get_red(node, NODES, &red));
  ASSERT_DLOCK_OK(dlock_lock(multi, 10000));
  lu_sleep_ms(2);
  ASSERT_DLOCK_OK(dlock_unlock(multi));
  /* A part held by another client: the MultiLock waits for it in vain. */
  dlock_t *busy = lu_get(b, "st:multi:1");
  ASSERT_DLOCK_OK(dlock_lock(busy, 60000));
  ASSERT_DLOCK_ERR(dlock_trylock(multi, 100, 10000), DLOCK_ETIMEDOUT);
  ASSERT_DLOCK_OK(dlock_unlock(busy));
  ASSERT_DLOCK_OK(dlock_lock(red, 10000));
  lu_sleep_ms(2);
  ASSERT_DLOCK_OK(dlock_unlock(red));

  dlock_stats_t st = stats_of(c[0]);
  ASSERT_EQ(st.multilock.acquired, 1);
  ASSERT_EQ(st.multilock.timed_out, 1);
  ASSERT_EQ(st.multilock.failed + st.multilock.refused, 0);
  ASSERT_EQ(st.multilock.waits, 1);
  ASSERT_EQ(st.multilock.released, 1);
  ASSERT_EQ(st.multilock.acquire.count, 2);
  ASSERT_EQ(st.multilock.wait.count, 1);
  ASSERT_EQ(st.multilock.hold.count, 1);
  ASSERT_GE(st.multilock.hold.sum_us, 2000);
  ASSERT_EQ(st.redlock.acquired, 1);
  ASSERT_EQ(st.redlock.released, 1);
  ASSERT_EQ(st.redlock.acquire.count, 1);
  ASSERT_EQ(st.redlock.hold.count, 1);
  ASSERT_GE(st.redlock.hold.sum_us, 2000);
  /* The parts, all single locks, are not counted as such, in any of the
   * RedLock's clients; the part waited for is among the contended
   * names. */
  for (int i = 0; i < NODES; i++) {
    dlock_stats_t x = stats_of(c[i]);
    ASSERT_EQ(x.acquired + x.timed_out + x.refused + x.failed, 0);
    ASSERT_EQ(x.reentrant + x.waits + x.released + x.unlocks, 0);
    ASSERT_EQ(x.acquire.count + x.wait.count + x.hold.count, 0);
    if (i > 0)
      ASSERT_EQ(x.redlock.acquire.count + x.multilock.acquire.count, 0);
  }
  ASSERT_EQ(st.ntop, 1);
  ASSERT_STR_EQ(st.top[0].name, "st:multi:1");
  /* Their events: one ACQUIRED and one RELEASED for each whole, named
   * after its first part; none of a single lock. */
  ASSERT_EQ(rec_count_of(rec, DLOCK_EVENT_ACQUIRED, DLOCK_STATS_MULTILOCK,
                         "st:multi:0"),
            1);
  ASSERT_EQ(rec_count_of(rec, DLOCK_EVENT_TIMED_OUT, DLOCK_STATS_MULTILOCK,
                         "st:multi:0"),
            1);
  ASSERT_EQ(rec_count_of(rec, DLOCK_EVENT_RELEASED, DLOCK_STATS_MULTILOCK,
                         "st:multi:0"),
            1);
  ASSERT_EQ(
      rec_count_of(rec, DLOCK_EVENT_ACQUIRED, DLOCK_STATS_REDLOCK, "st:red"),
      1);
  ASSERT_EQ(
      rec_count_of(rec, DLOCK_EVENT_RELEASED, DLOCK_STATS_REDLOCK, "st:red"),
      1);
  ASSERT_EQ(rec_count_of(rec, DLOCK_EVENT_ACQUIRED, DLOCK_STATS_LOCK, "st:"),
            0);
  ASSERT_EQ(rec_count_of(rec, DLOCK_EVENT_RELEASED, DLOCK_STATS_LOCK, "st:"),
            0);

  dlock_free(multi);
  dlock_free(red);
  dlock_free(busy);
  dlock_client_close(b);
  for (int i = 0; i < NODES; i++) {
    dlock_free(part[i]);
    dlock_free(node[i]);
    dlock_client_close(c[i]);
    rp_free(s[i]);
  }
  rec_free(rec);
}

/* ---- the pub/sub connection's reconnect ---------------------------------- */

/* Redis restarted under a client whose pub/sub connection was in use: it
 * is made again, counted apart from the command connection's, and told
 * once per reconnect. */
TEST(stats_pubsub_reconnect) {
  rp_server_t *s = lu_server(0);
  recorder *rec = rec_new();
  ASSERT_NOT_NULL(rec);
  dlock_client_t *a = recorded_client(s, rec), *b = lu_client(s);
  dlock_t *la = lu_get(a, "st:psub"), *lb = lu_get(b, "st:psub");
  /* A wait in vain: a's pub/sub connection subscribes. */
  ASSERT_DLOCK_OK(dlock_lock(lb, 60000));
  ASSERT_DLOCK_ERR(dlock_trylock(la, 100, 10000), DLOCK_ETIMEDOUT);
  ASSERT_EQ(stats_of(a).pubsub_reconnects, 0);
  ASSERT_EQ(rp_restart(s), 0);
  /* The restarted server forgot the lock (b's hold is lost): b takes
   * another, and a waits for it, which needs its pub/sub connection
   * back. */
  dlock_t *la2 = lu_get(a, "st:psub2"), *lb2 = lu_get(b, "st:psub2");
  ASSERT_DLOCK_OK(dlock_lock(lb2, 60000));
  ASSERT_DLOCK_ERR(dlock_trylock(la2, 100, 10000), DLOCK_ETIMEDOUT);
  ASSERT_GE(WAIT_STAT(a, pubsub_reconnects, 1, 20000), 1);
  dlock_stats_t st = stats_of(a);
  ASSERT_EQ(rec_count(rec, DLOCK_EVENT_PUBSUB_RECONNECT), st.pubsub_reconnects);
  ASSERT_EQ(rec_count(rec, DLOCK_EVENT_RECONNECT), st.reconnects);
  ASSERT_EQ(st.timed_out, 2);
  ASSERT_DLOCK_ERR(dlock_unlock(lb), DLOCK_ELOST);
  ASSERT_DLOCK_OK(dlock_unlock(lb2));
  dlock_free(la2);
  dlock_free(lb2);
  dlock_free(la);
  dlock_free(lb);
  dlock_client_close(a);
  dlock_client_close(b);
  rp_free(s);
  rec_free(rec);
}

/* ---- waits, wake-ups and the contended names ---------------------------- */

typedef struct waiter_arg {
  dlock_t *l;
  int rc;
} waiter_arg;

static void *wait_for_lock(void *p) {
  waiter_arg *x = p;
  x->rc = dlock_trylock(x->l, 60000, 10000);
  if (x->rc == 0)
    x->rc = dlock_unlock(x->l);
  return NULL;
}

/* A waiter woken by another client's release: its wait counts once, with
 * the message that woke it, and it ends acquired. */
TEST(stats_count_waits_and_wakeups) {
  rp_server_t *s = lu_server(1);
  dlock_client_t *a = lu_client(s), *b = lu_client(s);
  dlock_t *la = lu_get(a, "st:wake"), *lb = lu_get(b, "st:wake");
  ASSERT_DLOCK_OK(dlock_lock(lb, 60000));
  waiter_arg x = {la, -1};
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, wait_for_lock, &x), 0);
  /* The waiter is subscribed and asleep once the channel has a listener. */
  int64_t until = lu_now_ms() + 20000;
  for (;;) {
    redisReply *r = rp_cmd(s, "PUBSUB NUMSUB redisson_lock__channel:{st:wake}");
    int subs = r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
               r->element[1]->integer > 0;
    freeReplyObject(r);
    if (subs || lu_now_ms() > until)
      break;
    lu_sleep_ms(20);
  }
  lu_sleep_ms(100);
  ASSERT_DLOCK_OK(dlock_unlock(lb));
  pthread_join(t, NULL);
  ASSERT_DLOCK_OK(x.rc);
  dlock_stats_t st = stats_of(a);
  ASSERT_EQ(st.acquired, 1);
  ASSERT_EQ(st.waits, 1);
  ASSERT_EQ(st.wait.count, 1);
  ASSERT_GE(st.messages, 1);
  ASSERT_GE(st.wakeups, 1);
  ASSERT_EQ(st.ntop, 1);
  ASSERT_EQ(st.top[0].waits, 1);
  ASSERT_EQ(st.top[0].timeouts, 0);
  /* b never waited. */
  ASSERT_EQ(stats_of(b).waits, 0);
  ASSERT_EQ(stats_of(b).ntop, 0);
  dlock_free(la);
  dlock_free(lb);
  dlock_client_close(a);
  dlock_client_close(b);
  rp_free(s);
}

/* More contended names than the table holds: the one waited on most is
 * listed first with its exact count, and the table stays bounded. */
TEST(stats_top_names_bounded_and_ranked) {
  rp_server_t *s = lu_server(1);
  dlock_options_t o;
  lu_options(&o, s);
  dlock_client_t *a = lu_client_opts(&o), *b = lu_client(s);
  enum { NAMES = DLOCK_STATS_TOP + 8 };
  dlock_t *held[NAMES], *tried[NAMES];
  for (int i = 0; i < NAMES; i++) {
    char name[32];
    snprintf(name, sizeof(name), "st:top:%d", i);
    held[i] = lu_get(b, name);
    tried[i] = lu_get(a, name);
    ASSERT_DLOCK_OK(dlock_lock(held[i], 60000));
  }
  /* "st:top:0" is waited on 6 times; every other name once. */
  for (int k = 0; k < 6; k++)
    ASSERT_DLOCK_ERR(dlock_trylock(tried[0], 20, 1000), DLOCK_ETIMEDOUT);
  for (int i = 1; i < NAMES; i++)
    ASSERT_DLOCK_ERR(dlock_trylock(tried[i], 20, 1000), DLOCK_ETIMEDOUT);
  dlock_stats_t st = stats_of(a);
  ASSERT_EQ(st.ntop, DLOCK_STATS_TOP);
  ASSERT_STR_EQ(st.top[0].name, "st:top:0");
  ASSERT_EQ(st.top[0].waits, 6);
  ASSERT_EQ(st.top[0].timeouts, 6);
  ASSERT_EQ(st.timed_out, NAMES - 1 + 6);
  for (size_t i = 1; i < st.ntop; i++)
    ASSERT_LE(st.top[i].waits, st.top[i - 1].waits);
  for (int i = 0; i < NAMES; i++) {
    dlock_free(tried[i]);
    ASSERT_DLOCK_OK(dlock_unlock(held[i]));
    dlock_free(held[i]);
  }
  dlock_client_close(a);
  dlock_client_close(b);
  rp_free(s);
}

/* Every single-lock kind is counted alike: one acquisition, one release
 * and one hold each. */
TEST(stats_count_every_single_kind) {
  rp_server_t *s = lu_server(1);
  dlock_client_t *c = lu_client(s);
  const dlock_kind_t kinds[] = {DLOCK_REENTRANT, DLOCK_FAIR, DLOCK_SPIN,
                                DLOCK_READ, DLOCK_WRITE};
  enum { NKINDS = sizeof(kinds) / sizeof(kinds[0]) };
  for (int i = 0; i < NKINDS; i++) {
    char name[32];
    snprintf(name, sizeof(name), "st:kind:%d", i);
    dlock_t *l = NULL;
    ASSERT_DLOCK_OK(dlock_get_kind(c, kinds[i], name, strlen(name), &l));
    ASSERT_DLOCK_OK(dlock_trylock(l, 1000, 10000));
    ASSERT_DLOCK_OK(dlock_unlock(l));
    dlock_free(l);
  }
  dlock_stats_t st = stats_of(c);
  ASSERT_EQ(st.acquired, NKINDS);
  ASSERT_EQ(st.released, NKINDS);
  ASSERT_EQ(st.unlocks, NKINDS);
  ASSERT_EQ(st.hold.count, NKINDS);
  ASSERT_EQ(st.acquire.count, NKINDS);
  ASSERT_EQ(st.waits, 0);
  dlock_client_close(c);
  rp_free(s);
}

/* ---- off, old callers, the text ------------------------------------------ */

TEST(stats_off_counts_nothing) {
  rp_server_t *s = lu_server(1);
  dlock_options_t o;
  lu_options(&o, s);
  o.stats_off = 1;
  dlock_client_t *c = lu_client_opts(&o);
  dlock_t *l = lu_get(c, "st:off");
  ASSERT_DLOCK_OK(dlock_lock(l, 10000));
  ASSERT_DLOCK_OK(dlock_unlock(l));
  dlock_stats_t st = stats_of(c);
  ASSERT_EQ(st.enabled, 0);
  ASSERT_EQ(st.acquired, 0);
  ASSERT_EQ(st.commands, 0);
  ASSERT_EQ(st.acquire.count, 0);
  /* A caller built against an older, shorter struct gets only its bytes. */
  unsigned char small[offsetof(dlock_stats_t, waits) + 16];
  memset(small, 0xab, sizeof(small));
  dlock_client_stats_size(c, (dlock_stats_t *)small,
                          offsetof(dlock_stats_t, waits));
  ASSERT_EQ(small[offsetof(dlock_stats_t, waits)], 0xab);
  size_t got_size;
  memcpy(&got_size, small, sizeof(got_size));
  ASSERT_EQ(got_size, offsetof(dlock_stats_t, waits));
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/* The text has a HELP and a TYPE line for every family, cumulative
 * buckets ending at +Inf with the count, the caller's labels on every
 * sample, and a lock name escaped. (tests/prom/check.py parses it with
 * Python's prometheus_client in the plain build.) */
TEST(stats_prometheus_text_shape) {
  dlock_stats_t st;
  memset(&st, 0, sizeof(st));
  st.struct_size = sizeof(st);
  st.enabled = 1;
  st.acquired = 5;
  st.failed = 1;
  st.failed_by_code[-DLOCK_EIO] = 1;
  st.wait.count = 3;
  st.wait.buckets[3] = 2;
  st.wait.buckets[20] = 1;
  st.wait.sum_us = 1000016;
  st.wait.max_us = 1000000;
  st.ntop = 1;
  memcpy(st.top[0].name, "a\"b\\c\nd\xff", 8);
  st.top[0].name_len = 8;
  st.top[0].waits = 3;
  st.pubsub_reconnects = 9;
  st.semaphore.timed_out = 4;
  st.latch.waits = 2;
  st.redlock.acquired = 7;
  st.psem.hold.count = 1;
  st.psem.hold.buckets[5] = 1;
  size_t need = dlock_stats_format(&st, "app=\"x\"", NULL, 0);
  ASSERT_GT(need, 1000);
  char *buf = malloc(need + 1);
  ASSERT_EQ(dlock_stats_format(&st, "app=\"x\"", buf, need + 1), need);
  ASSERT_EQ(strlen(buf), need);
  ASSERT_NOT_NULL(strstr(buf, "# TYPE dlock_acquisitions_total counter\n"));
  ASSERT_NOT_NULL(strstr(buf, "dlock_acquisitions_total{kind=\"lock\","
                              "result=\"acquired\",app=\"x\"} 5\n"));
  ASSERT_NOT_NULL(strstr(buf, "dlock_acquisitions_total{kind=\"semaphore\","
                              "result=\"timed_out\",app=\"x\"} 4\n"));
  ASSERT_NOT_NULL(strstr(buf, "dlock_acquisitions_total{kind=\"redlock\","
                              "result=\"acquired\",app=\"x\"} 7\n"));
  ASSERT_NOT_NULL(
      strstr(buf, "dlock_waits_total{kind=\"latch\",app=\"x\"} 2\n"));
  ASSERT_NOT_NULL(strstr(buf, "dlock_pubsub_reconnects_total{app=\"x\"} 9\n"));
  ASSERT_NOT_NULL(
      strstr(buf, "dlock_hold_seconds_count{kind=\"psem\",app=\"x\"} 1\n"));
  /* A plain semaphore's permits and a latch are held by no one. */
  ASSERT_NULL(strstr(buf, "dlock_hold_seconds_count{kind=\"semaphore\""));
  ASSERT_NULL(strstr(buf, "dlock_hold_seconds_count{kind=\"latch\""));
  ASSERT_NOT_NULL(strstr(
      buf,
      "dlock_acquisition_errors_total{error=\"DLOCK_EIO\",app=\"x\"} 1\n"));
  ASSERT_NOT_NULL(strstr(buf, "# TYPE dlock_wait_seconds histogram\n"));
  ASSERT_NOT_NULL(strstr(buf, "dlock_wait_seconds_bucket{kind=\"lock\","
                              "le=\"8e-06\",app=\"x\"} 2\n"));
  ASSERT_NOT_NULL(strstr(buf, "dlock_wait_seconds_bucket{kind=\"lock\","
                              "le=\"+Inf\",app=\"x\"} 3\n"));
  ASSERT_NOT_NULL(
      strstr(buf, "dlock_wait_seconds_count{kind=\"lock\",app=\"x\"} 3\n"));
  ASSERT_NOT_NULL(strstr(
      buf,
      "dlock_lock_waits_total{lock=\"a\\\"b\\\\c\\nd%FF\",app=\"x\"} 3\n"));
  /* Cut short: NUL-terminated, and the length says how much was wanted. */
  char small[64];
  ASSERT_EQ(dlock_stats_format(&st, NULL, small, sizeof(small)),
            dlock_stats_format(&st, NULL, NULL, 0));
  ASSERT_EQ(strlen(small), sizeof(small) - 1);
  /* A struct from a program built before the fields at the end: they
   * are not read (rendered 0), whatever lies past its size. */
  st.struct_size = offsetof(dlock_stats_t, pubsub_reconnects);
  ASSERT_GT(dlock_stats_format(&st, NULL, buf, need + 1), 0);
  ASSERT_NOT_NULL(strstr(buf, "dlock_pubsub_reconnects_total 0\n"));
  ASSERT_NOT_NULL(strstr(buf, "dlock_acquisitions_total{kind=\"redlock\","
                              "result=\"acquired\"} 0\n"));
  ASSERT_NOT_NULL(strstr(buf, "dlock_acquisitions_total{kind=\"lock\","
                              "result=\"acquired\"} 5\n"));
  st.struct_size = sizeof(st);
  /* Quantiles read from the buckets. */
  ASSERT_EQ(dlock_histogram_quantile(&st.wait, 0.5), 8);
  ASSERT_EQ(dlock_histogram_quantile(&st.wait, 0.99), 1000000);
  ASSERT_EQ(dlock_histogram_quantile(&st.wait, 0), 8);
  free(buf);
}

/* ---- threads ---------------------------------------------------------- */

#define THREADS 16
#define ROUNDS 40

typedef struct hammer_arg {
  dlock_client_t *c;
  int i;
  int fails;
} hammer_arg;

static atomic_ulong hammer_events;

static void count_event(void *data, const dlock_event_t *e) {
  (void)data;
  /* Reads what the hook is given, so that a race on it shows under
   * TSan. */
  if (e->name != NULL && e->name_len > 0 && e->name[0] == 's')
    atomic_fetch_add(&hammer_events, 1);
}

static void *hammer(void *p) {
  hammer_arg *x = p;
  dlock_t *shared = NULL, *own = NULL;
  char name[32];
  snprintf(name, sizeof(name), "st:own:%d", x->i);
  if (dlock_get(x->c, "st:shared", &shared) != 0 ||
      dlock_get(x->c, name, &own) != 0) {
    x->fails++;
    return NULL;
  }
  for (int k = 0; k < ROUNDS; k++) {
    if (dlock_trylock(shared, 30000, 10000) != 0 || dlock_unlock(shared) != 0)
      x->fails++;
    if (dlock_lock(own, 10000) != 0 || dlock_unlock(own) != 0)
      x->fails++;
    if (k % 8 == 0) {
      dlock_stats_t st;
      dlock_client_stats(x->c, &st);
    }
  }
  dlock_free(shared);
  dlock_free(own);
  return NULL;
}

/* Sixteen threads of one client acquire a shared lock and one of their
 * own while others read the statistics: no count is lost, and each
 * acquisition and release raised its event once. */
TEST(stats_sixteen_threads) {
  rp_server_t *s = lu_server(1);
  dlock_options_t o;
  lu_options(&o, s);
  o.command_timeout_ms = 10000;
  o.on_event = count_event;
  dlock_client_t *c = lu_client_opts(&o);
  atomic_store(&hammer_events, 0);
  pthread_t t[THREADS];
  hammer_arg x[THREADS];
  for (int i = 0; i < THREADS; i++) {
    x[i] = (hammer_arg){c, i, 0};
    ASSERT_EQ(pthread_create(&t[i], NULL, hammer, &x[i]), 0);
  }
  for (int i = 0; i < THREADS; i++) {
    pthread_join(t[i], NULL);
    ASSERT_EQ(x[i].fails, 0);
  }
  dlock_stats_t st = stats_of(c);
  uint64_t total = (uint64_t)THREADS * ROUNDS * 2;
  ASSERT_EQ(st.acquired, total);
  ASSERT_EQ(st.unlocks, total);
  ASSERT_EQ(st.released, total);
  ASSERT_EQ(st.acquire.count, total);
  ASSERT_EQ(st.hold.count, total);
  ASSERT_EQ(st.timed_out + st.failed + st.refused, 0);
  ASSERT_EQ(st.wait.count, st.waits);
  /* ACQUIRED and RELEASED for each, and a WAITED for each wait. */
  ASSERT_EQ(atomic_load(&hammer_events), 2 * total + st.waits);
  dlock_client_close(c);
  rp_free(s);
}

/* ---- a Sentinel failover ------------------------------------------------- */

/* A failover is followed and told once the client has seen the new
 * master. */
TEST(stats_sentinel_failover) {
  sg_group_t *g = NULL;
  ASSERT_EQ(sg_start(NULL, &g), 0);
  recorder *rec = rec_new();
  ASSERT_NOT_NULL(rec);
  dlock_options_t o;
  dlock_options_init(&o);
  o.url = sg_url(g);
  o.connect_timeout_ms = 1000;
  o.command_timeout_ms = 2000;
  o.watchdog_timeout_ms = 10000;
  o.on_event = on_event;
  o.on_event_data = rec;
  dlock_client_t *c = lu_client_opts(&o);
  dlock_t *l = lu_get(c, "st:sentinel");
  ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));
  ASSERT_DLOCK_OK(dlock_unlock(l));
  dlock_stats_t st = stats_of(c);
  ASSERT_EQ(st.failovers, 0);
  /* Replica sync waited for the replicas on each write. */
  ASSERT_GE(st.sync_waits, 2);
  ASSERT_EQ(st.sync_shortfalls, 0);
  ASSERT_GE(sg_failover(g, 60000), 0);
  ASSERT_GE(WAIT_STAT(c, failovers, 1, 60000), 1);
  ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));
  ASSERT_DLOCK_OK(dlock_unlock(l));
  st = stats_of(c);
  ASSERT_GE(st.failovers, 1);
  ASSERT_EQ(rec_count(rec, DLOCK_EVENT_FAILOVER), st.failovers);
  ASSERT_EQ(st.acquired, 2);
  dlock_free(l);
  dlock_client_close(c);
  sg_free(g);
  rec_free(rec);
}
