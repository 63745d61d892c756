/*
 * An async client's loop (see loop.h): what the application watches, the
 * operations in progress and their ready queue, and requests whose answer
 * comes back to an operation.
 */
#include "loop.h"

#include "alloc.h"
#include "error.h"
#include "machine.h"
#include "monotime.h"
#include "proto/format.h"

#include <poll.h>
#include <stdio.h>
#include <string.h>

int dlock__loop_new(dlock_client_t *c, dlock__loop **out) {
  dlock__loop *lp = dlock__calloc(1, sizeof(*lp));
  if (lp == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory opening a client");
  lp->c = c;
  lp->fd[0] = lp->fd[1] = -1;
  lp->timer_at = INT64_MAX;
  lp->renew_at = INT64_MAX;
  int rc = dlock__lsub_new(&c->ep, c->tls, c->opt.connect_timeout_ms,
                           c->opt.command_timeout_ms, &lp->sub);
  if (rc != 0) {
    dlock__free(lp);
    return rc;
  }
  *out = lp;
  return 0;
}

/* ---- operations --------------------------------------------------------- */

void dlock__loop_add(dlock__loop *lp, dlock__aop *op) {
  op->lp = lp;
  op->at_us = INT64_MAX;
  op->prev = NULL;
  op->next = lp->ops;
  if (lp->ops != NULL)
    lp->ops->prev = op;
  lp->ops = op;
  lp->nops++;
}

static void unqueue(dlock__aop *op) {
  dlock__loop *lp = op->lp;
  if (!op->queued)
    return;
  dlock__aop *prev = NULL;
  for (dlock__aop *x = lp->ready; x != NULL; prev = x, x = x->rnext) {
    if (x != op)
      continue;
    if (prev != NULL)
      prev->rnext = op->rnext;
    else
      lp->ready = op->rnext;
    if (lp->ready_tail == op)
      lp->ready_tail = prev;
    break;
  }
  op->queued = 0;
  op->rnext = NULL;
}

void dlock__loop_remove(dlock__aop *op) {
  dlock__loop *lp = op->lp;
  unqueue(op);
  if (op->prev != NULL)
    op->prev->next = op->next;
  else
    lp->ops = op->next;
  if (op->next != NULL)
    op->next->prev = op->prev;
  lp->nops--;
  if (op->reply != NULL)
    freeReplyObject(op->reply);
  op->reply = NULL;
}

void dlock__loop_ready(dlock__aop *op) {
  dlock__loop *lp = op->lp;
  if (op->queued)
    return;
  op->queued = 1;
  op->rnext = NULL;
  if (lp->ready_tail != NULL)
    lp->ready_tail->rnext = op;
  else
    lp->ready = op;
  lp->ready_tail = op;
}

/* ---- requests ----------------------------------------------------------- */

/* A request's completion, inside the connection's service with its mutex
 * held: the answer is kept for the operation's step. */
static void on_answer(dlock__request *r, redisReply *reply, int err,
                      const char *detail) {
  dlock__aop *op = r->arg;
  op->in_flight = 0;
  op->reply = reply;
  op->err = err;
  snprintf(op->detail, sizeof(op->detail), "%s", detail != NULL ? detail : "");
  dlock__loop_ready(op);
}

int dlock__loop_send(dlock__aop *op, const char *cmd, size_t len) {
  dlock_client_t *c = op->lp->c;
  if (op->reply != NULL)
    freeReplyObject(op->reply);
  op->reply = NULL;
  op->err = 0;
  op->in_flight = 1;
  int rc = dlock__conn_submit(c->route.conn, cmd, len, 0, on_answer, op);
  if (rc != 0)
    op->in_flight = 0;
  return rc;
}

static int send_eval(dlock__aop *op, const dlock__eval *call, int with_body) {
  char *cmd;
  size_t len;
  int rc = dlock__eval_format(call, with_body, &cmd, &len);
  if (rc != 0)
    return rc;
  rc = dlock__loop_send(op, cmd, len);
  dlock__format_free(cmd);
  return rc;
}

int dlock__loop_eval(dlock__aop *op, const dlock__eval *call) {
  return send_eval(op, call, 0);
}

static int is_noscript(const redisReply *r) {
  return r != NULL && r->type == REDIS_REPLY_ERROR && r->len >= 8 &&
         memcmp(r->str, "NOSCRIPT", 8) == 0;
}

int dlock__loop_eval_answer(dlock__aop *op, const dlock__eval *call,
                            redisReply **reply) {
  *reply = NULL;
  if (op->err != 0)
    return dlock__fail(op->err, "%s", op->detail);
  redisReply *r = op->reply;
  op->reply = NULL;
  if (is_noscript(r)) {
    /* Not loaded (a restart, SCRIPT FLUSH): sent again with its body,
     * which loads it for the next EVALSHA. */
    freeReplyObject(r);
    int rc = send_eval(op, call, 1);
    return rc != 0 ? rc : DLOCK__ACQ_INFLIGHT;
  }
  if (r != NULL && r->type == REDIS_REPLY_ERROR) {
    int rc = dlock__fail_reply_in(r->str, r->len, call->script->name);
    freeReplyObject(r);
    return rc;
  }
  *reply = r;
  return 0;
}

/* ---- what the application watches --------------------------------------- */

static int poll_to_what(short events) {
  return ((events & POLLIN) ? DLOCK_POLL_IN : 0) |
         ((events & POLLOUT) ? DLOCK_POLL_OUT : 0);
}

/* Tells the application that descriptor slot 'i' is now socket number
 * 'socket' on 'fd', for 'what' (0: not watched). A new socket on the
 * number of a closed one is removed and added again, so that the loop
 * does not go on watching what it registered for the closed one. */
static void set_watch(dlock__loop *lp, int i, int fd, int what,
                      unsigned socket) {
  if (fd >= 0 && what == 0)
    fd = -1;
  if (lp->fd[i] == fd && lp->what[i] == what && lp->socket[i] == socket)
    return;
  if (lp->fd[i] >= 0 && (lp->fd[i] != fd || lp->socket[i] != socket)) {
    lp->on_socket(lp->c, lp->fd[i], DLOCK_POLL_REMOVE, lp->data);
    lp->what[i] = 0;
  }
  lp->fd[i] = fd;
  lp->socket[i] = socket;
  if (fd >= 0 && lp->what[i] != what)
    lp->on_socket(lp->c, fd, what, lp->data);
  lp->what[i] = what;
}

static int64_t earliest_op(const dlock__loop *lp) {
  int64_t at = lp->ready != NULL ? 0 : INT64_MAX;
  for (const dlock__aop *op = lp->ops; op != NULL; op = op->next) {
    if (op->at_us < at)
      at = op->at_us;
  }
  return at < lp->renew_at ? at : lp->renew_at;
}

/* Tells the application what to watch now. */
static void update_watch(dlock__loop *lp) {
  if (!lp->attached)
    return;
  int fd;
  short events;
  unsigned socket;
  int64_t until, at = earliest_op(lp);
  dlock__conn_watch(lp->c->route.conn, &fd, &events, &until, &socket);
  set_watch(lp, 0, fd, poll_to_what(events), socket);
  if (until < at)
    at = until;
  dlock__lsub_watch(lp->sub, &fd, &events, &until, &socket);
  set_watch(lp, 1, fd, poll_to_what(events), socket);
  if (until < at)
    at = until;
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

int dlock__loop_attach(dlock__loop *lp, dlock_socket_cb on_socket,
                       dlock_timer_cb on_timer, void *data) {
  if (lp->attached)
    return dlock__fail(DLOCK_EINVAL, "the client is attached to a loop");
  lp->on_socket = on_socket;
  lp->on_timer = on_timer;
  lp->data = data;
  lp->attached = 1;
  lp->timer_at = INT64_MIN; /* tell it, whatever it is */
  update_watch(lp);
  return 0;
}

/* Makes the operations whose time came ready. */
static void ready_timers(dlock__loop *lp) {
  int64_t now = dlock__now_us();
  for (dlock__aop *op = lp->ops; op != NULL; op = op->next) {
    if (op->at_us <= now) {
      op->at_us = INT64_MAX;
      dlock__loop_ready(op);
    }
  }
}

/* Runs the ready operations, and those that their steps make ready. */
static void run_ready(dlock__loop *lp) {
  while (lp->ready != NULL && !lp->closing) {
    dlock__aop *op = lp->ready;
    lp->ready = op->rnext;
    if (lp->ready == NULL)
      lp->ready_tail = NULL;
    op->queued = 0;
    op->rnext = NULL;
    op->run(op);
  }
}

void dlock__loop_action(dlock__loop *lp, int fd, int events) {
  (void)events;
  /* The application's timer ran out and is gone: it is told the next
   * one whatever it is, also when its clock ran a little ahead of ours. */
  if (fd == DLOCK_SOCKET_TIMEOUT)
    lp->timer_at = INT64_MIN;
  /* A callback that calls back in (dlock_loop_action from inside a
   * callback) finds its work done by the outer call. */
  if (lp->dispatching)
    return;
  lp->dispatching = 1;
  /* Both connections are serviced whatever the descriptor: servicing
   * one that has nothing to do costs a look at its state only. */
  dlock__conn_service(lp->c->route.conn);
  dlock__lsub_service(lp->sub);
  ready_timers(lp);
  if (dlock__now_us() >= lp->renew_at)
    dlock__loop_renew(lp);
  run_ready(lp);
  lp->dispatching = 0;
  if (!lp->closing)
    update_watch(lp);
}

void dlock__loop_poke(dlock__loop *lp) {
  if (!lp->dispatching)
    update_watch(lp);
}

/* ---- closing ------------------------------------------------------------ */

void dlock__loop_cancel_all(dlock__loop *lp) {
  if (lp->closing)
    return;
  lp->closing = 1;
  if (lp->attached) {
    set_watch(lp, 0, -1, 0, lp->socket[0]);
    set_watch(lp, 1, -1, 0, lp->socket[1]);
    if (lp->timer_at != INT64_MAX)
      lp->on_timer(lp->c, -1, lp->data);
    lp->timer_at = INT64_MAX;
  }
  /* The answers already on their way come in first, so that what they
   * granted is given back: bounded by the command timeout. */
  dlock_client_t *c = lp->c;
  (void)dlock__conn_pump(c->route.conn,
                         dlock__deadline_ms(c->opt.command_timeout_ms));
  /* Each cancel takes its operation out (and may add none: the verbs
   * refuse a closing client). */
  while (lp->ops != NULL)
    lp->ops->cancel(lp->ops);
}

void dlock__loop_free(dlock__loop *lp) {
  if (lp == NULL)
    return;
  dlock__loop_cancel_all(lp);
  /* Last: whatever the loop keeps for the client can go. */
  if (lp->attached)
    lp->on_socket(lp->c, -1, DLOCK_POLL_REMOVE, lp->data);
  dlock__lsub_free(lp->sub);
  dlock__free(lp);
}
