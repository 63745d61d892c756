/*
 * The routing for an event loop (see route.h, "links by number"): the
 * loop sends on the links itself and never waits, so it asks here which
 * links there are and which one serves a shard as known now, and hands
 * back what the links answered to the routing's own questions. Only a
 * cluster has more than one link, a slot map, redirections, a pub/sub
 * probe and replica counts per shard; elsewhere each answer is the one
 * link, or "nothing to do".
 */
#include "topo/route.h"

#include "proto/slot.h"

#include <string.h>

int dlock__route_nlinks(dlock__route *r) {
  return r->cluster != NULL ? dlock__cluster_nnodes(r->cluster) : 1;
}

dlock__conn *dlock__route_link(dlock__route *r, int i) {
  if (r->cluster != NULL)
    return dlock__cluster_node_conn(r->cluster, i);
  return i == 0 ? r->conn : NULL;
}

const dlock__endpoint *dlock__route_link_ep(dlock__route *r, int i) {
  return r->cluster != NULL ? dlock__cluster_node_ep(r->cluster, i) : NULL;
}

int dlock__route_cmd_shard(const dlock__route *r, const char *cmd, size_t len) {
  return r->cluster != NULL ? dlock__cmd_slot(cmd, len)
                            : DLOCK__ROUTE_ONE_SHARD;
}

int dlock__route_link_known(dlock__route *r, int shard) {
  if (r->cluster == NULL || shard == DLOCK__ROUTE_ONE_SHARD)
    return 0;
  return dlock__cluster_known_owner(r->cluster, shard);
}

const char *dlock__route_map_cmd(dlock__route *r, size_t *len) {
  if (r->cluster == NULL)
    return NULL;
  *len = strlen(dlock__cluster_slots_cmd);
  return dlock__cluster_slots_cmd;
}

int dlock__route_take_map(dlock__route *r, int link, const redisReply *reply) {
  if (r->cluster == NULL || reply == NULL)
    return DLOCK_EPROTO;
  return dlock__cluster_take_slots(r->cluster, link, reply);
}

int dlock__route_follow(dlock__route *r, const redisReply *reply) {
  return r->cluster != NULL ? dlock__cluster_follow(r->cluster, reply) : -1;
}

int dlock__route_probe_cmds(dlock__route *r, char **cmds, size_t *lens) {
  return r->cluster != NULL ? dlock__cluster_probe_cmds(r->cluster, cmds, lens)
                            : 0;
}

void dlock__route_take_probe(dlock__route *r, const redisReply *numsub,
                             const redisReply *publish) {
  if (r->cluster != NULL)
    (void)dlock__cluster_take_probe(r->cluster, numsub, publish);
}

int dlock__route_sharded(dlock__route *r) {
  return r->cluster != NULL && dlock__cluster_sharded(r->cluster);
}

int dlock__route_take_shard_info(dlock__route *r, int shard,
                                 const redisReply *info) {
  if (r->cluster == NULL)
    return dlock__route_take_info(r, info);
  int n = info != NULL && info->type == REDIS_REPLY_STRING
              ? dlock__route_count_info(info->str, info->len)
              : -1;
  if (n >= 0 && shard >= 0)
    dlock__cluster_set_replicas(r->cluster, shard, n);
  return n;
}
