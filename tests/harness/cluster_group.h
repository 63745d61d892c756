/*
 * Test harness: a Redis Cluster on loopback, 3 masters with one replica
 * each, made of throwaway servers of redis_proc.h (cluster-enabled, ports
 * at most 55535 so that their bus ports fit) joined by
 * "redis-cli --cluster create ... --cluster-replicas 1 --cluster-yes".
 * Every process is stopped by pid in cg_free(), or at exit like any
 * rp_server_t. Start it from the test's main thread (see redis_proc.h).
 *
 * Nodes are numbered 0.. in the order they were started; which of them are
 * masters is decided by redis-cli and changes with failovers: ask
 * cg_master_of_slot().
 */
#ifndef DLOCK_TEST_CLUSTER_GROUP_H
#define DLOCK_TEST_CLUSTER_GROUP_H

#include "redis_proc.h"

typedef struct cg_group cg_group_t;

/* Starts 6 nodes and makes them a cluster, waiting (up to 60 s) until
 * every node says cluster_state:ok and knows the whole slot map and every
 * replica is in sync. 0 or -1. */
int cg_start(cg_group_t **out);

/* The same with 'extra_conf' (redis.conf lines, may be NULL) in every
 * node's config: e.g. rename-command lines that take sharded pub/sub
 * away, as a server without it would. */
int cg_start_conf(const char *extra_conf, cg_group_t **out);

/* The extra_conf of nodes without sharded pub/sub, as a server before Redis
 * 7 (or one that renamed the commands away) has: SPUBLISH and SSUBSCRIBE
 * are unknown commands, in scripts too. */
#define CG_NO_SHARDED_PUBSUB                                                   \
  "rename-command SPUBLISH \"\"\nrename-command SSUBSCRIBE \"\""

/* "redis-cluster://127.0.0.1:P0,127.0.0.1:P1". */
const char *cg_url(const cg_group_t *g);

int cg_nnodes(const cg_group_t *g);
rp_server_t *cg_node(cg_group_t *g, int i);

/* The index of the node that node 'asked' names as master of 'slot'
 * (CLUSTER SLOTS), or -1. */
int cg_master_of_slot(cg_group_t *g, int asked, int slot);

/* The indexes of the current masters, in 'out' (room for 6); count. */
int cg_masters(cg_group_t *g, int *out);

/* The index of a replica of master 'm' whose sync is done, or -1. */
int cg_replica_of(cg_group_t *g, int m);

/* CLUSTER KEYSLOT on node 0, or -1. */
int cg_keyslot(cg_group_t *g, const char *key);

/* Slot migration in its three steps (the Redis Cluster specification's
 * resharding): IMPORTING on 'to' and MIGRATING on 'from'; MIGRATE of
 * every key of the slot from 'from' to 'to'; SETSLOT NODE on every
 * master. 0 or -1. */
int cg_migrate_begin(cg_group_t *g, int slot, int from, int to);
int cg_migrate_keys(cg_group_t *g, int slot, int from, int to);
int cg_migrate_end(cg_group_t *g, int slot, int to);

/* CLUSTER FAILOVER on replica 'r', waiting (up to 'timeout_ms') until it
 * is master and every node agrees. 0 or -1. */
int cg_failover(cg_group_t *g, int r, int timeout_ms);

/* Waits until every live node says cluster_state:ok and names the same
 * master for 'slot' (all slots when -1). 0 or -1. */
int cg_wait_agree(cg_group_t *g, int slot, int timeout_ms);

void cg_free(cg_group_t *g);

#endif
