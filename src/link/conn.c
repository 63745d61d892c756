/*
 * The shared command connection (see conn.h for the scheme and
 * conn_internal.h for its files): the request queue, and the calls that
 * send commands and wait for their replies.
 */
#define _GNU_SOURCE
#include "conn_internal.h"

#include "alloc.h"
#include "error.h"
#include "fork.h"
#include "monotime.h"

#include <assert.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- the request queue -------------------------------------------------- */

/* Reads one bulk string of a formatted command at '*p' (before 'end'):
 * 0 with its text and length, -1 when it is not one. */
static int bulk_at(const char **p, const char *end, const char **text,
                   long *len) {
  if (*p >= end || **p != '$')
    return -1;
  char *after;
  long n = strtol(*p + 1, &after, 10);
  if (after + 2 > end || after[0] != '\r' || after[1] != '\n' || n < 0 ||
      n > end - after - 4)
    return -1;
  *text = after + 2;
  *len = n;
  *p = after + 2 + n + 2;
  return 0;
}

/* How long the server may hold the reply to the formatted command 'cmd'
 * back on purpose: the timeout of a WAIT or a WAITAOF, its last argument
 * (replica sync pipelines one after a lock write, and a timeout longer
 * than the command timeout must end with its answer, not with the
 * connection called dead); 0 for any other command and for a timeout of
 * 0 (no limit, which dlock never sends). */
static int64_t blocking_ms(const char *cmd, size_t len) {
  const char *end = cmd + len, *p = cmd + 4, *text;
  long n;
  if (len < 4 || cmd[0] != '*' || (cmd[1] != '3' && cmd[1] != '4') ||
      cmd[2] != '\r' || cmd[3] != '\n' || bulk_at(&p, end, &text, &n) != 0)
    return 0;
  int args = cmd[1] - '0';
  if (!(args == 3 && n == 4 && strncasecmp(text, "WAIT", 4) == 0) &&
      !(args == 4 && n == 7 && strncasecmp(text, "WAITAOF", 7) == 0))
    return 0;
  for (int i = 1; i < args; i++)
    if (bulk_at(&p, end, &text, &n) != 0)
      return 0;
  int64_t ms = 0;
  for (long i = 0; i < n && ms < INT64_MAX / 20; i++) {
    if (text[i] < '0' || text[i] > '9')
      return 0;
    ms = ms * 10 + (text[i] - '0');
  }
  return ms;
}

int dlock__conn_enqueue_locked(dlock__conn *c, size_t n, char *const *cmds,
                               const size_t *lens, request *reqs,
                               dlock__conn_done done, void *arg) {
  for (size_t i = 0; i < n; i++) {
    if (dlock__stream_append(c->ctx, cmds[i], lens[i]) != 0) {
      /* The partial batch in the output buffer would desynchronise the
       * stream, so the connection goes. */
      dlock__conn_break_locked(c, DLOCK_ENOMEM,
                               "out of memory queueing a command");
      return DLOCK_ENOMEM;
    }
  }
  dlock__stat_add(c->cfg.stats, DLOCK__ST_COMMANDS, n);
  int64_t now = dlock__now_us();
  for (size_t i = 0; i < n; i++) {
    reqs[i].done = done;
    reqs[i].arg = arg;
    reqs[i].sent_us = now;
    reqs[i].deadline_us = INT64_MAX;
    reqs[i].block_ms = blocking_ms(cmds[i], lens[i]);
    if (c->tail != NULL)
      c->tail->next = &reqs[i];
    else
      c->head = &reqs[i];
    c->tail = &reqs[i];
  }
  return 0;
}

/* The waiter's completion: the reply (or the first failure and why) is
 * stored for it, and it is woken when the last of its requests is in,
 * unless it is the one reading. */
static void waiter_done(request *r, redisReply *reply, int err,
                        const char *detail) {
  caller *me = r->arg;
  r->reply = reply;
  r->err = err;
  if (err != 0 && me->err == 0) {
    me->err = err;
    snprintf(me->detail, sizeof(me->detail), "%s", detail);
  }
  assert(me->remaining > 0);
  if (--me->remaining == 0 && me != me->conn->driver)
    dlock__conn_notify_locked(me->conn, me, WAKE_DONE);
}

/*
 * Whether commands just queued are left for the driver to send with the
 * next reply it reads, rather than cost a send() of their own: while an
 * earlier request is in flight, Redis answers this connection's commands
 * in order, so these could not be answered before it anyway; sent as it
 * answers, they cost at most the one round trip that their own send would
 * have overlapped, and everything queued meanwhile goes out in one write,
 * as an event loop sends it. A lone caller (nothing in flight before its
 * own requests) always sends at once.
 */
int dlock__conn_leave_to_driver(const dlock__conn *c, const request *mine) {
  return c->driving && c->head != NULL && c->head != mine;
}

static int send_common(dlock__conn *c, size_t n, char *const *cmds,
                       const size_t *lens, int64_t deadline_us, int64_t idle_ms,
                       int64_t limit_us, dlock__pending *p) {
  /* All but the failure text, which is written before it is read. */
  memset(p, 0, offsetof(dlock__pending, me.detail));
  p->conn = c;
  p->n = n;
  /* In a child of fork() the socket is the parent's: never touch it. */
  if (dlock__forked_since(c->fork_gen)) {
    p->rc = dlock__fail_forked();
    return p->rc;
  }
  p->reqs =
      n <= DLOCK__PENDING_LOCAL ? p->local : dlock__calloc(n, sizeof(request));
  if (p->reqs == NULL) {
    p->rc = dlock__fail(DLOCK_ENOMEM, "out of memory for %zu requests", n);
    return p->rc;
  }
  caller *me = &p->me;
  me->conn = c;
  me->remaining = n;
  me->start_us = dlock__now_us();
  if (idle_ms > 0) {
    me->idle_us = idle_ms > INT64_MAX / 1000 ? INT64_MAX / 2 : idle_ms * 1000;
    me->limit_us = limit_us;
    me->deadline_us = dlock__deadline_ms(idle_ms);
  } else {
    me->deadline_us = deadline_us
                          ? deadline_us
                          : dlock__deadline_ms(c->cfg.command_timeout_ms);
  }
  p->rc = dlock__conn_caller_init(c, me);
  if (p->rc != 0) {
    if (p->reqs != p->local)
      dlock__free(p->reqs);
    p->reqs = NULL;
    return p->rc;
  }

  pthread_mutex_lock(&c->mu);
  int rc = dlock__conn_link_locked(c, caller_deadline(c, me));
  if (rc == 0)
    rc = dlock__conn_enqueue_locked(c, n, cmds, lens, p->reqs, waiter_done, me);
  /* A thread already writing sends these commands too; on a connection
   * still in its handshake they wait for it (dlock__conn_drive_locked). */
  if (rc == 0 && !c->writing && is_ready(c) &&
      !dlock__conn_leave_to_driver(c, p->reqs))
    dlock__conn_write_out_locked(c);
  dlock__conn_unlock(c);
  p->rc = rc;
  return rc;
}

int dlock__conn_send(dlock__conn *c, size_t n, char *const *cmds,
                     const size_t *lens, int64_t deadline_us,
                     dlock__pending *p) {
  return send_common(c, n, cmds, lens, deadline_us, 0, 0, p);
}

int dlock__conn_send_paced(dlock__conn *c, size_t n, char *const *cmds,
                           const size_t *lens, int64_t idle_ms,
                           int64_t limit_us, dlock__pending *p) {
  return send_common(c, n, cmds, lens, 0, idle_ms > 0 ? idle_ms : 1, limit_us,
                     p);
}

/* ---- waiting ------------------------------------------------------------ */

int dlock__conn_wait(dlock__pending *p, redisReply **replies) {
  return dlock__conn_wait_until(p, replies, INT64_MAX);
}

void dlock__conn_expire(dlock__pending *p) {
  if (p->reqs == NULL)
    return;
  dlock__conn *c = p->conn;
  pthread_mutex_lock(&c->mu);
  int64_t now = dlock__now_us();
  if (p->me.deadline_us > now)
    p->me.deadline_us = now;
  if (p->me.idle_us > 0 && p->me.limit_us > now)
    p->me.limit_us = now;
  dlock__conn_unlock(c);
}

int dlock__conn_wait_until(dlock__pending *p, redisReply **replies,
                           int64_t until_us) {
  dlock__conn *c = p->conn;
  int rc = p->rc;
  if (p->reqs == NULL)
    return rc;
  pthread_mutex_lock(&c->mu);
  p->me.waiting = 1;
  p->me.until_us = until_us;
  int answered = 0; /* the replies came while parked; 'mu' is released */
  int tried = 0;
  while (rc == 0 && p->me.remaining > 0) {
    if (tried && dlock__now_us() >= until_us) {
      /* The turn is over: the requests stay this caller's, to be waited
       * for again, and the reading goes to whoever else waits. */
      p->me.waiting = 0;
      if (!c->driving)
        dlock__conn_pass_role_locked(c, &p->me);
      dlock__conn_unlock(c);
      return DLOCK__CONN_AGAIN;
    }
    tried = 1;
    if (!c->driving) {
      dlock__conn_drive_locked(c, &p->me);
      continue;
    }
    /* Someone else reads; past our own deadline we stop waiting for it. */
    if (dlock__conn_park(c, &p->me)) {
      answered = 1;
      break;
    }
    /* Only while somebody still reads: a caller woken to take over the
     * reading (the driver left) reads what has come and passes the role
     * on in dlock__conn_drive_locked even when its own time is up, or every
     * other caller would wait for replies that sit unread on the socket. */
    if (p->me.remaining > 0 && c->driving &&
        dlock__now_us() >= caller_deadline(c, &p->me)) {
      if (dlock__conn_give_up_locked(c, &p->me) != 0)
        dlock__conn_break_locked(c, DLOCK_ENOMEM,
                                 "out of memory giving up a call");
    }
  }
  if (!answered) {
    p->me.waiting = 0;
#ifndef NDEBUG
    /* Nothing in the queue refers to this caller's frame any more. */
    for (const request *r = c->head; r != NULL; r = r->next)
      assert(r->arg != &p->me);
    assert(p->rc != 0 || p->me.remaining == 0);
#endif
    dlock__conn_unlock(c);
  }
  /* The usual case needs nothing more from the connection: a failure
   * carries its explanation. */
  if (rc == 0 && p->me.err != 0)
    rc = dlock__fail_text(p->me.err, p->me.detail);
  dlock__conn_caller_destroy(c, &p->me);
  for (size_t i = 0; i < p->n; i++) {
    if (rc == 0) {
      replies[i] = p->reqs[i].reply;
    } else {
      if (p->reqs[i].reply != NULL)
        freeReplyObject(p->reqs[i].reply);
      replies[i] = NULL;
    }
  }
  if (p->reqs != p->local)
    dlock__free(p->reqs);
  p->reqs = NULL;
  return rc;
}

int dlock__conn_call(dlock__conn *c, size_t n, char *const *cmds,
                     const size_t *lens, redisReply **replies,
                     int64_t deadline_us) {
  dlock__pending p;
  dlock__conn_send(c, n, cmds, lens, deadline_us, &p);
  return dlock__conn_wait(&p, replies);
}
