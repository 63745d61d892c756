/*
 * The routing of a client's calls, whatever its deployment: one server, a
 * master found through Sentinel, or a Redis Cluster. The code above the
 * topology asks it which link serves a key, which shard a key is in, how
 * many replicas are in step behind the master serving some calls, and
 * whether the master changed; it tells it when a link failed, and when the
 * replica counts are to be read again. MOVED, ASK, TRYAGAIN, +switch-master
 * and rediscovery are handled behind it (cluster.c, sentinel.c), so that
 * nothing above asks which deployment it talks to.
 *
 * The replica counts follow the rules of replica sync (see sync.h): on one
 * server, the master's INFO replication, read before the first write,
 * after one that failed or fell short, and once a second in the round trip
 * of a write; through Sentinel, the Sentinels' count and the generation it
 * was read in, or the master's own count when it is larger; on a cluster,
 * each shard's master's own count (and the master of slot 0 standing for
 * every shard where no call says which).
 */
#ifndef DLOCK_ROUTE_H
#define DLOCK_ROUTE_H

#include <hiredis/hiredis.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "conn.h"
#include "proto/slot.h"
#include "scripts.h"
#include "sentinel.h"
#include "topo/cluster.h"

/* What dlock__route_shard says for every key when all keys are in one
 * shard (one server, or the master found through Sentinel). */
#define DLOCK__ROUTE_ONE_SHARD (-1)

typedef struct dlock__route {
  /* The connection to the one server, or to the master the Sentinels name
   * (which it finds again after a failover); on a cluster, the first
   * seed's, owned by the cluster, for commands that name no key. */
  dlock__conn *conn;
  /* For a redis-sentinel:// URL: where the master is. Else NULL. */
  dlock__sentinel *sentinel;
  /* For a redis-cluster:// URL: the slot map and a connection per node,
   * else NULL. */
  dlock__cluster *cluster;
  int64_t command_timeout_ms;
  /* Where a warning goes (the client's on_warning), or NULL. */
  void (*warn)(void *data, const char *text);
  void *warn_data;
  /* Replica counts (see above). */
  atomic_int replicas;     /* the replicas to wait for; -1: not known */
  _Atomic int64_t read_us; /* when 'replicas' was read (CLOCK_MONOTONIC) */
  atomic_int warned;       /* INFO refused: said once through 'warn' */
  atomic_uint gen;         /* the Sentinel generation of 'replicas' */
  /* Through Sentinel: the replicas in step that the master's own INFO
   * showed last (-1: not known). The count waited for is the larger of
   * this and the Sentinels' (a replica back from an outage is in step
   * here before a failed write would read the Sentinels again). */
  atomic_int seen;
  /* Replica sync's DLOCK_SYNC_ANY: the INFO read asks for the default
   * sections (persistence and server too), which say whether the master
   * has AOF on and knows WAITAOF; set before the first call. */
  int info_all;
  atomic_int aof; /* 1: that master has AOF on and knows WAITAOF */
} dlock__route;

/* Sets up the routing of a client with no connection yet: 'conn',
 * 'sentinel' and 'cluster' are filled in by the client as it opens. */
void dlock__route_init(dlock__route *r, int64_t command_timeout_ms,
                       void (*warn)(void *data, const char *text),
                       void *warn_data);

/* ---- routing ------------------------------------------------------------ */

/*
 * dlock__eval_run_tail on the link that serves the calls: the client's
 * server, or each call on the master of its slot on a cluster (where
 * redirections are followed); 'idle_ms' > 0: paced, as
 * dlock__eval_run_paced. Inline: this is the path of every lock and
 * unlock. A cluster that refuses calls for now answers
 * DLOCK__CLUSTER_BUSY, with what was answered kept (cluster.h): the
 * caller pauses and makes the rest again.
 */
static inline int
dlock__route_eval(dlock__route *r, size_t n, const dlock__eval *calls,
                  redisReply **replies, int64_t deadline_us, int64_t idle_ms,
                  size_t ntail, const char *const *tail,
                  const size_t *tail_lens, redisReply **tail_replies) {
  if (r->cluster != NULL)
    return dlock__cluster_eval(r->cluster, n, calls, replies, deadline_us,
                               idle_ms, ntail, tail, tail_lens, tail_replies);
  if (ntail > 0)
    return dlock__eval_run_tail(r->conn, n, calls, replies, deadline_us,
                                idle_ms, ntail, tail, tail_lens, tail_replies,
                                0);
  return idle_ms > 0 ? dlock__eval_run_paced(r->conn, n, calls, replies,
                                             idle_ms, deadline_us)
                     : dlock__eval_run(r->conn, n, calls, replies, deadline_us);
}

/* Merges the tail replies 'got' of a round made again after
 * DLOCK__CLUSTER_BUSY into those of the rounds before ('best'), keeping
 * for each tail command the reply that acknowledged least (see
 * dlock__cluster_keep_tail). */
static inline void dlock__route_keep_tail(redisReply **best, redisReply **got,
                                          size_t ntail) {
  dlock__cluster_keep_tail(best, got, ntail);
}

/* dlock__conn_call on the link for 'key' (the master of its slot on a
 * cluster, where redirections are followed; 'key' NULL: any node), for
 * commands on keys of one slot that a redirection leaves unapplied; or
 * DLOCK__CLUSTER_BUSY, to be made again after a pause. */
int dlock__route_call(dlock__route *r, const char *key, size_t key_len,
                      size_t n, char *const *cmds, const size_t *lens,
                      redisReply **replies, int64_t deadline_us);

/* The link that serves 'key' now (the master of its slot, read from the
 * map when not known), or NULL with a code in '*rc' when none can be
 * found. */
dlock__conn *dlock__route_conn_for_key(dlock__route *r, const char *key,
                                       size_t len, int *rc);

/* The variant of 'script' that publishes where this deployment's waiters
 * listen (SPUBLISH on a cluster with sharded pub/sub), to be sent on a
 * link of dlock__route_conn_for_key. */
const dlock__script *dlock__route_script(dlock__route *r,
                                         const dlock__script *script);

/* The shard of 'key' (its slot on a cluster), or DLOCK__ROUTE_ONE_SHARD
 * when all keys are in one shard: a script may touch keys of one shard
 * only. */
static inline int dlock__route_shard(const dlock__route *r, const char *key,
                                     size_t len) {
  return r->cluster != NULL ? dlock__key_slot(key, len)
                            : DLOCK__ROUTE_ONE_SHARD;
}

/* 1 when all keys are in one shard, served by the one link 'r->conn'
 * (which then takes any call, pipelined or sent apart from its reply). */
static inline int dlock__route_one_shard(const dlock__route *r) {
  return r->cluster == NULL;
}

/* When a link may be tried again (dlock__conn_retry_at). On a cluster the
 * next attempt goes where the slot map says, which a failover changes:
 * 0. */
int64_t dlock__route_retry_at(dlock__route *r);

/* A call on a link failed with 'rc': when the link failed (DLOCK_EIO,
 * DLOCK_ETIMEDOUT), the routing is read again before the next call (a
 * cluster's master may have failed over; a Sentinel-managed connection
 * finds the master again by itself). */
void dlock__route_failed(dlock__route *r, int rc);

/* The generation of the master now: it moves on each time the master
 * changes (through Sentinel; always 0 elsewhere). */
static inline unsigned dlock__route_gen(dlock__route *r) {
  return r->sentinel != NULL ? dlock__sentinel_gen(r->sentinel) : 0;
}

/* 1 when the master changed since generation 'gen' (dlock__route_gen):
 * what a write sent meanwhile went to may not be the master any more. */
static inline int dlock__route_moved(dlock__route *r, unsigned gen) {
  return r->sentinel != NULL && dlock__sentinel_gen(r->sentinel) != gen;
}

/* ---- links by number, for an event loop (links.c) ---------------------- */

/*
 * An event loop sends on the links itself and never waits: it asks here
 * which links there are and which one serves a shard as known now, and
 * hands back what they answered to the routing's questions (a slot map, a
 * redirection, the pub/sub probe, a shard's INFO). On one server, or the
 * master found through Sentinel, there is one link, number 0, serving
 * every shard, and nothing to read, follow or probe.
 */

/* How many links there are now (a cluster learns nodes as it goes), and
 * link 'i' (NULL when there is none such). */
int dlock__route_nlinks(dlock__route *r);
dlock__conn *dlock__route_link(dlock__route *r, int i);
/* The address of link 'i', for a pub/sub connection to the same node of
 * a cluster with sharded pub/sub (NULL elsewhere). */
const dlock__endpoint *dlock__route_link_ep(dlock__route *r, int i);

/* The shard of a formatted command's key, as dlock__route_shard says; -1
 * for a command with no key. */
int dlock__route_cmd_shard(const dlock__route *r, const char *cmd, size_t len);
/* The link serving 'shard' as known now, never reading anything: -1 when
 * the slot map does not say (read it, dlock__route_map_cmd). */
int dlock__route_link_known(dlock__route *r, int shard);

/* The command that reads the slot map (static; NULL: there is none), and
 * the reply to it from link 'link' applied: 0, or why it is no map. */
const char *dlock__route_map_cmd(dlock__route *r, size_t *len);
int dlock__route_take_map(dlock__route *r, int link, const redisReply *reply);

/* The link a redirection (a MOVED or an ASK error reply) names, added
 * when new, the call to be sent again there (after ASKING for an ASK); a
 * MOVED also updates the map. -1 for any other reply. */
int dlock__route_follow(dlock__route *r, const redisReply *reply);

/* The commands that find out once whether waiters listen with SSUBSCRIBE
 * (see dlock__cluster_probe_sharded), to send to the link of shard 0
 * (room for 2 in 'cmds' and 'lens'): how many, 0 when nothing is to be
 * asked; their replies (NULL: none came) are then handed back. */
int dlock__route_probe_cmds(dlock__route *r, char **cmds, size_t *lens);
void dlock__route_take_probe(dlock__route *r, const redisReply *numsub,
                             const redisReply *publish);
/* 1 when waiters listen on the link of their channel's shard (SSUBSCRIBE
 * on a cluster that has it); 0: on the client's one pub/sub connection. */
int dlock__route_sharded(dlock__route *r);

/* ---- replica counts (see above and sync.h) ------------------------------ */

/* The replicas in step behind the master(s) serving 'calls' ('n' 0: the
 * client's master; on a cluster that of slot 0, standing for every
 * shard), reading them first when they are not known: >= 0, or a
 * negative code when Redis (or every Sentinel) does not answer. */
int dlock__route_replicas(dlock__route *r, size_t n, const dlock__eval *calls);

/* The same without a round trip to a data node (the Sentinels may be
 * asked): '*out' is the count, or -1 when it must be read first (with
 * dlock__route_replicas, or by an INFO replication that rides after the
 * write on one server). 0, or why the Sentinels did not answer. */
int dlock__route_replicas_known(dlock__route *r, size_t n,
                                const dlock__eval *calls, int *out);

/* Whether the counts are due to be read again, once a second: 1 when the
 * calling write claimed it and an INFO replication is to ride after it
 * (its reply for dlock__route_take_info); 0 when not due, or on a cluster,
 * whose shards are read by their own writes: when due, their counts are
 * forgotten now, or with 'defer_shards' nothing is claimed and -1 says
 * that the write is for a path that reads them. */
int dlock__route_refresh(dlock__route *r, int defer_shards);

/* Takes the replicas in step (through Sentinel, the master's own count)
 * from the reply of an INFO replication that rode after a write; returns
 * the count waited for now on one server (-1: not known). */
int dlock__route_take_info(dlock__route *r, const redisReply *reply);

/* The same for the INFO replication that rode after a write to 'shard':
 * on a cluster, the count of that shard's master, recorded for it. */
int dlock__route_take_shard_info(dlock__route *r, int shard,
                                 const redisReply *info);

/* A write failed (the next connection may reach another master) or fell
 * short (a replica gone): every count is read again before the next. */
void dlock__route_forget_replicas(dlock__route *r);

/* The INFO a replica count is read with, formatted into '*cmd' (freed
 * with dlock__format_free): "INFO replication", or "INFO" with
 * 'info_all'. Its length, or -1 out of memory. */
int dlock__route_format_info(const dlock__route *r, char **cmd);

/* 1 when the master's INFO read last said that it has AOF on and knows
 * WAITAOF (Redis 7.2 and later, Valkey); 0 when not, or not read yet. */
int dlock__route_aof(const dlock__route *r);

/* Whether the text of an INFO ('len' bytes) says AOF is on and WAITAOF
 * is known: 1 or 0, or -1 when it has no persistence section. For tests
 * too. */
int dlock__route_aof_info(const char *text, size_t len);

/* Counts the replicas in step in the text of INFO replication ('len'
 * bytes): -1 when it is not a master's. For tests too. */
int dlock__route_count_info(const char *text, size_t len);

/* ---- life --------------------------------------------------------------- */

/* Connects (one server, Sentinel) or reads the slot map (a cluster) by
 * 'deadline_us'. */
int dlock__route_open(dlock__route *r, int64_t deadline_us);

/* 1 when a failure to reach Redis at the open is an outage that passes,
 * not a URL that never worked: the Sentinels named a master that does not
 * answer (yet) as one, or a cluster node gave a map whose slots no master
 * serves (yet). A single server's URL cannot tell the two apart: a server
 * that does not answer there fails the open at once. */
int dlock__route_in_outage(dlock__route *r);

/* dlock__conn_cancel on every link (those not yet made included). */
void dlock__route_cancel(dlock__route *r);

/* Frees the links and the topology; no call may be in progress. */
void dlock__route_free(dlock__route *r);

/* In a child of fork(): dlock__conn_forget on every link, the links then
 * dropped (the cluster freed); 0, or -1 (and nothing dropped) when one of
 * them could not be. The Sentinel discovery is left as it is. */
int dlock__route_forget(dlock__route *r);

/* Where the client's master is, as "host:port" ('ep' is the client's
 * endpoint, which names it unless the Sentinels do). */
void dlock__route_describe(dlock__route *r, const dlock__endpoint *ep,
                           char *buf, size_t n);

/*
 * The watcher of the master's moves (Sentinel's +switch-master), for an
 * event loop to step as a thread would (engine/watcher.c): one step with
 * what came on the descriptor it last asked for ('revents', 0 when its
 * time came), filling what it waits for next. A deployment with nothing
 * to watch asks for nothing (fd -1, no time); dlock__route_watch_end
 * closes what the steps opened.
 */
void dlock__route_watch_step(dlock__route *r, short revents,
                             dlock__watch_io *next);
void dlock__route_watch_end(dlock__route *r);

#endif
