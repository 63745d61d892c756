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

int dlock__watchdog_start(dlock_client_t *c, dlock__watchdog **out);

/* Stops the thread (waiting for a renewal in progress) and frees it. */
void dlock__watchdog_stop(dlock__watchdog *wd);

/* In a child of fork(): frees 'wd' without touching its thread, mutex or
 * condition variable, which belong to the parent. NULL is ignored. */
void dlock__watchdog_forget(dlock__watchdog *wd);

/* Renews all watchdog locks once, now (used by tests and by the thread). */
void dlock__watchdog_renew_now(dlock_client_t *c);

#endif
