/*
 * The subscription connection and its thread (see pubsub.h): connecting
 * (to the server, the master a Sentinel names, or any node of a cluster),
 * bringing the server's subscriptions in line with the waiters, and the
 * thread's loop, which reads the connection while no waiter does.
 */
#define _GNU_SOURCE
#include "pubsub_int.h"

#include "alloc.h"
#include "error.h"
#include "monotime.h"
#include "sentinel.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

dlock__pubsub *
dlock__subconn_new(const dlock__endpoint *ep, const dlock__tls *tls,
                   dlock__sentinel *sentinel, struct dlock__cluster *cluster,
                   int64_t connect_timeout_ms, int64_t command_timeout_ms) {
  dlock__pubsub *ps = dlock__calloc(1, sizeof(*ps));
  if (ps == NULL)
    return NULL;
  ps->ep = ep;
  ps->tls = tls;
  ps->place = dlock__place_make(sentinel, cluster);
  ps->connect_timeout_ms = connect_timeout_ms;
  ps->command_timeout_ms = command_timeout_ms;
  /* No pipe yet: dlock__subconn_free closes only those made. */
  ps->pipe_fd[0] = ps->pipe_fd[1] = -1;
  ps->reader_pipe[0] = ps->reader_pipe[1] = -1;
  pthread_mutex_init(&ps->mu, NULL);
  return ps;
}

void dlock__subconn_free(dlock__pubsub *ps) {
  for (int i = 0; i < 2; i++) {
    if (ps->pipe_fd[i] >= 0)
      close(ps->pipe_fd[i]);
    if (ps->reader_pipe[i] >= 0)
      close(ps->reader_pipe[i]);
  }
  pthread_mutex_destroy(&ps->mu);
  dlock__free(ps);
}

/* Asked by a reconnect when the thread's pipe is poked: a stop ends it at
 * once rather than after the server's answer or the timeouts. Any other
 * poke (a new subscription) is taken care of once the connect is done,
 * since the loop then looks at every channel anyway. */
static int stop_requested(void *arg) {
  dlock__pubsub *ps = arg;
  pthread_mutex_lock(&ps->mu);
  int stop = ps->stopping;
  pthread_mutex_unlock(&ps->mu);
  return stop;
}

/* A stream to the server, to the master a Sentinel names, or to a node of
 * the cluster; 'cancel_fd' (-1: none) ends a connect at once when a stop
 * is requested. */
static int open_stream(dlock__pubsub *ps, int cancel_fd, dlock__stream **out,
                       unsigned *gen) {
  dlock__cancel stop = {cancel_fd, cancel_fd >= 0 ? stop_requested : NULL, ps};
  return dlock__place_open(&ps->place, ps->ep, ps->tls, ps->connect_timeout_ms,
                           ps->command_timeout_ms, &stop, &ps->node, out, gen);
}

static void try_connect_locked(dlock__pubsub *ps) {
  if (ps->connected || dlock__now_us() < ps->retry_at_us)
    return;
  /* A connection made before (not a lazy client's first) is made again. */
  int again = ps->connected_us != 0;
  pthread_mutex_unlock(&ps->mu);
  dlock__stream *ctx = NULL;
  unsigned gen = 0;
  int rc = open_stream(ps, ps->pipe_fd[0], &ctx, &gen);
  /* Counted, and its event raised, with no lock held. */
  if (rc == 0 && again)
    dlock__stat_event(dlock__sub_stats(ps), DLOCK__ST_PUBSUB_RECONNECTS,
                      DLOCK_EVENT_PUBSUB_RECONNECT, 0, 0);
  pthread_mutex_lock(&ps->mu);
  if (rc != 0) {
    dlock__sub_on_disconnect_locked(ps);
    return;
  }
  ps->ctx = ctx;
  ps->gen = gen;
  ps->connected = 1;
  ps->connected_us = dlock__now_us();
}

/* Appends one SUBSCRIBE or UNSUBSCRIBE for every channel in 'from'. */
static int append_batch(dlock__stream *ctx, const char *verb, int n,
                        const char **argv, size_t *lens) {
  argv[0] = verb;
  lens[0] = strlen(verb);
  return n > 0 ? dlock__stream_append_argv(ctx, n + 1, argv, lens) : 0;
}

/* Brings the server's subscriptions in line with the waiters and returns
 * the next time something is due (linger expiry), or 0. */
static int64_t sync_subscriptions_locked(dlock__pubsub *ps) {
  int64_t now = dlock__now_us(), next_due = 0;
  size_t total = 0;
  for (dlock__sub *s = ps->subs; s != NULL; s = s->next)
    total++;
  const char **sub_argv = dlock__malloc((total + 1) * sizeof(*sub_argv));
  size_t *sub_lens = dlock__malloc((total + 1) * sizeof(*sub_lens));
  const char **uns_argv = dlock__malloc((total + 1) * sizeof(*uns_argv));
  size_t *uns_lens = dlock__malloc((total + 1) * sizeof(*uns_lens));
  int nsub = 0, nuns = 0;
  for (dlock__sub **p = &ps->subs; *p != NULL;) {
    dlock__sub *s = *p;
    if (s->refs == 0 && s->state == SUB_NONE) {
      *p = s->next;
      dlock__sub_free(s);
      atomic_fetch_sub(&ps->nsubs, 1);
      continue;
    }
    p = &s->next;
    if (!ps->connected || sub_argv == NULL || sub_lens == NULL ||
        uns_argv == NULL || uns_lens == NULL)
      continue;
    if (s->refs > 0 && s->state == SUB_NONE && !s->refused && !s->moved) {
      sub_argv[1 + nsub] = s->name;
      sub_lens[1 + nsub++] = s->len;
      s->state = SUB_SENT;
    } else if (s->refs > 0 && s->state == SUB_ACTIVE) {
      /* Its last waiter leaves without waking the thread: the thread
       * looks again within LINGER_US, in time for the channel's linger,
       * which counts from the leave. */
      if (next_due == 0 || now + LINGER_US < next_due)
        next_due = now + LINGER_US;
    } else if (s->refs == 0 && s->state == SUB_ACTIVE) {
      int64_t due = s->idle_since_us + LINGER_US;
      if (due <= now) {
        uns_argv[1 + nuns] = s->name;
        uns_lens[1 + nuns++] = s->len;
        s->state = SUB_LEAVING;
      } else if (next_due == 0 || due < next_due) {
        next_due = due;
      }
    }
  }
  if (ps->connected && sub_argv != NULL && sub_lens != NULL &&
      uns_argv != NULL && uns_lens != NULL) {
    int bad = 0;
    if (ps->sharded) {
      /* SSUBSCRIBE takes the channels of one slot only: one each. Each
       * command's verb goes over the previous one's channel, which is
       * written out already. */
      for (int i = 0; i < nsub && !bad; i++)
        bad = append_batch(ps->ctx, "SSUBSCRIBE", 1, &sub_argv[i],
                           &sub_lens[i]) != 0;
      for (int i = 0; i < nuns && !bad; i++)
        bad = append_batch(ps->ctx, "SUNSUBSCRIBE", 1, &uns_argv[i],
                           &uns_lens[i]) != 0;
    } else {
      bad = append_batch(ps->ctx, "SUBSCRIBE", nsub, sub_argv, sub_lens) != 0 ||
            append_batch(ps->ctx, "UNSUBSCRIBE", nuns, uns_argv, uns_lens) != 0;
    }
    if (bad)
      dlock__sub_on_disconnect_locked(ps);
#ifndef NDEBUG
    /* Every channel with waiters is subscribed, or on its way to be (a
     * LEAVING one once its UNSUBSCRIBE is answered), or was refused. */
    int waiting = 0;
    for (dlock__sub *s = ps->subs; s != NULL; s = s->next) {
      dlock__sub_check_locked(ps, s);
      assert(!ps->connected || s->refs == 0 || s->refused || s->moved ||
             s->state != SUB_NONE);
      waiting += s->refs;
    }
    assert(waiting == ps->waiting);
#endif
  } else if (ps->connected) {
    next_due = now + 10000; /* out of memory: try again shortly */
  }
  dlock__free((void *)sub_argv);
  dlock__free(sub_lens);
  dlock__free((void *)uns_argv);
  dlock__free(uns_lens);
  return next_due;
}

/* Whether Redis owes this client the answer to a SUBSCRIBE or an
 * UNSUBSCRIBE. */
static int replies_due_locked(const dlock__pubsub *ps) {
  for (const dlock__sub *s = ps->subs; s != NULL; s = s->next)
    if (s->state == SUB_SENT || s->state == SUB_LEAVING)
      return 1;
  return 0;
}

static void *pubsub_main(void *arg) {
  dlock__pubsub *ps = arg;
  pthread_mutex_lock(&ps->mu);
  while (!ps->stopping) {
    /* The master moved: the subscriptions follow it at once (unlocks are
     * published there now), without waiting for the old one to go. */
    if (ps->connected && dlock__place_moved(&ps->place, ps->gen)) {
      dlock__sub_on_disconnect_locked(ps);
      ps->retry_at_us = 0;
    }
    try_connect_locked(ps);
    int64_t due = sync_subscriptions_locked(ps);
    if (!ps->connected && (due == 0 || ps->retry_at_us < due))
      due = ps->retry_at_us;
    struct pollfd p[2] = {{.fd = ps->pipe_fd[0], .events = POLLIN},
                          {.fd = -1, .events = POLLIN}};
    if (ps->connected) {
      int done = 0;
      if (dlock__stream_flush(ps->ctx, &done) != 0) {
        dlock__sub_on_disconnect_locked(ps);
        continue;
      }
      /* A waiter reading the socket gets the replies; the thread still
       * writes what is pending. With nobody waiting and no reply due, the
       * socket is left alone too: the messages then are of lingering
       * channels, for nobody, and the unlock a process publishes itself
       * would otherwise wake its own thread just as the process it is
       * meant for has to run. They are read later, by the thread once
       * a reply is due or a waiter waits, or by the next joiner (see
       * dlock__sub_read_stale_locked). */
      p[1].fd = dlock__stream_fd(ps->ctx);
      int reads =
          ps->reader == NULL && (ps->waiting > 0 || replies_due_locked(ps));
      p[1].events = reads ? POLLIN : 0;
      if (!done)
        p[1].events |= POLLOUT;
#ifdef POLLRDHUP
      /* Unread, the socket is still watched for the server hanging up,
       * so that the connection is made again before anyone needs it. */
      if (ps->reader == NULL && !reads)
        p[1].events |= POLLRDHUP;
#endif
      if (p[1].events == 0)
        p[1].fd = -1;
    }
    ps->thread_left_socket = p[1].fd == -1 || !(p[1].events & POLLIN);
    pthread_mutex_unlock(&ps->mu);
    int n = poll(p, 2, due ? dlock__ms_until(due) : -1);
    pthread_mutex_lock(&ps->mu);
    if (n <= 0)
      continue;
    if (p[0].revents & POLLIN)
      dlock__sub_drain_pipe(ps->pipe_fd[0]);
    short gone = POLLHUP | POLLERR;
#ifdef POLLRDHUP
    gone |= POLLRDHUP;
#endif
    if (ps->connected && (p[1].revents & (POLLIN | gone)))
      dlock__sub_read_replies_locked(ps);
  }
  pthread_mutex_unlock(&ps->mu);
  return NULL;
}

int dlock__subconn_start(const dlock__endpoint *ep, const dlock__tls *tls,
                         dlock__sentinel *sentinel,
                         struct dlock__cluster *cluster, int sharded,
                         int64_t connect_timeout_ms, int64_t command_timeout_ms,
                         int lazy, int64_t open_deadline_us,
                         dlock__pubsub **out) {
  dlock__pubsub *ps = dlock__subconn_new(
      ep, tls, sentinel, cluster, connect_timeout_ms, command_timeout_ms);
  if (ps == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory starting pub/sub");
  ps->sharded = sharded;
  if (pipe2(ps->pipe_fd, O_CLOEXEC | O_NONBLOCK) != 0 ||
      pipe2(ps->reader_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    int rc = dlock__fail(DLOCK_EIO, "pipe2: %s", strerror(errno));
    dlock__subconn_free(ps);
    return rc;
  }
  /* Connect before returning, so the first waiter finds it ready; a lazy
   * client whose server is down leaves that to the thread. */
  int rc = !dlock__place_fixed(&ps->place)
               ? open_stream(ps, -1, &ps->ctx, &ps->gen)
               : dlock__stream_open_until(ep, tls, connect_timeout_ms,
                                          command_timeout_ms, open_deadline_us,
                                          -1, NULL, NULL, &ps->ctx);
  if (rc == 0) {
    ps->connected = 1;
    ps->connected_us = dlock__now_us();
  } else if (rc == DLOCK_EIO && lazy) {
    ps->backoff_us = BACKOFF_FIRST_US;
    ps->retry_at_us = dlock__now_us() + ps->backoff_us;
    rc = 0;
  }
  if (rc == 0 && pthread_create(&ps->thread, NULL, pubsub_main, ps) != 0)
    rc = dlock__fail(DLOCK_ENOMEM, "pthread_create failed");
  if (rc != 0) {
    dlock__stream_free(ps->ctx);
    dlock__subconn_free(ps);
    return rc;
  }
  *out = ps;
  return 0;
}

void dlock__subconn_stop(dlock__pubsub *ps) {
  pthread_mutex_lock(&ps->mu);
  ps->stopping = 1;
  pthread_mutex_unlock(&ps->mu);
  dlock__sub_poke_thread(ps);
  pthread_join(ps->thread, NULL);
  dlock__stream_free(ps->ctx);
  while (ps->subs != NULL) {
    dlock__sub *next = ps->subs->next;
    dlock__sub_free(ps->subs);
    ps->subs = next;
  }
  dlock__subconn_free(ps);
}

/* ---- after fork() ------------------------------------------------------- */

int dlock__subconn_forget(dlock__pubsub *ps) {
  /* Taken by a parent thread at the fork: the channel list may be half
   * changed. */
  if (pthread_mutex_trylock(&ps->mu) != 0)
    return -1;
  /* No join (the thread is the parent's), no condition variable destroyed
   * (one a parent thread waited on would wait for it for ever), no poke
   * (the pipes are shared with the parent's thread). The waiters live in
   * the parent's threads' frames. */
  while (ps->subs != NULL) {
    dlock__sub *next = ps->subs->next;
    dlock__free(ps->subs->name);
    dlock__free(ps->subs);
    ps->subs = next;
  }
  /* This process's copy of the descriptor only, and no TLS goodbye. */
  dlock__stream_abandon(ps->ctx);
  pthread_mutex_unlock(&ps->mu);
  dlock__subconn_free(ps);
  return 0;
}
