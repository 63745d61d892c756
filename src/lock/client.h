/*
 * The client object, shared by the files that implement it.
 */
#ifndef DLOCK_CLIENT_H
#define DLOCK_CLIENT_H

#include "dlock.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>

#include "conn.h"
#include "fork.h"
#include "holds.h"
#include "pubsub.h"
#include "stats.h"
#include "sync.h"
#include "topo/route.h"
#include "url.h"

typedef struct dlock__watchdog dlock__watchdog;
/* Settles acquisitions whose outcome is unknown (settle.c). */
typedef struct dlock__settler dlock__settler;

/* Unlock latches whose answer is in: no copy of their unlock can run again,
 * so the next script call deletes them (engine/release.c). */
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
  /* The routing of every call: the connection (one server, the master the
   * Sentinels name, or a cluster's first seed), and for a
   * redis-sentinel:// URL the discovery ('ep' then holds only the data
   * nodes' user, password and db), for a redis-cluster:// URL the slot map
   * and a connection per node. Nothing outside the topology and the
   * client's opening and closing asks which of these it is. */
  dlock__route route;
  dlock__locator locator; /* the Sentinel discovery as the connection's */
  dlock__tls *tls;   /* loaded TLS settings for a rediss:// URL, else NULL */
  dlock__pubsub *ps; /* NULL for an async client, which has 'loop' */
  struct dlock__loop *loop;
  dlock__watchdog *wd;
  struct dlock__watcher *watcher; /* follows the Sentinels' announcements */
  dlock__settler *settle;
  pthread_mutex_t mu; /* guards 'holds' and 'done' */
  dlock__holds holds;
  dlock__done_latches done;
  dlock__sync sync; /* replica sync (sync.c) */
  /* Statistics and the event hook; NULL with stats_off and no on_event. */
  dlock__stats *stats;
  atomic_int canceled;
  atomic_uint_fast64_t request_seq; /* numbers unlock requests */
  unsigned fork_gen; /* the process's fork count at open (see fork.h) */
  pid_t pid;         /* the process that opened it */
  /* A client closed in a child of fork() with memory left unfreed (see
   * dlock_client_close), kept on a list so that it stays reachable. */
  struct dlock_client *forked_next;
};

/* Formats the owner field "<client-id>:<owner>"; returns its length. */
size_t dlock__owner_field(const dlock_client_t *c, uint64_t owner,
                          char buf[DLOCK__FIELD_MAX]);

/* DLOCK_EFORKED (with detail) in a child of fork() (see fork.h), else
 * DLOCK_ECANCELED once the client is shutting down; 0 when usable. Every
 * call checks it before it takes a mutex or touches a connection. */
int dlock__check_canceled(dlock_client_t *c);

/* dlock__check_canceled for a blocking verb, which an async client (one
 * with a loop) refuses with DLOCK_EINVAL rather than block its loop. */
int dlock__check_blocking(dlock_client_t *c);

#endif
