/*
 * What the application watches for an async client's loop (see loop.h):
 * each link's descriptor (the one server's, or every cluster node's, with
 * each node's sharded pub/sub), the pub/sub connection's and the Sentinel
 * watcher's, and the timer; and the servicing of those connections.
 */
#include "loop.h"

#include "alloc.h"
#include "error.h"
#include "monotime.h"

#include <poll.h>
#include <string.h>

int dlock__loop_know_nodes(dlock__loop *lp) {
  int n = dlock__route_nlinks(&lp->c->route);
  if (n <= lp->nnodes)
    return 0;
  dlock__lnode *x = dlock__realloc(lp->nodes, (size_t)n * sizeof(*x));
  if (x == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory watching a connection");
  for (int i = lp->nnodes; i < n; i++) {
    memset(&x[i], 0, sizeof(x[i]));
    x[i].fd[0] = x[i].fd[1] = -1;
  }
  lp->nodes = x;
  lp->nnodes = n;
  return 0;
}

static int poll_to_what(short events) {
  return ((events & POLLIN) ? DLOCK_POLL_IN : 0) |
         ((events & POLLOUT) ? DLOCK_POLL_OUT : 0);
}

/* Tells the application that descriptor slot 'i' is now socket number
 * 'socket' on 'fd', for 'what' (0: not watched). A new socket on the
 * number of a closed one is removed and added again, so that the loop
 * does not go on watching what it registered for the closed one. */
static void set_watch_at(dlock__loop *lp, int *fdp, int *whatp,
                         unsigned *socketp, int fd, int what, unsigned socket) {
  if (fd >= 0 && what == 0)
    fd = -1;
  if (*fdp == fd && *whatp == what && *socketp == socket)
    return;
  if (*fdp >= 0 && (*fdp != fd || *socketp != socket)) {
    lp->on_socket(lp->c, *fdp, DLOCK_POLL_REMOVE, lp->data);
    *whatp = 0;
  }
  *fdp = fd;
  *socketp = socket;
  if (fd >= 0 && *whatp != what)
    lp->on_socket(lp->c, fd, what, lp->data);
  *whatp = what;
}

static void set_watch(dlock__loop *lp, int i, int fd, int what,
                      unsigned socket) {
  set_watch_at(lp, &lp->fd[i], &lp->what[i], &lp->socket[i], fd, what, socket);
}

/* Each link's descriptors (its connection, its node's sharded pub/sub),
 * every one of them forgotten when 'off'; returns the earliest time one of
 * them needs. */
static int64_t watch_nodes(dlock__loop *lp, int off) {
  int64_t at = INT64_MAX;
  if (!off && dlock__loop_know_nodes(lp) != 0)
    return at;
  for (int i = 0; i < lp->nnodes; i++) {
    dlock__lnode *nd = &lp->nodes[i];
    for (int k = 0; k < 2; k++) {
      int fd = -1;
      short events = 0;
      int64_t until = INT64_MAX;
      unsigned socket = nd->socket[k];
      if (!off && k == 0)
        dlock__conn_watch(dlock__route_link(&lp->c->route, i), &fd, &events,
                          &until, &socket);
      else if (!off && nd->sub != NULL)
        dlock__lsub_watch(nd->sub, &fd, &events, &until, &socket);
      set_watch_at(lp, &nd->fd[k], &nd->what[k], &nd->socket[k], fd,
                   poll_to_what(events), socket);
      if (until < at)
        at = until;
    }
  }
  return at;
}

/* Services each link's connections. */
static void service_nodes(dlock__loop *lp) {
  (void)dlock__loop_know_nodes(lp);
  for (int i = 0; i < lp->nnodes; i++) {
    dlock__conn_service(dlock__route_link(&lp->c->route, i));
    if (lp->nodes[i].sub != NULL)
      dlock__lsub_service(lp->nodes[i].sub);
  }
}

static int64_t earliest_op(const dlock__loop *lp) {
  int64_t at = lp->ready != NULL ? 0 : INT64_MAX;
  for (const dlock__aop *op = lp->ops; op != NULL; op = op->next) {
    if (op->at_us < at)
      at = op->at_us;
  }
  return at < lp->renew_at ? at : lp->renew_at;
}

void dlock__loop_update_watch(dlock__loop *lp) {
  if (!lp->attached)
    return;
  int fd;
  short events;
  unsigned socket;
  int64_t until, at = earliest_op(lp);
  until = watch_nodes(lp, 0);
  if (until < at)
    at = until;
  dlock__lsub_watch(lp->sub, &fd, &events, &until, &socket);
  set_watch(lp, DLOCK__LOOP_SUB, fd, poll_to_what(events), socket);
  if (until < at)
    at = until;
  /* The watcher may open another connection at any step: its descriptor
   * is registered again after each. */
  set_watch(lp, DLOCK__LOOP_WATCHER, lp->watch.fd,
            poll_to_what(lp->watch.events), lp->watch_steps);
  if (lp->watch.until_us < at)
    at = lp->watch.until_us;
  if (at == lp->timer_at)
    return;
  lp->timer_at = at;
  int64_t ms = -1;
  if (at != INT64_MAX) {
    int64_t now = dlock__now_us();
    ms = at <= now ? 0 : (at - now + 999) / 1000;
  }
  lp->on_timer(lp->c, ms, lp->data);
}

void dlock__loop_service(dlock__loop *lp) {
  service_nodes(lp);
  dlock__lsub_service(lp->sub);
}

void dlock__loop_unwatch(dlock__loop *lp) {
  if (!lp->attached)
    return;
  set_watch(lp, DLOCK__LOOP_SUB, -1, 0, lp->socket[DLOCK__LOOP_SUB]);
  set_watch(lp, DLOCK__LOOP_WATCHER, -1, 0, lp->socket[DLOCK__LOOP_WATCHER]);
  (void)watch_nodes(lp, 1);
  if (lp->timer_at != INT64_MAX)
    lp->on_timer(lp->c, -1, lp->data);
  lp->timer_at = INT64_MAX;
}
