/*
 * The watchdog: one thread per client that renews every lock held with
 * DLOCK_WATCHDOG, every third of the watchdog timeout, in batched script
 * calls (one pipelined round however many locks). A renewal that finds a
 * lock gone marks it lost and reports it through the client's on_lost
 * callback; so does Redis staying unreachable for longer than the lease.
 */
#ifndef DLOCK_WATCHDOG_H
#define DLOCK_WATCHDOG_H

#include "client.h"

/* What renews one hold: its names and the field the renewal script is
 * given. */
typedef struct dlock__renewal {
  char *name;
  size_t name_len;
  /* Read locks: "{name}", where their timeout keys live; permits of an
   * expirable-permit semaphore: "{name}:timeout", the zset they are in. */
  char *prefix;
  size_t prefix_len;
  int kind;
  uint64_t owner;
  uint64_t seq;
  char field[DLOCK__FIELD_MAX + 8]; /* room for a writer's ":write" */
  size_t field_len;
  int slot; /* on a cluster, the slot of 'name' (set by the watchdog) */
} dlock__renewal;

/* Fills 'out' with what renews hold 'h' of client 'c' (the client's mutex
 * held): 0, or DLOCK_ENOMEM with nothing to free (the detail is not set:
 * renewals run in the background). */
int dlock__renewal_of(const dlock_client_t *c, const dlock__hold *h,
                      dlock__renewal *out);

/* Frees what 'r' holds. */
void dlock__renewal_free(dlock__renewal *r);

int dlock__watchdog_start(dlock_client_t *c, dlock__watchdog **out);

/* Stops the thread (waiting for a renewal in progress) and frees it. */
void dlock__watchdog_stop(dlock__watchdog *wd);

/* In a child of fork(): frees 'wd' without touching its thread, mutex or
 * condition variable, which belong to the parent. NULL is ignored. */
void dlock__watchdog_forget(dlock__watchdog *wd);

/* Renews all watchdog locks once, now (used by tests and by the thread). */
void dlock__watchdog_renew_now(dlock_client_t *c);

#endif
