/*
 * Background threads that sleep on a condition variable (see worker.h).
 */
#include "worker.h"

#include "monotime.h"

void dlock__worker_init(dlock__worker *w) {
  pthread_mutex_init(&w->mu, NULL);
  dlock__cond_init_monotonic(&w->cv);
  w->started = 0;
  w->stopping = 0;
}

int dlock__worker_start(dlock__worker *w, void *(*main)(void *), void *arg) {
  if (w->started || w->stopping)
    return 0;
  int rc = pthread_create(&w->thread, NULL, main, arg);
  w->started = rc == 0;
  return rc;
}

void dlock__worker_stop(dlock__worker *w) {
  pthread_mutex_lock(&w->mu);
  w->stopping = 1;
  pthread_cond_broadcast(&w->cv);
  int started = w->started;
  pthread_mutex_unlock(&w->mu);
  if (started)
    pthread_join(w->thread, NULL);
  pthread_cond_destroy(&w->cv);
  pthread_mutex_destroy(&w->mu);
}
