/*
 * Requests of the shared command connection (see conn.h) that complete by
 * callback rather than wake a waiting caller: what an event loop sends.
 * They queue and go out exactly as a caller's (a lone one is written at
 * once, one queued behind a request in flight goes with the driver's next
 * write), their replies are dispatched by whoever reads, and the reader
 * also completes those whose deadline passes first.
 */
#define _GNU_SOURCE
#include "conn_internal.h"

#include "alloc.h"
#include "error.h"
#include "fork.h"
#include "monotime.h"

#include <pthread.h>
#include <string.h>
#include <time.h>

int dlock__conn_submit(dlock__conn *c, const char *cmd, size_t len,
                       int64_t deadline_us, dlock__conn_done done, void *arg) {
  /* In a child of fork() the socket is the parent's: never touch it. */
  if (dlock__forked_since(c->fork_gen))
    return dlock__fail_forked();
  request *r = dlock__calloc(1, sizeof(*r));
  if (r == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory for a request");
  r->owned = 1;
  if (deadline_us == 0)
    deadline_us = dlock__deadline_ms(c->cfg.command_timeout_ms);
  char *const cmds[1] = {(char *)cmd};
  pthread_mutex_lock(&c->mu);
  int rc = dlock__conn_link_locked(c, deadline_us);
  if (rc == 0)
    rc = dlock__conn_enqueue_locked(c, 1, cmds, &len, r, done, arg);
  if (rc == 0) {
    r->deadline_us = deadline_us;
    c->nsubmitted++;
    /* As a caller's send (dlock__conn_send): a failed write completes it
     * with the connection's failure. */
    if (!c->writing && is_ready(c) && !dlock__conn_leave_to_driver(c, r))
      dlock__conn_write_out_locked(c);
  }
  dlock__conn_unlock(c);
  if (rc != 0)
    dlock__free(r);
  return rc;
}

void dlock__conn_abandon(dlock__conn *c, const void *arg) {
  pthread_mutex_lock(&c->mu);
  for (request *r = c->head; r != NULL; r = r->next)
    if (r->owned && r->done != NULL && r->arg == arg) {
      /* As a request given up on: it keeps its place in line, so that the
       * replies still pair up, and is freed when its reply comes. */
      r->done = NULL;
      c->nsubmitted--;
    }
  dlock__conn_unlock(c);
}

int dlock__conn_pump(dlock__conn *c, int64_t until_us) {
  if (dlock__forked_since(c->fork_gen))
    return dlock__fail_forked();
  /* A caller without requests of its own, which reads while submitted
   * requests are in flight, until 'until_us'. */
  caller me;
  memset(&me, 0, sizeof(me));
  me.conn = c;
  me.want_idle = 1;
  me.waiting = 1;
  me.start_us = dlock__now_us();
  me.deadline_us = until_us;
  me.until_us = until_us;
  pthread_mutex_lock(&c->mu);
  while (c->nsubmitted > 0) {
    if (!c->driving) {
      dlock__conn_drive_locked(c, &me);
      if (c->nsubmitted > 0 && dlock__now_us() >= until_us)
        break;
      continue;
    }
    if (dlock__now_us() >= until_us)
      break;
    /* Another thread reads, and completes them: look again shortly. */
    dlock__conn_unlock(c);
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
    pthread_mutex_lock(&c->mu);
  }
  int rc = c->nsubmitted > 0 ? DLOCK__CONN_AGAIN : 0;
  dlock__conn_unlock(c);
  return rc;
}
