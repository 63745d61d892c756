/*
 * Where a connection of a client's own goes, for the layer that keeps such
 * connections (pub/sub): the one server, the master the Sentinels name, or
 * the nodes of a cluster. It answers what that layer asks of the
 * deployment, so that the layer itself does not branch on it.
 */
#ifndef DLOCK_PLACE_H
#define DLOCK_PLACE_H

#include <stddef.h>

#include "link/stream.h"
#include "sentinel.h"
#include "url.h"

struct dlock__cluster;

typedef struct dlock__place {
  dlock__sentinel *sentinel;      /* a redis-sentinel:// client's, or NULL */
  struct dlock__cluster *cluster; /* a redis-cluster:// client's, or NULL */
} dlock__place;

/* The place of a client with 'sentinel' and 'cluster' (either NULL, or
 * both for a single server). */
dlock__place dlock__place_make(dlock__sentinel *sentinel,
                               struct dlock__cluster *cluster);

/* 1 for a single server, whose address is fixed. */
int dlock__place_fixed(const dlock__place *p);

/* 1 for a cluster whose unlock messages travel on sharded pub/sub. */
int dlock__place_sharded(const dlock__place *p);

/*
 * A stream to the place: to 'ep' for a single server, to the master the
 * Sentinels name ('*gen' its generation), or to any node of a cluster,
 * the first that answers from '*node' on ('*node' is set to it). 'cancel'
 * ends a connect at once as dlock__stream_open's arguments of that name
 * do. As dlock__stream_open.
 */
int dlock__place_open(const dlock__place *p, const dlock__endpoint *ep,
                      const dlock__tls *tls, int64_t connect_timeout_ms,
                      int64_t command_timeout_ms, const dlock__cancel *cancel,
                      int *node, dlock__stream **out, unsigned *gen);

/* 1 when the master moved since generation 'gen' (Sentinel only). */
int dlock__place_moved(const dlock__place *p, unsigned gen);

/* A cluster's node that serves the slot of 'channel' (an index for
 * dlock__place_node_ep), or -1 with a code in '*rc'. */
int dlock__place_node_for(const dlock__place *p, const char *channel,
                          size_t len, int *rc);
const dlock__endpoint *dlock__place_node_ep(const dlock__place *p, int node);

/* A channel's node stopped serving it: the slot map is read again. */
void dlock__place_stale(const dlock__place *p);

#endif
