/*
 * What the fuzz targets share: a check that ends the run with a message
 * (libFuzzer then saves the input), and a counting allocator for
 * dlock_set_allocators that can fail one chosen allocation.
 */
#ifndef DLOCK_FUZZ_COMMON_H
#define DLOCK_FUZZ_COMMON_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "dlock.h"

/* A property that must hold: abort() makes libFuzzer keep the input as a
 * crash, with the message just above its report. */
#define FUZZ_CHECK(cond, ...)                                                  \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                            \
      fputc('\n', stderr);                                                     \
      abort();                                                                 \
    }                                                                          \
  } while (0)

/*
 * The counting allocator. fuzz_alloc_fail_at(k) makes the k-th allocation
 * from now on fail (0: none fails); fuzz_alloc_outstanding() is the number
 * of blocks allocated and not yet freed, so a target can check that a
 * failed call freed what it took. Atomics, because the library may
 * allocate from its own threads.
 */
static atomic_long fuzz_alloc_count;
static atomic_long fuzz_alloc_fail;
static atomic_long fuzz_alloc_live;
static atomic_int fuzz_alloc_failed;

static inline int fuzz_alloc_should_fail(void) {
  long n = atomic_fetch_add(&fuzz_alloc_count, 1) + 1;
  if (n == atomic_load(&fuzz_alloc_fail)) {
    atomic_store(&fuzz_alloc_failed, 1);
    return 1;
  }
  return 0;
}

static inline void *fuzz_malloc(size_t n) {
  void *p = fuzz_alloc_should_fail() ? NULL : malloc(n);
  if (p != NULL)
    atomic_fetch_add(&fuzz_alloc_live, 1);
  return p;
}

static inline void *fuzz_calloc(size_t k, size_t n) {
  void *p = fuzz_alloc_should_fail() ? NULL : calloc(k, n);
  if (p != NULL)
    atomic_fetch_add(&fuzz_alloc_live, 1);
  return p;
}

static inline void *fuzz_realloc(void *old, size_t n) {
  if (fuzz_alloc_should_fail())
    return NULL;
  void *p = realloc(old, n);
  if (p != NULL && old == NULL)
    atomic_fetch_add(&fuzz_alloc_live, 1);
  return p;
}

static inline void fuzz_free(void *p) {
  if (p != NULL)
    atomic_fetch_sub(&fuzz_alloc_live, 1);
  free(p);
}

/* Installs the counting allocator with allocation 'k' failing (0: none). */
static inline void fuzz_alloc_fail_at(long k) {
  static const dlock_allocators_t counting = {fuzz_malloc, fuzz_calloc,
                                              fuzz_realloc, fuzz_free};
  atomic_store(&fuzz_alloc_count, 0);
  atomic_store(&fuzz_alloc_fail, k);
  atomic_store(&fuzz_alloc_failed, 0);
  dlock_set_allocators(&counting);
}

static inline long fuzz_alloc_outstanding(void) {
  return atomic_load(&fuzz_alloc_live);
}

/* 1 when the chosen allocation was made to fail since fuzz_alloc_fail_at. */
static inline int fuzz_alloc_did_fail(void) {
  return atomic_load(&fuzz_alloc_failed);
}

#endif
