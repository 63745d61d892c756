/*
 * The driver of the shared command connection (see conn.h): the thread
 * that reads replies for everybody, hands each to the caller waiting for
 * it, steps a connect and its handshake, and watches the deadlines, until
 * its own replies are in; it then passes the role to the oldest waiter.
 */
#define _GNU_SOURCE
#include "conn_internal.h"

#include "alloc.h"
#include "error.h"
#include "monotime.h"

#include <assert.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* ---- receiving ---------------------------------------------------------- */

/* Completes the request of every complete reply in the read buffer. */
int dlock__conn_dispatch_locked(dlock__conn *c) {
  for (;;) {
    void *reply = NULL;
    if (dlock__stream_reply(c->ctx, &reply) != 0)
      return DLOCK_EPROTO;
    if (reply == NULL)
      return 0;
    request *r = c->head;
    if (r == NULL) {
      /* A reply nobody asked for: the stream is out of step. */
      freeReplyObject(reply);
      return DLOCK_EPROTO;
    }
    c->head = r->next;
    if (c->head == NULL)
      c->tail = NULL;
    c->last_reply_us = dlock__now_us();
    dlock__conn_complete_locked(c, r, reply, 0, NULL);
  }
}

/*
 * A caller whose own deadline passed gives up on its requests, while the
 * connection stays (dlock__conn_give_up_at_locked): they complete with
 * DLOCK_EIO and their replies are dropped when they come. Returns 0, or -1
 * when out of memory (the connection must then be failed instead).
 */
int dlock__conn_give_up_locked(dlock__conn *c, caller *me) {
  char why[100];
  snprintf(why, sizeof(why), "no reply from Redis within %lld ms",
           (long long)((dlock__now_us() - me->start_us) / 1000));
  for (request **p = &c->head; *p != NULL && me->remaining > 0;
       p = &(*p)->next) {
    if (waiter_of(*p) == me && dlock__conn_give_up_at_locked(c, p, why) != 0)
      return -1;
  }
  return 0;
}

/* The earliest deadline of a submitted request in line (INT64_MAX: none). */
int64_t dlock__conn_submit_deadline(const dlock__conn *c) {
  int64_t at = INT64_MAX;
  for (const request *r = c->head; r != NULL; r = r->next) {
    if (r->owned && r->done != NULL && r->deadline_us < at)
      at = r->deadline_us;
  }
  return at;
}

/* Completes the submitted requests whose deadline has passed, as a caller
 * gives up on its own (dlock__conn_give_up_locked): 0, or -1 when out of
 * memory (the connection must then be failed). */
int dlock__conn_expire_submitted_locked(dlock__conn *c) {
  int64_t now = dlock__now_us();
  for (request **p = &c->head; *p != NULL; p = &(*p)->next) {
    request *r = *p;
    if (!r->owned || r->done == NULL || now < r->deadline_us)
      continue;
    char why[100];
    snprintf(why, sizeof(why), "no reply from Redis within %lld ms",
             (long long)((now - r->sent_us) / 1000));
    if (dlock__conn_give_up_at_locked(c, p, why) != 0)
      return -1;
  }
  return 0;
}

/* When the connection counts as dead: a whole command timeout without any
 * reply since its oldest request was sent. Replies come in order, so a
 * connection that keeps delivering them (a long pipelined batch) is alive
 * however long the oldest request has waited. */
int64_t dlock__conn_dead_at(const dlock__conn *c) {
  if (c->ctx != NULL && !dlock__stream_ready(c->ctx))
    return dlock__stream_deadline(c->ctx);
  if (c->head == NULL)
    return INT64_MAX;
  int64_t since =
      c->head->sent_us > c->last_reply_us ? c->head->sent_us : c->last_reply_us;
  return dlock__after_ms(since, c->cfg.command_timeout_ms + c->head->block_ms);
}

/* The driver sleeps in recv() rather than in poll() when it has longer to
 * wait than READ_SLICE_MS, on a plain connection (see
 * dlock__net_block_reads): one system call per reply instead of two. The
 * slice bounds each such sleep, after which the deadlines are looked at as
 * after a poll() that timed out. Output waiting for a socket that was full
 * needs poll(); output left to the driver (leave_to_driver) goes out after
 * the next reply, as it does after a poll() for that reply alone. */
#define READ_SLICE_MS 100
#define READ_BUF 16384

/* A look at the socket before sleeping that caught nothing this many
 * times in a row is not made for the next SPIN_REST waits: replies that
 * take longer than the look (a busy server, a slow link) would only burn
 * the processor. */
#define SPIN_MISSES_MAX 4
#define SPIN_REST 64

/* How long this wait looks at the socket before it sleeps (0: not). Only
 * a wait for a lone request looks: with more in flight the server is busy
 * with them, and a processor spent looking would be taken from it. */
static int64_t spin_now(dlock__conn *c) {
  if (c->cfg.spin_us <= 0 || c->head == NULL || c->head->next != NULL)
    return 0;
  if (c->spin_skip > 0) {
    c->spin_skip--;
    return 0;
  }
  return c->cfg.spin_us;
}

/* What the look of the last wait found: 1 the reply, -1 nothing, 0 no
 * look was made. */
static void spin_learn(dlock__conn *c, int spun) {
  if (spun > 0)
    c->spin_misses = 0;
  else if (spun < 0 && ++c->spin_misses >= SPIN_MISSES_MAX) {
    c->spin_misses = 0;
    c->spin_skip = SPIN_REST;
  }
}

static int may_wait_in_recv(dlock__conn *c, int64_t wake) {
  return !(c->socket_full && has_output(c)) &&
         wake - dlock__now_us() > READ_SLICE_MS * 1000 &&
         dlock__stream_block_reads(c->ctx, READ_SLICE_MS) == 0;
}

/* The oldest waiting caller but 'me' reads next. A caller that sent but is
 * not waiting yet (a RedLock sending to every node first, or waiting on
 * another node for its turn) takes the role itself when it comes to wait. */
void dlock__conn_pass_role_locked(dlock__conn *c, caller *me) {
  for (request *r = c->head; r != NULL; r = r->next) {
    caller *who = waiter_of(r);
    if (who != NULL && who != me && who->waiting) {
      dlock__conn_notify_locked(c, who, WAKE_DRIVE);
      break;
    }
  }
}

/* Reads replies for everybody until the caller 'me' has all of its own, or
 * its deadline passes (it gives up on them), or the connection dies; and
 * completes submitted requests whose deadline passes meanwhile. */
void dlock__conn_drive_locked(dlock__conn *c, caller *me) {
  char why[200];
  assert(!c->driving && me->waiting);
  c->driving = 1;
  c->driver = me;
  int polled = 0;
  while (c->ctx != NULL &&
         (me->remaining > 0 || (me->want_ready && !is_ready(c)) ||
          (me->want_idle && c->nsubmitted > 0))) {
    /* The caller's turn ends (after one look at what came), its requests
     * still its own. */
    if (polled && (me->remaining > 0 || me->want_idle) &&
        dlock__now_us() >= me->until_us)
      break;
    int ready = is_ready(c);
    if (!ready) {
      /* The connect and handshake, as far as they go without waiting. */
      int rc = dlock__stream_step(c->ctx);
      if (rc < 0) {
        /* A failed connect backs off like a timeout: callers fail fast
         * while the server stays away. */
        c->timed_out = 1;
        dlock__conn_fail_all_locked(c, rc, dlock_last_error());
        break;
      }
      if (rc == 0) {
        c->backoff_us = 0;
        c->last_code = 0;
        /* What the callers queued meanwhile goes out now. */
        if (!c->writing)
          dlock__conn_write_out_locked(c);
        continue;
      }
    }
    int64_t mine = wait_limit(c, me);
    int64_t wake =
        dlock__conn_dead_at(c) < mine ? dlock__conn_dead_at(c) : mine;
    if (c->nsubmitted > 0) {
      int64_t next = dlock__conn_submit_deadline(c);
      wake = next < wake ? next : wake;
    }
    /* Past a deadline the poll does not wait, but replies that already
     * arrived are still read: a caller that waited for another server
     * first (a RedLock) must not lose answers that came in time. */
    struct pollfd p[2] = {
        {.fd = dlock__stream_fd(c->ctx),
         .events = ready ? (short)(POLLIN | (has_output(c) ? POLLOUT : 0))
                         : dlock__stream_events(c->ctx)},
        {.fd = c->wake_fd[0], .events = POLLIN}};
    int in_recv = ready && may_wait_in_recv(c, wake);
    int64_t spin = in_recv ? spin_now(c) : 0;
    int spun = 0;
    dlock__stream *ctx = c->ctx;
    char buf[READ_BUF];
    long got = 0;
    int got_errno = 0, n, poll_errno = 0;
    dlock__conn_unlock(c);
    if (in_recv) {
      /* What poll() would have said: readable (bytes, the end of the
       * stream or an error, for the read below), or nothing in time. */
      int caught = 0;
      got = dlock__stream_recv_wait(ctx, buf, sizeof(buf), spin, &caught,
                                    &got_errno);
      spun = spin > 0 ? (caught ? 1 : -1) : 0;
      n = got < 0 && (got_errno == EAGAIN || got_errno == EWOULDBLOCK ||
                      got_errno == EINTR)
              ? 0
              : 1;
      p[0].revents = n ? POLLIN : 0;
    } else {
      /* A connected socket that another thread shuts down wakes the poll
       * (and the recv above) by itself; the pipe is polled only while
       * connecting, when shutting the socket down may not (and an extra
       * descriptor costs every round trip something). */
      n = poll(p, ready ? 1 : 2, dlock__ms_until(wake));
      poll_errno = errno;
    }
    pthread_mutex_lock(&c->mu);
    polled = 1;
    spin_learn(c, spun);
    if (n < 0 && poll_errno != EINTR) {
      snprintf(why, sizeof(why), "poll: %s", strerror(poll_errno));
      dlock__conn_fail_all_locked(c, DLOCK_EIO, why);
      break;
    }
    if (n > 0 && (p[1].revents & POLLIN))
      dlock__conn_drain_wake(c);
    if (c->broken_code != 0) {
      /* Broken by another thread (a cancel, a failed write): the reason
       * is the one it gave. */
      dlock__conn_fail_all_locked(c, c->broken_code, c->last_err);
      break;
    }
    if (c->nsubmitted > 0 && dlock__conn_expire_submitted_locked(c) != 0) {
      dlock__conn_fail_all_locked(c, DLOCK_ENOMEM,
                                  "out of memory giving up a call");
      break;
    }
    if (!ready) {
      /* The handshake's own deadline is checked by the next step; the
       * caller's, here. An opener (dlock__conn_open) past its deadline
       * ends the connection it waits for. */
      if (c->ctx != NULL && me->want_ready && me->remaining == 0 &&
          dlock__now_us() >= caller_deadline(c, me)) {
        dlock__conn_handshake_overdue_locked(c, me);
        break;
      }
      if (c->ctx != NULL && dlock__now_us() >= caller_deadline(c, me) &&
          dlock__now_us() < dlock__conn_dead_at(c) && me->remaining > 0) {
        if (dlock__conn_give_up_locked(c, me) != 0)
          dlock__conn_fail_all_locked(c, DLOCK_ENOMEM,
                                      "out of memory giving up a call");
        break;
      }
      continue;
    }
    if (n == 0 && c->ctx != NULL) {
      int64_t now = dlock__now_us();
      if (now >= dlock__conn_dead_at(c)) {
        snprintf(why, sizeof(why), "no reply from Redis within %lld ms",
                 (long long)c->cfg.command_timeout_ms);
        c->timed_out = 1;
        dlock__conn_fail_all_locked(c, DLOCK_EIO, why);
        break;
      }
      if (now >= caller_deadline(c, me)) {
        if (dlock__conn_give_up_locked(c, me) != 0)
          dlock__conn_fail_all_locked(c, DLOCK_ENOMEM,
                                      "out of memory giving up a call");
        break;
      }
    }
    if (n <= 0)
      continue;
    if ((p[0].revents & POLLOUT) && has_output(c)) {
      /* A write error shuts the socket down and the read below fails. */
      dlock__conn_write_out_locked(c);
      if (c->ctx == NULL)
        break;
    }
    if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      /* Nobody closes the driver's socket under it (see conn_internal.h). */
      assert(c->ctx == ctx);
      int read_rc =
          in_recv ? dlock__stream_take(ctx, got, got_errno, buf, sizeof(buf))
                  : dlock__stream_read(ctx);
      if (read_rc != 0) {
        snprintf(why, sizeof(why), "read: %s", dlock_last_error());
        dlock__conn_fail_all_locked(c, DLOCK_EIO, why);
        break;
      }
      int rc = dlock__conn_dispatch_locked(c);
      if (rc != 0) {
        const char *proto = dlock__stream_proto_error(c->ctx);
        snprintf(why, sizeof(why), "bad reply from server: %s",
                 proto[0] != '\0' ? proto : "reply without a request");
        dlock__conn_fail_all_locked(c, rc, why);
        break;
      }
      /* Commands left for the driver (leave_to_driver) go out now, in one
       * write, before the callers just answered are woken. */
      if (has_output(c)) {
        dlock__conn_write_out_locked(c);
        if (c->ctx == NULL)
          break;
      }
    }
  }
  /* Nor are any left behind when the driver goes. */
  if (c->ctx != NULL && has_output(c))
    dlock__conn_write_out_locked(c);
  c->driving = 0;
  c->driver = NULL;
  dlock__conn_pass_role_locked(c, me);
}
