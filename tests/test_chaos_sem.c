/*
 * Fault injection on an expirable-permit semaphore, the short version:
 * the scenarios of tests/test_chaos.c with the workers taking permits of a
 * semaphore of CHAOS_SEM_PERMITS permits (3 processes x 2 threads, even
 * threads on the watchdog's 600 ms lease, odd ones on a fixed 500 ms one)
 * instead of a lock. "make chaos" runs the same for minutes (sem-*).
 *
 * The promise checked is the semaphore's: never more than N holders at
 * once, counting only those not told DLOCK_ELOST (a holder paused past its
 * lease loses its permit to another, and must hear of it), the permit of
 * a killed holder back within its lease, and the N permits all there when
 * everyone has left, none lost to a fault nor made up by one.
 */
#include "chaos.h"
#include "chaos_internal.h"
#include "harness/test.h"

/* As in test_chaos.c: under valgrind or ThreadSanitizer only the safety
 * promises are checked, not what depends on speed. */
static int at_full_speed(void) { return !chaos_slow_runtime(); }

static void run(const char *scenario, int64_t ms, chaos_result_t *r) {
  chaos_config_t c;
  ASSERT_EQ(chaos_config_init(&c, scenario), 0);
  ASSERT_EQ(c.permits, CHAOS_SEM_PERMITS);
  c.duration_ms = ms;
  ASSERT_EQ(chaos_run(&c, r), 0);
  chaos_print_summary(stdout, &c, r);
  fflush(stdout);
  char why[160];
  if (at_full_speed() ? !chaos_verdict(&c, r, why, sizeof(why))
                      : !chaos_safe(&c, r, why, sizeof(why)))
    TEST_FAIL("scenario %s broke a promise: %s", scenario, why);
  ASSERT_LE(r->max_holders, CHAOS_SEM_PERMITS);
  ASSERT_EQ(r->permits_drift, 0);
  if (at_full_speed())
    ASSERT_GT(r->acquired, 50);
}

static chaos_event_t ev_of(int64_t t, chaos_ev_t kind, int owner, int64_t a) {
  chaos_event_t e = {t, kind, owner, 1000 + owner, 1, a, 0, 0, (size_t)t};
  return e;
}

/*
 * The semaphore's checker on a made-up history with N = 2: three clean
 * holders at once (silent), three where one was told DLOCK_ELOST
 * (detected), three where one's release failed (unconfirmed), and two at
 * once (fine). Times in microseconds; owner o holds token o.
 */
TEST(checker_counts_holders_above_n) {
  const chaos_event_t ev[] = {
      /* 10..40: owners 1, 2, 3 all released with 0. */
      ev_of(1, EV_ACQ, 1, 0),
      ev_of(2, EV_ACQ, 2, 0),
      ev_of(3, EV_ACQ, 3, 0),
      ev_of(10, EV_OK, 1, 1),
      ev_of(11, EV_OK, 2, 2),
      ev_of(12, EV_OK, 3, 3),
      ev_of(30, EV_REL, 1, 0),
      ev_of(31, EV_RELD, 1, 0),
      ev_of(32, EV_REL, 2, 0),
      ev_of(33, EV_RELD, 2, 0),
      ev_of(34, EV_REL, 3, 0),
      ev_of(35, EV_RELD, 3, 0),
      /* 50..80: owner 6 was told its permit was lost. */
      ev_of(41, EV_ACQ, 4, 0),
      ev_of(42, EV_ACQ, 5, 0),
      ev_of(43, EV_ACQ, 6, 0),
      ev_of(50, EV_OK, 6, 6),
      ev_of(51, EV_OK, 4, 7),
      ev_of(52, EV_OK, 5, 8),
      ev_of(60, EV_REL, 4, 0),
      ev_of(61, EV_RELD, 4, 0),
      ev_of(62, EV_REL, 5, 0),
      ev_of(63, EV_RELD, 5, 0),
      ev_of(64, EV_REL, 6, 0),
      ev_of(65, EV_RELD, 6, DLOCK_ELOST),
      /* 90..120: owner 9's release got no answer. */
      ev_of(81, EV_ACQ, 7, 0),
      ev_of(82, EV_ACQ, 8, 0),
      ev_of(83, EV_ACQ, 9, 0),
      ev_of(90, EV_OK, 7, 9),
      ev_of(91, EV_OK, 8, 10),
      ev_of(92, EV_OK, 9, 11),
      ev_of(100, EV_REL, 7, 0),
      ev_of(101, EV_RELD, 7, 0),
      ev_of(102, EV_REL, 8, 0),
      ev_of(103, EV_RELD, 8, 0),
      ev_of(104, EV_REL, 9, 0),
      ev_of(105, EV_RELD, 9, DLOCK_EIO),
      /* 130..150: two at once, within the bound. */
      ev_of(121, EV_ACQ, 10, 0),
      ev_of(122, EV_ACQ, 11, 0),
      ev_of(130, EV_OK, 10, 12),
      ev_of(131, EV_OK, 11, 13),
      ev_of(140, EV_REL, 10, 0),
      ev_of(141, EV_RELD, 10, 0),
      ev_of(142, EV_REL, 11, 0),
      ev_of(143, EV_RELD, 11, 0),
  };
  chaos_final_t fin = {0, NULL, 0};
  chaos_config_t c;
  ASSERT_EQ(chaos_config_init(&c, "sem-none"), 0);
  c.permits = 2;
  chaos_result_t r;
  memset(&r, 0, sizeof(r));
  chaos__check(&c, ev, sizeof(ev) / sizeof(ev[0]), &fin, &r);
  ASSERT_EQ(r.acquired, 11);
  ASSERT_EQ(r.silent_overlaps, 1);
  ASSERT_EQ(r.detected_overlaps, 1);
  ASSERT_EQ(r.unconfirmed_overlaps, 1);
  ASSERT_EQ(r.max_holders, 3);
  ASSERT_EQ(r.max_with_lost, 3);
  ASSERT_EQ(r.token_regressions, 0);
  ASSERT_EQ(r.released_lost, 1);
  ASSERT_EQ(chaos_verdict(&c, &r, NULL, 0), 0);

  /* The same history under N = 3 breaks nothing. */
  c.permits = 3;
  memset(&r, 0, sizeof(r));
  chaos__check(&c, ev, sizeof(ev) / sizeof(ev[0]), &fin, &r);
  ASSERT_EQ(r.silent_overlaps + r.unconfirmed_overlaps + r.detected_overlaps,
            0);
  ASSERT_EQ(r.max_holders, 3);

  /* And a semaphore short of permits at the end is a broken promise. */
  r.permits_drift = -1;
  char why[160];
  ASSERT_EQ(chaos_safe(&c, &r, why, sizeof(why)), 0);
  ASSERT(strstr(why, "permits") != NULL);
}

/* Without faults: the permits are all used at once, none is lost. */
TEST(sem_no_faults) {
  chaos_result_t r;
  run("sem-none", 3000, &r);
  if (at_full_speed()) {
    ASSERT_EQ(r.max_holders, CHAOS_SEM_PERMITS);
    ASSERT_EQ(r.released_lost, 0);
    ASSERT_EQ(r.detected_overlaps, 0);
  }
}

/* A holder SIGKILLed: its permits' leases end within lease + 1 s, and
 * others take them. */
TEST(sem_holder_killed) {
  chaos_result_t r;
  run("sem-kill", 5000, &r);
  if (at_full_speed()) {
    ASSERT_GE(r.faults[CHAOS_KILL_HOLDER], 2);
    ASSERT_EQ(r.free_after_death.n, r.faults[CHAOS_KILL_HOLDER]);
    ASSERT_LE(r.free_after_death.max_ms, r.lease_limit_ms);
    ASSERT_GE(r.progress_after_death.n, 1);
  }
}

/* A holder SIGSTOPped past its lease: its permit goes to another worker
 * meanwhile (N + 1 holds at once), and it is told DLOCK_ELOST. */
TEST(sem_holder_stopped_past_lease) {
  chaos_result_t r;
  run("sem-stop", 7000, &r);
  ASSERT_EQ(r.stopped_holds_lost, r.stopped_holds);
  if (at_full_speed()) {
    ASSERT_GE(r.faults[CHAOS_STOP_HOLDER], 2);
    ASSERT_GE(r.stopped_holds, 1);
    ASSERT_GE(r.detected_overlaps, 1);
  }
}

/* Every single-Redis fault in turn: Redis paused and restarted with its
 * AOF, connections killed, the script cache flushed, holders killed and
 * stopped. */
TEST(sem_mixed) {
  chaos_result_t r;
  run("sem-mixed", 9000, &r);
  if (at_full_speed()) {
    int64_t total = 0;
    for (int f = 0; f < CHAOS_FAULT_COUNT; f++)
      total += r.faults[f];
    ASSERT_GE(total, 4);
  }
}
