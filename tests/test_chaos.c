/*
 * Fault injection, the short version: each test runs one scenario of
 * tests/chaos for a few seconds (3 processes x 2 threads, watchdog lease
 * 600 ms, fixed lease 500 ms, command timeout 300 ms) and checks the
 * recorded history. "make chaos" runs the same scenarios for minutes.
 *
 * Where dlock promises safety the verdict must be clean: no two holds that
 * both believed they held the lock at once, no stale fenced write
 * accepted, every paused holder told DLOCK_ELOST, recovery in time. Where
 * it cannot promise it (a Redis restarted without persistence, a holder
 * paused past its lease), the test shows what goes wrong, and that the
 * fencing token still protects the resource.
 */
#include "chaos.h"
#include "chaos_internal.h"
#include "harness/test.h"

/*
 * Under valgrind or ThreadSanitizer everything runs tens of times slower:
 * leases run out in the middle of critical sections and few faults fit in
 * a run. The safety promises are checked there too; what depends on speed
 * (how many faults, how fast the recovery) only at full speed.
 */
static int at_full_speed(void) { return !chaos_slow_runtime(); }

/* Runs 'scenario' for 'ms', prints its summary and fails the test on any
 * broken promise. */
static void run(const char *scenario, int64_t ms, chaos_result_t *r) {
  chaos_config_t c;
  ASSERT_EQ(chaos_config_init(&c, scenario), 0);
  c.duration_ms = ms;
  ASSERT_EQ(chaos_run(&c, r), 0);
  chaos_print_summary(stdout, &c, r);
  fflush(stdout);
  char why[160];
  if (at_full_speed() ? !chaos_verdict(&c, r, why, sizeof(why))
                      : !chaos_safe(&c, r, why, sizeof(why)))
    TEST_FAIL("scenario %s broke a promise: %s", scenario, why);
  if (at_full_speed())
    ASSERT_GT(r->acquired, 50);
}

/* One history event of worker 'owner' (its pid is made up from it). */
static chaos_event_t ev_of(int64_t t, chaos_ev_t kind, int owner, int64_t a,
                           int64_t b, int64_t c) {
  chaos_event_t e = {t, kind, owner, 1000 + owner, 1, a, b, c, (size_t)t};
  return e;
}

/*
 * The checker itself, on a made-up history with one violation of each
 * kind, so that a clean verdict elsewhere means "nothing found" rather
 * than "nothing looked for". Times are in microseconds.
 */
TEST(checker_finds_planted_violations) {
  const chaos_event_t ev[] = {
      ev_of(0, EV_ACQ, 1, 0, 0, 0),
      ev_of(5, EV_ACQ, 2, 0, 0, 0),
      /* Owner 1 holds 10..50 with token 5 and writes with it. */
      ev_of(10, EV_OK, 1, 5, 0, 0),
      ev_of(12, EV_WR, 1, 1, 1, 0),
      ev_of(20, EV_FW, 1, 5, 1, 15),
      /* Owner 2 holds 30..60 with token 6: both unlock with 0, so the
       * overlap is silent, and one increment is lost. */
      ev_of(30, EV_OK, 2, 6, 0, 0),
      ev_of(35, EV_WR, 2, 1, 1, 0),
      ev_of(50, EV_REL, 1, 0, 0, 0),
      ev_of(51, EV_RELD, 1, 0, 0, 0),
      ev_of(60, EV_REL, 2, 0, 0, 0),
      ev_of(61, EV_RELD, 2, 0, 0, 0),
      /* Owner 3 asks after token 6 was granted and gets 6 again (a
       * regression), and its write with token 4 is accepted after token 5
       * was (stale). It is told DLOCK_ELOST, so its overlap with owner 4
       * is a detected one. */
      ev_of(70, EV_ACQ, 3, 0, 0, 0),
      ev_of(75, EV_ACQ, 4, 0, 0, 0),
      ev_of(80, EV_OK, 3, 6, 0, 0),
      ev_of(86, EV_FW, 3, 4, 1, 85),
      ev_of(88, EV_OK, 4, 7, 0, 0),
      ev_of(90, EV_REL, 3, 0, 0, 0),
      ev_of(91, EV_RELD, 3, DLOCK_ELOST, 0, 0),
      ev_of(100, EV_REL, 4, 0, 0, 0),
      ev_of(101, EV_RELD, 4, 0, 0, 0),
  };
  /* The resource's log: token 4 accepted after token 5. */
  const chaos_fence_entry_t log[] = {{5, 1, 1}, {4, 3, 1}};
  chaos_final_t fin = {1, log, 2};
  chaos_config_t c;
  ASSERT_EQ(chaos_config_init(&c, "none"), 0);
  chaos_result_t r;
  memset(&r, 0, sizeof(r));
  chaos__check(&c, ev, sizeof(ev) / sizeof(ev[0]), &fin, &r);
  ASSERT_EQ(r.acquired, 4);
  ASSERT_EQ(r.silent_overlaps, 1);
  ASSERT_EQ(r.detected_overlaps, 1);
  ASSERT_EQ(r.unconfirmed_overlaps, 0);
  ASSERT_EQ(r.token_regressions, 1);
  ASSERT_EQ(r.stale_accepted, 2); /* once in the log, once in the records */
  ASSERT_EQ(r.released_lost, 1);
  ASSERT_EQ(r.lost_updates, 1);
  ASSERT_EQ(r.unexplained_lost_updates, 0);
  ASSERT_EQ(chaos_verdict(&c, &r, NULL, 0), 0);
}

/* Without faults nothing is lost, refused or late: the baseline that
 * makes the other scenarios' numbers mean something. */
TEST(no_faults) {
  chaos_result_t r;
  run("none", 3000, &r);
  if (at_full_speed()) {
    ASSERT_EQ(r.released_lost, 0);
    ASSERT_EQ(r.detected_overlaps, 0);
    ASSERT_EQ(r.lost_updates, 0);
    ASSERT_EQ(r.fenced_refused, 0);
    ASSERT_EQ(r.final_counter, r.increments_ok);
  }
}

/* A holder SIGKILLed: the lock is free again within lease + 1 s, and
 * someone else takes it. */
TEST(holder_killed) {
  chaos_result_t r;
  run("kill", 5000, &r);
  if (at_full_speed()) {
    ASSERT_GE(r.faults[CHAOS_KILL_HOLDER], 2);
    ASSERT_EQ(r.free_after_death.n, r.faults[CHAOS_KILL_HOLDER]);
    ASSERT_LE(r.free_after_death.max_ms, r.lease_limit_ms);
    ASSERT_GE(r.progress_after_death.n, 1);
  }
}

/*
 * A holder SIGSTOPped past its lease, then resumed: the lock went to
 * another worker meanwhile, so the two holds overlap. dlock cannot prevent
 * that; it must tell the paused holder (DLOCK_ELOST at unlock), and the
 * resource must refuse its late write by its older token.
 */
TEST(holder_stopped_past_lease) {
  chaos_result_t r;
  run("stop", 7000, &r);
  ASSERT_EQ(r.stopped_holds_lost, r.stopped_holds);
  ASSERT_EQ(r.stale_accepted, 0);
  if (at_full_speed()) {
    ASSERT_GE(r.faults[CHAOS_STOP_HOLDER], 2);
    ASSERT_GE(r.stopped_holds, 1);
    ASSERT_GE(r.detected_overlaps, 1);
    ASSERT_GE(r.stopped_writes_refused, 1);
  }
}

/* Redis paused for less than the command timeout, for more, and for more
 * than the lease: waiters go on once it returns. */
TEST(redis_paused) {
  chaos_result_t r;
  run("pause", 6000, &r);
  if (at_full_speed()) {
    ASSERT_GE(r.faults[CHAOS_PAUSE_SHORT], 1);
    ASSERT_GE(r.faults[CHAOS_PAUSE_LONG], 1);
    ASSERT_GE(r.faults[CHAOS_PAUSE_PAST_LEASE], 1);
    ASSERT_GE(r.progress_after_heal[CHAOS_PAUSE_PAST_LEASE].n, 1);
  }
}

/* Redis killed and restarted with its AOF (fsync always): the locks and
 * the token counter survive. */
TEST(redis_restarted_with_aof) {
  chaos_result_t r;
  run("restart-aof", 5000, &r);
  ASSERT_EQ(r.token_regressions, 0);
  if (at_full_speed()) {
    ASSERT_GE(r.faults[CHAOS_RESTART_AOF], 2);
    ASSERT_GE(r.progress_after_heal[CHAOS_RESTART_AOF].n, 1);
  }
}

/*
 * Redis restarted without persistence forgets the locks and the token
 * counter: this is where dlock cannot promise exclusion, and the run shows
 * it (tokens start again from 1, so the fencing token no longer orders the
 * holders). The resource must still refuse every stale write: none is
 * accepted, and the new holders' low tokens are refused.
 */
TEST(redis_restarted_without_persistence) {
  chaos_result_t r;
  run("restart-empty", 5000, &r);
  ASSERT_EQ(r.stale_accepted, 0);
  if (r.faults[CHAOS_RESTART_EMPTY] > 0 && r.acquired > 0) {
    ASSERT_GE(r.token_regressions, 1);
    ASSERT_GE(r.fenced_refused, 1);
  }
}

/* Connections killed (CLIENT KILL TYPE normal / pubsub) and the script
 * cache flushed mid-run: reconnects and reloads, no error seen as a loss. */
TEST(client_kill_and_script_flush) {
  chaos_result_t r;
  run("clients", 4000, &r);
  if (at_full_speed()) {
    ASSERT_GE(r.faults[CHAOS_CLIENT_KILL], 2);
    ASSERT_GE(r.faults[CHAOS_SCRIPT_FLUSH], 2);
    ASSERT_EQ(r.detected_overlaps, 0);
  }
}

/* The single-Redis faults (holders killed and stopped, Redis paused and
 * restarted with its AOF, connections killed) with every client on
 * rediss://: reconnects go through the TLS handshake again, and every
 * promise holds as over plain TCP. */
TEST(tls_mixed_faults) {
  chaos_result_t r;
  run("tls-mixed", 6000, &r);
  ASSERT_EQ(r.token_regressions, 0);
  if (at_full_speed()) {
    int faults = 0;
    for (int f = 0; f < CHAOS_FAULT_COUNT; f++)
      faults += r.faults[f];
    ASSERT_GE(faults, 3);
  }
}

/* RedLock over five servers, two of them killed or paused at a time:
 * still safe, still making progress. */
TEST(redlock_minority_down) {
  chaos_result_t r;
  run("redlock-minority", 6000, &r);
  ASSERT_EQ(r.token_regressions, 0);
  if (at_full_speed())
    ASSERT_GE(r.faults[CHAOS_RED_KILL_MINORITY] +
                  r.faults[CHAOS_RED_PAUSE_MINORITY],
              2);
}

/* RedLock with three of five servers killed: no grant while they are
 * down, and grants again once they are back. */
TEST(redlock_majority_down) {
  chaos_result_t r;
  run("redlock-majority", 6000, &r);
  ASSERT_EQ(r.quorumless_grants, 0);
  if (at_full_speed()) {
    ASSERT_GE(r.faults[CHAOS_RED_KILL_MAJORITY], 2);
    ASSERT_GE(r.noquorum, 1);
    ASSERT_EQ(r.progress_after_heal[CHAOS_RED_KILL_MAJORITY].n,
              r.faults[CHAOS_RED_KILL_MAJORITY]);
  }
}
