/*
 * Owner numbers. Redisson uses the Java thread id; dlock gives every thread
 * a number from a process-wide counter the first time it asks, so a number
 * is never reused by a later thread (a reused gettid() could let a new
 * thread inherit a dead thread's lock).
 */
#include "alloc.h"
#include "dlock.h"

#include <stdatomic.h>

static atomic_uint_fast64_t next_owner = 1;
static _Thread_local uint64_t thread_owner;

uint64_t dlock_owner_new(void) {
  return (uint64_t)atomic_fetch_add(&next_owner, 1);
}

uint64_t dlock_self(void) {
  if (thread_owner == 0)
    thread_owner = dlock_owner_new();
  return thread_owner;
}
