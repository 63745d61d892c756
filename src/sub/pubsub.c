/*
 * The interface of the pub/sub layer (see pubsub.h): each call goes to the
 * connection that serves its channel or waiter, which is the client's one
 * connection, or for a cluster with sharded pub/sub the shard of the
 * master of the channel's slot (shards.c). How the files fit together is
 * in pubsub_int.h.
 */
#include "pubsub_int.h"

#include <pthread.h>

int dlock__pubsub_start(const dlock__endpoint *ep, const dlock__tls *tls,
                        dlock__sentinel *sentinel,
                        struct dlock__cluster *cluster,
                        int64_t connect_timeout_ms, int64_t command_timeout_ms,
                        int lazy, int64_t open_deadline_us,
                        dlock__pubsub **out) {
  dlock__place place = dlock__place_make(sentinel, cluster);
  if (!dlock__place_sharded(&place))
    return dlock__subconn_start(ep, tls, sentinel, cluster, 0,
                                connect_timeout_ms, command_timeout_ms, lazy,
                                open_deadline_us, out);
  return dlock__shards_start(tls, cluster, connect_timeout_ms,
                             command_timeout_ms, out);
}

void dlock__pubsub_set_stats(dlock__pubsub *ps, dlock__stats *st) {
  if (ps != NULL)
    atomic_store_explicit(&ps->stats, st, memory_order_release);
}

void dlock__pubsub_poke(dlock__pubsub *ps) {
  if (ps != NULL && ps->shards == NULL)
    dlock__sub_poke_thread(ps);
}

void dlock__pubsub_cancel(dlock__pubsub *ps) {
  if (ps->shards != NULL)
    dlock__shards_cancel(ps);
  else
    dlock__sub_cancel(ps);
}

void dlock__pubsub_stop(dlock__pubsub *ps) {
  if (ps != NULL && ps->shards != NULL)
    dlock__shards_stop(ps);
  else if (ps != NULL)
    dlock__subconn_stop(ps);
}

int dlock__pubsub_forget(dlock__pubsub *ps) {
  if (ps == NULL)
    return 0;
  return ps->shards != NULL ? dlock__shards_forget(ps)
                            : dlock__subconn_forget(ps);
}

int dlock__pubsub_join(dlock__pubsub *ps, const char *channel, size_t len,
                       int64_t deadline_us, dlock__waiter *w) {
  return dlock__pubsub_join_as(ps, channel, len, deadline_us, w, NULL);
}

int dlock__pubsub_join_as(dlock__pubsub *ps, const char *channel, size_t len,
                          int64_t deadline_us, dlock__waiter *w,
                          dlock__wake_fn wake) {
  int rc;
  if ((ps = dlock__shards_route(ps, channel, len, 1, &rc)) == NULL)
    return rc;
  return dlock__sub_join(ps, channel, len, deadline_us, w, wake);
}

int dlock__pubsub_join_active(dlock__pubsub *ps, const char *channel,
                              size_t len, dlock__waiter *w, int *others) {
  int rc;
  if ((ps = dlock__shards_route(ps, channel, len, 0, &rc)) == NULL)
    return 0;
  return dlock__sub_join_active(ps, channel, len, w, others);
}

int dlock__pubsub_wait(dlock__pubsub *ps, dlock__waiter *w, int64_t until_us) {
  if (ps->shards != NULL) {
    dlock__shards_follow(ps, w, until_us);
    ps = w->sub->ps;
  }
  return dlock__sub_wait(ps, w, until_us);
}

int dlock__pubsub_state(dlock__pubsub *ps, const char *channel, size_t len,
                        int *refs) {
  int rc;
  if ((ps = dlock__shards_route(ps, channel, len, 0, &rc)) == NULL) {
    if (refs != NULL)
      *refs = 0;
    return -1;
  }
  pthread_mutex_lock(&ps->mu);
  dlock__sub *s = dlock__sub_find(ps, channel, len);
  int state = s != NULL ? s->state : -1;
  if (refs != NULL)
    *refs = s != NULL ? s->refs : 0;
  pthread_mutex_unlock(&ps->mu);
  return state;
}

int dlock__pubsub_parked(dlock__pubsub *ps, const char *channel, size_t len) {
  int rc;
  if ((ps = dlock__shards_route(ps, channel, len, 0, &rc)) == NULL)
    return 0;
  int n = 0;
  pthread_mutex_lock(&ps->mu);
  dlock__sub *s = dlock__sub_find(ps, channel, len);
  for (dlock__waiter *w = s != NULL ? s->head : NULL; w != NULL; w = w->next)
    n += w->parked;
  pthread_mutex_unlock(&ps->mu);
  return n;
}

int dlock__pubsub_thread_reads(dlock__pubsub *ps) {
  if (ps->shards != NULL)
    return 0;
  pthread_mutex_lock(&ps->mu);
  int reads = !ps->thread_left_socket;
  pthread_mutex_unlock(&ps->mu);
  return reads;
}
