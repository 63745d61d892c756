#define _POSIX_C_SOURCE 200809L
#include "demo_sale.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dlock.h"
#include "redis_conn.h"

static const char *const outcome_keys[] = {"MoonCake:sold", "MoonCake:refused",
                                           "MoonCake:timedout",
                                           "MoonCake:failed"};

int sale_reset(redisContext *c, long long stock) {
  if (redis_conn_run(c, "DEL %s %s %s %s %s", SALE_LOCK_NAME, outcome_keys[0],
                     outcome_keys[1], outcome_keys[2], outcome_keys[3]) != 0)
    return -1;
  return redis_conn_run(c, "SET %s %lld", SALE_STOCK_KEY, stock);
}

void sale_read_counts(redisContext *c, sale_counts_t *out) {
  out->sold = redis_conn_get_int(c, outcome_keys[0]);
  out->refused = redis_conn_get_int(c, outcome_keys[1]);
  out->timedout = redis_conn_get_int(c, outcome_keys[2]);
  out->failed = redis_conn_get_int(c, outcome_keys[3]);
}

/* ---- one buyer process -------------------------------------------------- */

typedef struct buyer_process {
  const sale_plan_t *plan;
  dlock_t *lock; /* NULL for the unlocked run */
  pthread_barrier_t start;
} buyer_process_t;

/* Sells one item if any is left: read, work, write back. Returns the
 * outcome counter to bump. */
static const char *sell_one(redisContext *r) {
  long long stock = redis_conn_get_int(r, SALE_STOCK_KEY);

  if (stock <= 0)
    return outcome_keys[1];
  /* A real sale does work between reading and writing (a payment, an order
   * row); one millisecond stands in for it. Without the lock it is the
   * window in which other buyers read the same stale stock. */
  nanosleep(&(struct timespec){0, 1000000}, NULL);
  if (redis_conn_run(r, "SET %s %lld", SALE_STOCK_KEY, stock - 1) != 0)
    return outcome_keys[3];
  return outcome_keys[0];
}

static const char *buy_under_lock(dlock_t *lock, redisContext *r) {
  int rc = dlock_trylock(lock, SALE_WAIT_MS, DLOCK_WATCHDOG);

  if (rc == DLOCK_ETIMEDOUT)
    return outcome_keys[2];
  if (rc != 0)
    return outcome_keys[3];
  const char *outcome = sell_one(r);
  if (dlock_unlock(lock) != 0)
    outcome = outcome_keys[3];
  return outcome;
}

static void *buyer_thread(void *arg) {
  buyer_process_t *p = arg;
  redisContext *r = redis_conn_open(p->plan->url);

  /* Every buyer starts at once, so they really compete for the stock. */
  pthread_barrier_wait(&p->start);
  if (r == NULL)
    return NULL; /* uncounted: the progress shows it missing */
  const char *outcome = p->lock ? buy_under_lock(p->lock, r) : sell_one(r);
  redis_conn_run(r, "INCR %s", outcome);
  redisFree(r);
  return NULL;
}

static int open_lock(const sale_plan_t *plan, dlock_client_t **client,
                     dlock_t **lock) {
  dlock_options_t o;

  dlock_options_init(&o);
  o.url = plan->url;
  o.watchdog_timeout_ms = plan->watchdog_ms;
  if (dlock_client_open(&o, client) != 0)
    return -1;
  return dlock_get(*client, SALE_LOCK_NAME, lock);
}

/* The body of one forked buyer process; never returns. */
static void run_buyer_process(const sale_plan_t *plan, int nthreads) {
  buyer_process_t p;
  dlock_client_t *client = NULL;
  pthread_t *threads = calloc((size_t)nthreads, sizeof *threads);
  int started = 0;

  memset(&p, 0, sizeof p);
  p.plan = plan;
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  if (threads == NULL ||
      (plan->use_lock && open_lock(plan, &client, &p.lock) != 0))
    _exit(1);
  pthread_barrier_init(&p.start, NULL, (unsigned)nthreads);
  for (; started < nthreads; started++)
    if (pthread_create(&threads[started], NULL, buyer_thread, &p) != 0)
      _exit(1); /* the barrier would never open */
  for (int i = 0; i < started; i++)
    pthread_join(threads[i], NULL);
  dlock_free(p.lock);
  dlock_client_close(client);
  _exit(0);
}

int sale_start(const sale_plan_t *plan, pid_t *pids) {
  int started = 0;

  fflush(NULL);
  for (int i = 0; i < plan->processes; i++) {
    /* Buyers are spread evenly; the first processes take the remainder. */
    int nthreads = plan->buyers / plan->processes +
                   (i < plan->buyers % plan->processes ? 1 : 0);
    pid_t pid = fork();
    if (pid == 0)
      run_buyer_process(plan, nthreads);
    if (pid < 0)
      break;
    pids[started++] = pid;
  }
  return started;
}
