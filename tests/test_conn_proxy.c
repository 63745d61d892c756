/*
 * A holder behind a network that turns slow: a real redis-server behind
 * the harness's TCP proxy (harness/tcp_proxy.h), which switches to passing
 * requests at one byte every 30 ms and replies at one every 250 ms, and
 * hangs up on the open connections, so that the client must reconnect
 * through it. No gap in such a handshake is long enough for a read timeout
 * to expire, while the whole of it (SELECT, PING) takes 4 s. The holder must
 * learn within its lease that it can no longer renew, and its other calls must
 * keep to their own time rather than wait for the watchdog's reconnect.
 */
#include "harness/tcp_proxy.h"
#include "lock_util.h"

typedef struct setup {
  rp_server_t *s;
  tp_proxy_t *px;
  char url[128];
} setup;

/* A server and a proxy in front of it; clients use database 1, so that
 * their handshake is SELECT and PING. */
static void setup_start(setup *st) {
  st->s = lu_server(0);
  st->px = tp_start(rp_port(st->s));
  snprintf(st->url, sizeof(st->url), "redis://127.0.0.1:%d/1", tp_port(st->px));
}

static void slow_link(setup *st) {
  tp_trickle_each(st->px, 30, 250);
  tp_close_all(st->px);
}

static void setup_free(setup *st) {
  tp_free(st->px);
  rp_free(st->s);
}

/*
 * The watchdog renews a 1.5 s lease every 0.5 s. Then the link slows down
 * and drops: no renewal reaches Redis in time (a renewal is 150 bytes:
 * 4.5 s), which lets the lock expire, and the watchdog's reconnect
 * handshake would take 4 s. on_lost must fire by
 * the end of the lease (here: within 1.5 s of the switch, plus slack for a
 * loaded machine), not once the handshake is through; and the lock must
 * then really be free for others.
 */
TEST(proxy_on_lost_fires_within_lease_when_link_trickles) {
  setup st;
  setup_start(&st);
  lu_lost_t rec;
  lu_lost_init(&rec);
  dlock_options_t o;
  dlock_options_init(&o);
  o.url = st.url;
  o.connect_timeout_ms = 1000;
  o.command_timeout_ms = 1000;
  o.watchdog_timeout_ms = 1500;
  o.on_lost = lu_lost_cb;
  o.on_lost_data = &rec;
  dlock_client_t *c = lu_client_opts(&o);
  dlock_t *l = lu_get(c, "proxy:lost");
  ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));
  lu_sleep_ms(700); /* at least one renewal went through */
  ASSERT_EQ(lu_lost_count(&rec), 0);

  int64_t t_switch = lu_now_ms();
  slow_link(&st);
  int n = lu_lost_wait(&rec, 10000);
  int64_t after = rec.at_ms - t_switch;
  printf("on_lost fired %" PRId64 " ms after the link began to trickle "
         "(lease 1500 ms)\n",
         after);
  ASSERT_EQ(n, 1);
  ASSERT_LT(after, 2500);

  /* It was lost indeed: another client, straight to Redis, gets it. */
  dlock_options_t o2;
  lu_options(&o2, st.s);
  char direct[128];
  snprintf(direct, sizeof(direct), "redis://127.0.0.1:%d/1", rp_port(st.s));
  o2.url = direct;
  dlock_client_t *c2 = lu_client_opts(&o2);
  dlock_t *l2 = lu_get(c2, "proxy:lost");
  ASSERT_DLOCK_OK(dlock_trylock(l2, 5000, 10000));
  tp_trickle(st.px, 0);
  ASSERT_DLOCK_ERR(dlock_unlock(l), DLOCK_ELOST);
  ASSERT_DLOCK_OK(dlock_unlock(l2));
  dlock_free(l2);
  dlock_client_close(c2);
  dlock_free(l);
  dlock_client_close(c);
  setup_free(&st);
}

typedef struct query_arg {
  dlock_t *l;
  int rc;
  int64_t took_ms;
  char err[256];
} query_arg;

static void *is_locked_main(void *arg) {
  query_arg *q = arg;
  int64_t t0 = lu_now_ms();
  q->rc = dlock_is_locked(q->l);
  q->took_ms = lu_now_ms() - t0;
  snprintf(q->err, sizeof(q->err), "%s", q->rc < 0 ? dlock_last_error() : "");
  return NULL;
}

/*
 * While one thread reconnects through the trickling link (a handshake of
 * seconds), the holder asks dlock_is_held: its call must end within its
 * own command timeout (1 s), with an answer or an error, instead of
 * waiting for the other thread's handshake.
 */
TEST(proxy_is_held_not_held_behind_a_reconnect) {
  setup st;
  setup_start(&st);
  dlock_options_t o;
  dlock_options_init(&o);
  o.url = st.url;
  o.connect_timeout_ms = 1000;
  o.command_timeout_ms = 1000;
  o.watchdog_timeout_ms = 30000; /* no renewal during the test */
  dlock_client_t *c = lu_client_opts(&o);
  dlock_t *l = lu_get(c, "proxy:held");
  ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));

  slow_link(&st);
  /* The first call may find the connection gone only by reading from it,
   * and fail at once; the next one reconnects. */
  (void)dlock_is_locked(l);
  query_arg q = {.l = l};
  pthread_t th;
  ASSERT_EQ(pthread_create(&th, NULL, is_locked_main, &q), 0);
  /* The other thread reconnects at once; its handshake takes seconds. */
  lu_sleep_ms(300);
  int64_t t0 = lu_now_ms();
  int rc = dlock_is_held(l);
  int64_t took = lu_now_ms() - t0;
  printf("dlock_is_held during another call's reconnect: %d after %" PRId64
         " ms (%s)\n",
         rc, took, rc < 0 ? dlock_last_error() : "");
  ASSERT_LT(took, 2000);
  pthread_join(th, NULL);
  printf("dlock_is_locked that reconnected: %d after %" PRId64 " ms (%s)\n",
         q.rc, q.took_ms, q.err);
  tp_trickle(st.px, 0);
  dlock_free(l);
  dlock_client_close(c);
  setup_free(&st);
}
