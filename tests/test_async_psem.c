/*
 * The expirable-permit semaphore on an async client, driven by a plain
 * epoll loop (loop_util.h): a permit taken and given back through the
 * loop, a waiter woken by another client's release (its holder's lease
 * being far longer than the test), a wait that runs out, the watchdog
 * renewing a permit from the loop, and a close that ends what is pending
 * with DLOCK_ECANCELED once and leaves no permit taken.
 */
#include <string.h>

#include "loop_util.h"

#define NAME "async-psem"
#define ZSET "{async-psem}:timeout"
#define CHANNEL "redisson_sc:{async-psem}"

/* An async client on 's' attached to a fresh loop 't'. */
static dlock_client_t *async_client(rp_server_t *s, tl_loop *t,
                                    int64_t watchdog_ms) {
  dlock_options_t o;
  lu_options(&o, s);
  if (watchdog_ms > 0)
    o.watchdog_timeout_ms = watchdog_ms;
  dlock_client_t *c = tl_client_opts(&o);
  tl_init(t, c);
  return c;
}

typedef struct psem_done {
  int calls, status;
  dlock_permit_t permit;
} psem_done;

/* An acquisition's end: a permit exactly when it succeeded. */
static void psem_cb(dlock_psem_t *s, int status, const dlock_permit_t *permit,
                    void *data) {
  psem_done *d = data;
  (void)s;
  d->calls++;
  d->status = status;
  ASSERT_EQ(permit != NULL, status == 0);
  if (permit != NULL)
    d->permit = *permit;
}

/* A release's end: never a permit. */
static void rel_cb(dlock_psem_t *s, int status, const dlock_permit_t *permit,
                   void *data) {
  psem_done *d = data;
  (void)s;
  d->calls++;
  d->status = status;
  ASSERT_NULL(permit);
}

static int64_t zcard(rp_server_t *s) {
  redisReply *r = rp_cmd(s, "ZCARD %s", ZSET);
  return lu_reply_int(r);
}

/* The free permits, after giving back those whose lease ended. */
static int64_t free_permits(dlock_psem_t *b) {
  int64_t f = -1, taken = -1;
  ASSERT_DLOCK_OK(dlock_psem_count(b, &f, &taken));
  return f;
}

/* A server, an async client on it with a loop, a blocking client, and
 * each one's handle on the semaphore, which has 'permits'. */
typedef struct fix {
  rp_server_t *s;
  tl_loop t;
  dlock_client_t *ac, *bc;
  dlock_psem_t *as, *bs;
} fix;

static void fix_up(fix *f, int64_t watchdog_ms, int64_t permits) {
  f->s = lu_server(0);
  f->ac = async_client(f->s, &f->t, watchdog_ms);
  f->bc = lu_client(f->s);
  f->as = f->bs = NULL;
  ASSERT_DLOCK_OK(dlock_psem_get(f->ac, NAME, &f->as));
  ASSERT_DLOCK_OK(dlock_psem_get(f->bc, NAME, &f->bs));
  ASSERT_EQ(dlock_psem_try_set_permits(f->bs, permits), 1);
}

/* Closes what fix_up made; the async client may be closed already. */
static void fix_down(fix *f) {
  dlock_psem_free(f->as);
  dlock_psem_free(f->bs);
  if (f->ac != NULL)
    dlock_client_close(f->ac);
  dlock_client_close(f->bc);
  tl_close(&f->t);
  rp_free(f->s);
}

/* Gives permit 'id' back through the loop: its status. */
static int release_through_loop(fix *f, const char *id) {
  psem_done r = {0};
  ASSERT_DLOCK_OK(dlock_psem_release_async(f->as, id, rel_cb, &r));
  ASSERT_EQ(r.calls, 0); /* never from the call that started it */
  tl_run_until(&f->t, &r.calls, 20000);
  ASSERT_EQ(r.calls, 1);
  return r.status;
}

/* Turns the loop until 'chan' has 'n' subscribers. */
static void until_numsub(tl_loop *t, rp_server_t *s, int64_t n) {
  int64_t end = lu_now_ms() + 30000;
  while (lu_numsub(s, CHANNEL, strlen(CHANNEL)) != n) {
    ASSERT_LT(lu_now_ms(), end);
    tl_turn(t, 20);
  }
}

TEST(async_psem_acquire_and_release) {
  fix f;
  fix_up(&f, 0, 1);
  /* The blocking verbs refuse the async client, and the other way. */
  dlock_permit_t p;
  ASSERT_DLOCK_ERR(dlock_psem_acquire(f.as, 0, 1000, &p), DLOCK_EINVAL);
  psem_done a = {0}, r = {0};
  ASSERT_DLOCK_ERR(dlock_psem_acquire_async(f.bs, 0, 1000, psem_cb, &a),
                   DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_psem_acquire_async(f.as, 0, 1000, NULL, &a),
                   DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_psem_release_async(f.as, "xyz", rel_cb, &r),
                   DLOCK_EINVAL);

  ASSERT_DLOCK_OK(dlock_psem_acquire_async(f.as, 0, 60000, psem_cb, &a));
  ASSERT_EQ(a.calls, 0); /* never from the call that started it */
  tl_run_until(&f.t, &a.calls, 20000);
  ASSERT_EQ(a.calls, 1);
  ASSERT_DLOCK_OK(a.status);
  ASSERT_EQ(strlen(a.permit.id), 32);
  ASSERT_GT(a.permit.token, 0);
  ASSERT_GT(a.permit.expires_ms, 0);
  ASSERT_EQ(zcard(f.s), 1);
  ASSERT_EQ(free_permits(f.bs), 0);
  /* None left: a single try is refused at once. */
  psem_done none = {0};
  ASSERT_DLOCK_OK(dlock_psem_acquire_async(f.as, 0, 60000, psem_cb, &none));
  tl_run_until(&f.t, &none.calls, 20000);
  ASSERT_EQ(none.status, DLOCK_ETIMEDOUT);

  ASSERT_DLOCK_OK(release_through_loop(&f, a.permit.id));
  ASSERT_EQ(zcard(f.s), 0);
  ASSERT_EQ(free_permits(f.bs), 1);
  /* Given back already. */
  ASSERT_EQ(release_through_loop(&f, a.permit.id), DLOCK_ENOTHELD);
  ASSERT_EQ(free_permits(f.bs), 1);
  /* Counted as expirable permits, not as locks: one granted, one refused,
   * one given back and one release that found it gone. */
  dlock_stats_t st;
  dlock_client_stats(f.ac, &st);
  ASSERT_EQ(st.psem.acquired, 1);
  ASSERT_EQ(st.psem.refused, 1);
  ASSERT_EQ(st.psem.released, 1);
  ASSERT_EQ(st.acquired, 0);
  ASSERT_EQ(dlock_loop_pending(f.ac), 0);
  dlock_client_close(f.ac);
  f.ac = NULL;
  ASSERT_EQ(f.t.sockets, 0);
  fix_down(&f);
}

TEST(async_psem_waiter_is_woken_by_a_release_not_the_lease) {
  fix f;
  fix_up(&f, 0, 1);
  /* Held for ten minutes: only the release can end the wait in time. */
  dlock_permit_t held;
  ASSERT_DLOCK_OK(dlock_psem_acquire(f.bs, 0, 600000, &held));
  psem_done a = {0};
  ASSERT_DLOCK_OK(
      dlock_psem_acquire_async(f.as, DLOCK_WAIT_FOREVER, 60000, psem_cb, &a));
  until_numsub(&f.t, f.s, 1);
  tl_run_for(&f.t, 200);
  ASSERT_EQ(a.calls, 0);
  ASSERT_DLOCK_OK(dlock_psem_release(f.bs, held.id));
  tl_run_until(&f.t, &a.calls, 30000);
  ASSERT_EQ(a.calls, 1);
  ASSERT_DLOCK_OK(a.status);
  ASSERT_GT(a.permit.token, held.token);
  ASSERT_EQ(zcard(f.s), 1);
  /* The waiter left the channel. */
  until_numsub(&f.t, f.s, 0);
  ASSERT_DLOCK_OK(release_through_loop(&f, a.permit.id));
  ASSERT_EQ(free_permits(f.bs), 1);
  fix_down(&f);
}

TEST(async_psem_wait_times_out_and_leaves_nothing) {
  fix f;
  fix_up(&f, 0, 1);
  dlock_permit_t held;
  ASSERT_DLOCK_OK(dlock_psem_acquire(f.bs, 0, 600000, &held));
  psem_done a = {0};
  ASSERT_DLOCK_OK(dlock_psem_acquire_async(f.as, 300, 60000, psem_cb, &a));
  tl_run_until(&f.t, &a.calls, 30000);
  ASSERT_EQ(a.calls, 1);
  ASSERT_EQ(a.status, DLOCK_ETIMEDOUT);
  ASSERT_NOT_NULL(strstr(dlock_last_error(), "no permit acquired"));
  /* Only the holder's permit is taken, and the waiter left the channel. */
  ASSERT_EQ(zcard(f.s), 1);
  until_numsub(&f.t, f.s, 0);
  /* A single callback: nothing else comes. */
  tl_run_for(&f.t, 300);
  ASSERT_EQ(a.calls, 1);
  ASSERT_DLOCK_OK(dlock_psem_release(f.bs, held.id));
  fix_down(&f);
}

TEST(async_psem_watchdog_renews_from_the_loop) {
  fix f;
  /* Leases of 3 s renewed every second: a permit not renewed would be
   * taken back well before the 9 s the loop turns for. */
  fix_up(&f, 3000, 1);
  psem_done a = {0};
  ASSERT_DLOCK_OK(
      dlock_psem_acquire_async(f.as, 0, DLOCK_WATCHDOG, psem_cb, &a));
  tl_run_until(&f.t, &a.calls, 20000);
  ASSERT_DLOCK_OK(a.status);
  tl_run_for(&f.t, 9000);
  /* Still taken: the count gives back only permits whose lease ended. */
  ASSERT_EQ(free_permits(f.bs), 0);
  ASSERT_EQ(zcard(f.s), 1);
  ASSERT_DLOCK_OK(release_through_loop(&f, a.permit.id));
  ASSERT_EQ(free_permits(f.bs), 1);
  fix_down(&f);
}

TEST(async_psem_close_cancels_pending_once_and_gives_back) {
  fix f;
  fix_up(&f, 0, 2);
  dlock_permit_t held;
  ASSERT_DLOCK_OK(dlock_psem_acquire(f.bs, 0, 600000, &held));
  /* One permit free: an acquisition sent and never let answer (the loop
   * does not turn), and a second that would wait. The close gives back
   * the first's permit and ends both with DLOCK_ECANCELED. */
  psem_done first = {0}, waiter = {0};
  ASSERT_DLOCK_OK(
      dlock_psem_acquire_async(f.as, 60000, 60000, psem_cb, &first));
  ASSERT_DLOCK_OK(
      dlock_psem_acquire_async(f.as, 60000, 60000, psem_cb, &waiter));
  ASSERT_EQ(dlock_loop_pending(f.ac), 2);
  dlock_client_close(f.ac);
  f.ac = NULL;
  ASSERT_EQ(first.calls, 1);
  ASSERT_EQ(first.status, DLOCK_ECANCELED);
  ASSERT_EQ(waiter.calls, 1);
  ASSERT_EQ(waiter.status, DLOCK_ECANCELED);
  /* Only the blocking client's permit is taken. */
  ASSERT_EQ(zcard(f.s), 1);
  ASSERT_EQ(free_permits(f.bs), 1);

  /* A waiter after the loop turned: in the channel when the close comes. */
  tl_loop t2;
  dlock_client_t *ac2 = async_client(f.s, &t2, 0);
  dlock_psem_t *as2 = NULL;
  ASSERT_DLOCK_OK(dlock_psem_get(ac2, NAME, &as2));
  dlock_permit_t second;
  ASSERT_DLOCK_OK(dlock_psem_acquire(f.bs, 0, 600000, &second));
  psem_done w2 = {0};
  ASSERT_DLOCK_OK(dlock_psem_acquire_async(as2, 60000, 60000, psem_cb, &w2));
  until_numsub(&t2, f.s, 1);
  dlock_client_close(ac2);
  ASSERT_EQ(w2.calls, 1);
  ASSERT_EQ(w2.status, DLOCK_ECANCELED);
  ASSERT_EQ(zcard(f.s), 2);
  /* The handle can still be freed after the close. */
  dlock_psem_free(as2);
  tl_close(&t2);
  ASSERT_DLOCK_OK(dlock_psem_release(f.bs, held.id));
  ASSERT_DLOCK_OK(dlock_psem_release(f.bs, second.id));
  ASSERT_EQ(free_permits(f.bs), 2);
  fix_down(&f);
}
