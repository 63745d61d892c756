/*
 * Redis Cluster topology: the slot map, one shared connection per node,
 * and the routing of each command to the master that owns the slot of its
 * first key.
 *
 * The map is read from CLUSTER SHARDS (Redis 7), or CLUSTER SLOTS where
 * that is unknown, at the first use and again after a MOVED reply or a
 * connection that failed. Redirections are followed where Redis says they
 * are safe: MOVED, ASK and TRYAGAIN/CLUSTERDOWN are refusals made before
 * the command ran, so sending it again cannot apply it twice. A command
 * whose connection failed with it in flight is not sent again here: its
 * fate is unknown, and the callers deal with that as on one server
 * (unlock latches, settle.c).
 *
 * Nodes are never forgotten while the client lives (a cluster has few),
 * so a connection handed out stays valid without reference counting.
 */
#ifndef DLOCK_TOPO_CLUSTER_H
#define DLOCK_TOPO_CLUSTER_H

#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdint.h>

#include "conn.h"
#include "scripts.h"
#include "url.h"

typedef struct dlock__cluster dlock__cluster;

/* Takes the seeds and credentials of 'u' (zeroed after); 'tls' is not
 * copied and must outlive the cluster. Connects to nothing yet. */
int dlock__cluster_new(dlock__cluster_url *u, const dlock__tls *tls,
                       int64_t connect_timeout_ms, int64_t command_timeout_ms,
                       dlock__cluster **out);

/*
 * What dlock__cluster_eval and dlock__cluster_call return when the cluster
 * refused a call for now, before it ran (TRYAGAIN or CLUSTERDOWN): the
 * topology never waits, so its caller pauses (the engine's busy back-off)
 * and makes the call again, within its deadline; the detail to report if
 * that runs out first is set. dlock__cluster_eval keeps the calls answered
 * already in 'replies' (NULL for those to make again) and the tail's
 * replies so far in 'tail_replies' (see dlock__cluster_keep_tail);
 * dlock__cluster_call keeps nothing, its whole batch is made again.
 */
#define DLOCK__CLUSTER_BUSY 2

/* Reads the slot map from the first node that answers (known masters,
 * then the seeds) before 'deadline_us' (0: a command timeout from now).
 * 0, or why no node gave one. */
int dlock__cluster_refresh(dlock__cluster *cl, int64_t deadline_us);

/* The connection to the master of 'slot', reading the map first when the
 * slot has no known owner; NULL with a code in '*rc' when none can be
 * found. */
dlock__conn *dlock__cluster_conn(dlock__cluster *cl, int slot, int *rc);

/*
 * Replica counts per shard, for replica sync: each master's replicas in
 * step, as its own INFO replication showed them (read by the sync code
 * through dlock__cluster_call, and recorded here). The gossip that CLUSTER
 * SHARDS reports lags behind: right after a cluster forms, nodes still list
 * each other's replicas as masters for seconds.
 *
 * dlock__cluster_replicas: the fewest that the masters of the slots of
 * 'calls' have, or -1 when one is not known; dlock__cluster_unknown_replicas:
 * a slot of 'calls' whose master's count is not known, or -1;
 * dlock__cluster_set_replicas records the count of the master of 'slot';
 * dlock__cluster_forget_replicas has every count read again.
 */
int dlock__cluster_replicas(dlock__cluster *cl, size_t n,
                            const dlock__eval *calls);
int dlock__cluster_unknown_replicas(dlock__cluster *cl, size_t n,
                                    const dlock__eval *calls);
void dlock__cluster_set_replicas(dlock__cluster *cl, int slot, int n);
void dlock__cluster_forget_replicas(dlock__cluster *cl);

/* The index of the node (see dlock__cluster_node_ep) that is the master
 * of 'slot', reading the map first when it is not known; -1 with a code in
 * '*rc' when none can be found. */
int dlock__cluster_owner(dlock__cluster *cl, int slot, int *rc);
/* Has the slot map (and so the shards' replica counts) read again before
 * its next use: a subscription was told that its slot moved, or replica
 * sync wants the counts brought up to date. */
void dlock__cluster_mark_stale(dlock__cluster *cl);
/*
 * Finds out once, as Redisson does when it starts, whether the cluster has
 * sharded pub/sub (Redis 7): a node that answers PUBSUB SHARDNUMSUB (what
 * Redisson asks) and runs SPUBLISH has. From then on the scripts publish
 * with SPUBLISH (their 'sharded' variant) and waiters subscribe with
 * SSUBSCRIBE on the master of the channel's slot, as Redisson's locks
 * publish and listen on such a cluster; else with PUBLISH and SUBSCRIBE.
 * A URL with sharded_pubsub=off keeps to those without asking. Returns 1
 * (sharded), 0 (classic), DLOCK__CLUSTER_BUSY (to ask again after a
 * pause) or why no node answered.
 */
int dlock__cluster_probe_sharded(dlock__cluster *cl, int64_t deadline_us);
/* The same in two halves, for an event loop that sends the commands
 * itself: the commands to send to the master of slot 0 (into 'cmds' and
 * 'lens', room for 2; static), how many (0: nothing to ask, classic pub/sub
 * is kept); then their replies (NULL: none came, classic is kept), what
 * dlock__cluster_probe_sharded returns. */
int dlock__cluster_probe_cmds(dlock__cluster *cl, char **cmds, size_t *lens);
int dlock__cluster_take_probe(dlock__cluster *cl, const redisReply *numsub,
                              const redisReply *publish);
/* 1 once dlock__cluster_probe_sharded found sharded pub/sub. */
int dlock__cluster_sharded(dlock__cluster *cl);
/* The connection to some node (the first seed), for commands that name no
 * key (INFO, CONFIG). Never NULL once created. */
dlock__conn *dlock__cluster_any(dlock__cluster *cl);

/*
 * dlock__eval_run_tail over the cluster: each call goes to the master of
 * the slot of its first key (KEYS[1]), the calls of one node in one
 * pipelined round followed by the tail; redirections are followed until
 * 'deadline_us'. 'tail_replies' (may be NULL when 'ntail' is 0) gets, for
 * each tail command, the reply of the node whose integer answer was the
 * smallest (a WAIT that fewest replicas acknowledged), else the last one.
 */
/* Merges the tail replies 'got' of another round into 'best' (taking
 * them): for each tail command, the one whose integer answer is the
 * smallest is kept. */
void dlock__cluster_keep_tail(redisReply **best, redisReply **got,
                              size_t ntail);

int dlock__cluster_eval(dlock__cluster *cl, size_t n, const dlock__eval *calls,
                        redisReply **replies, int64_t deadline_us,
                        int64_t idle_ms, size_t ntail, const char *const *tail,
                        const size_t *tail_lens, redisReply **tail_replies);

/* 'n' (at most 8) formatted commands on keys of one 'slot', pipelined to
 * its master, the whole batch sent again while a reply redirects, until
 * 'deadline_us' (0: a command timeout from now); only for commands that a
 * redirection leaves unapplied. The replies are the caller's (error
 * replies included), as dlock__conn_call's. */
int dlock__cluster_call(dlock__cluster *cl, int slot, size_t n,
                        char *const *cmd, const size_t *len,
                        redisReply **replies, int64_t deadline_us);

/* The nodes known (seeds first), and the address of node 'i' (stable
 * while the cluster lives), for connections of other kinds (pub/sub). */
int dlock__cluster_nnodes(dlock__cluster *cl);
const dlock__endpoint *dlock__cluster_node_ep(dlock__cluster *cl, int i);

/* 1 once a node has answered with a slot map: a failure to find a master
 * since is an outage that passes (slots not served until a failover or the
 * cluster's forming ends), not a URL that never worked (no node answers,
 * or what answers is no cluster node). */
int dlock__cluster_answered(dlock__cluster *cl);

/* The node that redirection 'r' (a MOVED or an ASK error reply) names,
 * added when new, for an event loop that sends the command again there
 * itself; a MOVED also updates the map (and has it read again). -1 for
 * any other reply. */
int dlock__cluster_follow(dlock__cluster *cl, const redisReply *r);
/* The formatted CLUSTER SLOTS, for an event loop that reads the map
 * itself: sent to node 'idx', its reply applied by
 * dlock__cluster_take_slots (0, or why the reply is no map). */
extern const char dlock__cluster_slots_cmd[];
int dlock__cluster_take_slots(dlock__cluster *cl, int idx, const redisReply *r);
/* The connection to node 'i' (see dlock__cluster_nnodes), or NULL. */
dlock__conn *dlock__cluster_node_conn(dlock__cluster *cl, int i);
/* The node that the map says is the master of 'slot', without reading
 * the map: -1 when not known. */
int dlock__cluster_known_owner(dlock__cluster *cl, int slot);
/* Number of masters in the map (for status output and tests). */
int dlock__cluster_masters(dlock__cluster *cl);

/* dlock__conn_cancel on every node. */
void dlock__cluster_cancel(dlock__cluster *cl);

/* Frees everything; no call may be in progress. NULL is ignored. */
void dlock__cluster_free(dlock__cluster *cl);

/* In a child of fork(): dlock__conn_forget on every node; 0, or -1 (and
 * nothing freed) when one of them could not be. */
int dlock__cluster_forget(dlock__cluster *cl);

#endif
