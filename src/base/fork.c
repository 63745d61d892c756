/*
 * The fork count (see fork.h).
 */
#include "fork.h"

#include "error.h"

#include <pthread.h>

atomic_uint dlock__forks;

/* Runs in the child, with only the forking thread alive. */
static void count_fork(void) {
  atomic_fetch_add_explicit(&dlock__forks, 1, memory_order_relaxed);
}

static void install(void) { pthread_atfork(NULL, NULL, count_fork); }

void dlock__fork_watch(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, install);
}

int dlock__fail_forked(void) {
  return dlock__fail(DLOCK_EFORKED,
                     "this client was opened by the parent of this process "
                     "(before fork()): its connections are the parent's; "
                     "open a new client here");
}
