/*
 * Monotonic time. Every deadline in dlock is a point on CLOCK_MONOTONIC in
 * microseconds, named *_us, so it is never mixed with wall-clock time, which
 * can jump.
 */
#ifndef DLOCK_MONOTIME_H
#define DLOCK_MONOTIME_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

static inline int64_t dlock__now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/*
 * 'ms' milliseconds in microseconds, saturating at INT64_MAX: the options
 * and arguments are bounded (DLOCK_DURATION_MAX_MS), but a TTL read from
 * Redis is whatever another program set, and a deadline must never wrap
 * round into the past (a wait that ends at once, a thread that spins).
 * Negative values count as 0.
 */
static inline int64_t dlock__ms_to_us(int64_t ms) {
  if (ms <= 0)
    return 0;
  return ms > INT64_MAX / 1000 ? INT64_MAX : ms * 1000;
}

/* 'at_us' + 'us' for a non-negative 'at_us' (a point on the clock),
 * saturating at INT64_MAX, which every caller reads as "never". */
static inline int64_t dlock__add_us(int64_t at_us, int64_t us) {
  if (us <= 0)
    return at_us;
  return us > INT64_MAX - at_us ? INT64_MAX : at_us + us;
}

/* The point 'ms' milliseconds after 'at_us', saturating. */
static inline int64_t dlock__after_ms(int64_t at_us, int64_t ms) {
  return dlock__add_us(at_us, dlock__ms_to_us(ms));
}

/* The deadline 'ms' milliseconds from now, saturating. */
static inline int64_t dlock__deadline_ms(int64_t ms) {
  return dlock__after_ms(dlock__now_us(), ms);
}

/* The absolute CLOCK_MONOTONIC time for pthread_cond_timedwait on a
 * condition variable created with the monotonic clock attribute. */
static inline struct timespec dlock__timespec_at(int64_t at_us) {
  struct timespec ts;
  ts.tv_sec = (time_t)(at_us / 1000000);
  ts.tv_nsec = (long)(at_us % 1000000) * 1000;
  return ts;
}

/* Initializes 'cv' so that its timed waits count on CLOCK_MONOTONIC, the
 * clock of dlock__timespec_at; returns what pthread_cond_init does. */
static inline int dlock__cond_init_monotonic(pthread_cond_t *cv) {
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  int rc = pthread_cond_init(cv, &attr);
  pthread_condattr_destroy(&attr);
  return rc;
}

/* Milliseconds from now until 'at_us', rounded up, never negative: poll()
 * must not wake a hair before the deadline and then spin. */
static inline int dlock__ms_until(int64_t at_us) {
  int64_t left = at_us - dlock__now_us();
  if (left <= 0)
    return 0;
  int64_t ms = (left + 999) / 1000;
  return ms > 0x7fffffff ? 0x7fffffff : (int)ms;
}

#endif
