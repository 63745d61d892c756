/*
 * The "MoonCake" flash sale of "dlock demo", the scenario of
 * examples/stock.c: buyers spread over several processes each take the
 * lock (waiting up to 5 s), read the stock, sell one item if any is left by
 * writing back the decremented value, and release the lock. The read and
 * the write are deliberately separate commands: only the lock keeps two
 * buyers from selling the same item, which the unlocked run shows. The
 * stock and the counters are read and written with dlock_client_command,
 * on the connection of a lock client: one URL, parsed and connected to by
 * the library alone, reaches both.
 */
#ifndef DLOCK_TOOLS_DEMO_SALE_H
#define DLOCK_TOOLS_DEMO_SALE_H

#include <stdint.h>
#include <sys/types.h>

#include "dlock.h"

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
  const char *url; /* with the password from the environment, if any */
  int64_t watchdog_ms;
  int use_lock;
  int buyers;
  int processes;
} sale_plan_t;

/* Sets the stock and clears the lock and the counters of the last sale.
 * 0, or -1 when Redis refused or could not be reached. */
int sale_reset(dlock_client_t *c, long long stock);

/* Forks the buyer processes into 'pids' (plan->processes of them); returns
 * how many started. The caller must have no threads running (no client
 * open): the buyers start threads and clients of their own. */
int sale_start(const sale_plan_t *plan, pid_t *pids);

/* Reads the counters the buyers have written so far. */
void sale_read_counts(dlock_client_t *c, sale_counts_t *out);

/* The integer value of string key 'key' (0 when missing or unreadable). */
long long sale_get_int(dlock_client_t *c, const char *key);

static inline long long sale_finished(const sale_counts_t *n) {
  return n->sold + n->refused + n->timedout + n->failed;
}

#endif
