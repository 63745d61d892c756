/*
 * One caller waiting on several sends at once, on the connections of
 * different servers (see dlock__conn_wait_any in conn.h): a RedLock's
 * nodes, asked together and answered in any order. The caller reads
 * every connection that no other thread reads, all in one poll(), as the
 * driver of each (conn_driver.c); for a connection another thread reads,
 * that thread completes its requests and wakes it through a pipe that the
 * same poll() watches. So it waits in one place, for whichever answers
 * first, and never in turns.
 */
#define _GNU_SOURCE
#include "conn_internal.h"

#include "alloc.h"
#include "error.h"
#include "monotime.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <unistd.h>

/* A caller of 'ps' reads 'c': the reading is this thread's. */
static int read_by_us(const dlock__conn *c, dlock__pending *const *ps,
                      size_t n) {
  for (size_t i = 0; i < n; i++)
    if (ps[i] != NULL && ps[i]->reqs != NULL && c->driver == &ps[i]->me)
      return 1;
  return 0;
}

static int64_t earlier(int64_t a, int64_t b) { return a < b ? a : b; }

/* What one wait shares between its steps: the pipe through which threads
 * reading the connections it does not read tell it of its callers'
 * wake-ups, made only when there is such a connection (-1 until then;
 * 'failed' when it could not be made, and the wait then looks again every
 * millisecond). */
typedef struct many {
  dlock__pending *const *ps;
  size_t n;
  int pipe[2];
  int failed;
} many;

/* The pipe, made on first need: 1 when there is one. */
static int need_pipe(many *w) {
  if (w->pipe[0] < 0 && !w->failed &&
      pipe2(w->pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    w->pipe[0] = w->pipe[1] = -1;
    w->failed = 1;
  }
  return w->pipe[0] >= 0;
}

/* One look at caller 'i' before the poll: answered (1), or what its
 * connection needs read (its descriptors in 'pf', the reading taken when
 * nobody has it) and the time the poll must end by in '*wake'. */
static int look(many *w, size_t i, struct pollfd *pf, size_t *np,
                int64_t *wake) {
  dlock__pending *p = w->ps[i];
  dlock__conn *c = p->conn;
  int done = 0;
  pthread_mutex_lock(&c->mu);
  if (p->me.remaining == 0) {
    done = 1;
  } else if (!c->driving || c->driver == &p->me) {
    /* Nobody reads it: this caller does, with the others. */
    c->driving = 1;
    c->driver = &p->me;
    int ready = is_ready(c);
    pf[*np].fd = dlock__stream_fd(c->ctx);
    pf[*np].events = ready ? (short)(POLLIN | (has_output(c) ? POLLOUT : 0))
                           : dlock__stream_events(c->ctx);
    pf[*np].revents = 0;
    (*np)++;
    if (!ready) {
      /* While connecting, a cancel wakes the poll through the pipe. */
      pf[*np] = (struct pollfd){.fd = c->wake_fd[0], .events = POLLIN};
      (*np)++;
    }
    *wake = earlier(*wake, dlock__conn_dead_at(c));
    *wake = earlier(*wake, dlock__conn_submit_deadline(c));
    *wake = earlier(*wake, caller_deadline(c, &p->me));
  } else if (!read_by_us(c, w->ps, w->n)) {
    /* Another thread reads: it tells this caller through the pipe when
     * its replies are in or the reading is its turn. Set under 'mu', as
     * 'remaining' was read, so no wake-up is missed. */
    if (need_pipe(w))
      p->me.notify_fd = &w->pipe[1];
    /* Past its own deadline the caller stops waiting for it, as
     * dlock__conn_wait_until does. */
    if (dlock__now_us() >= caller_deadline(c, &p->me)) {
      if (dlock__conn_give_up_locked(c, &p->me) != 0)
        dlock__conn_break_locked(c, DLOCK_ENOMEM,
                                 "out of memory giving up a call");
      done = p->me.remaining == 0;
    }
    *wake = earlier(*wake, caller_deadline(c, &p->me));
  }
  dlock__conn_unlock(c);
  return done;
}

/* After the poll: what the connection that 'p' reads has for it, as the
 * driver does between two polls ('revents': what the poll said of its
 * descriptors). A ready connection with nothing to read and no deadline
 * passed is left alone. */
static void step(dlock__pending *p, short revents) {
  dlock__conn *c = p->conn;
  pthread_mutex_lock(&c->mu);
  if (c->driver == &p->me) {
    int64_t now = dlock__now_us();
    int ready = is_ready(c);
    if (!ready)
      dlock__conn_drain_wake(c);
    if (!ready || revents != 0 || c->broken_code != 0 ||
        now >= dlock__conn_dead_at(c) || now >= dlock__conn_submit_deadline(c))
      dlock__conn_service_locked(c);
    if (c->ctx != NULL && p->me.remaining > 0 &&
        now >= caller_deadline(c, &p->me) &&
        dlock__conn_give_up_locked(c, &p->me) != 0)
      dlock__conn_fail_all_locked(c, DLOCK_ENOMEM,
                                  "out of memory giving up a call");
    if (c->ctx == NULL) {
      /* Failed: nothing is left in line to read. */
      c->driving = 0;
      c->driver = NULL;
    }
  }
  dlock__conn_unlock(c);
}

/* Runs 'fn' on each caller of 'ps' that sent, with its connection's 'mu'
 * held. */
static void each_locked(dlock__pending *const *ps, size_t n,
                        void (*fn)(dlock__conn *c, caller *me)) {
  for (size_t i = 0; i < n; i++) {
    dlock__pending *p = ps[i];
    if (p == NULL || p->reqs == NULL)
      continue;
    pthread_mutex_lock(&p->conn->mu);
    fn(p->conn, &p->me);
    dlock__conn_unlock(p->conn);
  }
}

/* A caller stops waiting, and gives back the reading it took. */
static void stop_locked(dlock__conn *c, caller *me) {
  me->waiting = 0;
  me->notify_fd = NULL;
  if (c->driver == me) {
    if (c->ctx != NULL && has_output(c))
      dlock__conn_write_out_locked(c);
    c->driving = 0;
    c->driver = NULL;
  }
}

/* A caller of another thread waiting on the connection reads it next. */
static void pass_on_locked(dlock__conn *c, caller *me) {
  if (!c->driving)
    dlock__conn_pass_role_locked(c, me);
}

/* Callers waited on with the arrays on the stack; more take the heap. */
#define MANY_LOCAL 8

int dlock__conn_wait_any(dlock__pending *const *ps, size_t n,
                         int64_t until_us) {
  for (size_t i = 0; i < n; i++)
    if (ps[i] != NULL && (ps[i]->reqs == NULL || ps[i]->rc != 0))
      return (int)i; /* failed at its send */
  /* Two descriptors per connection at most, and the pipe. */
  struct pollfd pf_local[2 * MANY_LOCAL + 1];
  size_t owner_local[2 * MANY_LOCAL + 1];
  struct pollfd *pf = pf_local;
  size_t *owner = owner_local;
  if (n > MANY_LOCAL) {
    pf = dlock__calloc(2 * n + 1, sizeof(*pf));
    owner = dlock__calloc(2 * n + 1, sizeof(*owner));
  }
  many w = {ps, n, {-1, -1}, 0};
  for (size_t i = 0; i < n; i++) {
    dlock__pending *p = ps[i];
    if (p == NULL)
      continue;
    pthread_mutex_lock(&p->conn->mu);
    p->me.waiting = 1;
    p->me.until_us = until_us;
    dlock__conn_unlock(p->conn);
  }
  int found = -1, polled = 0;
  while (found < 0) {
    if (pf == NULL || owner == NULL) {
      /* Out of memory for the poll: the first one, in turns. */
      for (size_t i = 0; i < n && found < 0; i++)
        if (ps[i] != NULL)
          found = (int)i;
      break;
    }
    int64_t wake = until_us;
    size_t np = 0;
    for (size_t i = 0; i < n && found < 0; i++) {
      if (ps[i] == NULL)
        continue;
      size_t before = np;
      if (look(&w, i, pf, &np, &wake))
        found = (int)i;
      for (size_t k = before; k < np; k++)
        owner[k] = i;
    }
    if (found >= 0 || (polled && dlock__now_us() >= until_us))
      break;
    size_t nfds = np;
    if (w.pipe[0] >= 0)
      pf[nfds++] = (struct pollfd){.fd = w.pipe[0], .events = POLLIN};
    else if (w.failed && wake > dlock__now_us() + 1000)
      wake = dlock__now_us() + 1000; /* no pipe: look again shortly */
    /* Past a deadline the poll does not wait, but what has arrived is
     * still read. */
    (void)poll(pf, nfds, dlock__ms_until(wake));
    polled = 1;
    if (w.pipe[0] >= 0) {
      char buf[64];
      while (read(w.pipe[0], buf, sizeof(buf)) > 0) {
      }
    }
    for (size_t k = 0; k < np; k++) {
      /* A caller's descriptors are next to each other. */
      short revents = pf[k].revents;
      while (k + 1 < np && owner[k + 1] == owner[k])
        revents |= pf[++k].revents;
      step(ps[owner[k]], revents);
    }
  }
  /* Every caller of this wait stops first, so that the reading goes to
   * another thread's. */
  each_locked(ps, n, stop_locked);
  each_locked(ps, n, pass_on_locked);
  if (w.pipe[0] >= 0) {
    close(w.pipe[0]);
    close(w.pipe[1]);
  }
  if (pf != pf_local)
    dlock__free(pf);
  if (owner != owner_local)
    dlock__free(owner);
  return found;
}
