/*
 * Renewal rounds with many locks: one client holds 100 000 watchdog locks
 * with a command timeout (100 ms) shorter than a whole renewal round takes
 * (about 0.3 s). A connection that keeps delivering replies is alive, so no
 * round may fail for taking longer than one command timeout: on_lost never
 * fires and every lock stays held through several rounds.
 *
 * DLOCK_TEST_MANY_LOCKS sets the count (the build lowers it where the code
 * runs many times slower: under valgrind and TSan).
 */
#include <pthread.h>

#include "client.h"
#include "lock_util.h"
#include "watchdog.h"

#define THREADS 8

typedef struct taker {
  dlock_client_t *c;
  int first, count;
  int retries;
  pthread_t th;
} taker;

static void *take_main(void *arg) {
  taker *t = arg;
  char name[32];
  for (int i = t->first; i < t->first + t->count; i++) {
    snprintf(name, sizeof(name), "many:%d", i);
    dlock_t *l = lu_get(t->c, name);
    int rc;
    /* A 100 ms command timeout may expire on a loaded machine; the lock is
     * then asked for again (a grant that came late makes it reentrant). */
    while ((rc = dlock_lock(l, DLOCK_WATCHDOG)) == DLOCK_EIO) {
      if (t->retries++ < 3)
        printf("retry: %s\n", dlock_last_error());
      lu_sleep_ms(1); /* not a busy loop while the connection backs off */
    }
    ASSERT_DLOCK_OK(rc);
    dlock_free(l); /* the hold stays */
  }
  return NULL;
}

/* The first lock of 0..n-1 that is not in Redis, or -1; for a failure's
 * report. */
static int first_missing(rp_server_t *s, int n) {
  for (int i = 0; i < n; i++) {
    char name[32];
    snprintf(name, sizeof(name), "many:%d", i);
    if (lu_exists(s, name) == 0)
      return i;
  }
  return -1;
}

/* Lock keys present (each lock also has a fencing-token key). */
static int64_t lock_keys(rp_server_t *s) {
  redisReply *r = rp_cmd(s, "KEYS many:*");
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->type, REDIS_REPLY_ARRAY);
  int64_t n = (int64_t)r->elements;
  freeReplyObject(r);
  return n;
}

TEST(wd_100k_locks_renewed_with_short_command_timeout) {
  const char *env = getenv("DLOCK_TEST_MANY_LOCKS");
  int n = env != NULL ? atoi(env) : 100000;
  ASSERT_GT(n, 0);
  rp_server_t *s = lu_server(1);
  lu_lost_t rec;
  lu_lost_init(&rec);
  dlock_options_t o;
  lu_options(&o, s);
  o.command_timeout_ms = 100;
  /* A round every 2 s. With a lease of 3 s (a round every second), 8 of
   * 20 000 holds had expired by the end of the taking phase once under TSan
   * with another test running beside it, every call having succeeded: a
   * renewal more than two rounds late. Twice the lease leaves the watchdog
   * that much more room on a loaded machine. */
  o.watchdog_timeout_ms = 6000;
  o.on_lost = lu_lost_cb;
  o.on_lost_data = &rec;
  dlock_client_t *c = lu_client_opts(&o);

  int64_t t0 = lu_now_ms();
  taker t[THREADS];
  for (int i = 0; i < THREADS; i++) {
    t[i] = (taker){.c = c, .first = i * (n / THREADS), .count = n / THREADS};
    if (i == THREADS - 1)
      t[i].count = n - t[i].first;
    ASSERT_EQ(pthread_create(&t[i].th, NULL, take_main, &t[i]), 0);
  }
  int retries = 0;
  for (int i = 0; i < THREADS; i++) {
    pthread_join(t[i].th, NULL);
    retries += t[i].retries;
  }
  int64_t taken_ms = lu_now_ms() - t0;
  if (lock_keys(s) != n)
    printf("after %" PRId64 " ms: %" PRId64 " of %d locks in Redis, the first "
           "missing many:%d; %d reported lost\n",
           taken_ms, lock_keys(s), n, first_missing(s, n), lu_lost_count(&rec));
  ASSERT_EQ(lock_keys(s), n);

  /* How long one round takes here, for the record: the point is that it
   * may take longer than the command timeout. */
  int64_t r0 = lu_now_ms();
  dlock__watchdog_renew_now(c);
  int64_t round_ms = lu_now_ms() - r0;
  printf("%d locks taken in %" PRId64 " ms (%d retries); one renewal round "
         "%" PRId64 " ms, command timeout 100 ms\n",
         n, taken_ms, retries, round_ms);

  /* Longer than a lease since the last lock was taken, so every key is
   * there only because rounds renewed it. */
  lu_sleep_ms(7000);
  ASSERT_EQ(lu_lost_count(&rec), 0);
  ASSERT_EQ(lock_keys(s), n);
  int64_t pttl = lu_pttl(s, "many:0");
  ASSERT_GT(pttl, 0);
  ASSERT_LE(pttl, 6000);
  dlock_client_close(c);
  ASSERT_EQ(lu_lost_count(&rec), 0);
  rp_free(s);
}
