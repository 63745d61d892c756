/*
 * Writing the commands queued on the shared command connection (see
 * conn.h).
 */
#define _GNU_SOURCE
#include "conn_internal.h"

#include "error.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

/*
 * Writes the pending output without blocking (group commit). Called with
 * 'mu' held, a connection and nobody writing; returns with 'mu' held. The
 * send() runs outside 'mu', so that other threads append their commands
 * meanwhile instead of blocking on the mutex; they leave the writing to
 * this thread, which sends whatever accumulated once its send() returns,
 * until nothing is left. Commands issued together thus reach the server in
 * one segment, which it reads and answers in one go, while a lone caller
 * still costs exactly one send(). Output the socket does not take (it is
 * full) stays in 'wbuf' for the driver, which writes it when the socket
 * drains. A TLS stream is written under 'mu' instead (OpenSSL must not
 * write while the driver reads): callers then queue behind the mutex, and
 * what they queued goes out in the writer's next turn.
 */
void dlock__conn_write_out_locked(dlock__conn *c) {
  dlock__stream *ctx = c->ctx;
  int err = 0;
  char tls_why[200] = "";
  c->writing = 1;
  c->socket_full = 0;
  for (;;) {
    if (sdslen(c->wbuf) == 0) {
      /* Take the output whole, leaving the stream an empty buffer (the one
       * just written) to append to. */
      sds empty = c->wbuf;
      c->wbuf = ctx->obuf;
      ctx->obuf = empty;
    }
    sds buf = c->wbuf;
    size_t len = sdslen(buf);
    if (len == 0)
      break;
    if (dlock__net_is_tls(ctx->net)) {
      /* Under 'mu' (see conn_internal.h). Commands that others append
       * meanwhile wait for the mutex and go out in the next turn. */
      long w = dlock__stream_write(ctx, buf, len);
      dlock__stat_add(c->cfg.stats, DLOCK__ST_PIPELINES, w > 0);
      if (w < 0) {
        snprintf(tls_why, sizeof(tls_why), "write: %s", dlock_last_error());
        break;
      }
      sdsrange(c->wbuf, w, -1);
      if ((size_t)w < len) {
        c->socket_full = 1;
        break;
      }
      continue;
    }
    int fd = dlock__stream_fd(ctx);
    /* Callers to wake are woken after the send: woken first, they would
     * take the CPU from it and the server would wait for the commands. */
    wake_batch wakes;
    dlock__conn_take_wakes_locked(c, &wakes);
    c->sending = ctx;
    dlock__conn_check_locked(c);
    pthread_mutex_unlock(&c->mu);
    /* MSG_NOSIGNAL: a server that went away must give us EPIPE, not kill
     * the program with SIGPIPE. */
    ssize_t n = send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    int send_errno = errno;
    dlock__stat_add(c->cfg.stats, DLOCK__ST_PIPELINES, n > 0);
    dlock__conn_make_wakes(&wakes);
    pthread_mutex_lock(&c->mu);
    c->sending = NULL;
    if (c->ctx != ctx) {
      /* The connection failed meanwhile and its requests with it. Threads
       * that left their commands to this writer may have queued them on a
       * new connection since: those are written now. */
      sdsclear(c->wbuf);
      if (c->zombie != NULL) {
        dlock__stream_free(c->zombie);
        c->zombie = NULL;
      }
      ctx = c->ctx;
      /* A new connection still in its handshake takes no commands yet:
       * whoever drives it writes them once it is ready. */
      if (ctx == NULL || !dlock__stream_ready(ctx))
        break;
      continue;
    }
    if (n < 0) {
      if (send_errno == EINTR)
        continue;
      if (send_errno != EAGAIN && send_errno != EWOULDBLOCK)
        err = send_errno;
      c->socket_full = 1;
      break;
    }
    sdsrange(c->wbuf, n, -1);
    if ((size_t)n < len) {
      c->socket_full = 1;
      break;
    }
  }
  c->writing = 0;
  if (c->zombie != NULL) {
    dlock__stream_free(c->zombie);
    c->zombie = NULL;
  }
  if (err != 0) {
    char why[200];
    snprintf(why, sizeof(why), "write: %s", strerror(err));
    dlock__conn_break_locked(c, DLOCK_EIO, why);
  } else if (tls_why[0] != '\0') {
    dlock__conn_break_locked(c, DLOCK_EIO, tls_why);
  }
}
