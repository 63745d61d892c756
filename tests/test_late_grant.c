/*
 * An acquisition reported as failed must leave nothing behind that blocks
 * others. While redis-server is stopped (SIGSTOP), a trylock gives up at
 * its command timeout with DLOCK_EIO; the server still holds the command
 * and runs it once it goes on (SIGCONT), granting the lock, or a queue
 * place, to an owner that was told it did not get it. Without a remedy the
 * grant stays for the whole lease (30 s here) and every other client waits
 * that long. The client must give back what was granted late as soon as
 * Redis answers again, for every kind, and only that: an owner that held
 * the lock already keeps exactly its own holds.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "lock_util.h"

/* The stalled client's lease: what another client would wait for. */
#define LEASE_MS 30000
/* The stalled client's command timeout: when its attempt gives up. */
#define STALLED_TIMEOUT_MS 300
/* How long the other client may take to get the lock once Redis is back:
 * generous for a loaded machine, and far below the lease. */
#define PROMPT_MS 8000

static dlock_client_t *stalled_client(const rp_server_t *s) {
  dlock_options_t o;
  lu_options(&o, s);
  o.connect_timeout_ms = STALLED_TIMEOUT_MS;
  o.command_timeout_ms = STALLED_TIMEOUT_MS;
  o.watchdog_timeout_ms = LEASE_MS;
  /* The attempts under test fail, rather than ride the stall out. */
  o.outage_wait_ms = 0;
  return lu_client_opts(&o);
}

/* A client that holds a lock through the stall: its lease must outlast
 * the stall however slowly the test runs (valgrind), or Redis lets the
 * lock expire the moment it goes on and the holder rightly hears
 * DLOCK_ELOST. */
static dlock_client_t *holding_client(const rp_server_t *s) {
  dlock_options_t o;
  lu_options(&o, s);
  o.watchdog_timeout_ms = LEASE_MS;
  return lu_client_opts(&o);
}

static dlock_t *get_kind(dlock_client_t *c, dlock_kind_t kind,
                         const char *name) {
  dlock_t *l = NULL;
  ASSERT_DLOCK_OK(dlock_get_kind(c, kind, name, strlen(name), &l));
  return l;
}

/* Takes and releases 'l' once, so that the server has its scripts: the
 * attempt made during the stall must be one that can succeed, not one
 * answered NOSCRIPT. */
static void warm_up(dlock_t *l) {
  ASSERT_DLOCK_OK(dlock_trylock(l, 0, DLOCK_WATCHDOG));
  ASSERT_DLOCK_OK(dlock_unlock(l));
}

/* Runs 'l''s trylock (no wait) while the server is stopped; it must fail
 * at its command timeout. The server goes on a moment later and runs the
 * attempt. */
static void trylock_during_stall(rp_server_t *s, dlock_t *l, int64_t wait_ms) {
  ASSERT_EQ(rp_pause(s), 0);
  int64_t t0 = lu_now_ms();
  int rc = dlock_trylock(l, wait_ms, DLOCK_WATCHDOG);
  printf("trylock during the stall: %s after %lld ms (%s)\n",
         dlock_err_name(rc), (long long)(lu_now_ms() - t0), dlock_last_error());
  ASSERT_EQ(rc, DLOCK_EIO);
  lu_sleep_ms(200);
  ASSERT_EQ(rp_resume(s), 0);
}

/* Another client takes 'l' (waiting up to PROMPT_MS) and lets it go;
 * returns how long it waited. */
static int64_t other_takes(dlock_t *l) {
  int64_t t0 = lu_now_ms();
  int rc = dlock_trylock(l, PROMPT_MS, 5000);
  int64_t took = lu_now_ms() - t0;
  printf("the other client's trylock: %s after %lld ms\n", dlock_err_name(rc),
         (long long)took);
  ASSERT_DLOCK_OK(rc);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  return took;
}

/* One kind: the stalled client tries 'kind', the other client then takes
 * 'other_kind' of the same name, which the late grant would block. */
static void late_grant_case(dlock_kind_t kind, dlock_kind_t other_kind) {
  rp_server_t *s = lu_server(0);
  dlock_client_t *a = stalled_client(s), *b = lu_client(s);
  const char *name = "late:grant";
  dlock_t *la = get_kind(a, kind, name), *lb = get_kind(b, other_kind, name);

  warm_up(la);
  trylock_during_stall(s, la, 0);
  /* The client does not think it holds the lock. */
  ASSERT_EQ(dlock_token(la), 0);
  other_takes(lb);
  /* Nothing is left of the failed attempt: the stalled client can take
   * the lock normally afterwards, and lets it go with one unlock. */
  ASSERT_DLOCK_OK(dlock_trylock(la, 2000, DLOCK_WATCHDOG));
  ASSERT_EQ(dlock_hold_count(la), 1);
  ASSERT_DLOCK_OK(dlock_unlock(la));
  ASSERT_EQ(dlock_is_locked(lb), 0);

  dlock_free(la);
  lu_free_two(s, a, NULL, b, lb);
}

TEST(late_grant_reentrant) {
  late_grant_case(DLOCK_REENTRANT, DLOCK_REENTRANT);
}

TEST(late_grant_spin) { late_grant_case(DLOCK_SPIN, DLOCK_SPIN); }

TEST(late_grant_fair) { late_grant_case(DLOCK_FAIR, DLOCK_FAIR); }

TEST(late_grant_read) { late_grant_case(DLOCK_READ, DLOCK_WRITE); }

TEST(late_grant_write) { late_grant_case(DLOCK_WRITE, DLOCK_READ); }

/*
 * The owner tries again at once. While Redis still does not answer, its
 * earlier attempt cannot be given back, and the new one fails the same
 * way rather than be sent ahead of that undo. Once Redis is back, the
 * owner's new hold is one hold, and stays: the undo of the earlier attempt
 * (by the owner or in the background) never takes it back.
 */
TEST(late_grant_owner_tries_again) {
  rp_server_t *s = lu_server(0);
  dlock_client_t *a = stalled_client(s), *b = lu_client(s);
  dlock_t *la = lu_get(a, "late:again"), *lb = lu_get(b, "late:again");

  warm_up(la);
  ASSERT_EQ(rp_pause(s), 0);
  ASSERT_EQ(dlock_trylock(la, 0, DLOCK_WATCHDOG), DLOCK_EIO);
  int rc = dlock_trylock(la, 0, DLOCK_WATCHDOG);
  printf("trying again during the stall: %s (%s)\n", dlock_err_name(rc),
         dlock_last_error());
  ASSERT_EQ(rc, DLOCK_EIO);
  lu_sleep_ms(200);
  ASSERT_EQ(rp_resume(s), 0);

  ASSERT_DLOCK_OK(dlock_trylock(la, 2000, DLOCK_WATCHDOG));
  uint64_t token = dlock_token(la);
  ASSERT_GT(token, 0);
  ASSERT_EQ(dlock_hold_count(la), 1);
  lu_sleep_ms(500);
  ASSERT_EQ(dlock_is_held(la), 1);
  ASSERT_EQ(dlock_hold_count(la), 1);
  ASSERT_EQ(dlock_trylock(lb, 0, 5000), DLOCK_ETIMEDOUT);

  ASSERT_DLOCK_OK(dlock_unlock(la));
  other_takes(lb);

  lu_free_two(s, a, la, b, lb);
}

/*
 * A reentrant attempt by an owner that holds the lock already: granted
 * late, it only counts one hold more on the server, which must not outlive
 * the owner's own holds. The owner keeps the lock (nobody else gets it
 * meanwhile), and its one unlock frees it.
 */
TEST(late_grant_reentrant_inner) {
  rp_server_t *s = lu_server(0);
  dlock_client_t *a = stalled_client(s), *b = lu_client(s);
  dlock_t *la = lu_get(a, "late:inner"), *lb = lu_get(b, "late:inner");

  ASSERT_DLOCK_OK(dlock_lock(la, DLOCK_WATCHDOG));
  uint64_t token = dlock_token(la);
  trylock_during_stall(s, la, 0);
  /* Redis counted a second hold when it ran the attempt; it is taken off
   * again, and the owner's own hold stays. */
  int64_t until = lu_now_ms() + PROMPT_MS;
  while (dlock_hold_count(la) != 1 && lu_now_ms() < until)
    lu_sleep_ms(10);
  ASSERT_EQ(dlock_hold_count(la), 1);
  ASSERT_EQ(dlock_token(la), token);
  ASSERT_EQ(dlock_trylock(lb, 1000, 5000), DLOCK_ETIMEDOUT);
  ASSERT_EQ(dlock_is_held(la), 1);

  ASSERT_DLOCK_OK(dlock_unlock(la));
  other_takes(lb);

  lu_free_two(s, a, la, b, lb);
}

/*
 * A fair waiter whose attempt is answered late is queued by it; once the
 * holder lets go, the release hands the lock to the head of the queue,
 * the waiter that gave up. Its place in the queue must go too.
 */
TEST(late_grant_fair_queue_entry) {
  rp_server_t *s = lu_server(0);
  dlock_client_t *a = stalled_client(s), *b = lu_client(s),
                 *holder = holding_client(s);
  const char *name = "late:queue";
  dlock_t *la = get_kind(a, DLOCK_FAIR, name),
          *lb = get_kind(b, DLOCK_FAIR, name),
          *lh = get_kind(holder, DLOCK_FAIR, name);

  warm_up(la);
  ASSERT_DLOCK_OK(dlock_lock(lh, DLOCK_WATCHDOG));
  trylock_during_stall(s, la, 5000);
  ASSERT_EQ(dlock_hold_count(la), 0);

  char queue[256];
  lu_keyname(queue, sizeof(queue), "redisson_lock_queue", name, strlen(name));
  /* The attempt queued the waiter when the server ran it; the client takes
   * it out again. */
  int64_t until = lu_now_ms() + PROMPT_MS;
  while (lu_reply_int(rp_cmd(s, "LLEN %s", queue)) != 0 && lu_now_ms() < until)
    lu_sleep_ms(10);
  ASSERT_EQ(lu_reply_int(rp_cmd(s, "LLEN %s", queue)), 0);

  ASSERT_DLOCK_OK(dlock_unlock(lh));
  other_takes(lb);

  dlock_free(lh);
  dlock_client_close(holder);
  dlock_free(la);
  lu_free_two(s, a, NULL, b, lb);
}

/* A MultiLock over two locks: the part asked while Redis was stopped is
 * given back like a single lock. */
TEST(late_grant_multi) {
  rp_server_t *s = lu_server(0);
  dlock_client_t *a = stalled_client(s), *b = lu_client(s);
  dlock_t *parts[2] = {lu_get(a, "late:m1"), lu_get(a, "late:m2")};
  dlock_t *multi = NULL;
  ASSERT_DLOCK_OK(dlock_get_multi(parts, 2, &multi));

  warm_up(multi);
  trylock_during_stall(s, multi, 0);
  dlock_t *b1 = lu_get(b, "late:m1"), *b2 = lu_get(b, "late:m2");
  other_takes(b1);
  other_takes(b2);

  dlock_free(multi);
  dlock_free(parts[0]);
  dlock_free(parts[1]);
  dlock_free(b2);
  lu_free_two(s, a, NULL, b, b1);
}

/*
 * A RedLock over three nodes, two of them stopped during the attempt: it
 * fails without a quorum, and the stopped nodes grant their part once they
 * go on. Another client's RedLock needs two of the three nodes, so those
 * late parts must be given back.
 */
TEST(late_grant_redlock) {
  enum { N = 3 };
  rp_server_t *s[N];
  dlock_client_t *a[N], *b[N];
  dlock_t *ha[N], *hb[N], *ra = NULL, *rb = NULL;
  for (int i = 0; i < N; i++) {
    s[i] = lu_server(0);
    a[i] = stalled_client(s[i]);
    b[i] = lu_client(s[i]);
    ha[i] = lu_get(a[i], "late:red");
    hb[i] = lu_get(b[i], "late:red");
  }
  ASSERT_DLOCK_OK(dlock_get_red(ha, N, &ra));
  ASSERT_DLOCK_OK(dlock_get_red(hb, N, &rb));

  warm_up(ra);
  ASSERT_EQ(rp_pause(s[1]), 0);
  ASSERT_EQ(rp_pause(s[2]), 0);
  int rc = dlock_trylock(ra, 0, DLOCK_WATCHDOG);
  printf("RedLock trylock with two nodes stopped: %s (%s)\n",
         dlock_err_name(rc), dlock_last_error());
  ASSERT(rc < 0);
  lu_sleep_ms(200);
  ASSERT_EQ(rp_resume(s[1]), 0);
  ASSERT_EQ(rp_resume(s[2]), 0);

  other_takes(rb);

  dlock_free(ra);
  dlock_free(rb);
  for (int i = 0; i < N; i++) {
    dlock_free(ha[i]);
    dlock_free(hb[i]);
    dlock_client_close(a[i]);
    dlock_client_close(b[i]);
    rp_free(s[i]);
  }
}
