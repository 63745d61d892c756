/*
 * Pinning a waiter for a releasing thread of the client, which then tells
 * it an outcome of its own (see pubsub.h), and the slot a channel's record
 * keeps for its user. What a waiter is chosen for, and what the slot
 * holds, is the engine's (cohort.c): the hand-over of a lock or of a
 * semaphore's permits, the runs of them and the contention pause.
 */
#include "pubsub_int.h"

#include <pthread.h>
#include <stdatomic.h>

dlock__waiter *dlock__pubsub_pin_first(dlock__pubsub *ps, const char *channel,
                                       size_t len, int holds,
                                       dlock__pin_eligible_fn eligible,
                                       dlock__pin_note_fn note, void *arg) {
  int rc;
  if ((ps = dlock__shards_route(ps, channel, len, 0, &rc)) == NULL)
    return NULL;
  if (atomic_load(&ps->nsubs) == 0)
    return NULL;
  pthread_mutex_lock(&ps->mu);
  dlock__sub *s = dlock__sub_find(ps, channel, len);
  dlock__waiter *chosen = NULL;
  if (s != NULL)
    for (dlock__waiter *w = s->head; w != NULL; w = w->next)
      if (!w->permit && !w->pinned && eligible(w, arg)) {
        chosen = w;
        break;
      }
  if (chosen != NULL) {
    chosen->pinned = 1;
    chosen->pin_holds = holds;
  }
  if (s != NULL && note(&s->slot, chosen, arg) != 0 && chosen != NULL) {
    chosen->pinned = chosen->pin_holds = 0;
    chosen = NULL;
  }
  pthread_mutex_unlock(&ps->mu);
  return chosen;
}

void dlock__pubsub_unpin(dlock__pubsub *ps, dlock__waiter *w, int wake,
                         uint64_t value, dlock__slot_fn fn, void *arg) {
  ps = w->sub->ps;
  pthread_mutex_lock(&ps->mu);
  w->pinned = w->pin_holds = 0;
  if (fn != NULL)
    fn(&w->sub->slot, arg);
  if (wake) {
    w->value = value;
    dlock__sub_wake_locked(w);
  } else if (w->reading) {
    /* Not woken: a message wakes the waiter like any other; it only has to
     * notice that it is no longer pinned. */
    dlock__sub_poke(ps->reader_pipe[1]);
  } else {
    pthread_cond_signal(&w->cv);
  }
  pthread_mutex_unlock(&ps->mu);
}

void dlock__pubsub_with_slot(dlock__pubsub *ps, dlock__waiter *w,
                             dlock__slot_fn fn, void *arg) {
  ps = w->sub->ps;
  pthread_mutex_lock(&ps->mu);
  fn(&w->sub->slot, arg);
  pthread_mutex_unlock(&ps->mu);
}
