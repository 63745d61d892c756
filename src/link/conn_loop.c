/*
 * The shared command connection driven by an event loop (see conn.h): the
 * loop asks what the connection waits for (a descriptor's readiness and a
 * time), and calls dlock__conn_service when either comes. The service
 * does what the driver does between two polls (conn_driver.c), without
 * ever waiting: steps the connect and handshake, writes the output, reads
 * and completes replies, completes requests past their deadlines, and
 * fails a connection that stopped answering. A loop's connection has no
 * blocking callers, so the service is its only reader.
 */
#define _GNU_SOURCE
#include "conn_internal.h"

#include "error.h"
#include "fork.h"
#include "monotime.h"

#include <poll.h>
#include <pthread.h>
#include <stdio.h>

void dlock__conn_watch(dlock__conn *c, int *fd, short *events,
                       int64_t *until_us, unsigned *socket) {
  *fd = -1;
  *events = 0;
  *until_us = INT64_MAX;
  pthread_mutex_lock(&c->mu);
  *socket = c->sockets;
  if (c->ctx != NULL) {
    *fd = dlock__stream_fd(c->ctx);
    *events = is_ready(c) ? (short)(POLLIN | (has_output(c) ? POLLOUT : 0))
                          : dlock__stream_events(c->ctx);
    int64_t dead = dlock__conn_dead_at(c),
            next = dlock__conn_submit_deadline(c);
    *until_us = dead < next ? dead : next;
  }
  /* Without a stream nothing is awaited: a failure completed every
   * request, and the next submission connects again. */
  pthread_mutex_unlock(&c->mu);
}

/* Steps the connect and its handshake; 1 while it is not done yet. */
static int step_handshake_locked(dlock__conn *c) {
  int rc = dlock__stream_step(c->ctx);
  if (rc < 0) {
    /* As the driver: a failed connect backs off like a timeout. */
    c->timed_out = 1;
    dlock__conn_fail_all_locked(c, rc, dlock_last_error());
    return 1;
  }
  if (rc != 0)
    return 1;
  c->backoff_us = 0;
  c->last_code = 0;
  if (!c->writing)
    dlock__conn_write_out_locked(c);
  return 0;
}

/* Reads what came and completes its requests; 0, or -1 when the
 * connection failed. */
static int read_replies_locked(dlock__conn *c) {
  char why[200];
  if (dlock__stream_read(c->ctx) != 0) {
    snprintf(why, sizeof(why), "read: %s", dlock_last_error());
    dlock__conn_fail_all_locked(c, DLOCK_EIO, why);
    return -1;
  }
  if (dlock__conn_dispatch_locked(c) != 0) {
    const char *proto = dlock__stream_proto_error(c->ctx);
    snprintf(why, sizeof(why), "bad reply from server: %s",
             proto[0] != '\0' ? proto : "reply without a request");
    dlock__conn_fail_all_locked(c, DLOCK_EPROTO, why);
    return -1;
  }
  return 0;
}

/* Fails a connection that has not answered for a command timeout, and
 * completes submitted requests past their own deadlines. */
static void check_deadlines_locked(dlock__conn *c) {
  if (c->ctx == NULL)
    return;
  if (dlock__now_us() >= dlock__conn_dead_at(c)) {
    char why[100];
    if (is_ready(c))
      snprintf(why, sizeof(why), "no reply from Redis within %lld ms",
               (long long)c->cfg.command_timeout_ms);
    else
      snprintf(why, sizeof(why), "%s", "connecting to Redis timed out");
    c->timed_out = 1;
    /* The handshake's own deadline gives its error at the next step. */
    if (!is_ready(c) && step_handshake_locked(c) == 0)
      return;
    if (c->ctx != NULL)
      dlock__conn_fail_all_locked(c, DLOCK_EIO, why);
    return;
  }
  if (c->nsubmitted > 0 && dlock__conn_expire_submitted_locked(c) != 0)
    dlock__conn_fail_all_locked(c, DLOCK_ENOMEM,
                                "out of memory giving up a call");
}

void dlock__conn_service(dlock__conn *c) {
  if (dlock__forked_since(c->fork_gen))
    return;
  pthread_mutex_lock(&c->mu);
  dlock__conn_service_locked(c);
  dlock__conn_unlock(c);
}

void dlock__conn_service_locked(dlock__conn *c) {
  if (c->broken_code != 0 && c->ctx != NULL) {
    dlock__conn_fail_all_locked(c, c->broken_code, c->last_err);
  } else if (c->ctx != NULL && !is_ready(c)) {
    if (step_handshake_locked(c) != 0 && c->ctx != NULL)
      check_deadlines_locked(c);
  } else if (c->ctx != NULL) {
    if (has_output(c))
      dlock__conn_write_out_locked(c);
    if (c->ctx != NULL && read_replies_locked(c) == 0 && c->ctx != NULL) {
      /* What completions queued meanwhile goes out in one write. */
      if (has_output(c))
        dlock__conn_write_out_locked(c);
      check_deadlines_locked(c);
    }
  }
}
