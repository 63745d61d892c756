/*
 * Acquisitions whose outcome is unknown, and how they are settled.
 *
 * An acquisition script that got no answer (the command timed out, the
 * connection failed under it, the client was shut down) may still run in
 * Redis: a stalled server runs it when it goes on, a server whose reply
 * was lost ran it already. The owner was told the attempt failed, so it
 * neither renews nor releases what the script granted: a new hold, one
 * more count on a hold it had, or, for a fair lock, a place in the queue
 * (to which a release may then hand the lock). Left alone, that blocks
 * every other client until its lease or the queue allowance runs out.
 *
 * Such an attempt is recorded here as unsettled: the lock, the owner, and
 * the hold count the owner had when it tried. Settling it means running
 * the kind's undo (dlock__kind.undo), which gives back exactly what the
 * attempt may have added: the lock's holds of this owner set back to that
 * count with the lock's release script (so a late grant of a first hold is
 * released and its waiters told, and a late reentrant count taken off
 * again), and a fair waiter's queue place removed. It is idempotent, and
 * harmless when the attempt never ran.
 *
 * Ordering makes this exact. Every command of a client goes through its one
 * command connection, in order, so an undo sent on the same connection runs
 * after the attempt. After that connection failed, the undo goes on a new
 * connection only once the handshake has been answered: by then a server
 * that was stalled has read what the old connection had sent (it was in its
 * socket buffer before the new connection existed) and run it. What cannot
 * be ordered this way is an attempt still travelling in the network when
 * its connection is given up, which reaches Redis after the undo: that
 * grant expires with its lease (include/dlock.h says so).
 *
 * The undo of one owner's attempt must also come before that owner's next
 * acquisition or release of the same lock, which would otherwise be undone
 * in turn. So the owner settles its own unsettled attempt first
 * (dlock__unsettled_settle, from dlock__settle_before_acquire and
 * dlock__release_begin), waiting if the background thread is settling it,
 * and fails rather than go on when Redis still does not answer. The
 * background thread, started with the first unsettled attempt, settles the
 * rest as soon as Redis answers again, so that other clients get the lock
 * promptly even when the owner never calls again.
 */
#include "alloc.h"
#include "engine.h"

#include "error.h"
#include "monotime.h"
#include "worker.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct unsettled {
  struct unsettled *next;
  dlock_t *l; /* a handle of the client's own, of the attempt's kind */
  uint64_t owner;
  int64_t believed; /* the hold count the owner had when it tried */
  int busy;         /* its undo is being sent (by the thread or the owner) */
} unsettled;

struct dlock__settler {
  dlock_client_t *c;
  dlock__undo_fn undo; /* dlock__undo: it runs the release scripts, which
                        * themselves settle first (see above) */
  /* The thread; its 'cv' is also where the end of an undo is told, and its
   * 'mu' guards the list. */
  dlock__worker w;
  unsettled *list;
  atomic_int count; /* entries in 'list', readable without 'mu' */
  /* Retries of a background undo that failed: the first soon (a server
   * that stalled is usually back at once), later ones less often, as the
   * connection's own reconnect back-off. */
  dlock__backoff retry;
};

int dlock__settler_new(dlock_client_t *c, dlock__undo_fn undo,
                       dlock__settler **out) {
  dlock__settler *st = dlock__calloc(1, sizeof(*st));
  if (st == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory opening a client");
  st->c = c;
  st->undo = undo;
  dlock__backoff retry = DLOCK__BACKOFF_SETTLE;
  st->retry = retry;
  dlock__worker_init(&st->w);
  *out = st;
  return 0;
}

static void free_entry(unsettled *e) {
  dlock_free(e->l);
  dlock__free(e);
}

/* Frees the entries of 'st', not what they would have undone. */
static void free_entries(dlock__settler *st) {
  while (st->list != NULL) {
    unsettled *e = st->list;
    st->list = e->next;
    free_entry(e);
  }
}

void dlock__settler_free(dlock__settler *st) {
  if (st == NULL)
    return;
  dlock__worker_stop(&st->w);
  /* What is still unsettled expires with its lease. */
  free_entries(st);
  dlock__free(st);
}

int dlock__settler_forget(dlock__settler *st) {
  if (st == NULL)
    return 0;
  /* In a child process: the thread and whoever held 'mu' at the fork are
   * the parent's, and the undos are the parent's business. A list a parent
   * thread was changing at the fork may be half changed: it is left as it
   * is. */
  if (pthread_mutex_trylock(&st->w.mu) != 0)
    return -1;
  pthread_mutex_unlock(&st->w.mu);
  free_entries(st);
  dlock__free(st);
  return 0;
}

static unsettled *find_locked(dlock__settler *st, const dlock_t *l,
                              uint64_t owner) {
  for (unsettled *e = st->list; e != NULL; e = e->next)
    if (e->owner == owner && e->l->kind == l->kind && e->l->len == l->len &&
        memcmp(e->l->name, l->name, l->len) == 0)
      return e;
  return NULL;
}

static void remove_locked(dlock__settler *st, unsettled *e) {
  unsettled **p = &st->list;
  while (*p != e)
    p = &(*p)->next;
  *p = e->next;
  atomic_fetch_sub(&st->count, 1);
  free_entry(e);
}

static void move_to_tail_locked(dlock__settler *st, unsettled *e) {
  unsettled **p = &st->list;
  while (*p != NULL && *p != e)
    p = &(*p)->next;
  if (*p == NULL)
    return; /* settled by its owner meanwhile */
  *p = e->next;
  while (*p != NULL)
    p = &(*p)->next;
  *p = e;
  e->next = NULL;
}

/* Runs the undo of 'e', which the caller marked busy, outside 'mu'. */
static int run_undo(dlock__settler *st, unsettled *e) {
  assert(e->busy);
  pthread_mutex_unlock(&st->w.mu);
  int rc = st->undo(e->l, e->owner, e->believed);
  pthread_mutex_lock(&st->w.mu);
  e->busy = 0;
  pthread_cond_broadcast(&st->w.cv);
  if (rc == 0)
    remove_locked(st, e);
  return rc;
}

static void *settler_main(void *arg) {
  dlock__settler *st = arg;
  int64_t next_us = 0;
  pthread_mutex_lock(&st->w.mu);
  while (!st->w.stopping) {
    unsettled *e = st->list;
    while (e != NULL && e->busy)
      e = e->next;
    int64_t now = dlock__now_us();
    if (e == NULL || now < next_us) {
      /* Nothing to do, or not yet: an owner settling its own entry, or a
       * new entry, wakes the thread. */
      if (e == NULL) {
        pthread_cond_wait(&st->w.cv, &st->w.mu);
      } else {
        struct timespec ts = dlock__timespec_at(next_us);
        pthread_cond_timedwait(&st->w.cv, &st->w.mu, &ts);
      }
      continue;
    }
    e->busy = 1;
    if (run_undo(st, e) == 0) {
      st->retry.step = 0;
      continue;
    }
    /* The others get their turn first: one lock Redis refuses (an ACL)
     * must not hold up the rest. */
    move_to_tail_locked(st, e);
    /* Redis does not answer yet: wait as long as the connection does
     * before it tries again, and back off. */
    dlock__backoff retry = st->retry;
    pthread_mutex_unlock(&st->w.mu);
    int64_t at = dlock__backoff_next(st->c, &retry, dlock__now_us(), INT64_MAX);
    pthread_mutex_lock(&st->w.mu);
    st->retry = retry;
    next_us = at;
  }
  pthread_mutex_unlock(&st->w.mu);
  return NULL;
}

int dlock__outcome_unknown(int rc) {
  /* No answer came: the command may have run. Out of memory is counted in,
   * as it may strike after the command was sent. */
  return rc == DLOCK_EIO || rc == DLOCK_EPROTO || rc == DLOCK_ECANCELED ||
         rc == DLOCK_ENOMEM;
}

void dlock__note_unsettled(dlock_t *l, uint64_t owner) {
  dlock_client_t *c = l->c;
  pthread_mutex_lock(&c->mu);
  dlock__hold *h =
      dlock__holds_find(&c->holds, l->name, l->len, owner, l->kind->id);
  /* A lost hold's unlocks, and an abandoned one's next call, release
   * whatever the owner has: an undo would only race with them. */
  int skip = h != NULL && (h->lost || h->abandoned);
  int64_t believed = h != NULL ? h->count : 0;
  pthread_mutex_unlock(&c->mu);
  if (!skip)
    dlock__unsettled_add(l, owner, believed);
}

void dlock__unsettled_add(dlock_t *l, uint64_t owner, int64_t believed) {
  dlock__settler *st = l->c->settle;
  dlock_t *copy = NULL;
  if (l->kind->release_call == NULL)
    return;
  /* A handle of its own: the caller's may be freed before the undo runs. */
  unsettled *e = dlock__calloc(1, sizeof(*e));
  if (e == NULL ||
      dlock__handle_new(l->c, l->kind, l->name, l->len, &copy) != 0) {
    /* Not recorded: what the attempt may have taken expires with its
     * lease, as before. */
    dlock__free(e);
    return;
  }
  e->l = copy;
  e->owner = owner;
  e->believed = believed;
  pthread_mutex_lock(&st->w.mu);
  if (find_locked(st, l, owner) != NULL) {
    /* One undo per owner and lock covers every attempt before it. */
    pthread_mutex_unlock(&st->w.mu);
    free_entry(e);
    return;
  }
  e->next = st->list;
  st->list = e;
  atomic_fetch_add(&st->count, 1);
  dlock__worker_start(&st->w, settler_main, st);
  /* Without a thread (it could not be started), the owner's next call on
   * the lock settles it. */
  pthread_cond_broadcast(&st->w.cv);
  pthread_mutex_unlock(&st->w.mu);
}

int dlock__unsettled_settle(dlock_t *l, uint64_t owner) {
  dlock__settler *st = l->c->settle;
  if (atomic_load(&st->count) == 0)
    return 0;
  pthread_mutex_lock(&st->w.mu);
  unsettled *e;
  /* Wait for an undo under way; it is bounded by the command timeout. */
  while ((e = find_locked(st, l, owner)) != NULL && e->busy)
    pthread_cond_wait(&st->w.cv, &st->w.mu);
  int rc = 0;
  if (e != NULL) {
    e->busy = 1;
    rc = run_undo(st, e);
  }
  pthread_mutex_unlock(&st->w.mu);
  if (rc == 0)
    return 0;
  char why[256];
  snprintf(why, sizeof(why), "%s", dlock_last_error());
  return dlock__fail(rc,
                     "an earlier attempt on lock \"%.100s\" got no answer and "
                     "may have been granted; it is not given back yet: %s",
                     l->name, why);
}

int dlock__unsettled_pending(dlock_t *l, uint64_t owner, int64_t *believed) {
  dlock__settler *st = l->c->settle;
  if (atomic_load(&st->count) == 0)
    return 0;
  pthread_mutex_lock(&st->w.mu);
  unsettled *e = find_locked(st, l, owner);
  if (e != NULL && believed != NULL)
    *believed = e->believed;
  pthread_mutex_unlock(&st->w.mu);
  return e != NULL;
}

int dlock__unsettled_count(dlock_client_t *c) {
  return atomic_load(&c->settle->count);
}
