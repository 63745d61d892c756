/*
 * Faults: Redis paused, killed and restarted (with and without AOF) while
 * locks are held or awaited; scripts flushed; Redis error replies (OOM);
 * the unlock latch; client shutdown. Calls must fail with a code within
 * their timeouts, never hang, and work again once Redis is back.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "lock_util.h"

/* Calls bounded by command_timeout_ms = 500 must return within this. */
#define FAIL_FAST_MS 1500
/* An unlock is sent again on a lost reply, up to unlock_retries (2) times,
 * each attempt with its own command timeout (dlock.h): its bound is three
 * timeouts, plus the short reconnect waits between them. */
#define UNLOCK_FAIL_FAST_MS (3 * 500 + 500)

static dlock_client_t *fast_client(rp_server_t *s, lu_lost_t *rec) {
  dlock_options_t o;
  lu_options(&o, s);
  o.connect_timeout_ms = 500;
  o.command_timeout_ms = 500;
  /* Calls fail at the first error, as they are asserted to (riding an
   * outage out is tested in test_failover.c). */
  o.outage_wait_ms = 0;
  if (rec) {
    o.on_lost = lu_lost_cb;
    o.on_lost_data = rec;
  }
  return lu_client_opts(&o);
}

/* Retries is_locked until the client talks to Redis again; returns ms. */
static int64_t wait_working(dlock_t *l, int64_t limit_ms) {
  int64_t t0 = lu_now_ms();
  while (lu_now_ms() - t0 < limit_ms) {
    if (dlock_is_locked(l) >= 0)
      return lu_now_ms() - t0;
    lu_sleep_ms(50);
  }
  return -1;
}

#define ASSERT_FAILS_FAST(expr, code)                                          \
  ASSERT_FAILS_WITHIN(expr, code, FAIL_FAST_MS)

#define ASSERT_FAILS_WITHIN(expr, code, limit_ms)                              \
  do {                                                                         \
    int64_t t0_ = lu_now_ms();                                                 \
    int64_t rc_ = (int64_t)(expr);                                             \
    int64_t took_ = lu_now_ms() - t0_;                                         \
    printf("%s -> %s (%s) in %" PRId64 " ms\n", #expr,                         \
           dlock_err_name((int)rc_), dlock_last_error(), took_);               \
    ASSERT_EQ(rc_, code);                                                      \
    ASSERT_LT(took_, limit_ms);                                                \
    ASSERT_GT((int64_t)strlen(dlock_last_error()), 0);                         \
  } while (0)

/* ---- paused server ----------------------------------------------------- */

TEST(fault_paused_calls_fail_fast) {
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = fast_client(s, NULL);
  dlock_t *l = lu_get(c, "fault:paused");
  dlock_t *m = lu_get(c, "fault:paused2");
  ASSERT_DLOCK_OK(dlock_lock(l, 30000));

  ASSERT_EQ(rp_pause(s), 0);
  ASSERT_FAILS_FAST(dlock_is_locked(l), DLOCK_EIO);
  ASSERT_FAILS_FAST(dlock_lock(m, 2000), DLOCK_EIO);
  ASSERT_FAILS_FAST(dlock_trylock(m, 0, 2000), DLOCK_EIO);
  ASSERT_FAILS_FAST(dlock_trylock(m, 5000, 2000), DLOCK_EIO);
  ASSERT_FAILS_WITHIN(dlock_unlock(l), DLOCK_EIO, UNLOCK_FAIL_FAST_MS);
  ASSERT_FAILS_FAST(dlock_ttl(l), DLOCK_EIO);
  ASSERT_FAILS_FAST(dlock_force_unlock(m), DLOCK_EIO);
  ASSERT_EQ(rp_resume(s), 0);

  int64_t back = wait_working(l, 5000);
  printf("working again %" PRId64 " ms after resume\n", back);
  ASSERT_GE(back, 0);
  /* Whatever the interrupted calls did, the client works normally now. */
  ASSERT_GE(dlock_force_unlock(l), 0);
  ASSERT_GE(dlock_force_unlock(m), 0);
  ASSERT_DLOCK_OK(dlock_lock(m, 5000));
  ASSERT_EQ(dlock_is_held(m), 1);
  ASSERT_DLOCK_OK(dlock_unlock(m));
  ASSERT_EQ(lu_exists(s, "fault:paused2"), 0);
  dlock_free(l);
  dlock_free(m);
  dlock_client_close(c);
  rp_free(s);
}

typedef struct wait_arg {
  dlock_t *l;
  int64_t wait_ms;
  int rc;
  int held;
  int64_t done_ms;
} wait_arg_t;

static void *waiter(void *p) {
  wait_arg_t *a = p;
  a->rc = a->wait_ms == -2 ? dlock_lock(a->l, 10000)
                           : dlock_trylock(a->l, a->wait_ms, 10000);
  a->done_ms = lu_now_ms();
  if (a->rc == 0) {
    a->held = dlock_is_held(a->l);
    dlock_unlock(a->l);
  }
  return NULL;
}

TEST(fault_paused_waiter_recovers) {
  /* A thread waiting (forever) for a lock when Redis stops answering. */
  rp_server_t *s = lu_server(1);
  dlock_client_t *c = fast_client(s, NULL);
  dlock_t *l = lu_get(c, "fault:pwait");
  lu_ok(rp_cmd(s, "HSET fault:pwait someuuid:1 1"));
  lu_ok(rp_cmd(s, "PEXPIRE fault:pwait 60000"));
  pthread_t t;
  wait_arg_t a = {l, -2, -100, 0, 0};
  ASSERT_EQ(pthread_create(&t, NULL, waiter, &a), 0);
  lu_sleep_ms(300);
  ASSERT_EQ(rp_pause(s), 0);
  int64_t t0 = lu_now_ms();
  /* The waiter sleeps up to the TTL (60 s) between attempts; it may keep
   * waiting while Redis is silent, but a call it makes must not hang, so
   * after resume plus the foreign release it must get the lock. */
  lu_sleep_ms(800);
  ASSERT_EQ(rp_resume(s), 0);
  lu_ok(rp_cmd(s, "DEL fault:pwait"));
  char ch[128];
  lu_channel(ch, sizeof(ch), "fault:pwait", 11);
  freeReplyObject(rp_cmd(s, "PUBLISH %s 0", ch));
  ASSERT_EQ(pthread_join(t, NULL), 0);
  printf("waiter returned %s %" PRId64 " ms after the pause began\n",
         dlock_err_name(a.rc), a.done_ms - t0);
  /* dlock_lock may report the outage (EIO) or ride it out and acquire. */
  ASSERT(a.rc == 0 || a.rc == DLOCK_EIO);
  if (a.rc == 0)
    ASSERT_EQ(a.held, 1);
  ASSERT_LT(a.done_ms - t0, 8000);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

TEST(fault_paused_watchdog_reports_lost) {
  /* Redis unreachable for longer than the lease: the lock is reported. */
  rp_server_t *s = lu_server(0);
  lu_lost_t rec;
  lu_lost_init(&rec);
  dlock_client_t *c = fast_client(s, &rec);
  dlock_t *l = lu_get(c, "fault:pwd");
  ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));
  ASSERT_EQ(rp_pause(s), 0);
  int64_t t0 = lu_now_ms();
  int n = lu_lost_wait(&rec, 4000);
  int64_t after = lu_now_ms() - t0;
  ASSERT_EQ(rp_resume(s), 0);
  printf("on_lost after %" PRId64 " ms of silence (lease 600 ms)\n", after);
  ASSERT_EQ(n, 1);
  ASSERT_STR_EQ(rec.name, "fault:pwd");
  ASSERT_EQ(rec.owner, dlock_self());
  ASSERT_GE(wait_working(l, 5000), 0);
  ASSERT_DLOCK_ERR(dlock_unlock(l), DLOCK_ELOST);
  ASSERT_EQ(lu_exists(s, "fault:pwd"), 0);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/* ---- killed and restarted server --------------------------------------- */

TEST(fault_killed_server_fails_fast_then_recovers) {
  rp_server_t *s = lu_server(1);
  dlock_client_t *c = fast_client(s, NULL);
  dlock_t *l = lu_get(c, "fault:killed");
  ASSERT_DLOCK_OK(dlock_lock(l, 5000));
  ASSERT_DLOCK_OK(dlock_unlock(l));
  ASSERT_EQ(rp_kill(s), 0);
  ASSERT_FAILS_FAST(dlock_is_locked(l), DLOCK_EIO);
  ASSERT_FAILS_FAST(dlock_lock(l, 5000), DLOCK_EIO);
  ASSERT_EQ(rp_restart(s), 0);
  int64_t back = wait_working(l, 5000);
  printf("working again %" PRId64 " ms after restart\n", back);
  ASSERT_GE(back, 0);
  ASSERT_DLOCK_OK(dlock_lock(l, 5000));
  ASSERT_EQ(lu_exists(s, "fault:killed"), 1);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

TEST(fault_restart_while_waiting) {
  /* A foreign owner holds the lock for a minute; Redis restarts without
   * persistence, so the lock is gone: the waiter must notice and acquire
   * (it re-subscribes and retries after reconnecting). */
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = lu_get(c, "fault:rwait");
  lu_ok(rp_cmd(s, "HSET fault:rwait someuuid:1 1"));
  lu_ok(rp_cmd(s, "PEXPIRE fault:rwait 60000"));
  pthread_t t;
  wait_arg_t a = {l, 15000, -100, 0, 0};
  ASSERT_EQ(pthread_create(&t, NULL, waiter, &a), 0);
  lu_sleep_ms(300);
  ASSERT_EQ(lu_hlen(s, "fault:rwait"), 1);
  ASSERT_EQ(rp_restart(s), 0);
  int64_t t0 = lu_now_ms();
  ASSERT_EQ(pthread_join(t, NULL), 0);
  printf("waiter: %s %" PRId64 " ms after the restart\n", dlock_err_name(a.rc),
         a.done_ms - t0);
  ASSERT_EQ(a.rc, 0);
  ASSERT_EQ(a.held, 1);
  ASSERT_LT(a.done_ms - t0, 5000);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

TEST(fault_restart_with_aof_renewals_resume) {
  rp_options_t ro;
  rp_options_init(&ro);
  ro.appendonly = 1;
  rp_server_t *s = lu_server_opts(&ro);
  lu_lost_t rec;
  lu_lost_init(&rec);
  dlock_options_t o;
  lu_options(&o, s);
  /* A 3 s watchdog (renewal every second) leaves room for the restart. */
  o.watchdog_timeout_ms = 3000;
  o.on_lost = lu_lost_cb;
  o.on_lost_data = &rec;
  dlock_client_t *c = lu_client_opts(&o);
  dlock_t *l = lu_get(c, "fault:aof");
  ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));
  lu_sleep_ms(1200);
  ASSERT_EQ(rp_restart(s), 0);
  ASSERT_EQ(lu_exists(s, "fault:aof"), 1); /* survived the restart */
  /* Longer than a whole watchdog timeout: only renewals keep it now. */
  lu_sleep_ms(3500);
  int64_t p = lu_pttl(s, "fault:aof");
  printf("after restart + 3.5 s: pttl %" PRId64 " ms, lost reports %d\n", p,
         lu_lost_count(&rec));
  ASSERT_GT(p, 0);
  ASSERT_EQ(lu_lost_count(&rec), 0);
  ASSERT_EQ(dlock_is_held(l), 1);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  ASSERT_EQ(lu_exists(s, "fault:aof"), 0);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

TEST(fault_restart_without_persistence_reports_lost) {
  rp_server_t *s = lu_server(1);
  lu_lost_t rec;
  lu_lost_init(&rec);
  dlock_options_t o;
  lu_options(&o, s);
  o.on_lost = lu_lost_cb;
  o.on_lost_data = &rec;
  dlock_client_t *c = lu_client_opts(&o);
  dlock_t *l = lu_get(c, "fault:noaof");
  ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));
  lu_sleep_ms(300);
  ASSERT_EQ(rp_restart(s), 0);
  int64_t t0 = lu_now_ms();
  ASSERT_EQ(lu_lost_wait(&rec, 5000), 1);
  printf("on_lost %" PRId64 " ms after the restart\n", rec.at_ms - t0);
  ASSERT_STR_EQ(rec.name, "fault:noaof");
  ASSERT_EQ(rec.owner, dlock_self());
  ASSERT_DLOCK_ERR(dlock_unlock(l), DLOCK_ELOST);
  /* And the client is usable on the new server. */
  ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));
  ASSERT_DLOCK_OK(dlock_unlock(l));
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

TEST(fault_restart_loses_lease_lock) {
  /* A lease lock (no watchdog) on a server restarted without persistence:
   * the holder finds out at unlock. */
  rp_server_t *s = lu_server(1);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = lu_get(c, "fault:leaselost");
  ASSERT_DLOCK_OK(dlock_lock(l, 20000));
  ASSERT_DLOCK_OK(dlock_lock(l, 20000));
  ASSERT_EQ(rp_restart(s), 0);
  ASSERT_GE(wait_working(l, 5000), 0);
  ASSERT_EQ(dlock_is_held(l), 0);
  /* Both holds were lost; each of their unlocks says so, then none is
   * left. */
  ASSERT_DLOCK_ERR(dlock_unlock(l), DLOCK_ELOST);
  ASSERT_DLOCK_ERR(dlock_unlock(l), DLOCK_ELOST);
  ASSERT_DLOCK_ERR(dlock_unlock(l), DLOCK_ENOTHELD);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/* ---- scripts ----------------------------------------------------------- */

TEST(fault_script_flush_reloads) {
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = lu_get(c, "fault:flush");
  ASSERT_DLOCK_OK(dlock_lock(l, 5000));
  ASSERT_DLOCK_OK(dlock_unlock(l));
  lu_ok(rp_cmd(s, "SCRIPT FLUSH"));
  ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));
  ASSERT_EQ(dlock_hold_count(l), 1);
  lu_ok(rp_cmd(s, "SCRIPT FLUSH"));
  ASSERT_DLOCK_OK(dlock_trylock(l, 0, 5000));
  ASSERT_EQ(dlock_hold_count(l), 2);
  lu_ok(rp_cmd(s, "SCRIPT FLUSH"));
  ASSERT_DLOCK_OK(dlock_unlock(l));
  lu_ok(rp_cmd(s, "SCRIPT FLUSH"));
  /* Renewals survive a flush too. */
  lu_sleep_ms(1300);
  ASSERT_EQ(dlock_is_held(l), 1);
  ASSERT_GT(lu_pttl(s, "fault:flush"), 0);
  lu_ok(rp_cmd(s, "SCRIPT FLUSH"));
  ASSERT_DLOCK_OK(dlock_unlock(l));
  ASSERT_EQ(lu_exists(s, "fault:flush"), 0);
  lu_ok(rp_cmd(s, "SCRIPT FLUSH"));
  ASSERT_EQ(dlock_force_unlock(l), 0);
  ASSERT_EQ(dlock_is_locked(l), 0);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/* ---- Redis error replies ----------------------------------------------- */

TEST(fault_oom_reports_eserver) {
  rp_server_t *s = lu_server(1);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = lu_get(c, "fault:oom");
  char tk[128];
  size_t tkn = lu_token_key(tk, sizeof(tk), "fault:oom", 9);
  ASSERT_DLOCK_OK(dlock_lock(l, 5000));
  ASSERT_DLOCK_OK(dlock_unlock(l));
  int64_t tok = lu_get_num_n(s, tk, tkn);
  ASSERT_EQ(tok, 1);

  lu_ok(rp_cmd(s, "CONFIG SET maxmemory-policy noeviction"));
  lu_ok(rp_cmd(s, "CONFIG SET maxmemory 1"));
  ASSERT_DLOCK_ERR(dlock_trylock(l, 0, 5000), DLOCK_ESERVER);
  printf("trylock under OOM: %s\n", dlock_last_error());
  ASSERT(strstr(dlock_last_error(), "OOM") != NULL);
  int64_t t0 = lu_now_ms();
  ASSERT_DLOCK_ERR(dlock_lock(l, 5000), DLOCK_ESERVER);
  ASSERT(strstr(dlock_last_error(), "OOM") != NULL);
  ASSERT_LT(lu_now_ms() - t0, 2000); /* an error reply is not retried */
  ASSERT_DLOCK_ERR(dlock_lock(l, DLOCK_WATCHDOG), DLOCK_ESERVER);
  ASSERT_EQ(dlock_is_held(l), 0);
  ASSERT_EQ(dlock_token(l), 0);
  lu_ok(rp_cmd(s, "CONFIG SET maxmemory 0"));

  /* Nothing was left behind, and the token did not move. */
  ASSERT_EQ(lu_exists(s, "fault:oom"), 0);
  ASSERT_EQ(lu_get_num_n(s, tk, tkn), 1);
  ASSERT_DLOCK_OK(dlock_lock(l, 5000));
  ASSERT_EQ(dlock_token(l), 2);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/* ---- idempotent unlock ------------------------------------------------- */

static int64_t count_latches(rp_server_t *s, const char *name,
                             int64_t *min_ttl) {
  char pat[256];
  snprintf(pat, sizeof(pat), "redisson_unlock_latch:{%s}:*", name);
  redisReply *r = rp_cmd(s, "KEYS %s", pat);
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->type, REDIS_REPLY_ARRAY);
  int64_t n = (int64_t)r->elements;
  *min_ttl = INT64_MAX;
  for (size_t i = 0; i < r->elements; i++) {
    int64_t p = lu_pttl(s, r->element[i]->str);
    if (p < *min_ttl)
      *min_ttl = p;
  }
  freeReplyObject(r);
  return n;
}

TEST(fault_unlock_latch) {
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = lu_get(c, "fault:latch");
  char f[256];
  lu_field(f, sizeof(f), c, dlock_self());
  ASSERT_DLOCK_OK(dlock_lock(l, 10000));
  ASSERT_DLOCK_OK(dlock_lock(l, 10000));
  int64_t ttl = 0;
  ASSERT_EQ(count_latches(s, "fault:latch", &ttl), 0);

  ASSERT_DLOCK_OK(dlock_unlock(l));
  /* Decremented exactly once. */
  ASSERT_EQ(lu_hget_num(s, "fault:latch", f), 1);
  ASSERT_EQ(dlock_hold_count(l), 1);
  int64_t n = count_latches(s, "fault:latch", &ttl);
  printf("latch keys after the first unlock: %" PRId64 ", min pttl %" PRId64
         " ms\n",
         n, ttl);
  ASSERT_GE(n, 1);
  ASSERT_GT(ttl, 0); /* kept briefly, never forever */

  ASSERT_DLOCK_OK(dlock_unlock(l));
  ASSERT_EQ(lu_exists(s, "fault:latch"), 0);
  n = count_latches(s, "fault:latch", &ttl);
  ASSERT_GE(n, 1);
  ASSERT_GT(ttl, 0);
  ASSERT_DLOCK_ERR(dlock_unlock(l), DLOCK_ENOTHELD);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

TEST(fault_unlock_retry_is_idempotent) {
  /* Redis holds every script for 800 ms (CLIENT PAUSE WRITE) while the
   * command timeout is 500 ms: the unlock's first reply never comes in
   * time, it is sent again on a fresh connection, and both copies may run.
   * The hold must still be released exactly once. */
  rp_server_t *s = lu_server(0);
  dlock_options_t o;
  lu_options(&o, s);
  o.command_timeout_ms = 500;
  dlock_client_t *c = lu_client_opts(&o);
  dlock_t *l = lu_get(c, "fault:retry");
  char f[256];
  lu_field(f, sizeof(f), c, dlock_self());
  ASSERT_DLOCK_OK(dlock_lock(l, 20000));
  ASSERT_DLOCK_OK(dlock_lock(l, 20000));
  ASSERT_DLOCK_OK(dlock_lock(l, 20000));

  lu_ok(rp_cmd(s, "CLIENT PAUSE 800 WRITE"));
  int64_t t0 = lu_now_ms();
  int rc = dlock_unlock(l);
  printf("unlock during an 800 ms write pause: %s \"%s\" after %" PRId64
         " ms\n",
         dlock_err_name(rc), dlock_last_error(), lu_now_ms() - t0);
  lu_sleep_ms(900); /* every copy has run by now */
  printf("then: count in Redis %" PRId64 ", dlock_hold_count %d\n",
         lu_hget_num(s, "fault:retry", f), dlock_hold_count(l));
  ASSERT_DLOCK_OK(rc);
  ASSERT_EQ(lu_hget_num(s, "fault:retry", f), 2);
  ASSERT_EQ(dlock_hold_count(l), 2);

  /* The same for the final release: a second copy must not turn into
   * "not held", nor release anything else. */
  ASSERT_DLOCK_OK(dlock_unlock(l));
  lu_ok(rp_cmd(s, "CLIENT PAUSE 800 WRITE"));
  rc = dlock_unlock(l);
  printf("final unlock during a write pause: %s \"%s\"\n", dlock_err_name(rc),
         dlock_last_error());
  ASSERT_DLOCK_OK(rc);
  lu_sleep_ms(900);
  ASSERT_EQ(lu_exists(s, "fault:retry"), 0);
  ASSERT_EQ(dlock_hold_count(l), 0);
  ASSERT_DLOCK_ERR(dlock_unlock(l), DLOCK_ENOTHELD);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/* ---- reconnection keeps the session ------------------------------------ */

static int64_t exists_in_db(rp_server_t *s, int db, const char *key) {
  redisContext *r = lu_connect(s);
  ASSERT_NOT_NULL(r);
  redisReply *rep = redisCommand(r, "AUTH %s", "pw-7");
  ASSERT_NOT_NULL(rep);
  freeReplyObject(rep);
  rep = redisCommand(r, "SELECT %d", db);
  ASSERT_NOT_NULL(rep);
  ASSERT_EQ(rep->type, REDIS_REPLY_STATUS);
  freeReplyObject(rep);
  rep = redisCommand(r, "EXISTS %s", key);
  int64_t n = lu_reply_int(rep);
  redisFree(r);
  return n;
}

TEST(fault_reconnect_keeps_db_and_auth) {
  /* After a restart the client must authenticate and select its database
   * again, or locks land in db 0 (or fail with NOAUTH). */
  rp_options_t ro;
  rp_options_init(&ro);
  ro.requirepass = "pw-7";
  rp_server_t *s = lu_server_opts(&ro);
  char url[256];
  snprintf(url, sizeof(url), "redis://:pw-7@127.0.0.1:%d/5", rp_port(s));
  dlock_options_t o;
  lu_options(&o, s);
  o.url = url;
  dlock_client_t *c = lu_client_opts(&o);
  dlock_t *l = lu_get(c, "fault:db");
  ASSERT_DLOCK_OK(dlock_lock(l, 5000));
  ASSERT_EQ(exists_in_db(s, 5, "fault:db"), 1);
  ASSERT_EQ(exists_in_db(s, 0, "fault:db"), 0);
  ASSERT_DLOCK_OK(dlock_unlock(l));

  ASSERT_EQ(rp_restart(s), 0);
  ASSERT_GE(wait_working(l, 5000), 0);
  ASSERT_DLOCK_OK(dlock_lock(l, 5000));
  ASSERT_EQ(exists_in_db(s, 5, "fault:db"), 1);
  ASSERT_EQ(exists_in_db(s, 0, "fault:db"), 0);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  ASSERT_EQ(exists_in_db(s, 5, "fault:db"), 0);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

TEST(fault_restart_resubscribes_waiter) {
  /* The holder's lock survives the restart (AOF), so the waiter keeps
   * waiting; when the holder then releases it Redisson-style, the waiter
   * must hear it on its renewed subscription, not at the TTL (60 s). */
  rp_options_t ro;
  rp_options_init(&ro);
  ro.appendonly = 1;
  ro.unix_socket = 1;
  rp_server_t *s = lu_server_opts(&ro);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = lu_get(c, "fault:resub");
  char ch[128];
  size_t chn = lu_channel(ch, sizeof(ch), "fault:resub", 11);
  lu_ok(rp_cmd(s, "HSET fault:resub someuuid:1 1"));
  lu_ok(rp_cmd(s, "PEXPIRE fault:resub 60000"));
  pthread_t t;
  wait_arg_t a = {l, 20000, -100, 0, 0};
  ASSERT_EQ(pthread_create(&t, NULL, waiter, &a), 0);
  lu_sleep_ms(300);
  ASSERT_EQ(lu_numsub(s, ch, chn), 1);
  ASSERT_EQ(rp_restart(s), 0);
  ASSERT_EQ(lu_exists(s, "fault:resub"), 1);
  int64_t t0 = lu_now_ms();
  while (lu_numsub(s, ch, chn) < 1 && lu_now_ms() - t0 < 5000)
    lu_sleep_ms(20);
  printf("re-subscribed %" PRId64 " ms after the restart\n", lu_now_ms() - t0);
  ASSERT_EQ(lu_numsub(s, ch, chn), 1);
  ASSERT_EQ(a.rc, -100); /* still waiting */
  lu_ok(rp_cmd(s, "DEL fault:resub"));
  int64_t t1 = lu_now_ms();
  freeReplyObject(rp_cmd(s, "PUBLISH %s 0", ch));
  ASSERT_EQ(pthread_join(t, NULL), 0);
  printf("waiter: %s %" PRId64 " ms after the release\n", dlock_err_name(a.rc),
         a.done_ms - t1);
  ASSERT_EQ(a.rc, 0);
  ASSERT_EQ(a.held, 1);
  ASSERT_LT(a.done_ms - t1, 1000);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/* ---- shutdown ---------------------------------------------------------- */

TEST(fault_shutdown_cancels_waiter) {
  rp_server_t *s = lu_server(1);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = lu_get(c, "fault:shutdown");
  lu_ok(rp_cmd(s, "HSET fault:shutdown someuuid:1 1"));
  lu_ok(rp_cmd(s, "PEXPIRE fault:shutdown 60000"));
  pthread_t t;
  wait_arg_t a = {l, -2, -100, 0, 0};
  ASSERT_EQ(pthread_create(&t, NULL, waiter, &a), 0);
  lu_sleep_ms(300);
  int64_t t0 = lu_now_ms();
  dlock_client_shutdown(c);
  ASSERT_EQ(pthread_join(t, NULL), 0);
  printf("waiter canceled %" PRId64 " ms after shutdown\n", a.done_ms - t0);
  ASSERT_EQ(a.rc, DLOCK_ECANCELED);
  ASSERT_LT(a.done_ms - t0, 1000);
  ASSERT_DLOCK_ERR(dlock_lock(l, 1000), DLOCK_ECANCELED);
  ASSERT_DLOCK_ERR(dlock_is_locked(l), DLOCK_ECANCELED);
  dlock_client_shutdown(c); /* twice is fine */
  ASSERT_EQ(lu_hget_num(s, "fault:shutdown", "someuuid:1"), 1);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

typedef struct call_arg {
  dlock_t *l;
  int rc;
  int64_t done_ms;
} call_arg_t;

static void *is_locked_thread(void *p) {
  call_arg_t *a = p;
  a->rc = dlock_is_locked(a->l);
  a->done_ms = lu_now_ms();
  return NULL;
}

TEST(fault_shutdown_cancels_command_in_flight) {
  /* A call waiting for a silent Redis (default 3 s command timeout) is
   * canceled by shutdown without waiting for its timeout. */
  rp_server_t *s = lu_server(0);
  dlock_options_t o;
  lu_options(&o, s);
  o.command_timeout_ms = 3000;
  dlock_client_t *c = lu_client_opts(&o);
  dlock_t *l = lu_get(c, "fault:inflight");
  ASSERT_EQ(dlock_is_locked(l), 0);
  ASSERT_EQ(rp_pause(s), 0);
  call_arg_t a = {l, -100, 0};
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, is_locked_thread, &a), 0);
  lu_sleep_ms(200);
  int64_t t0 = lu_now_ms();
  dlock_client_shutdown(c);
  ASSERT_EQ(pthread_join(t, NULL), 0);
  printf("in-flight call: %s %" PRId64 " ms after shutdown\n",
         dlock_err_name(a.rc), a.done_ms - t0);
  ASSERT_EQ(rp_resume(s), 0);
  ASSERT_EQ(a.rc, DLOCK_ECANCELED);
  ASSERT_LT(a.done_ms - t0, 1000);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/* ---- connections killed by the server ---------------------------------- */

TEST(fault_pubsub_killed_release_missed) {
  /* The waiter's subscription connection is killed and the lock released
   * before it has re-subscribed, so the unlock message is lost. After
   * re-subscribing the waiter must try again, not sleep until the TTL
   * (60 s) (Redisson #5761). */
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = lu_get(c, "fault:pskill");
  char ch[128];
  size_t chn = lu_channel(ch, sizeof(ch), "fault:pskill", 12);
  lu_ok(rp_cmd(s, "HSET fault:pskill someuuid:1 1"));
  lu_ok(rp_cmd(s, "PEXPIRE fault:pskill 60000"));
  pthread_t t;
  wait_arg_t a = {l, 10000, -100, 0, 0};
  ASSERT_EQ(pthread_create(&t, NULL, waiter, &a), 0);
  lu_sleep_ms(300);
  ASSERT_EQ(lu_numsub(s, ch, chn), 1);
  int64_t t0 = lu_now_ms();
  int64_t killed = lu_reply_int(rp_cmd(s, "CLIENT KILL TYPE pubsub"));
  ASSERT_GE(killed, 1);
  lu_ok(rp_cmd(s, "DEL fault:pskill"));
  freeReplyObject(rp_cmd(s, "PUBLISH %s 0", ch));
  ASSERT_EQ(pthread_join(t, NULL), 0);
  printf("waiter: %s %" PRId64 " ms after its subscription was killed\n",
         dlock_err_name(a.rc), a.done_ms - t0);
  ASSERT_EQ(a.rc, 0);
  ASSERT_EQ(a.held, 1);
  ASSERT_LT(a.done_ms - t0, 3000);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

TEST(fault_pubsub_killed_waiter_still_woken) {
  rp_server_t *s = lu_server(1);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = lu_get(c, "fault:pskill2");
  char ch[128];
  size_t chn = lu_channel(ch, sizeof(ch), "fault:pskill2", 13);
  lu_ok(rp_cmd(s, "HSET fault:pskill2 someuuid:1 1"));
  lu_ok(rp_cmd(s, "PEXPIRE fault:pskill2 60000"));
  pthread_t t;
  wait_arg_t a = {l, 10000, -100, 0, 0};
  ASSERT_EQ(pthread_create(&t, NULL, waiter, &a), 0);
  lu_sleep_ms(300);
  ASSERT_GE(lu_reply_int(rp_cmd(s, "CLIENT KILL TYPE pubsub")), 1);
  int64_t t0 = lu_now_ms();
  while (lu_numsub(s, ch, chn) < 1 && lu_now_ms() - t0 < 5000)
    lu_sleep_ms(10);
  printf("re-subscribed after %" PRId64 " ms\n", lu_now_ms() - t0);
  ASSERT_EQ(lu_numsub(s, ch, chn), 1);
  lu_sleep_ms(100);
  ASSERT_EQ(a.rc, -100); /* still waiting: the holder still holds it */
  lu_ok(rp_cmd(s, "DEL fault:pskill2"));
  int64_t t1 = lu_now_ms();
  freeReplyObject(rp_cmd(s, "PUBLISH %s 0", ch));
  ASSERT_EQ(pthread_join(t, NULL), 0);
  ASSERT_EQ(a.rc, 0);
  ASSERT_LT(a.done_ms - t1, 1000);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

TEST(fault_command_connection_killed) {
  /* The server drops the client's command connection(s) while a watchdog
   * lock is held: renewals go on over a new connection, and calls work. */
  rp_server_t *s = lu_server(0);
  lu_lost_t rec;
  lu_lost_init(&rec);
  dlock_options_t o;
  lu_options(&o, s);
  o.on_lost = lu_lost_cb;
  o.on_lost_data = &rec;
  dlock_client_t *c = lu_client_opts(&o);
  dlock_t *l = lu_get(c, "fault:cmdkill");
  ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));
  ASSERT_GE(lu_reply_int(rp_cmd(s, "CLIENT KILL TYPE normal SKIPME yes")), 1);
  ASSERT_GE(wait_working(l, 2000), 0);
  /* Two watchdog timeouts later it is still held and was never lost. */
  lu_sleep_ms(1300);
  ASSERT_GT(lu_pttl(s, "fault:cmdkill"), 0);
  ASSERT_EQ(lu_lost_count(&rec), 0);
  ASSERT_EQ(dlock_is_held(l), 1);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  ASSERT_EQ(lu_exists(s, "fault:cmdkill"), 0);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}
