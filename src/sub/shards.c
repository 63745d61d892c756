/*
 * A client of a cluster with sharded pub/sub (dlock__cluster_sharded; see
 * pubsub.h): it has no connection of its own, but one per master that has
 * its waiters, made at the first join on one of that master's channels and
 * subscribing with SSUBSCRIBE. Each call goes to the shard of its channel,
 * and a waiter whose channel's slot moved follows it to its new master.
 */
#include "pubsub_int.h"

#include "alloc.h"
#include "error.h"
#include "monotime.h"

#include <pthread.h>

/* See dlock__cluster_nnodes: a node index is below this. */
#define SHARDS_MAX 512

int dlock__shards_start(const dlock__tls *tls, struct dlock__cluster *cluster,
                        int64_t connect_timeout_ms, int64_t command_timeout_ms,
                        dlock__pubsub **out) {
  /* Sharded pub/sub: the connections are made per node as waiters come. */
  dlock__pubsub *ps = dlock__subconn_new(
      NULL, tls, NULL, cluster, connect_timeout_ms, command_timeout_ms);
  dlock__pubsub **shards = dlock__calloc(SHARDS_MAX, sizeof(*shards));
  if (ps == NULL || shards == NULL) {
    if (ps != NULL)
      dlock__subconn_free(ps);
    dlock__free(shards);
    return dlock__fail(DLOCK_ENOMEM, "out of memory starting pub/sub");
  }
  ps->shards = shards;
  *out = ps;
  return 0;
}

/* The shard of a sharded client that subscribes 'channel': that of the
 * master of its slot, started when 'make' is set and it has none yet.
 * NULL with a code in '*rc' when there is none. */
static dlock__pubsub *shard_of(dlock__pubsub *ps, const char *channel,
                               size_t len, int make, int *rc) {
  int idx = dlock__place_node_for(&ps->place, channel, len, rc);
  if (idx < 0)
    return NULL;
  if (idx >= SHARDS_MAX) {
    *rc = dlock__fail(DLOCK_EPROTO, "cluster has too many nodes");
    return NULL;
  }
  pthread_mutex_lock(&ps->mu);
  dlock__pubsub *sh = ps->shards[idx];
  int canceled = ps->canceled;
  pthread_mutex_unlock(&ps->mu);
  *rc = 0;
  if (canceled)
    *rc = dlock__fail(DLOCK_ECANCELED, "client is shutting down");
  if (canceled || sh != NULL || !make)
    return canceled ? NULL : sh;
  /* Lazily: a node that is down is tried again by the shard's thread, and
   * its waiters sleep by the lock's TTL meanwhile. The connect happens
   * without the mutex, so that a slow node holds up no other; of two made
   * at once, the first installed stays. */
  dlock__pubsub *made = NULL;
  *rc = dlock__subconn_start(dlock__place_node_ep(&ps->place, idx), ps->tls,
                             NULL, NULL, 1, ps->connect_timeout_ms,
                             ps->command_timeout_ms, 1,
                             dlock__deadline_ms(ps->connect_timeout_ms), &made);
  if (*rc != 0)
    return NULL;
  atomic_store_explicit(&made->stats, dlock__sub_stats(ps),
                        memory_order_release);
  pthread_mutex_lock(&ps->mu);
  if (ps->shards[idx] == NULL && !ps->canceled) {
    ps->shards[idx] = made;
    made = NULL;
  }
  sh = ps->shards[idx];
  canceled = ps->canceled;
  pthread_mutex_unlock(&ps->mu);
  if (made != NULL)
    dlock__subconn_stop(made);
  if (canceled) {
    *rc = dlock__fail(DLOCK_ECANCELED, "client is shutting down");
    return NULL;
  }
  return sh;
}

dlock__pubsub *dlock__shards_route(dlock__pubsub *ps, const char *channel,
                                   size_t len, int make, int *rc) {
  *rc = 0;
  if (ps->shards == NULL)
    return ps;
  return shard_of(ps, channel, len, make, rc);
}

/*
 * A waiter of a sharded client whose channel's slot moved (or whose node's
 * connection broke) joins the channel again on the slot's master now, as
 * the slot map says once read again. It joins the same node again when
 * the map still names it, and is told again if that is still wrong.
 */
void dlock__shards_follow(dlock__pubsub *ps, dlock__waiter *w,
                          int64_t until_us) {
  dlock__pubsub *sh = w->sub->ps;
  pthread_mutex_lock(&sh->mu);
  int moved = w->sub->moved && !w->permit && !w->pinned;
  dlock__wake_fn wake = w->sub->wake;
  char *name = moved ? dlock__memdup(w->sub->name, w->sub->len) : NULL;
  size_t len = w->sub->len;
  pthread_mutex_unlock(&sh->mu);
  if (name == NULL)
    return;
  dlock__pubsub_leave(sh, w);
  dlock__place_stale(&ps->place);
  int64_t deadline = dlock__deadline_ms(ps->command_timeout_ms);
  if (deadline > until_us)
    deadline = until_us;
  /* When no master is known or reachable now, the waiter stays with the
   * old node (which tells it again): it must stay joined somewhere. */
  int rc;
  dlock__pubsub *to = shard_of(ps, name, len, 1, &rc);
  if (to == NULL || dlock__sub_join(to, name, len, deadline, w, wake) != 0)
    (void)dlock__sub_join(sh, name, len, 0, w, wake);
  dlock__free(name);
  /* An unlock published between the waiter's last attempt and this
   * subscription reached nobody: the waiter tries once more now, as after
   * a reconnect. */
  sh = w->sub->ps;
  pthread_mutex_lock(&sh->mu);
  dlock__sub_wake_locked(w);
  pthread_mutex_unlock(&sh->mu);
}

void dlock__shards_cancel(dlock__pubsub *ps) {
  pthread_mutex_lock(&ps->mu);
  ps->canceled = 1;
  for (int i = 0; i < SHARDS_MAX; i++)
    if (ps->shards[i] != NULL)
      dlock__sub_cancel(ps->shards[i]);
  pthread_mutex_unlock(&ps->mu);
}

void dlock__shards_stop(dlock__pubsub *ps) {
  for (int i = 0; i < SHARDS_MAX; i++)
    if (ps->shards[i] != NULL)
      dlock__subconn_stop(ps->shards[i]);
  dlock__free(ps->shards);
  dlock__subconn_free(ps);
}

int dlock__shards_forget(dlock__pubsub *ps) {
  if (pthread_mutex_trylock(&ps->mu) != 0)
    return -1;
  /* A shard that cannot be forgotten is left as it is (it leaks in the
   * child): the others are, and so is this. */
  int rc = 0;
  for (int i = 0; i < SHARDS_MAX; i++)
    if (ps->shards[i] != NULL) {
      if (dlock__subconn_forget(ps->shards[i]) == 0)
        ps->shards[i] = NULL;
      else
        rc = -1;
    }
  pthread_mutex_unlock(&ps->mu);
  if (rc != 0)
    return rc;
  dlock__free(ps->shards);
  dlock__subconn_free(ps);
  return 0;
}
