/*
 * Hand-over inside an async client: an unlock made in the loop while
 * another owner of the same loop waits for the lock hands it straight to
 * that owner in one script, with no unlock message and no attempt of the
 * waiter's own; after a few in a row the lock is released for every
 * client, so that another client's waiter gets in; and a close while a
 * hand-over is in flight ends both operations once and leaves no lock
 * behind.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "lock.h"
#include "loop_util.h"

static void lock_ok(tl_loop *t, dlock_t *l, uint64_t owner, int64_t lease) {
  tl_done d = {0};
  ASSERT_DLOCK_OK(dlock_lock_async(l, owner, lease, tl_done_cb, &d));
  tl_run_until(t, &d.calls, 10000);
  ASSERT_DLOCK_OK(d.status);
}

/* Starts a wait of 'owner' for 'l' (lease 'lease_ms'), and turns the loop
 * until the waiter sleeps in it: the client listens on 'ch' beside the
 * raw subscriber, Redis ran an attempt of the waiter, and no script ran
 * while the loop turned for two spells of 200 ms in a row (the attempt
 * after a join comes within a turn of the join's answer). */
static void start_waiter(tl_loop *t, rp_server_t *s, dlock_t *l, uint64_t owner,
                         int64_t lease_ms, const char *ch, tl_done *d) {
  int64_t calls = lu_cmd_calls(s, "evalsha");
  ASSERT_DLOCK_OK(dlock_lock_async(l, owner, lease_ms, tl_done_cb, d));
  int64_t end = lu_now_ms() + 30000;
  int quiet = 0;
  while (quiet < 2) {
    ASSERT_LT(lu_now_ms(), end);
    int64_t before = lu_cmd_calls(s, "evalsha");
    tl_run_for(t, 200);
    int64_t now = lu_cmd_calls(s, "evalsha");
    quiet = lu_numsub(s, ch, strlen(ch)) >= 2 && now > calls && now == before
                ? quiet + 1
                : 0;
  }
  ASSERT_EQ(d->calls, 0);
}

static uint64_t handovers(dlock_client_t *c) {
  dlock_stats_t st;
  dlock_client_stats(c, &st);
  return st.handovers;
}

/* The holder's unlock leaves the lock held by the waiting owner of the
 * same loop, with the next token and its own lease; nobody is told on the
 * channel, and the waiter sends no command to take it up. */
TEST(async_unlock_hands_the_lock_to_a_waiter_of_the_loop) {
  const char *name = "aho:same";
  rp_server_t *s = lu_server(0);
  tl_loop t;
  dlock_client_t *c = tl_async_client(s, &t);
  dlock_t *l = lu_get(c, name);
  char ch[256], tok[256], field[256];
  lu_channel(ch, sizeof(ch), name, strlen(name));
  lu_token_key(tok, sizeof(tok), name, strlen(name));
  redisContext *sub = lu_subscribe(s, ch, strlen(ch));
  uint64_t a = dlock_owner_new(), b = dlock_owner_new();
  lock_ok(&t, l, a, 60000);
  uint64_t t0 = dlock_token_as(l, a);
  tl_done w = {0}, u = {0};
  start_waiter(&t, s, l, b, 5000, ch, &w);
  int64_t calls = lu_cmd_calls(s, "evalsha");
  uint64_t before = handovers(c);
  ASSERT_DLOCK_OK(dlock_unlock_async(l, a, tl_done_cb, &u));
  tl_run_until(&t, &u.calls, 10000);
  tl_run_until(&t, &w.calls, 10000);
  ASSERT_DLOCK_OK(u.status);
  ASSERT_DLOCK_OK(w.status);
  ASSERT_EQ(dlock_token_as(l, b), t0 + 1);
  ASSERT_EQ(lu_get_num_n(s, tok, strlen(tok)), (int64_t)t0 + 1);
  ASSERT_EQ(lu_hlen(s, name), 1);
  lu_field(field, sizeof(field), c, b);
  ASSERT_EQ(lu_hget_num(s, name, field), 1);
  /* The hand-over script alone. */
  ASSERT_EQ(lu_cmd_calls(s, "evalsha") - calls, 1);
  ASSERT_EQ(handovers(c) - before, 1);
  /* With the waiter's lease, not the holder's minute. */
  int64_t pttl = lu_pttl(s, name);
  ASSERT_GT(pttl, 0);
  ASSERT_LE(pttl, 5000);
  char msg[64];
  ASSERT_EQ(lu_sub_wait(sub, 100, msg, sizeof(msg), NULL, 0), 0);
  redisFree(sub);

  /* Its unlock, with nobody waiting, frees the lock as usual. */
  sub = lu_subscribe(s, ch, strlen(ch));
  tl_done u2 = {0};
  ASSERT_DLOCK_OK(dlock_unlock_async(l, b, tl_done_cb, &u2));
  tl_run_until(&t, &u2.calls, 10000);
  ASSERT_DLOCK_OK(u2.status);
  ASSERT_EQ(lu_exists(s, name), 0);
  ASSERT_EQ(lu_sub_wait(sub, 2000, msg, sizeof(msg), NULL, 0), 1);
  ASSERT_STR_EQ(msg, "0");
  redisFree(sub);
  dlock_free(l);
  dlock_client_close(c);
  tl_close(&t);
  rp_free(s);
}

/* ---- a run of hand-overs lets another client in ------------------------- */

enum { CYCLERS = 3 };

/* Owners of one loop that take the lock, note that nobody else of the
 * loop holds it, and give it back, over and over, until told to stop. */
typedef struct cyclers {
  dlock_t *l;
  uint64_t owner[CYCLERS];
  atomic_int *outsider_inside; /* set while the other client holds it */
  int overlaps, failures, grants, stop, running;
} cyclers;

typedef struct cycler_ref {
  cyclers *all;
  int i;
} cycler_ref;

static cycler_ref refs[CYCLERS];

static void cycler_locked(dlock_t *l, uint64_t owner, int status, void *data);

static void cycler_unlocked(dlock_t *l, uint64_t owner, int status,
                            void *data) {
  cycler_ref *r = data;
  cyclers *all = r->all;
  (void)owner;
  if (status != 0)
    all->failures++;
  if (status != 0 || all->stop ||
      dlock_lock_async(l, all->owner[r->i], 10000, cycler_locked, r) != 0)
    all->running--;
}

static void cycler_locked(dlock_t *l, uint64_t owner, int status, void *data) {
  cycler_ref *r = data;
  cyclers *all = r->all;
  if (status != 0) {
    all->failures++;
    all->running--;
    return;
  }
  if (atomic_load(all->outsider_inside))
    all->overlaps++;
  all->grants++;
  if (dlock_unlock_async(l, owner, cycler_unlocked, r) != 0) {
    all->failures++;
    all->running--;
  }
}

typedef struct outsider {
  rp_server_t *s;
  const char *name;
  atomic_int inside, done;
  int rc;
} outsider;

/* Another client's thread: one wait for the lock, held a moment. */
static void *outsider_main(void *p) {
  outsider *o = p;
  dlock_client_t *c = lu_client(o->s);
  dlock_t *l = lu_get(c, o->name);
  o->rc = dlock_trylock(l, 30000, 10000);
  if (o->rc == 0) {
    atomic_store(&o->inside, 1);
    lu_sleep_ms(50);
    atomic_store(&o->inside, 0);
    o->rc = dlock_unlock(l);
  }
  dlock_free(l);
  dlock_client_close(c);
  atomic_store(&o->done, 1);
  return NULL;
}

TEST(async_handover_run_lets_another_client_in) {
  const char *name = "aho:run";
  rp_server_t *s = lu_server(0);
  tl_loop t;
  dlock_client_t *c = tl_async_client(s, &t);
  cyclers all;
  memset(&all, 0, sizeof(all));
  outsider o = {s, name, 0, 0, -1};
  all.outsider_inside = &o.inside;
  all.l = lu_get(c, name);
  all.running = CYCLERS;
  for (int i = 0; i < CYCLERS; i++) {
    all.owner[i] = dlock_owner_new();
    refs[i] = (cycler_ref){&all, i};
    ASSERT_DLOCK_OK(
        dlock_lock_async(all.l, all.owner[i], 10000, cycler_locked, &refs[i]));
  }
  /* The loop's owners hand the lock round among themselves. */
  int64_t end = lu_now_ms() + 30000;
  while (handovers(c) < 2 * DLOCK__HANDOVER_RUN_MAX) {
    ASSERT_LT(lu_now_ms(), end);
    tl_turn(&t, 20);
  }
  pthread_t th;
  ASSERT_EQ(pthread_create(&th, NULL, outsider_main, &o), 0);
  /* It gets in while the loop's owners go on: each run of hand-overs ends
   * with a release for every client. */
  end = lu_now_ms() + 60000;
  while (!atomic_load(&o.done)) {
    ASSERT_LT(lu_now_ms(), end);
    tl_turn(&t, 20);
  }
  ASSERT_EQ(pthread_join(th, NULL), 0);
  ASSERT_DLOCK_OK(o.rc);
  all.stop = 1;
  end = lu_now_ms() + 30000;
  while (all.running > 0) {
    ASSERT_LT(lu_now_ms(), end);
    tl_turn(&t, 20);
  }
  printf("%d grants in the loop, %llu of them handed over\n", all.grants,
         (unsigned long long)handovers(c));
  ASSERT_EQ(all.failures, 0);
  ASSERT_EQ(all.overlaps, 0);
  ASSERT_EQ(lu_exists(s, name), 0);
  ASSERT_EQ(dlock_loop_pending(c), 0);
  dlock_free(all.l);
  dlock_client_close(c);
  tl_close(&t);
  rp_free(s);
}

/* ---- closing with a hand-over in flight --------------------------------- */

/* Hands the lock from 'a' to 'b' and frees it, so that the server has
 * the scripts: a close then finds the answers in. */
static void hand_round(tl_loop *t, rp_server_t *s, dlock_t *l, uint64_t a,
                       uint64_t b, const char *ch) {
  lock_ok(t, l, a, 60000);
  tl_done w = {0}, u = {0}, u2 = {0};
  start_waiter(t, s, l, b, 60000, ch, &w);
  ASSERT_DLOCK_OK(dlock_unlock_async(l, a, tl_done_cb, &u));
  tl_run_until(t, &w.calls, 10000);
  ASSERT_DLOCK_OK(w.status);
  ASSERT_DLOCK_OK(dlock_unlock_async(l, b, tl_done_cb, &u2));
  tl_run_until(t, &u2.calls, 10000);
  ASSERT_DLOCK_OK(u2.status);
  tl_run_until(t, &u.calls, 10000);
}

/* The unlock that hands the lock over is sent, and the client closes
 * before the loop runs again: each callback runs once, and the lock the
 * waiter was handed is given back. */
TEST(async_close_with_a_handover_in_flight_leaves_no_lock) {
  const char *name = "aho:close";
  rp_server_t *s = lu_server(0);
  tl_loop t;
  dlock_client_t *c = tl_async_client(s, &t);
  dlock_t *l = lu_get(c, name);
  char ch[256];
  lu_channel(ch, sizeof(ch), name, strlen(name));
  redisContext *sub = lu_subscribe(s, ch, strlen(ch));
  uint64_t a = dlock_owner_new(), b = dlock_owner_new();
  hand_round(&t, s, l, a, b, ch);
  lock_ok(&t, l, a, 60000);
  tl_done w = {0}, u = {0};
  start_waiter(&t, s, l, b, 60000, ch, &w);
  ASSERT_DLOCK_OK(dlock_unlock_async(l, a, tl_done_cb, &u));
  dlock_client_close(c);
  ASSERT_EQ(u.calls, 1);
  ASSERT_EQ(w.calls, 1);
  ASSERT_EQ(w.status, DLOCK_ECANCELED);
  printf("unlock: %d (%s)\n", u.status, u.detail);
  /* A minute's lease on either owner would still be there. */
  ASSERT_EQ(lu_exists(s, name), 0);
  redisFree(sub);
  dlock_free(l);
  tl_close(&t);
  rp_free(s);
}
