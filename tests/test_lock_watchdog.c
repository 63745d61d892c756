/*
 * The watchdog (renewal of DLOCK_WATCHDOG locks), lost-lock reporting and
 * fencing tokens. Clients use watchdog_timeout_ms = 600, so the key lives
 * 600 ms and is renewed about every 200 ms.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lock_util.h"

TEST(wd_keeps_lock_past_leases) {
  rp_server_t *s = lu_server(1);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = lu_get(c, "wd:keep");
  ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));
  /* More than three watchdog timeouts. */
  for (int i = 0; i < 4; i++) {
    lu_sleep_ms(500);
    int64_t p = lu_pttl(s, "wd:keep");
    ASSERT_GT(p, 0);
    ASSERT_LE(p, 600);
  }
  ASSERT_EQ(dlock_is_held(l), 1);
  ASSERT_GT(dlock_ttl(l), 0);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  ASSERT_EQ(lu_exists(s, "wd:keep"), 0);
  /* No renewal of a released lock: it stays gone. */
  lu_sleep_ms(800);
  ASSERT_EQ(lu_exists(s, "wd:keep"), 0);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

TEST(wd_released_lock_not_renewed_after_relock_with_lease) {
  /* After a watchdog hold is released, the same owner takes the lock with
   * a 500 ms lease: the watchdog must not keep extending it. */
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = lu_get(c, "wd:relock");
  ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));
  lu_sleep_ms(300);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  int64_t t0 = lu_now_ms();
  ASSERT_DLOCK_OK(dlock_lock(l, 500));
  int64_t gone = lu_wait_gone(s, "wd:relock", 3000);
  printf("lease 500 after a released watchdog hold: gone after %" PRId64
         " ms\n",
         lu_now_ms() - t0);
  ASSERT_GE(gone, 0);
  ASSERT_LT(lu_now_ms() - t0, 1500);
  ASSERT_DLOCK_ERR(dlock_unlock(l), DLOCK_ELOST);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

TEST(wd_lease_lock_not_renewed) {
  /* A positive lease means no watchdog, even on a client that has one
   * running for another lock. */
  rp_server_t *s = lu_server(1);
  dlock_client_t *c = lu_client(s);
  dlock_t *w = lu_get(c, "wd:other");
  dlock_t *l = lu_get(c, "wd:lease");
  ASSERT_DLOCK_OK(dlock_lock(w, DLOCK_WATCHDOG));
  ASSERT_DLOCK_OK(dlock_lock(l, 700));
  ASSERT_GE(lu_wait_gone(s, "wd:lease", 3000), 0);
  ASSERT_EQ(lu_exists(s, "wd:other"), 1);
  ASSERT_DLOCK_OK(dlock_unlock(w));
  dlock_free(w);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

TEST(wd_many_locks_renewed) {
  enum { N = 40 };
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  dlock_t *l[N];
  char name[64];
  for (int i = 0; i < N; i++) {
    snprintf(name, sizeof(name), "wd:many:%d", i);
    l[i] = lu_get(c, name);
    ASSERT_DLOCK_OK(dlock_lock(l[i], DLOCK_WATCHDOG));
  }
  lu_sleep_ms(1500);
  for (int i = 0; i < N; i++) {
    snprintf(name, sizeof(name), "wd:many:%d", i);
    int64_t p = lu_pttl(s, name);
    ASSERT_GT(p, 0);
    ASSERT_EQ(dlock_is_held(l[i]), 1);
  }
  for (int i = 0; i < N; i++) {
    ASSERT_DLOCK_OK(dlock_unlock(l[i]));
    dlock_free(l[i]);
  }
  redisReply *r = rp_cmd(s, "KEYS wd:many:*");
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->elements, 0);
  freeReplyObject(r);
  dlock_client_close(c);
  rp_free(s);
}

TEST(wd_close_stops_renewal) {
  rp_server_t *s = lu_server(1);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = lu_get(c, "wd:close");
  ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));
  lu_sleep_ms(300);
  dlock_free(l);
  int64_t t0 = lu_now_ms();
  dlock_client_close(c);
  /* Not released by close... */
  ASSERT_EQ(lu_exists(s, "wd:close"), 1);
  /* ...and expires within one watchdog timeout. */
  int64_t gone = lu_wait_gone(s, "wd:close", 3000);
  printf("watchdog lock gone %" PRId64 " ms after close\n", lu_now_ms() - t0);
  ASSERT_GE(gone, 0);
  ASSERT_LT(lu_now_ms() - t0, 1500);
  rp_free(s);
}

TEST(wd_holder_killed) {
  rp_server_t *s = lu_server(0);
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(ready[0]);
    dlock_options_t o;
    lu_options(&o, s);
    dlock_client_t *c = NULL;
    dlock_t *l = NULL;
    if (dlock_client_open(&o, &c) != 0 || dlock_get(c, "wd:killed", &l) != 0)
      _exit(20);
    if (dlock_lock(l, DLOCK_WATCHDOG) != 0)
      _exit(21);
    if (write(ready[1], "1", 1) != 1)
      _exit(22);
    for (;;)
      pause();
  }
  close(ready[1]);
  char b;
  ASSERT_EQ(read(ready[0], &b, 1), 1);
  close(ready[0]);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = lu_get(c, "wd:killed");
  /* The child's watchdog keeps it past two timeouts. */
  lu_sleep_ms(1300);
  ASSERT_EQ(dlock_is_locked(l), 1);
  ASSERT_DLOCK_ERR(dlock_trylock(l, 0, 10000), DLOCK_ETIMEDOUT);

  ASSERT_EQ(kill(pid, SIGKILL), 0);
  int st;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  int64_t t0 = lu_now_ms();
  /* Free within one watchdog timeout (600 ms) plus margin; the waiter
   * needs no unlock message, the TTL bounds its sleep. */
  ASSERT_DLOCK_OK(dlock_trylock(l, 5000, 10000));
  int64_t took = lu_now_ms() - t0;
  printf("lock of a killed holder acquired %" PRId64 " ms after the kill\n",
         took);
  ASSERT_LT(took, 1500);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/* ---- lost locks -------------------------------------------------------- */

TEST(wd_lost_lock_callback_and_elost) {
  rp_server_t *s = lu_server(1);
  lu_lost_t rec;
  lu_lost_init(&rec);
  dlock_options_t o;
  lu_options(&o, s);
  o.on_lost = lu_lost_cb;
  o.on_lost_data = &rec;
  dlock_client_t *c = lu_client_opts(&o);
  dlock_t *l = lu_get(c, "wd:lost");
  ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));
  lu_sleep_ms(250);
  ASSERT_EQ(lu_lost_count(&rec), 0);

  lu_ok(rp_cmd(s, "DEL wd:lost"));
  int64_t t0 = lu_now_ms();
  ASSERT_EQ(lu_lost_wait(&rec, 3000), 1);
  int64_t after = rec.at_ms - t0;
  printf("on_lost fired %" PRId64 " ms after the key was deleted\n", after);
  /* One renewal period is 200 ms. */
  ASSERT_LT(after, 1000);
  ASSERT_EQ(rec.name_len, strlen("wd:lost"));
  ASSERT_STR_EQ(rec.name, "wd:lost");
  ASSERT_EQ(rec.owner, dlock_self());

  ASSERT_DLOCK_ERR(dlock_unlock(l), DLOCK_ELOST);
  ASSERT_DLOCK_ERR(dlock_unlock(l), DLOCK_ENOTHELD);
  /* Reported once, and the lost lock is no longer renewed. */
  lu_sleep_ms(500);
  ASSERT_EQ(lu_lost_count(&rec), 1);
  ASSERT_EQ(lu_exists(s, "wd:lost"), 0);
  /* The lock is usable again. */
  ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));
  ASSERT_DLOCK_OK(dlock_unlock(l));
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

TEST(wd_lost_lock_taken_by_other) {
  /* Deleted and immediately taken by a foreign owner: the renewal must not
   * extend the other's lock, and our unlock must not delete it. */
  rp_server_t *s = lu_server(0);
  lu_lost_t rec;
  lu_lost_init(&rec);
  dlock_options_t o;
  lu_options(&o, s);
  o.on_lost = lu_lost_cb;
  o.on_lost_data = &rec;
  dlock_client_t *c = lu_client_opts(&o);
  dlock_t *l = lu_get(c, "wd:stolen");
  uint64_t owner = dlock_owner_new();
  ASSERT_DLOCK_OK(dlock_lock_as(l, owner, DLOCK_WATCHDOG));
  lu_ok(rp_cmd(s, "DEL wd:stolen"));
  lu_ok(rp_cmd(s, "HSET wd:stolen javauuid:9 1"));
  lu_ok(rp_cmd(s, "PEXPIRE wd:stolen 5000"));
  ASSERT_EQ(lu_lost_wait(&rec, 3000), 1);
  ASSERT_EQ(rec.owner, owner);
  ASSERT_STR_EQ(rec.name, "wd:stolen");
  /* Not renewed to 600 ms by us: its own 5 s lease is counting down. */
  int64_t p = lu_pttl(s, "wd:stolen");
  ASSERT_GT(p, 600);
  ASSERT_DLOCK_ERR(dlock_unlock_as(l, owner), DLOCK_ELOST);
  ASSERT_EQ(lu_hget_num(s, "wd:stolen", "javauuid:9"), 1);
  ASSERT_EQ(lu_hlen(s, "wd:stolen"), 1);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

TEST(wd_lost_by_expiry_reported) {
  /* A lock whose key vanished because its renewals could not run (here:
   * its expiry was shortened behind the client's back) is reported too. */
  rp_server_t *s = lu_server(1);
  lu_lost_t rec;
  lu_lost_init(&rec);
  dlock_options_t o;
  lu_options(&o, s);
  o.on_lost = lu_lost_cb;
  o.on_lost_data = &rec;
  dlock_client_t *c = lu_client_opts(&o);
  dlock_t *l = lu_get(c, "wd:expire");
  ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));
  lu_ok(rp_cmd(s, "PEXPIRE wd:expire 1"));
  ASSERT_EQ(lu_lost_wait(&rec, 3000), 1);
  ASSERT_DLOCK_ERR(dlock_unlock(l), DLOCK_ELOST);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/* The callback may call dlock functions (dlock.h): here it checks the lock
 * and releases the lost hold from inside the watchdog's thread. */
typedef struct reentry {
  dlock_t *l;
  pthread_mutex_t mu;
  int done;
  int is_locked;
  int unlock_rc;
  uint64_t owner;
} reentry_t;

static void reentrant_cb(void *data, const char *name, size_t len,
                         uint64_t owner) {
  reentry_t *r = data;
  (void)name;
  (void)len;
  int locked = dlock_is_locked(r->l);
  int urc = dlock_unlock_as(r->l, owner);
  pthread_mutex_lock(&r->mu);
  r->is_locked = locked;
  r->unlock_rc = urc;
  r->owner = owner;
  r->done++;
  pthread_mutex_unlock(&r->mu);
}

TEST(wd_lost_callback_may_call_dlock) {
  rp_server_t *s = lu_server(1);
  reentry_t r;
  memset(&r, 0, sizeof(r));
  pthread_mutex_init(&r.mu, NULL);
  dlock_options_t o;
  lu_options(&o, s);
  o.on_lost = reentrant_cb;
  o.on_lost_data = &r;
  dlock_client_t *c = lu_client_opts(&o);
  r.l = lu_get(c, "wd:cbcall");
  uint64_t owner = dlock_owner_new();
  ASSERT_DLOCK_OK(dlock_lock_as(r.l, owner, DLOCK_WATCHDOG));
  lu_ok(rp_cmd(s, "DEL wd:cbcall"));
  int64_t t0 = lu_now_ms();
  int done = 0;
  while (lu_now_ms() - t0 < 5000) {
    pthread_mutex_lock(&r.mu);
    done = r.done;
    pthread_mutex_unlock(&r.mu);
    if (done)
      break;
    lu_sleep_ms(10);
  }
  if (!done)
    TEST_FAIL("on_lost calling dlock functions did not return within 5 s "
              "(deadlock in the watchdog thread?)");
  ASSERT_EQ(done, 1);
  ASSERT_EQ(r.owner, owner);
  ASSERT_EQ(r.is_locked, 0);
  ASSERT_EQ(r.unlock_rc, DLOCK_ELOST);
  /* The client still works. */
  ASSERT_DLOCK_OK(dlock_lock(r.l, DLOCK_WATCHDOG));
  ASSERT_DLOCK_OK(dlock_unlock(r.l));
  dlock_free(r.l);
  dlock_client_close(c);
  rp_free(s);
}

typedef struct as_arg {
  dlock_t *l;
  uint64_t owner;
  int rc;
} as_arg_t;

static void *lock_as_thread(void *p) {
  as_arg_t *a = p;
  a->rc = dlock_lock_as(a->l, a->owner, DLOCK_WATCHDOG);
  return NULL;
}

TEST(wd_explicit_owner_outlives_thread) {
  /* A watchdog hold taken by a thread that then exits stays renewed for
   * its explicit owner, and another thread releases it. */
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = lu_get(c, "wd:task");
  as_arg_t a = {l, dlock_owner_new(), -100};
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, lock_as_thread, &a), 0);
  ASSERT_EQ(pthread_join(t, NULL), 0);
  ASSERT_EQ(a.rc, 0);
  lu_sleep_ms(1500);
  ASSERT_EQ(dlock_is_held_as(l, a.owner), 1);
  ASSERT_GT(lu_pttl(s, "wd:task"), 0);
  ASSERT_DLOCK_OK(dlock_unlock_as(l, a.owner));
  ASSERT_EQ(lu_exists(s, "wd:task"), 0);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

TEST(wd_paused_holder_loses_lock) {
  /* Kleppmann's case: the holder process is stopped (SIGSTOP) past its
   * watchdog timeout, another takes the lock with a larger token; when the
   * first resumes it learns it lost the lock and must not disturb the new
   * holder. */
  rp_server_t *s = lu_server(1);
  int up[2], down[2];
  ASSERT_EQ(pipe(up), 0);
  ASSERT_EQ(pipe(down), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(up[0]);
    close(down[1]);
    lu_lost_t rec;
    lu_lost_init(&rec);
    dlock_options_t o;
    lu_options(&o, s);
    o.on_lost = lu_lost_cb;
    o.on_lost_data = &rec;
    dlock_client_t *c = NULL;
    dlock_t *l = NULL;
    if (dlock_client_open(&o, &c) != 0 || dlock_get(c, "wd:paused", &l) != 0)
      _exit(20);
    if (dlock_lock(l, DLOCK_WATCHDOG) != 0)
      _exit(21);
    uint64_t tok = dlock_token(l);
    if (write(up[1], &tok, sizeof(tok)) != sizeof(tok))
      _exit(22);
    char go;
    if (read(down[0], &go, 1) != 1)
      _exit(23);
    /* Resumed: the watchdog's next renewal finds the lock gone. */
    if (lu_lost_wait(&rec, 3000) != 1)
      _exit(24);
    int rc = dlock_unlock(l);
    if (rc != DLOCK_ELOST)
      _exit(25);
    dlock_free(l);
    dlock_client_close(c);
    _exit(0);
  }
  close(up[1]);
  close(down[0]);
  uint64_t tok1 = 0;
  ASSERT_EQ(read(up[0], &tok1, sizeof(tok1)), (ssize_t)sizeof(tok1));
  ASSERT_GT(tok1, 0);
  ASSERT_EQ(kill(pid, SIGSTOP), 0);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = lu_get(c, "wd:paused");
  int64_t t0 = lu_now_ms();
  ASSERT_DLOCK_OK(dlock_trylock(l, 5000, 30000));
  printf("taken over %" PRId64 " ms after the holder was stopped\n",
         lu_now_ms() - t0);
  ASSERT_GT(dlock_token(l), tok1);
  ASSERT_EQ(kill(pid, SIGCONT), 0);
  ASSERT_EQ(write(down[1], "g", 1), 1);
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  ASSERT(WIFEXITED(st));
  ASSERT_EQ(WEXITSTATUS(st), 0);
  /* The new holder is intact: not released, not renewed by the old one. */
  ASSERT_EQ(dlock_is_held(l), 1);
  ASSERT_EQ(lu_hlen(s, "wd:paused"), 1);
  ASSERT_GT(lu_pttl(s, "wd:paused"), 20000);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  dlock_free(l);
  dlock_client_close(c);
  close(up[0]);
  close(down[1]);
  rp_free(s);
}

/* ---- fencing tokens ---------------------------------------------------- */

TEST(wd_fencing_tokens_increase) {
  rp_server_t *s = lu_server(0);
  dlock_client_t *c1 = lu_client(s);
  dlock_client_t *c2 = lu_client(s);
  dlock_t *a = lu_get(c1, "wd:fence");
  dlock_t *b = lu_get(c2, "wd:fence");
  char tk[128];
  size_t tkn = lu_token_key(tk, sizeof(tk), "wd:fence", 8);

  ASSERT_EQ(dlock_token(a), 0);
  uint64_t last = 0;
  for (int i = 0; i < 6; i++) {
    dlock_t *l = (i % 2) ? b : a;
    ASSERT_DLOCK_OK(dlock_lock(l, i % 3 ? 10000 : DLOCK_WATCHDOG));
    uint64_t t = dlock_token(l);
    ASSERT_GT(t, last);
    ASSERT_EQ((int64_t)t, lu_get_num_n(s, tk, tkn));
    /* A reentrant acquisition keeps the token. */
    ASSERT_DLOCK_OK(dlock_lock(l, 10000));
    ASSERT_EQ(dlock_token(l), t);
    ASSERT_EQ((int64_t)t, lu_get_num_n(s, tk, tkn));
    ASSERT_DLOCK_OK(dlock_unlock(l));
    ASSERT_EQ(dlock_token(l), t);
    ASSERT_DLOCK_OK(dlock_unlock(l));
    ASSERT_EQ(dlock_token(l), 0);
    last = t;
  }
  /* Explicit owners: each free->held transition gets a larger token. */
  uint64_t o1 = dlock_owner_new(), o2 = dlock_owner_new();
  ASSERT_DLOCK_OK(dlock_lock_as(a, o1, 10000));
  uint64_t t1 = dlock_token_as(a, o1);
  ASSERT_GT(t1, last);
  ASSERT_EQ(dlock_token_as(a, o2), 0);
  ASSERT_EQ(dlock_token(a), 0);
  ASSERT_DLOCK_OK(dlock_unlock_as(a, o1));
  ASSERT_DLOCK_OK(dlock_lock_as(a, o2, 10000));
  ASSERT_GT(dlock_token_as(a, o2), t1);
  ASSERT_EQ(dlock_token_as(a, o1), 0);
  ASSERT_DLOCK_OK(dlock_unlock_as(a, o2));
  dlock_free(a);
  dlock_free(b);
  dlock_client_close(c1);
  dlock_client_close(c2);
  rp_free(s);
}

TEST(wd_fencing_token_after_expiry_and_takeover) {
  rp_server_t *s = lu_server(1);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = lu_get(c, "wd:fence2");
  uint64_t slow = dlock_owner_new(), fast = dlock_owner_new();
  ASSERT_DLOCK_OK(dlock_lock_as(l, slow, 300));
  uint64_t t_slow = dlock_token_as(l, slow);
  ASSERT_GT(t_slow, 0);
  /* The slow holder "pauses" past its lease; another owner takes over. */
  ASSERT_DLOCK_OK(dlock_trylock_as(l, fast, 3000, 10000));
  uint64_t t_fast = dlock_token_as(l, fast);
  ASSERT_GT(t_fast, t_slow);
  ASSERT_DLOCK_ERR(dlock_unlock_as(l, slow), DLOCK_ELOST);
  ASSERT_EQ(dlock_token_as(l, slow), 0);
  ASSERT_DLOCK_OK(dlock_unlock_as(l, fast));

  /* Tokens survive foreign holders in between (they do not bump it). */
  lu_ok(rp_cmd(s, "HSET wd:fence2 javauuid:1 1"));
  lu_ok(rp_cmd(s, "DEL wd:fence2"));
  ASSERT_DLOCK_OK(dlock_lock(l, 10000));
  ASSERT_GT(dlock_token(l), t_fast);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}
