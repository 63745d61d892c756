/*
 * Every allocation dlock makes goes through these, so that a program can
 * plug in its own allocator with dlock_set_allocators() and tests can make
 * any allocation fail. (hiredis allocates through its own functions; its
 * Debian version aborts on out-of-memory, which dlock cannot change.)
 */
#ifndef DLOCK_ALLOC_H
#define DLOCK_ALLOC_H

#include "dlock.h"

#include <stddef.h>

extern dlock_allocators_t dlock__allocators;

static inline void *dlock__malloc(size_t n) {
  return dlock__allocators.malloc_fn(n);
}

/* Checks nmemb * size for overflow before the allocator sees it. */
static inline void *dlock__calloc(size_t nmemb, size_t size) {
  if (size != 0 && nmemb > (size_t)-1 / size)
    return NULL;
  return dlock__allocators.calloc_fn(nmemb, size);
}

static inline void *dlock__realloc(void *p, size_t n) {
  return dlock__allocators.realloc_fn(p, n);
}

static inline void dlock__free(void *p) {
  if (p != NULL)
    dlock__allocators.free_fn(p);
}

char *dlock__strdup(const char *s);

/* A NUL-terminated copy of 'len' bytes that may themselves hold NULs (lock
 * names, reply strings). NULL when out of memory. */
char *dlock__memdup(const char *s, size_t len);

#endif
