/*
 * A channel's record, its line of waiters, and the wake-ups that reach
 * them (see pubsub.h). Everything here is called with the connection's
 * 'mu' held, or on a record not yet shared.
 */
#include "pubsub_int.h"

#include "alloc.h"
#include "fifo.h"
#include "monotime.h"

#include <assert.h>
#include <string.h>
#include <unistd.h>

dlock__sub *dlock__sub_find(dlock__pubsub *ps, const char *name, size_t len) {
  for (dlock__sub *s = ps->subs; s != NULL; s = s->next)
    if (s->len == len && memcmp(s->name, name, len) == 0)
      return s;
  return NULL;
}

/*
 * The invariants of a channel's record, checked where it changes (compiled
 * out with NDEBUG). Its waiters form a list of 'refs' entries that all
 * point back at it; a state other than NONE means a command or a
 * subscription on the current connection, so there is none without one.
 * LEAVING may have waiters: they joined after the UNSUBSCRIBE was sent, and
 * the channel is subscribed again once its reply is in.
 */
void dlock__sub_check_locked(const dlock__pubsub *ps, const dlock__sub *s) {
#ifndef NDEBUG
  int n = 0;
  const dlock__waiter *last = NULL;
  for (const dlock__waiter *w = s->head; w != NULL; w = w->next) {
    assert(w->sub == s);
    last = w;
    n++;
  }
  assert(s->tail == last);
  assert(n == s->refs);
  assert(s->state >= SUB_NONE && s->state <= SUB_LEAVING);
  assert(ps->connected || s->state == SUB_NONE);
  assert(ps->reader == NULL || ps->reader->reading);
#else
  (void)ps;
  (void)s;
#endif
}

dlock__sub *dlock__sub_new(dlock__pubsub *ps, const char *name, size_t len) {
  dlock__sub *s = dlock__calloc(1, sizeof(*s));
  if (s == NULL || (s->name = dlock__memdup(name, len)) == NULL) {
    dlock__free(s);
    return NULL;
  }
  s->ps = ps;
  s->len = len;
  dlock__cond_init_monotonic(&s->ready);
  return s;
}

void dlock__sub_free(dlock__sub *s) {
  pthread_cond_destroy(&s->ready);
  dlock__free(s->slot);
  dlock__free(s->name);
  dlock__free(s);
}

void dlock__sub_poke(int fd) {
  char b = 1;
  /* A full pipe already guarantees a wake-up, so EAGAIN is fine. */
  ssize_t n = write(fd, &b, 1);
  (void)n;
}

void dlock__sub_drain_pipe(int fd) {
  char buf[64];
  while (read(fd, buf, sizeof(buf)) > 0) {
  }
}

void dlock__sub_poke_thread(dlock__pubsub *ps) {
  dlock__sub_poke(ps->pipe_fd[1]);
}

void dlock__sub_wake_locked(dlock__waiter *w) {
  w->permit = 1;
  if (w->reading)
    dlock__sub_poke(w->sub->ps->reader_pipe[1]);
  else
    pthread_cond_signal(&w->cv);
}

/* Gives every waiter of 's' a reason to try again. */
void dlock__sub_wake_all_locked(dlock__sub *s) {
  for (dlock__waiter *w = s->head; w != NULL; w = w->next)
    dlock__sub_wake_locked(w);
}

/* Wakes the first waiter in line that is not awake already, handing it
 * 'value' (or 0). */
void dlock__sub_wake_one_locked(dlock__sub *s, uint64_t value) {
  for (dlock__waiter *w = s->head; w != NULL; w = w->next)
    if (!w->permit) {
      w->value = value;
      dlock__sub_wake_locked(w);
      return;
    }
  /* Everyone is awake already. A value is still kept, by the first in
   * line: it is meant for the one waiter of its channel (a lock's
   * hand-over comes on its owner's own channel), and values grow, so a
   * newer one replaces an older that the waiter has not taken (which its
   * user may find stale: see dlock__busy). */
  if (value != 0 && s->head != NULL && s->head->value < value)
    s->head->value = value;
}

/* Wakes up to 'n' waiters of 's' that are not awake already, first in
 * line first. A pinned waiter is skipped: it is told its own outcome by
 * whoever pinned it, and what this message announces is for others (a
 * semaphore's free permits). */
void dlock__sub_wake_n_locked(dlock__sub *s, int64_t n) {
  for (dlock__waiter *w = s->head; w != NULL && n > 0; w = w->next)
    if (!w->permit && !w->pinned) {
      dlock__sub_wake_locked(w);
      n--;
    }
}

/* Puts 'w' at the end of the line of 's'. */
void dlock__sub_enqueue_locked(dlock__sub *s, dlock__waiter *w) {
  w->next = NULL;
  w->sub = s;
  w->permit = 0;
  w->reading = 0;
  w->value = 0;
  w->taken = 0;
  w->pinned = 0;
  w->pin_holds = 0;
  w->parked = 0;
  dlock__cond_init_monotonic(&w->cv);
  DLOCK__FIFO_APPEND(s->head, s->tail, w);
  s->refs++;
  s->ps->waiting++;
  dlock__sub_check_locked(s->ps, s);
}

/* Takes 'w' out of its line; a wake-up it did not take goes to the next
 * waiter, so that none is lost. Returns 1 when the channel has nobody
 * waiting now, and lingers. */
int dlock__sub_dequeue_locked(dlock__pubsub *ps, dlock__waiter *w) {
  dlock__sub *s = w->sub;
  DLOCK__FIFO_REMOVE(dlock__waiter, s->head, s->tail, w);
  pthread_cond_destroy(&w->cv);
  ps->waiting--;
  /* A wake-up not taken goes on; its value does not (it was meant for
   * this waiter: a lock's hand-over to its owner, who took the lock up by
   * its own attempt). */
  if (w->permit)
    dlock__sub_wake_one_locked(s, 0);
  int idle = --s->refs == 0;
  if (idle)
    s->idle_since_us = dlock__now_us();
  dlock__sub_check_locked(ps, s);
  return idle;
}
