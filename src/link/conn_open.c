/*
 * Connecting the shared command connection (see conn.h).
 *
 * The sender that finds no connection starts one (resolving the host name
 * first, the one step that may block, with 'mu' released) and queues its
 * commands behind the handshake; the driver steps the connect and the
 * handshake (src/link/stream.c) as the socket becomes ready, exactly as it
 * reads replies (conn_driver.c), and writes the queued commands once it is
 * done.
 */
#define _GNU_SOURCE
#include "conn_internal.h"

#include "error.h"
#include "fork.h"
#include "monotime.h"

#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

/* An idle connection with something to read has been closed by the server
 * (a restart, a CLIENT KILL, an idle timeout): replace it before sending,
 * rather than lose the next command on it. */
static int idle_connection_is_dead(dlock__conn *c) {
  /* A connection that answered within the last millisecond is alive; the
   * check costs a system call, which a busy caller should not pay. */
  if (c->head != NULL || c->driving || c->writing || !is_ready(c) ||
      dlock__now_us() - c->last_reply_us < 1000)
    return 0;
  struct pollfd p = {.fd = dlock__stream_fd(c->ctx), .events = POLLIN};
  return poll(&p, 1, 0) != 0;
}

/* A lookup through the Sentinels started at cancel count 'cancels' ends
 * when dlock__conn_cancel is called meanwhile (it writes to the wake-up
 * pipe, which the lookup watches). */
typedef struct lookup_cancel {
  dlock__conn *c;
  unsigned cancels;
} lookup_cancel;

static int lookup_canceled(void *arg) {
  lookup_cancel *lc = arg;
  pthread_mutex_lock(&lc->c->mu);
  int canceled = lc->c->cancels != lc->cancels;
  pthread_mutex_unlock(&lc->c->mu);
  return canceled;
}

/*
 * Makes sure there is a connection, starting one if needed. Called and
 * returns with 'mu' held, and never waits for the server: the connect and
 * its handshake are driven by whoever waits for replies
 * (dlock__conn_drive_locked), as the socket becomes ready, while the commands
 * queue behind them. So a thread sending to several servers (a RedLock) starts
 * every connect at once, and a server that accepts but does not answer holds
 * nobody but the callers waiting for it, each until its own deadline, and a
 * cancel ends the wait at once.
 */
int dlock__conn_link_locked(dlock__conn *c, int64_t deadline_us) {
  unsigned cancels = c->cancels;
  /* Another thread is finding this server outside 'mu' (resolving its host
   * name, or looking the master up through the Sentinels): this caller
   * waits for that, up to its own deadline, looking again every
   * millisecond (it happens only at a connect, and takes round trips). */
  while (c->resolving || c->discovering) {
    if (c->cancels != cancels)
      return dlock__fail(DLOCK_ECANCELED, "client is shutting down");
    if (dlock__now_us() >= deadline_us)
      return dlock__fail(DLOCK_EIO,
                         c->discovering
                             ? "no connection: the master is being looked up "
                               "through the Sentinels, and the deadline passed"
                             : "no reply from Redis: still resolving its host "
                               "name");
    dlock__conn_unlock(c);
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
    pthread_mutex_lock(&c->mu);
  }
  /* The master moved (+switch-master): nothing more goes to the old one,
   * which may take writes until it is told it is a replica. */
  if (c->ctx != NULL && c->cfg.locator != NULL &&
      c->gen != c->cfg.locator->gen(c->cfg.locator->ctx))
    dlock__conn_break_locked(c, DLOCK_EIO,
                             "the master moved (Sentinel's +switch-master)");
  if (c->ctx != NULL && !idle_connection_is_dead(c))
    return 0;
  if (c->ctx != NULL)
    dlock__conn_fail_all_locked(c, DLOCK_EIO,
                                "connection closed by the server");
  int64_t now = dlock__now_us();
  if (now < c->retry_at_us)
    return dlock__fail(c->last_code ? c->last_code : DLOCK_EIO,
                       "%s (next reconnect in %lld ms)", c->last_err,
                       (long long)((c->retry_at_us - now + 999) / 1000));
  dlock__stream *ctx = NULL;
  unsigned gen = 0;
  int rc;
  struct addrinfo *addrs = NULL;
  if (c->cfg.locator == NULL && c->cfg.ep->path == NULL) {
    /* Resolving may block on DNS: not under 'mu', which the callers of
     * this server, a cancel and the driver of any other request need. */
    c->resolving = 1;
    dlock__conn_unlock(c);
    rc = dlock__net_resolve(c->cfg.ep, &addrs);
    pthread_mutex_lock(&c->mu);
    c->resolving = 0;
    if (rc == 0 && c->cancels != cancels)
      rc = dlock__fail(DLOCK_ECANCELED, "client is shutting down");
    if (rc != 0) {
      dlock__net_addrs_free(addrs);
      if (rc != DLOCK_ECANCELED) {
        c->timed_out = 1;
        dlock__conn_fail_all_locked(c, rc, dlock_last_error());
      }
      return rc;
    }
  }
  if (c->cfg.locator != NULL) {
    /* Discovery asks the Sentinels and confirms the master with ROLE, one
     * command at a time, waiting for the servers, for at most the connect
     * and command timeouts: outside 'mu', so that the other callers of
     * this connection wait for it only up to their own deadlines, and a
     * cancel is not held up. Meanwhile nobody else connects ('discovering'
     * is seen above), so 'ctx' stays NULL. */
    c->discovering = 1;
    dlock__conn_unlock(c);
    lookup_cancel lc = {c, cancels};
    dlock__cancel cancel = {c->wake_fd[0], lookup_canceled, &lc};
    rc = c->cfg.locator->open(c->cfg.locator->ctx,
                              dlock__deadline_ms(c->cfg.connect_timeout_ms +
                                                 c->cfg.command_timeout_ms),
                              &cancel, &ctx, &gen);
    pthread_mutex_lock(&c->mu);
    c->discovering = 0;
  } else
    rc = dlock__stream_start_at(c->cfg.ep, c->cfg.tls, addrs,
                                c->cfg.connect_timeout_ms,
                                c->cfg.command_timeout_ms, &ctx);
  if (rc != 0) {
    c->timed_out = 1;
    dlock__conn_fail_all_locked(c, rc, dlock_last_error());
    return rc;
  }
  c->ctx = ctx;
  c->sockets++;
  c->relinks += c->links++ > 0;
  c->gen = gen;
  if (dlock__stream_ready(ctx)) {
    /* Sentinel discovery hands over a stream past its handshake: the
     * reconnect succeeded now rather than in dlock__conn_drive_locked. */
    c->backoff_us = 0;
    c->last_code = 0;
  }
  return 0;
}

int64_t dlock__conn_retry_at(dlock__conn *c) {
  pthread_mutex_lock(&c->mu);
  int64_t at = c->ctx != NULL ? 0 : c->retry_at_us;
  dlock__conn_unlock(c);
  return at;
}

int dlock__conn_open(dlock__conn *c, int64_t deadline_us) {
  if (dlock__forked_since(c->fork_gen))
    return dlock__fail_forked();
  pthread_mutex_lock(&c->mu);
  c->retry_at_us = 0;
  int rc = dlock__conn_link_locked(c, deadline_us);
  /* A caller without requests that drives until the handshake is done,
   * bounded by the connect and command timeouts (the stream's own) and by
   * its deadline. */
  caller me;
  memset(&me, 0, sizeof(me));
  me.want_ready = 1;
  me.waiting = 1;
  me.start_us = dlock__now_us();
  me.deadline_us = deadline_us;
  me.until_us = INT64_MAX;
  while (rc == 0 && c->ctx != NULL && !is_ready(c)) {
    if (dlock__now_us() >= deadline_us) {
      dlock__conn_handshake_overdue_locked(c, &me);
      break;
    }
    if (!c->driving) {
      dlock__conn_drive_locked(c, &me);
      continue;
    }
    /* Someone else drives this handshake (not at a client's start, where
     * this is called): look again shortly. */
    dlock__conn_unlock(c);
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
    pthread_mutex_lock(&c->mu);
  }
  if (rc == 0 && c->ctx == NULL)
    rc = dlock__fail_text(c->last_code ? c->last_code : DLOCK_EIO, c->last_err);
  dlock__conn_unlock(c);
  return rc;
}
