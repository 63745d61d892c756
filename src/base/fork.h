/*
 * Telling a child of fork() from the process that opened a client.
 *
 * A client's threads do not exist in the child, its mutexes may be held by
 * them for ever, and its sockets are shared with the parent: a child that
 * used them would read the parent's replies and write into its
 * conversation. So every client remembers the fork count of the process
 * when it was opened, and the child, whose count went up (a pthread_atfork
 * handler), refuses every call on it with DLOCK_EFORKED.
 */
#ifndef DLOCK_FORK_H
#define DLOCK_FORK_H

#include <stdatomic.h>

/* Bumped in the child of every fork() (once the handler is installed). */
extern atomic_uint dlock__forks;

/* Installs the pthread_atfork handler once; call before recording a
 * generation. */
void dlock__fork_watch(void);

/* The current generation, to compare with later. */
static inline unsigned dlock__fork_gen(void) {
  return atomic_load_explicit(&dlock__forks, memory_order_relaxed);
}

/* 1 in a child forked after 'gen' was recorded. */
static inline int dlock__forked_since(unsigned gen) {
  return atomic_load_explicit(&dlock__forks, memory_order_relaxed) != gen;
}

/* Records DLOCK_EFORKED with its detail and returns it. */
int dlock__fail_forked(void);

#endif
