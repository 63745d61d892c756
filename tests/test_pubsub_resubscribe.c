/*
 * The pub/sub subscription state machine against a real redis-server.
 *
 * A channel nobody waits on lingers a moment and is then unsubscribed. A
 * waiter that joins it while that UNSUBSCRIBE is on its way (sent, its
 * reply not in) must get the channel subscribed again, and its join must
 * not succeed before Redis has confirmed the new SUBSCRIBE: else the
 * holder's unlock message goes to nobody and the waiter sleeps until the
 * lock's lease ends.
 *
 * The window is made wide and certain by stopping redis-server (SIGSTOP)
 * while the client's UNSUBSCRIBE is in flight, which the test sees through
 * dlock__pubsub_state. Another waiter of the same client, on another
 * channel, is sleeping meanwhile: it reads the pub/sub connection for
 * everybody (see src/sub/subread.c), so the UNSUBSCRIBE's reply reaches a
 * waiter rather than the pub/sub thread.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "client.h"
#include "lock_util.h"
#include "monotime.h"
#include "pubsub.h"

/* A waiter on a channel, in a thread of its own: it joins (unless joined
 * already), sleeps until woken or 'wait_ms', and records what happened. */
typedef struct waiter_run {
  dlock__pubsub *ps;
  const char *channel;
  int64_t join_ms; /* 0: joined already, by the test */
  int64_t wait_ms;
  dlock__waiter w;
  atomic_int joined; /* 1 once the join returned */
  int join_rc;
  int wait_rc;
  int64_t woken_at_ms;
} waiter_run;

static void *waiter_main(void *arg) {
  waiter_run *r = arg;
  if (r->join_ms > 0) {
    memset(&r->w, 0, sizeof(r->w));
    r->join_rc = dlock__pubsub_join(r->ps, r->channel, strlen(r->channel),
                                    dlock__now_us() + r->join_ms * 1000, &r->w);
  }
  atomic_store(&r->joined, 1);
  if (r->join_rc != 0)
    return NULL;
  r->wait_rc =
      dlock__pubsub_wait(r->ps, &r->w, dlock__now_us() + r->wait_ms * 1000);
  r->woken_at_ms = lu_now_ms();
  dlock__pubsub_leave(r->ps, &r->w);
  return NULL;
}

static int state_of(dlock__pubsub *ps, const char *channel, int *refs) {
  return dlock__pubsub_state(ps, channel, strlen(channel), refs);
}

/* Joins 'channel' and leaves it at once: the channel then lingers, and is
 * unsubscribed half a second later. */
static void join_and_leave(dlock__pubsub *ps, const char *channel) {
  dlock__waiter w;
  memset(&w, 0, sizeof(w));
  ASSERT_DLOCK_OK(dlock__pubsub_join(ps, channel, strlen(channel),
                                     dlock__now_us() + 5000000, &w));
  ASSERT_EQ(state_of(ps, channel, NULL), DLOCK__SUB_ACTIVE);
  dlock__pubsub_leave(ps, &w);
}

TEST(join_while_unsubscribing_resubscribes) {
  rp_server_t *s = lu_server(0);
  dlock_options_t o;
  lu_options(&o, s);
  /* The join's own bound: a join that gave up on the confirmation returns
   * only after this long, well after a confirmed one. */
  o.command_timeout_ms = 3000;
  dlock_client_t *c = lu_client_opts(&o);
  dlock__pubsub *ps = c->ps;
  /* The waited channel is a lock's: another client holds the lock with a
   * long lease, and its unlock is the message that must not be lost. */
  dlock_client_t *holder = lu_client(s);
  dlock_t *held = lu_get(holder, "test:resub");
  ASSERT_DLOCK_OK(dlock_lock(held, 20000));
  char chan[128];
  lu_channel(chan, sizeof(chan), "test:resub", strlen("test:resub"));
  const char *other = "test:resub:other";

  /* A waiter that sleeps on another channel for the whole test, reading
   * the connection for everybody. */
  waiter_run reader = {
      .ps = ps, .channel = other, .join_ms = 5000, .wait_ms = 60000};
  pthread_t reader_thread;
  ASSERT_EQ(pthread_create(&reader_thread, NULL, waiter_main, &reader), 0);
  while (!atomic_load(&reader.joined))
    lu_sleep_ms(1);
  ASSERT_DLOCK_OK(reader.join_rc);
  lu_sleep_ms(50); /* asleep, and reading */

  /* Stop the server with the client's UNSUBSCRIBE in flight: stopped a
   * little before the linger ends, the server then holds the command
   * unread. A machine slow enough to miss that (the UNSUBSCRIBE answered
   * before the stop) gets another go. */
  int caught = 0;
  for (int attempt = 0; attempt < 5 && !caught; attempt++) {
    join_and_leave(ps, chan);
    lu_sleep_ms(250);
    ASSERT_EQ(rp_pause(s), 0);
    int64_t until = lu_now_ms() + 5000;
    int st;
    while ((st = state_of(ps, chan, NULL)) == DLOCK__SUB_ACTIVE &&
           lu_now_ms() < until)
      lu_sleep_ms(5);
    caught = st == DLOCK__SUB_LEAVING;
    if (!caught) {
      printf("attempt %d: channel state %d after the stop, trying again\n",
             attempt, st);
      ASSERT_EQ(rp_resume(s), 0);
      lu_sleep_ms(100);
    }
  }
  ASSERT(caught);
  /* Give the thread a moment to hand the command to the kernel. */
  lu_sleep_ms(50);

  /* A new waiter joins the channel being left. */
  waiter_run late = {
      .ps = ps, .channel = chan, .join_ms = 3000, .wait_ms = 20000};
  pthread_t late_thread;
  ASSERT_EQ(pthread_create(&late_thread, NULL, waiter_main, &late), 0);
  int refs = 0;
  int64_t until = lu_now_ms() + 5000;
  while (state_of(ps, chan, &refs) == DLOCK__SUB_LEAVING && refs == 0 &&
         lu_now_ms() < until)
    lu_sleep_ms(1);
  ASSERT_EQ(refs, 1);
  ASSERT_EQ(atomic_load(&late.joined), 0);

  /* The server answers the UNSUBSCRIBE; the join must see the channel
   * subscribed again before it returns. */
  ASSERT_EQ(rp_resume(s), 0);
  int64_t resumed = lu_now_ms();
  while (!atomic_load(&late.joined))
    lu_sleep_ms(1);
  int64_t join_ms = lu_now_ms() - resumed;
  int64_t numsub = lu_numsub(s, chan, strlen(chan));
  printf("join returned %d after %lld ms; PUBSUB NUMSUB %lld; state %d\n",
         late.join_rc, (long long)join_ms, (long long)numsub,
         state_of(ps, chan, NULL));
  ASSERT_DLOCK_OK(late.join_rc);
  ASSERT_EQ(numsub, 1);
  ASSERT_EQ(state_of(ps, chan, NULL), DLOCK__SUB_ACTIVE);

  /* The holder's unlock message wakes it, long before the 20 s lease
   * (and its own 20 s sleep) ends. */
  int64_t sent = lu_now_ms();
  ASSERT_DLOCK_OK(dlock_unlock(held));
  pthread_join(late_thread, NULL);
  printf("woken %lld ms after the unlock (rc %d)\n",
         (long long)(late.woken_at_ms - sent), late.wait_rc);
  ASSERT_EQ(late.wait_rc, 1);
  ASSERT_LT(late.woken_at_ms - sent, 10000);

  ASSERT_EQ(lu_reply_int(rp_cmd(s, "PUBLISH %s 0", other)), 1);
  pthread_join(reader_thread, NULL);
  ASSERT_EQ(reader.wait_rc, 1);
  dlock_free(held);
  dlock_client_close(holder);
  dlock_client_close(c);
  rp_free(s);
}
