/*
 * The non-reentrant locks (dlock_get_nonreentrant, _fair): Redisson's
 * RLock and RFairLock layouts, with an owner's second hold refused.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "loop_util.h"

static dlock_t *get_kind(dlock_client_t *c, dlock_kind_t kind,
                         const char *name) {
  dlock_t *l = NULL;
  ASSERT_DLOCK_OK(dlock_get_kind(c, kind, name, strlen(name), &l));
  ASSERT_EQ(dlock_kind(l), kind);
  return l;
}

/* An owner that holds the lock is refused a second hold, at once and
 * whatever the wait, and keeps the one it has; another owner of the same
 * client is excluded as usual; the lock is free after one unlock. */
static void refuses_second_hold(dlock_kind_t kind, const char *name) {
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = get_kind(c, kind, name);
  char field[256];
  lu_field(field, sizeof(field), c, dlock_self());

  ASSERT_DLOCK_OK(dlock_lock(l, 20000));
  uint64_t token = dlock_token(l);
  ASSERT_GT(token, 0);
  ASSERT_EQ(lu_hget_num(s, name, field), 1);
  ASSERT_DLOCK_ERR(dlock_lock(l, 20000), DLOCK_EINVAL);
  ASSERT(strstr(dlock_last_error(), "not reentrant") != NULL);
  ASSERT_DLOCK_ERR(dlock_trylock(l, 0, 20000), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_trylock(l, 5000, DLOCK_WATCHDOG), DLOCK_EINVAL);
  /* Refused without a change: one hold, its token, its lease. */
  ASSERT_EQ(dlock_hold_count(l), 1);
  ASSERT_EQ(dlock_token(l), token);
  ASSERT_EQ(lu_hget_num(s, name, field), 1);
  ASSERT_GT(lu_pttl(s, name), 10000);

  uint64_t other = dlock_owner_new();
  ASSERT_DLOCK_ERR(dlock_trylock_as(l, other, 0, 1000), DLOCK_ETIMEDOUT);

  ASSERT_DLOCK_OK(dlock_unlock(l));
  ASSERT_EQ(lu_exists(s, name), 0);
  ASSERT_DLOCK_ERR(dlock_unlock(l), DLOCK_ENOTHELD);
  /* Free again: the other owner and then this one take it in turn. */
  ASSERT_DLOCK_OK(dlock_trylock_as(l, other, 0, 20000));
  ASSERT_DLOCK_ERR(dlock_trylock_as(l, other, 0, 20000), DLOCK_EINVAL);
  ASSERT_DLOCK_OK(dlock_unlock_as(l, other));
  ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));
  ASSERT_GT(dlock_token(l), token);
  ASSERT_DLOCK_ERR(dlock_lock(l, DLOCK_WATCHDOG), DLOCK_EINVAL);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  ASSERT_EQ(lu_exists(s, name), 0);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

TEST(nonreentrant_refuses_second_hold) {
  refuses_second_hold(DLOCK_NONREENTRANT, "nr:second");
}

TEST(nonreentrant_fair_refuses_second_hold) {
  refuses_second_hold(DLOCK_NONREENTRANT_FAIR, "nrf:second");
}

typedef struct waiter {
  dlock_t *l;
  uint64_t owner;
  int rc;
  atomic_int done;
  atomic_int *order; /* the next place, shared by the waiters */
  int place;         /* the order in which it got the lock */
} waiter_t;

static void *waiter_main(void *p) {
  waiter_t *w = p;
  w->rc = dlock_trylock_as(w->l, w->owner, 60000, 60000);
  if (w->rc == 0)
    w->place = atomic_fetch_add(w->order, 1);
  atomic_store(&w->done, 1);
  return NULL;
}

static void waiter_start(waiter_t *w, pthread_t *t, dlock_t *l,
                         atomic_int *order) {
  memset(w, 0, sizeof(*w));
  w->l = l;
  w->owner = dlock_owner_new();
  w->order = order;
  atomic_init(&w->done, 0);
  ASSERT_EQ(pthread_create(t, NULL, waiter_main, w), 0);
}

/* Waits (up to 20 s) until 'n' subscribers listen on 'chan'. */
static void wait_subscribers(rp_server_t *s, const char *chan, int64_t n) {
  for (int i = 0; i < 2000 && lu_numsub(s, chan, strlen(chan)) < n; i++)
    lu_sleep_ms(10);
  ASSERT_GE(lu_numsub(s, chan, strlen(chan)), n);
}

/* A waiter of another client waits by pub/sub while the lock is held (a
 * lease far longer than the test) and gets it when it is released: the
 * unlock woke it. A reentrant handle on the same name is excluded too. */
TEST(nonreentrant_exclusion_and_wake_up) {
  const char *name = "nr:wake";
  rp_server_t *s = lu_server(0);
  dlock_client_t *c1 = lu_client(s), *c2 = lu_client(s);
  dlock_t *l1 = get_kind(c1, DLOCK_NONREENTRANT, name);
  dlock_t *l2 = get_kind(c2, DLOCK_NONREENTRANT, name);
  dlock_t *re = lu_get(c2, name);
  char chan[256];
  lu_channel(chan, sizeof(chan), name, strlen(name));

  ASSERT_DLOCK_OK(dlock_lock(l1, 60000));
  ASSERT_DLOCK_ERR(dlock_trylock(re, 0, 1000), DLOCK_ETIMEDOUT);
  atomic_int order;
  atomic_init(&order, 0);
  waiter_t w;
  pthread_t t;
  waiter_start(&w, &t, l2, &order);
  wait_subscribers(s, chan, 1);
  ASSERT_EQ(atomic_load(&w.done), 0);
  ASSERT_EQ(dlock_is_held_as(l2, w.owner), 0);
  ASSERT_DLOCK_OK(dlock_unlock(l1));
  ASSERT_EQ(pthread_join(t, NULL), 0);
  ASSERT_DLOCK_OK(w.rc);
  /* Held by the waiter with its full lease: it was woken, not expired. */
  ASSERT_GT(lu_pttl(s, name), 30000);
  ASSERT_EQ(dlock_is_held_as(l2, w.owner), 1);
  ASSERT_DLOCK_ERR(dlock_trylock_as(l2, w.owner, 0, 1000), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_trylock(l1, 0, 1000), DLOCK_ETIMEDOUT);
  ASSERT_DLOCK_OK(dlock_unlock_as(l2, w.owner));
  ASSERT_EQ(lu_exists(s, name), 0);
  dlock_free(re);
  lu_free_two(s, c1, l1, c2, l2);
}

/* The fair form keeps the queue order: two waiters, queued one after the
 * other, get the lock in that order, each woken by the release before. */
TEST(nonreentrant_fair_fifo) {
  const char *name = "nrf:fifo";
  rp_server_t *s = lu_server(0);
  dlock_client_t *c1 = lu_client(s), *c2 = lu_client(s);
  dlock_t *l1 = get_kind(c1, DLOCK_NONREENTRANT_FAIR, name);
  dlock_t *l2 = get_kind(c2, DLOCK_NONREENTRANT_FAIR, name);
  char queue[256];
  lu_keyname(queue, sizeof(queue), "redisson_lock_queue", name, strlen(name));

  ASSERT_DLOCK_OK(dlock_lock(l1, 60000));
  atomic_int order;
  atomic_init(&order, 0);
  waiter_t w[2];
  pthread_t t[2];
  for (int i = 0; i < 2; i++) {
    /* One waiter in each client, each queued before the next starts. */
    waiter_start(&w[i], &t[i], i == 0 ? l2 : l1, &order);
    for (int k = 0;
         k < 2000 && lu_reply_int(rp_cmd(s, "LLEN %s", queue)) <= (int64_t)i;
         k++)
      lu_sleep_ms(10);
    ASSERT_EQ(lu_reply_int(rp_cmd(s, "LLEN %s", queue)), i + 1);
  }
  ASSERT_DLOCK_OK(dlock_unlock(l1));
  for (int i = 0; i < 2; i++) {
    dlock_t *l = w[i].l;
    for (int k = 0; k < 2000 && !dlock_is_held_as(l, w[i].owner); k++)
      lu_sleep_ms(10);
    ASSERT_EQ(dlock_is_held_as(l, w[i].owner), 1);
    /* The one behind is still waiting, and may not barge in. */
    if (i == 0)
      ASSERT_EQ(atomic_load(&w[1].done), 0);
    ASSERT_EQ(pthread_join(t[i], NULL), 0);
    ASSERT_DLOCK_OK(w[i].rc);
    ASSERT_EQ(w[i].place, i);
    ASSERT_DLOCK_OK(dlock_unlock_as(l, w[i].owner));
  }
  ASSERT_EQ(lu_exists(s, name), 0);
  lu_free_two(s, c1, l1, c2, l2);
}

/* Through an async client's loop too: the second hold is refused (by
 * the call or its callback) and the first stays as it was. */
TEST(nonreentrant_async_refuses_second_hold) {
  rp_server_t *s = lu_server(0);
  dlock_options_t o;
  lu_options(&o, s);
  dlock_client_t *c = tl_client_opts(&o);
  tl_loop t;
  tl_init(&t, c);
  for (int k = 0; k < 2; k++) {
    dlock_t *l = get_kind(c, k ? DLOCK_NONREENTRANT_FAIR : DLOCK_NONREENTRANT,
                          "nr:async");
    tl_done a = {0}, b = {0}, u = {0};
    ASSERT_DLOCK_OK(dlock_lock_async(l, 7, 20000, tl_done_cb, &a));
    tl_run_until(&t, &a.calls, 10000);
    ASSERT_DLOCK_OK(a.status);
    int rc = dlock_trylock_async(l, 7, 1000, 20000, tl_done_cb, &b);
    if (rc == 0) {
      tl_run_until(&t, &b.calls, 10000);
      rc = b.status;
    }
    ASSERT_EQ(rc, DLOCK_EINVAL);
    ASSERT_EQ(lu_hlen(s, "nr:async"), 1);
    ASSERT_DLOCK_OK(dlock_unlock_async(l, 7, tl_done_cb, &u));
    tl_run_until(&t, &u.calls, 10000);
    ASSERT_DLOCK_OK(u.status);
    ASSERT_EQ(lu_exists(s, "nr:async"), 0);
    dlock_free(l);
  }
  dlock_client_close(c);
  tl_close(&t);
  rp_free(s);
}

/* dlock_get_kind takes the new kinds and still refuses the composites. */
TEST(nonreentrant_constructors) {
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  dlock_t *a = NULL, *b = NULL, *x = (dlock_t *)&x;
  ASSERT_DLOCK_OK(dlock_get_nonreentrant(c, "nr:ctor", &a));
  ASSERT_EQ(dlock_kind(a), DLOCK_NONREENTRANT);
  ASSERT_DLOCK_OK(dlock_getn_nonreentrant_fair(c, "nr:ctor\0x", 9, &b));
  ASSERT_EQ(dlock_kind(b), DLOCK_NONREENTRANT_FAIR);
  ASSERT_DLOCK_ERR(dlock_get_kind(c, DLOCK_MULTI, "m", 1, &x), DLOCK_EINVAL);
  ASSERT_NULL(x);
  x = (dlock_t *)&x;
  ASSERT_DLOCK_ERR(dlock_get_kind(c, DLOCK_NONREENTRANT_FAIR + 1, "m", 1, &x),
                   DLOCK_EINVAL);
  ASSERT_NULL(x);
  dlock_free(a);
  dlock_free(b);
  dlock_client_close(c);
  rp_free(s);
}
