/*
 * The pub/sub layer (src/sub/pubsub.c) against the scripted fake server
 * (harness/fake_server.h): subscription confirmations that come late, one
 * byte at a time or never, messages in pieces, a server that hangs up in
 * the middle of a reply or stays away, replies in the wrong state and
 * bytes nobody asked for, and shutdown while joins are stuck in each of
 * these. The layer is driven through its internal calls (join, wait,
 * leave, cancel, stop), as the lock code drives it, and judged by what a
 * waiter sees: whether and when its join returns, whether it is woken (and
 * only by its own channel), and what the server was asked (the fake server
 * records every SUBSCRIBE). Deadlines are generous and no assertion needs
 * an event to happen quickly, only in order or eventually, so that the
 * tests hold under valgrind and the sanitizers.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "harness/fake_server.h"
#include "lock_util.h"
#include "monotime.h"
#include "pubsub.h"
#include "url.h"

/* ---- a pub/sub connection to the fake server ---------------------------- */

typedef struct tps {
  dlock__endpoint ep; /* must outlive 'ps' */
  dlock__pubsub *ps;
} tps;

/* Starts the pub/sub layer on 'url'; returns what dlock__pubsub_start did
 * (t->ps is set only on 0). */
static int tps_start(tps *t, const char *url, int64_t connect_ms,
                     int64_t command_ms, int lazy) {
  memset(t, 0, sizeof(*t));
  ASSERT_DLOCK_OK(dlock__url_parse(url, &t->ep));
  int rc = dlock__pubsub_start(&t->ep, NULL, NULL, NULL, connect_ms, command_ms,
                               lazy, INT64_MAX, &t->ps);
  if (rc != 0)
    t->ps = NULL;
  return rc;
}

static void tps_open(tps *t, const char *url) {
  ASSERT_DLOCK_OK(tps_start(t, url, 5000, 5000, 0));
}

/* Stops the layer; returns how long the stop took, in ms. */
static int64_t tps_close(tps *t) {
  int64_t t0 = lu_now_ms();
  dlock__pubsub_stop(t->ps);
  int64_t took = lu_now_ms() - t0;
  dlock__endpoint_free(&t->ep);
  return took;
}

static int state_of(tps *t, const char *channel) {
  return dlock__pubsub_state(t->ps, channel, strlen(channel), NULL);
}

/* Waits up to 'ms' for 'channel' to reach 'state'; 1 when it did. */
static int wait_state(tps *t, const char *channel, int state, int64_t ms) {
  int64_t until = lu_now_ms() + ms;
  while (state_of(t, channel) != state) {
    if (lu_now_ms() >= until)
      return 0;
    lu_sleep_ms(2);
  }
  return 1;
}

/* Waits up to 'ms' until the server has accepted 'n' connections. */
static int wait_accepted(fs_server_t *fs, int n, int64_t ms) {
  int64_t until = lu_now_ms() + ms;
  while (fs_accepted(fs) < n) {
    if (lu_now_ms() >= until)
      return 0;
    lu_sleep_ms(2);
  }
  return 1;
}

/* Whether a SUBSCRIBE received at index 'from' or later names 'channel'. */
static int subscribed_since(fs_server_t *fs, int from, const char *channel) {
  size_t n = strlen(channel);
  for (int i = from;; i++) {
    const char *c = fs_command(fs, i);
    if (c == NULL)
      return 0;
    if (strncmp(c, "SUBSCRIBE ", 10) != 0)
      continue;
    for (const char *p = c + 9; (p = strstr(p, channel)) != NULL; p += n)
      if (p[-1] == ' ' && (p[n] == ' ' || p[n] == '\0'))
        return 1;
  }
}

/* Waits up to 'ms' until subscribed_since(fs, from, channel). */
static int wait_subscribed_since(fs_server_t *fs, int from, const char *channel,
                                 int64_t ms) {
  int64_t until = lu_now_ms() + ms;
  while (!subscribed_since(fs, from, channel)) {
    if (lu_now_ms() >= until)
      return 0;
    lu_sleep_ms(2);
  }
  return 1;
}

/* ---- RESP2 pub/sub frames, as Redis sends them --------------------------- */

static const char *frame_message(char *buf, size_t n, const char *channel,
                                 const char *payload) {
  snprintf(buf, n, "*3\r\n$7\r\nmessage\r\n$%zu\r\n%s\r\n$%zu\r\n%s\r\n",
           strlen(channel), channel, strlen(payload), payload);
  return buf;
}

/* A "subscribe" or "unsubscribe" confirmation. */
static const char *frame_confirm(char *buf, size_t n, const char *kind,
                                 const char *channel) {
  snprintf(buf, n, "*3\r\n$%zu\r\n%s\r\n$%zu\r\n%s\r\n:1\r\n", strlen(kind),
           kind, strlen(channel), channel);
  return buf;
}

/* Publishes "0" on 'channel' to every connection of the fake server. */
static void publish(fs_server_t *fs, const char *channel) {
  char m[256];
  fs_send_all(fs, frame_message(m, sizeof(m), channel, "0"));
}

/* ---- a waiter in a thread of its own ------------------------------------ */

/* Joins 'channel' (within 'join_ms'), sleeps until woken or 'wait_ms', and
 * leaves, recording what each step returned and how long it took. */
typedef struct waiter_run {
  dlock__pubsub *ps;
  const char *channel;
  int64_t join_ms;
  int64_t wait_ms;
  dlock__waiter w;
  pthread_t th;
  atomic_int joined; /* the join returned */
  atomic_int done;   /* the wait returned (or the join failed) */
  int join_rc, wait_rc;
  int64_t join_took_ms, wait_took_ms;
  char err[256];
} waiter_run;

static void *waiter_main(void *arg) {
  waiter_run *r = arg;
  memset(&r->w, 0, sizeof(r->w));
  int64_t t0 = lu_now_ms();
  r->join_rc = dlock__pubsub_join(r->ps, r->channel, strlen(r->channel),
                                  dlock__now_us() + r->join_ms * 1000, &r->w);
  r->join_took_ms = lu_now_ms() - t0;
  if (r->join_rc != 0)
    snprintf(r->err, sizeof(r->err), "%s", dlock_last_error());
  atomic_store(&r->joined, 1);
  if (r->join_rc == 0) {
    t0 = lu_now_ms();
    r->wait_rc =
        dlock__pubsub_wait(r->ps, &r->w, dlock__now_us() + r->wait_ms * 1000);
    r->wait_took_ms = lu_now_ms() - t0;
    if (r->wait_rc < 0)
      snprintf(r->err, sizeof(r->err), "%s", dlock_last_error());
    dlock__pubsub_leave(r->ps, &r->w);
  }
  atomic_store(&r->done, 1);
  return NULL;
}

static void waiter_start(waiter_run *r, tps *t, const char *channel,
                         int64_t join_ms, int64_t wait_ms) {
  memset(r, 0, sizeof(*r));
  r->ps = t->ps;
  r->channel = channel;
  r->join_ms = join_ms;
  r->wait_ms = wait_ms;
  ASSERT_EQ(pthread_create(&r->th, NULL, waiter_main, r), 0);
}

/* Starts a waiter and waits until its join has returned 0 with the
 * channel subscribed. */
static void waiter_start_joined(waiter_run *r, tps *t, const char *channel,
                                int64_t wait_ms) {
  waiter_start(r, t, channel, 20000, wait_ms);
  while (!atomic_load(&r->joined))
    lu_sleep_ms(1);
  ASSERT_DLOCK_OK(r->join_rc);
  ASSERT_EQ(state_of(t, channel), DLOCK__SUB_ACTIVE);
}

static int is_joined(waiter_run *r) { return atomic_load(&r->joined); }
static int is_done(waiter_run *r) { return atomic_load(&r->done); }

/* Waits up to 'ms' for the waiter's wait to return; 1 when it did. */
static int waiter_done_within(waiter_run *r, int64_t ms) {
  int64_t until = lu_now_ms() + ms;
  while (!atomic_load(&r->done)) {
    if (lu_now_ms() >= until)
      return 0;
    lu_sleep_ms(2);
  }
  return 1;
}

static void waiter_join(waiter_run *r, const char *who) {
  pthread_join(r->th, NULL);
  printf("%s on %s: join %s after %" PRId64 " ms, wait %d after %" PRId64
         " ms %s\n",
         who, r->channel, r->join_rc ? dlock_err_name(r->join_rc) : "0",
         r->join_took_ms, r->wait_rc, r->wait_took_ms, r->err);
}

/* ---- confirmations late, in pieces, or never ---------------------------- */

/*
 * A join waits for Redis to confirm the subscription, however late it
 * comes within the join's deadline: a waiter that returned before the
 * confirmation would miss an unlock published meanwhile.
 */
TEST(pubsub_join_waits_for_a_delayed_confirmation) {
  fs_server_t *fs = fs_start();
  tps t;
  tps_open(&t, fs_url(fs));
  fs_set(fs, "SUBSCRIBE", &(fs_action_t){.delay_ms = 700, .times = 1});
  waiter_run a;
  waiter_start(&a, &t, "pf:delayed", 20000, 30000);
  while (!is_joined(&a))
    lu_sleep_ms(1);
  printf("join returned after %" PRId64 " ms\n", a.join_took_ms);
  ASSERT_DLOCK_OK(a.join_rc);
  ASSERT_GE(a.join_took_ms, 600);
  ASSERT_EQ(state_of(&t, "pf:delayed"), DLOCK__SUB_ACTIVE);
  ASSERT_EQ(fs_count(fs, "SUBSCRIBE"), 1);
  /* Subscribed: an unlock message wakes it. */
  publish(fs, "pf:delayed");
  waiter_join(&a, "a");
  ASSERT_EQ(a.wait_rc, 1);
  ASSERT_LT(a.wait_took_ms, 20000);
  tps_close(&t);
  fs_free(fs);
}

/*
 * A server that reads SUBSCRIBE and never confirms it: the join returns at
 * its own deadline (0, as documented: the waiter then sleeps by the lock's
 * TTL), and the confirmation that finally comes wakes the waiter, since a
 * message published before it went to nobody.
 */
TEST(pubsub_join_ends_at_its_deadline_without_confirmation) {
  fs_server_t *fs = fs_start();
  tps t;
  tps_open(&t, fs_url(fs));
  fs_set(fs, "SUBSCRIBE", &(fs_action_t){.how = FS_SILENT, .times = 1});
  waiter_run a;
  waiter_start(&a, &t, "pf:silent", 1000, 30000);
  while (!is_joined(&a))
    lu_sleep_ms(1);
  printf("join returned after %" PRId64 " ms\n", a.join_took_ms);
  ASSERT_DLOCK_OK(a.join_rc);
  ASSERT_GE(a.join_took_ms, 900);
  ASSERT_LT(a.join_took_ms, 10000);
  ASSERT_NE(state_of(&t, "pf:silent"), DLOCK__SUB_ACTIVE);
  ASSERT(fs_wait_count(fs, "SUBSCRIBE", 1, 10000));
  /* Asleep, with no reason to wake. */
  lu_sleep_ms(200);
  ASSERT_EQ(is_done(&a), 0);
  /* The confirmation, at last. */
  char m[256];
  fs_send_all(fs, frame_confirm(m, sizeof(m), "subscribe", "pf:silent"));
  waiter_join(&a, "a");
  ASSERT_EQ(a.wait_rc, 1);
  ASSERT_LT(a.wait_took_ms, 20000);
  ASSERT_EQ(state_of(&t, "pf:silent"), DLOCK__SUB_ACTIVE);
  tps_close(&t);
  fs_free(fs);
}

/*
 * A confirmation sent one byte every 20 ms, read by a waiter of another
 * channel that reads the connection for everybody: the join returns only
 * once the whole confirmation is in, and the reading waiter is not woken
 * by it.
 */
TEST(pubsub_join_through_a_trickled_confirmation) {
  fs_server_t *fs = fs_start();
  tps t;
  tps_open(&t, fs_url(fs));
  waiter_run a, b;
  waiter_start_joined(&a, &t, "pf:reader", 30000);
  lu_sleep_ms(50); /* asleep, reading the connection */

  fs_set(fs, "SUBSCRIBE",
         &(fs_action_t){.how = FS_TRICKLE, .every_ms = 20, .times = 1});
  waiter_start(&b, &t, "pf:trickled", 30000, 30000);
  while (!is_joined(&b))
    lu_sleep_ms(1);
  char m[256];
  size_t bytes =
      strlen(frame_confirm(m, sizeof(m), "subscribe", "pf:trickled"));
  printf("join through %zu trickled bytes returned after %" PRId64 " ms\n",
         bytes, b.join_took_ms);
  ASSERT_DLOCK_OK(b.join_rc);
  /* The last byte cannot leave before (bytes - 1) * 20 ms. */
  ASSERT_GE(b.join_took_ms, (int64_t)(bytes - 1) * 20 - 50);
  ASSERT_EQ(state_of(&t, "pf:trickled"), DLOCK__SUB_ACTIVE);
  ASSERT_EQ(is_done(&a), 0);
  ASSERT_EQ(is_done(&b), 0);

  /* Each message wakes its own waiter. */
  publish(fs, "pf:trickled");
  ASSERT(waiter_done_within(&b, 20000));
  lu_sleep_ms(100);
  ASSERT_EQ(is_done(&a), 0);
  publish(fs, "pf:reader");
  waiter_join(&a, "a");
  waiter_join(&b, "b");
  ASSERT_EQ(a.wait_rc, 1);
  ASSERT_EQ(b.wait_rc, 1);
  ASSERT_EQ(fs_accepted(fs), 1);
  tps_close(&t);
  fs_free(fs);
}

/*
 * A message that arrives in four pieces, 100 ms apart, wakes its waiter
 * once it is whole, and only that waiter.
 */
TEST(pubsub_message_in_pieces_wakes_only_its_waiter) {
  fs_server_t *fs = fs_start();
  tps t;
  tps_open(&t, fs_url(fs));
  waiter_run a, b;
  waiter_start_joined(&a, &t, "pf:pieces:a", 30000);
  waiter_start_joined(&b, &t, "pf:pieces:b", 30000);
  lu_sleep_ms(50);

  char m[256];
  frame_message(m, sizeof(m), "pf:pieces:a", "0");
  size_t len = strlen(m), cut[5] = {0, 5, 13, len - 7, len};
  for (int i = 0; i < 4; i++) {
    char piece[256];
    memcpy(piece, m + cut[i], cut[i + 1] - cut[i]);
    piece[cut[i + 1] - cut[i]] = '\0';
    fs_send_all(fs, piece);
    if (i < 3) {
      lu_sleep_ms(100);
      ASSERT_EQ(is_done(&a), 0);
    }
  }
  ASSERT(waiter_done_within(&a, 20000));
  lu_sleep_ms(200);
  ASSERT_EQ(is_done(&b), 0);
  publish(fs, "pf:pieces:b");
  waiter_join(&a, "a");
  waiter_join(&b, "b");
  ASSERT_EQ(a.wait_rc, 1);
  ASSERT_EQ(b.wait_rc, 1);
  ASSERT_EQ(fs_accepted(fs), 1);
  tps_close(&t);
  fs_free(fs);
}

/* ---- a connection that breaks ------------------------------------------- */

/*
 * The server hangs up in the middle of the SUBSCRIBE confirmation: the
 * layer connects again, subscribes again, and wakes the waiter once the
 * new subscription is confirmed (what was published meanwhile is lost).
 */
TEST(pubsub_close_mid_confirmation_resubscribes) {
  fs_server_t *fs = fs_start();
  tps t;
  tps_open(&t, fs_url(fs));
  fs_set(fs, "SUBSCRIBE", &(fs_action_t){.how = FS_CLOSE_MID, .times = 1});
  waiter_run a;
  waiter_start(&a, &t, "pf:mid", 20000, 30000);
  waiter_join(&a, "a");
  ASSERT_DLOCK_OK(a.join_rc);
  ASSERT_EQ(a.wait_rc, 1);
  ASSERT_LT(a.wait_took_ms, 20000);
  ASSERT_EQ(fs_count(fs, "SUBSCRIBE"), 2);
  ASSERT(subscribed_since(fs, 0, "pf:mid"));
  ASSERT_EQ(fs_accepted(fs), 2);
  ASSERT_EQ(state_of(&t, "pf:mid"), DLOCK__SUB_ACTIVE);
  tps_close(&t);
  fs_free(fs);
}

/*
 * Two waiters sleep on two channels; the server hangs up with a message
 * for one of them half sent, then fails the next two handshakes. Every
 * channel is subscribed again on the new connection, and both waiters are
 * woken there, long before their deadlines: a message lost in the outage
 * cannot leave them asleep.
 */
TEST(pubsub_outage_resubscribes_and_wakes_every_waiter) {
  fs_server_t *fs = fs_start();
  tps t;
  tps_open(&t, fs_url(fs));
  waiter_run a, b;
  waiter_start_joined(&a, &t, "pf:out:a", 30000);
  waiter_start_joined(&b, &t, "pf:out:b", 30000);
  lu_sleep_ms(50);

  int from = fs_count(fs, NULL);
  fs_set(fs, "PING", &(fs_action_t){.how = FS_CLOSE, .times = 2});
  char m[256];
  frame_message(m, sizeof(m), "pf:out:a", "0");
  m[strlen(m) / 2] = '\0';
  fs_send_all(fs, m);
  lu_sleep_ms(50);
  fs_close_all(fs);

  ASSERT(wait_accepted(fs, 4, 20000));
  ASSERT(wait_subscribed_since(fs, from, "pf:out:a", 20000));
  ASSERT(wait_subscribed_since(fs, from, "pf:out:b", 20000));
  waiter_join(&a, "a");
  waiter_join(&b, "b");
  ASSERT_EQ(a.wait_rc, 1);
  ASSERT_EQ(b.wait_rc, 1);
  ASSERT_LT(a.wait_took_ms, 25000);
  ASSERT_LT(b.wait_took_ms, 25000);
  ASSERT_EQ(fs_accepted(fs), 4);
  printf("handshakes: %d PING, %d SUBSCRIBE\n", fs_count(fs, "PING"),
         fs_count(fs, "SUBSCRIBE"));
  ASSERT_EQ(state_of(&t, "pf:out:a"), DLOCK__SUB_ACTIVE);
  ASSERT_EQ(state_of(&t, "pf:out:b"), DLOCK__SUB_ACTIVE);
  tps_close(&t);
  fs_free(fs);
}

/*
 * While the server stays away (its handshakes never answered), a waiter
 * sleeps until its own deadline and no later; once the server answers
 * again, a new waiter is subscribed and woken as usual.
 */
TEST(pubsub_waiter_ends_at_its_deadline_while_server_stays_away) {
  fs_server_t *fs = fs_start();
  tps t;
  ASSERT_DLOCK_OK(tps_start(&t, fs_url(fs), 1000, 1000, 0));
  waiter_run a;
  waiter_start(&a, &t, "pf:away", 20000, 1500);
  while (!is_joined(&a))
    lu_sleep_ms(1);
  ASSERT_DLOCK_OK(a.join_rc);
  fs_set(fs, "PING", &(fs_action_t){.how = FS_SILENT});
  fs_close_all(fs);
  waiter_join(&a, "a");
  ASSERT_EQ(a.wait_rc, 0);
  ASSERT_GE(a.wait_took_ms, 1400);
  ASSERT_LT(a.wait_took_ms, 15000);
  ASSERT_EQ(fs_count(fs, "SUBSCRIBE"), 1);

  fs_clear(fs);
  waiter_run b;
  waiter_start(&b, &t, "pf:away", 20000, 30000);
  ASSERT(wait_state(&t, "pf:away", DLOCK__SUB_ACTIVE, 20000));
  while (!is_joined(&b))
    lu_sleep_ms(1);
  publish(fs, "pf:away");
  waiter_join(&b, "b");
  ASSERT_DLOCK_OK(b.join_rc);
  ASSERT_EQ(b.wait_rc, 1);
  tps_close(&t);
  fs_free(fs);
}

/* ---- replies in the wrong state ----------------------------------------- */

/*
 * A message for a channel this client has no record of changes nothing:
 * it wakes nobody (and is no reason to drop a working connection), and
 * the next message for a waited channel is delivered as usual.
 */
TEST(pubsub_message_for_unknown_channel_wakes_nobody) {
  fs_server_t *fs = fs_start();
  tps t;
  tps_open(&t, fs_url(fs));
  waiter_run a, s;
  waiter_start_joined(&a, &t, "pf:known", 30000);
  waiter_start_joined(&s, &t, "pf:sentinel", 30000);
  lu_sleep_ms(50);
  publish(fs, "pf:nobody");
  /* Replies are handled in order: once the sentinel is woken, the stray
   * message was handled before it. */
  publish(fs, "pf:sentinel");
  ASSERT(waiter_done_within(&s, 20000));
  lu_sleep_ms(200);
  ASSERT_EQ(is_done(&a), 0);
  ASSERT_EQ(fs_accepted(fs), 1);
  publish(fs, "pf:known");
  waiter_join(&a, "a");
  waiter_join(&s, "sentinel");
  ASSERT_EQ(a.wait_rc, 1);
  ASSERT_EQ(s.wait_rc, 1);
  tps_close(&t);
  fs_free(fs);
}

/*
 * Replies that cannot answer anything the layer sent on a subscribed
 * connection (an integer, a bulk string, a status, a nil, an array that
 * is no pub/sub frame): the stream is out of step, so the connection is
 * dropped and every subscription made again, and the waiter is woken to
 * try again once it is (a message may have been lost in the confusion).
 */
TEST(pubsub_stray_replies_drop_and_resubscribe) {
  static const char *const strays[] = {":1\r\n", "$8\r\nSURPRISE\r\n",
                                       "+OK\r\n", "$-1\r\n",
                                       "*2\r\n$4\r\npong\r\n$0\r\n\r\n"};
  fs_server_t *fs = fs_start();
  tps t;
  tps_open(&t, fs_url(fs));
  for (size_t i = 0; i < sizeof(strays) / sizeof(strays[0]); i++) {
    waiter_run a;
    waiter_start_joined(&a, &t, "pf:stray", 30000);
    lu_sleep_ms(50);
    int accepted = fs_accepted(fs), from = fs_count(fs, NULL);
    fs_send_all(fs, strays[i]);
    int dropped = wait_accepted(fs, accepted + 1, 20000);
    printf("stray reply %zu: %s\n", i, dropped ? "dropped" : "kept");
    ASSERT(dropped);
    ASSERT(wait_subscribed_since(fs, from, "pf:stray", 20000));
    waiter_join(&a, "a");
    ASSERT_EQ(a.wait_rc, 1);
    ASSERT_LT(a.wait_took_ms, 25000);
    ASSERT(wait_state(&t, "pf:stray", DLOCK__SUB_ACTIVE, 20000));
  }
  tps_close(&t);
  fs_free(fs);
}

/*
 * Confirmations for commands the layer never sent: an "unsubscribe" for a
 * channel a waiter still needs (the server says it is no longer
 * subscribed), and a second "subscribe" for an active one. Either way the
 * layer's idea of its subscriptions is wrong: it drops the connection,
 * subscribes again and wakes the waiters, and the channel works as before.
 */
TEST(pubsub_wrong_state_confirmations_drop_and_resubscribe) {
  static const char *const kinds[] = {"unsubscribe", "subscribe"};
  fs_server_t *fs = fs_start();
  tps t;
  tps_open(&t, fs_url(fs));
  for (int i = 0; i < 2; i++) {
    waiter_run a;
    waiter_start_joined(&a, &t, "pf:wrong", 30000);
    lu_sleep_ms(50);
    int accepted = fs_accepted(fs), from = fs_count(fs, NULL);
    char m[256];
    fs_send_all(fs, frame_confirm(m, sizeof(m), kinds[i], "pf:wrong"));
    ASSERT(wait_accepted(fs, accepted + 1, 20000));
    ASSERT(wait_subscribed_since(fs, from, "pf:wrong", 20000));
    waiter_join(&a, kinds[i]);
    ASSERT_EQ(a.wait_rc, 1);
    ASSERT_LT(a.wait_took_ms, 25000);
    ASSERT(wait_state(&t, "pf:wrong", DLOCK__SUB_ACTIVE, 20000));
    /* And it works: a message wakes the next waiter. */
    waiter_start_joined(&a, &t, "pf:wrong", 30000);
    publish(fs, "pf:wrong");
    waiter_join(&a, "next");
    ASSERT_EQ(a.wait_rc, 1);
  }
  tps_close(&t);
  fs_free(fs);
}

/*
 * A server that answers every SUBSCRIBE with a reply that makes the layer
 * drop the connection (here an "unsubscribe" for the channel) must not be
 * reconnected to in a tight loop: connections that break as soon as they
 * are made back off like failed connects. Once the server behaves, the
 * channel is subscribed within the backoff's bound.
 */
TEST(pubsub_misbehaving_server_not_reconnected_in_a_loop) {
  fs_server_t *fs = fs_start();
  tps t;
  tps_open(&t, fs_url(fs));
  char m[256];
  fs_set(fs, "SUBSCRIBE",
         &(fs_action_t){
             .reply = frame_confirm(m, sizeof(m), "unsubscribe", "pf:loop")});
  waiter_run a;
  waiter_start(&a, &t, "pf:loop", 2000, 2000);
  lu_sleep_ms(2000);
  int accepted = fs_accepted(fs);
  waiter_join(&a, "a");
  printf("connections in 2 s against a server that answers SUBSCRIBE "
         "wrongly: %d (%d SUBSCRIBE)\n",
         accepted, fs_count(fs, "SUBSCRIBE"));
  ASSERT_GE(accepted, 2);
  ASSERT_LE(accepted, 20);
  /* Never confirmed: the waiter slept to its deadline. */
  ASSERT_DLOCK_OK(a.join_rc);
  ASSERT_EQ(a.wait_rc, 0);

  fs_clear(fs);
  waiter_start(&a, &t, "pf:loop", 20000, 30000);
  ASSERT(wait_state(&t, "pf:loop", DLOCK__SUB_ACTIVE, 20000));
  while (!is_joined(&a))
    lu_sleep_ms(1);
  publish(fs, "pf:loop");
  waiter_join(&a, "after");
  ASSERT_EQ(a.wait_rc, 1);
  tps_close(&t);
  fs_free(fs);
}

/* ---- a server that accepts and never answers ----------------------------- */

/*
 * At start the handshake is never answered: a strict start fails within
 * its timeouts; a lazy one starts, its joins return without waiting (there
 * is no connection to subscribe on) and its waiters sleep to their
 * deadlines. Once the server answers, the thread connects, subscribes the
 * channel and wakes the waiter.
 */
TEST(pubsub_silent_server_at_connect) {
  fs_server_t *fs = fs_start();
  fs_set(fs, NULL, &(fs_action_t){.how = FS_SILENT});
  tps t;
  int64_t t0 = lu_now_ms();
  ASSERT_DLOCK_ERR(tps_start(&t, fs_url(fs), 500, 500, 0), DLOCK_EIO);
  int64_t took = lu_now_ms() - t0;
  printf("strict start against a silent server: %" PRId64 " ms (%s)\n", took,
         dlock_last_error());
  ASSERT_LT(took, 10000);
  dlock__endpoint_free(&t.ep);

  t0 = lu_now_ms();
  ASSERT_DLOCK_OK(tps_start(&t, fs_url(fs), 500, 500, 1));
  ASSERT_LT(lu_now_ms() - t0, 10000);
  waiter_run a;
  waiter_start(&a, &t, "pf:lazy", 8000, 1000);
  waiter_join(&a, "a");
  ASSERT_DLOCK_OK(a.join_rc);
  ASSERT_LT(a.join_took_ms, 6000);
  ASSERT_EQ(a.wait_rc, 0);
  ASSERT_GE(a.wait_took_ms, 900);
  ASSERT_LT(a.wait_took_ms, 10000);
  ASSERT_EQ(fs_count(fs, "SUBSCRIBE"), 0);

  waiter_start(&a, &t, "pf:lazy", 8000, 30000);
  while (!is_joined(&a))
    lu_sleep_ms(1);
  fs_clear(fs);
  waiter_join(&a, "after");
  ASSERT_DLOCK_OK(a.join_rc);
  ASSERT_EQ(a.wait_rc, 1);
  ASSERT_LT(a.wait_took_ms, 20000);
  ASSERT(subscribed_since(fs, 0, "pf:lazy"));
  ASSERT_EQ(state_of(&t, "pf:lazy"), DLOCK__SUB_ACTIVE);
  tps_close(&t);
  fs_free(fs);
}

/* ---- shutdown ------------------------------------------------------------ */

/*
 * Joins stuck in every state at once (SUBSCRIBE never answered, answered
 * one byte every 500 ms, answered after 30 s) and a waiter asleep reading
 * the connection: cancellation releases them all with DLOCK_ECANCELED
 * within moments, later joins are refused, and the stop that follows
 * returns promptly too, with the trickled reply half read.
 */
TEST(pubsub_cancel_releases_joins_blocked_in_every_state) {
  fs_server_t *fs = fs_start();
  tps t;
  tps_open(&t, fs_url(fs));
  waiter_run r, s, tr, d;
  waiter_start_joined(&r, &t, "pf:c:reader", 30000);
  fs_set(fs, "SUBSCRIBE", &(fs_action_t){.how = FS_SILENT, .times = 1});
  waiter_start(&s, &t, "pf:c:silent", 60000, 30000);
  ASSERT(fs_wait_count(fs, "SUBSCRIBE", 2, 20000));
  fs_set(fs, "SUBSCRIBE",
         &(fs_action_t){.how = FS_TRICKLE, .every_ms = 500, .times = 1});
  waiter_start(&tr, &t, "pf:c:trickled", 60000, 30000);
  ASSERT(fs_wait_count(fs, "SUBSCRIBE", 3, 20000));
  fs_set(fs, "SUBSCRIBE", &(fs_action_t){.delay_ms = 30000, .times = 1});
  waiter_start(&d, &t, "pf:c:delayed", 60000, 30000);
  ASSERT(fs_wait_count(fs, "SUBSCRIBE", 4, 20000));
  lu_sleep_ms(600); /* a byte or two of the trickle is in */
  ASSERT_EQ(is_joined(&s) + is_joined(&tr) + is_joined(&d), 0);

  int64_t t0 = lu_now_ms();
  dlock__pubsub_cancel(t.ps);
  waiter_join(&r, "reader");
  waiter_join(&s, "silent");
  waiter_join(&tr, "trickled");
  waiter_join(&d, "delayed");
  int64_t took = lu_now_ms() - t0;
  printf("every waiter released %" PRId64 " ms after the cancel\n", took);
  ASSERT_LT(took, 10000);
  ASSERT_EQ(r.wait_rc, DLOCK_ECANCELED);
  ASSERT_EQ(s.join_rc, DLOCK_ECANCELED);
  ASSERT_EQ(tr.join_rc, DLOCK_ECANCELED);
  ASSERT_EQ(d.join_rc, DLOCK_ECANCELED);

  dlock__waiter w;
  memset(&w, 0, sizeof(w));
  ASSERT_DLOCK_ERR(
      dlock__pubsub_join(t.ps, "pf:c:late", 9, dlock__now_us() + 5000000, &w),
      DLOCK_ECANCELED);
  int64_t stop_ms = tps_close(&t);
  printf("stop took %" PRId64 " ms\n", stop_ms);
  ASSERT_LT(stop_ms, 10000);
  fs_free(fs);
}

/*
 * Stopping while the thread reconnects through a handshake the server
 * never answers: the stop waits for that handshake, which is bounded by
 * the connect and command timeouts (2 s + 3 s, the client's defaults), so
 * closing a client never hangs on a stalled server.
 */
TEST(pubsub_stop_during_a_silent_reconnect_is_bounded) {
  fs_server_t *fs = fs_start();
  tps t;
  ASSERT_DLOCK_OK(tps_start(&t, fs_url(fs), 2000, 3000, 0));
  waiter_run a;
  waiter_start_joined(&a, &t, "pf:stop", 1000);
  fs_set(fs, "PING", &(fs_action_t){.how = FS_SILENT});
  fs_close_all(fs);
  ASSERT(fs_wait_count(fs, "PING", 2, 20000));
  waiter_join(&a, "a");
  ASSERT_EQ(a.wait_rc, 0);
  int64_t stop_ms = tps_close(&t);
  printf("stop during the handshake took %" PRId64 " ms\n", stop_ms);
  ASSERT_LT(stop_ms, 2000 + 3000 + 5000);
  fs_free(fs);
}
