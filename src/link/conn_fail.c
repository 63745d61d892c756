/*
 * Failing the shared command connection (see conn.h): every request in
 * flight fails with the reason, the socket goes, and the next connect
 * waits for the back-off.
 */
#define _GNU_SOURCE
#include "conn_internal.h"

#include "alloc.h"
#include "error.h"
#include "monotime.h"

#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

/* Reconnection back-off: the first retry is immediate (a restarted server
 * is usually back already), later ones wait longer, so that callers fail
 * fast while the server is down instead of each paying a connect timeout. */
#define BACKOFF_FIRST_US 20000
#define BACKOFF_MAX_US 1000000

/* ---- failure and reconnection ------------------------------------------- */

/* Completes every waiting request with 'code', closes the socket and arranges
 * the next reconnection. Only the driver, or anybody while there is no
 * driver, may call this. */
void dlock__conn_fail_all_locked(dlock__conn *c, int code, const char *why) {
  if (c->broken_code != 0) {
    /* The reason given by whoever broke the connection beats the driver's
     * view of it ("connection reset"). */
    code = c->broken_code;
    c->broken_code = 0;
  } else {
    snprintf(c->last_err, sizeof(c->last_err), "%s", why);
  }
  c->last_code = code;
  dlock__conn_complete_all_locked(c, code, c->last_err);
  if (c->ctx != NULL) {
    if (c->ctx == c->sending) {
      /* A thread is sending on this socket outside 'mu': closing it now
       * could let the descriptor be reused under that send. It is only
       * shut down, and the writer frees it when it is back. */
      shutdown(dlock__stream_fd(c->ctx), SHUT_RDWR);
      c->zombie = c->ctx;
    } else {
      dlock__stream_free(c->ctx);
    }
    /* What the socket did not take goes with it; while a send is under way
     * 'wbuf' is the writer's, and it drops it when it sees the change. */
    if (!c->writing)
      sdsclear(c->wbuf);
    c->ctx = NULL;
  }

  /* A server that went silent (paused, overloaded) is given a moment
   * before the next connect, which would otherwise block a caller for the
   * whole handshake; one that closed the connection is usually back at
   * once (a restart), so the first retry there is immediate. */
  if (c->timed_out && c->backoff_us < BACKOFF_FIRST_US)
    c->backoff_us = BACKOFF_FIRST_US;
  c->timed_out = 0;
  c->retry_at_us = dlock__now_us() + c->backoff_us;
  c->backoff_us = c->backoff_us == 0 ? BACKOFF_FIRST_US : c->backoff_us * 2;
  if (c->backoff_us > BACKOFF_MAX_US)
    c->backoff_us = BACKOFF_MAX_US;
}

/* Wakes whoever polls the wake-up pipe: the driver, or a lookup through
 * the Sentinels. A full pipe already holds a wake-up, so a failed write
 * is fine. */
void dlock__conn_wake_pipe(dlock__conn *c) {
  char one = 1;
  ssize_t w = write(c->wake_fd[1], &one, 1);
  (void)w;
}

/* Fails the connection from a thread that may not be the driver: with a
 * driver polling the socket, the socket is only shut down (which wakes the
 * driver) and the driver closes it. */
void dlock__conn_break_locked(dlock__conn *c, int code, const char *why) {
  if (!c->driving) {
    dlock__conn_fail_all_locked(c, code, why);
    return;
  }
  if (c->broken_code == 0) {
    c->broken_code = code;
    snprintf(c->last_err, sizeof(c->last_err), "%s", why);
  }
  shutdown(dlock__stream_fd(c->ctx), SHUT_RDWR);
  dlock__conn_wake_pipe(c);
}

void dlock__conn_drain_wake(dlock__conn *c) {
  char buf[64];
  while (read(c->wake_fd[0], buf, sizeof(buf)) > 0) {
  }
}

/* An opener's deadline passed before the handshake was done: the
 * connection fails, as at the handshake's own deadline, and backs off. */
void dlock__conn_handshake_overdue_locked(dlock__conn *c, caller *me) {
  int rc = dlock__stream_overdue(c->ctx, dlock__now_us() - me->start_us);
  c->timed_out = 1;
  dlock__conn_fail_all_locked(c, rc != 0 ? rc : DLOCK_EIO, dlock_last_error());
}
