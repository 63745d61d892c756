/*
 * Reading the subscription connection and dispatching what it brings:
 * messages wake waiters as their channel's decoder says, confirmations and
 * refusals move a channel's subscription on (see pubsub.h).
 *
 * Reading: a waiter that goes to sleep while nobody else reads the
 * connection reads it itself (it becomes the "reader", polling the socket
 * instead of sleeping on its condition variable), and the thread leaves
 * the socket alone meanwhile. The message that wakes the reader then
 * reaches it without a hand-off from another thread, which on a busy
 * machine costs as much as a round trip. Waiters that are not the reader
 * are woken by whoever read their message; the reader itself is woken
 * through a second pipe when someone else wakes it (a resubscription, a
 * cancellation).
 */
#define _GNU_SOURCE
#include "pubsub_int.h"

#include "error.h"
#include "monotime.h"
#include "reply.h"

#include <hiredis/hiredis.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

void dlock__sub_on_disconnect_locked(dlock__pubsub *ps) {
  int64_t now = dlock__now_us();
  /* A connection that worked for a while ends a run of failures: the next
   * attempt comes at once. One that breaks soon after it was made (a server
   * that completes the handshake, then hangs up or answers SUBSCRIBE out of
   * step) counts as one more failure, so that such a server is not
   * connected to again and again in a tight loop. */
  if (ps->connected && now - ps->connected_us >= BACKOFF_MAX_US)
    ps->backoff_us = 0;
  if (ps->ctx != NULL) {
    dlock__stream_free(ps->ctx);
    ps->ctx = NULL;
  }
  ps->connected = 0;
  /* A waiter polling the socket just closed would never hear of it. */
  if (ps->reader != NULL)
    dlock__sub_poke(ps->reader_pipe[1]);
  ps->retry_at_us = now + ps->backoff_us;
  ps->backoff_us = ps->backoff_us ? ps->backoff_us * 2 : BACKOFF_FIRST_US;
  if (ps->backoff_us > BACKOFF_MAX_US)
    ps->backoff_us = BACKOFF_MAX_US;
  for (dlock__sub *s = ps->subs; s != NULL; s = s->next) {
    s->state = SUB_NONE;
    s->resync = 1;
    /* The node may have failed for good (a failover): the waiters look
     * the slot's master up again and subscribe there. */
    if (ps->sharded && s->refs > 0) {
      s->moved = 1;
      dlock__sub_wake_all_locked(s);
    }
    pthread_cond_broadcast(&s->ready);
    dlock__sub_check_locked(ps, s);
  }
}

/* An error reply answers the SUBSCRIBE in flight (a user without the
 * permission): its joiners are told, and it is not sent again while they
 * wait. */
static void refuse_pending_locked(dlock__pubsub *ps, const redisReply *r) {
  /* A node that does not own the slot (any more) answers SSUBSCRIBE with
   * MOVED: the channel's waiters are woken to try and then move (see
   * dlock__sub.moved). Mid-migration (ASK, TRYAGAIN) or without a
   * working cluster (CLUSTERDOWN) they are not woken, which would have
   * them ask the same node again and again: they sleep by the lock's TTL
   * and move then. */
  int moved = ps->sharded && r->len >= 5 && memcmp(r->str, "MOVED", 5) == 0;
  int elsewhere =
      moved || (ps->sharded &&
                ((r->len >= 3 && memcmp(r->str, "ASK", 3) == 0) ||
                 (r->len >= 8 && memcmp(r->str, "TRYAGAIN", 8) == 0) ||
                 (r->len >= 11 && memcmp(r->str, "CLUSTERDOWN", 11) == 0)));
  for (dlock__sub *s = ps->subs; s != NULL; s = s->next) {
    if (s->state != SUB_SENT)
      continue;
    s->state = SUB_NONE;
    if (elsewhere) {
      s->moved = 1;
      if (moved)
        dlock__sub_wake_all_locked(s);
      pthread_cond_broadcast(&s->ready);
      continue;
    }
    s->refused = dlock__fail_reply(r->str, r->len);
    snprintf(s->why, sizeof(s->why), "SUBSCRIBE refused: %.120s", r->str);
    pthread_cond_broadcast(&s->ready);
  }
}

/* Wakes the waiters of 's' as its decoder says of 'msg'. */
static void deliver_locked(dlock__sub *s, const redisReply *msg) {
  int text = msg->type == REDIS_REPLY_STRING || msg->type == REDIS_REPLY_STATUS;
  dlock__wakeup up = {DLOCK__WAKE_FIRST, 0, 0};
  if (s->wake != NULL)
    up = s->wake(text ? msg->str : NULL, text ? msg->len : 0);
  if (up.how == DLOCK__WAKE_ALL)
    dlock__sub_wake_all_locked(s);
  else if (up.how == DLOCK__WAKE_FIRST)
    dlock__sub_wake_one_locked(s, up.value);
  else if (up.how == DLOCK__WAKE_SOME)
    dlock__sub_wake_n_locked(s, up.count);
}

/* Handles one reply or message. Returns -1 when it cannot answer anything
 * this client sent (the stream is out of step): the connection is then
 * dropped and every subscription made again. */
static int handle_reply_locked(dlock__pubsub *ps, const redisReply *r) {
  if (r->type == REDIS_REPLY_ERROR) {
    refuse_pending_locked(ps, r);
    return 0;
  }
  /* Every other reply on a subscribed connection is a pub/sub frame that
   * names its channel. An integer, a string, a nil or a short array answers
   * nothing this client sent (a server or proxy in the wrong state): the
   * stream is out of step, and the server's subscriptions may not be what
   * this client thinks they are. */
  if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 ||
      r->element[1]->type != REDIS_REPLY_STRING)
    return -1;
  const redisReply *kind = r->element[0], *chan = r->element[1];
  dlock__sub *s = dlock__sub_find(ps, chan->str, chan->len);
  if (s == NULL)
    return 0;
  if (ps->sharded) {
    /* Sharded pub/sub names its frames with an 's' in front. */
    if (kind->type != REDIS_REPLY_STRING || kind->len < 2 ||
        kind->str[0] != 's')
      return -1;
    static const redisReply plain[3] = {
        {.type = REDIS_REPLY_STRING, .str = (char *)"message", .len = 7},
        {.type = REDIS_REPLY_STRING, .str = (char *)"subscribe", .len = 9},
        {.type = REDIS_REPLY_STRING, .str = (char *)"unsubscribe", .len = 11}};
    const redisReply *k = NULL;
    for (int i = 0; i < 3 && k == NULL; i++)
      if (kind->len == plain[i].len + 1 &&
          memcmp(kind->str + 1, plain[i].str, plain[i].len) == 0)
        k = &plain[i];
    if (k == NULL)
      return -1;
    kind = k;
    /* An SUNSUBSCRIBE this client did not send: Redis drops a sharded
     * subscription when its slot moves to another node. */
    if (kind == &plain[2] && s->state != SUB_LEAVING) {
      s->state = SUB_NONE;
      s->moved = 1;
      dlock__sub_wake_all_locked(s);
      pthread_cond_broadcast(&s->ready);
      dlock__sub_check_locked(ps, s);
      return 0;
    }
  }
  if (dlock__reply_is(kind, "message")) {
    dlock__stat(dlock__sub_stats(ps), DLOCK__ST_MESSAGES);
    deliver_locked(s, r->element[2]);
  } else if (dlock__reply_is(kind, "subscribe")) {
    /* SENT, or NONE after a refusal of another SUBSCRIBE in flight: Redis
     * says it is subscribed, and it is (the linger drops it if nobody
     * waits). A confirmation while ACTIVE or LEAVING answers nothing sent:
     * a SUBSCRIBE is only ever sent from NONE. */
    if (s->state == SUB_ACTIVE || s->state == SUB_LEAVING)
      return -1;
    s->state = SUB_ACTIVE;
    pthread_cond_broadcast(&s->ready);
    if (s->resync) {
      s->resync = 0;
      dlock__sub_wake_all_locked(s);
    }
  } else if (dlock__reply_is(kind, "unsubscribe")) {
    if (s->state != SUB_LEAVING)
      return -1;
    s->state = SUB_NONE;
    /* Waiters that joined while the UNSUBSCRIBE was on its way need the
     * channel again, and one that nobody needs is to be forgotten: either
     * way the thread has work, and it may be asleep in poll() while a
     * waiter reads the connection, so it is told. */
    if (!pthread_equal(pthread_self(), ps->thread))
      dlock__sub_poke_thread(ps);
  }
  dlock__sub_check_locked(ps, s);
  return 0;
}

static int reply_read_locked(void *ps, const redisReply *r) {
  return handle_reply_locked(ps, r);
}

void dlock__sub_read_replies_locked(dlock__pubsub *ps) {
  if (dlock__stream_read_each(ps->ctx, reply_read_locked, ps) != 0)
    dlock__sub_on_disconnect_locked(ps);
}

/*
 * Reads what has arrived while nobody read the connection (the thread
 * leaves it alone while nobody waits), before a waiter joins: those
 * messages were sent before the waiter's first attempt, so they are news
 * to nobody, and must not wake it for an attempt bound to fail. Reading
 * happens under 'mu' only, whoever reads, so this is safe whether or not
 * a reader or the thread polls the socket; it is skipped when either
 * does, as then nothing is left unread for long.
 */
void dlock__sub_read_stale_locked(dlock__pubsub *ps) {
  if (!ps->thread_left_socket || ps->reader != NULL || !ps->connected ||
      ps->ctx == NULL)
    return;
  dlock__sub_read_replies_locked(ps);
  /* The connection broke: the thread, polling without it, reconnects. */
  if (!ps->connected)
    dlock__sub_poke_thread(ps);
}

/* Reads the connection until 'until_us' at most or something arrives, as
 * the reader (see the top of this file). Returns with 'mu' held, as it
 * was called. */
void dlock__sub_read_as_waiter_locked(dlock__pubsub *ps, dlock__waiter *w,
                                      int64_t until_us) {
  int fd = dlock__stream_fd(ps->ctx);
  ps->reader = w;
  w->reading = 1;
  /* The thread, polling the socket too, would wake with this reader on
   * the message, and they would take turns at the mutex before the reader
   * could act on it: two threads woken where one is enough, on the way
   * from an unlock to the next attempt. It is told now, while nothing is
   * due, to poll without the socket (once 'mu' is free for it). */
  int tell = !ps->thread_left_socket;
  pthread_mutex_unlock(&ps->mu);
  if (tell)
    dlock__sub_poke_thread(ps);
  struct pollfd p[2] = {{.fd = fd, .events = POLLIN},
                        {.fd = ps->reader_pipe[0], .events = POLLIN}};
  int64_t left = until_us - dlock__now_us();
  struct timespec ts = {(time_t)(left / 1000000),
                        (long)(left % 1000000) * 1000};
  int n = ppoll(p, 2, left > 0 ? &ts : &(struct timespec){0, 0}, NULL);
  pthread_mutex_lock(&ps->mu);
  w->reading = 0;
  ps->reader = NULL;
  if (n > 0 && (p[1].revents & POLLIN))
    dlock__sub_drain_pipe(ps->reader_pipe[0]);
  /* The connection may have been replaced meanwhile: read only the one
   * that was polled. */
  if (n > 0 && (p[0].revents & (POLLIN | POLLHUP | POLLERR)) && ps->connected &&
      ps->ctx != NULL && dlock__stream_fd(ps->ctx) == fd) {
    dlock__sub_read_replies_locked(ps);
    /* The reader found the connection broken: the thread, which may be
     * polling without it, reconnects. */
    if (!ps->connected)
      dlock__sub_poke_thread(ps);
  }
}
