/*
 * The allocator table (see alloc.h).
 */
#include "alloc.h"

#include <stdlib.h>
#include <string.h>

dlock_allocators_t dlock__allocators = {malloc, calloc, realloc, free};

dlock_allocators_t dlock_set_allocators(const dlock_allocators_t *a) {
  dlock_allocators_t previous = dlock__allocators;
  if (a == NULL) {
    dlock_allocators_t system = {malloc, calloc, realloc, free};
    dlock__allocators = system;
  } else {
    dlock__allocators = *a;
  }
  return previous;
}

char *dlock__memdup(const char *s, size_t len) {
  char *copy = dlock__malloc(len + 1);
  if (copy != NULL) {
    memcpy(copy, s, len);
    copy[len] = '\0';
  }
  return copy;
}

char *dlock__strdup(const char *s) { return dlock__memdup(s, strlen(s)); }
