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
