/*
 * Sleeping for a while, and random jitter for spreading out retries.
 */
#ifndef DLOCK_SLEEP_H
#define DLOCK_SLEEP_H

#include <stdint.h>

/* A per-thread pseudo-random number: cheap, and good enough for jitter. */
uint64_t dlock__jitter(void);

/* Sleeps 'us' microseconds; nothing when 'us' is not positive. */
void dlock__sleep_us(int64_t us);

#endif
