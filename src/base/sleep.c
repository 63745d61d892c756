/*
 * Sleeping, and the jitter that keeps sleepers from waking in lockstep
 * (see sleep.h).
 */
#include "sleep.h"

#include "dlock.h"
#include "monotime.h"

#include <time.h>

/* A per-thread xorshift generator: cheap, and good enough for jitter. */
uint64_t dlock__jitter(void) {
  static _Thread_local uint64_t x;
  if (x == 0)
    x = (uint64_t)dlock__now_us() ^ (dlock_self() * 0x9e3779b97f4a7c15ULL) ^ 1;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return x;
}

void dlock__sleep_us(int64_t us) {
  if (us > 0) {
    struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
    nanosleep(&ts, NULL);
  }
}
