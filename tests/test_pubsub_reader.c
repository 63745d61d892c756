/*
 * Who reads the pub/sub connection while a waiter sleeps: the waiter
 * itself (see src/sub/subread.c), and not the thread at the same time.
 * With both polling the socket, the unlock message wakes both and they
 * take turns at the mutex before the waiter can try for the lock: on a
 * busy machine, a wake-up or two more on the way from an unlock in one
 * process to the acquisition in another.
 *
 * The thread is made to poll the socket with no time limit (a channel
 * whose waiter joined and has not gone to sleep yet: nothing is due); the
 * waiter then goes to sleep without anything else waking the thread, and
 * must get the thread to leave the socket to it. Event order only: every
 * wait is bounded generously, but for one that must run out.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "client.h"
#include "lock_util.h"
#include "monotime.h"
#include "pubsub.h"

typedef struct sleeper {
  dlock__pubsub *ps;
  dlock__waiter w;
  atomic_int started;
  int rc;
} sleeper;

static void *sleeper_main(void *arg) {
  sleeper *k = arg;
  atomic_store(&k->started, 1);
  k->rc = dlock__pubsub_wait(k->ps, &k->w, dlock__now_us() + 60000000);
  return NULL;
}

/* Waits up to 10 s for the thread's reading to become 'want'. */
static int thread_reads_becomes(dlock__pubsub *ps, int want) {
  int64_t until = lu_now_ms() + 10000;
  while (dlock__pubsub_thread_reads(ps) != want && lu_now_ms() < until)
    lu_sleep_ms(2);
  return dlock__pubsub_thread_reads(ps);
}

TEST(sleeping_waiter_reads_alone) {
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  const char *chan = "test:reader:channel";

  /* Joined, not asleep: the subscription is confirmed and the thread
   * polls the socket, with no linger running that would wake it. */
  sleeper k = {.ps = c->ps};
  ASSERT_DLOCK_OK(dlock__pubsub_join(c->ps, chan, strlen(chan),
                                     dlock__now_us() + 5000000, &k.w));
  ASSERT_EQ(thread_reads_becomes(c->ps, 1), 1);
  /* Time for the thread to be back in poll() after the confirmation (were
   * it not, it would see the sleeper below at its next look anyway, and
   * the test would not tell). */
  lu_sleep_ms(100);

  /* Asleep: the thread leaves the socket to the waiter. */
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, sleeper_main, &k), 0);
  while (!atomic_load(&k.started))
    lu_sleep_ms(1);
  ASSERT_EQ(thread_reads_becomes(c->ps, 0), 0);

  /* The message reaches the waiter. */
  ASSERT_EQ(lu_reply_int(rp_cmd(s, "PUBLISH %s 0", chan)), 1);
  pthread_join(t, NULL);
  ASSERT_EQ(k.rc, 1);
  dlock__pubsub_leave(c->ps, &k.w);
  dlock_client_close(c);
  rp_free(s);
}

/*
 * Nobody waits: the thread leaves the socket alone, so that an unlock the
 * process publishes itself, on a channel it still lingers on, does not
 * wake it. What arrives meanwhile is old news to the next waiter, and
 * must not wake it; a message sent after it joined does.
 */
TEST(idle_messages_do_not_wake_next_waiter) {
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  const char *chan = "test:reader:idle";

  /* The steps below must fit in the channel's linger (half a second from
   * the leave); a machine too slow for that gets another go. */
  int done = 0;
  for (int attempt = 0; attempt < 10 && !done; attempt++) {
    dlock__waiter w;
    memset(&w, 0, sizeof(w));
    ASSERT_DLOCK_OK(dlock__pubsub_join(c->ps, chan, strlen(chan),
                                       dlock__now_us() + 5000000, &w));
    dlock__pubsub_leave(c->ps, &w);
    /* Lingering, with nobody waiting: once it looks (poked here rather
     * than waiting for its next look), the thread does not read. */
    dlock__pubsub_poke(c->ps);
    ASSERT_EQ(thread_reads_becomes(c->ps, 0), 0);

    /* Messages to nobody, in the client's socket before the next join. */
    int64_t got = lu_reply_int(rp_cmd(s, "PUBLISH %s 0", chan));
    got += lu_reply_int(rp_cmd(s, "PUBLISH %s 1", chan));
    lu_sleep_ms(50);

    /* The next waiter joins the lingering channel without a SUBSCRIBE and
     * sleeps: the old messages do not wake it (its wait runs out). */
    memset(&w, 0, sizeof(w));
    int others = -1;
    if (got != 2 || dlock__pubsub_join_active(c->ps, chan, strlen(chan), &w,
                                              &others) != 1) {
      printf("attempt %d: the linger ended first, trying again\n", attempt);
      /* Until the channel is gone, so that the next join subscribes. */
      int64_t until = lu_now_ms() + 10000;
      while (dlock__pubsub_state(c->ps, chan, strlen(chan), NULL) != -1 &&
             lu_now_ms() < until)
        lu_sleep_ms(10);
      continue;
    }
    ASSERT_EQ(others, 0);
    ASSERT_EQ(dlock__pubsub_wait(c->ps, &w, dlock__now_us() + 300000), 0);

    /* A message sent now does wake it. */
    ASSERT_EQ(lu_reply_int(rp_cmd(s, "PUBLISH %s 0", chan)), 1);
    ASSERT_EQ(dlock__pubsub_wait(c->ps, &w, dlock__now_us() + 30000000), 1);
    dlock__pubsub_leave(c->ps, &w);
    done = 1;
  }
  ASSERT_EQ(done, 1);

  dlock_client_close(c);
  rp_free(s);
}

/* Connections of type normal the server has, other than the test's own. */
static int other_connections(rp_server_t *s) {
  redisReply *r = rp_cmd(s, "CLIENT LIST TYPE normal");
  int n = 0;
  if (r != NULL && r->type == REDIS_REPLY_STRING)
    for (size_t i = 0; i < r->len; i++)
      n += r->str[i] == '\n';
  freeReplyObject(r);
  return n - 1;
}

/*
 * Nobody waits and the thread does not read the socket: it still notices
 * the server dropping the connection, and connects again at once (the
 * command connection, idle, connects again only when used).
 */
TEST(unread_connection_drop_is_noticed) {
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  ASSERT_EQ(thread_reads_becomes(c->ps, 0), 0);
  ASSERT_GE(other_connections(s), 1);
  ASSERT_GE(lu_reply_int(rp_cmd(s, "CLIENT KILL TYPE normal SKIPME yes")), 1);
  int64_t until = lu_now_ms() + 10000;
  while (other_connections(s) < 1 && lu_now_ms() < until)
    lu_sleep_ms(10);
  ASSERT_GE(other_connections(s), 1);
  dlock_client_close(c);
  rp_free(s);
}
