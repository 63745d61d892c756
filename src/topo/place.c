/*
 * Where a connection of a client's own goes (see place.h).
 */
#include "place.h"

#include "error.h"
#include "proto/slot.h"
#include "topo/cluster.h"

dlock__place dlock__place_make(dlock__sentinel *sentinel,
                               struct dlock__cluster *cluster) {
  dlock__place p = {sentinel, cluster};
  return p;
}

int dlock__place_fixed(const dlock__place *p) {
  return p->sentinel == NULL && p->cluster == NULL;
}

int dlock__place_sharded(const dlock__place *p) {
  return p->cluster != NULL && dlock__cluster_sharded(p->cluster);
}

int dlock__place_open(const dlock__place *p, const dlock__endpoint *ep,
                      const dlock__tls *tls, int64_t connect_timeout_ms,
                      int64_t command_timeout_ms, const dlock__cancel *cancel,
                      int *node, dlock__stream **out, unsigned *gen) {
  *gen = 0;
  if (p->sentinel != NULL)
    return dlock__sentinel_open(p->sentinel, INT64_MAX, cancel, out, gen);
  if (p->cluster == NULL)
    return dlock__stream_open(ep, tls, connect_timeout_ms, command_timeout_ms,
                              cancel->fd, cancel->canceled, cancel->arg, out);
  /* Any node will do: the first that answers, from the last that did. */
  int n = dlock__cluster_nnodes(p->cluster), rc = DLOCK_EIO;
  for (int k = 0; k < n && rc != 0; k++) {
    int i = (*node + k) % n;
    rc = dlock__stream_open(dlock__cluster_node_ep(p->cluster, i), tls,
                            connect_timeout_ms, command_timeout_ms, cancel->fd,
                            cancel->canceled, cancel->arg, out);
    if (rc == 0)
      *node = i;
    if (cancel->canceled != NULL && cancel->canceled(cancel->arg))
      break;
  }
  return rc;
}

int dlock__place_moved(const dlock__place *p, unsigned gen) {
  return p->sentinel != NULL && dlock__sentinel_gen(p->sentinel) != gen;
}

int dlock__place_node_for(const dlock__place *p, const char *channel,
                          size_t len, int *rc) {
  return dlock__cluster_owner(p->cluster, dlock__key_slot(channel, len), rc);
}

const dlock__endpoint *dlock__place_node_ep(const dlock__place *p, int node) {
  return dlock__cluster_node_ep(p->cluster, node);
}

void dlock__place_stale(const dlock__place *p) {
  dlock__cluster_mark_stale(p->cluster);
}
