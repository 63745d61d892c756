/*
 * The spin lock (dlock_get_spin): the reentrant lock's layout, but waiters
 * retry with exponential back-off (1 ms doubling to 128 ms, with jitter)
 * and never use pub/sub.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "lock_util.h"

static dlock_t *spin_get(dlock_client_t *c, const char *name) {
  dlock_t *l = NULL;
  ASSERT_DLOCK_OK(dlock_get_spin(c, name, &l));
  ASSERT_NOT_NULL(l);
  ASSERT_EQ(dlock_kind(l), DLOCK_SPIN);
  return l;
}

/* Channels subscribed on the server right now, printed. */
static int64_t all_channels(rp_server_t *s) {
  redisReply *r = rp_cmd(s, "PUBSUB CHANNELS");
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->type, REDIS_REPLY_ARRAY);
  for (size_t i = 0; i < r->elements; i++)
    printf("subscribed: %s\n", r->element[i]->str);
  int64_t n = (int64_t)r->elements;
  freeReplyObject(r);
  return n + lu_reply_int(rp_cmd(s, "PUBSUB NUMPAT"));
}

/* Script calls so far (EVALSHA and EVAL). */
static int64_t script_calls(rp_server_t *s) {
  return lu_cmd_calls(s, "evalsha") + lu_cmd_calls(s, "eval");
}

typedef struct spin_waiter {
  dlock_t *l;
  int64_t wait_ms; /* DLOCK_WAIT_FOREVER: dlock_lock */
  int64_t lease_ms;
  uint64_t owner;
  int rc;
  int64_t asked_ms, acquired_ms;
  atomic_int started;
} spin_waiter_t;

static void *spin_waiter_main(void *p) {
  spin_waiter_t *w = p;
  w->asked_ms = lu_now_ms();
  atomic_store(&w->started, 1);
  w->rc = w->wait_ms == DLOCK_WAIT_FOREVER
              ? dlock_lock_as(w->l, w->owner, w->lease_ms)
              : dlock_trylock_as(w->l, w->owner, w->wait_ms, w->lease_ms);
  w->acquired_ms = lu_now_ms();
  return NULL;
}

static void spin_waiter_init(spin_waiter_t *w, dlock_t *l, int64_t wait_ms) {
  memset(w, 0, sizeof(*w));
  w->l = l;
  w->wait_ms = wait_ms;
  w->lease_ms = 10000;
  w->owner = dlock_owner_new();
  atomic_init(&w->started, 0);
}

/* ---- exclusion ------------------------------------------------------------
 */

typedef struct excl_arg {
  dlock_t *l;
  rp_server_t *s;
  int iter;
  atomic_int *inside, *overlaps, *token_bad;
  _Atomic uint64_t *last_token;
  int rc;
} excl_arg_t;

static void *excl_main(void *p) {
  excl_arg_t *a = p;
  redisContext *r = lu_connect(a->s);
  if (r == NULL) {
    a->rc = DLOCK_EIO;
    return NULL;
  }
  for (int i = 0; i < a->iter; i++) {
    a->rc = i % 2 ? dlock_lock(a->l, 10000) : dlock_lock(a->l, DLOCK_WATCHDOG);
    if (a->rc)
      break;
    if (atomic_fetch_add(a->inside, 1) != 0)
      atomic_fetch_add(a->overlaps, 1);
    uint64_t tok = dlock_token(a->l);
    if (tok <= atomic_load(a->last_token))
      atomic_fetch_add(a->token_bad, 1);
    atomic_store(a->last_token, tok);
    redisReply *g = redisCommand(r, "GET spin:counter");
    long long v =
        g && g->type == REDIS_REPLY_STRING ? strtoll(g->str, NULL, 10) : 0;
    if (g)
      freeReplyObject(g);
    redisReply *x = redisCommand(r, "SET spin:counter %lld", v + 1);
    if (x)
      freeReplyObject(x);
    atomic_fetch_sub(a->inside, 1);
    a->rc = dlock_unlock(a->l);
    if (a->rc)
      break;
  }
  redisFree(r);
  return NULL;
}

TEST(exclusion_threads) {
  enum { T = 6, ITER = 50 };
  rp_server_t *s = lu_server(1);
  dlock_client_t *c1 = lu_client(s), *c2 = lu_client(s);
  dlock_t *l1 = spin_get(c1, "spin:excl"), *l2 = spin_get(c2, "spin:excl");
  atomic_int inside, overlaps, token_bad;
  _Atomic uint64_t last;
  atomic_init(&inside, 0);
  atomic_init(&overlaps, 0);
  atomic_init(&token_bad, 0);
  atomic_init(&last, 0);
  excl_arg_t a[T];
  pthread_t t[T];
  int64_t t0 = lu_now_ms();
  for (int i = 0; i < T; i++) {
    a[i] = (excl_arg_t){i % 2 ? l1 : l2, s,          ITER,  &inside,
                        &overlaps,       &token_bad, &last, 0};
    ASSERT_EQ(pthread_create(&t[i], NULL, excl_main, &a[i]), 0);
  }
  for (int i = 0; i < T; i++)
    ASSERT_EQ(pthread_join(t[i], NULL), 0);
  printf("%d threads x %d: %" PRId64 " ms\n", (int)T, (int)ITER,
         lu_now_ms() - t0);
  for (int i = 0; i < T; i++)
    ASSERT_DLOCK_OK(a[i].rc);
  ASSERT_EQ(atomic_load(&overlaps), 0);
  ASSERT_EQ(atomic_load(&token_bad), 0);
  ASSERT_EQ(lu_get_num_n(s, "spin:counter", 12), T * ITER);
  ASSERT_EQ(lu_exists(s, "spin:excl"), 0);
  dlock_free(l1);
  dlock_free(l2);
  dlock_client_close(c1);
  dlock_client_close(c2);
  rp_free(s);
}

/* ---- waiting without pub/sub ----------------------------------------------
 */

TEST(waiter_without_pubsub) {
  const char *name = "spin:nopubsub";
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = spin_get(c, name);
  char ch[256];
  lu_channel(ch, sizeof(ch), name, strlen(name));
  uint64_t holder = dlock_owner_new();
  ASSERT_DLOCK_OK(dlock_lock_as(l, holder, 10000));
  spin_waiter_t w;
  spin_waiter_init(&w, l, DLOCK_WAIT_FOREVER);
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, spin_waiter_main, &w), 0);
  /* Watch while it waits: no subscription at all, on any channel. */
  for (int i = 0; i < 10; i++) {
    lu_sleep_ms(30);
    ASSERT_EQ(lu_numsub(s, ch, strlen(ch)), 0);
    ASSERT_EQ(all_channels(s), 0);
  }
  ASSERT_EQ(dlock_is_held(l), 0);
  int64_t t_rel = lu_now_ms();
  ASSERT_DLOCK_OK(dlock_unlock_as(l, holder));
  ASSERT_EQ(pthread_join(t, NULL), 0);
  ASSERT_DLOCK_OK(w.rc);
  int64_t d = w.acquired_ms - t_rel;
  printf("waiter acquired %" PRId64 " ms after the release\n", d);
  /* The back-off is capped at 128 ms (plus jitter): far below the 10 s
   * lease the waiter would otherwise sleep out. */
  ASSERT_LT(d, 500);
  ASSERT_EQ(dlock_hold_count_as(l, w.owner), 1);
  ASSERT_DLOCK_OK(dlock_unlock_as(l, w.owner));
  ASSERT_EQ(lu_exists(s, name), 0);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

TEST(back_off_bounds_attempts) {
  const char *name = "spin:backoff";
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = spin_get(c, name);
  uint64_t holder = dlock_owner_new();
  /* Warm up: the scripts are loaded. */
  ASSERT_DLOCK_OK(dlock_lock_as(l, holder, 10000));
  ASSERT_DLOCK_OK(dlock_unlock_as(l, holder));

  ASSERT_DLOCK_OK(dlock_lock_as(l, holder, 10000));
  int64_t before = script_calls(s);
  spin_waiter_t w;
  spin_waiter_init(&w, l, DLOCK_WAIT_FOREVER);
  w.lease_ms = 5000;
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, spin_waiter_main, &w), 0);
  while (!atomic_load(&w.started))
    lu_sleep_ms(1);
  lu_sleep_ms(500);
  int64_t t_rel = lu_now_ms();
  ASSERT_DLOCK_OK(dlock_unlock_as(l, holder));
  ASSERT_EQ(pthread_join(t, NULL), 0);
  ASSERT_DLOCK_OK(w.rc);
  int64_t calls = script_calls(s) - before;
  printf("script calls while waiting %" PRId64 " ms: %" PRId64
         " (incl. the holder's unlock); acquired %" PRId64
         " ms after the release\n",
         w.acquired_ms - w.asked_ms, calls, w.acquired_ms - t_rel);
  /* 1, 2, 4, ... 128, 128 ms: about a dozen attempts in 500 ms; a 1 ms
   * poll would make hundreds. */
  ASSERT_LT(calls, 60);
  ASSERT_GE(calls, 3); /* it does retry rather than sleep out the lease */
  ASSERT_LT(w.acquired_ms - t_rel, 500);
  ASSERT_EQ(lu_reply_int(rp_cmd(s, "PUBSUB NUMPAT")), 0);
  ASSERT_DLOCK_OK(dlock_unlock_as(l, w.owner));
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/* Redisson's constant back-off (spin_backoff DLOCK_BACKOFF_CONSTANT): a
 * waiter tries every 64 ms, never more often (a pause is never shorter
 * than asked; load only makes them longer), and does keep trying. The
 * default back-off makes about nine attempts in its first 200 ms. */
TEST(constant_back_off) {
  const char *name = "spin:constant";
  rp_server_t *s = lu_server(0);
  dlock_options_t o;
  lu_options(&o, s);
  o.spin_backoff = 2;
  dlock_client_t *bad = NULL;
  ASSERT_EQ(dlock_client_open(&o, &bad), DLOCK_EINVAL);
  ASSERT(strstr(dlock_last_error(), "spin_backoff") != NULL);
  ASSERT_NULL(bad);
  o.spin_backoff = DLOCK_BACKOFF_CONSTANT;
  dlock_client_t *c = lu_client_opts(&o);
  dlock_t *l = spin_get(c, name);
  uint64_t holder = dlock_owner_new();
  ASSERT_DLOCK_OK(dlock_lock_as(l, holder, 10000)); /* scripts loaded */
  int64_t before = script_calls(s);
  int64_t t0 = lu_now_ms();
  spin_waiter_t w;
  spin_waiter_init(&w, l, DLOCK_WAIT_FOREVER);
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, spin_waiter_main, &w), 0);
  lu_sleep_ms(200);
  int64_t early = script_calls(s) - before;
  int64_t early_ms = lu_now_ms() - t0;
  lu_sleep_ms(800);
  int64_t all = script_calls(s) - before;
  int64_t all_ms = lu_now_ms() - t0;
  printf("constant back-off: %" PRId64 " attempts in %" PRId64 " ms, %" PRId64
         " in %" PRId64 " ms\n",
         early, early_ms, all, all_ms);
  /* One at once, then one per 64 ms at most: attempt k is sent at least
   * (k - 1) * 64 ms after the waiter started. */
  ASSERT_LE(early, early_ms / 64 + 1);
  ASSERT_LE(all, all_ms / 64 + 1);
  ASSERT_GE(all, 3);
  ASSERT_EQ(atomic_load(&w.started), 1);
  ASSERT_DLOCK_OK(dlock_unlock_as(l, holder));
  ASSERT_EQ(pthread_join(t, NULL), 0);
  ASSERT_DLOCK_OK(w.rc);
  ASSERT_DLOCK_OK(dlock_unlock_as(l, w.owner));
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

TEST(trylock_wait_bound) {
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = spin_get(c, "spin:wait");
  uint64_t holder = dlock_owner_new();
  ASSERT_DLOCK_OK(dlock_lock_as(l, holder, 10000));
  int64_t t0 = lu_now_ms();
  ASSERT_DLOCK_ERR(dlock_trylock(l, 0, 1000), DLOCK_ETIMEDOUT);
  ASSERT_LT(lu_now_ms() - t0, 500);
  t0 = lu_now_ms();
  ASSERT_DLOCK_ERR(dlock_trylock(l, 300, 1000), DLOCK_ETIMEDOUT);
  int64_t took = lu_now_ms() - t0;
  printf("gave up after %" PRId64 " ms\n", took);
  ASSERT_GE(took, 250);
  ASSERT_LT(took, 1000);
  ASSERT_DLOCK_OK(dlock_unlock_as(l, holder));
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/* The lease of a holder that never unlocks: the spinning waiter gets the
 * lock soon after it expires. */
TEST(waiter_after_expiry) {
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = spin_get(c, "spin:expiry");
  uint64_t holder = dlock_owner_new();
  ASSERT_DLOCK_OK(dlock_lock_as(l, holder, 400));
  int64_t t0 = lu_now_ms();
  ASSERT_DLOCK_OK(dlock_trylock(l, 3000, 5000));
  int64_t took = lu_now_ms() - t0;
  printf("acquired %" PRId64 " ms after asking (lease 400)\n", took);
  ASSERT_GE(took, 300);
  ASSERT_LT(took, 1000);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  ASSERT_DLOCK_ERR(dlock_unlock_as(l, holder), DLOCK_ELOST);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/* ---- reentrancy and layout ----------------------------------------------- */

TEST(reentrancy_and_layout) {
  const char *name = "spin:re";
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = spin_get(c, name);
  char field[256], tok[256];
  lu_field(field, sizeof(field), c, dlock_self());
  lu_token_key(tok, sizeof(tok), name, strlen(name));

  ASSERT_DLOCK_OK(dlock_lock(l, 5000));
  redisReply *r = rp_cmd(s, "TYPE %s", name);
  ASSERT_STR_EQ(r->str, "hash");
  freeReplyObject(r);
  ASSERT_EQ(lu_hlen(s, name), 1);
  ASSERT_EQ(lu_hget_num(s, name, field), 1);
  int64_t p = lu_pttl(s, name);
  ASSERT_GT(p, 3000);
  ASSERT_LE(p, 5000);
  uint64_t t1 = dlock_token(l);
  ASSERT_GT(t1, 0);
  ASSERT_EQ(lu_get_num_n(s, tok, strlen(tok)), (int64_t)t1);

  ASSERT_DLOCK_OK(dlock_lock(l, 5000));
  ASSERT_DLOCK_OK(dlock_trylock(l, 0, 5000));
  ASSERT_EQ(dlock_hold_count(l), 3);
  ASSERT_EQ(lu_hget_num(s, name, field), 3);
  ASSERT_EQ(dlock_token(l), t1);
  ASSERT_EQ(lu_get_num_n(s, tok, strlen(tok)), (int64_t)t1);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  ASSERT_DLOCK_OK(dlock_unlock(l));
  ASSERT_EQ(lu_hget_num(s, name, field), 1);
  ASSERT_EQ(dlock_is_held(l), 1);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  ASSERT_EQ(lu_exists(s, name), 0);
  ASSERT_DLOCK_ERR(dlock_unlock(l), DLOCK_ENOTHELD);
  ASSERT_DLOCK_OK(dlock_lock(l, 5000));
  ASSERT_EQ(dlock_token(l), t1 + 1);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/* Same layout as the reentrant lock: the two kinds exclude each other. */
TEST(interop_with_reentrant) {
  const char *name = "spin:interop";
  rp_server_t *s = lu_server(0);
  dlock_client_t *c1 = lu_client(s), *c2 = lu_client(s);
  dlock_t *sp = NULL;
  ASSERT_DLOCK_OK(dlock_get_kind(c1, DLOCK_SPIN, name, strlen(name), &sp));
  ASSERT_EQ(dlock_kind(sp), DLOCK_SPIN);
  dlock_t *re = lu_get(c2, name);
  ASSERT_EQ(dlock_kind(re), DLOCK_REENTRANT);

  ASSERT_DLOCK_OK(dlock_lock(re, 10000));
  ASSERT_DLOCK_ERR(dlock_trylock(sp, 0, 10000), DLOCK_ETIMEDOUT);
  spin_waiter_t w;
  spin_waiter_init(&w, sp, 5000);
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, spin_waiter_main, &w), 0);
  lu_sleep_ms(200);
  int64_t t_rel = lu_now_ms();
  ASSERT_DLOCK_OK(dlock_unlock(re));
  ASSERT_EQ(pthread_join(t, NULL), 0);
  ASSERT_DLOCK_OK(w.rc);
  printf("spin waiter acquired %" PRId64 " ms after the reentrant release\n",
         w.acquired_ms - t_rel);
  ASSERT_LT(w.acquired_ms - t_rel, 500);
  /* The reentrant lock now waits for the spin holder, and is woken by its
   * release (the spin lock's unlock still announces on the channel). */
  ASSERT_DLOCK_ERR(dlock_trylock(re, 0, 10000), DLOCK_ETIMEDOUT);
  ASSERT_DLOCK_OK(dlock_unlock_as(sp, w.owner));
  ASSERT_DLOCK_OK(dlock_trylock(re, 0, 10000));
  ASSERT_DLOCK_OK(dlock_unlock(re));
  dlock_free(sp);
  dlock_free(re);
  dlock_client_close(c1);
  dlock_client_close(c2);
  rp_free(s);
}

/* ---- watchdog -------------------------------------------------------------
 */

TEST(watchdog) {
  rp_server_t *s = lu_server(0);
  lu_lost_t lost;
  lu_lost_init(&lost);
  dlock_options_t o;
  lu_options(&o, s); /* watchdog 600 ms */
  o.on_lost = lu_lost_cb;
  o.on_lost_data = &lost;
  dlock_client_t *c = lu_client_opts(&o);
  dlock_t *l = spin_get(c, "spin:wd");
  ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));
  for (int i = 0; i < 8; i++) { /* 2 s: more than three leases */
    lu_sleep_ms(250);
    int64_t p = lu_pttl(s, "spin:wd");
    ASSERT_GT(p, 0);
    ASSERT_LE(p, 600);
  }
  ASSERT_EQ(lu_lost_count(&lost), 0);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  ASSERT_EQ(lu_exists(s, "spin:wd"), 0);
  lu_sleep_ms(700);
  ASSERT_EQ(lu_exists(s, "spin:wd"), 0);

  /* A watchdog hold deleted behind its back is reported. */
  ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));
  lu_ok(rp_cmd(s, "DEL spin:wd"));
  ASSERT_GE(lu_lost_wait(&lost, 2000), 1);
  ASSERT_DLOCK_ERR(dlock_unlock(l), DLOCK_ELOST);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/* ---- riding a killed connection ------------------------------------------
 */

/* Clients the server holds back (CLIENT PAUSE, as for a blocking
 * command). */
static int64_t blocked_clients(rp_server_t *s) {
  redisReply *r = rp_cmd(s, "INFO clients");
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->type, REDIS_REPLY_STRING);
  const char *p = strstr(r->str, "blocked_clients:");
  int64_t n =
      p != NULL ? strtoll(p + strlen("blocked_clients:"), NULL, 10) : -1;
  freeReplyObject(r);
  return n;
}

typedef struct spin_call {
  dlock_t *l;
  uint64_t owner;
  int unlock;      /* 0: trylock, 1: unlock */
  int64_t wait_ms; /* the trylock's */
  int rc;
  atomic_int done;
  char detail[300];
} spin_call_t;

static void *spin_call_main(void *p) {
  spin_call_t *a = p;
  a->rc = a->unlock ? dlock_unlock_as(a->l, a->owner)
                    : dlock_trylock_as(a->l, a->owner, a->wait_ms, 20000);
  snprintf(a->detail, sizeof(a->detail), "%s", dlock_last_error());
  atomic_store(&a->done, 1);
  return NULL;
}

static void spin_call_init(spin_call_t *a, dlock_t *l, uint64_t owner,
                           int unlock, int64_t wait_ms) {
  memset(a, 0, sizeof(*a));
  a->l = l;
  a->owner = owner;
  a->unlock = unlock;
  a->wait_ms = wait_ms;
  a->rc = -100;
  atomic_init(&a->done, 0);
}

/*
 * Runs 'a' while the server holds writes back (CLIENT PAUSE WRITE), and,
 * each time a script of the client is held there, kills its connection
 * (CLIENT KILL TYPE normal, as an operator or a proxy may), up to 'kills'
 * times while the call goes on; then lets writes go on, unless
 * 'keep_paused'. A killed script never ran, and its caller got "closed the
 * connection".
 */
static void kill_during(rp_server_t *s, spin_call_t *a, int kills,
                        int keep_paused) {
  lu_ok(rp_cmd(s, "CLIENT PAUSE 20000 WRITE"));
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, spin_call_main, a), 0);
  /* Each time a write of the client is held, its connection is killed:
   * up to 'kills' times, while the call goes on. */
  for (int k = 0; k < kills && !atomic_load(&a->done); k++) {
    int64_t until = lu_now_ms() + 20000;
    while (blocked_clients(s) < 1 && !atomic_load(&a->done) &&
           lu_now_ms() < until)
      lu_sleep_ms(1);
    if (atomic_load(&a->done))
      break;
    ASSERT_GE(lu_reply_int(rp_cmd(s, "CLIENT KILL TYPE normal SKIPME yes")), 1);
  }
  if (!keep_paused)
    lu_ok(rp_cmd(s, "CLIENT UNPAUSE"));
  ASSERT_EQ(pthread_join(t, NULL), 0);
  printf("%s after CLIENT KILL: %s%s%s\n", a->unlock ? "unlock" : "trylock",
         dlock_err_name(a->rc), a->rc ? ": " : "", a->rc ? a->detail : "");
}

/* A spin lock's trylock with a wait and its unlock ride out a connection
 * the server killed under them, as the reentrant lock's do: each is sent
 * again on a new connection within its wait (the unlock within
 * outage_wait_ms), rather than fail with DLOCK_EIO. */
TEST(rides_a_killed_connection) {
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = spin_get(c, "spin:kill");
  uint64_t owner = dlock_owner_new();
  /* Scripts loaded, connection made. */
  ASSERT_DLOCK_OK(dlock_lock_as(l, owner, 20000));
  ASSERT_DLOCK_OK(dlock_unlock_as(l, owner));

  spin_call_t a;
  spin_call_init(&a, l, owner, 0, 20000);
  kill_during(s, &a, 1, 0);
  ASSERT_DLOCK_OK(a.rc);
  ASSERT_EQ(lu_exists(s, "spin:kill"), 1);
  ASSERT_EQ(dlock_is_held_as(l, owner), 1);

  spin_call_t u;
  spin_call_init(&u, l, owner, 1, 0);
  kill_during(s, &u, 1, 0);
  ASSERT_DLOCK_OK(u.rc);
  ASSERT_EQ(lu_exists(s, "spin:kill"), 0);
  ASSERT_EQ(dlock_is_held_as(l, owner), 0);

  /* Taken again without a wait, as a reentrant hold: killed, that attempt
   * fails (a call without a wait does not ride) and its outcome is
   * unknown, so the unlock that follows gives it back first (settle.c).
   * Writes stay held, and the give-back is killed too, by the client's
   * settler thread or by the unlock: the unlock rides that out as it
   * rides out the kill of its own script, where it failed at once. */
  ASSERT_DLOCK_OK(dlock_lock_as(l, owner, 20000));
  spin_call_t again;
  spin_call_init(&again, l, owner, 0, 0);
  kill_during(s, &again, 1, 1);
  ASSERT_DLOCK_ERR(again.rc, DLOCK_EIO);
  spin_call_init(&u, l, owner, 1, 0);
  kill_during(s, &u, 3, 0);
  ASSERT_DLOCK_OK(u.rc);
  ASSERT_EQ(lu_exists(s, "spin:kill"), 0);
  ASSERT_EQ(dlock_is_held_as(l, owner), 0);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}
