/*
 * The async client (dlock_client_open_async) driven by a plain epoll loop
 * (loop_util.h): every verb's callback runs once, from the loop; waiters
 * are woken by the unlock message, not by the TTL; the watchdog renews
 * from the loop; close ends what is pending with DLOCK_ECANCELED and
 * leaves nothing behind; and a read-modify-write under the lock stays
 * exact while a loop and threads of another client compete for it.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "loop_util.h"

/* Unlocks through the loop and checks that it worked. */
static void unlock_ok(tl_loop *t, dlock_t *l, uint64_t owner) {
  tl_done u = {0};
  ASSERT_DLOCK_OK(dlock_unlock_async(l, owner, tl_done_cb, &u));
  tl_run_until(t, &u.calls, 10000);
  ASSERT_DLOCK_OK(u.status);
}

/* How many subscribers the server has on 'chan'. */
static int64_t numsub(rp_server_t *s, const char *chan) {
  redisReply *r = rp_cmd(s, "PUBSUB NUMSUB %s", chan);
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->type, REDIS_REPLY_ARRAY);
  int64_t n = r->element[1]->integer;
  freeReplyObject(r);
  return n;
}

TEST(async_lock_unlock_one_round_trip_each) {
  rp_server_t *s = lu_server(0);
  tl_loop t;
  dlock_client_t *c = tl_async_client(s, &t);
  dlock_t *l = lu_get(c, "async-basic");
  uint64_t owner = dlock_owner_new();
  tl_done d = {0};
  ASSERT_DLOCK_OK(dlock_lock_async(l, owner, 10000, tl_done_cb, &d));
  /* Never from the call that started it. */
  ASSERT_EQ(d.calls, 0);
  ASSERT_EQ(dlock_loop_pending(c), 1);
  tl_run_until(&t, &d.calls, 10000);
  ASSERT_EQ(d.calls, 1);
  ASSERT_DLOCK_OK(d.status);
  ASSERT_GT(dlock_token_as(l, owner), 0);
  char field[256];
  lu_field(field, sizeof(field), c, owner);
  ASSERT_EQ(lu_hget_num(s, "async-basic", field), 1);
  ASSERT_GT(lu_pttl(s, "async-basic"), 5000);

  /* Reentrant: the same owner again counts 2. */
  tl_done d2 = {0};
  ASSERT_DLOCK_OK(dlock_lock_async(l, owner, 10000, tl_done_cb, &d2));
  tl_run_until(&t, &d2.calls, 10000);
  ASSERT_DLOCK_OK(d2.status);
  ASSERT_EQ(lu_hget_num(s, "async-basic", field), 2);

  tl_done u1 = {0}, u2 = {0}, u3 = {0};
  ASSERT_DLOCK_OK(dlock_unlock_async(l, owner, tl_done_cb, &u1));
  tl_run_until(&t, &u1.calls, 10000);
  ASSERT_DLOCK_OK(u1.status);
  ASSERT_EQ(lu_exists(s, "async-basic"), 1);
  ASSERT_DLOCK_OK(dlock_unlock_async(l, owner, tl_done_cb, &u2));
  tl_run_until(&t, &u2.calls, 10000);
  ASSERT_DLOCK_OK(u2.status);
  ASSERT_EQ(lu_exists(s, "async-basic"), 0);
  /* Not held any more. */
  ASSERT_DLOCK_OK(dlock_unlock_async(l, owner, tl_done_cb, &u3));
  tl_run_until(&t, &u3.calls, 10000);
  ASSERT_EQ(u3.status, DLOCK_ENOTHELD);
  ASSERT_EQ(dlock_loop_pending(c), 0);
  dlock_free(l);
  dlock_client_close(c);
  ASSERT_EQ(t.sockets, 0);
  tl_close(&t);
  rp_free(s);
}

TEST(async_and_blocking_verbs_refuse_the_other_client) {
  rp_server_t *s = lu_server(0);
  tl_loop t;
  dlock_client_t *ac = tl_async_client(s, &t);
  dlock_client_t *bc = lu_client(s);
  dlock_t *al = lu_get(ac, "async-refuse"), *bl = lu_get(bc, "async-refuse");
  tl_done d = {0};
  ASSERT_DLOCK_ERR(dlock_trylock_as(al, 1, 0, 1000), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_unlock_as(al, 1), DLOCK_EINVAL);
  const char *argv[] = {"PING"};
  dlock_reply_t *r = NULL;
  ASSERT_DLOCK_ERR(dlock_client_command(ac, 1, argv, NULL, &r), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_lock_async(bl, 1, 1000, tl_done_cb, &d), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_lock_async(al, 1, 1000, NULL, &d), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_lock_async(al, 1, -7, tl_done_cb, &d), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_loop_action(bc, DLOCK_SOCKET_TIMEOUT, 0),
                   DLOCK_EINVAL);
  ASSERT_EQ(d.calls, 0);
  dlock_free(al);
  dlock_free(bl);
  dlock_client_close(ac);
  dlock_client_close(bc);
  tl_close(&t);
  rp_free(s);
}

TEST(async_waiter_is_woken_by_the_unlock_message) {
  rp_server_t *s = lu_server(0);
  tl_loop t;
  dlock_client_t *ac = tl_async_client(s, &t);
  dlock_client_t *bc = lu_client(s);
  dlock_t *al = lu_get(ac, "async-wake"), *bl = lu_get(bc, "async-wake");
  /* Held for a minute: only the message can wake the waiter in time. */
  ASSERT_DLOCK_OK(dlock_trylock(bl, 0, 60000));
  tl_done d = {0};
  ASSERT_DLOCK_OK(dlock_lock_async(al, 7, 10000, tl_done_cb, &d));
  char ch[128];
  lu_channel(ch, sizeof(ch), "async-wake", strlen("async-wake"));
  int64_t end = lu_now_ms() + 20000;
  while (numsub(s, ch) < 1) {
    ASSERT_LT(lu_now_ms(), end);
    tl_turn(&t, 20);
  }
  tl_run_for(&t, 100);
  ASSERT_EQ(d.calls, 0);
  int64_t released = lu_now_ms();
  ASSERT_DLOCK_OK(dlock_unlock(bl));
  tl_run_until(&t, &d.calls, 30000);
  ASSERT_DLOCK_OK(d.status);
  ASSERT_LT(d.at_ms - released, 30000);
  printf("async wake-up %lld ms after the unlock\n",
         (long long)(d.at_ms - released));
  ASSERT_EQ(dlock_is_locked(bl), 1);
  ASSERT_DLOCK_ERR(dlock_trylock(bl, 0, 1000), DLOCK_ETIMEDOUT);
  unlock_ok(&t, al, 7);
  dlock_free(al);
  dlock_free(bl);
  dlock_client_close(ac);
  dlock_client_close(bc);
  tl_close(&t);
  rp_free(s);
}

TEST(async_trylock_times_out_and_leaves_nothing) {
  rp_server_t *s = lu_server(0);
  tl_loop t;
  dlock_client_t *ac = tl_async_client(s, &t);
  dlock_client_t *bc = lu_client(s);
  dlock_t *af = NULL, *bf = NULL;
  ASSERT_DLOCK_OK(dlock_get_fair(ac, "async-fair-to", &af));
  ASSERT_DLOCK_OK(dlock_get_fair(bc, "async-fair-to", &bf));
  ASSERT_DLOCK_OK(dlock_trylock(bf, 0, 60000));
  tl_done d = {0}, z = {0};
  ASSERT_DLOCK_OK(dlock_trylock_async(af, 3, 300, 10000, tl_done_cb, &d));
  ASSERT_DLOCK_OK(dlock_trylock_async(af, 4, 0, 10000, tl_done_cb, &z));
  tl_run_until(&t, &d.calls, 30000);
  tl_run_until(&t, &z.calls, 30000);
  ASSERT_EQ(d.status, DLOCK_ETIMEDOUT);
  ASSERT_EQ(z.status, DLOCK_ETIMEDOUT);
  /* The waiter that gave up left the fair queue. */
  tl_run_for(&t, 200);
  ASSERT_EQ(lu_exists(s, "redisson_lock_queue:{async-fair-to}"), 0);
  ASSERT_EQ(dlock_loop_pending(ac), 0);
  ASSERT_DLOCK_OK(dlock_unlock(bf));
  dlock_free(af);
  dlock_free(bf);
  dlock_client_close(ac);
  dlock_client_close(bc);
  tl_close(&t);
  rp_free(s);
}

/* ---- a read-modify-write kept exact ------------------------------------- */

enum { RMW_OWNERS = 8, RMW_ROUNDS = 15, RMW_THREADS = 2 };

typedef struct rmw_owner {
  struct rmw *all;
  dlock_t *l;
  uint64_t owner;
  int rounds;
  int step; /* 0 lock, 1 get, 2 set, 3 unlock */
  int64_t seen;
} rmw_owner;

typedef struct rmw {
  dlock_client_t *c;
  rmw_owner o[RMW_OWNERS];
  int done, failed;
} rmw;

static void rmw_next(rmw_owner *w);

static void rmw_lock_done(dlock_t *l, uint64_t owner, int status, void *data) {
  (void)l;
  (void)owner;
  rmw_owner *w = data;
  if (status != 0) {
    w->all->failed++;
    return;
  }
  w->step++;
  rmw_next(w);
}

static void rmw_reply(dlock_client_t *c, int status, dlock_reply_t *r,
                      void *data) {
  (void)c;
  rmw_owner *w = data;
  if (status != 0) {
    w->all->failed++;
    return;
  }
  if (w->step == 1)
    w->seen = r->type == DLOCK_REPLY_STRING ? strtoll(r->str, NULL, 10) : 0;
  dlock_reply_free(r);
  w->step++;
  rmw_next(w);
}

static void rmw_next(rmw_owner *w) {
  rmw *all = w->all;
  char buf[32];
  const char *get[] = {"GET", "async-rmw-count"};
  const char *set[] = {"SET", "async-rmw-count", buf};
  switch (w->step) {
  case 0:
    if (w->rounds == RMW_ROUNDS) {
      all->done++;
      return;
    }
    if (dlock_lock_async(w->l, w->owner, 10000, rmw_lock_done, w) != 0)
      all->failed++;
    return;
  case 1:
    if (dlock_client_command_async(all->c, 2, get, NULL, rmw_reply, w) != 0)
      all->failed++;
    return;
  case 2:
    snprintf(buf, sizeof(buf), "%lld", (long long)(w->seen + 1));
    if (dlock_client_command_async(all->c, 3, set, NULL, rmw_reply, w) != 0)
      all->failed++;
    return;
  case 3:
    if (dlock_unlock_async(w->l, w->owner, rmw_lock_done, w) != 0)
      all->failed++;
    return;
  default:
    w->rounds++;
    w->step = 0;
    rmw_next(w);
    return;
  }
}

typedef struct rmw_thread {
  rp_server_t *s;
  int rounds;
} rmw_thread;

static void *rmw_blocking(void *arg) {
  rmw_thread *a = arg;
  dlock_client_t *c = lu_client(a->s);
  dlock_t *l = lu_get(c, "async-rmw");
  for (int i = 0; i < a->rounds; i++) {
    if (dlock_lock(l, 10000) != 0)
      break;
    redisReply *r = rp_cmd(a->s, "GET async-rmw-count");
    long long v = r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
    freeReplyObject(r);
    freeReplyObject(rp_cmd(a->s, "SET async-rmw-count %lld", v + 1));
    if (dlock_unlock(l) != 0)
      break;
  }
  dlock_free(l);
  dlock_client_close(c);
  return NULL;
}

TEST(async_read_modify_write_stays_exact_beside_threads) {
  rp_server_t *s = lu_server(0);
  tl_loop t;
  rmw all;
  memset(&all, 0, sizeof(all));
  all.c = tl_async_client(s, &t);
  dlock_t *l = lu_get(all.c, "async-rmw");
  pthread_t th[RMW_THREADS];
  rmw_thread ta = {s, 20};
  for (int i = 0; i < RMW_THREADS; i++)
    ASSERT_EQ(pthread_create(&th[i], NULL, rmw_blocking, &ta), 0);
  for (int i = 0; i < RMW_OWNERS; i++) {
    all.o[i].all = &all;
    all.o[i].l = l;
    all.o[i].owner = dlock_owner_new();
    rmw_next(&all.o[i]);
  }
  int64_t end = lu_now_ms() + 120000;
  while (all.done + all.failed < RMW_OWNERS) {
    ASSERT_LT(lu_now_ms(), end);
    tl_turn(&t, 50);
  }
  for (int i = 0; i < RMW_THREADS; i++)
    pthread_join(th[i], NULL);
  ASSERT_EQ(all.failed, 0);
  redisReply *r = rp_cmd(s, "GET async-rmw-count");
  ASSERT_EQ(atoll(r->str), RMW_OWNERS * RMW_ROUNDS + RMW_THREADS * ta.rounds);
  freeReplyObject(r);
  ASSERT_EQ(lu_exists(s, "async-rmw"), 0);
  dlock_free(l);
  dlock_client_close(all.c);
  tl_close(&t);
  rp_free(s);
}

/* ---- the watchdog, lost locks ------------------------------------------- */

typedef struct lost_rec {
  int calls;
  uint64_t owner;
} lost_rec;

static void on_lost(void *data, const char *name, size_t len, uint64_t owner) {
  lost_rec *r = data;
  (void)name;
  (void)len;
  r->calls++;
  r->owner = owner;
}

TEST(async_watchdog_renews_from_the_loop_and_reports_a_loss) {
  rp_server_t *s = lu_server(0);
  dlock_options_t o;
  lu_options(&o, s);
  lost_rec lost = {0};
  o.on_lost = on_lost;
  o.on_lost_data = &lost;
  /* Renewed every 500 ms: a loaded machine's loop keeps up with that. */
  o.watchdog_timeout_ms = 1500;
  dlock_client_t *c = tl_client_opts(&o);
  tl_loop t;
  tl_init(&t, c);
  dlock_t *l = lu_get(c, "async-wd");
  tl_done d = {0};
  ASSERT_DLOCK_OK(dlock_lock_async(l, 11, DLOCK_WATCHDOG, tl_done_cb, &d));
  tl_run_until(&t, &d.calls, 10000);
  ASSERT_DLOCK_OK(d.status);
  /* Almost three leases: alive only if renewed from the loop. */
  tl_run_for(&t, 4000);
  ASSERT_EQ(lu_exists(s, "async-wd"), 1);
  ASSERT_EQ(lost.calls, 0);
  freeReplyObject(rp_cmd(s, "DEL async-wd"));
  int64_t end = lu_now_ms() + 20000;
  while (lost.calls == 0) {
    ASSERT_LT(lu_now_ms(), end);
    tl_turn(&t, 50);
  }
  ASSERT_EQ(lost.calls, 1);
  ASSERT_EQ(lost.owner, 11);
  tl_done u = {0};
  ASSERT_DLOCK_OK(dlock_unlock_async(l, 11, tl_done_cb, &u));
  tl_run_until(&t, &u.calls, 10000);
  ASSERT_EQ(u.status, DLOCK_ELOST);
  dlock_free(l);
  dlock_client_close(c);
  tl_close(&t);
  rp_free(s);
}

/* ---- closing with operations pending ------------------------------------ */

TEST(async_close_cancels_each_pending_operation_once) {
  rp_server_t *s = lu_server(0);
  tl_loop t;
  dlock_client_t *ac = tl_async_client(s, &t);
  dlock_client_t *bc = lu_client(s);
  dlock_t *af = NULL, *bf = NULL, *al = lu_get(ac, "async-close-b");
  ASSERT_DLOCK_OK(dlock_get_fair(ac, "async-close", &af));
  ASSERT_DLOCK_OK(dlock_get_fair(bc, "async-close", &bf));
  ASSERT_DLOCK_OK(dlock_trylock(bf, 0, 60000));
  tl_done w[3] = {{0}}, g = {0};
  for (int i = 0; i < 3; i++)
    ASSERT_DLOCK_OK(
        dlock_lock_async(af, (uint64_t)(20 + i), 10000, tl_done_cb, &w[i]));
  /* A grant whose callback has not run yet when the client closes. */
  ASSERT_DLOCK_OK(dlock_lock_async(al, 30, 60000, tl_done_cb, &g));
  tl_run_for(&t, 300);
  ASSERT_EQ(w[0].calls + w[1].calls + w[2].calls, 0);
  dlock_client_close(ac);
  for (int i = 0; i < 3; i++) {
    ASSERT_EQ(w[i].calls, 1);
    ASSERT_EQ(w[i].status, DLOCK_ECANCELED);
  }
  ASSERT_EQ(g.calls, 1);
  /* Nothing left behind: no queue places, and the lock it may have got is
   * given back (either reported before close, or given back by it). */
  ASSERT_EQ(lu_exists(s, "redisson_lock_queue:{async-close}"), 0);
  if (g.status == DLOCK_ECANCELED)
    ASSERT_EQ(lu_exists(s, "async-close-b"), 0);
  ASSERT_DLOCK_OK(dlock_unlock(bf));
  dlock_free(af);
  dlock_free(al);
  dlock_free(bf);
  dlock_client_close(bc);
  tl_close(&t);
  rp_free(s);
}

/* A callback that frees its handle and closes the client. */
typedef struct reenter {
  dlock_client_t *c;
  int calls, status;
} reenter;

static void close_from_callback(dlock_t *l, uint64_t owner, int status,
                                void *data) {
  reenter *r = data;
  (void)owner;
  r->calls++;
  r->status = status;
  dlock_free(l);
  dlock_client_close(r->c);
}

static void unlock_then_close(dlock_t *l, uint64_t owner, int status,
                              void *data) {
  reenter *r = data;
  r->status = status;
  if (status != 0 ||
      dlock_unlock_async(l, owner, close_from_callback, data) != 0)
    r->calls = 100;
}

TEST(async_callbacks_may_start_operations_and_close_the_client) {
  rp_server_t *s = lu_server(0);
  tl_loop t;
  dlock_client_t *c = tl_async_client(s, &t);
  dlock_t *l = lu_get(c, "async-reenter");
  reenter r = {c, 0, -1};
  ASSERT_DLOCK_OK(dlock_lock_async(l, 5, 10000, unlock_then_close, &r));
  tl_run_until(&t, &r.calls, 10000);
  ASSERT_EQ(r.calls, 1);
  ASSERT_DLOCK_OK(r.status);
  ASSERT_EQ(lu_exists(s, "async-reenter"), 0);
  ASSERT_EQ(t.sockets, 0);
  tl_close(&t);
  rp_free(s);
}

TEST(async_spin_and_rw_locks) {
  rp_server_t *s = lu_server(1);
  tl_loop t;
  dlock_client_t *c = tl_async_client(s, &t);
  dlock_t *sp = NULL, *rd = NULL, *wr = NULL;
  ASSERT_DLOCK_OK(dlock_get_spin(c, "async-spin", &sp));
  ASSERT_DLOCK_OK(dlock_get_rw(c, "async-rw", &rd, &wr));
  tl_done a = {0}, b = {0}, r1 = {0}, r2 = {0}, w = {0};
  ASSERT_DLOCK_OK(dlock_lock_async(sp, 1, 5000, tl_done_cb, &a));
  tl_run_until(&t, &a.calls, 10000);
  ASSERT_DLOCK_OK(a.status);
  /* The second spins (by timer) until the first lets go. */
  ASSERT_DLOCK_OK(dlock_trylock_async(sp, 2, 20000, 5000, tl_done_cb, &b));
  tl_run_for(&t, 200);
  ASSERT_EQ(b.calls, 0);
  tl_done u = {0};
  ASSERT_DLOCK_OK(dlock_unlock_async(sp, 1, tl_done_cb, &u));
  tl_run_until(&t, &b.calls, 30000);
  ASSERT_DLOCK_OK(b.status);
  /* Two readers share; a writer waits for both. */
  ASSERT_DLOCK_OK(dlock_lock_async(rd, 1, 10000, tl_done_cb, &r1));
  ASSERT_DLOCK_OK(dlock_lock_async(rd, 2, 10000, tl_done_cb, &r2));
  tl_run_until(&t, &r1.calls, 10000);
  tl_run_until(&t, &r2.calls, 10000);
  ASSERT_DLOCK_OK(r1.status);
  ASSERT_DLOCK_OK(r2.status);
  ASSERT_DLOCK_OK(dlock_lock_async(wr, 3, 10000, tl_done_cb, &w));
  tl_run_for(&t, 200);
  ASSERT_EQ(w.calls, 0);
  tl_done u1 = {0}, u2 = {0};
  ASSERT_DLOCK_OK(dlock_unlock_async(rd, 1, tl_done_cb, &u1));
  ASSERT_DLOCK_OK(dlock_unlock_async(rd, 2, tl_done_cb, &u2));
  tl_run_until(&t, &w.calls, 30000);
  ASSERT_DLOCK_OK(w.status);
  ASSERT_DLOCK_OK(u1.status);
  ASSERT_DLOCK_OK(u2.status);
  dlock_free(sp);
  dlock_free(rd);
  dlock_free(wr);
  dlock_client_close(c);
  tl_close(&t);
  rp_free(s);
}

TEST(async_rides_a_redis_restart) {
  rp_server_t *s = lu_server(0);
  tl_loop t;
  dlock_client_t *c = tl_async_client(s, &t);
  dlock_t *l = lu_get(c, "async-restart");
  tl_done a = {0};
  ASSERT_DLOCK_OK(dlock_lock_async(l, 1, 5000, tl_done_cb, &a));
  tl_run_until(&t, &a.calls, 10000);
  ASSERT_DLOCK_OK(a.status);
  ASSERT_EQ(rp_restart(s), 0);
  /* The next acquisition reconnects (riding the outage within its wait);
   * the restarted server lost the key (no persistence). */
  tl_done b = {0};
  ASSERT_DLOCK_OK(dlock_trylock_async(l, 2, 20000, 5000, tl_done_cb, &b));
  tl_run_until(&t, &b.calls, 40000);
  ASSERT_DLOCK_OK(b.status);
  char field[256];
  lu_field(field, sizeof(field), c, 2);
  ASSERT_EQ(lu_hget_num(s, "async-restart", field), 1);
  dlock_free(l);
  dlock_client_close(c);
  tl_close(&t);
  rp_free(s);
}

#ifdef DLOCK_STOCK_ASYNC_PATH
/* The seed scenario on the loop: the example sells 90 MoonCakes to 100
 * buyers in flight on one thread, and checks its own books. */
TEST(async_example_sells_exactly_90_mooncakes) {
  rp_server_t *s = lu_server(1);
  char cmd[4096];
  snprintf(cmd, sizeof(cmd), "DLOCK_URL='%s' '%s' 100 90", rp_url(s),
           DLOCK_STOCK_ASYNC_PATH);
  FILE *p = popen(cmd, "r");
  ASSERT_NOT_NULL(p);
  char out[512] = "";
  size_t n = fread(out, 1, sizeof(out) - 1, p);
  out[n] = '\0';
  int status = pclose(p);
  printf("%s", out);
  ASSERT_EQ(status, 0);
  ASSERT_NOT_NULL(strstr(out, "sold 90, refused 10 (sold out), timed out 0, "
                              "failed 0, of 100 buyers; 0 left, 0 lost"));
  redisReply *r = rp_cmd(s, "GET MoonCake");
  ASSERT_STR_EQ(r->str, "0");
  freeReplyObject(r);
  rp_free(s);
}
#endif

/* ---- semaphores and latches --------------------------------------------- */

typedef struct counter_done {
  int calls, status;
  int64_t value;
} counter_done;

static void sem_done(dlock_sem_t *s, int status, void *data) {
  counter_done *d = data;
  (void)s;
  d->calls++;
  d->status = status;
}

static void latch_done(dlock_latch_t *l, int status, int64_t value,
                       void *data) {
  counter_done *d = data;
  (void)l;
  d->calls++;
  d->status = status;
  d->value = value;
}

TEST(async_semaphore_waits_for_a_release_and_gives_back) {
  rp_server_t *s = lu_server(0);
  tl_loop t;
  dlock_client_t *ac = tl_async_client(s, &t);
  dlock_client_t *bc = lu_client(s);
  dlock_sem_t *as = NULL, *bs = NULL;
  ASSERT_DLOCK_OK(dlock_sem_get(ac, "async-sem", &as));
  ASSERT_DLOCK_OK(dlock_sem_get(bc, "async-sem", &bs));
  ASSERT_EQ(dlock_sem_try_set_permits(bs, 1), 1);
  ASSERT_DLOCK_OK(dlock_sem_acquire(bs, 1, 0));
  counter_done a = {0}, r = {0}, cancel = {0};
  ASSERT_DLOCK_OK(
      dlock_sem_acquire_async(as, 1, DLOCK_WAIT_FOREVER, sem_done, &a));
  /* Not held: refused at once, the callback never called. */
  ASSERT_DLOCK_ERR(dlock_sem_release_async(as, 1, sem_done, &r),
                   DLOCK_ENOTHELD);
  char ch[160];
  snprintf(ch, sizeof(ch), "redisson_sc:{async-sem}");
  int64_t end = lu_now_ms() + 20000;
  while (numsub(s, ch) < 1) {
    ASSERT_LT(lu_now_ms(), end);
    tl_turn(&t, 20);
  }
  ASSERT_EQ(a.calls, 0);
  ASSERT_DLOCK_OK(dlock_sem_release(bs, 1));
  tl_run_until(&t, &a.calls, 30000);
  ASSERT_DLOCK_OK(a.status);
  ASSERT_EQ(dlock_sem_held(as), 1);
  ASSERT_DLOCK_OK(dlock_sem_release_async(as, 1, sem_done, &r));
  tl_run_until(&t, &r.calls, 10000);
  ASSERT_DLOCK_OK(r.status);
  int64_t avail = -1;
  ASSERT_DLOCK_OK(dlock_sem_available(bs, &avail));
  ASSERT_EQ(avail, 1);
  /* A waiter that the close cancels. */
  ASSERT_DLOCK_OK(dlock_sem_acquire(bs, 1, 0));
  ASSERT_DLOCK_OK(dlock_sem_acquire_async(as, 1, 60000, sem_done, &cancel));
  tl_run_for(&t, 100);
  dlock_sem_free(as);
  dlock_client_close(ac);
  ASSERT_EQ(cancel.calls, 1);
  ASSERT_EQ(cancel.status, DLOCK_ECANCELED);
  ASSERT_DLOCK_OK(dlock_sem_release(bs, 1));
  ASSERT_DLOCK_OK(dlock_sem_available(bs, &avail));
  ASSERT_EQ(avail, 1);
  dlock_sem_free(bs);
  dlock_client_close(bc);
  tl_close(&t);
  rp_free(s);
}

TEST(async_latch_await_and_count_down) {
  rp_server_t *s = lu_server(0);
  tl_loop t;
  dlock_client_t *ac = tl_async_client(s, &t);
  dlock_client_t *bc = lu_client(s);
  dlock_latch_t *al = NULL, *bl = NULL;
  ASSERT_DLOCK_OK(dlock_latch_get(ac, "async-latch", &al));
  ASSERT_DLOCK_OK(dlock_latch_get(bc, "async-latch", &bl));
  ASSERT_EQ(dlock_latch_try_set_count(bl, 2), 1);
  counter_done w = {0}, d1 = {0}, d2 = {0};
  ASSERT_DLOCK_OK(dlock_latch_await_async(al, 30000, latch_done, &w));
  ASSERT_DLOCK_OK(dlock_latch_count_down_async(al, latch_done, &d1));
  tl_run_until(&t, &d1.calls, 10000);
  ASSERT_DLOCK_OK(d1.status);
  ASSERT_EQ(d1.value, 1);
  tl_run_for(&t, 100);
  ASSERT_EQ(w.calls, 0);
  /* The other client's count-down to zero wakes the loop's waiter. */
  ASSERT_DLOCK_OK(dlock_latch_count_down(bl, NULL));
  tl_run_until(&t, &w.calls, 30000);
  ASSERT_DLOCK_OK(w.status);
  /* At zero: a count-down is refused, and says so in its callback. */
  ASSERT_DLOCK_OK(dlock_latch_count_down_async(al, latch_done, &d2));
  tl_run_until(&t, &d2.calls, 10000);
  ASSERT_EQ(d2.status, DLOCK_EINVAL);
  dlock_latch_free(al);
  dlock_latch_free(bl);
  dlock_client_close(ac);
  dlock_client_close(bc);
  tl_close(&t);
  rp_free(s);
}

/* ---- faults ------------------------------------------------------------- */

TEST(async_paused_server_fails_the_attempt_and_the_loop_goes_on) {
  rp_server_t *s = lu_server(0);
  tl_loop t;
  dlock_client_t *c = tl_async_client(s, &t);
  dlock_t *l = lu_get(c, "async-paused");
  tl_done a = {0}, b = {0};
  ASSERT_EQ(rp_pause(s), 0);
  ASSERT_DLOCK_OK(dlock_trylock_async(l, 1, 300, 5000, tl_done_cb, &a));
  /* The loop is never blocked: a timer of its own keeps firing. */
  int64_t start = lu_now_ms();
  tl_run_until(&t, &a.calls, 30000);
  ASSERT_EQ(a.calls, 1);
  ASSERT_NE(a.status, 0);
  printf("paused server: %s after %lld ms\n", dlock_err_name(a.status),
         (long long)(lu_now_ms() - start));
  ASSERT_EQ(rp_resume(s), 0);
  ASSERT_DLOCK_OK(dlock_trylock_async(l, 1, 10000, 5000, tl_done_cb, &b));
  tl_run_until(&t, &b.calls, 30000);
  ASSERT_DLOCK_OK(b.status);
  /* Whatever the attempt without an answer took was given back: the lock
   * is held by the second acquisition only, once. */
  char field[256];
  lu_field(field, sizeof(field), c, 1);
  ASSERT_EQ(lu_hget_num(s, "async-paused", field), 1);
  dlock_free(l);
  dlock_client_close(c);
  tl_close(&t);
  rp_free(s);
}

/* An attempt that gets no answer and is tried again within the wait: the
 * stalled attempt runs once the server goes on, and the retry finds the
 * lock its owner's already. Nothing may take that grant back (an undo of
 * the first attempt sent before the retry could reach Redis after it, as
 * on a cluster whose master fails over): the lock is held once, with the
 * one token the stalled attempt was given, not released and taken anew. */
TEST(async_retried_attempt_keeps_what_the_stalled_one_took) {
  rp_server_t *s = lu_server(0);
  tl_loop t;
  dlock_options_t o;
  lu_options(&o, s);
  o.command_timeout_ms = 300;
  o.connect_timeout_ms = 300;
  dlock_client_t *c = tl_client_opts(&o);
  tl_init(&t, c);
  dlock_t *l = lu_get(c, "async-retried");
  uint64_t me = dlock_owner_new();
  tl_done a = {0}, b = {0};
  /* A first grant and release, so that the scripts are loaded and the
   * token sequence is known. */
  ASSERT_DLOCK_OK(dlock_trylock_async(l, me, 0, 60000, tl_done_cb, &a));
  tl_run_until(&t, &a.calls, 10000);
  ASSERT_DLOCK_OK(a.status);
  uint64_t first = dlock_token_as(l, me);
  unlock_ok(&t, l, me);
  ASSERT_EQ(rp_pause(s), 0);
  ASSERT_DLOCK_OK(dlock_trylock_async(l, me, 30000, 60000, tl_done_cb, &b));
  tl_run_for(&t, 1200); /* the attempt times out; the machine rides */
  ASSERT_EQ(b.calls, 0);
  ASSERT_EQ(rp_resume(s), 0);
  tl_run_until(&t, &b.calls, 30000);
  ASSERT_DLOCK_OK(b.status);
  /* Long enough for anything sent before the grant to be answered. */
  tl_run_for(&t, 500);
  char field[256];
  lu_field(field, sizeof(field), c, me);
  ASSERT_EQ(lu_hget_num(s, "async-retried", field), 1);
  ASSERT_GT(lu_pttl(s, "async-retried"), 30000);
  ASSERT_EQ(dlock_token_as(l, me), first + 1);
  unlock_ok(&t, l, me);
  ASSERT_EQ(lu_exists(s, "async-retried"), 0);
  dlock_free(l);
  dlock_client_close(c);
  tl_close(&t);
  rp_free(s);
}

TEST(async_waiter_rides_a_server_killed_and_restarted) {
  rp_server_t *s = lu_server(0);
  tl_loop t;
  dlock_client_t *ac = tl_async_client(s, &t);
  dlock_client_t *bc = lu_client(s);
  dlock_t *al = lu_get(ac, "async-killed"), *bl = lu_get(bc, "async-killed");
  ASSERT_DLOCK_OK(dlock_trylock(bl, 0, 60000));
  tl_done w = {0};
  ASSERT_DLOCK_OK(dlock_trylock_async(al, 3, 30000, 5000, tl_done_cb, &w));
  tl_run_for(&t, 300);
  ASSERT_EQ(w.calls, 0);
  /* The holder's key goes with the server (no persistence): once it is
   * back, the waiter, told by its pub/sub connection's loss, gets in. */
  ASSERT_EQ(rp_kill(s), 0);
  tl_run_for(&t, 300);
  ASSERT_EQ(rp_restart(s), 0);
  tl_run_until(&t, &w.calls, 40000);
  ASSERT_DLOCK_OK(w.status);
  ASSERT_EQ(lu_exists(s, "async-killed"), 1);
  unlock_ok(&t, al, 3);
  dlock_free(al);
  dlock_free(bl);
  dlock_client_close(ac);
  dlock_client_close(bc);
  tl_close(&t);
  rp_free(s);
}

/* ---- MultiLock ---------------------------------------------------------- */

TEST(async_multilock_waits_holding_nothing_then_takes_all) {
  rp_server_t *s = lu_server(0);
  tl_loop t;
  dlock_client_t *ac = tl_async_client(s, &t);
  dlock_client_t *bc = lu_client(s);
  dlock_t *parts[2] = {lu_get(ac, "async-multi-a"),
                       lu_get(ac, "async-multi-b")};
  dlock_t *multi = NULL, *bb = lu_get(bc, "async-multi-b");
  ASSERT_DLOCK_OK(dlock_get_multi(parts, 2, &multi));
  ASSERT_DLOCK_OK(dlock_trylock(bb, 0, 60000));
  tl_done d = {0};
  ASSERT_DLOCK_OK(dlock_trylock_async(multi, 9, 30000, 10000, tl_done_cb, &d));
  tl_run_for(&t, 300);
  ASSERT_EQ(d.calls, 0);
  /* Waiting for the busy part, it holds none of the others. */
  ASSERT_EQ(lu_exists(s, "async-multi-a"), 0);
  ASSERT_DLOCK_OK(dlock_unlock(bb));
  tl_run_until(&t, &d.calls, 30000);
  ASSERT_DLOCK_OK(d.status);
  char field[256];
  lu_field(field, sizeof(field), ac, 9);
  ASSERT_EQ(lu_hget_num(s, "async-multi-a", field), 1);
  ASSERT_EQ(lu_hget_num(s, "async-multi-b", field), 1);
  ASSERT_GT(dlock_token_as(multi, 9), 0);
  tl_done u = {0}, again = {0};
  ASSERT_DLOCK_OK(dlock_unlock_async(multi, 9, tl_done_cb, &u));
  tl_run_until(&t, &u.calls, 10000);
  ASSERT_DLOCK_OK(u.status);
  ASSERT_EQ(lu_exists(s, "async-multi-a"), 0);
  ASSERT_EQ(lu_exists(s, "async-multi-b"), 0);
  ASSERT_DLOCK_OK(dlock_unlock_async(multi, 9, tl_done_cb, &again));
  tl_run_until(&t, &again.calls, 10000);
  ASSERT_EQ(again.status, DLOCK_ENOTHELD);
  /* A part on a blocking client: no async verbs for the whole. */
  dlock_t *mixed[2] = {parts[0], bb}, *mx = NULL;
  ASSERT_DLOCK_OK(dlock_get_multi(mixed, 2, &mx));
  ASSERT_DLOCK_ERR(dlock_lock_async(mx, 1, 1000, tl_done_cb, &d), DLOCK_EINVAL);
  dlock_free(mx);
  dlock_free(multi);
  dlock_free(parts[0]);
  dlock_free(parts[1]);
  dlock_free(bb);
  dlock_client_close(ac);
  dlock_client_close(bc);
  tl_close(&t);
  rp_free(s);
}

/* ---- RedLock ------------------------------------------------------------ */

enum { RED_N = 3 };

/* Turns every loop in turn until '*flag' is set. */
static void turn_all_until(tl_loop *ls, size_t n, const int *flag,
                           int64_t limit_ms) {
  int64_t end = lu_now_ms() + limit_ms;
  while (!*flag) {
    ASSERT_LT(lu_now_ms(), end);
    for (size_t i = 0; i < n; i++)
      tl_turn(&ls[i], 2);
  }
}

TEST(async_redlock_needs_a_majority_of_servers) {
  rp_server_t *srv[RED_N];
  tl_loop ls[RED_N];
  dlock_client_t *ac[RED_N], *bc[RED_N];
  dlock_t *ap[RED_N], *bp[RED_N], *ared = NULL;
  for (int i = 0; i < RED_N; i++) {
    srv[i] = lu_server(0);
    ac[i] = tl_async_client(srv[i], &ls[i]);
    bc[i] = lu_client(srv[i]);
    ap[i] = lu_get(ac[i], "async-red");
    bp[i] = lu_get(bc[i], "async-red");
  }
  ASSERT_DLOCK_OK(dlock_get_red(ap, RED_N, &ared));
  tl_done d = {0};
  ASSERT_DLOCK_OK(dlock_lock_async(ared, 1, 10000, tl_done_cb, &d));
  turn_all_until(ls, RED_N, &d.calls, 30000);
  ASSERT_DLOCK_OK(d.status);
  ASSERT_GT(dlock_token_as(ared, 1), 0);
  for (int i = 0; i < RED_N; i++)
    ASSERT_EQ(lu_exists(srv[i], "async-red"), 1);
  /* One server lost: the unlock still reaches a majority. */
  ASSERT_EQ(rp_kill(srv[2]), 0);
  tl_done u = {0};
  ASSERT_DLOCK_OK(dlock_unlock_async(ared, 1, tl_done_cb, &u));
  turn_all_until(ls, RED_N, &u.calls, 30000);
  ASSERT_DLOCK_OK(u.status);
  ASSERT_EQ(lu_exists(srv[0], "async-red"), 0);
  ASSERT_EQ(lu_exists(srv[1], "async-red"), 0);
  /* Held on a node by someone else, and one node down: no majority. */
  ASSERT_DLOCK_OK(dlock_trylock(bp[0], 0, 60000));
  tl_done t2 = {0};
  ASSERT_DLOCK_OK(dlock_trylock_async(ared, 2, 300, 10000, tl_done_cb, &t2));
  turn_all_until(ls, RED_N, &t2.calls, 60000);
  ASSERT_NE(t2.status, 0);
  printf("redlock without a majority: %s\n", dlock_err_name(t2.status));
  /* What it got on the free node was given back. */
  ASSERT_EQ(lu_exists(srv[1], "async-red"), 0);
  ASSERT_DLOCK_ERR(dlock_unlock_async(ared, 2, tl_done_cb, &u), DLOCK_ENOTHELD);
  ASSERT_DLOCK_OK(dlock_unlock(bp[0]));
  dlock_free(ared);
  for (int i = 0; i < RED_N; i++) {
    dlock_free(ap[i]);
    dlock_free(bp[i]);
    dlock_client_close(ac[i]);
    dlock_client_close(bc[i]);
    tl_close(&ls[i]);
    rp_free(srv[i]);
  }
}

/* Turns every loop in turn for 'ms'. */
static void turn_all_for(tl_loop *ls, size_t n, int64_t ms) {
  int64_t end = lu_now_ms() + ms;
  while (lu_now_ms() < end)
    for (size_t i = 0; i < n; i++)
      tl_turn(&ls[i], 2);
}

/* Takes 'l' for 'owner' with 'wait_ms' and lets it go, through the loops:
 * the acquisition's outcome. */
static int take_and_give_back(tl_loop *ls, size_t n, dlock_t *l, uint64_t owner,
                              int64_t wait_ms) {
  tl_done a = {0}, u = {0};
  ASSERT_DLOCK_OK(
      dlock_trylock_async(l, owner, wait_ms, 30000, tl_done_cb, &a));
  turn_all_until(ls, n, &a.calls, 60000);
  if (a.status != 0)
    return a.status;
  ASSERT_DLOCK_OK(dlock_unlock_async(l, owner, tl_done_cb, &u));
  turn_all_until(ls, n, &u.calls, 30000);
  ASSERT_DLOCK_OK(u.status);
  return 0;
}

/* Takes 'l' for 'owner' with a wait of 500 ms through 'n' loops, with
 * servers down: it fails with 'want' once the wait is over, saying that it
 * tried again. What its callback saw. */
static tl_done rides_then_fails(tl_loop *ls, size_t n, dlock_t *l,
                                uint64_t owner, int want, const char *what) {
  int64_t t = lu_now_ms();
  tl_done d = {0};
  ASSERT_DLOCK_OK(dlock_trylock_async(l, owner, 500, 30000, tl_done_cb, &d));
  turn_all_until(ls, n, &d.calls, 60000);
  printf("async %s, trylock(500 ms): %s after %" PRId64 " ms: %s\n", what,
         dlock_err_name(d.status), d.at_ms - t, d.detail);
  ASSERT_EQ(d.status, want);
  ASSERT_GE(d.at_ms - t, 400);
  ASSERT_NOT_NULL(strstr(d.detail, "tried"));
  return d;
}

/*
 * A MultiLock whose part's server is down, and a RedLock with a majority
 * of its nodes down, when the acquisition starts (as test_replication's
 * outage test does with the blocking verbs): with a wait, both ride the
 * outage through the loops, as a single lock does, and succeed once the
 * servers are back; their unlock leaves no key anywhere. A part whose
 * server never answered fails the MultiLock with DLOCK_EIO, at once
 * without a wait, else once the wait is over, saying it tried again, and
 * what the other part got is given back; the same for a RedLock with too
 * few nodes up, with DLOCK_ENOQUORUM.
 */
TEST(async_multi_and_red_locks_ride_a_restart) {
  const char *key = "async-out:comp";
  rp_server_t *srv[RED_N];
  tl_loop ls[RED_N + 1];
  dlock_client_t *ac[RED_N + 1];
  dlock_t *ap[RED_N];
  for (int i = 0; i < RED_N; i++) {
    srv[i] = lu_server(0);
    ac[i] = tl_async_client(srv[i], &ls[i]);
    ap[i] = lu_get(ac[i], key);
  }
  for (int red = 0; red < 2; red++) {
    dlock_t *l = NULL;
    ASSERT_DLOCK_OK(red ? dlock_get_red(ap, RED_N, &l)
                        : dlock_get_multi(ap, 2, &l));
    /* Its clients have worked: what follows is an outage. */
    ASSERT_DLOCK_OK(take_and_give_back(ls, RED_N, l, dlock_owner_new(), 0));
    /* The MultiLock's second part's server; two of the RedLock's three. */
    int down = red ? 2 : 1;
    for (int i = 0; i < down; i++)
      ASSERT_EQ(rp_kill(srv[2 - i - (red ? 0 : 1)]), 0);
    uint64_t owner = dlock_owner_new();
    tl_done d = {0};
    int64_t t0 = lu_now_ms();
    ASSERT_DLOCK_OK(
        dlock_trylock_async(l, owner, 15000, 30000, tl_done_cb, &d));
    turn_all_for(ls, RED_N, 1500);
    /* Not failed while there is time left. */
    ASSERT_EQ(d.calls, 0);
    for (int i = 0; i < down; i++)
      ASSERT_EQ(rp_restart(srv[2 - i - (red ? 0 : 1)]), 0);
    turn_all_until(ls, RED_N, &d.calls, 60000);
    printf("async %s trylock(15 s) through a 1.5 s outage: %s after %" PRId64
           " ms\n",
           red ? "RedLock" : "MultiLock", dlock_err_name(d.status),
           d.at_ms - t0);
    ASSERT_DLOCK_OK(d.status);
    ASSERT_GE(d.at_ms - t0, 1400);
    ASSERT_GT(dlock_token_as(l, owner), 0);
    int held = 0;
    for (int i = 0; i < (red ? RED_N : 2); i++)
      held += (int)lu_exists(srv[i], key);
    ASSERT_GE(held, 2);
    tl_done u = {0};
    ASSERT_DLOCK_OK(dlock_unlock_async(l, owner, tl_done_cb, &u));
    turn_all_until(ls, RED_N, &u.calls, 30000);
    ASSERT_DLOCK_OK(u.status);
    for (int i = 0; i < RED_N; i++)
      ASSERT_EQ(lu_exists(srv[i], key), 0);
    dlock_free(l);
  }

  /* A client of a server that is down before it ever connected. */
  ASSERT_EQ(rp_kill(srv[2]), 0);
  ac[RED_N] = tl_async_client(srv[2], &ls[RED_N]);
  dlock_t *pair[2] = {lu_get(ac[0], "async-out:never"),
                      lu_get(ac[RED_N], "async-out:never")};
  dlock_t *m = NULL;
  ASSERT_DLOCK_OK(dlock_get_multi(pair, 2, &m));
  ASSERT_EQ(take_and_give_back(ls, RED_N + 1, m, 5, 0), DLOCK_EIO);
  rides_then_fails(ls, RED_N + 1, m, 5, DLOCK_EIO,
                   "MultiLock, a part's server never up");
  ASSERT_EQ(lu_exists(srv[0], "async-out:never"), 0);
  /* A RedLock with that node and one more down: DLOCK_ENOQUORUM, naming
   * a node that did not answer and why, once its wait is over; what the
   * node that is up granted is given back. */
  ASSERT_EQ(rp_kill(srv[1]), 0);
  dlock_t *nodes[RED_N] = {pair[0], lu_get(ac[1], "async-out:never"), pair[1]};
  dlock_t *r = NULL;
  ASSERT_DLOCK_OK(dlock_get_red(nodes, RED_N, &r));
  tl_done q = rides_then_fails(ls, RED_N + 1, r, 6, DLOCK_ENOQUORUM,
                               "RedLock, two of three nodes down");
  ASSERT_NOT_NULL(strstr(q.detail, "node"));
  ASSERT_EQ(lu_exists(srv[0], "async-out:never"), 0);

  dlock_free(r);
  dlock_free(nodes[1]);
  dlock_free(m);
  dlock_free(pair[0]);
  dlock_free(pair[1]);
  for (int i = 0; i <= RED_N; i++) {
    if (i < RED_N)
      dlock_free(ap[i]);
    dlock_client_close(ac[i]);
    tl_close(&ls[i]);
    if (i < RED_N)
      rp_free(srv[i]);
  }
}

/* ---- replica sync ------------------------------------------------------- */

static int replica_up(rp_server_t *replica) {
  redisReply *r = rp_cmd(replica, "INFO replication");
  int up = r != NULL && r->type == REDIS_REPLY_STRING &&
           strstr(r->str, "master_link_status:up") != NULL;
  freeReplyObject(r);
  return up;
}

/* A client of 'o' on master 'm' takes and releases a lock through the
 * loop, which is on replica 'r' by the time the callback ran; with 'r'
 * stopped, an attempt is not acknowledged, given back, and not held. */
static void synced_round(rp_server_t *m, rp_server_t *r,
                         const dlock_options_t *o) {
  dlock_client_t *c = tl_client_opts(o);
  tl_loop t;
  tl_init(&t, c);
  dlock_t *l = lu_get(c, "async-rs");
  tl_done a = {0}, u = {0}, b = {0};
  ASSERT_DLOCK_OK(dlock_lock_async(l, 1, 10000, tl_done_cb, &a));
  tl_run_until(&t, &a.calls, 30000);
  ASSERT_DLOCK_OK(a.status);
  ASSERT_EQ(lu_exists(r, "async-rs"), 1);
  ASSERT_DLOCK_OK(dlock_unlock_async(l, 1, tl_done_cb, &u));
  tl_run_until(&t, &u.calls, 30000);
  ASSERT_DLOCK_OK(u.status);
  ASSERT_EQ(rp_pause(r), 0);
  ASSERT_DLOCK_OK(dlock_trylock_async(l, 2, 0, 10000, tl_done_cb, &b));
  tl_run_until(&t, &b.calls, 30000);
  ASSERT_EQ(b.status, DLOCK_ENOSYNC);
  tl_run_for(&t, 200);
  ASSERT_EQ(lu_exists(m, "async-rs"), 0);
  ASSERT_EQ(rp_resume(r), 0);
  dlock_free(l);
  dlock_client_close(c);
  tl_close(&t);
}

/* An acquisition through the loop waits for the master's replica (WAIT in
 * the same pipeline), and one the replica did not acknowledge is given
 * back and reported DLOCK_ENOSYNC, not held; with DLOCK_SYNC_ANY, one
 * acknowledgement of the two asked for is enough. */
TEST(async_acquisition_waits_for_the_replica) {
  rp_server_t *m = lu_server(0), *r = lu_server(0);
  freeReplyObject(rp_cmd(r, "REPLICAOF 127.0.0.1 %d", rp_port(m)));
  int64_t end = lu_now_ms() + 20000;
  while (!replica_up(r)) {
    ASSERT_LT(lu_now_ms(), end);
    lu_sleep_ms(20);
  }
  for (;;) {
    redisReply *w = rp_cmd(m, "WAIT 1 100");
    int ok = w != NULL && w->integer == 1;
    freeReplyObject(w);
    if (ok)
      break;
    ASSERT_LT(lu_now_ms(), end);
  }
  dlock_options_t o;
  lu_options(&o, m);
  o.replica_sync_timeout_ms = 500;
  synced_round(m, r, &o);
  /* Redisson's rule through the loop: asked for two replicas, the one
   * there is enough; stopped, none is, and the lock is given back. */
  o.replica_sync_mode = DLOCK_SYNC_ANY;
  o.replica_sync_replicas = 2;
  synced_round(m, r, &o);
  rp_free(r);
  rp_free(m);
}

/* ---- Sentinel ----------------------------------------------------------- */

#include "harness/sentinel_group.h"

static int sentinel_node_has(sg_group_t *g, int i, const char *key) {
  redisReply *r = rp_cmd(sg_node(g, i), "EXISTS %s", key);
  int yes = r != NULL && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
  freeReplyObject(r);
  return yes;
}

/* Through Sentinel: the loop finds the master, writes reach its replicas
 * (replica sync) before the callback, and after SENTINEL FAILOVER the
 * loop follows the new master (its watcher stepped by the loop): a waiter
 * started before the failover gets the lock from the new master once the
 * holder lets go. */
TEST(async_sentinel_follows_a_failover) {
  sg_group_t *g = NULL;
  ASSERT_EQ(sg_start(NULL, &g), 0);
  dlock_options_t o;
  dlock_options_init(&o);
  o.url = sg_url(g);
  o.connect_timeout_ms = 1000;
  o.command_timeout_ms = 2000;
  o.watchdog_timeout_ms = 10000;
  dlock_client_t *c = tl_client_opts(&o);
  tl_loop t;
  tl_init(&t, c);
  dlock_t *l = lu_get(c, "async-sent");
  tl_done a = {0}, w = {0}, u = {0};
  ASSERT_DLOCK_OK(dlock_lock_async(l, 1, DLOCK_WATCHDOG, tl_done_cb, &a));
  tl_run_until(&t, &a.calls, 30000);
  ASSERT_DLOCK_OK(a.status);
  for (int i = 0; i < sg_nnodes(g); i++)
    ASSERT_EQ(sentinel_node_has(g, i, "async-sent"), 1);
  ASSERT_DLOCK_OK(dlock_lock_async(l, 2, 10000, tl_done_cb, &w));
  tl_run_for(&t, 200);
  ASSERT_EQ(w.calls, 0);
  /* The failover, with the loop turning meanwhile. */
  int old = sg_master_index(g);
  ASSERT_EQ(sg_failover(g, 30000) >= 0, 1);
  int m = sg_master_index(g);
  printf("async: master moved from node %d to node %d\n", old, m);
  ASSERT_NE(m, old);
  tl_run_for(&t, 2000);
  ASSERT_EQ(w.calls, 0);
  ASSERT_DLOCK_OK(dlock_unlock_async(l, 1, tl_done_cb, &u));
  tl_run_until(&t, &u.calls, 30000);
  printf("unlock after the failover: %s\n", dlock_err_name(u.status));
  ASSERT_DLOCK_OK(u.status);
  tl_run_until(&t, &w.calls, 30000);
  ASSERT_DLOCK_OK(w.status);
  ASSERT_EQ(sentinel_node_has(g, m, "async-sent"), 1);
  dlock_free(l);
  dlock_client_close(c);
  tl_close(&t);
  sg_free(g);
}

/* ---- statistics and events ---------------------------------------------- */

typedef struct ev_rec {
  pthread_t loop_thread;
  int acquired, released, other_thread;
} ev_rec;

static void count_event(void *data, const dlock_event_t *e) {
  ev_rec *r = data;
  if (!pthread_equal(pthread_self(), r->loop_thread))
    r->other_thread++;
  if (e->kind == DLOCK_EVENT_ACQUIRED)
    r->acquired++;
  else if (e->kind == DLOCK_EVENT_RELEASED)
    r->released++;
}

/* An async client's acquisitions are counted and raised as events like a
 * blocking client's, from the same machine, on the loop's thread. */
TEST(async_statistics_and_events_come_from_the_loop) {
  rp_server_t *s = lu_server(0);
  dlock_options_t o;
  lu_options(&o, s);
  ev_rec rec = {pthread_self(), 0, 0, 0};
  o.on_event = count_event;
  o.on_event_data = &rec;
  dlock_client_t *c = tl_client_opts(&o);
  tl_loop t;
  tl_init(&t, c);
  dlock_t *l = lu_get(c, "async-stats");
  for (int i = 0; i < 3; i++) {
    tl_done a = {0}, u = {0};
    ASSERT_DLOCK_OK(dlock_lock_async(l, 4, 10000, tl_done_cb, &a));
    tl_run_until(&t, &a.calls, 10000);
    ASSERT_DLOCK_OK(a.status);
    ASSERT_DLOCK_OK(dlock_unlock_async(l, 4, tl_done_cb, &u));
    tl_run_until(&t, &u.calls, 10000);
    ASSERT_DLOCK_OK(u.status);
  }
  ASSERT_EQ(rec.acquired, 3);
  ASSERT_EQ(rec.released, 3);
  ASSERT_EQ(rec.other_thread, 0);
  dlock_stats_t st;
  dlock_client_stats(c, &st);
  ASSERT_EQ(st.acquired, 3);
  dlock_free(l);
  dlock_client_close(c);
  tl_close(&t);
  rp_free(s);
}

/* Reads the statistics of 'c' into '*st' while turning the loops of 'ls'
 * until its pub/sub reconnects reach 'want' or 'limit_ms' pass. */
static void turn_until_pubsub(tl_loop *ls, size_t n, dlock_client_t *c,
                              uint64_t want, int64_t limit_ms,
                              dlock_stats_t *st) {
  int64_t end = lu_now_ms() + limit_ms;
  for (;;) {
    dlock_client_stats(c, st);
    if (st->pubsub_reconnects >= want || lu_now_ms() >= end)
      return;
    for (size_t i = 0; i < n; i++)
      tl_turn(&ls[i], 2);
  }
}

/* The async verbs count as the blocking ones do: a semaphore's permits
 * and a latch's awaits in their own groups, a MultiLock and a RedLock once
 * each as wholes (their parts not as single locks), and the loop's
 * pub/sub connection made again after Redis restarted. */
TEST(async_statistics_count_semaphores_composites_and_pubsub) {
  rp_server_t *srv[RED_N];
  tl_loop ls[RED_N];
  dlock_client_t *ac[RED_N];
  dlock_t *node[RED_N];
  for (int i = 0; i < RED_N; i++) {
    srv[i] = lu_server(0);
    ac[i] = tl_async_client(srv[i], &ls[i]);
    node[i] = lu_get(ac[i], "async-st:red");
  }
  dlock_client_t *bc = lu_client(srv[0]);
  tl_loop *t = &ls[0];

  dlock_sem_t *as = NULL, *bs = NULL;
  ASSERT_DLOCK_OK(dlock_sem_get(ac[0], "async-st:sem", &as));
  ASSERT_DLOCK_OK(dlock_sem_get(bc, "async-st:sem", &bs));
  ASSERT_EQ(dlock_sem_try_set_permits(bs, 1), 1);
  counter_done a = {0}, late = {0}, r = {0};
  ASSERT_DLOCK_OK(dlock_sem_acquire_async(as, 1, 1000, sem_done, &a));
  tl_run_until(t, &a.calls, 10000);
  ASSERT_DLOCK_OK(a.status);
  ASSERT_DLOCK_OK(dlock_sem_acquire_async(as, 1, 100, sem_done, &late));
  tl_run_until(t, &late.calls, 10000);
  ASSERT_EQ(late.status, DLOCK_ETIMEDOUT);
  ASSERT_DLOCK_OK(dlock_sem_release_async(as, 1, sem_done, &r));
  tl_run_until(t, &r.calls, 10000);
  ASSERT_DLOCK_OK(r.status);

  dlock_latch_t *al = NULL, *bl = NULL;
  ASSERT_DLOCK_OK(dlock_latch_get(ac[0], "async-st:latch", &al));
  ASSERT_DLOCK_OK(dlock_latch_get(bc, "async-st:latch", &bl));
  ASSERT_EQ(dlock_latch_try_set_count(bl, 1), 1);
  counter_done w1 = {0}, w2 = {0};
  ASSERT_DLOCK_OK(dlock_latch_await_async(al, 100, latch_done, &w1));
  tl_run_until(t, &w1.calls, 10000);
  ASSERT_EQ(w1.status, DLOCK_ETIMEDOUT);
  ASSERT_DLOCK_OK(dlock_latch_count_down(bl, NULL));
  ASSERT_DLOCK_OK(dlock_latch_await_async(al, 1000, latch_done, &w2));
  tl_run_until(t, &w2.calls, 10000);
  ASSERT_DLOCK_OK(w2.status);

  dlock_t *parts[2] = {lu_get(ac[0], "async-st:m0"),
                       lu_get(ac[0], "async-st:m1")};
  dlock_t *multi = NULL, *red = NULL;
  ASSERT_DLOCK_OK(dlock_get_multi(parts, 2, &multi));
  ASSERT_DLOCK_OK(dlock_get_red(node, RED_N, &red));
  tl_done m = {0}, red_done = {0};
  ASSERT_DLOCK_OK(dlock_lock_async(multi, 3, 10000, tl_done_cb, &m));
  tl_run_until(t, &m.calls, 10000);
  ASSERT_DLOCK_OK(m.status);
  unlock_ok(t, multi, 3);
  ASSERT_DLOCK_OK(dlock_lock_async(red, 3, 10000, tl_done_cb, &red_done));
  turn_all_until(ls, RED_N, &red_done.calls, 30000);
  ASSERT_DLOCK_OK(red_done.status);
  tl_done ru = {0};
  ASSERT_DLOCK_OK(dlock_unlock_async(red, 3, tl_done_cb, &ru));
  turn_all_until(ls, RED_N, &ru.calls, 30000);
  ASSERT_DLOCK_OK(ru.status);

  dlock_stats_t st;
  dlock_client_stats(ac[0], &st);
  ASSERT_EQ(st.semaphore.acquired, 1);
  ASSERT_EQ(st.semaphore.timed_out, 1);
  ASSERT_EQ(st.semaphore.waits, 1);
  ASSERT_EQ(st.semaphore.released, 1);
  ASSERT_EQ(st.latch.acquired, 1);
  ASSERT_EQ(st.latch.timed_out, 1);
  ASSERT_EQ(st.multilock.acquired, 1);
  ASSERT_EQ(st.multilock.released, 1);
  ASSERT_EQ(st.multilock.hold.count, 1);
  ASSERT_EQ(st.redlock.acquired, 1);
  ASSERT_EQ(st.redlock.released, 1);
  ASSERT_EQ(st.redlock.hold.count, 1);
  for (int i = 0; i < RED_N; i++) {
    dlock_stats_t x;
    dlock_client_stats(ac[i], &x);
    ASSERT_EQ(x.acquired + x.timed_out + x.waits, 0);
    ASSERT_EQ(x.released + x.unlocks + x.hold.count, 0);
  }

  /* Redis restarts; a wait needs the loop's pub/sub connection again. */
  ASSERT_EQ(st.pubsub_reconnects, 0);
  ASSERT_EQ(rp_restart(srv[0]), 0);
  ASSERT_EQ(dlock_latch_try_set_count(bl, 1), 1);
  counter_done w3 = {0};
  ASSERT_DLOCK_OK(dlock_latch_await_async(al, 300, latch_done, &w3));
  tl_run_until(t, &w3.calls, 20000);
  ASSERT_EQ(w3.status, DLOCK_ETIMEDOUT);
  turn_until_pubsub(ls, 1, ac[0], 1, 20000, &st);
  ASSERT_GE(st.pubsub_reconnects, 1);
  ASSERT_EQ(st.latch.timed_out, 2);

  dlock_free(multi);
  dlock_free(red);
  dlock_free(parts[0]);
  dlock_free(parts[1]);
  dlock_latch_free(al);
  dlock_latch_free(bl);
  dlock_sem_free(as);
  dlock_sem_free(bs);
  dlock_client_close(bc);
  for (int i = 0; i < RED_N; i++) {
    dlock_free(node[i]);
    dlock_client_close(ac[i]);
    tl_close(&ls[i]);
    rp_free(srv[i]);
  }
}

/* A close outside the loop whose cancelled operation's callback closes the
 * client again: once, and nothing freed twice (the sanitizers and valgrind
 * would say). */
static void close_again(dlock_t *l, uint64_t owner, int status, void *data) {
  reenter *r = data;
  (void)l;
  (void)owner;
  r->calls++;
  r->status = status;
  dlock_client_close(r->c);
}

TEST(async_close_whose_callback_closes_again) {
  rp_server_t *s = lu_server(0);
  tl_loop t;
  dlock_client_t *ac = tl_async_client(s, &t);
  dlock_client_t *bc = lu_client(s);
  dlock_t *al = lu_get(ac, "async-close-again"),
          *bl = lu_get(bc, "async-close-again");
  ASSERT_DLOCK_OK(dlock_trylock(bl, 0, 60000));
  reenter r = {ac, 0, -1};
  ASSERT_DLOCK_OK(dlock_lock_async(al, 8, 10000, close_again, &r));
  tl_run_for(&t, 200);
  dlock_client_close(ac);
  ASSERT_EQ(r.calls, 1);
  ASSERT_EQ(r.status, DLOCK_ECANCELED);
  ASSERT_DLOCK_OK(dlock_unlock(bl));
  dlock_free(al);
  dlock_free(bl);
  dlock_client_close(bc);
  tl_close(&t);
  rp_free(s);
}
