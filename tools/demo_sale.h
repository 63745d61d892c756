/*
 * The "MoonCake" flash sale of "dlock demo", the scenario of
 * examples/stock.c: buyers spread over several processes each take the
 * lock (waiting up to 5 s), read the stock, sell one item if any is left by
 * writing back the decremented value, and release the lock. The read and
 * the write are deliberately separate commands: only the lock keeps two
 * buyers from selling the same item, which the unlocked run shows.
 */
#ifndef DLOCK_TOOLS_DEMO_SALE_H
#define DLOCK_TOOLS_DEMO_SALE_H

#include <stdint.h>
#include <sys/types.h>

#include <hiredis/hiredis.h>

/* The keys, the same as examples/stock.c uses. */
#define SALE_LOCK_NAME "MoonCake"
#define SALE_STOCK_KEY "MoonCakeStock"

/* How long a buyer waits for the lock before giving up. */
#define SALE_WAIT_MS 5000

typedef struct sale_counts {
  long long sold;
  long long refused;  /* no stock left */
  long long timedout; /* lock not acquired within SALE_WAIT_MS */
  long long failed;   /* an error talking to Redis */
} sale_counts_t;

typedef struct sale_plan {
  const char *url;
  int64_t watchdog_ms;
  int use_lock;
  int buyers;
  int processes;
} sale_plan_t;

/* Sets the stock and clears the lock and the counters of the last sale. */
int sale_reset(redisContext *c, long long stock);

/* Forks the buyer processes into 'pids' (plan->processes of them); returns
 * how many started. The caller must have no threads running. */
int sale_start(const sale_plan_t *plan, pid_t *pids);

/* Reads the counters the buyers have written so far. */
void sale_read_counts(redisContext *c, sale_counts_t *out);

static inline long long sale_finished(const sale_counts_t *n) {
  return n->sold + n->refused + n->timedout + n->failed;
}

#endif
