/*
 * The client object, shared by the files that implement it.
 */
#ifndef DLOCK_CLIENT_H
#define DLOCK_CLIENT_H

#include "dlock.h"

#include <pthread.h>
#include <stdatomic.h>

#include "conn.h"
#include "holds.h"
#include "pubsub.h"
#include "url.h"

typedef struct dlock__watchdog dlock__watchdog;

/* Unlock latches whose answer is in: no copy of their unlock can run again,
 * so the next script call deletes them (hashlock.c). */
#define DLOCK__DONE_LATCHES_MAX 16
typedef struct dlock__done_latches {
  char *key[DLOCK__DONE_LATCHES_MAX];
  size_t len[DLOCK__DONE_LATCHES_MAX];
  int n;
} dlock__done_latches;

/* Room for "<client-id>:<owner>" with the longest id accepted. */
#define DLOCK__CLIENT_ID_MAX 128
#define DLOCK__FIELD_MAX (DLOCK__CLIENT_ID_MAX + 24)

struct dlock_client {
  dlock_options_t opt; /* the caller's options, with 'url' pointing at ours */
  char *url;
  char id[DLOCK__CLIENT_ID_MAX + 1];
  dlock__endpoint ep;
  dlock__conn *conn;
  dlock__pubsub *ps;
  dlock__watchdog *wd;
  pthread_mutex_t mu; /* guards 'holds' and 'done' */
  dlock__holds holds;
  dlock__done_latches done;
  atomic_int canceled;
  atomic_uint_fast64_t request_seq; /* numbers unlock requests */
};

/* Formats the owner field "<client-id>:<owner>"; returns its length. */
size_t dlock__owner_field(const dlock_client_t *c, uint64_t owner,
                          char buf[DLOCK__FIELD_MAX]);

/* Frees the latch names still waiting to be deleted (they expire by
 * themselves). */
void dlock__done_latches_clear(dlock_client_t *c);

/* DLOCK_ECANCELED (with detail) once the client is shutting down. */
int dlock__check_canceled(dlock_client_t *c);

/* Runs one plain command given as argv; the reply is the caller's. */
int dlock__command(dlock_client_t *c, int argc, const char **argv,
                   const size_t *lens, redisReply **out);

#endif
