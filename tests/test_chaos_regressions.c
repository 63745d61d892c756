/*
 * Library defects found by the chaos runs, each reduced to a deterministic
 * test that failed until it was fixed, and now guards the fix.
 *
 * The first: when a final dlock_unlock failed without releasing (DLOCK_EIO
 * because Redis is restarting, or an error reply such as -OOM or the
 * -LOADING of a server reading its AOF), the client kept the hold in its
 * table, and the same owner's next dlock_lock continued that stale hold: no
 * new fencing token, a hold count of 2 in Redis, and the caller's balanced
 * unlock returned 0 while the lock stayed held. The next dlock_lock must be
 * a new hold with a new token.
 */
#include <string.h>

#include "harness/redis_proc.h"
#include "harness/test.h"

static void ok_reply(redisReply *r) {
  ASSERT_NOT_NULL(r);
  ASSERT(r->type != REDIS_REPLY_ERROR);
  freeReplyObject(r);
}

/* A client of 's' with the options a test sets; 0 (or -1 for
 * 'unlock_retries') leaves the library's default. */
static dlock_client_t *repro_client(rp_server_t *s, int64_t command_timeout_ms,
                                    int64_t watchdog_timeout_ms,
                                    int unlock_retries) {
  dlock_options_t o;
  dlock_options_init(&o);
  o.url = rp_url(s);
  if (command_timeout_ms > 0)
    o.command_timeout_ms = command_timeout_ms;
  if (watchdog_timeout_ms > 0)
    o.watchdog_timeout_ms = watchdog_timeout_ms;
  if (unlock_retries >= 0)
    o.unlock_retries = unlock_retries;
  /* The calls under test fail, rather than ride the outage out. */
  o.outage_wait_ms = 0;
  dlock_client_t *c = NULL;
  ASSERT_DLOCK_OK(dlock_client_open(&o, &c));
  return c;
}

static dlock_t *repro_lock(dlock_client_t *c, const char *name) {
  dlock_t *l = NULL;
  ASSERT_DLOCK_OK(dlock_get(c, name, &l));
  return l;
}

static void repro_close(rp_server_t *s, dlock_client_t *c, dlock_t *l) {
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

TEST(lock_after_failed_unlock_is_a_fresh_hold) {
  rp_server_t *s = NULL;
  ASSERT_EQ(rp_start(NULL, &s), 0);
  enum { WATCHDOG_MS = 600 };
  dlock_client_t *c = repro_client(s, 300, WATCHDOG_MS, -1);
  dlock_t *l = repro_lock(c, "repro");

  ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));
  uint64_t first = dlock_token(l);

  /* Redis refuses the release script's writes for a moment. */
  ok_reply(rp_cmd(s, "CONFIG SET maxmemory 1"));
  int rc = dlock_unlock(l);
  ok_reply(rp_cmd(s, "CONFIG SET maxmemory 0"));
  printf("unlock while Redis refused writes: %s (%s)\n", dlock_err_name(rc),
         dlock_last_error());
  ASSERT_NE(rc, 0);

  /* The caller moves on: a new lock/unlock pair. */
  ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));
  uint64_t second = dlock_token(l);
  int count = dlock_hold_count(l);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  printf("tokens %llu then %llu; hold count after the new lock %d; locked "
         "after its unlock: %d\n",
         (unsigned long long)first, (unsigned long long)second, count,
         dlock_is_locked(l));

  /* A new acquisition has a new token, and its unlock frees the lock; at
   * the latest, the failed hold's lease has run out by now. */
  ASSERT_GT(second, first);
  ASSERT_EQ(count, 1);
  test_sleep_ms(WATCHDOG_MS * 2);
  ASSERT_EQ(dlock_is_locked(l), 0);

  repro_close(s, c, l);
}

/* The same through DLOCK_EIO: the unlock comes while Redis is down, and
 * Redis comes back with the lock from its AOF. */
/* Found by the long mixed chaos run: the inner unlock of a hold taken
 * twice failed (Redis paused past the command timeout) after Redis had in
 * fact applied it. The client still counted two holds, so the outer unlock
 * left one on the server, and every later lock/unlock pair of that owner
 * was a reentrant one with the old token. A failed unlock consumes its hold
 * like a successful one: the next call brings the server in line. */
TEST(failed_inner_unlock_still_consumes_its_hold) {
  for (int applied = 0; applied < 2; applied++) {
    rp_server_t *s = NULL;
    ASSERT_EQ(rp_start(NULL, &s), 0);
    dlock_client_t *c = repro_client(s, 300, 3000, 0);
    dlock_t *l = repro_lock(c, "repro:inner");

    ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));
    uint64_t first = dlock_token(l);
    ASSERT_DLOCK_OK(dlock_trylock(l, 0, DLOCK_WATCHDOG));
    ASSERT_EQ(dlock_hold_count(l), 2);

    /* Paused: the release is answered too late ('applied', it then runs),
     * or refused (maxmemory: it never runs). */
    int rc;
    if (applied) {
      ok_reply(rp_cmd(s, "CLIENT PAUSE 600 WRITE"));
      rc = dlock_unlock(l);
      test_sleep_ms(700);
    } else {
      ok_reply(rp_cmd(s, "CONFIG SET maxmemory 1"));
      rc = dlock_unlock(l);
      ok_reply(rp_cmd(s, "CONFIG SET maxmemory 0"));
    }
    printf("inner unlock (%s): %s\n", applied ? "applied late" : "refused",
           dlock_err_name(rc));
    ASSERT_NE(rc, 0);

    /* The outer unlock frees the lock; the next hold is a fresh one. */
    ASSERT_DLOCK_OK(dlock_unlock(l));
    ASSERT_EQ(dlock_is_locked(l), 0);
    ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));
    ASSERT_GT(dlock_token(l), first);
    ASSERT_EQ(dlock_hold_count(l), 1);
    ASSERT_DLOCK_OK(dlock_unlock(l));
    ASSERT_EQ(dlock_is_locked(l), 0);

    repro_close(s, c, l);
  }
}

TEST(lock_after_unlock_during_restart_is_a_fresh_hold) {
  rp_options_t ro;
  rp_options_init(&ro);
  ro.appendonly = 1;
  rp_server_t *s = NULL;
  ASSERT_EQ(rp_start(&ro, &s), 0);
  dlock_client_t *c = repro_client(s, 300, 3000, -1);
  dlock_t *l = repro_lock(c, "repro");

  ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));
  uint64_t first = dlock_token(l);
  ASSERT_EQ(rp_kill(s), 0);
  int rc = dlock_unlock(l);
  ASSERT_EQ(rp_restart(s), 0);
  printf("unlock while Redis was down: %s\n", dlock_err_name(rc));
  ASSERT_EQ(rc, DLOCK_EIO);

  /* The client waits a little before it reconnects after failures. */
  for (int i = 0; i < 50 && (rc = dlock_lock(l, DLOCK_WATCHDOG)) == DLOCK_EIO;
       i++)
    test_sleep_ms(20);
  ASSERT_DLOCK_OK(rc);
  uint64_t second = dlock_token(l);
  int count = dlock_hold_count(l);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  printf("tokens %llu then %llu; hold count after the new lock %d; locked "
         "after its unlock: %d\n",
         (unsigned long long)first, (unsigned long long)second, count,
         dlock_is_locked(l));
  ASSERT_GT(second, first);
  ASSERT_EQ(count, 1);

  repro_close(s, c, l);
}

/*
 * A second, milder defect, which the checker counts as a "reentrant token
 * change" and a "loss reported as ENOTHELD": a reentrant acquisition by an
 * owner whose first hold has expired (its lease ran out, or Redis lost it)
 * silently starts a new hold with a new token and a count of 1. The inner
 * unlock then frees the lock while the outer critical section still runs,
 * and the outer unlock says DLOCK_ENOTHELD; DLOCK_ELOST is never reported.
 */
TEST(reentrant_lock_after_expiry_reports_the_loss) {
  rp_server_t *s = NULL;
  ASSERT_EQ(rp_start(NULL, &s), 0);
  dlock_client_t *c = repro_client(s, 0, 0, -1);
  dlock_t *l = repro_lock(c, "repro");

  ASSERT_DLOCK_OK(dlock_lock(l, 200));
  uint64_t outer = dlock_token(l);
  test_sleep_ms(400); /* the critical section outlives the lease */
  int rc = dlock_trylock(l, 0, 200);
  uint64_t inner = dlock_token(l);
  int inner_unlock = rc == 0 ? dlock_unlock(l) : rc;
  int locked_between = dlock_is_locked(l);
  int outer_unlock = dlock_unlock(l);
  printf("reentrant trylock %s, tokens %llu then %llu; inner unlock %s; "
         "locked before the outer unlock: %d; outer unlock %s\n",
         dlock_err_name(rc), (unsigned long long)outer,
         (unsigned long long)inner, dlock_err_name(inner_unlock),
         locked_between, dlock_err_name(outer_unlock));
  /* Whichever unlock learns of it, the loss must be reported as such. */
  ASSERT(inner_unlock == DLOCK_ELOST || outer_unlock == DLOCK_ELOST ||
         rc == DLOCK_ELOST);

  repro_close(s, c, l);
}

/*
 * A third: a RedLock whose parts were all released or found lost answers
 * its next unlock DLOCK_ENOTHELD from its records, without forgetting the
 * owner's per-RedLock record; the owner's every later acquisition is then
 * counted as a reentrant one and keeps that old token for good, below the
 * tokens other holders got meanwhile. In the chaos run it follows a holder
 * stopped past its lease inside a reentrant hold: the inner unlock says
 * DLOCK_ELOST, the outer one DLOCK_ENOTHELD.
 */
TEST(redlock_token_after_lost_reentrant_hold) {
  enum { N = 3 };
  rp_server_t *s[N];
  dlock_client_t *c[N];
  dlock_t *part[N];
  for (int i = 0; i < N; i++) {
    ASSERT_EQ(rp_start(NULL, &s[i]), 0);
    c[i] = repro_client(s[i], 0, 0, -1);
    part[i] = repro_lock(c[i], "repro");
  }
  dlock_t *red = NULL;
  ASSERT_DLOCK_OK(dlock_get_red(part, N, &red));

  ASSERT_DLOCK_OK(dlock_lock(red, 200));
  ASSERT_DLOCK_OK(dlock_trylock(red, 0, 200));
  uint64_t first = dlock_token(red);
  test_sleep_ms(400); /* both holds' lease runs out */
  int inner = dlock_unlock(red);
  int outer = dlock_unlock(red);
  ASSERT_DLOCK_OK(dlock_lock(red, 200));
  uint64_t second = dlock_token(red);
  printf("unlocks after expiry: %s then %s; tokens %llu then %llu\n",
         dlock_err_name(inner), dlock_err_name(outer),
         (unsigned long long)first, (unsigned long long)second);
  /* A new acquisition after the old hold was given up has a new token. */
  ASSERT_GT(second, first);
  ASSERT_DLOCK_OK(dlock_unlock(red));

  dlock_free(red);
  for (int i = 0; i < N; i++) {
    dlock_free(part[i]);
    dlock_client_close(c[i]);
    rp_free(s[i]);
  }
}
