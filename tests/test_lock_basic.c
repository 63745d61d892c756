/*
 * Integration tests of the reentrant lock against a real redis-server: the
 * verbs, hold counts, ownership, leases, force unlock, inspection, and the
 * Redisson layout and protocol checked with raw commands.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "lock_util.h"

/* ---- lock / unlock ----------------------------------------------------- */

TEST(basic_lock_unlock) {
  rp_server_t *s = lu_server(1);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = lu_get(c, "basic:lock");

  ASSERT_EQ(dlock_is_locked(l), 0);
  ASSERT_EQ(dlock_is_held(l), 0);
  ASSERT_EQ(dlock_hold_count(l), 0);
  ASSERT_DLOCK_OK(dlock_lock(l, 10000));
  ASSERT_EQ(dlock_is_locked(l), 1);
  ASSERT_EQ(dlock_is_held(l), 1);
  ASSERT_EQ(dlock_hold_count(l), 1);
  ASSERT_EQ(lu_exists(s, "basic:lock"), 1);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  ASSERT_EQ(dlock_is_locked(l), 0);
  ASSERT_EQ(dlock_is_held(l), 0);
  ASSERT_EQ(dlock_hold_count(l), 0);
  ASSERT_EQ(lu_exists(s, "basic:lock"), 0);

  /* Again, with the watchdog and with trylock. */
  ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));
  ASSERT_EQ(dlock_is_held(l), 1);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  ASSERT_DLOCK_OK(dlock_trylock(l, 0, 5000));
  ASSERT_EQ(dlock_is_held(l), 1);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  ASSERT_EQ(lu_exists(s, "basic:lock"), 0);

  size_t len = 0;
  ASSERT_STR_EQ(dlock_name(l, &len), "basic:lock");
  ASSERT_EQ(len, strlen("basic:lock"));

  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

TEST(basic_two_handles_share_lock) {
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  dlock_t *a = lu_get(c, "basic:shared");
  dlock_t *b = lu_get(c, "basic:shared");
  /* Same client, same thread: one owner, so b sees a's hold. */
  ASSERT_DLOCK_OK(dlock_lock(a, 10000));
  ASSERT_EQ(dlock_is_held(b), 1);
  ASSERT_EQ(dlock_hold_count(b), 1);
  ASSERT_DLOCK_OK(dlock_lock(b, 10000));
  ASSERT_EQ(dlock_hold_count(a), 2);
  ASSERT_DLOCK_OK(dlock_unlock(a));
  ASSERT_DLOCK_OK(dlock_unlock(b));
  ASSERT_EQ(dlock_is_locked(a), 0);
  /* Freeing a handle does not release the lock. */
  ASSERT_DLOCK_OK(dlock_lock(a, 10000));
  dlock_free(a);
  ASSERT_EQ(dlock_is_held(b), 1);
  ASSERT_DLOCK_OK(dlock_unlock(b));
  dlock_free(b);
  dlock_client_close(c);
  rp_free(s);
}

TEST(basic_trylock_zero_wait_on_held) {
  rp_server_t *s = lu_server(1);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = lu_get(c, "basic:try0");
  uint64_t other = dlock_owner_new();
  ASSERT_DLOCK_OK(dlock_lock_as(l, other, 20000));

  int64_t t0 = lu_now_ms();
  ASSERT_DLOCK_ERR(dlock_trylock(l, 0, 5000), DLOCK_ETIMEDOUT);
  int64_t took = lu_now_ms() - t0;
  printf("trylock(wait 0) on a held lock took %" PRId64 " ms\n", took);
  ASSERT_LT(took, 500);
  ASSERT_EQ(dlock_is_held(l), 0);
  ASSERT_EQ(dlock_is_held_as(l, other), 1);
  /* The failed attempt did not add a field or touch the count. */
  ASSERT_EQ(lu_hlen(s, "basic:try0"), 1);

  ASSERT_DLOCK_OK(dlock_unlock_as(l, other));
  ASSERT_DLOCK_OK(dlock_trylock(l, 0, 5000));
  ASSERT_DLOCK_OK(dlock_unlock(l));
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/* ---- reentrancy -------------------------------------------------------- */

TEST(basic_reentrant_hold_counts) {
  rp_server_t *s = lu_server(1);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = lu_get(c, "basic:reent");
  char f[256];
  lu_field(f, sizeof(f), c, dlock_self());

  ASSERT_DLOCK_OK(dlock_lock(l, 10000));
  ASSERT_DLOCK_OK(dlock_trylock(l, 0, 10000));
  ASSERT_DLOCK_OK(dlock_lock(l, 10000));
  ASSERT_EQ(dlock_hold_count(l), 3);
  ASSERT_EQ(lu_hget_num(s, "basic:reent", f), 3);
  ASSERT_EQ(lu_hlen(s, "basic:reent"), 1);

  ASSERT_DLOCK_OK(dlock_unlock(l));
  ASSERT_EQ(dlock_hold_count(l), 2);
  ASSERT_EQ(lu_hget_num(s, "basic:reent", f), 2);
  ASSERT_EQ(dlock_is_locked(l), 1);
  /* A partial unlock restores the lease. */
  int64_t pttl = lu_pttl(s, "basic:reent");
  ASSERT_GT(pttl, 5000);
  ASSERT_LE(pttl, 10000);

  ASSERT_DLOCK_OK(dlock_unlock(l));
  ASSERT_EQ(dlock_hold_count(l), 1);
  ASSERT_EQ(dlock_is_locked(l), 1);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  ASSERT_EQ(dlock_hold_count(l), 0);
  ASSERT_EQ(dlock_is_locked(l), 0);
  ASSERT_EQ(lu_exists(s, "basic:reent"), 0);
  ASSERT_DLOCK_ERR(dlock_unlock(l), DLOCK_ENOTHELD);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

TEST(basic_reentrant_watchdog) {
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = lu_get(c, "basic:reentwd");
  for (int i = 0; i < 5; i++)
    ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));
  ASSERT_EQ(dlock_hold_count(l), 5);
  for (int i = 0; i < 4; i++)
    ASSERT_DLOCK_OK(dlock_unlock(l));
  ASSERT_EQ(dlock_hold_count(l), 1);
  /* Still renewed with one hold left: alive past two watchdog timeouts. */
  lu_sleep_ms(1300);
  ASSERT_EQ(dlock_is_held(l), 1);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  ASSERT_EQ(lu_exists(s, "basic:reentwd"), 0);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/* ---- ownership --------------------------------------------------------- */

typedef struct try_arg {
  dlock_t *l;
  uint64_t owner; /* 0: the thread itself */
  int64_t wait_ms;
  int64_t lease_ms;
  int rc;
  int rc2;
  int held;
  int count;
  int64_t done_ms;
  double done_ms_f;
} try_arg_t;

static void *unlock_thread(void *p) {
  try_arg_t *a = p;
  a->rc = a->owner ? dlock_unlock_as(a->l, a->owner) : dlock_unlock(a->l);
  a->held = dlock_is_held(a->l);
  a->count = dlock_hold_count(a->l);
  return NULL;
}

TEST(basic_non_owner_unlock_other_thread) {
  rp_server_t *s = lu_server(1);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = lu_get(c, "basic:nonowner");
  ASSERT_DLOCK_OK(dlock_lock(l, 10000));

  pthread_t t;
  try_arg_t a;
  memset(&a, 0, sizeof(a));
  a.l = l;
  ASSERT_EQ(pthread_create(&t, NULL, unlock_thread, &a), 0);
  ASSERT_EQ(pthread_join(t, NULL), 0);
  ASSERT_EQ(a.rc, DLOCK_ENOTHELD);
  ASSERT_EQ(a.held, 0);
  ASSERT_EQ(a.count, 0);

  ASSERT_EQ(dlock_is_locked(l), 1);
  ASSERT_EQ(dlock_is_held(l), 1);
  ASSERT_EQ(dlock_hold_count(l), 1);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

TEST(basic_non_owner_unlock_other_client) {
  rp_server_t *s = lu_server(0);
  dlock_client_t *c1 = lu_client(s);
  dlock_client_t *c2 = lu_client(s);
  ASSERT(strcmp(dlock_client_id(c1), dlock_client_id(c2)) != 0);
  dlock_t *l1 = lu_get(c1, "basic:nonowner2");
  dlock_t *l2 = lu_get(c2, "basic:nonowner2");

  ASSERT_DLOCK_OK(dlock_lock(l1, 10000));
  /* Same thread, other client: another owner. */
  ASSERT_EQ(dlock_is_held(l2), 0);
  ASSERT_EQ(dlock_is_locked(l2), 1);
  ASSERT_DLOCK_ERR(dlock_unlock(l2), DLOCK_ENOTHELD);
  ASSERT_DLOCK_ERR(dlock_trylock(l2, 0, 10000), DLOCK_ETIMEDOUT);
  ASSERT_EQ(dlock_force_unlock(l2), 1);
  ASSERT_EQ(dlock_is_locked(l1), 0);
  /* l1's owner held it and it was deleted meanwhile. */
  ASSERT_DLOCK_ERR(dlock_unlock(l1), DLOCK_ELOST);

  ASSERT_DLOCK_OK(dlock_lock(l2, 10000));
  ASSERT_DLOCK_ERR(dlock_unlock(l1), DLOCK_ENOTHELD);
  ASSERT_EQ(dlock_is_held(l2), 1);
  ASSERT_DLOCK_OK(dlock_unlock(l2));
  dlock_free(l1);
  dlock_free(l2);
  dlock_client_close(c1);
  dlock_client_close(c2);
  rp_free(s);
}

TEST(basic_unlock_not_held) {
  rp_server_t *s = lu_server(1);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = lu_get(c, "basic:nothing");
  ASSERT_DLOCK_ERR(dlock_unlock(l), DLOCK_ENOTHELD);
  ASSERT_GT((int64_t)strlen(dlock_last_error()), 0);
  ASSERT_DLOCK_ERR(dlock_unlock_as(l, dlock_owner_new()), DLOCK_ENOTHELD);
  ASSERT_EQ(lu_exists(s, "basic:nothing"), 0);
  /* A foreign holder is not disturbed by our failed unlock. */
  lu_ok(rp_cmd(s, "HSET basic:nothing someuuid:1 1"));
  lu_ok(rp_cmd(s, "PEXPIRE basic:nothing 30000"));
  ASSERT_DLOCK_ERR(dlock_unlock(l), DLOCK_ENOTHELD);
  ASSERT_EQ(lu_hget_num(s, "basic:nothing", "someuuid:1"), 1);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

TEST(basic_explicit_owner_across_threads) {
  rp_server_t *s = lu_server(1);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = lu_get(c, "basic:owner");
  uint64_t owner = dlock_owner_new();
  char f[256];
  lu_field(f, sizeof(f), c, owner);

  ASSERT_DLOCK_OK(dlock_lock_as(l, owner, 10000));
  ASSERT_DLOCK_OK(dlock_trylock_as(l, owner, 0, 10000));
  ASSERT_EQ(dlock_hold_count_as(l, owner), 2);
  ASSERT_EQ(dlock_is_held_as(l, owner), 1);
  ASSERT_EQ(dlock_is_held(l), 0); /* the thread is not the owner */
  ASSERT_GT(dlock_token_as(l, owner), 0);
  ASSERT_EQ(dlock_token(l), 0);
  ASSERT_EQ(lu_hget_num(s, "basic:owner", f), 2);
  ASSERT_DLOCK_ERR(dlock_unlock(l), DLOCK_ENOTHELD);

  /* Another thread releases with the explicit owner. */
  for (int i = 0; i < 2; i++) {
    pthread_t t;
    try_arg_t a;
    memset(&a, 0, sizeof(a));
    a.l = l;
    a.owner = owner;
    ASSERT_EQ(pthread_create(&t, NULL, unlock_thread, &a), 0);
    ASSERT_EQ(pthread_join(t, NULL), 0);
    ASSERT_EQ(a.rc, 0);
  }
  ASSERT_EQ(dlock_is_locked(l), 0);
  ASSERT_EQ(dlock_is_held_as(l, owner), 0);
  ASSERT_EQ(dlock_token_as(l, owner), 0);
  ASSERT_DLOCK_ERR(dlock_unlock_as(l, owner), DLOCK_ENOTHELD);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/* ---- ttl / is_locked --------------------------------------------------- */

TEST(basic_ttl_values) {
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = lu_get(c, "basic:ttl");
  ASSERT_EQ(dlock_ttl(l), 0);
  ASSERT_DLOCK_OK(dlock_lock(l, 5000));
  int64_t t = dlock_ttl(l);
  ASSERT_GT(t, 3000);
  ASSERT_LE(t, 5000);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  ASSERT_EQ(dlock_ttl(l), 0);

  /* Watchdog: the key lives for watchdog_timeout_ms (600 here). */
  ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));
  t = dlock_ttl(l);
  ASSERT_GT(t, 0);
  ASSERT_LE(t, 600);
  int64_t p = lu_pttl(s, "basic:ttl");
  ASSERT_GT(p, 0);
  ASSERT_LE(p, 600);
  ASSERT_DLOCK_OK(dlock_unlock(l));

  /* Held by some other program without expiry. */
  lu_ok(rp_cmd(s, "HSET basic:ttl other:1 1"));
  ASSERT_EQ(dlock_ttl(l), INT64_MAX);
  ASSERT_EQ(dlock_is_locked(l), 1);
  ASSERT_EQ(dlock_is_held(l), 0);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/* ---- leases ------------------------------------------------------------ */

TEST(basic_lease_expiry) {
  rp_server_t *s = lu_server(1);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = lu_get(c, "basic:lease");
  int64_t t0 = lu_now_ms();
  ASSERT_DLOCK_OK(dlock_lock(l, 300));
  lu_sleep_ms(100);
  ASSERT_EQ(dlock_is_locked(l), 1);
  int64_t gone = lu_wait_gone(s, "basic:lease", 3000);
  ASSERT_GE(gone, 0);
  int64_t freed_at = lu_now_ms() - t0;
  printf("lease 300 ms: free after %" PRId64 " ms\n", freed_at);
  ASSERT_GE(freed_at, 250);
  ASSERT_LT(freed_at, 1500);
  ASSERT_EQ(dlock_is_locked(l), 0);
  ASSERT_EQ(dlock_is_held(l), 0);
  /* It was held and expired: the unlock says so, once. */
  ASSERT_DLOCK_ERR(dlock_unlock(l), DLOCK_ELOST);
  ASSERT_DLOCK_ERR(dlock_unlock(l), DLOCK_ENOTHELD);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

static void *try_thread(void *p) {
  try_arg_t *a = p;
  a->rc = a->owner ? dlock_trylock_as(a->l, a->owner, a->wait_ms, a->lease_ms)
                   : dlock_trylock(a->l, a->wait_ms, a->lease_ms);
  a->done_ms = lu_now_ms();
  a->done_ms_f = lu_now_ms_f();
  if (a->rc == 0) {
    a->held = a->owner ? dlock_is_held_as(a->l, a->owner) : dlock_is_held(a->l);
    a->rc2 = a->owner ? dlock_unlock_as(a->l, a->owner) : dlock_unlock(a->l);
  }
  return NULL;
}

TEST(basic_waiter_gets_expired_lease) {
  /* No unlock message is ever sent: the waiter must still get the lock
   * when the lease runs out (it bounds its sleep by the TTL). */
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = lu_get(c, "basic:leasewait");
  ASSERT_DLOCK_OK(dlock_lock_as(l, dlock_owner_new(), 400));
  int64_t t0 = lu_now_ms();
  pthread_t t;
  try_arg_t a;
  memset(&a, 0, sizeof(a));
  a.l = l;
  a.wait_ms = 5000;
  a.lease_ms = 5000;
  ASSERT_EQ(pthread_create(&t, NULL, try_thread, &a), 0);
  ASSERT_EQ(pthread_join(t, NULL), 0);
  ASSERT_EQ(a.rc, 0);
  ASSERT_EQ(a.held, 1);
  ASSERT_EQ(a.rc2, 0);
  printf("waiter acquired %" PRId64 " ms after a 400 ms lease started\n",
         a.done_ms - t0);
  ASSERT_GE(a.done_ms - t0, 300);
  ASSERT_LT(a.done_ms - t0, 1500);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

TEST(basic_waiter_on_lock_without_expiry) {
  /* Held by another program with no expiry (PTTL -1): a waiter still
   * honours its wait time, and wakes on the unlock message. */
  rp_server_t *s = lu_server(1);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = lu_get(c, "basic:noexp");
  lu_ok(rp_cmd(s, "HSET basic:noexp other:1 1"));
  int64_t t0 = lu_now_ms();
  ASSERT_DLOCK_ERR(dlock_trylock(l, 500, 5000), DLOCK_ETIMEDOUT);
  int64_t took = lu_now_ms() - t0;
  ASSERT_GE(took, 450);
  ASSERT_LT(took, 2000);

  pthread_t t;
  try_arg_t a;
  memset(&a, 0, sizeof(a));
  a.l = l;
  a.wait_ms = DLOCK_WAIT_FOREVER;
  a.lease_ms = 5000;
  ASSERT_EQ(pthread_create(&t, NULL, try_thread, &a), 0);
  lu_sleep_ms(300);
  char ch[128];
  lu_channel(ch, sizeof(ch), "basic:noexp", 11);
  double t1 = lu_now_ms_f();
  lu_ok(rp_cmd(s, "DEL basic:noexp"));
  freeReplyObject(rp_cmd(s, "PUBLISH %s 0", ch));
  ASSERT_EQ(pthread_join(t, NULL), 0);
  ASSERT_EQ(a.rc, 0);
  ASSERT_EQ(a.held, 1);
  printf("woke %.2f ms after the release\n", a.done_ms_f - t1);
  ASSERT_LT(a.done_ms_f - t1, 200.0);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/* ---- force unlock ------------------------------------------------------ */

TEST(basic_force_unlock_wakes_waiter) {
  rp_server_t *s = lu_server(1);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = lu_get(c, "basic:force");
  uint64_t holder = dlock_owner_new();
  ASSERT_DLOCK_OK(dlock_lock_as(l, holder, 30000));

  pthread_t t;
  try_arg_t a;
  memset(&a, 0, sizeof(a));
  a.l = l;
  a.wait_ms = 10000;
  a.lease_ms = 30000;
  ASSERT_EQ(pthread_create(&t, NULL, try_thread, &a), 0);
  lu_sleep_ms(300); /* let it subscribe and sleep */
  double t0 = lu_now_ms_f();
  ASSERT_EQ(dlock_force_unlock(l), 1);
  ASSERT_EQ(pthread_join(t, NULL), 0);
  ASSERT_EQ(a.rc, 0);
  ASSERT_EQ(a.held, 1);
  ASSERT_EQ(a.rc2, 0);
  double lat = a.done_ms_f - t0;
  printf("waiter woke %.2f ms after force_unlock\n", lat);
  ASSERT_LT(lat, 200.0);

  ASSERT_EQ(dlock_force_unlock(l), 0);
  ASSERT_DLOCK_ERR(dlock_unlock_as(l, holder), DLOCK_ELOST);
  ASSERT_EQ(lu_exists(s, "basic:force"), 0);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

TEST(basic_force_unlock_foreign) {
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = lu_get(c, "basic:forcefor");
  ASSERT_EQ(dlock_force_unlock(l), 0);
  lu_ok(rp_cmd(s, "HSET basic:forcefor javauuid:7 3"));
  lu_ok(rp_cmd(s, "SET basic:other keep"));
  char ch[256];
  size_t chn = lu_channel(ch, sizeof(ch), "basic:forcefor", 14);
  redisContext *sub = lu_subscribe(s, ch, chn);
  ASSERT_EQ(dlock_force_unlock(l), 1);
  char msg[64];
  ASSERT_EQ(lu_sub_wait(sub, 2000, msg, sizeof(msg), NULL, 0), 1);
  ASSERT_STR_EQ(msg, "0");
  redisFree(sub);
  ASSERT_EQ(lu_exists(s, "basic:forcefor"), 0);
  ASSERT_EQ(lu_exists(s, "basic:other"), 1);
  ASSERT_EQ(dlock_force_unlock(l), 0);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/* ---- inspect ----------------------------------------------------------- */

TEST(basic_inspect_held_and_free) {
  rp_server_t *s = lu_server(1);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = lu_get(c, "basic:inspect");
  char f[256];
  lu_field(f, sizeof(f), c, dlock_self());

  dlock_info_t *info = NULL;
  ASSERT_DLOCK_OK(dlock_inspect(c, "basic:inspect", 13, &info));
  ASSERT_NOT_NULL(info);
  ASSERT_EQ(info->locked, 0);
  ASSERT_EQ(info->ttl_ms, 0);
  ASSERT_EQ(info->nholders, 0);
  ASSERT_EQ(info->nwaiters, 0);
  ASSERT_EQ(info->token, 0);
  dlock_info_free(info);

  ASSERT_DLOCK_OK(dlock_lock(l, 20000));
  ASSERT_DLOCK_OK(dlock_lock(l, 20000));
  uint64_t tok = dlock_token(l);
  ASSERT_GT(tok, 0);
  info = NULL;
  ASSERT_DLOCK_OK(dlock_inspect(c, "basic:inspect", 13, &info));
  ASSERT_NOT_NULL(info);
  ASSERT_EQ(info->locked, 1);
  ASSERT_GT(info->ttl_ms, 10000);
  ASSERT_LE(info->ttl_ms, 20000);
  ASSERT_EQ(info->token, tok);
  ASSERT_NULL(info->mode);
  ASSERT_EQ(info->nholders, 1);
  ASSERT_NOT_NULL(info->holders);
  ASSERT_STR_EQ(info->holders[0].owner, f);
  ASSERT_EQ(info->holders[0].count, 2);
  ASSERT_EQ(info->nwaiters, 0);
  dlock_info_free(info);

  ASSERT_DLOCK_OK(dlock_unlock(l));
  ASSERT_DLOCK_OK(dlock_unlock(l));
  info = NULL;
  ASSERT_DLOCK_OK(dlock_inspect(c, "basic:inspect", 13, &info));
  ASSERT_EQ(info->locked, 0);
  ASSERT_EQ(info->nholders, 0);
  /* The last token issued is still reported after release. */
  ASSERT_EQ(info->token, tok);
  dlock_info_free(info);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

TEST(basic_inspect_foreign_holder) {
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  lu_ok(rp_cmd(s, "HSET basic:insf abc-uuid:17 4"));
  lu_ok(rp_cmd(s, "PEXPIRE basic:insf 30000"));
  dlock_info_t *info = NULL;
  ASSERT_DLOCK_OK(dlock_inspect(c, "basic:insf", 10, &info));
  ASSERT_EQ(info->locked, 1);
  ASSERT_GT(info->ttl_ms, 20000);
  ASSERT_EQ(info->nholders, 1);
  ASSERT_STR_EQ(info->holders[0].owner, "abc-uuid:17");
  ASSERT_EQ(info->holders[0].count, 4);
  ASSERT_EQ(info->token, 0);
  dlock_info_free(info);
  dlock_client_close(c);
  rp_free(s);
}

/* ---- Redisson layout, checked raw -------------------------------------- */

TEST(basic_layout_raw) {
  rp_server_t *s = lu_server(1);
  dlock_client_t *c = lu_client(s);
  const char *name = "basic:layout";
  dlock_t *l = lu_get(c, name);
  char f[256], ch[256], tk[256];
  lu_field(f, sizeof(f), c, dlock_self());
  size_t chn = lu_channel(ch, sizeof(ch), name, strlen(name));
  size_t tkn = lu_token_key(tk, sizeof(tk), name, strlen(name));
  ASSERT_STR_EQ(ch, "redisson_lock__channel:{basic:layout}");
  ASSERT_STR_EQ(tk, "redisson_lock_token:{basic:layout}");

  ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));
  /* The hash: exactly one field, "<client-id>:<thread>" -> "1". */
  redisReply *r = rp_cmd(s, "HGETALL %s", name);
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->type, REDIS_REPLY_ARRAY);
  ASSERT_EQ(r->elements, 2);
  ASSERT_STR_EQ(r->element[0]->str, f);
  ASSERT_STR_EQ(r->element[1]->str, "1");
  freeReplyObject(r);
  r = rp_cmd(s, "TYPE %s", name);
  ASSERT_STR_EQ(r->str, "hash");
  freeReplyObject(r);
  int64_t p = lu_pttl(s, name);
  ASSERT_GT(p, 0);
  ASSERT_LE(p, 600);
  /* The fencing counter matches the token. */
  ASSERT_EQ(lu_get_num_n(s, tk, tkn), (int64_t)dlock_token(l));
  ASSERT_GT(dlock_token(l), 0);

  /* The release publishes "0" on the channel. */
  redisContext *sub = lu_subscribe(s, ch, chn);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  char msg[64], got_ch[256];
  ASSERT_EQ(lu_sub_wait(sub, 2000, msg, sizeof(msg), got_ch, sizeof(got_ch)),
            1);
  ASSERT_STR_EQ(got_ch, ch);
  ASSERT_STR_EQ(msg, "0");
  redisFree(sub);
  ASSERT_EQ(lu_exists(s, name), 0);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

TEST(basic_layout_partial_unlock_no_publish) {
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  const char *name = "basic:nopub";
  dlock_t *l = lu_get(c, name);
  char ch[256];
  size_t chn = lu_channel(ch, sizeof(ch), name, strlen(name));
  ASSERT_DLOCK_OK(dlock_lock(l, 10000));
  ASSERT_DLOCK_OK(dlock_lock(l, 10000));
  redisContext *sub = lu_subscribe(s, ch, chn);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  char msg[64];
  /* Still held: nobody is told. */
  ASSERT_EQ(lu_sub_wait(sub, 300, msg, sizeof(msg), NULL, 0), 0);
  redisFree(sub);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

TEST(basic_layout_name_with_brace) {
  /* A name that contains '{' is used as is, without added braces. */
  rp_server_t *s = lu_server(1);
  dlock_client_t *c = lu_client(s);
  const char *name = "orders{eu}:42";
  dlock_t *l = lu_get(c, name);
  char ch[256], tk[256];
  size_t chn = lu_channel(ch, sizeof(ch), name, strlen(name));
  size_t tkn = lu_token_key(tk, sizeof(tk), name, strlen(name));
  ASSERT_STR_EQ(ch, "redisson_lock__channel:orders{eu}:42");
  ASSERT_STR_EQ(tk, "redisson_lock_token:orders{eu}:42");
  ASSERT_DLOCK_OK(dlock_lock(l, 10000));
  ASSERT_EQ(lu_exists(s, name), 1);
  ASSERT_EQ(lu_get_num_n(s, tk, tkn), (int64_t)dlock_token(l));
  redisContext *sub = lu_subscribe(s, ch, chn);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  char msg[64];
  ASSERT_EQ(lu_sub_wait(sub, 2000, msg, sizeof(msg), NULL, 0), 1);
  ASSERT_STR_EQ(msg, "0");
  redisFree(sub);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/* ---- client options ---------------------------------------------------- */

TEST(basic_client_id_option_copied) {
  rp_server_t *s = lu_server(1);
  char id[64];
  snprintf(id, sizeof(id), "%s", "svc-orders-7");
  dlock_options_t o;
  lu_options(&o, s);
  o.client_id = id;
  dlock_client_t *c = lu_client_opts(&o);
  /* Copied at open: changing the caller's buffer changes nothing. */
  memset(id, 'x', sizeof(id) - 1);
  ASSERT_STR_EQ(dlock_client_id(c), "svc-orders-7");
  dlock_t *l = lu_get(c, "basic:cid");
  ASSERT_DLOCK_OK(dlock_lock(l, 5000));
  char f[128];
  snprintf(f, sizeof(f), "svc-orders-7:%" PRIu64, dlock_self());
  ASSERT_EQ(lu_hget_num(s, "basic:cid", f), 1);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  dlock_free(l);
  dlock_client_close(c);

  /* Without one, each client draws its own UUID (36 characters). */
  dlock_client_t *a = lu_client(s);
  dlock_client_t *b = lu_client(s);
  ASSERT_EQ(strlen(dlock_client_id(a)), 36);
  ASSERT(strcmp(dlock_client_id(a), dlock_client_id(b)) != 0);
  dlock_client_close(a);
  dlock_client_close(b);
  rp_free(s);
}

static int64_t exists_in_db(rp_server_t *s, int db, const char *key) {
  redisContext *r = lu_connect(s);
  ASSERT_NOT_NULL(r);
  redisReply *rep = redisCommand(r, "SELECT %d", db);
  ASSERT_NOT_NULL(rep);
  ASSERT_EQ(rep->type, REDIS_REPLY_STATUS);
  freeReplyObject(rep);
  int64_t n = lu_reply_int(redisCommand(r, "EXISTS %s", key));
  redisFree(r);
  return n;
}

TEST(basic_url_selects_database) {
  rp_server_t *t = lu_server(0);
  rp_server_t *u = lu_server(1);
  char url[512];
  dlock_options_t o;

  snprintf(url, sizeof(url), "redis://127.0.0.1:%d/3", rp_port(t));
  lu_options(&o, t);
  o.url = url;
  dlock_client_t *c = lu_client_opts(&o);
  dlock_t *l = lu_get(c, "basic:db");
  ASSERT_DLOCK_OK(dlock_lock(l, 5000));
  ASSERT_EQ(exists_in_db(t, 3, "basic:db"), 1);
  ASSERT_EQ(exists_in_db(t, 0, "basic:db"), 0);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  ASSERT_EQ(exists_in_db(t, 3, "basic:db"), 0);
  dlock_free(l);
  dlock_client_close(c);

  snprintf(url, sizeof(url), "unix://%s?db=2", rp_socket(u));
  lu_options(&o, u);
  o.url = url;
  c = lu_client_opts(&o);
  l = lu_get(c, "basic:db");
  ASSERT_DLOCK_OK(dlock_lock(l, 5000));
  ASSERT_EQ(exists_in_db(u, 2, "basic:db"), 1);
  ASSERT_EQ(exists_in_db(u, 0, "basic:db"), 0);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  dlock_free(l);
  dlock_client_close(c);
  rp_free(t);
  rp_free(u);
}

/* ---- interoperation with Redisson (simulated by raw commands) ---------- */

static const char *REDISSON_ACQUIRE =
    "if (redis.call('exists', KEYS[1]) == 0) or "
    "(redis.call('hexists', KEYS[1], ARGV[2]) == 1) then "
    "redis.call('hincrby', KEYS[1], ARGV[2], 1); "
    "redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end; "
    "return redis.call('pttl', KEYS[1]);";

TEST(basic_redisson_holder_unlock_wakes_dlock) {
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  const char *name = "interop:a";
  dlock_t *l = lu_get(c, name);
  /* A Java process holds it. */
  lu_ok(rp_cmd(s, "HSET %s someuuid:1 1", name));
  lu_ok(rp_cmd(s, "PEXPIRE %s 30000", name));

  pthread_t t;
  try_arg_t a;
  memset(&a, 0, sizeof(a));
  a.l = l;
  a.wait_ms = 10000;
  a.lease_ms = 10000;
  ASSERT_EQ(pthread_create(&t, NULL, try_thread, &a), 0);
  lu_sleep_ms(300);
  /* It must really be waiting, not holding. */
  ASSERT_EQ(lu_hlen(s, name), 1);
  ASSERT_EQ(lu_hget_num(s, name, "someuuid:1"), 1);

  /* Redisson's unlock: delete and publish 0. */
  char ch[256];
  lu_channel(ch, sizeof(ch), name, strlen(name));
  double t0 = lu_now_ms_f();
  lu_ok(rp_cmd(s, "DEL %s", name));
  redisReply *r = rp_cmd(s, "PUBLISH %s 0", ch);
  int64_t receivers = lu_reply_int(r);
  ASSERT_GE(receivers, 1); /* dlock subscribed to Redisson's channel */
  ASSERT_EQ(pthread_join(t, NULL), 0);
  ASSERT_EQ(a.rc, 0);
  ASSERT_EQ(a.held, 1);
  ASSERT_EQ(a.rc2, 0);
  double lat = a.done_ms_f - t0;
  printf("dlock waiter woke %.2f ms after a Redisson-style unlock\n", lat);
  ASSERT_LT(lat, 200.0);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

TEST(basic_dlock_holder_excludes_redisson) {
  rp_server_t *s = lu_server(1);
  dlock_client_t *c = lu_client(s);
  const char *name = "interop:b";
  dlock_t *l = lu_get(c, name);
  char ch[256];
  size_t chn = lu_channel(ch, sizeof(ch), name, strlen(name));
  ASSERT_DLOCK_OK(dlock_lock(l, 30000));

  /* Redisson's acquire answers the PTTL while dlock holds it. */
  redisReply *r =
      rp_cmd(s, "EVAL %s 1 %s 30000 javauuid:1", REDISSON_ACQUIRE, name);
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->type, REDIS_REPLY_INTEGER);
  ASSERT_GT(r->integer, 20000);
  ASSERT_LE(r->integer, 30000);
  freeReplyObject(r);
  ASSERT_EQ(lu_hexists_n(s, name, strlen(name), "javauuid:1"), 0);

  /* A Redisson waiter subscribed to the channel hears the release. */
  redisContext *sub = lu_subscribe(s, ch, chn);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  char msg[64];
  ASSERT_EQ(lu_sub_wait(sub, 2000, msg, sizeof(msg), NULL, 0), 1);
  ASSERT_STR_EQ(msg, "0");
  redisFree(sub);

  /* Now Redisson gets it (nil reply), and dlock is kept out. */
  r = rp_cmd(s, "EVAL %s 1 %s 30000 javauuid:1", REDISSON_ACQUIRE, name);
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->type, REDIS_REPLY_NIL);
  freeReplyObject(r);
  ASSERT_DLOCK_ERR(dlock_trylock(l, 0, 10000), DLOCK_ETIMEDOUT);
  ASSERT_EQ(dlock_is_locked(l), 1);
  ASSERT_EQ(dlock_is_held(l), 0);
  ASSERT_DLOCK_ERR(dlock_unlock(l), DLOCK_ENOTHELD);
  ASSERT_EQ(lu_hget_num(s, name, "javauuid:1"), 1);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/* The "evicted_scripts" count of INFO stats, or -1 where the server keeps
 * every script it was sent (before Redis 7.4 and Valkey 8.1). */
static long long evicted_scripts(rp_server_t *s) {
  redisReply *r = rp_cmd(s, "INFO stats");
  ASSERT_NOT_NULL(r);
  long long n = -1;
  const char *p = r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS
                      ? strstr(r->str, "evicted_scripts:")
                      : NULL;
  if (p != NULL)
    n = atoll(p + strlen("evicted_scripts:"));
  freeReplyObject(r);
  return n;
}

/*
 * Newer servers (Redis 7.4 on, Valkey 8.1 on) keep at most 500 of the
 * scripts that EVAL loaded and forget the least recently used: another
 * application's scripts can push the library's out while a lock is held.
 * The calls that find theirs gone are sent again with the body, so the
 * lock is released, taken again and renewed as before. Where the server
 * counts evictions, they must have happened.
 */
TEST(basic_scripts_evicted_by_others_are_sent_again) {
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = lu_get(c, "basic:evicted");
  ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));
  ASSERT_DLOCK_OK(dlock_unlock(l));
  long long before = evicted_scripts(s);
  ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));
  for (int i = 0; i < 600; i++) {
    char body[64];
    snprintf(body, sizeof(body), "return %d", i);
    redisReply *r = rp_cmd(s, "EVAL %s 0", body);
    ASSERT_NOT_NULL(r);
    ASSERT_EQ(r->type, REDIS_REPLY_INTEGER);
    freeReplyObject(r);
  }
  long long after = evicted_scripts(s);
  if (before >= 0)
    ASSERT_GT(after, before);
  /* The watchdog's renewals find their script gone too. */
  lu_sleep_ms(1300);
  ASSERT_EQ(dlock_is_held(l), 1);
  ASSERT_GT(lu_pttl(s, "basic:evicted"), 0);
  ASSERT_DLOCK_OK(dlock_trylock(l, 0, DLOCK_WATCHDOG));
  ASSERT_EQ(dlock_hold_count(l), 2);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  ASSERT_DLOCK_OK(dlock_unlock(l));
  ASSERT_EQ(lu_exists(s, "basic:evicted"), 0);
  ASSERT_DLOCK_OK(dlock_lock(l, 5000));
  ASSERT_DLOCK_OK(dlock_unlock(l));
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}
