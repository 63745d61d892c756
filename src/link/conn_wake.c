/*
 * How the callers of the shared command connection wait (see conn.h and
 * conn_internal.h): a caller whose replies another thread reads sleeps
 * until that thread tells it why it is woken (its replies are in, or the
 * reading is its turn), and the invariants checked each time 'mu' is
 * released.
 */
#define _GNU_SOURCE
#include "conn_internal.h"

#include "alloc.h"
#include "error.h"
#include "monotime.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>
#ifdef __linux__
#include <linux/futex.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

/* ---- invariants --------------------------------------------------------- */

/*
 * What holds whenever 'mu' is released, checked in debug builds (the
 * sanitizer runs are debug builds). One reader and one writer at most; a
 * socket being sent on outside 'mu' is the writer's; a connection being
 * opened is not there yet; without a connection nothing is queued or read;
 * every queued request either belongs to a caller that still counts it as
 * unanswered, or was submitted, or was given up on.
 */
void dlock__conn_check_locked(const dlock__conn *c) {
#ifndef NDEBUG
  assert(c->driving == 0 || c->driving == 1);
  assert(c->writing == 0 || c->writing == 1);
  assert(c->sending == NULL || c->writing);
  assert(c->zombie == NULL || (c->zombie == c->sending && c->ctx != c->zombie));
  assert(c->ctx != NULL || (c->head == NULL && !c->driving));
  assert(!c->discovering || c->ctx == NULL);
  assert(c->broken_code == 0 || c->ctx != NULL);
  assert((c->head == NULL) == (c->tail == NULL));
  assert(c->tail == NULL || c->tail->next == NULL);
  size_t submitted = 0;
  for (const request *r = c->head; r != NULL; r = r->next) {
    assert(waiter_of(r) == NULL || waiter_of(r)->remaining > 0);
    assert(r->done != NULL || r->owned);
    assert(r->reply == NULL && r->err == 0);
    submitted += r->done != NULL && r->owned;
  }
  assert(submitted == c->nsubmitted);
  assert((c->driver != NULL) == c->driving);
#ifdef __linux__
  assert(c->nwakes <= WAKES_MAX);
#endif
#else
  (void)c;
#endif
}

/* ---- reconnects --------------------------------------------------------- */

/* Counts the reconnects made under 'mu' and tells the event hook of each,
 * now that 'mu' is released: a hook must never run under it. */
static void tell_relinks(dlock__conn *c, unsigned n) {
  for (; n > 0; n--)
    dlock__stat_event(c->cfg.stats, DLOCK__ST_RECONNECTS, DLOCK_EVENT_RECONNECT,
                      0, 0);
}

/* ---- waking callers ----------------------------------------------------- */

/* The pipe of a caller waiting among others (conn_many.c), whose poll()
 * hears of its wake-ups there, or -1. Read before the caller is told: a
 * caller told that its replies are in may return at once, frame and all;
 * one waiting among others takes 'mu' before it closes its pipe. */
static int notify_fd(const caller *who) {
  return who->notify_fd != NULL ? *who->notify_fd : -1;
}

static void notify_by_fd(int fd) {
  if (fd < 0)
    return;
  char one = 1;
  /* A full pipe has woken the waiter already. */
  ssize_t w = write(fd, &one, 1);
  (void)w;
}

#ifdef __linux__
/*
 * On Linux a caller sleeps on a futex word rather than on a condition
 * variable tied to 'mu'. A condition variable would make every woken caller
 * take 'mu' again on its way out, and since the driver wakes callers while
 * it holds 'mu', each of them would first block on the mutex and be woken a
 * second time. Here the word is set under 'mu' (with the replies published
 * before it), the futex is woken only once 'mu' is released, and a caller
 * whose replies are all in returns without taking 'mu' at all.
 *
 * The wake-up may therefore come after its caller has returned (it timed
 * out and found its replies under 'mu'). So the word is not in the
 * caller's stack frame but in a slot the connection owns until
 * dlock__conn_free: a late wake-up reaches either a free slot or one that
 * another caller took since, and every sleeper checks its own word again
 * after waking, so a stray wake-up costs one extra look and nothing more.
 */
struct dlock__wake_slot {
  _Atomic uint32_t word;
  struct dlock__wake_slot *next_free; /* in the connection's free list */
  struct dlock__wake_slot *next_all;  /* every slot, to free them at the end */
};

static void futex_wake_one(_Atomic uint32_t *word) {
  syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* Gives the caller a slot: a free one, or a new one when all are taken
 * (there are never more than the most callers ever in flight at once). */
int dlock__conn_caller_init(dlock__conn *c, caller *me) {
  pthread_mutex_lock(&c->slots_mu);
  dlock__wake_slot *s = c->free_slots;
  if (s != NULL) {
    c->free_slots = s->next_free;
  } else {
    s = dlock__calloc(1, sizeof(*s));
    if (s != NULL) {
      s->next_all = c->all_slots;
      c->all_slots = s;
    }
  }
  pthread_mutex_unlock(&c->slots_mu);
  if (s == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory for a waiting caller");
  atomic_store_explicit(&s->word, WAKE_NONE, memory_order_relaxed);
  me->slot = s;
  return 0;
}

void dlock__conn_caller_destroy(dlock__conn *c, caller *me) {
  pthread_mutex_lock(&c->slots_mu);
  me->slot->next_free = c->free_slots;
  c->free_slots = me->slot;
  pthread_mutex_unlock(&c->slots_mu);
  me->slot = NULL;
}

void dlock__conn_free_slots(dlock__conn *c) {
  for (dlock__wake_slot *s = c->all_slots; s != NULL;) {
    dlock__wake_slot *next = s->next_all;
    dlock__free(s);
    s = next;
  }
  c->all_slots = c->free_slots = NULL;
}

/* Tells 'who' why it is woken; the wake-up itself waits for dlock__conn_unlock.
 */
void dlock__conn_notify_locked(dlock__conn *c, caller *who, uint32_t why) {
  assert(why != WAKE_DONE || who->remaining == 0);
  assert(why != WAKE_DRIVE || (who->remaining > 0 && who->waiting));
  _Atomic uint32_t *word = &who->slot->word;
  int fd = notify_fd(who);
  atomic_store_explicit(word, why, memory_order_release);
  notify_by_fd(fd);
  if (c->nwakes < WAKES_MAX)
    c->wakes[c->nwakes++] = word;
  else
    futex_wake_one(word);
}

void dlock__conn_take_wakes_locked(dlock__conn *c, wake_batch *b) {
  b->n = c->nwakes;
  if (b->n > 0)
    memcpy(b->words, c->wakes, b->n * sizeof(b->words[0]));
  c->nwakes = 0;
}

void dlock__conn_make_wakes(wake_batch *b) {
  for (size_t i = 0; i < b->n; i++)
    futex_wake_one(b->words[i]);
}

/* Releases 'mu', then wakes the callers notified under it. */
void dlock__conn_unlock(dlock__conn *c) {
  dlock__conn_check_locked(c);
  wake_batch b;
  dlock__conn_take_wakes_locked(c, &b);
  unsigned relinks = c->relinks;
  c->relinks = 0;
  pthread_mutex_unlock(&c->mu);
  dlock__conn_make_wakes(&b);
  tell_relinks(c, relinks);
}

/*
 * Sleeps until notified or until the caller's deadline. Called with 'mu'
 * held and another thread driving. Returns 1 when the caller's requests are
 * all answered (or failed), with 'mu' released; 0 with 'mu' held again.
 */
int dlock__conn_park(dlock__conn *c, caller *me) {
  _Atomic uint32_t *word = &me->slot->word;
  atomic_store_explicit(word, WAKE_NONE, memory_order_relaxed);
  struct timespec ts = dlock__timespec_at(wait_limit(c, me));
  dlock__conn_unlock(c);
  uint32_t why;
  while ((why = atomic_load_explicit(word, memory_order_acquire)) ==
         WAKE_NONE) {
    /* FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC time. */
    if (syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_BITSET_PRIVATE,
                WAKE_NONE, &ts, NULL, FUTEX_BITSET_MATCH_ANY) != 0 &&
        errno == ETIMEDOUT)
      break;
  }
  if (why == WAKE_DONE)
    return 1;
  pthread_mutex_lock(&c->mu);
  return 0;
}
#else
/* Elsewhere a condition variable on 'mu' per caller. */
int dlock__conn_caller_init(dlock__conn *c, caller *me) {
  (void)c;
  if (dlock__cond_init_monotonic(&me->cv) != 0)
    return dlock__fail(DLOCK_ENOMEM, "pthread_cond_init failed");
  return 0;
}

void dlock__conn_caller_destroy(dlock__conn *c, caller *me) {
  (void)c;
  pthread_cond_destroy(&me->cv);
}

void dlock__conn_free_slots(dlock__conn *c) { (void)c; }

void dlock__conn_notify_locked(dlock__conn *c, caller *who, uint32_t why) {
  (void)c;
  (void)why;
  assert(why != WAKE_DONE || who->remaining == 0);
  assert(why != WAKE_DRIVE || (who->remaining > 0 && who->waiting));
  notify_by_fd(notify_fd(who));
  pthread_cond_signal(&who->cv);
}

void dlock__conn_take_wakes_locked(dlock__conn *c, wake_batch *b) {
  (void)c;
  (void)b;
}

void dlock__conn_make_wakes(wake_batch *b) { (void)b; }

void dlock__conn_unlock(dlock__conn *c) {
  dlock__conn_check_locked(c);
  unsigned relinks = c->relinks;
  c->relinks = 0;
  pthread_mutex_unlock(&c->mu);
  tell_relinks(c, relinks);
}

int dlock__conn_park(dlock__conn *c, caller *me) {
  struct timespec ts = dlock__timespec_at(wait_limit(c, me));
  pthread_cond_timedwait(&me->cv, &c->mu, &ts);
  return 0;
}
#endif
