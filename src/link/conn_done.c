/*
 * Completing the requests of the shared command connection (see conn.h and
 * dlock__request): the one place where a request's completion is called,
 * whether its reply came, the connection failed, or its deadline passed.
 */
#define _GNU_SOURCE
#include "conn_internal.h"

#include "alloc.h"
#include "error.h"

void dlock__conn_complete_locked(dlock__conn *c, request *r, redisReply *reply,
                                 int err, const char *detail) {
  dlock__conn_done done = r->done;
  /* Read first: a waiter may be gone with its frame as soon as its last
   * request is complete. */
  int owned = r->owned;
  if (done == NULL) {
    /* Given up on: the reply only keeps the stream in step. */
    if (reply != NULL)
      freeReplyObject(reply);
  } else {
    if (owned)
      c->nsubmitted--;
    r->done = NULL;
    done(r, reply, err, detail);
  }
  if (owned)
    dlock__free(r);
}

void dlock__conn_complete_all_locked(dlock__conn *c, int err,
                                     const char *detail) {
  request *r = c->head;
  c->head = c->tail = NULL;
  while (r != NULL) {
    request *next = r->next;
    dlock__conn_complete_locked(c, r, NULL, err, detail);
    r = next;
  }
}

/*
 * A request whose deadline passed is completed, while the connection
 * stays: a request given up on takes its place in line (a copy, since a
 * waiter's stack is going away) so that the replies still pair up. Other
 * requests are not failed for one's shorter deadline (a watchdog round
 * bounded by a lease).
 */
int dlock__conn_give_up_at_locked(dlock__conn *c, request **at,
                                  const char *detail) {
  request *r = *at;
  request *copy = dlock__calloc(1, sizeof(*copy));
  if (copy == NULL)
    return -1;
  copy->next = r->next;
  copy->sent_us = r->sent_us;
  copy->deadline_us = INT64_MAX;
  copy->block_ms = r->block_ms;
  copy->owned = 1;
  *at = copy;
  if (c->tail == r)
    c->tail = copy;
  dlock__conn_complete_locked(c, r, NULL, DLOCK_EIO, detail);
  return 0;
}
