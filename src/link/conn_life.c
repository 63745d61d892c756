/*
 * Creating, cancelling and freeing the shared command connection (see
 * conn.h), and forgetting it in a child of fork().
 */
#define _GNU_SOURCE
#include "conn_internal.h"

#include "alloc.h"
#include "error.h"
#include "fork.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

dlock__stats *dlock__conn_stats(const dlock__conn *c) { return c->cfg.stats; }

int dlock__conn_new(const dlock__conn_cfg *cfg, dlock__conn **out) {
  dlock__conn *c = dlock__calloc(1, sizeof(*c));
  if (c == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory creating a connection");
  if (pthread_mutex_init(&c->mu, NULL) != 0) {
    dlock__free(c);
    return dlock__fail(DLOCK_ENOMEM, "pthread_mutex_init failed");
  }
#ifdef __linux__
  if (pthread_mutex_init(&c->slots_mu, NULL) != 0) {
    pthread_mutex_destroy(&c->mu);
    dlock__free(c);
    return dlock__fail(DLOCK_ENOMEM, "pthread_mutex_init failed");
  }
#endif
  if (pipe2(c->wake_fd, O_CLOEXEC | O_NONBLOCK) != 0) {
    int rc = dlock__fail(DLOCK_EIO, "pipe2: %s", strerror(errno));
#ifdef __linux__
    pthread_mutex_destroy(&c->slots_mu);
#endif
    pthread_mutex_destroy(&c->mu);
    dlock__free(c);
    return rc;
  }
  c->wbuf = sdsempty();
  if (c->wbuf == NULL) {
    dlock__conn_free(c);
    return dlock__fail(DLOCK_ENOMEM, "out of memory creating a connection");
  }
  c->cfg = *cfg;
  c->fork_gen = dlock__fork_gen();
  *out = c;
  return 0;
}

void dlock__conn_cancel(dlock__conn *c) {
  pthread_mutex_lock(&c->mu);
  /* Only what is in flight fails: later calls are refused by the client
   * itself, while its own clean-up (a fair waiter leaving the queue) may
   * still talk to Redis. Callers waiting for a connect or its handshake
   * fail too, at once: the driver's poll() wakes on the pipe, and those
   * waiting for the host name to be resolved stop waiting. */
  c->cancels++;
  if (c->ctx != NULL)
    dlock__conn_break_locked(c, DLOCK_ECANCELED, "client is shutting down");
  else if (c->discovering)
    dlock__conn_wake_pipe(c);
  dlock__conn_unlock(c);
}

/* Frees the requests left in line that belong to the connection: those
 * given up on, and those submitted (in a child of fork() their completions
 * are the parent's business: they are not called). The others belong to
 * their callers' frames. */
static void drop_owned(dlock__conn *c) {
  while (c->head != NULL) {
    request *next = c->head->next;
    if (c->head->owned)
      dlock__free(c->head);
    c->head = next;
  }
  c->tail = NULL;
  c->nsubmitted = 0;
}

/* Frees the rest of 'c', its stream gone and its mutexes released. */
static void release(dlock__conn *c) {
  sdsfree(c->wbuf);
  dlock__conn_free_slots(c);
  close(c->wake_fd[0]);
  close(c->wake_fd[1]);
#ifdef __linux__
  pthread_mutex_destroy(&c->slots_mu);
#endif
  pthread_mutex_destroy(&c->mu);
  dlock__free(c);
}

static void unlock_both(dlock__conn *c) {
#ifdef __linux__
  pthread_mutex_unlock(&c->slots_mu);
#endif
  pthread_mutex_unlock(&c->mu);
}

void dlock__conn_free(dlock__conn *c) {
  if (c == NULL)
    return;
  /* With no call in progress, only requests given up on and submitted
   * ones are left: these complete now. */
  dlock__conn_complete_all_locked(c, DLOCK_ECANCELED,
                                  "the connection is closed");
  if (c->ctx != NULL)
    dlock__stream_free(c->ctx);
  release(c);
}

/* ---- after fork() ------------------------------------------------------- */

int dlock__conn_forget(dlock__conn *c) {
  if (c == NULL)
    return 0;
  /* Taken by a thread of the parent at the fork: what it guards may be
   * half changed. A writer or sender works outside 'mu' on 'wbuf' and the
   * context: the same. Left alone, then. */
  if (pthread_mutex_trylock(&c->mu) != 0)
    return -1;
#ifdef __linux__
  if (pthread_mutex_trylock(&c->slots_mu) != 0) {
    pthread_mutex_unlock(&c->mu);
    return -1;
  }
#endif
  if (c->writing || c->sending != NULL || c->discovering) {
    unlock_both(c);
    return -1;
  }
  /* Requests given up on or submitted are the connection's; the others
   * live in the frames of parent threads, which are not this process's to
   * free. */
  drop_owned(c);
  /* Only this process's copy of the descriptor is closed: nothing is sent
   * (no TLS goodbye), and the parent's connection goes on. */
  if (c->ctx != NULL)
    dlock__stream_abandon(c->ctx);
  /* This process has no other thread to take them meanwhile. */
  unlock_both(c);
  release(c);
  return 0;
}
