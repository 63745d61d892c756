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

static const char *const outcome_keys[] = {"MoonCake:sold", "MoonCake:refused",
                                           "MoonCake:timedout",
                                           "MoonCake:failed"};

/* Runs a command whose reply is not needed: 0, or -1 on any failure. */
static int run_command(dlock_client_t *c, size_t argc,
                       const char *const *argv) {
  dlock_reply_t *r = NULL;
  int rc = dlock_client_command(c, argc, argv, NULL, &r);

  dlock_reply_free(r);
  return rc == 0 ? 0 : -1;
}

static int set_int(dlock_client_t *c, const char *key, long long value) {
  char text[32];
  snprintf(text, sizeof text, "%lld", value);
  const char *argv[] = {"SET", key, text};
  return run_command(c, 3, argv);
}

long long sale_get_int(dlock_client_t *c, const char *key) {
  const char *argv[] = {"GET", key};
  dlock_reply_t *r = NULL;
  long long v = 0;

  if (dlock_client_command(c, 2, argv, NULL, &r) == 0 &&
      r->type == DLOCK_REPLY_STRING)
    v = atoll(r->str);
  dlock_reply_free(r);
  return v;
}

int sale_reset(dlock_client_t *c, long long stock) {
  const char *del[] = {"DEL",           SALE_LOCK_NAME,  outcome_keys[0],
                       outcome_keys[1], outcome_keys[2], outcome_keys[3]};
  if (run_command(c, 6, del) != 0)
    return -1;
  return set_int(c, SALE_STOCK_KEY, stock);
}

void sale_read_counts(dlock_client_t *c, sale_counts_t *out) {
  out->sold = sale_get_int(c, outcome_keys[0]);
  out->refused = sale_get_int(c, outcome_keys[1]);
  out->timedout = sale_get_int(c, outcome_keys[2]);
  out->failed = sale_get_int(c, outcome_keys[3]);
}

/* ---- one buyer process -------------------------------------------------- */

typedef struct buyer_process {
  const sale_plan_t *plan;
  dlock_client_t *client; /* the data, and the lock */
  dlock_t *lock;          /* NULL for the unlocked run */
  pthread_barrier_t start;
} buyer_process_t;

/* Sells one item if any is left: read, work, write back. Returns the
 * outcome counter to bump. */
static const char *sell_one(dlock_client_t *c) {
  const char *get[] = {"GET", SALE_STOCK_KEY};
  dlock_reply_t *r = NULL;

  if (dlock_client_command(c, 2, get, NULL, &r) != 0)
    return outcome_keys[3];
  long long stock = r->type == DLOCK_REPLY_STRING ? atoll(r->str) : 0;
  dlock_reply_free(r);
  if (stock <= 0)
    return outcome_keys[1];
  /* A real sale does work between reading and writing (a payment, an order
   * row); one millisecond stands in for it. Without the lock it is the
   * window in which other buyers read the same stale stock. */
  nanosleep(&(struct timespec){0, 1000000}, NULL);
  if (set_int(c, SALE_STOCK_KEY, stock - 1) != 0)
    return outcome_keys[3];
  return outcome_keys[0];
}

static const char *buy_under_lock(dlock_t *lock, dlock_client_t *c) {
  int rc = dlock_trylock(lock, SALE_WAIT_MS, DLOCK_WATCHDOG);

  if (rc == DLOCK_ETIMEDOUT)
    return outcome_keys[2];
  if (rc != 0)
    return outcome_keys[3];
  const char *outcome = sell_one(c);
  if (dlock_unlock(lock) != 0)
    outcome = outcome_keys[3];
  return outcome;
}

static void *buyer_thread(void *arg) {
  buyer_process_t *p = arg;

  /* Every buyer starts at once, so they really compete for the stock. */
  pthread_barrier_wait(&p->start);
  const char *outcome =
      p->lock ? buy_under_lock(p->lock, p->client) : sell_one(p->client);
  const char *incr[] = {"INCR", outcome};
  run_command(p->client, 2, incr);
  return NULL;
}

/* The process's client, for the data and (when 'use_lock') the lock. */
static int open_client(const sale_plan_t *plan, buyer_process_t *p) {
  dlock_options_t o;

  dlock_options_init(&o);
  o.url = plan->url;
  o.watchdog_timeout_ms = plan->watchdog_ms;
  if (dlock_client_open(&o, &p->client) != 0)
    return -1;
  return plan->use_lock ? dlock_get(p->client, SALE_LOCK_NAME, &p->lock) : 0;
}

/* The body of one forked buyer process; never returns. */
static void run_buyer_process(const sale_plan_t *plan, int nthreads) {
  buyer_process_t p;
  pthread_t *threads = calloc((size_t)nthreads, sizeof *threads);
  int started = 0;

  memset(&p, 0, sizeof p);
  p.plan = plan;
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  if (threads == NULL || open_client(plan, &p) != 0)
    _exit(1);
  pthread_barrier_init(&p.start, NULL, (unsigned)nthreads);
  for (; started < nthreads; started++)
    if (pthread_create(&threads[started], NULL, buyer_thread, &p) != 0)
      _exit(1); /* the barrier would never open */
  for (int i = 0; i < started; i++)
    pthread_join(threads[i], NULL);
  dlock_free(p.lock);
  dlock_client_close(p.client);
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
