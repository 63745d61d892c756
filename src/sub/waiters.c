/*
 * The waiters' side of one connection (see pubsub.h): joining a channel
 * and waiting for its subscription, sleeping until a wake-up (or reading
 * the connection meanwhile, see subread.c), and leaving.
 */
#include "pubsub_int.h"

#include "error.h"
#include "monotime.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

/* How often a pinned waiter looks again whether its pin ended (it is
 * woken when it does; this only bounds a missed wake-up). */
#define PINNED_RECHECK_US 100000

int dlock__sub_join(dlock__pubsub *ps, const char *channel, size_t len,
                    int64_t deadline_us, dlock__waiter *w,
                    dlock__wake_fn wake) {
  pthread_mutex_lock(&ps->mu);
  if (ps->canceled) {
    pthread_mutex_unlock(&ps->mu);
    return dlock__fail(DLOCK_ECANCELED, "client is shutting down");
  }
  dlock__sub *s = dlock__sub_find(ps, channel, len);
  if (s == NULL) {
    if ((s = dlock__sub_new(ps, channel, len)) == NULL) {
      pthread_mutex_unlock(&ps->mu);
      return dlock__fail(DLOCK_ENOMEM, "out of memory joining a channel");
    }
    s->next = ps->subs;
    ps->subs = s;
    atomic_fetch_add(&ps->nsubs, 1);
  }
  if (s->refs == 0) {
    s->refused = 0; /* permissions may have changed: ask again */
    s->moved = 0;   /* the slot map said this node: try it */
  }
  /* Each channel name belongs to one kind of object, so every waiter on
   * it asks for the same. */
  s->wake = wake;
  dlock__sub_read_stale_locked(ps);
  dlock__sub_enqueue_locked(s, w);
  if (s->state != SUB_ACTIVE)
    dlock__sub_poke_thread(ps);
  while (s->state != SUB_ACTIVE && !s->refused && !s->moved && ps->connected &&
         !ps->canceled && dlock__now_us() < deadline_us) {
    struct timespec ts = dlock__timespec_at(deadline_us);
    pthread_cond_timedwait(&s->ready, &ps->mu, &ts);
  }
  int rc = ps->canceled ? DLOCK_ECANCELED : s->refused;
  /* Out of time (or connection) before Redis confirmed the subscription:
   * the waiter sleeps by the lock's TTL, and is woken to try again once the
   * subscription is confirmed, since an unlock message sent before that
   * went to nobody. */
  if (rc == 0 && s->state != SUB_ACTIVE)
    s->resync = 1;
  char why[sizeof(s->why)];
  snprintf(why, sizeof(why), "%s", s->why);
  int poke_after = rc != 0 && dlock__sub_dequeue_locked(ps, w);
  pthread_mutex_unlock(&ps->mu);
  if (poke_after)
    dlock__sub_poke_thread(ps);
  if (rc == DLOCK_ECANCELED)
    return dlock__fail(DLOCK_ECANCELED, "client is shutting down");
  if (rc != 0)
    return dlock__fail(rc, "%s", why);
  return 0;
}

int dlock__sub_join_active(dlock__pubsub *ps, const char *channel, size_t len,
                           dlock__waiter *w, int *others) {
  if (atomic_load(&ps->nsubs) == 0)
    return 0;
  pthread_mutex_lock(&ps->mu);
  dlock__sub *s = dlock__sub_find(ps, channel, len);
  if (s != NULL)
    dlock__sub_read_stale_locked(ps);
  int joined = s != NULL && s->state == SUB_ACTIVE && !ps->canceled;
  if (joined) {
    *others = s->refs;
    dlock__sub_enqueue_locked(s, w);
  }
  pthread_mutex_unlock(&ps->mu);
  return joined;
}

void dlock__pubsub_pass(dlock__pubsub *ps, dlock__waiter *w) {
  ps = w->sub->ps;
  pthread_mutex_lock(&ps->mu);
  for (dlock__waiter *x = w->sub->head; x != NULL; x = x->next)
    if (x != w && !x->permit) {
      dlock__sub_wake_locked(x);
      break;
    }
  pthread_mutex_unlock(&ps->mu);
}

int dlock__sub_wait(dlock__pubsub *ps, dlock__waiter *w, int64_t until_us) {
  pthread_mutex_lock(&ps->mu);
  int was_reader = 0;
  w->parked = 1;
  /* A waiter pinned to stay (a semaphore's, chosen for a hand-over of
   * permits) stays even when a message woke it meanwhile: going on to an
   * attempt of its own, it could take permits in Redis as well as the ones
   * handed to it. */
  while (!w->permit || (w->pinned && w->pin_holds)) {
    /* A pinned waiter stays for the outcome, which a releasing thread
     * brings within one command, whatever its own deadline. */
    int64_t now = dlock__now_us(), limit = until_us;
    if (w->pinned)
      limit = now + PINNED_RECHECK_US;
    else if (ps->canceled || now >= until_us)
      break;
    if (ps->reader == NULL && ps->connected && ps->ctx != NULL) {
      dlock__sub_read_as_waiter_locked(ps, w, limit);
      was_reader = 1;
      continue;
    }
    struct timespec ts = dlock__timespec_at(limit);
    pthread_cond_timedwait(&w->cv, &ps->mu, &ts);
  }
  /* The thread left the socket to this reader: it takes it back while
   * others still wait. */
  if (was_reader && ps->thread_left_socket && ps->waiting > 1)
    dlock__sub_poke_thread(ps);
  w->parked = 0;
  int rc = 0;
  if (ps->canceled)
    rc = dlock__fail(DLOCK_ECANCELED, "client is shutting down");
  else if (w->permit) {
    /* The value goes with the wake-up, taken under the mutex: a wake-up
     * that another waiter's leave hands on to this one, now that it is no
     * longer awake, writes 'value' again. */
    w->permit = 0;
    w->taken = w->value;
    w->value = 0;
    rc = w->taken != 0 ? 2 : 1;
  }
  pthread_mutex_unlock(&ps->mu);
  return rc;
}

void dlock__sub_cancel(dlock__pubsub *ps) {
  pthread_mutex_lock(&ps->mu);
  ps->canceled = 1;
  for (dlock__sub *s = ps->subs; s != NULL; s = s->next) {
    for (dlock__waiter *w = s->head; w != NULL; w = w->next)
      pthread_cond_signal(&w->cv);
    pthread_cond_broadcast(&s->ready);
  }
  if (ps->reader != NULL)
    dlock__sub_poke(ps->reader_pipe[1]);
  pthread_mutex_unlock(&ps->mu);
}

void dlock__pubsub_leave(dlock__pubsub *ps, dlock__waiter *w) {
  ps = w->sub->ps;
  pthread_mutex_lock(&ps->mu);
  /* A releasing thread pinned this waiter (to hand it a lock): wait for
   * its outcome. */
  while (w->pinned) {
    struct timespec ts =
        dlock__timespec_at(dlock__now_us() + PINNED_RECHECK_US);
    pthread_cond_timedwait(&w->cv, &ps->mu, &ts);
  }
  /* Not even when the channel has nobody waiting now: the thread finds
   * that out by itself within LINGER_US (see sync_subscriptions_locked in
   * subconn.c), which is soon enough for the linger, and a poke here would wake
   * it just as this waiter's caller goes on with the lock it got. */
  (void)dlock__sub_dequeue_locked(ps, w);
  pthread_mutex_unlock(&ps->mu);
}
