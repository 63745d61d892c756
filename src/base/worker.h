/*
 * A background thread of a client and what it sleeps on: a mutex, a
 * condition variable on the monotonic clock (waits until a
 * dlock__timespec_at), and the flag that asks it to stop. The watchdog
 * and the settler of unknown outcomes are such threads.
 */
#ifndef DLOCK_WORKER_H
#define DLOCK_WORKER_H

#include <pthread.h>

typedef struct dlock__worker {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t thread;
  int started;  /* the thread runs, and is joined at the stop */
  int stopping; /* asked to stop: the thread returns when it sees it */
} dlock__worker;

/* Makes 'w' ready, with no thread yet. */
void dlock__worker_init(dlock__worker *w);

/* Starts the thread, 'main' with 'arg', unless it runs already or 'w' is
 * stopping: with 'mu' held, or before another thread can see 'w'. 0, or
 * the error of pthread_create. */
int dlock__worker_start(dlock__worker *w, void *(*main)(void *), void *arg);

/* Asks the thread to stop, waits for it to end, and destroys what 'w'
 * holds (also when no thread was started). */
void dlock__worker_stop(dlock__worker *w);

#endif
