/*
 * MultiLock (dlock_get_multi): all of several locks or none, on one server
 * with three names and on three servers with three clients; no deadlock
 * for overlapping sets taken in opposite orders; reentrancy; watchdog; the
 * parts of one attempt and of one release sent at once (seen at a proxy
 * that holds the requests back); exclusion across processes.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness/tcp_proxy.h"
#include "lock_util.h"

enum { N = 3 };

typedef struct mfix {
  int nsrv; /* 1 or N */
  rp_server_t *s[N];
  dlock_client_t *c[N];
  dlock_t *h[N];
  dlock_t *m;
  char names[N][64];
} mfix_t;

static rp_server_t *srv_of(mfix_t *f, int i) {
  return f->s[f->nsrv == 1 ? 0 : i];
}

/* Three servers with a client each, or one server with one client. */
static void mfix_init(mfix_t *f, int three, const char *prefix) {
  memset(f, 0, sizeof(*f));
  f->nsrv = three ? N : 1;
  for (int i = 0; i < f->nsrv; i++) {
    f->s[i] = lu_server(i % 2);
    f->c[i] = lu_client(f->s[i]);
  }
  for (int i = 0; i < N; i++) {
    snprintf(f->names[i], sizeof(f->names[i]), "%s:%c", prefix, 'a' + i);
    f->h[i] = lu_get(f->c[three ? i : 0], f->names[i]);
  }
  ASSERT_DLOCK_OK(dlock_get_multi(f->h, N, &f->m));
  ASSERT_NOT_NULL(f->m);
  ASSERT_EQ(dlock_kind(f->m), DLOCK_MULTI);
}

static void mfix_free(mfix_t *f) {
  dlock_free(f->m);
  for (int i = 0; i < N; i++)
    dlock_free(f->h[i]);
  for (int i = 0; i < f->nsrv; i++)
    dlock_client_close(f->c[i]);
  for (int i = 0; i < f->nsrv; i++)
    rp_free(f->s[i]);
}

static dlock_client_t *client_of(mfix_t *f, int i) {
  return f->c[f->nsrv == 1 ? 0 : i];
}

/* How many of the names exist on their servers. */
static int held_count(mfix_t *f) {
  int n = 0;
  for (int i = 0; i < N; i++)
    n += (int)lu_exists(srv_of(f, i), f->names[i]);
  return n;
}

/* The hold count of 'owner' in name i, from Redis. */
static int64_t raw_count(mfix_t *f, int i, uint64_t owner) {
  char field[256];
  lu_field(field, sizeof(field), client_of(f, i), owner);
  return lu_hget_num(srv_of(f, i), f->names[i], field);
}

/* ---- all or nothing ------------------------------------------------------ */

typedef struct releaser {
  rp_server_t *s;
  const char *name;
  int64_t after_ms;
} releaser_t;

/* Deletes a foreign hold after a while and announces it as an unlock. */
static void *releaser_main(void *p) {
  releaser_t *r = p;
  lu_sleep_ms(r->after_ms);
  redisContext *c = lu_connect(r->s);
  if (c == NULL)
    return NULL;
  char ch[256];
  lu_channel(ch, sizeof(ch), r->name, strlen(r->name));
  redisReply *x = redisCommand(c, "DEL %s", r->name);
  if (x)
    freeReplyObject(x);
  x = redisCommand(c, "PUBLISH %s 0", ch);
  if (x)
    freeReplyObject(x);
  redisFree(c);
  return NULL;
}

static void run_all_or_nothing(int three) {
  mfix_t f;
  mfix_init(&f, three, "mu:aon");
  /* A foreign owner holds the middle one. */
  lu_ok(rp_cmd(srv_of(&f, 1), "HSET %s foreign:1 1", f.names[1]));
  lu_ok(rp_cmd(srv_of(&f, 1), "PEXPIRE %s 20000", f.names[1]));

  ASSERT_DLOCK_ERR(dlock_trylock(f.m, 0, 5000), DLOCK_ETIMEDOUT);
  ASSERT_EQ(lu_exists(srv_of(&f, 0), f.names[0]), 0);
  ASSERT_EQ(lu_exists(srv_of(&f, 2), f.names[2]), 0);

  int64_t t0 = lu_now_ms();
  ASSERT_DLOCK_ERR(dlock_trylock(f.m, 300, 5000), DLOCK_ETIMEDOUT);
  int64_t took = lu_now_ms() - t0;
  printf("gave up after %" PRId64 " ms\n", took);
  ASSERT_GE(took, 250);
  ASSERT_LT(took, 3000);
  ASSERT_EQ(lu_exists(srv_of(&f, 0), f.names[0]), 0);
  ASSERT_EQ(lu_exists(srv_of(&f, 2), f.names[2]), 0);
  ASSERT_EQ(lu_hget_num(srv_of(&f, 1), f.names[1], "foreign:1"), 1);
  ASSERT_EQ(lu_hlen(srv_of(&f, 1), f.names[1]), 1);
  for (int i = 0; i < N; i++)
    ASSERT_EQ(dlock_is_held(f.h[i]), 0);
  ASSERT_EQ(dlock_is_held(f.m), 0);
  ASSERT_DLOCK_ERR(dlock_unlock(f.m), DLOCK_ENOTHELD);

  /* Released during the wait: the MultiLock gets all three in time. */
  releaser_t r = {srv_of(&f, 1), f.names[1], 300};
  pthread_t th;
  ASSERT_EQ(pthread_create(&th, NULL, releaser_main, &r), 0);
  t0 = lu_now_ms();
  ASSERT_DLOCK_OK(dlock_trylock(f.m, 5000, 5000));
  took = lu_now_ms() - t0;
  ASSERT_EQ(pthread_join(th, NULL), 0);
  printf("acquired %" PRId64 " ms after asking (foreign hold gone at 300)\n",
         took);
  ASSERT_GE(took, 250);
  ASSERT_LT(took, 3000);
  ASSERT_EQ(held_count(&f), N);
  for (int i = 0; i < N; i++)
    ASSERT_EQ(raw_count(&f, i, dlock_self()), 1);
  ASSERT_DLOCK_OK(dlock_unlock(f.m));
  ASSERT_EQ(held_count(&f), 0);
  mfix_free(&f);
}

TEST(all_or_nothing_one_server) { run_all_or_nothing(0); }

TEST(all_or_nothing_three_servers) { run_all_or_nothing(1); }

/* ---- success takes all, unlock releases all ------------------------------ */

static void run_take_all(int three) {
  mfix_t f;
  mfix_init(&f, three, "mu:all");
  uint64_t me = dlock_self();
  ASSERT_EQ(dlock_is_locked(f.m), 0);
  ASSERT_DLOCK_OK(dlock_lock(f.m, 5000));
  ASSERT_EQ(held_count(&f), N);
  for (int i = 0; i < N; i++) {
    ASSERT_EQ(raw_count(&f, i, me), 1);
    ASSERT_EQ(lu_hlen(srv_of(&f, i), f.names[i]), 1);
    int64_t pttl = lu_pttl(srv_of(&f, i), f.names[i]);
    ASSERT_GT(pttl, 3000);
    ASSERT_LE(pttl, 5000);
    ASSERT_EQ(dlock_is_held(f.h[i]), 1);
  }
  ASSERT_EQ(dlock_is_held(f.m), 1);
  ASSERT_EQ(dlock_is_locked(f.m), 1);
  /* Another owner is refused, and takes nothing. */
  uint64_t other = dlock_owner_new();
  ASSERT_DLOCK_ERR(dlock_trylock_as(f.m, other, 0, 5000), DLOCK_ETIMEDOUT);
  for (int i = 0; i < N; i++)
    ASSERT_EQ(raw_count(&f, i, other), -1);
  ASSERT_DLOCK_OK(dlock_unlock(f.m));
  ASSERT_EQ(held_count(&f), 0);
  ASSERT_EQ(dlock_is_held(f.m), 0);
  ASSERT_DLOCK_ERR(dlock_unlock(f.m), DLOCK_ENOTHELD);
  /* Now the other owner gets it. */
  ASSERT_DLOCK_OK(dlock_trylock_as(f.m, other, 0, 5000));
  ASSERT_EQ(held_count(&f), N);
  ASSERT_DLOCK_OK(dlock_unlock_as(f.m, other));
  ASSERT_EQ(held_count(&f), 0);
  mfix_free(&f);
}

TEST(take_all_release_all_one_server) { run_take_all(0); }

TEST(take_all_release_all_three_servers) { run_take_all(1); }

/* ---- opposite orders ----------------------------------------------------- */

typedef struct order_arg {
  dlock_t *m;
  int iter;
  atomic_int *inside;
  atomic_int *overlaps;
  int done;
  int rc;
} order_arg_t;

static void *order_main(void *p) {
  order_arg_t *a = p;
  for (int i = 0; i < a->iter; i++) {
    a->rc = dlock_lock(a->m, 5000);
    if (a->rc)
      return NULL;
    if (atomic_fetch_add(a->inside, 1) != 0)
      atomic_fetch_add(a->overlaps, 1);
    atomic_fetch_sub(a->inside, 1);
    a->rc = dlock_unlock(a->m);
    if (a->rc)
      return NULL;
    a->done++;
  }
  return NULL;
}

static void run_opposite_orders(int three) {
  enum { ITER = 50 };
  mfix_t f;
  mfix_init(&f, three, "mu:ord");
  /* (A, B) and (B, A), over the same handles. */
  dlock_t *ab[2] = {f.h[0], f.h[1]}, *ba[2] = {f.h[1], f.h[0]};
  dlock_t *m1 = NULL, *m2 = NULL;
  ASSERT_DLOCK_OK(dlock_get_multi(ab, 2, &m1));
  ASSERT_DLOCK_OK(dlock_get_multi(ba, 2, &m2));
  atomic_int inside, overlaps;
  atomic_init(&inside, 0);
  atomic_init(&overlaps, 0);
  order_arg_t a1 = {m1, ITER, &inside, &overlaps, 0, 0};
  order_arg_t a2 = {m2, ITER, &inside, &overlaps, 0, 0};
  pthread_t t1, t2;
  int64_t t0 = lu_now_ms();
  ASSERT_EQ(pthread_create(&t1, NULL, order_main, &a1), 0);
  ASSERT_EQ(pthread_create(&t2, NULL, order_main, &a2), 0);
  ASSERT_EQ(pthread_join(t1, NULL), 0);
  ASSERT_EQ(pthread_join(t2, NULL), 0);
  printf("2 x %d iterations in opposite orders: %" PRId64 " ms\n", (int)ITER,
         lu_now_ms() - t0);
  ASSERT_DLOCK_OK(a1.rc);
  ASSERT_DLOCK_OK(a2.rc);
  ASSERT_EQ(a1.done, ITER);
  ASSERT_EQ(a2.done, ITER);
  ASSERT_EQ(atomic_load(&overlaps), 0);
  ASSERT_EQ(held_count(&f), 0);
  dlock_free(m1);
  dlock_free(m2);
  mfix_free(&f);
}

TEST(opposite_orders_no_deadlock_one_server) { run_opposite_orders(0); }

TEST(opposite_orders_no_deadlock_three_servers) { run_opposite_orders(1); }

/* Three threads over rotating triples (A,B,C), (B,C,A), (C,A,B). */
TEST(rotating_triples_no_deadlock) {
  enum { ITER = 30 };
  mfix_t f;
  mfix_init(&f, 1, "mu:rot");
  dlock_t *m[3] = {NULL, NULL, NULL};
  for (int k = 0; k < 3; k++) {
    dlock_t *set[3] = {f.h[k], f.h[(k + 1) % 3], f.h[(k + 2) % 3]};
    ASSERT_DLOCK_OK(dlock_get_multi(set, 3, &m[k]));
  }
  atomic_int inside, overlaps;
  atomic_init(&inside, 0);
  atomic_init(&overlaps, 0);
  order_arg_t a[3];
  pthread_t t[3];
  int64_t t0 = lu_now_ms();
  for (int k = 0; k < 3; k++) {
    a[k] = (order_arg_t){m[k], ITER, &inside, &overlaps, 0, 0};
    ASSERT_EQ(pthread_create(&t[k], NULL, order_main, &a[k]), 0);
  }
  for (int k = 0; k < 3; k++)
    ASSERT_EQ(pthread_join(t[k], NULL), 0);
  printf("3 x %d rotating triples: %" PRId64 " ms\n", (int)ITER,
         lu_now_ms() - t0);
  for (int k = 0; k < 3; k++) {
    ASSERT_DLOCK_OK(a[k].rc);
    ASSERT_EQ(a[k].done, ITER);
  }
  ASSERT_EQ(atomic_load(&overlaps), 0);
  ASSERT_EQ(held_count(&f), 0);
  for (int k = 0; k < 3; k++)
    dlock_free(m[k]);
  mfix_free(&f);
}

/* ---- reentrancy ---------------------------------------------------------- */

static void run_reentrancy(int three) {
  mfix_t f;
  mfix_init(&f, three, "mu:re");
  uint64_t me = dlock_self();
  ASSERT_DLOCK_OK(dlock_lock(f.m, 5000));
  ASSERT_DLOCK_OK(dlock_trylock(f.m, 0, 5000));
  for (int i = 0; i < N; i++) {
    ASSERT_EQ(raw_count(&f, i, me), 2);
    ASSERT_EQ(dlock_hold_count(f.h[i]), 2);
  }
  ASSERT_DLOCK_OK(dlock_unlock(f.m));
  ASSERT_EQ(held_count(&f), N);
  for (int i = 0; i < N; i++)
    ASSERT_EQ(raw_count(&f, i, me), 1);
  ASSERT_DLOCK_OK(dlock_unlock(f.m));
  ASSERT_EQ(held_count(&f), 0);
  ASSERT_DLOCK_ERR(dlock_unlock(f.m), DLOCK_ENOTHELD);
  /* A member taken on its own first: the MultiLock reenters it. */
  ASSERT_DLOCK_OK(dlock_lock(f.h[1], 5000));
  ASSERT_DLOCK_OK(dlock_trylock(f.m, 0, 5000));
  ASSERT_EQ(raw_count(&f, 1, me), 2);
  ASSERT_EQ(raw_count(&f, 0, me), 1);
  ASSERT_DLOCK_OK(dlock_unlock(f.m));
  ASSERT_EQ(raw_count(&f, 1, me), 1);
  ASSERT_EQ(held_count(&f), 1);
  ASSERT_DLOCK_OK(dlock_unlock(f.h[1]));
  ASSERT_EQ(held_count(&f), 0);
  mfix_free(&f);
}

TEST(reentrancy_one_server) { run_reentrancy(0); }

TEST(reentrancy_three_servers) { run_reentrancy(1); }

/* ---- watchdog ------------------------------------------------------------ */

static void run_watchdog(int three) {
  mfix_t f;
  mfix_init(&f, three, "mu:wd"); /* watchdog_timeout_ms 600 */
  ASSERT_DLOCK_OK(dlock_lock(f.m, DLOCK_WATCHDOG));
  for (int i = 0; i < N; i++) {
    int64_t p = lu_pttl(srv_of(&f, i), f.names[i]);
    ASSERT_GT(p, 0);
    ASSERT_LE(p, 600);
  }
  for (int k = 0; k < 8; k++) { /* 2 s, more than three leases */
    lu_sleep_ms(250);
    for (int i = 0; i < N; i++)
      ASSERT_GT(lu_pttl(srv_of(&f, i), f.names[i]), 0);
  }
  ASSERT_EQ(dlock_is_held(f.m), 1);
  ASSERT_DLOCK_OK(dlock_unlock(f.m));
  ASSERT_EQ(held_count(&f), 0);
  lu_sleep_ms(700);
  ASSERT_EQ(held_count(&f), 0);
  mfix_free(&f);
}

TEST(watchdog_one_server) { run_watchdog(0); }

TEST(watchdog_three_servers) { run_watchdog(1); }

/* A member lost while the MultiLock is held is reported at unlock. */
TEST(lost_member_reported) {
  mfix_t f;
  mfix_init(&f, 1, "mu:lost");
  ASSERT_DLOCK_OK(dlock_lock(f.m, 10000));
  lu_ok(rp_cmd(srv_of(&f, 2), "DEL %s", f.names[2]));
  ASSERT_DLOCK_ERR(dlock_unlock(f.m), DLOCK_ELOST);
  /* The others were released all the same. */
  ASSERT_EQ(held_count(&f), 0);
  mfix_free(&f);
}

/* ---- members of other kinds ---------------------------------------------- */

TEST(mixed_kinds) {
  rp_server_t *s = lu_server(0);
  dlock_client_t *c1 = lu_client(s), *c2 = lu_client(s);
  dlock_t *re = lu_get(c1, "mu:k:re");
  dlock_t *fair = NULL, *rd = NULL, *wr = NULL, *spin = NULL;
  ASSERT_DLOCK_OK(dlock_get_fair(c2, "mu:k:fair", &fair));
  ASSERT_DLOCK_OK(dlock_get_rw(c1, "mu:k:rw", &rd, &wr));
  ASSERT_DLOCK_OK(dlock_get_spin(c2, "mu:k:spin", &spin));
  dlock_t *set[4] = {re, fair, wr, spin};
  dlock_t *m = NULL;
  ASSERT_DLOCK_OK(dlock_get_multi(set, 4, &m));
  uint64_t me = dlock_self();
  char f1[256], f2[256], wf[256], mode[32];
  lu_field(f1, sizeof(f1), c1, me);
  lu_field(f2, sizeof(f2), c2, me);
  int wn = snprintf(wf, sizeof(wf), "%s:write", f1);
  ASSERT(wn > 0 && (size_t)wn < sizeof(wf));

  ASSERT_DLOCK_OK(dlock_lock(m, 5000));
  ASSERT_EQ(lu_hget_num(s, "mu:k:re", f1), 1);
  ASSERT_EQ(lu_hget_num(s, "mu:k:fair", f2), 1);
  ASSERT_EQ(lu_hget_num(s, "mu:k:rw", wf), 1);
  redisReply *r = rp_cmd(s, "HGET mu:k:rw mode");
  ASSERT_NOT_NULL(r);
  snprintf(mode, sizeof(mode), "%s", r->str ? r->str : "");
  freeReplyObject(r);
  ASSERT_STR_EQ(mode, "write");
  ASSERT_EQ(lu_hget_num(s, "mu:k:spin", f2), 1);
  /* The write member excludes readers. */
  ASSERT_DLOCK_ERR(dlock_trylock_as(rd, dlock_owner_new(), 0, 5000),
                   DLOCK_ETIMEDOUT);
  ASSERT_DLOCK_OK(dlock_unlock(m));
  ASSERT_EQ(lu_exists(s, "mu:k:re"), 0);
  ASSERT_EQ(lu_exists(s, "mu:k:fair"), 0);
  ASSERT_EQ(lu_exists(s, "mu:k:rw"), 0);
  ASSERT_EQ(lu_exists(s, "mu:k:spin"), 0);

  /* A composite inside a MultiLock is refused. */
  dlock_t *bad[2] = {re, m};
  dlock_t *mm = NULL;
  ASSERT_DLOCK_ERR(dlock_get_multi(bad, 2, &mm), DLOCK_EINVAL);
  dlock_free(m);
  dlock_free(re);
  dlock_free(fair);
  dlock_free(rd);
  dlock_free(wr);
  dlock_free(spin);
  dlock_client_close(c1);
  dlock_client_close(c2);
  rp_free(s);
}

/* ---- parts sent at once -------------------------------------------------- */

enum { WIDE = 8 };

typedef struct wide {
  rp_server_t *s;
  tp_proxy_t *px;
  dlock_client_t *c;
  dlock_t *h[WIDE];
  dlock_t *m;
  char names[WIDE][32];
} wide_t;

/* Eight names on one server, reached through a proxy; the command timeout
 * is long, as the proxy holds requests back for a while. */
static void wide_init(wide_t *w, const char *prefix) {
  memset(w, 0, sizeof(*w));
  w->s = lu_server(0);
  w->px = tp_start(rp_port(w->s));
  dlock_options_t o;
  dlock_options_init(&o);
  o.url = tp_url(w->px);
  o.command_timeout_ms = 60000;
  w->c = lu_client_opts(&o);
  for (int i = 0; i < WIDE; i++) {
    snprintf(w->names[i], sizeof(w->names[i]), "%s:%d", prefix, i);
    w->h[i] = lu_get(w->c, w->names[i]);
  }
  ASSERT_DLOCK_OK(dlock_get_multi(w->h, WIDE, &w->m));
}

static void wide_free(wide_t *w) {
  dlock_free(w->m);
  for (int i = 0; i < WIDE; i++)
    dlock_free(w->h[i]);
  dlock_client_close(w->c);
  tp_free(w->px);
  rp_free(w->s);
}

typedef struct wide_call {
  dlock_t *m;
  int unlock; /* 0: dlock_trylock(m, 0, 60000), 1: dlock_unlock */
  uint64_t owner;
  atomic_int done;
  int rc;
} wide_call_t;

static void *wide_call_main(void *p) {
  wide_call_t *a = p;
  a->rc = a->unlock ? dlock_unlock_as(a->m, a->owner)
                    : dlock_trylock_as(a->m, a->owner, 0, 60000);
  atomic_store(&a->done, 1);
  return NULL;
}

/*
 * Runs one call on the MultiLock while the proxy holds every request back,
 * and returns how many script calls the client put on the wire before any
 * reply could come: all of the parts' when they are sent at once, one when
 * they go one after the other. Waits (generously) for 'want' of them, then
 * lets them through and checks the call's result ('expect').
 */
static int held_back_calls(wide_t *w, int unlock, uint64_t owner, int want,
                           int expect) {
  wide_call_t a = {w->m, unlock, owner, 0, 0};
  atomic_init(&a.done, 0);
  tp_hold(w->px, 1);
  pthread_t th;
  ASSERT_EQ(pthread_create(&th, NULL, wide_call_main, &a), 0);
  int seen = 0;
  for (int64_t t0 = lu_now_ms(); lu_now_ms() - t0 < 15000; lu_sleep_ms(5))
    if ((seen = tp_count_to_server(w->px, "EVALSHA")) >= want)
      break;
  /* Nothing reached the server, so the caller still waits. */
  ASSERT_EQ(atomic_load(&a.done), 0);
  tp_hold(w->px, 0);
  ASSERT_EQ(pthread_join(th, NULL), 0);
  ASSERT_EQ(a.rc, expect);
  return seen;
}

/* The eight acquisition scripts of one attempt, and the eight release
 * scripts of one unlock, all travel before the first reply: one round
 * trip each instead of eight. So does a reentrant acquisition. The server
 * ran each script once per part (no part was sent twice). */
TEST(parts_sent_at_once_one_server) {
  wide_t w;
  wide_init(&w, "mu:wide");
  uint64_t me = dlock_owner_new();
  /* The scripts are loaded by the first use (EVAL after NOSCRIPT). */
  ASSERT_DLOCK_OK(dlock_trylock_as(w.m, me, 0, 60000));
  ASSERT_DLOCK_OK(dlock_unlock_as(w.m, me));

  int64_t calls0 = lu_cmd_calls(w.s, "evalsha");
  ASSERT_EQ(held_back_calls(&w, 0, me, WIDE, 0), WIDE);
  ASSERT_EQ(lu_cmd_calls(w.s, "evalsha") - calls0, WIDE);
  char field[256];
  lu_field(field, sizeof(field), w.c, me);
  for (int i = 0; i < WIDE; i++)
    ASSERT_EQ(lu_hget_num(w.s, w.names[i], field), 1);
  ASSERT_EQ(dlock_is_held_as(w.m, me), 1);

  /* Reentrant: the eight again at once, each count now 2. */
  ASSERT_EQ(held_back_calls(&w, 0, me, WIDE, 0), WIDE);
  for (int i = 0; i < WIDE; i++)
    ASSERT_EQ(lu_hget_num(w.s, w.names[i], field), 2);

  /* Two unlocks, each sending the eight releases at once. */
  ASSERT_EQ(held_back_calls(&w, 1, me, WIDE, 0), WIDE);
  for (int i = 0; i < WIDE; i++)
    ASSERT_EQ(lu_hget_num(w.s, w.names[i], field), 1);
  int64_t calls1 = lu_cmd_calls(w.s, "evalsha");
  ASSERT_EQ(held_back_calls(&w, 1, me, WIDE, 0), WIDE);
  ASSERT_EQ(lu_cmd_calls(w.s, "evalsha") - calls1, WIDE);
  for (int i = 0; i < WIDE; i++)
    ASSERT_EQ(lu_exists(w.s, w.names[i]), 0);
  ASSERT_DLOCK_ERR(dlock_unlock_as(w.m, me), DLOCK_ENOTHELD);
  wide_free(&w);
}

/* One part taken by another owner: the attempt still sends all eight at
 * once (where parts taken one after the other would stop at the taken
 * one), and gives back the seven it got, leaving nothing behind. */
TEST(parts_sent_at_once_busy_part_gives_back) {
  wide_t w;
  wide_init(&w, "mu:wbusy");
  uint64_t me = dlock_owner_new(), other = dlock_owner_new();
  ASSERT_DLOCK_OK(dlock_trylock_as(w.m, me, 0, 60000));
  ASSERT_DLOCK_OK(dlock_unlock_as(w.m, me));
  ASSERT_DLOCK_OK(dlock_trylock_as(w.h[5], other, 0, 60000));
  ASSERT_DLOCK_ERR(dlock_trylock_as(w.m, me, 0, 60000), DLOCK_ETIMEDOUT);
  ASSERT_NOT_NULL(strstr(dlock_last_error(), w.names[5]));
  ASSERT_EQ(held_back_calls(&w, 0, me, WIDE, DLOCK_ETIMEDOUT), WIDE);
  for (int i = 0; i < WIDE; i++)
    ASSERT_EQ(lu_exists(w.s, w.names[i]), i == 5);
  ASSERT_EQ(dlock_is_held_as(w.m, me), 0);
  /* With a wait, it is taken once the other owner lets go. */
  ASSERT_DLOCK_OK(dlock_unlock_as(w.h[5], other));
  ASSERT_DLOCK_OK(dlock_trylock_as(w.m, me, 5000, 60000));
  ASSERT_DLOCK_OK(dlock_unlock_as(w.m, me));
  for (int i = 0; i < WIDE; i++)
    ASSERT_EQ(lu_exists(w.s, w.names[i]), 0);
  wide_free(&w);
}

/* ---- exclusion across processes ------------------------------------------ */

/* In a forked child: its own client, a MultiLock over the eight names in
 * an order of its own (rotated by 'k'), taken twice (reentrant) and
 * released twice 'iter' times, checking that nobody else is inside.
 * Exit status 0, or a small code telling what failed. */
static int multi_child(const rp_server_t *s, int k, int iter) {
  dlock_options_t o;
  lu_options(&o, s);
  dlock_client_t *c = NULL;
  if (dlock_client_open(&o, &c) != 0)
    return 10;
  dlock_t *h[WIDE], *m = NULL;
  for (int i = 0; i < WIDE; i++) {
    char name[32];
    snprintf(name, sizeof(name), "mu:xp:%d", (i + k) % WIDE);
    if (dlock_get(c, name, &h[i]) != 0)
      return 11;
  }
  if (dlock_get_multi(h, WIDE, &m) != 0)
    return 11;
  redisContext *r = lu_connect(s);
  if (r == NULL)
    return 12;
  int code = 0;
  for (int i = 0; i < iter && code == 0; i++) {
    int rc = dlock_lock(m, i % 2 ? DLOCK_WATCHDOG : 20000);
    if (rc == 0)
      rc = dlock_trylock(m, 0, 20000);
    if (rc != 0) {
      fprintf(stderr, "child lock: %s %s\n", dlock_err_name(rc),
              dlock_last_error());
      code = 13;
      break;
    }
    if (dlock_hold_count(h[3]) != 2)
      code = 17;
    /* Inside: a marker nobody else may have set, and a counter. */
    redisReply *x = redisCommand(r, "SET mu:xp:inside %d NX", k);
    if (x == NULL || x->type != REDIS_REPLY_STATUS)
      code = 14;
    if (x)
      freeReplyObject(x);
    x = redisCommand(r, "INCR mu:xp:counter");
    if (x)
      freeReplyObject(x);
    x = redisCommand(r, "DEL mu:xp:inside");
    if (x)
      freeReplyObject(x);
    if ((rc = dlock_unlock(m)) == 0 && dlock_hold_count(h[0]) != 1)
      code = 18;
    if (rc == 0)
      rc = dlock_unlock(m);
    if (rc != 0) {
      fprintf(stderr, "child unlock: %s %s\n", dlock_err_name(rc),
              dlock_last_error());
      code = 15;
    }
  }
  redisFree(r);
  dlock_free(m);
  for (int i = 0; i < WIDE; i++)
    dlock_free(h[i]);
  dlock_client_close(c);
  return code;
}

TEST(parallel_parts_exclusion_across_processes) {
  enum { PROCS = 3, ITER = 100 };
  rp_server_t *s = lu_server(0);
  pid_t pids[PROCS];
  for (int i = 0; i < PROCS; i++) {
    pid_t p = fork();
    ASSERT_GE(p, 0);
    if (p == 0)
      _exit(multi_child(s, i * 3, ITER));
    pids[i] = p;
  }
  int64_t t0 = lu_now_ms();
  for (int i = 0; i < PROCS; i++) {
    int st = 0;
    ASSERT_EQ(waitpid(pids[i], &st, 0), pids[i]);
    ASSERT(WIFEXITED(st));
    ASSERT_EQ(WEXITSTATUS(st), 0);
  }
  printf("%d processes x %d reentrant MultiLocks of %d: %" PRId64 " ms\n",
         PROCS, ITER, WIDE, lu_now_ms() - t0);
  ASSERT_EQ(lu_get_num_n(s, "mu:xp:counter", 13), PROCS * ITER);
  for (int i = 0; i < WIDE; i++) {
    char name[32];
    snprintf(name, sizeof(name), "mu:xp:%d", i);
    ASSERT_EQ(lu_exists(s, name), 0);
  }
  rp_free(s);
}

/* A name given twice (the same handle, or two handles of one client on one
 * name) is taken twice, reentrantly, and released twice: its hold count in
 * Redis is 2 while held, as the client counts. */
TEST(repeated_part_counts_twice) {
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  dlock_t *a = lu_get(c, "mu:rep:a"), *b = lu_get(c, "mu:rep:b");
  dlock_t *a2 = lu_get(c, "mu:rep:a");
  dlock_t *set[4] = {a, b, a, a2}, *m = NULL;
  ASSERT_DLOCK_OK(dlock_get_multi(set, 4, &m));
  char field[256];
  lu_field(field, sizeof(field), c, dlock_self());
  for (int round = 0; round < 2; round++) {
    ASSERT_DLOCK_OK(dlock_lock(m, 30000));
    ASSERT_EQ(lu_hget_num(s, "mu:rep:a", field), 3);
    ASSERT_EQ(lu_hget_num(s, "mu:rep:b", field), 1);
    ASSERT_EQ(dlock_hold_count(a), 3);
    ASSERT_DLOCK_OK(dlock_unlock(m));
    ASSERT_EQ(lu_exists(s, "mu:rep:a"), 0);
    ASSERT_EQ(lu_exists(s, "mu:rep:b"), 0);
  }
  dlock_free(m);
  dlock_free(a);
  dlock_free(a2);
  dlock_free(b);
  dlock_client_close(c);
  rp_free(s);
}

/* The unlock latches of releases sent at once are deleted by later calls,
 * as a single lock's are: many lock+unlock rounds leave no more of them
 * than the last round wrote. */
TEST(parts_sent_at_once_latches_deleted) {
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  dlock_t *h[WIDE], *m = NULL;
  for (int i = 0; i < WIDE; i++) {
    char name[32];
    snprintf(name, sizeof(name), "mu:latch:%d", i);
    h[i] = lu_get(c, name);
  }
  ASSERT_DLOCK_OK(dlock_get_multi(h, WIDE, &m));
  for (int round = 0; round < 30; round++) {
    ASSERT_DLOCK_OK(dlock_lock(m, 30000));
    ASSERT_DLOCK_OK(dlock_unlock(m));
  }
  redisReply *r = rp_cmd(s, "KEYS redisson_unlock_latch:*");
  ASSERT_NOT_NULL(r);
  printf("latches left after 30 rounds of %d parts: %zu\n", (int)WIDE,
         r->elements);
  ASSERT_LE(r->elements, (size_t)WIDE);
  freeReplyObject(r);
  dlock_free(m);
  for (int i = 0; i < WIDE; i++)
    dlock_free(h[i]);
  dlock_client_close(c);
  rp_free(s);
}
