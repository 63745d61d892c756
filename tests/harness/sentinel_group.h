/*
 * Test harness: a replicated deployment on loopback, one master, its
 * replicas and the Sentinels that watch them (redis-server --sentinel),
 * each a throwaway server of redis_proc.h with a generated config in its
 * own temp dir. Every process is stopped by pid in sg_free(), or at exit
 * like any rp_server_t.
 *
 * Failover is tuned for tests: a master is judged down after
 * down_after_ms (default 1000, or $DLOCK_TEST_SENTINEL_DOWN_MS) and a
 * failover that stalls is tried again after twice failover_timeout_ms.
 * The data nodes are numbered 0.. in the order they were started; node 0
 * is the first master. Which node is master changes with each failover:
 * sg_master_index() asks the Sentinels.
 *
 * Start and use a group from the test's main thread (see redis_proc.h on
 * PR_SET_PDEATHSIG).
 */
#ifndef DLOCK_TEST_SENTINEL_GROUP_H
#define DLOCK_TEST_SENTINEL_GROUP_H

#include "redis_proc.h"
#include "tls_server.h"

typedef struct sg_group sg_group_t;

typedef struct sg_options {
  int replicas;              /* default 2 */
  int sentinels;             /* default 3; the quorum is a majority */
  int down_after_ms;         /* default 1000 */
  int failover_timeout_ms;   /* default 3000 */
  const char *master_name;   /* default "mymaster" */
  const char *requirepass;   /* the data nodes' password, or NULL */
  const char *sentinel_pass; /* the Sentinels' own password, or NULL */
  /* Non-NULL: every data node and Sentinel also listens for TLS with these
   * certificates (tls-port, tls-auth-clients no) and they talk to each
   * other over TLS only (tls-replication yes), so that the Sentinels name
   * the nodes' TLS ports; sg_url is then a rediss-sentinel:// URL of the
   * Sentinels' TLS ports. Each keeps its plain port for the harness. */
  const tls_files_t *tls;
} sg_options_t;

void sg_options_init(sg_options_t *o);

/*
 * Starts the data nodes and the Sentinels and waits (up to 30 s) until the
 * replicas are in sync and every Sentinel knows every replica and every
 * other Sentinel, so that a failover can be run at once. 0 or -1.
 */
int sg_start(const sg_options_t *o, sg_group_t **out);

/* "redis-sentinel://[:pass@]127.0.0.1:P1,127.0.0.1:P2,.../mymaster"; the
 * password is the data nodes' (sentinel_pass goes in sg_url_with). */
const char *sg_url(const sg_group_t *g);

int sg_nnodes(const sg_group_t *g);
rp_server_t *sg_node(sg_group_t *g, int i);
int sg_nsentinels(const sg_group_t *g);
rp_server_t *sg_sentinel(sg_group_t *g, int i);
const char *sg_master_name(const sg_group_t *g);

/* The index of the node the Sentinels name as master (the first Sentinel
 * that answers), or -1. */
int sg_master_index(sg_group_t *g);

/* The port the Sentinels and replicas know node or Sentinel 'i' by: its
 * TLS port in a TLS group, else its plain one. */
int sg_node_port(const sg_group_t *g, int i);
int sg_sentinel_port(const sg_group_t *g, int i);

/* The index of the node with 'port' (plain or TLS), or -1. */
int sg_node_of_port(sg_group_t *g, int port);

/*
 * Waits until the Sentinels name a master other than node 'old' and that
 * node says it is a master (ROLE), up to 'timeout_ms'. Returns its index,
 * or -1.
 */
int sg_wait_new_master(sg_group_t *g, int old, int timeout_ms);

/* SENTINEL FAILOVER on the first Sentinel that accepts it, then
 * sg_wait_new_master. Returns the new master's index, or -1. */
int sg_failover(sg_group_t *g, int timeout_ms);

/* Waits until the master has 'n' replicas online that acknowledged its
 * whole stream (WAIT n), up to 'timeout_ms'. 0 or -1. */
int sg_wait_replicas(sg_group_t *g, int n, int timeout_ms);

/* Starts node 'i' again (after rp_kill) as a replica of the current
 * master, as Sentinel would make it on its own some seconds later. 0 or
 * -1. */
int sg_restart_as_replica(sg_group_t *g, int i);

/* Stops every process, removes the temp dirs, frees 'g'. NULL ok. */
void sg_free(sg_group_t *g);

#endif
