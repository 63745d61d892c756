/*
 * Unit tests, without a server, of the acquisition machine
 * (src/engine/machine.c): driven step by step with a table of steps whose
 * attempts, give-ups and settling are scripted here, on a bare client with
 * just the options the machine reads.
 */
#include "dlock.h"
#include "error.h"
#include "harness/test.h"
#include "machine.h"

#include <string.h>

static dlock_client_t client;

/* What the scripted steps did, and what the attempts answer in turn. */
static struct {
  int attempts, give_ups, unknowns;
  int answers[4];
} script;

static int attempt_scripted(dlock__acq *m, int queue) {
  (void)queue;
  int rc = script.answers[script.attempts++];
  if (rc == 1) {
    m->busy.ttl_ms = 10;
    return 1;
  }
  if (rc < 0)
    return dlock__fail(rc, "attempt %d: connection reset by peer",
                       script.attempts);
  return rc;
}

/* Leaving a queue and settling an unknown outcome both fail, each with a
 * detail of its own that must not become the caller's. */
static void give_up_failing(dlock__acq *m) {
  (void)m;
  script.give_ups++;
  (void)dlock__fail(DLOCK_EIO, "give-up: connection refused");
}

static void unknown_failing(dlock__acq *m) {
  (void)m;
  script.unknowns++;
  (void)dlock__fail(DLOCK_EIO, "settle: connection refused");
}

static int timed_out_plain(dlock__acq *m) {
  (void)m;
  return dlock__fail(DLOCK_ETIMEDOUT, "waited 5 ms for it");
}

static const dlock__acq_ops scripted = {
    .attempt = attempt_scripted,
    .give_up = give_up_failing,
    .unknown = unknown_failing,
    .timed_out = timed_out_plain,
};

static void start(dlock__acq *m, int64_t wait_ms) {
  memset(&script, 0, sizeof(script));
  memset(&client, 0, sizeof(client));
  client.opt.outage_wait_ms = 0; /* no riding: the failure ends it */
  dlock__acq_init(m, &scripted, NULL, &client, wait_ms, DLOCK__ACQ_BY_BACKOFF,
                  NULL, 0);
}

/* Started with a 5 s wait, its first attempt finding the lock taken: the
 * machine waits, and its next step follows the pause that ran out, the
 * second attempt answering 'second'. */
static int start_waiting(dlock__acq *m, int second) {
  start(m, 5000);
  script.answers[0] = 1;
  script.answers[1] = second;
  int state = dlock__acq_step(m);
  m->pending = 0;
  return state;
}

/* A failed attempt after a wait: the queue place is given up and the
 * outcome settled, both failing too, and the caller is told the attempt's
 * failure, not theirs. */
TEST(machine_keeps_the_failure_detail_through_its_cleanup) {
  dlock__acq m;
  ASSERT_EQ(start_waiting(&m, DLOCK_EIO), DLOCK__ACQ_WAIT);
  ASSERT_EQ(dlock__acq_step(&m), DLOCK__ACQ_DONE);
  ASSERT_EQ(script.attempts, 2);
  ASSERT_EQ(script.give_ups, 1);
  ASSERT_EQ(script.unknowns, 1);
  /* The cleanup's own failure is the thread's last one now... */
  ASSERT_STR_EQ(dlock_last_error(), "settle: connection refused");
  /* ...and the driver's report gives the machine's. */
  ASSERT_EQ(dlock__acq_report(&m), DLOCK_EIO);
  ASSERT_STR_EQ(dlock_last_error(), "attempt 2: connection reset by peer");
}

/* A wait that runs out reports its time-out, though the give-up after it
 * failed. */
TEST(machine_reports_a_time_out_over_a_failed_give_up) {
  dlock__acq m;
  ASSERT_EQ(start_waiting(&m, 1), DLOCK__ACQ_WAIT);
  m.deadline_us = 0; /* the wait is over */
  ASSERT_EQ(dlock__acq_step(&m), DLOCK__ACQ_DONE);
  ASSERT_EQ(script.give_ups, 1);
  ASSERT_EQ(script.unknowns, 0);
  ASSERT_EQ(dlock__acq_report(&m), DLOCK_ETIMEDOUT);
  ASSERT_STR_EQ(dlock_last_error(), "waited 5 ms for it");
}

/* A grant reports success and leaves the detail alone. */
TEST(machine_success_reports_no_failure) {
  dlock__acq m;
  start(&m, 0);
  script.answers[0] = 0;
  (void)dlock__fail(DLOCK_EINVAL, "an earlier call's failure");
  ASSERT_EQ(dlock__acq_step(&m), DLOCK__ACQ_DONE);
  ASSERT_EQ(dlock__acq_report(&m), 0);
  ASSERT_EQ(script.give_ups, 0);
  ASSERT_STR_EQ(dlock_last_error(), "an earlier call's failure");
}
