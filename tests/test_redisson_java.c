/*
 * dlock beside a Java service using Redisson, on one lock: the Redisson
 * side is tests/redisson_sim.h (Redisson's scripts and waiting, redone for
 * these tests). Each test drives a case where the two used to disagree:
 *
 *  - the fair lock's queue: Redisson chains its waiters' deadlines and
 *    takes one allowance off each at every acquisition, so dlock's entries
 *    must be chained the same way or Redisson drops a live dlock waiter;
 *  - read lock renewal: renewing a read hold must not keep another
 *    owner's read holds alive;
 *  - hand-over inside a dlock client must leave turns to a client that
 *    polls without subscribing (Redisson's RSpinLock, a tryLock() loop);
 *  - unlock latches must not outlive the unlock.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "lock_util.h"
#include "redisson_sim.h"

/* ---- fair lock: a queue shared with Redisson waiters --------------------- */

enum { MQ_MAX = 8, MQ_HOLD_MS = 30 };

typedef struct mq_shared {
  const char *name;
  atomic_int seq;
  char order[MQ_MAX + 1]; /* who acquired, in order: 'a' + index */
  int64_t acquired_ms[MQ_MAX];
  atomic_int inside, overlaps;
} mq_shared_t;

/* Added to the Java side's wall clock (see redisson_sim.h). */
static int64_t mq_skew_ms;

typedef struct mq_member {
  mq_shared_t *sh;
  int idx;
  /* A Redisson waiter (thread 'thread' of client 'id' on server 's'), or a
   * dlock waiter on handle 'l'. */
  const rp_server_t *s;
  const char *id;
  long thread;
  dlock_t *l;
  atomic_int started;
  int rc;
} mq_member_t;

static void mq_critical(mq_member_t *m) {
  mq_shared_t *sh = m->sh;
  if (atomic_fetch_add(&sh->inside, 1) != 0)
    atomic_fetch_add(&sh->overlaps, 1);
  int at = atomic_fetch_add(&sh->seq, 1);
  sh->order[at] = (char)('a' + m->idx);
  sh->acquired_ms[m->idx] = lu_now_ms();
  lu_sleep_ms(MQ_HOLD_MS);
  atomic_fetch_sub(&sh->inside, 1);
}

/* Waits as RedissonFairLock.lock() does: try; on failure subscribe to its
 * own channel and try again after each message, or after the TTL the
 * attempt returned. */
static void *mq_java_main(void *p) {
  mq_member_t *m = p;
  rs_client_t *c = rs_client_new(m->s, m->id);
  c->skew_ms = mq_skew_ms;
  char field[128], chan[512], own[700];
  rs_field(c, m->thread, field, sizeof(field));
  lu_channel(chan, sizeof(chan), m->sh->name, strlen(m->sh->name));
  snprintf(own, sizeof(own), "%s:%s", chan, field);
  atomic_store(&m->started, 1);
  int64_t ttl = rs_fair_try(c, m->sh->name, m->thread, 10000, RS_FAIR_WAIT_MS);
  redisContext *sub = NULL;
  if (ttl >= 0)
    sub = lu_subscribe(m->s, own, strlen(own));
  int64_t give_up = lu_now_ms() + 40000;
  while (ttl >= 0 && lu_now_ms() < give_up) {
    ttl = rs_fair_try(c, m->sh->name, m->thread, 10000, RS_FAIR_WAIT_MS);
    if (ttl < 0)
      break;
    char msg[64];
    int64_t nap = ttl < 5 ? 5 : ttl > 1000 ? 1000 : ttl;
    if (!lu_sub_wait(sub, nap, msg, sizeof(msg), NULL, 0)) {
      /* A timed-out read leaves the context unusable: subscribe again. */
      redisFree(sub);
      sub = lu_subscribe(m->s, own, strlen(own));
    }
  }
  if (sub)
    redisFree(sub);
  m->rc = ttl < 0 ? 0 : -1;
  if (m->rc == 0) {
    mq_critical(m);
    ASSERT_EQ(rs_fair_unlock(c, m->sh->name, m->thread, 10000), 1);
  }
  rs_client_free(c);
  return NULL;
}

static void *mq_dlock_main(void *p) {
  mq_member_t *m = p;
  atomic_store(&m->started, 1);
  m->rc = dlock_trylock(m->l, 40000, 10000);
  if (m->rc == 0) {
    mq_critical(m);
    m->rc = dlock_unlock(m->l);
  }
  return NULL;
}

static int64_t mq_llen(rp_server_t *s, const char *name) {
  char qk[512];
  lu_keyname(qk, sizeof(qk), "redisson_lock_queue", name, strlen(name));
  return lu_reply_int(rp_cmd(s, "LLEN %s", qk));
}

static void mq_wait_llen(rp_server_t *s, const char *name, int64_t n) {
  int64_t t0 = lu_now_ms();
  while (mq_llen(s, name) != n && lu_now_ms() - t0 < 5000)
    lu_sleep_ms(2);
  ASSERT_EQ(mq_llen(s, name), n);
}

/*
 * The holder ('J' Redisson, 'D' dlock) takes the fair lock, then the
 * waiters of 'queue' (one letter each, the same way) queue in that order;
 * the holder releases. They must get the lock in the order they queued,
 * one after the other, with no wait longer than a few holds between two.
 */
static void run_mixed_queue(char holder, const char *queue) {
  const char *name = "fair:mixed";
  rp_server_t *s = lu_server(0);
  dlock_options_t o;
  lu_options(&o, s);
  o.watchdog_timeout_ms = 30000;
  o.command_timeout_ms = 5000;
  o.client_id = "dlock-c";
  dlock_client_t *dc = lu_client_opts(&o);
  dlock_t *dl = NULL;
  ASSERT_DLOCK_OK(dlock_get_fair(dc, name, &dl));
  rs_client_t *jh = rs_client_new(s, "java-c");
  jh->skew_ms = mq_skew_ms;

  mq_shared_t sh;
  memset(&sh, 0, sizeof(sh));
  sh.name = name;
  if (holder == 'J')
    ASSERT_EQ(rs_fair_try(jh, name, 1, 10000, RS_FAIR_WAIT_MS), -1);
  else
    ASSERT_DLOCK_OK(dlock_trylock(dl, 0, 10000));

  int n = (int)strlen(queue);
  ASSERT_LE(n, MQ_MAX);
  mq_member_t m[MQ_MAX];
  pthread_t t[MQ_MAX];
  memset(m, 0, sizeof(m));
  for (int i = 0; i < n; i++) {
    m[i].sh = &sh;
    m[i].idx = i;
    m[i].s = s;
    m[i].id = "java-c";
    m[i].thread = 10 + i;
    m[i].l = dl;
    atomic_init(&m[i].started, 0);
    ASSERT_EQ(pthread_create(&t[i], NULL,
                             queue[i] == 'J' ? mq_java_main : mq_dlock_main,
                             &m[i]),
              0);
    /* One at a time, so the queue order is the letters' order. */
    mq_wait_llen(s, name, i + 1);
  }
  int64_t t_rel = lu_now_ms();
  if (holder == 'J')
    ASSERT_EQ(rs_fair_unlock(jh, name, 1, 10000), 1);
  else
    ASSERT_DLOCK_OK(dlock_unlock(dl));
  for (int i = 0; i < n; i++)
    ASSERT_EQ(pthread_join(t[i], NULL), 0);

  char want[MQ_MAX + 1];
  for (int i = 0; i < n; i++)
    want[i] = (char)('a' + i);
  want[n] = '\0';
  printf("holder %c, queue %s: acquisitions in order %s (queued %s);", holder,
         queue, sh.order, want);
  int64_t prev = t_rel, worst = 0;
  for (int i = 0; i < n; i++) {
    int idx = sh.order[i] - 'a';
    if (idx < 0 || idx >= n)
      continue;
    int64_t gap = sh.acquired_ms[idx] - prev;
    printf(" +%" PRId64, gap);
    worst = gap > worst ? gap : worst;
    prev = sh.acquired_ms[idx];
  }
  printf(" ms\n");
  for (int i = 0; i < n; i++)
    ASSERT_EQ(m[i].rc, 0);
  ASSERT_EQ(atomic_load(&sh.overlaps), 0);
  ASSERT_STR_EQ(sh.order, want);
  /* Each waits for the one before it (a 30 ms hold), not for a deadline
   * or a heartbeat: generous for a loaded machine, far below the 10 s a
   * dropped waiter used to wait. */
  ASSERT_LT(worst, 5000);
  ASSERT_EQ(mq_llen(s, name), 0);

  rs_client_free(jh);
  dlock_free(dl);
  dlock_client_close(dc);
  rp_free(s);
}

/* The reported case: Redisson H holds; Redisson R1, dlock D, Redisson R2
 * queue. R1's acquisition used to put D's deadline in the past, and R1's
 * unlock then dropped D and woke R2. */
TEST(fair_mixed_queue_java_dlock_java) { run_mixed_queue('J', "JDJ"); }

/* Longer mixes, with dlock waiters handed the lock by dlock releases and
 * Redisson waiters woken by them, behind a dlock holder. */
TEST(fair_mixed_queue_dlock_holder) { run_mixed_queue('D', "JDDJD"); }

TEST(fair_mixed_queue_alternating) { run_mixed_queue('J', "DJDJDJ"); }

/* Redisson's scripts get the JVM's clock, dlock's read Redis's: a skew of
 * a minute either way, far below the allowance, changes nothing. */
TEST(fair_mixed_queue_java_clock_ahead) {
  mq_skew_ms = 60000;
  run_mixed_queue('J', "JDJD");
}

TEST(fair_mixed_queue_java_clock_behind) {
  mq_skew_ms = -60000;
  run_mixed_queue('D', "JDJD");
}

/* A Redisson acquisition takes one allowance off every queued deadline: a
 * dlock waiter's deadline must stay in the future after it, as a
 * Redisson waiter's does. */
TEST(fair_dlock_deadline_survives_redisson_acquisition) {
  const char *name = "fair:chain";
  rp_server_t *s = lu_server(0);
  dlock_client_t *dc = lu_client(s);
  dlock_t *dl = NULL;
  ASSERT_DLOCK_OK(dlock_get_fair(dc, name, &dl));
  rs_client_t *j = rs_client_new(s, "java-c");
  ASSERT_EQ(rs_fair_try(j, name, 1, 10000, RS_FAIR_WAIT_MS), -1);
  ASSERT_GE(rs_fair_try(j, name, 2, 10000, RS_FAIR_WAIT_MS), 0); /* R1 */
  mq_shared_t sh;
  memset(&sh, 0, sizeof(sh));
  sh.name = name;
  mq_member_t d;
  memset(&d, 0, sizeof(d));
  d.sh = &sh;
  d.l = dl;
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, mq_dlock_main, &d), 0);
  mq_wait_llen(s, name, 2);
  ASSERT_GE(rs_fair_try(j, name, 3, 10000, RS_FAIR_WAIT_MS), 0); /* R2 */

  char tk[512], qk[512];
  lu_keyname(tk, sizeof(tk), "redisson_lock_timeout", name, strlen(name));
  lu_keyname(qk, sizeof(qk), "redisson_lock_queue", name, strlen(name));
  redisReply *r = rp_cmd(s, "ZRANGE %s 0 -1 WITHSCORES", tk);
  ASSERT_EQ(r->elements, 6);
  int64_t at[3];
  for (int i = 0; i < 3; i++)
    at[i] = strtoll(r->element[2 * i + 1]->str, NULL, 10);
  freeReplyObject(r);
  printf("deadlines R1 %" PRId64 ", D +%" PRId64 ", R2 +%" PRId64 " ms\n",
         at[0], at[1] - at[0], at[2] - at[1]);
  /* Chained: each one allowance after the one ahead. */
  ASSERT_GE(at[1] - at[0], RS_FAIR_WAIT_MS - 1000);
  ASSERT_GE(at[2] - at[1], RS_FAIR_WAIT_MS - 1000);

  /* H releases, R1 takes the lock: D's deadline is still ahead. */
  ASSERT_EQ(rs_fair_unlock(j, name, 1, 10000), 1);
  ASSERT_EQ(rs_fair_try(j, name, 2, 10000, RS_FAIR_WAIT_MS), -1);
  char dfield[128];
  r = rp_cmd(s, "LINDEX %s 0", qk);
  snprintf(dfield, sizeof(dfield), "%s", r->str);
  freeReplyObject(r);
  r = rp_cmd(s, "ZSCORE %s %s", tk, dfield);
  ASSERT_EQ(r->type, REDIS_REPLY_STRING);
  int64_t left = (int64_t)strtod(r->str, NULL) - rs_wall_ms(j);
  freeReplyObject(r);
  printf("after R1's acquisition D's deadline is %" PRId64 " ms ahead\n", left);
  ASSERT_GT(left, 60000);
  /* R1's unlock wakes D, not R2. */
  ASSERT_EQ(rs_fair_unlock(j, name, 2, 10000), 1);
  ASSERT_EQ(pthread_join(t, NULL), 0);
  ASSERT_DLOCK_OK(d.rc);
  ASSERT_EQ(rs_fair_try(j, name, 3, 10000, RS_FAIR_WAIT_MS), -1);
  ASSERT_EQ(rs_fair_unlock(j, name, 3, 10000), 1);
  rs_client_free(j);
  dlock_free(dl);
  dlock_client_close(dc);
  rp_free(s);
}

/* ---- read lock renewal ----------------------------------------------------
 */

/* A Redisson reader with a 1.5 s lease and a dlock reader renewed by the
 * watchdog: the Redisson hold must end with its lease, so that a Redisson
 * writer gets the lock as soon as the dlock reader lets go. */
TEST(read_renewal_keeps_only_own_holds) {
  const char *name = "rw:renew";
  rp_server_t *s = lu_server(0);
  dlock_options_t o;
  lu_options(&o, s);
  o.watchdog_timeout_ms = 2400; /* renewed every 800 ms */
  dlock_client_t *dc = lu_client_opts(&o);
  dlock_t *rd = NULL, *wr = NULL;
  ASSERT_DLOCK_OK(dlock_get_rw(dc, name, &rd, &wr));
  rs_client_t *j = rs_client_new(s, "java-c");

  ASSERT_EQ(rs_read_try(j, name, 1, 1500), -1);
  ASSERT_DLOCK_OK(dlock_lock(rd, DLOCK_WATCHDOG));
  char jkey[700], field[128], tag[512];
  rs_field(j, 1, field, sizeof(field));
  rs_tag(tag, sizeof(tag), name);
  snprintf(jkey, sizeof(jkey), "%s:%s:rwlock_timeout:1", tag, field);
  ASSERT_GT(lu_pttl(s, jkey), 0);

  /* Past the Redisson reader's lease, with several renewals meanwhile. */
  lu_sleep_ms(2500);
  int64_t jpttl = lu_pttl(s, jkey);
  printf("Redisson read hold's timeout key 2.5 s into a 1.5 s lease: pttl "
         "%" PRId64 "\n",
         jpttl);
  ASSERT_EQ(jpttl, -2);
  /* The dlock reader's own hold is alive. */
  ASSERT_EQ(dlock_is_held(rd), 1);

  ASSERT_DLOCK_OK(dlock_unlock(rd));
  /* No live hold is left: the Redisson writer gets the lock at once. */
  int64_t ttl = rs_write_try(j, name, 2, 5000);
  printf("Redisson writer after the dlock reader's unlock: %s (ttl %" PRId64
         ")\n",
         ttl < 0 ? "acquired" : "refused", ttl);
  ASSERT_EQ(ttl, -1);
  ASSERT_EQ(rs_write_unlock(j, name, 2, 5000), 1);
  rs_client_free(j);
  dlock_free(rd);
  dlock_free(wr);
  dlock_client_close(dc);
  rp_free(s);
}

/* And the other way: Redisson's renewal (its own holds only) leaves a dlock
 * reader's lease alone. */
TEST(read_renewal_by_redisson_keeps_only_its_holds) {
  const char *name = "rw:renew2";
  rp_server_t *s = lu_server(0);
  dlock_client_t *dc = lu_client(s);
  dlock_t *rd = NULL, *wr = NULL;
  ASSERT_DLOCK_OK(dlock_get_rw(dc, name, &rd, &wr));
  rs_client_t *j = rs_client_new(s, "java-c");
  ASSERT_EQ(rs_read_try(j, name, 1, 3000), -1);
  ASSERT_DLOCK_OK(dlock_lock(rd, 800));
  for (int i = 0; i < 6; i++) {
    lu_sleep_ms(250);
    ASSERT_EQ(rs_read_renew(j, name, 1, 3000), 1);
  }
  /* 1.5 s into an 800 ms lease: the dlock hold's timeout key is gone. */
  char dkey[700], field[128], tag[512];
  lu_field(field, sizeof(field), dc, dlock_self());
  rs_tag(tag, sizeof(tag), name);
  snprintf(dkey, sizeof(dkey), "%s:%s:rwlock_timeout:1", tag, field);
  ASSERT_EQ(lu_pttl(s, dkey), -2);
  int rc = dlock_unlock(rd);
  ASSERT(rc == 0 || rc == DLOCK_ELOST);
  ASSERT_EQ(rs_read_unlock(j, name, 1), 1);
  ASSERT_EQ(lu_exists(s, name), 0);
  rs_client_free(j);
  dlock_free(rd);
  dlock_free(wr);
  dlock_client_close(dc);
  rp_free(s);
}

/* ---- unlock latches --------------------------------------------------------
 */

/* Server time in the scripts dlock sends (EVALSHA and EVAL, INFO
 * commandstats, us; the commands a script runs are counted inside it, and
 * again on their own lines, so only the scripts' lines are added up), and
 * the number of those calls. */
static void server_usec(rp_server_t *s, int64_t *usec, int64_t *calls) {
  redisReply *r = rp_cmd(s, "INFO commandstats");
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->type, REDIS_REPLY_STRING);
  *usec = 0;
  *calls = 0;
  static const char *const scripts[] = {"cmdstat_evalsha:", "cmdstat_eval:"};
  for (int i = 0; i < 2; i++) {
    const char *p = strstr(r->str, scripts[i]);
    if (p == NULL)
      continue;
    *calls += strtoll(strstr(p, "calls=") + 6, NULL, 10);
    *usec += strtoll(strstr(p, "usec=") + 5, NULL, 10);
  }
  freeReplyObject(r);
}

static int64_t count_keys(rp_server_t *s, const char *pattern) {
  redisReply *r = rp_cmd(s, "KEYS %s", pattern);
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->type, REDIS_REPLY_ARRAY);
  int64_t n = (int64_t)r->elements;
  freeReplyObject(r);
  return n;
}

enum { LT_CLIENTS = 2, LT_THREADS = 2, LT_CYCLES = 200 };

typedef struct lt_worker {
  dlock_t *l;
  int fails;
} lt_worker_t;

static void *lt_main(void *p) {
  lt_worker_t *w = p;
  for (int i = 0; i < LT_CYCLES; i++) {
    if (dlock_lock(w->l, 5000) != 0 || dlock_unlock(w->l) != 0)
      w->fails++;
  }
  return NULL;
}

/* 800 contended lock+unlock cycles (2 clients x 2 threads x 200): the unlock
 * latches must be gone once the unlocks are answered, as Redisson deletes
 * its own, not left to expire one per unlock. */
TEST(unlock_latches_not_left_behind) {
  rp_server_t *s = lu_server(0);
  dlock_client_t *c[LT_CLIENTS];
  dlock_t *l[LT_CLIENTS];
  for (int i = 0; i < LT_CLIENTS; i++) {
    c[i] = lu_client(s);
    l[i] = lu_get(c[i], "latch:cycles");
  }
  lu_ok(rp_cmd(s, "CONFIG RESETSTAT"));
  int64_t t0 = lu_now_ms();
  lt_worker_t w[LT_CLIENTS * LT_THREADS];
  pthread_t t[LT_CLIENTS * LT_THREADS];
  memset(w, 0, sizeof(w));
  for (int i = 0; i < LT_CLIENTS * LT_THREADS; i++) {
    w[i].l = l[i % LT_CLIENTS];
    ASSERT_EQ(pthread_create(&t[i], NULL, lt_main, &w[i]), 0);
  }
  for (int i = 0; i < LT_CLIENTS * LT_THREADS; i++) {
    ASSERT_EQ(pthread_join(t[i], NULL), 0);
    ASSERT_EQ(w[i].fails, 0);
  }
  int64_t took = lu_now_ms() - t0;
  int64_t usec, calls;
  server_usec(s, &usec, &calls);
  int64_t latches = count_keys(s, "redisson_unlock_latch:*");
  int64_t cycles = LT_CLIENTS * LT_THREADS * LT_CYCLES;
  printf("%" PRId64 " lock+unlock cycles in %" PRId64 " ms: %" PRId64
         " unlock latches left, scripts %.2f us and %.2f calls per cycle on "
         "the server\n",
         cycles, took, latches, (double)usec / (double)cycles,
         (double)calls / (double)cycles);
  /* At most the latches of the last unlocks, not one per unlock. */
  ASSERT_LE(latches, LT_CLIENTS * LT_THREADS);
  for (int i = 0; i < LT_CLIENTS; i++) {
    dlock_free(l[i]);
    dlock_client_close(c[i]);
  }
  rp_free(s);
}

/* An unlock that had to be sent again keeps its latch for its lifetime: a
 * copy sent on the connection that failed may still run after the
 * retry's answer, and must find it. A later call does not delete it. */
TEST(unlock_latch_of_a_retried_unlock_is_kept) {
  rp_server_t *s = lu_server(0);
  dlock_options_t o;
  lu_options(&o, s);
  o.command_timeout_ms = 500;
  dlock_client_t *c = lu_client_opts(&o);
  dlock_t *l = lu_get(c, "latch:retry"), *other = lu_get(c, "latch:other");
  ASSERT_DLOCK_OK(dlock_lock(l, 20000));
  ASSERT_DLOCK_OK(dlock_lock(l, 20000));
  lu_ok(rp_cmd(s, "CLIENT PAUSE 800 WRITE"));
  ASSERT_DLOCK_OK(dlock_unlock(l));
  lu_sleep_ms(900);
  ASSERT_EQ(count_keys(s, "redisson_unlock_latch:{latch:retry}:*"), 1);
  /* Scripts that carry the answered latches of the client. */
  ASSERT_DLOCK_OK(dlock_lock(other, 20000));
  ASSERT_DLOCK_OK(dlock_unlock(other));
  ASSERT_DLOCK_OK(dlock_lock(other, 20000));
  ASSERT_EQ(count_keys(s, "redisson_unlock_latch:{latch:retry}:*"), 1);
  /* The first unlock of 'other' was answered at once: its latch is gone. */
  ASSERT_EQ(count_keys(s, "redisson_unlock_latch:{latch:other}:*"), 0);
  ASSERT_DLOCK_OK(dlock_unlock(other));
  ASSERT_DLOCK_OK(dlock_unlock(l));
  ASSERT_EQ(lu_exists(s, "latch:retry"), 0);
  dlock_free(l);
  dlock_free(other);
  dlock_client_close(c);
  rp_free(s);
}

/* ---- hand-over inside a client, and a peer that polls -------------------- */

enum { PS_THREADS = 3, PS_MS = 3000 };

typedef struct ps_shared {
  dlock_t *l;
  const rp_server_t *s;
  atomic_int stop;
  atomic_long dlock_acq;
  long poll_tries, poll_acq;
  int fails;
} ps_shared_t;

static void *ps_dlock_main(void *p) {
  ps_shared_t *sh = p;
  while (!atomic_load(&sh->stop)) {
    if (dlock_lock(sh->l, 5000) != 0) {
      sh->fails++;
      break;
    }
    atomic_fetch_add(&sh->dlock_acq, 1);
    lu_sleep_ms(1);
    if (dlock_unlock(sh->l) != 0)
      sh->fails++;
  }
  return NULL;
}

/* Redisson's tryLock() with no wait, in a loop with a short pause: it
 * never subscribes, so no release is announced to it. */
static void *ps_poll_main(void *p) {
  ps_shared_t *sh = p;
  rs_client_t *c = rs_client_new(sh->s, "java-poller");
  uint64_t x = 88172645463325252ULL;
  while (!atomic_load(&sh->stop)) {
    sh->poll_tries++;
    if (rs_lock_try(c, "ps:lock", 1, 5000) < 0) {
      sh->poll_acq++;
      lu_sleep_ms(1);
      ASSERT_EQ(rs_unlock(c, "ps:lock", 1, 5000), 1);
    }
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    struct timespec ts = {0, (long)(4000 + x % 2000) * 1000};
    nanosleep(&ts, NULL);
  }
  rs_client_free(c);
  return NULL;
}

/*
 * Three threads of one dlock client contend on a lock, and a Redisson
 * client polls it without subscribing. Handing the lock from thread to
 * thread inside the client must leave the poller a bounded share: before,
 * it got the lock 0 times in hundreds of tries, since the lock was never
 * free while the client's threads wanted it.
 */
TEST(handover_leaves_turns_to_a_polling_peer) {
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  ps_shared_t sh;
  memset(&sh, 0, sizeof(sh));
  sh.l = lu_get(c, "ps:lock");
  sh.s = s;
  pthread_t t[PS_THREADS], poller;
  for (int i = 0; i < PS_THREADS; i++)
    ASSERT_EQ(pthread_create(&t[i], NULL, ps_dlock_main, &sh), 0);
  ASSERT_EQ(pthread_create(&poller, NULL, ps_poll_main, &sh), 0);
  lu_sleep_ms(PS_MS);
  atomic_store(&sh.stop, 1);
  for (int i = 0; i < PS_THREADS; i++)
    ASSERT_EQ(pthread_join(t[i], NULL), 0);
  ASSERT_EQ(pthread_join(poller, NULL), 0);
  long d = atomic_load(&sh.dlock_acq);
  printf("in %d ms: dlock's %d threads %ld acquisitions, the polling peer "
         "%ld in %ld tries (%.1f%% of its tries, %.1f%% of all "
         "acquisitions)\n",
         PS_MS, PS_THREADS, d, sh.poll_acq, sh.poll_tries,
         100.0 * (double)sh.poll_acq /
             (double)(sh.poll_tries ? sh.poll_tries : 1),
         100.0 * (double)sh.poll_acq / (double)(d + sh.poll_acq));
  ASSERT_EQ(sh.fails, 0);
  ASSERT_GT(d, 0);
  /* Generous: a share of its tries, whatever the load. */
  ASSERT_GE(sh.poll_acq * 50, sh.poll_tries);
  dlock_free(sh.l);
  dlock_client_close(c);
  rp_free(s);
}
