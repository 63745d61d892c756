/*
 * One chaos run: the servers, the worker processes, the nemesis that
 * injects faults while they work, and the final check.
 *
 * The nemesis runs in the calling process, one fault at a time: inject,
 * heal, then a quiet gap, so that every effect in the history follows a
 * known cause, and recovery after each fault can be measured on its own.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* PR_SET_PDEATHSIG */
#endif
#include "chaos_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <hiredis/hiredis.h>

#include "cluster_group.h"
#include "dlock.h"
#include "redis_proc.h"
#include "sentinel_group.h"
#include "tls_server.h"

static const char *const fault_names[CHAOS_FAULT_COUNT] = {
    "kill-holder",
    "stop-holder",
    "pause-short",
    "pause-long",
    "pause-past-lease",
    "restart-aof",
    "restart-empty",
    "client-kill",
    "script-flush",
    "redlock-kill-minority",
    "redlock-pause-minority",
    "redlock-kill-majority",
    "sentinel-failover",
    "master-kill",
    "cluster-failover",
    "cluster-kill"};

const char *chaos_fault_name(chaos_fault_t f) {
  return (int)f >= 0 && f < CHAOS_FAULT_COUNT ? fault_names[f] : "?";
}

/* How long a worker may take to finish after the deadline: its last hold,
 * an unlock with its retries, closing its clients. */
#define WORKER_GRACE_MS 15000

typedef struct worker {
  pid_t pid;
  int alive;
  int stopped;
} worker;

typedef struct nemesis {
  const chaos_config_t *cfg;
  chaos_result_t *r;
  chaos_env_t env;
  /* In a Sentinel run, nodes[0] is the current master of 'group', which
   * owns it. */
  rp_server_t *nodes[CHAOS_NODES_MAX];
  sg_group_t *group;
  /* In a cluster run, nodes[0] is the master of 'cluster' that serves the
   * lock's slot, 'slot'; the group owns it. */
  cg_group_t *cluster;
  int slot;
  int down[CHAOS_NODES_MAX]; /* 1 killed, 2 paused */
  rp_server_t *resource;
  int fd;
  uint64_t rng;
  worker *w;
  size_t nw, capw;
  int next_proc;
  int client_kills;
  int64_t max_lease_ms;
  char dir[512];
  /* A TLS run: the certificates, and the rediss:// URLs of the nodes. */
  tls_files_t *tls;
  char tls_urls[CHAOS_NODES_MAX][64];
} nemesis;

static void note(const nemesis *nm, chaos_ev_t ev, int kind, int pid,
                 int64_t a) {
  chaos__record(nm->fd, ev, kind, pid, 0, a, 0, 0);
}

/* ---- servers ---------------------------------------------------------------
 */

/* Gives the semaphore of a semaphore run its permits if it has none, as
 * its operator would (Redisson's trySetPermits): at the start, and after
 * a restart that lost the data. */
static int sem_init(nemesis *nm) {
  redisReply *r =
      rp_cmd(nm->nodes[0], "SET %s %d NX", CHAOS_SEM, nm->cfg->permits);
  int ok = r != NULL && r->type != REDIS_REPLY_ERROR;
  freeReplyObject(r);
  return ok ? 0 : -1;
}

/*
 * 1 when every live node of the cluster names 3 masters and has its bus
 * links to the others up (CLUSTER NODES). A replica asked for CLUSTER
 * FAILOVER sends its master the request over the bus, and a master heeds
 * it only from a node it knows as its own replica: right after the
 * cluster was made, nodes still list replicas as masters, the request is
 * dropped, and the failover times out 5 s later.
 */
static int cluster_links_up(cg_group_t *g) {
  for (int i = 0; i < cg_nnodes(g); i++) {
    if (rp_pid(cg_node(g, i)) == 0)
      continue;
    redisReply *r = rp_cmd(cg_node(g, i), "CLUSTER NODES");
    int up = r != NULL && r->type == REDIS_REPLY_STRING, masters = 0;
    for (char *line = up ? r->str : NULL; up && line && *line;) {
      char *end = strchr(line, '\n');
      if (end != NULL)
        *end = '\0';
      /* <id> <addr> <flags> <master> <ping> <pong> <epoch> <link> ... */
      char flags[128] = "", link[32] = "";
      if (sscanf(line, "%*s %*s %127s %*s %*s %*s %*s %31s", flags, link) != 2)
        up = 0;
      else if (strstr(flags, "fail") == NULL && strstr(flags, "noaddr") == NULL)
        up = strcmp(link, "connected") == 0;
      masters +=
          strstr(flags, "master") != NULL && strstr(flags, "fail") == NULL;
      line = end != NULL ? end + 1 : NULL;
    }
    freeReplyObject(r);
    if (!up || masters != 3)
      return 0;
  }
  return 1;
}

/* Waits (up to 'ms') for cluster_links_up(). */
static void cluster_wait_links(cg_group_t *g, int64_t ms) {
  int64_t until = chaos__now_us() + ms * 1000;
  while (!cluster_links_up(g) && chaos__now_us() < until)
    chaos__sleep_ms(20);
}

static int start_servers(nemesis *nm) {
  const chaos_config_t *c = nm->cfg;
  rp_options_t o;
  rp_options_init(&o);
  if (rp_start(&o, &nm->resource) != 0)
    return -1;
  /* Persistence where a fault restarts a server and the scenario expects
   * the data back, and on RedLock nodes, as the algorithm requires. */
  int aof = !(c->faults & CHAOS_BIT(CHAOS_RESTART_EMPTY)) &&
            (c->redlock || (c->faults & CHAOS_BIT(CHAOS_RESTART_AOF)));
  o.appendonly = aof;
  nm->env.nnodes = c->redlock ? CHAOS_NODES_MAX : 1;
  if (c->sentinel) {
    /* The harness's group: down-after 1 s, failover-timeout 3 s. */
    if (sg_start(NULL, &nm->group) != 0)
      return -1;
    nm->nodes[0] = sg_node(nm->group, sg_master_index(nm->group));
    nm->env.urls[0] = sg_url(nm->group);
    nm->env.resource_port = rp_port(nm->resource);
    return 0;
  }
  if (c->cluster) {
    if (cg_start(&nm->cluster) != 0)
      return -1;
    nm->slot = cg_keyslot(nm->cluster, CHAOS_LOCK);
    int m = nm->slot >= 0 ? cg_master_of_slot(nm->cluster, 0, nm->slot) : -1;
    if (m < 0)
      return -1;
    nm->nodes[0] = cg_node(nm->cluster, m);
    nm->env.urls[0] = cg_url(nm->cluster);
    cluster_wait_links(nm->cluster, 10000);
    nm->env.resource_port = rp_port(nm->resource);
    return 0;
  }
  if (c->tls && tls_files_make(&nm->tls) != 0)
    return -1;
  if (c->tls)
    nm->env.tls_ca = nm->tls->ca_crt;
  for (int i = 0; i < nm->env.nnodes; i++) {
    if (c->tls) {
      /* Both ports stay across a restart; the nemesis keeps the plain
       * one for its own commands. */
      int port;
      if (tls_server_start_with(nm->tls, "no", &o, &nm->nodes[i], &port) != 0)
        return -1;
      snprintf(nm->tls_urls[i], sizeof(nm->tls_urls[i]),
               "rediss://127.0.0.1:%d", port);
      nm->env.urls[i] = nm->tls_urls[i];
      continue;
    }
    if (rp_start(&o, &nm->nodes[i]) != 0)
      return -1;
    nm->env.urls[i] = rp_url(nm->nodes[i]);
  }
  nm->env.resource_port = rp_port(nm->resource);
  return c->permits > 0 ? sem_init(nm) : 0;
}

static void node_kill(nemesis *nm, int i) {
  if (nm->down[i] == 0 && rp_kill(nm->nodes[i]) == 0)
    nm->down[i] = 1;
}

static void node_pause(nemesis *nm, int i) {
  if (nm->down[i] == 0 && rp_pause(nm->nodes[i]) == 0)
    nm->down[i] = 2;
}

/* Brings node 'i' back, whatever happened to it. A restart can fail when
 * the port was taken meanwhile; it is retried, as a dead lock server would
 * end the run's usefulness. */
static void node_heal(nemesis *nm, int i) {
  if (nm->down[i] == 2) {
    rp_resume(nm->nodes[i]);
  } else if (nm->down[i] == 1) {
    for (int attempt = 0; attempt < 5; attempt++) {
      if (rp_restart(nm->nodes[i]) == 0)
        break;
      chaos__sleep_ms(200);
    }
  }
  nm->down[i] = 0;
}

/* ---- workers ----------------------------------------------------------------
 */

static int spawn_worker(nemesis *nm) {
  if (nm->nw == nm->capw) {
    size_t cap = nm->capw ? nm->capw * 2 : 16;
    worker *grown = realloc(nm->w, cap * sizeof(*grown));
    if (grown == NULL)
      return -1;
    nm->w = grown;
    nm->capw = cap;
  }
  int proc = nm->next_proc++;
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0)
    return -1;
  if (pid == 0) {
#ifdef __linux__
    /* A worker must not outlive a controller that died. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
    chaos__worker_main(&nm->env, proc);
  }
  nm->w[nm->nw].pid = pid;
  nm->w[nm->nw].alive = 1;
  nm->w[nm->nw].stopped = 0;
  nm->nw++;
  nm->r->processes++;
  return 0;
}

static worker *worker_of(nemesis *nm, pid_t pid) {
  for (size_t i = 0; i < nm->nw; i++)
    if (nm->w[i].pid == pid && nm->w[i].alive)
      return &nm->w[i];
  return NULL;
}

/* The pid in a lock hash field "chaos-<pid>-<thread>-n<node>:<owner>". */
static pid_t field_pid(const char *field) {
  size_t n = strlen(CHAOS_ID_PREFIX);
  if (strncmp(field, CHAOS_ID_PREFIX, n) != 0)
    return 0;
  return (pid_t)strtol(field + n, NULL, 10);
}

/* The client hash that begins permit id 'id' (16 bytes), or 0. */
static uint64_t permit_hash(const redisReply *id) {
  uint64_t h = 0;
  if (id->type != REDIS_REPLY_STRING || id->len < 8)
    return 0;
  for (int i = 0; i < 8; i++)
    h = h << 8 | (unsigned char)id->str[i];
  return h;
}

/* Whether one of the clients of worker process 'pid' has hash 'h'. */
static int client_of(const nemesis *nm, pid_t pid, uint64_t h) {
  for (int t = 0; t < nm->cfg->threads && t < CHAOS_THREADS_MAX; t++) {
    char cid[64];
    snprintf(cid, sizeof(cid), CHAOS_ID_PREFIX "%d-%d-n0", (int)pid, t);
    if (chaos__client_hash(cid) == h)
      return 1;
  }
  return 0;
}

/* The live worker process whose client took the permit 'id', or 0. */
static pid_t permit_pid(nemesis *nm, const redisReply *id) {
  uint64_t h = permit_hash(id);
  for (size_t k = 0; k < nm->nw; k++)
    if (nm->w[k].alive && client_of(nm, nm->w[k].pid, h))
      return nm->w[k].pid;
  return 0;
}

/* The permits of the semaphore whose lease has not ended (by this
 * machine's clock, which Redis's TIME reads too), or NULL. */
static redisReply *live_permits(nemesis *nm) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  long long now_ms = (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
  redisReply *r = rp_cmd(nm->nodes[0], "ZRANGEBYSCORE %s (%lld +inf",
                         CHAOS_SEM_PERMITS_KEY, now_ms);
  if (r != NULL && r->type != REDIS_REPLY_ARRAY) {
    freeReplyObject(r);
    r = NULL;
  }
  return r;
}

/* A worker process (not stopped) holding a permit now, or 0 when none
 * does for a while. */
static pid_t find_permit_holder(nemesis *nm) {
  int64_t until = chaos__now_us() + 500000;
  while (chaos__now_us() < until) {
    redisReply *r = live_permits(nm);
    pid_t pid = 0;
    for (size_t k = 0; r != NULL && k < r->elements && pid == 0; k++) {
      worker *w = worker_of(nm, permit_pid(nm, r->element[k]));
      if (w != NULL && !w->stopped)
        pid = w->pid;
    }
    freeReplyObject(r);
    if (pid > 0)
      return pid;
    chaos__sleep_ms(2);
  }
  return 0;
}

/* The worker process holding the lock now (on the first live node that
 * says so), or 0 when the lock stays free for a while. */
static pid_t find_holder(nemesis *nm) {
  if (nm->cfg->permits > 0)
    return find_permit_holder(nm);
  int64_t until = chaos__now_us() + 500000;
  while (chaos__now_us() < until) {
    for (int i = 0; i < nm->env.nnodes; i++) {
      if (nm->down[i])
        continue;
      redisReply *r = rp_cmd(nm->nodes[i], "HKEYS %s", CHAOS_LOCK);
      pid_t pid = 0;
      for (size_t k = 0; r && r->type == REDIS_REPLY_ARRAY && k < r->elements;
           k++) {
        worker *w = worker_of(nm, field_pid(r->element[k]->str));
        if (w != NULL && !w->stopped)
          pid = w->pid;
      }
      freeReplyObject(r);
      if (pid > 0)
        return pid;
    }
    chaos__sleep_ms(2);
  }
  return 0;
}

/* Whether any live node still has a hold of process 'pid' (in a
 * semaphore run: a permit whose lease has not ended; it comes back at the
 * next call that looks). The process is dead by then, so its client's
 * hash is compared directly. */
static int holds_of(nemesis *nm, pid_t pid) {
  int found = 0;
  if (nm->cfg->permits > 0) {
    redisReply *r = live_permits(nm);
    for (size_t k = 0; r != NULL && k < r->elements && !found; k++)
      found = client_of(nm, pid, permit_hash(r->element[k]));
    freeReplyObject(r);
    return found;
  }
  for (int i = 0; i < nm->env.nnodes && !found; i++) {
    if (nm->down[i])
      continue;
    redisReply *r = rp_cmd(nm->nodes[i], "HKEYS %s", CHAOS_LOCK);
    for (size_t k = 0; r && r->type == REDIS_REPLY_ARRAY && k < r->elements;
         k++)
      found |= field_pid(r->element[k]->str) == pid;
    freeReplyObject(r);
  }
  return found;
}

static void wait_state(pid_t pid, int what) {
  siginfo_t si;
  memset(&si, 0, sizeof(si));
  while (waitid(P_PID, (id_t)pid, &si, what | WEXITED | WNOWAIT) != 0 &&
         errno == EINTR) {
  }
}

/* ---- faults -----------------------------------------------------------------
 */

static int64_t stop_ms(const nemesis *nm) { return nm->max_lease_ms + 500; }

static void fault_kill_holder(nemesis *nm) {
  pid_t pid = find_holder(nm);
  if (pid == 0)
    return;
  nm->r->faults[CHAOS_KILL_HOLDER]++;
  note(nm, EV_FAULT, CHAOS_KILL_HOLDER, pid, 0);
  kill(pid, SIGKILL);
  while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
  }
  int64_t t0 = chaos__now_us();
  worker_of(nm, pid)->alive = 0;
  /* Recorded once it is dead: every record of the holder precedes it. */
  note(nm, EV_KILL, CHAOS_KILL_HOLDER, pid, 0);
  int64_t limit_us = (nm->r->lease_limit_ms + 2000) * 1000;
  int64_t free_ms = -1;
  while (chaos__now_us() - t0 < limit_us) {
    if (!holds_of(nm, pid)) {
      free_ms = (chaos__now_us() - t0) / 1000;
      break;
    }
    chaos__sleep_ms(5);
  }
  note(nm, EV_FREE, CHAOS_KILL_HOLDER, pid, free_ms);
  spawn_worker(nm);
}

static void fault_stop_holder(nemesis *nm) {
  pid_t pid = find_holder(nm);
  if (pid == 0)
    return;
  worker *w = worker_of(nm, pid);
  nm->r->faults[CHAOS_STOP_HOLDER]++;
  note(nm, EV_FAULT, CHAOS_STOP_HOLDER, pid, stop_ms(nm));
  kill(pid, SIGSTOP);
  wait_state(pid, WSTOPPED);
  w->stopped = 1;
  /* Recorded once it is stopped, and the resumption before it resumes, so
   * that the records bracket the time it really stood still. */
  note(nm, EV_STOP, CHAOS_STOP_HOLDER, pid, 0);
  chaos__sleep_ms(stop_ms(nm));
  note(nm, EV_CONT, CHAOS_STOP_HOLDER, pid, 0);
  kill(pid, SIGCONT);
  wait_state(pid, WCONTINUED);
  w->stopped = 0;
  note(nm, EV_HEAL, CHAOS_STOP_HOLDER, pid, 0);
}

static void fault_pause(nemesis *nm, chaos_fault_t kind) {
  const chaos_config_t *c = nm->cfg;
  int64_t min_lease = c->watchdog_timeout_ms;
  if (c->lease != CHAOS_LEASE_WATCHDOG && c->fixed_lease_ms < min_lease)
    min_lease = c->fixed_lease_ms;
  int64_t ms = kind == CHAOS_PAUSE_SHORT ? c->command_timeout_ms / 2
               : kind == CHAOS_PAUSE_LONG
                   ? (c->command_timeout_ms + min_lease) / 2
                   : stop_ms(nm);
  nm->r->faults[kind]++;
  note(nm, EV_FAULT, kind, 0, ms);
  node_pause(nm, 0);
  chaos__sleep_ms(ms);
  node_heal(nm, 0);
  note(nm, EV_HEAL, kind, 0, 0);
}

static void fault_restart(nemesis *nm, chaos_fault_t kind) {
  nm->r->faults[kind]++;
  note(nm, EV_FAULT, kind, 0, 0);
  node_kill(nm, 0);
  node_heal(nm, 0);
  /* A semaphore restarted without its data has no permits at all: its
   * operator sets them again (a no-op when the AOF kept them). */
  if (nm->cfg->permits > 0)
    sem_init(nm);
  note(nm, EV_HEAL, kind, 0, 0);
}

static void fault_command(nemesis *nm, chaos_fault_t kind) {
  redisReply *r;
  if (kind == CHAOS_CLIENT_KILL)
    r = rp_cmd(nm->nodes[0], "CLIENT KILL TYPE %s",
               nm->client_kills++ % 2 ? "pubsub" : "normal");
  else
    r = rp_cmd(nm->nodes[0], "SCRIPT FLUSH");
  freeReplyObject(r);
  nm->r->faults[kind]++;
  note(nm, EV_FAULT, kind, 0, 0);
  note(nm, EV_HEAL, kind, 0, 0);
}

/* A failover of the Sentinel group: asked of the Sentinels, or forced by
 * SIGKILL of the master, which then comes back as a replica of the new
 * one, empty (no persistence), as a replaced machine would. Healed once
 * the new master is named and both replicas are in step with it again, so
 * that the next failover has a replica in step to promote. */
static void fault_failover(nemesis *nm, chaos_fault_t kind) {
  sg_group_t *g = nm->group;
  int old = sg_master_index(g), m;
  if (old < 0)
    return;
  nm->r->faults[kind]++;
  note(nm, EV_FAULT, kind, 0, old);
  if (kind == CHAOS_SENTINEL_FAILOVER) {
    m = sg_failover(g, 30000);
  } else {
    rp_kill(sg_node(g, old));
    m = sg_wait_new_master(g, old, 30000);
    if (m >= 0 && sg_restart_as_replica(g, old) != 0)
      fprintf(stderr, "chaos: the old master did not come back\n");
  }
  if (m >= 0) {
    nm->nodes[0] = sg_node(g, m);
    nm->r->failovers++;
  } else {
    fprintf(stderr, "chaos: no new master after %s\n", chaos_fault_name(kind));
  }
  sg_wait_replicas(g, sg_nnodes(g) - 1, 30000);
  note(nm, EV_HEAL, kind, 0, m);
}

/* The node that the live nodes name as master of the lock's slot, or -1
 * while they do not agree on a live one. */
static int cluster_slot_master(nemesis *nm) {
  cg_group_t *g = nm->cluster;
  int owner = -1;
  for (int i = 0; i < cg_nnodes(g); i++) {
    if (rp_pid(cg_node(g, i)) == 0)
      continue;
    int m = cg_master_of_slot(g, i, nm->slot);
    if (m < 0 || rp_pid(cg_node(g, m)) == 0 || (owner >= 0 && m != owner))
      return -1;
    owner = m;
  }
  return owner;
}

/* 1 when master 'm' has a replica in sync that it streams its writes to,
 * so that a failover has something to promote and replica sync a replica
 * to count. */
static int cluster_has_replica(nemesis *nm, int m) {
  if (cg_replica_of(nm->cluster, m) < 0)
    return 0;
  redisReply *r = rp_cmd(cg_node(nm->cluster, m), "INFO replication");
  int ok = r != NULL && r->type == REDIS_REPLY_STRING &&
           strstr(r->str, "state=online") != NULL;
  freeReplyObject(r);
  return ok;
}

/*
 * A failover of the lock's shard in a cluster: CLUSTER FAILOVER on the
 * replica of the master serving the lock's slot, or SIGKILL of that
 * master, which the cluster replaces by its replica once the node timeout
 * has passed and the other masters voted; the killed node is then
 * restarted (no data, its nodes.conf kept) and rejoins as a replica of the
 * new master. Healed once every node agrees on the new master and it has
 * its replica in step again, so that the next fault has one to promote.
 */
static void fault_cluster(nemesis *nm, chaos_fault_t kind) {
  cg_group_t *g = nm->cluster;
  int old = cluster_slot_master(nm);
  int rep = old >= 0 ? cg_replica_of(g, old) : -1;
  if (rep < 0) {
    fprintf(stderr, "chaos: no replica in step to fail over to\n");
    return;
  }
  nm->r->faults[kind]++;
  note(nm, EV_FAULT, kind, 0, old);
  int64_t t0 = chaos__now_us(), t_m = 0;
  int m = -1;
  if (kind == CHAOS_CLUSTER_FAILOVER) {
    cluster_wait_links(g, 5000);
    /* The replica can win its election and still turn back into a replica
     * a moment later (seen when failovers follow each other closely: the
     * old master's newer configuration wins), so the new master is the
     * one every node names once they agree, not the replica asked. */
    cg_failover(g, rep, 30000);
    int64_t until = chaos__now_us() + 30000000;
    while (m < 0 && chaos__now_us() < until) {
      if (cg_wait_agree(g, nm->slot, 1000) == 0)
        m = cluster_slot_master(nm);
      if (m < 0)
        chaos__sleep_ms(20);
    }
    t_m = chaos__now_us();
  } else {
    rp_kill(cg_node(g, old));
    int64_t until = chaos__now_us() + 30000000;
    while (m < 0 && chaos__now_us() < until) {
      if (cluster_slot_master(nm) == rep &&
          cg_wait_agree(g, nm->slot, 1000) == 0)
        m = rep;
      else
        chaos__sleep_ms(20);
    }
    t_m = chaos__now_us();
    int restarted = -1;
    for (int attempt = 0; attempt < 5 && restarted != 0; attempt++) {
      restarted = rp_restart(cg_node(g, old));
      if (restarted != 0)
        chaos__sleep_ms(200);
    }
    if (restarted != 0)
      fprintf(stderr, "chaos: the old master did not come back\n");
  }
  if (m >= 0 && nm->cfg->verbose)
    fprintf(stderr, "chaos: node %d serves the lock's slot %lld ms after %s\n",
            m, (long long)(t_m - t0) / 1000, chaos_fault_name(kind));
  if (m >= 0)
    nm->nodes[0] = cg_node(g, m);
  if (m >= 0 && m != old)
    nm->r->failovers++;
  else
    fprintf(stderr, "chaos: no new master after %s\n", chaos_fault_name(kind));
  int64_t until = chaos__now_us() + 30000000;
  while (chaos__now_us() < until && (cg_wait_agree(g, -1, 1000) != 0 ||
                                     (m >= 0 && !cluster_has_replica(nm, m))))
    chaos__sleep_ms(50);
  note(nm, EV_HEAL, kind, 0, m);
}

/* Picks 'k' distinct nodes into the bitmask it returns. */
static int pick_nodes(nemesis *nm, int k) {
  int mask = 0;
  for (int picked = 0; picked < k;) {
    int bit = 1 << (chaos__rand(&nm->rng) % CHAOS_NODES_MAX);
    if (!(mask & bit)) {
      mask |= bit;
      picked++;
    }
  }
  return mask;
}

static void fault_redlock(nemesis *nm, chaos_fault_t kind) {
  int majority = kind == CHAOS_RED_KILL_MAJORITY;
  int mask = pick_nodes(nm, majority ? 3 : 2);
  nm->r->faults[kind]++;
  note(nm, EV_FAULT, kind, 0, mask);
  for (int i = 0; i < CHAOS_NODES_MAX; i++)
    if (mask & (1 << i)) {
      if (kind == CHAOS_RED_PAUSE_MINORITY)
        node_pause(nm, i);
      else
        node_kill(nm, i);
    }
  if (majority)
    note(nm, EV_DOWN, kind, 0, mask);
  /* Down for longer than any lease, so that every hold on those nodes has
   * expired by the time they return (with their data, from the AOF). */
  chaos__sleep_ms(stop_ms(nm));
  if (majority)
    note(nm, EV_UP, kind, 0, mask);
  for (int i = 0; i < CHAOS_NODES_MAX; i++)
    if (mask & (1 << i))
      node_heal(nm, i);
  note(nm, EV_HEAL, kind, 0, mask);
}

static void inject(nemesis *nm, chaos_fault_t kind) {
  if (nm->cfg->verbose)
    fprintf(stderr, "chaos: %s\n", chaos_fault_name(kind));
  switch (kind) {
  case CHAOS_KILL_HOLDER:
    fault_kill_holder(nm);
    break;
  case CHAOS_STOP_HOLDER:
    fault_stop_holder(nm);
    break;
  case CHAOS_PAUSE_SHORT:
  case CHAOS_PAUSE_LONG:
  case CHAOS_PAUSE_PAST_LEASE:
    fault_pause(nm, kind);
    break;
  case CHAOS_RESTART_AOF:
  case CHAOS_RESTART_EMPTY:
    fault_restart(nm, kind);
    break;
  case CHAOS_CLIENT_KILL:
  case CHAOS_SCRIPT_FLUSH:
    fault_command(nm, kind);
    break;
  case CHAOS_SENTINEL_FAILOVER:
  case CHAOS_MASTER_KILL:
    fault_failover(nm, kind);
    break;
  case CHAOS_CLUSTER_FAILOVER:
  case CHAOS_CLUSTER_KILL:
    fault_cluster(nm, kind);
    break;
  default:
    fault_redlock(nm, kind);
    break;
  }
}

/* The faults of the scenario in a fresh random order: every kind comes up
 * once per round, so a short run still sees each of them. */
static size_t shuffle_round(nemesis *nm, chaos_fault_t *out) {
  size_t n = 0;
  for (int f = 0; f < CHAOS_FAULT_COUNT; f++)
    if (nm->cfg->faults & CHAOS_BIT(f))
      out[n++] = (chaos_fault_t)f;
  for (size_t i = n; i > 1; i--) {
    size_t j = (size_t)(chaos__rand(&nm->rng) % i);
    chaos_fault_t t = out[i - 1];
    out[i - 1] = out[j];
    out[j] = t;
  }
  return n;
}

/* About how long a fault takes from injection to healing. */
static int64_t fault_ms(const nemesis *nm, chaos_fault_t kind) {
  switch (kind) {
  case CHAOS_KILL_HOLDER:
  case CHAOS_STOP_HOLDER:
  case CHAOS_PAUSE_PAST_LEASE:
  case CHAOS_RED_KILL_MINORITY:
  case CHAOS_RED_PAUSE_MINORITY:
  case CHAOS_RED_KILL_MAJORITY:
    return stop_ms(nm) + 300;
  case CHAOS_PAUSE_LONG:
    return nm->max_lease_ms;
  case CHAOS_SENTINEL_FAILOVER:
  case CHAOS_MASTER_KILL:
    /* Detection (down-after 1 s), election, the replicas' resync. */
    return 6000;
  case CHAOS_CLUSTER_FAILOVER:
    /* The replica's catch-up and takeover, then every node agreeing. */
    return 3000;
  case CHAOS_CLUSTER_KILL:
    /* The node timeout (2 s), the vote, the restart and the resync. */
    return 8000;
  default:
    return 300;
  }
}

static void run_nemesis(nemesis *nm, int64_t until_us) {
  chaos_fault_t round[CHAOS_FAULT_COUNT];
  size_t n = 0, next = 0;
  /* Let the workers get going first. */
  chaos__sleep_ms(300);
  while (nm->cfg->faults != 0 && chaos__now_us() < until_us) {
    if (next == n) {
      n = shuffle_round(nm, round);
      next = 0;
    }
    /* A fault that could not heal before the end is not started: the
     * workers must meet a working server to finish. */
    if (chaos__now_us() + fault_ms(nm, round[next]) * 1000 > until_us)
      break;
    inject(nm, round[next++]);
    int64_t gap =
        nm->cfg->gap_ms +
        (int64_t)(chaos__rand(&nm->rng) % (uint64_t)(nm->cfg->gap_ms / 2 + 1));
    int64_t left = (until_us - chaos__now_us()) / 1000;
    chaos__sleep_ms(gap < left ? gap : left);
  }
  int64_t left = (until_us - chaos__now_us()) / 1000;
  chaos__sleep_ms(left);
}

/* ---- the end of a run ------------------------------------------------------
 */

static void heal_all(nemesis *nm) {
  for (int i = 0; i < nm->env.nnodes; i++)
    node_heal(nm, i);
  for (size_t i = 0; i < nm->nw; i++)
    if (nm->w[i].alive && nm->w[i].stopped) {
      kill(nm->w[i].pid, SIGCONT);
      nm->w[i].stopped = 0;
    }
}

/* Waits for every worker; one still running long after the deadline is
 * killed, and counted with those that died of a signal we did not send. */
static void reap_workers(nemesis *nm) {
  int64_t until = nm->env.deadline_us + WORKER_GRACE_MS * 1000;
  for (size_t i = 0; i < nm->nw; i++) {
    worker *w = &nm->w[i];
    while (w->alive) {
      int status;
      pid_t got = waitpid(w->pid, &status, WNOHANG);
      if (got == w->pid) {
        w->alive = 0;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
          nm->r->worker_crashes++;
          fprintf(stderr, "chaos: worker %ld ended with status 0x%x\n",
                  (long)w->pid, (unsigned)status);
        }
      } else if (got < 0 && errno != EINTR) {
        w->alive = 0;
      } else if (chaos__now_us() > until) {
        fprintf(stderr, "chaos: worker %ld still running, killed\n",
                (long)w->pid);
        kill(w->pid, SIGKILL);
        kill(w->pid, SIGCONT);
      } else {
        chaos__sleep_ms(20);
      }
    }
  }
}

/* Whether the lock is still held somewhere once every lease has run out:
 * holds whose unlock failed must expire by themselves. */
static int held_at_end(nemesis *nm) {
  int64_t until = chaos__now_us() + nm->r->lease_limit_ms * 1000;
  for (;;) {
    int held = 0;
    if (nm->cfg->permits > 0) {
      redisReply *r = live_permits(nm);
      held = r == NULL || r->elements > 0;
      freeReplyObject(r);
    }
    for (int i = 0; i < nm->env.nnodes && nm->cfg->permits == 0; i++) {
      redisReply *r = rp_cmd(nm->nodes[i], "EXISTS %s", CHAOS_LOCK);
      held += r == NULL || r->type != REDIS_REPLY_INTEGER || r->integer != 0;
      freeReplyObject(r);
    }
    if (held == 0 || chaos__now_us() > until)
      return held != 0;
    chaos__sleep_ms(20);
  }
}

/* A semaphore's permits are free (its counter) or taken (its zset, whose
 * ended leases come back at the next call that looks): each script moves
 * them between the two, so with everyone gone the two add up to the N it
 * was given, or permits were lost or made up. Returns the difference. */
static int64_t permits_drift(nemesis *nm) {
  redisReply *r = rp_cmd(nm->nodes[0], "EVAL %s 2 %s %s",
                         "return {tonumber(redis.call('get', KEYS[1]) or "
                         "'-1'), redis.call('zcard', KEYS[2])}",
                         CHAOS_SEM, CHAOS_SEM_PERMITS_KEY);
  int64_t drift = INT64_MIN;
  if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
      r->element[0]->integer >= 0)
    drift = r->element[0]->integer + r->element[1]->integer - nm->cfg->permits;
  freeReplyObject(r);
  if (drift == INT64_MIN) {
    fprintf(stderr, "chaos: the semaphore has no permits set at the end\n");
    drift = -nm->cfg->permits;
  }
  return drift;
}

/* Reads the counter and the resource's log of accepted writes. */
static int read_final(nemesis *nm, chaos_final_t *fin,
                      chaos_fence_entry_t **log) {
  memset(fin, 0, sizeof(*fin));
  *log = NULL;
  redisReply *r = rp_cmd(nm->resource, "GET %s", CHAOS_COUNTER);
  if (r == NULL)
    return -1;
  fin->counter = r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : 0;
  freeReplyObject(r);
  r = rp_cmd(nm->resource, "LRANGE %s 0 -1", CHAOS_FENCE_LOG);
  if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
    freeReplyObject(r);
    return -1;
  }
  *log = calloc(r->elements + 1, sizeof(**log));
  if (*log == NULL) {
    freeReplyObject(r);
    return -1;
  }
  for (size_t i = 0; i < r->elements; i++) {
    chaos_fence_entry_t *e = &(*log)[fin->nlog];
    if (sscanf(r->element[i]->str, "%" SCNd64 " %d.%" SCNd64, &e->token,
               &e->owner, &e->hold) == 3)
      fin->nlog++;
  }
  freeReplyObject(r);
  fin->log = *log;
  return 0;
}

static int make_dir(nemesis *nm) {
  const chaos_config_t *c = nm->cfg;
  if (c->keep_dir != NULL) {
    snprintf(nm->dir, sizeof(nm->dir), "%s", c->keep_dir);
    /* The histories of an earlier run kept there would be appended to and
     * read back as part of this one: they go first. */
    chaos__history_remove(nm->dir);
    if (mkdir(nm->dir, 0700) != 0 && errno != EEXIST)
      return -1;
    return 0;
  }
  const char *base = getenv("TMPDIR");
  if (base == NULL || *base == '\0')
    base = "/tmp";
  snprintf(nm->dir, sizeof(nm->dir), "%s/dlock-chaos-XXXXXX", base);
  return mkdtemp(nm->dir) != NULL ? 0 : -1;
}

int chaos_run(const chaos_config_t *c, chaos_result_t *r) {
  memset(r, 0, sizeof(*r));
  nemesis nm;
  memset(&nm, 0, sizeof(nm));
  nm.cfg = c;
  nm.r = r;
  nm.fd = -1;
  nm.env.cfg = c;
  nm.rng = (c->seed ? c->seed : (uint64_t)chaos__now_us()) | 1;
  nm.max_lease_ms = c->watchdog_timeout_ms;
  if (c->lease != CHAOS_LEASE_WATCHDOG && c->fixed_lease_ms > nm.max_lease_ms)
    nm.max_lease_ms = c->fixed_lease_ms;
  r->lease_limit_ms = nm.max_lease_ms + 1000;

  if ((c->permits > 0 || c->redlock) && (c->sentinel || c->cluster)) {
    fprintf(stderr, "chaos: a Sentinel or cluster run takes a lock, not a "
                    "RedLock or a semaphore\n");
    r->setup_failed = 1;
    return -1;
  }
  if (c->permits > 0 && c->redlock) {
    fprintf(stderr, "chaos: a semaphore run takes one Redis, not a RedLock\n");
    r->setup_failed = 1;
    return -1;
  }
  int rc = -1;
  chaos_event_t *ev = NULL;
  size_t nev = 0;
  chaos_fence_entry_t *log = NULL;
  if (make_dir(&nm) != 0) {
    fprintf(stderr, "chaos: cannot make a history directory\n");
    r->setup_failed = 1;
    return -1;
  }
  nm.env.dir = nm.dir;
  nm.fd = chaos__history_open(nm.dir, "nemesis.log");
  if (nm.fd < 0 || start_servers(&nm) != 0) {
    fprintf(stderr, "chaos: cannot start the servers\n");
    r->setup_failed = 1;
    goto out;
  }
  int64_t start = chaos__now_us();
  nm.env.deadline_us = start + c->duration_ms * 1000;
  for (int i = 0; i < c->procs; i++)
    if (spawn_worker(&nm) != 0) {
      r->setup_failed = 1;
      nm.env.deadline_us = chaos__now_us();
      break;
    }
  /* Faults stop a second before the end, so every last one is healed and
   * the workers leave a server that works. */
  if (!r->setup_failed)
    run_nemesis(&nm, nm.env.deadline_us - 1000000);
  heal_all(&nm);
  reap_workers(&nm);
  r->seconds = (double)(chaos__now_us() - start) / 1e6;
  r->held_at_end = held_at_end(&nm);
  if (c->permits > 0)
    r->permits_drift = permits_drift(&nm);
  chaos_final_t fin;
  if (read_final(&nm, &fin, &log) != 0 ||
      chaos__history_load(nm.dir, &ev, &nev) != 0) {
    fprintf(stderr, "chaos: cannot read the results\n");
    r->setup_failed = 1;
    goto out;
  }
  chaos__check(c, ev, nev, &fin, r);
  rc = r->setup_failed ? -1 : 0;
out:
  heal_all(&nm);
  for (size_t i = 0; i < nm.nw; i++)
    if (nm.w[i].alive) {
      kill(nm.w[i].pid, SIGKILL);
      while (waitpid(nm.w[i].pid, NULL, 0) < 0 && errno == EINTR) {
      }
    }
  if (nm.group != NULL) {
    nm.nodes[0] = NULL;
    sg_free(nm.group);
  }
  if (nm.cluster != NULL) {
    nm.nodes[0] = NULL;
    cg_free(nm.cluster);
  }
  for (int i = 0; i < CHAOS_NODES_MAX; i++)
    rp_free(nm.nodes[i]);
  rp_free(nm.resource);
  tls_files_free(nm.tls);
  if (nm.fd >= 0)
    close(nm.fd);
  if (c->keep_dir == NULL)
    chaos__history_remove(nm.dir);
  free(nm.w);
  free(ev);
  free(log);
  return rc;
}
