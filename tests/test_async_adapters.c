/*
 * The header-only adapters (include/dlock/adapters/): an async client on
 * a libuv loop and on a libevent base. Each test runs the loop itself
 * until the work is done; the loop then ends by itself only if the
 * adapter let go of every handle when the client closed.
 */
/* uv.h needs POSIX types that strict C11 hides. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <string.h>

#include "dlock/adapters/libevent.h"
#include "dlock/adapters/libuv.h"
#include "lock_util.h"

/* A waiter that gets the lock when a blocking holder lets go, an unlock,
 * and a second waiter that the close cancels. */
typedef struct scene {
  rp_server_t *s;
  dlock_client_t *ac, *bc;
  dlock_t *al, *bl;
  int got, unlocked, canceled, status;
  int64_t released_ms, got_ms;
  void (*stop)(struct scene *);
  void *loop;
} scene;

static void canceled_cb(dlock_t *l, uint64_t owner, int status, void *data) {
  scene *sc = data;
  (void)l;
  (void)owner;
  sc->canceled++;
  sc->status = status;
}

static void unlocked_cb(dlock_t *l, uint64_t owner, int status, void *data) {
  scene *sc = data;
  (void)owner;
  sc->unlocked++;
  if (status != 0)
    sc->status = status;
  /* A second owner waits behind a blocking holder, then the client closes
   * under it. */
  ASSERT_DLOCK_OK(dlock_trylock(sc->bl, 0, 60000));
  ASSERT_DLOCK_OK(dlock_lock_async(l, 99, 10000, canceled_cb, sc));
  /* Closed from a callback, with that operation pending: it ends with
   * DLOCK_ECANCELED before the close returns. */
  dlock_client_close(sc->ac);
  sc->ac = NULL;
  ASSERT_EQ(sc->canceled, 1);
}

static void got_cb(dlock_t *l, uint64_t owner, int status, void *data) {
  scene *sc = data;
  sc->got++;
  sc->got_ms = lu_now_ms();
  sc->status = status;
  if (status == 0)
    ASSERT_DLOCK_OK(dlock_unlock_async(l, owner, unlocked_cb, sc));
}

static void scene_start(scene *sc) {
  memset(sc, 0, sizeof(*sc));
  sc->s = lu_server(0);
  sc->bc = lu_client(sc->s);
  sc->bl = lu_get(sc->bc, "adapter-lock");
  dlock_options_t o;
  lu_options(&o, sc->s);
  ASSERT_DLOCK_OK(dlock_client_open_async(&o, &sc->ac));
}

/* Held by the blocking client for a minute: the waiter gets it only from
 * the unlock message, sent from a timer of the loop. */
static void scene_hold(scene *sc) {
  ASSERT_DLOCK_OK(dlock_trylock(sc->bl, 0, 60000));
  sc->al = lu_get(sc->ac, "adapter-lock");
  ASSERT_DLOCK_OK(dlock_lock_async(sc->al, 7, 10000, got_cb, sc));
}

static void scene_release(scene *sc) {
  sc->released_ms = lu_now_ms();
  ASSERT_DLOCK_OK(dlock_unlock(sc->bl));
}

static void scene_check(scene *sc) {
  ASSERT_EQ(sc->got, 1);
  ASSERT_EQ(sc->unlocked, 1);
  ASSERT_EQ(sc->canceled, 1);
  ASSERT_EQ(sc->status, DLOCK_ECANCELED);
  ASSERT_LT(sc->got_ms - sc->released_ms, 30000);
  /* The blocking client still holds it; the cancelled waiter left
   * nothing. */
  ASSERT_DLOCK_OK(dlock_unlock(sc->bl));
  ASSERT_EQ(lu_exists(sc->s, "adapter-lock"), 0);
  /* A handle of a closed client can still be freed. */
  dlock_free(sc->al);
  dlock_free(sc->bl);
  dlock_client_close(sc->bc);
  rp_free(sc->s);
}

/* ---- every verb and kind, one after another ----------------------------- */

/* A tour of the verbs: each step starts from the callback of the one
 * before (as an application chains them), checks the status it gets, and
 * the last closes the client, after which the loop must end by itself. */
typedef struct tour tour;
typedef int (*tour_start)(tour *t);
typedef struct tour_step {
  const char *what;
  tour_start start;
  int want;      /* the status expected */
  int callbacks; /* how many callbacks the step's operations make */
} tour_step;

struct tour {
  rp_server_t *s;
  dlock_client_t *ac, *bc; /* async; blocking, to set things up */
  dlock_t *lock, *fair, *read, *write, *spin, *part, *multi;
  dlock_sem_t *sem;
  dlock_latch_t *latch;
  uint64_t a, b, c; /* owners */
  const tour_step *steps;
  int nsteps, at, left;
  int64_t counter; /* INCR's answer */
  int closed;
};

static void tour_next(tour *t);

/* Every callback comes here: checks the step's status, and once all of
 * the step's callbacks came, starts the next step. */
static void tour_saw(tour *t, int status) {
  const tour_step *st = &t->steps[t->at];
  if (status != st->want)
    TEST_FAIL("step %d (%s): %s, expected %s (%s)", t->at, st->what,
              dlock_err_name(status), dlock_err_name(st->want),
              status != 0 ? dlock_last_error() : "");
  if (--t->left > 0)
    return;
  t->at++;
  tour_next(t);
}

static void tour_lock_cb(dlock_t *l, uint64_t owner, int status, void *d) {
  (void)l;
  (void)owner;
  tour_saw(d, status);
}

static void tour_sem_cb(dlock_sem_t *s, int status, void *d) {
  (void)s;
  tour_saw(d, status);
}

static void tour_latch_cb(dlock_latch_t *l, int status, int64_t v, void *d) {
  (void)l;
  (void)v;
  tour_saw(d, status);
}

static void tour_reply_cb(dlock_client_t *c, int status, dlock_reply_t *r,
                          void *d) {
  tour *t = d;
  (void)c;
  if (status == 0 && r->type == DLOCK_REPLY_INTEGER)
    t->counter = r->integer;
  dlock_reply_free(r);
  tour_saw(t, status);
}

static void tour_next(tour *t) {
  if (t->at == t->nsteps) {
    dlock_client_close(t->ac);
    t->ac = NULL;
    t->closed = 1;
    return;
  }
  t->left = t->steps[t->at].callbacks ? t->steps[t->at].callbacks : 1;
  int rc = t->steps[t->at].start(t);
  if (rc != 0)
    TEST_FAIL("step %d (%s) did not start: %s %s", t->at, t->steps[t->at].what,
              dlock_err_name(rc), dlock_last_error());
}

#define TRY(h, o, wait) dlock_trylock_async(h, o, wait, 30000, tour_lock_cb, t)
#define UNLOCK(h, o) dlock_unlock_async(h, o, tour_lock_cb, t)
static int s_lock_a(tour *t) { return TRY(t->lock, t->a, 0); }
static int s_lock_b(tour *t) { return TRY(t->lock, t->b, 0); }
static int s_unlock_a(tour *t) { return UNLOCK(t->lock, t->a); }
static int s_fair_a(tour *t) {
  return dlock_lock_async(t->fair, t->a, 30000, tour_lock_cb, t);
}
static int s_fair_b(tour *t) { return TRY(t->fair, t->b, 0); }
static int s_fair_unlock(tour *t) { return UNLOCK(t->fair, t->a); }
static int s_read_a(tour *t) { return TRY(t->read, t->a, 0); }
static int s_read_b(tour *t) { return TRY(t->read, t->b, 0); }
static int s_write_c(tour *t) { return TRY(t->write, t->c, 0); }
static int s_read_unlock_a(tour *t) { return UNLOCK(t->read, t->a); }
static int s_read_unlock_b(tour *t) { return UNLOCK(t->read, t->b); }
static int s_write_c_waits(tour *t) { return TRY(t->write, t->c, 30000); }
static int s_write_unlock(tour *t) { return UNLOCK(t->write, t->c); }
static int s_spin_a(tour *t) { return TRY(t->spin, t->a, 0); }
static int s_spin_unlock(tour *t) { return UNLOCK(t->spin, t->a); }
static int s_multi_a(tour *t) { return TRY(t->multi, t->a, 0); }
static int s_part_b(tour *t) { return TRY(t->part, t->b, 0); }
static int s_multi_unlock(tour *t) { return UNLOCK(t->multi, t->a); }
static int s_sem_two(tour *t) {
  return dlock_sem_acquire_async(t->sem, 2, 0, tour_sem_cb, t);
}
static int s_sem_one_more(tour *t) {
  return dlock_sem_acquire_async(t->sem, 1, 0, tour_sem_cb, t);
}
static int s_sem_release(tour *t) {
  return dlock_sem_release_async(t->sem, 2, tour_sem_cb, t);
}
/* A latch waited for and counted down to zero by the same loop: the wait
 * ends by the count-down's message. Two callbacks. */
static int s_latch(tour *t) {
  int rc = dlock_latch_await_async(t->latch, 30000, tour_latch_cb, t);
  return rc != 0 ? rc
                 : dlock_latch_count_down_async(t->latch, tour_latch_cb, t);
}
static int s_incr(tour *t) {
  const char *argv[] = {"INCR", "adapter-tour-counter"};
  return dlock_client_command_async(t->ac, 2, argv, NULL, tour_reply_cb, t);
}

static const tour_step tour_steps[] = {
    {"reentrant lock", s_lock_a, 0, 0},
    {"reentrant lock again", s_lock_a, 0, 0},
    {"another owner refused", s_lock_b, DLOCK_ETIMEDOUT, 0},
    {"unlock", s_unlock_a, 0, 0},
    {"unlock the second hold", s_unlock_a, 0, 0},
    {"unlock one too many", s_unlock_a, DLOCK_ENOTHELD, 0},
    {"fair lock", s_fair_a, 0, 0},
    {"fair lock refused", s_fair_b, DLOCK_ETIMEDOUT, 0},
    {"fair unlock", s_fair_unlock, 0, 0},
    {"read lock", s_read_a, 0, 0},
    {"second reader", s_read_b, 0, 0},
    {"writer refused", s_write_c, DLOCK_ETIMEDOUT, 0},
    {"first reader leaves", s_read_unlock_a, 0, 0},
    {"second reader leaves", s_read_unlock_b, 0, 0},
    {"writer", s_write_c_waits, 0, 0},
    {"writer unlocks", s_write_unlock, 0, 0},
    {"spin lock", s_spin_a, 0, 0},
    {"spin unlock", s_spin_unlock, 0, 0},
    {"MultiLock", s_multi_a, 0, 0},
    {"its part refused to another owner", s_part_b, DLOCK_ETIMEDOUT, 0},
    {"MultiLock unlock", s_multi_unlock, 0, 0},
    {"two permits", s_sem_two, 0, 0},
    {"no third permit", s_sem_one_more, DLOCK_ETIMEDOUT, 0},
    {"permits back", s_sem_release, 0, 0},
    {"latch waited for and counted down", s_latch, 0, 2},
    {"a plain command", s_incr, 0, 0},
};

static void tour_start_on(tour *t) {
  memset(t, 0, sizeof(*t));
  t->s = lu_server(0);
  t->bc = lu_client(t->s);
  dlock_options_t o;
  lu_options(&o, t->s);
  ASSERT_DLOCK_OK(dlock_client_open_async(&o, &t->ac));
  t->a = dlock_owner_new();
  t->b = dlock_owner_new();
  t->c = dlock_owner_new();
  t->lock = lu_get(t->ac, "tour-lock");
  ASSERT_DLOCK_OK(dlock_get_fair(t->ac, "tour-fair", &t->fair));
  ASSERT_DLOCK_OK(dlock_get_rw(t->ac, "tour-rw", &t->read, &t->write));
  ASSERT_DLOCK_OK(dlock_get_spin(t->ac, "tour-spin", &t->spin));
  t->part = lu_get(t->ac, "tour-part");
  dlock_t *parts[] = {t->part, t->fair};
  ASSERT_DLOCK_OK(dlock_get_multi(parts, 2, &t->multi));
  ASSERT_DLOCK_OK(dlock_sem_get(t->ac, "tour-sem", &t->sem));
  ASSERT_DLOCK_OK(dlock_latch_get(t->ac, "tour-latch", &t->latch));
  /* The counts are set by a blocking client: an async one refuses
   * blocking verbs. */
  dlock_sem_t *sem;
  dlock_latch_t *latch;
  ASSERT_DLOCK_OK(dlock_sem_get(t->bc, "tour-sem", &sem));
  ASSERT_EQ(dlock_sem_try_set_permits(sem, 2), 1);
  dlock_sem_free(sem);
  ASSERT_DLOCK_OK(dlock_latch_get(t->bc, "tour-latch", &latch));
  ASSERT_EQ(dlock_latch_try_set_count(latch, 1), 1);
  dlock_latch_free(latch);
  t->steps = tour_steps;
  t->nsteps = (int)(sizeof(tour_steps) / sizeof(tour_steps[0]));
  tour_next(t);
}

static void tour_check(tour *t) {
  ASSERT_EQ(t->closed, 1);
  ASSERT_EQ(t->at, t->nsteps);
  ASSERT_EQ(t->counter, 1);
  const char *names[] = {"tour-lock", "tour-fair", "tour-rw", "tour-spin",
                         "tour-part"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    ASSERT_EQ(lu_exists(t->s, names[i]), 0);
  dlock_sem_t *sem;
  int64_t free_permits = -1;
  ASSERT_DLOCK_OK(dlock_sem_get(t->bc, "tour-sem", &sem));
  ASSERT_DLOCK_OK(dlock_sem_available(sem, &free_permits));
  ASSERT_EQ(free_permits, 2);
  dlock_sem_free(sem);
  dlock_free(t->multi);
  dlock_free(t->lock);
  dlock_free(t->fair);
  dlock_free(t->read);
  dlock_free(t->write);
  dlock_free(t->spin);
  dlock_free(t->part);
  dlock_sem_free(t->sem);
  dlock_latch_free(t->latch);
  dlock_client_close(t->bc);
  rp_free(t->s);
}

TEST(libuv_adapter_runs_every_verb_and_kind) {
  tour t;
  uv_loop_t loop;
  ASSERT_EQ(uv_loop_init(&loop), 0);
  /* The first step starts before the client is attached: it waits for
   * the loop. */
  tour_start_on(&t);
  ASSERT_DLOCK_OK(dlock_libuv_attach(t.ac, &loop));
  ASSERT_EQ(uv_run(&loop, UV_RUN_DEFAULT), 0);
  ASSERT_EQ(uv_loop_close(&loop), 0);
  tour_check(&t);
}

TEST(libevent_adapter_runs_every_verb_and_kind) {
  tour t;
  struct event_base *base = event_base_new();
  ASSERT_NOT_NULL(base);
  tour_start_on(&t);
  ASSERT_DLOCK_OK(dlock_libevent_attach(t.ac, base));
  ASSERT_EQ(event_base_dispatch(base), 1);
  event_base_free(base);
  tour_check(&t);
}

/* ---- libuv -------------------------------------------------------------- */

static void uv_release_later(uv_timer_t *t) {
  scene_release((scene *)t->data);
  uv_close((uv_handle_t *)t, NULL);
}

TEST(libuv_adapter_wakes_unlocks_and_lets_go_at_close) {
  scene sc;
  scene_start(&sc);
  uv_loop_t loop;
  ASSERT_EQ(uv_loop_init(&loop), 0);
  ASSERT_DLOCK_OK(dlock_libuv_attach(sc.ac, &loop));
  scene_hold(&sc);
  uv_timer_t later;
  uv_timer_init(&loop, &later);
  later.data = &sc;
  uv_timer_start(&later, uv_release_later, 300, 0);
  /* Returns once no handle is left: the client's are closed at its close. */
  ASSERT_EQ(uv_run(&loop, UV_RUN_DEFAULT), 0);
  ASSERT_EQ(uv_loop_close(&loop), 0);
  scene_check(&sc);
}

/* ---- libevent ----------------------------------------------------------- */

static void ev_release_later(evutil_socket_t fd, short what, void *arg) {
  (void)fd;
  (void)what;
  scene_release((scene *)arg);
}

TEST(libevent_adapter_wakes_unlocks_and_lets_go_at_close) {
  scene sc;
  scene_start(&sc);
  struct event_base *base = event_base_new();
  ASSERT_NOT_NULL(base);
  ASSERT_DLOCK_OK(dlock_libevent_attach(sc.ac, base));
  scene_hold(&sc);
  struct event *later = evtimer_new(base, ev_release_later, &sc);
  struct timeval tv = {0, 300000};
  evtimer_add(later, &tv);
  /* Returns once no event is left. */
  ASSERT_EQ(event_base_dispatch(base), 1);
  event_free(later);
  event_base_free(base);
  scene_check(&sc);
}
