/*
 * A master, its replicas and Sentinels on loopback; see sentinel_group.h.
 */
#define _GNU_SOURCE

#include "sentinel_group.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* How long the whole group may take to come up and learn itself. */
#define START_TIMEOUT_MS 30000
#define MAX_NODES 8

struct sg_group {
  sg_options_t opt;
  char name[64];
  int nnodes, nsentinels;
  rp_server_t *node[MAX_NODES];
  rp_server_t *sentinel[MAX_NODES];
  int node_tls_port[MAX_NODES], sentinel_tls_port[MAX_NODES];
  char *url;
};

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int64_t ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

void sg_options_init(sg_options_t *o) {
  memset(o, 0, sizeof(*o));
  o->replicas = 2;
  o->sentinels = 3;
  o->down_after_ms = 1000;
  const char *env = getenv("DLOCK_TEST_SENTINEL_DOWN_MS");
  if (env != NULL && atoi(env) > 0)
    o->down_after_ms = atoi(env);
  o->failover_timeout_ms = 3000;
  o->master_name = "mymaster";
}

/* Appends a config line for a password, quoted for redis.conf. */
static void put_pass(char *buf, size_t n, const char *directive,
                     const char *pass) {
  size_t len = strlen(buf);
  snprintf(buf + len, n - len, "%s \"", directive);
  len = strlen(buf);
  for (const char *p = pass; *p && len + 3 < n; p++) {
    if (*p == '"' || *p == '\\')
      buf[len++] = '\\';
    buf[len++] = *p;
  }
  snprintf(buf + len, n - len, "\"\n");
}

/* Starts a data node or a Sentinel from 'o': in a TLS group with a TLS
 * port too, through which it talks to the others (tls-replication). */
static int start_proc(sg_group_t *g, rp_options_t *o, rp_server_t **out,
                      int *tls_port) {
  *tls_port = 0;
  if (g->opt.tls == NULL)
    return rp_start(o, out) == 0 ? 0 : -1;
  char conf[4096];
  snprintf(conf, sizeof(conf), "tls-replication yes\n%s",
           o->extra_conf != NULL ? o->extra_conf : "");
  o->extra_conf = conf;
  return tls_server_start_with(g->opt.tls, "no", o, out, tls_port) == 0 ? 0
                                                                        : -1;
}

int sg_node_port(const sg_group_t *g, int i) {
  return g->opt.tls != NULL ? g->node_tls_port[i] : rp_port(g->node[i]);
}

int sg_sentinel_port(const sg_group_t *g, int i) {
  return g->opt.tls != NULL ? g->sentinel_tls_port[i] : rp_port(g->sentinel[i]);
}

static int start_node(sg_group_t *g, int replica_of_port) {
  char extra[1024] = "";
  rp_options_t o;
  rp_options_init(&o);
  o.requirepass = g->opt.requirepass;
  if (g->opt.requirepass != NULL)
    put_pass(extra, sizeof(extra), "masterauth", g->opt.requirepass);
  if (replica_of_port > 0) {
    size_t len = strlen(extra);
    snprintf(extra + len, sizeof(extra) - len, "replicaof 127.0.0.1 %d\n",
             replica_of_port);
  }
  /* A replica that lost its master serves nothing stale while it waits:
   * the failover tests must see MASTERDOWN, never an old value. */
  size_t len = strlen(extra);
  snprintf(extra + len, sizeof(extra) - len,
           "replica-serve-stale-data no\nrepl-diskless-sync no\n");
  o.extra_conf = extra;
  int i = g->nnodes++;
  return start_proc(g, &o, &g->node[i], &g->node_tls_port[i]);
}

static int start_sentinel(sg_group_t *g, int master_port) {
  char extra[2048];
  int quorum = g->opt.sentinels / 2 + 1;
  snprintf(extra, sizeof(extra),
           "sentinel monitor %s 127.0.0.1 %d %d\n"
           "sentinel down-after-milliseconds %s %d\n"
           "sentinel failover-timeout %s %d\n"
           "sentinel parallel-syncs %s 4\n",
           g->name, master_port, quorum, g->name, g->opt.down_after_ms, g->name,
           g->opt.failover_timeout_ms, g->name);
  if (g->opt.requirepass != NULL) {
    char line[256];
    snprintf(line, sizeof(line), "sentinel auth-pass %s", g->name);
    put_pass(extra, sizeof(extra), line, g->opt.requirepass);
  }
  rp_options_t o;
  rp_options_init(&o);
  o.sentinel = 1;
  o.requirepass = g->opt.sentinel_pass;
  if (g->opt.sentinel_pass != NULL) {
    /* Sentinels talk to each other with the password they require. */
    put_pass(extra, sizeof(extra), "sentinel sentinel-pass",
             g->opt.sentinel_pass);
  }
  o.extra_conf = extra;
  int i = g->nsentinels++;
  return start_proc(g, &o, &g->sentinel[i], &g->sentinel_tls_port[i]);
}

/* A field of "SENTINEL MASTER name" (a flat array of names and values). */
static long master_field(rp_server_t *s, const char *name, const char *field) {
  redisReply *r = rp_cmd(s, "SENTINEL MASTER %s", name);
  long v = -1;
  if (r != NULL && r->type == REDIS_REPLY_ARRAY) {
    for (size_t i = 0; i + 1 < r->elements; i += 2)
      if (r->element[i]->type == REDIS_REPLY_STRING &&
          strcmp(r->element[i]->str, field) == 0 &&
          r->element[i + 1]->str != NULL)
        v = atol(r->element[i + 1]->str);
  }
  freeReplyObject(r);
  return v;
}

/* 1 when node 'i' answers ROLE with "master". */
static int is_master(sg_group_t *g, int i) {
  redisReply *r = rp_cmd(g->node[i], "ROLE");
  int yes = r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
            r->element[0]->type == REDIS_REPLY_STRING &&
            strcmp(r->element[0]->str, "master") == 0;
  freeReplyObject(r);
  return yes;
}

int sg_node_of_port(sg_group_t *g, int port) {
  for (int i = 0; i < g->nnodes; i++)
    if (rp_port(g->node[i]) == port || sg_node_port(g, i) == port)
      return i;
  return -1;
}

int sg_master_index(sg_group_t *g) {
  for (int i = 0; i < g->nsentinels; i++) {
    if (rp_pid(g->sentinel[i]) <= 0)
      continue;
    redisReply *r =
        rp_cmd(g->sentinel[i], "SENTINEL GET-MASTER-ADDR-BY-NAME %s", g->name);
    int port = -1;
    if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[1]->type == REDIS_REPLY_STRING)
      port = atoi(r->element[1]->str);
    freeReplyObject(r);
    if (port > 0)
      return sg_node_of_port(g, port);
  }
  return -1;
}

int sg_wait_replicas(sg_group_t *g, int n, int timeout_ms) {
  int64_t deadline = now_ms() + timeout_ms;
  do {
    /* Before the Sentinels run, node 0 is the master. */
    int m = g->nsentinels > 0 ? sg_master_index(g) : 0;
    if (m >= 0) {
      /* A write, so that WAIT has an offset to wait for. */
      freeReplyObject(rp_cmd(g->node[m], "SET sg:probe 1"));
      redisReply *r = rp_cmd(g->node[m], "WAIT %d 500", n);
      int got =
          r != NULL && r->type == REDIS_REPLY_INTEGER ? (int)r->integer : -1;
      freeReplyObject(r);
      if (got >= n)
        return 0;
    }
    sleep_ms(50);
  } while (now_ms() < deadline);
  fprintf(stderr, "sentinel_group: %d replicas not in sync in %d ms\n", n,
          timeout_ms);
  return -1;
}

/* Every running Sentinel knows 'replicas' replicas and the other running
 * Sentinels, and names 'master' as master. */
static int sentinels_agree(sg_group_t *g, int master, int replicas) {
  int running = 0;
  for (int i = 0; i < g->nsentinels; i++)
    running += rp_pid(g->sentinel[i]) > 0;
  for (int i = 0; i < g->nsentinels; i++) {
    rp_server_t *s = g->sentinel[i];
    if (rp_pid(s) <= 0)
      continue;
    if (master_field(s, g->name, "num-slaves") < replicas ||
        master_field(s, g->name, "num-other-sentinels") < running - 1 ||
        master_field(s, g->name, "port") != sg_node_port(g, master))
      return 0;
  }
  return 1;
}

int sg_start(const sg_options_t *o, sg_group_t **out) {
  *out = NULL;
  sg_options_t defaults;
  if (o == NULL) {
    sg_options_init(&defaults);
    o = &defaults;
  }
  if (o->replicas + 1 > MAX_NODES || o->sentinels > MAX_NODES)
    return -1;
  sg_group_t *g = calloc(1, sizeof(*g));
  if (g == NULL)
    return -1;
  g->opt = *o;
  snprintf(g->name, sizeof(g->name), "%s", o->master_name);
  int rc = start_node(g, 0);
  for (int i = 0; i < o->replicas && rc == 0; i++)
    rc = start_node(g, sg_node_port(g, 0));
  if (rc == 0)
    rc = sg_wait_replicas(g, o->replicas, START_TIMEOUT_MS);
  for (int i = 0; i < o->sentinels && rc == 0; i++)
    rc = start_sentinel(g, sg_node_port(g, 0));
  /* Sentinels find the replicas through the master's INFO (every 10 s at
   * first, and at once on start) and each other through hello messages
   * (every 2 s). */
  int64_t deadline = now_ms() + START_TIMEOUT_MS;
  while (rc == 0 && !sentinels_agree(g, 0, o->replicas)) {
    if (now_ms() > deadline) {
      fprintf(stderr, "sentinel_group: the Sentinels did not learn the "
                      "deployment in time\n");
      rc = -1;
      break;
    }
    sleep_ms(100);
  }
  if (rc == 0) {
    size_t cap = 64 + (size_t)g->nsentinels * 24 + strlen(g->name) +
                 (o->requirepass ? 3 * strlen(o->requirepass) : 0);
    g->url = malloc(cap);
    if (g->url == NULL) {
      rc = -1;
    } else {
      /* The data nodes' password, %-encoded only as far as the tests
       * need: they use plain ones. */
      snprintf(g->url, cap, "%s://%s%s%s",
               o->tls != NULL ? "rediss-sentinel" : "redis-sentinel",
               o->requirepass ? ":" : "", o->requirepass ? o->requirepass : "",
               o->requirepass ? "@" : "");
      for (int i = 0; i < g->nsentinels; i++) {
        size_t len = strlen(g->url);
        snprintf(g->url + len, cap - len, "%s127.0.0.1:%d", i ? "," : "",
                 sg_sentinel_port(g, i));
      }
      size_t len = strlen(g->url);
      snprintf(g->url + len, cap - len, "/%s", g->name);
    }
  }
  if (rc != 0) {
    sg_free(g);
    return -1;
  }
  *out = g;
  return 0;
}

const char *sg_url(const sg_group_t *g) { return g->url; }
int sg_nnodes(const sg_group_t *g) { return g->nnodes; }
rp_server_t *sg_node(sg_group_t *g, int i) { return g->node[i]; }
int sg_nsentinels(const sg_group_t *g) { return g->nsentinels; }
rp_server_t *sg_sentinel(sg_group_t *g, int i) { return g->sentinel[i]; }
const char *sg_master_name(const sg_group_t *g) { return g->name; }

int sg_wait_new_master(sg_group_t *g, int old, int timeout_ms) {
  int64_t deadline = now_ms() + timeout_ms;
  do {
    int m = sg_master_index(g);
    if (m >= 0 && m != old && is_master(g, m))
      return m;
    sleep_ms(50);
  } while (now_ms() < deadline);
  fprintf(stderr, "sentinel_group: no new master in %d ms\n", timeout_ms);
  return -1;
}

int sg_failover(sg_group_t *g, int timeout_ms) {
  int64_t deadline = now_ms() + timeout_ms;
  int old = sg_master_index(g);
  /* A Sentinel refuses while it is still busy with an earlier failover
   * (-INPROG) or before it has seen a replica fit to promote (-NOGOODSLAVE):
   * asked again until one accepts. */
  for (;;) {
    for (int i = 0; i < g->nsentinels; i++) {
      if (rp_pid(g->sentinel[i]) <= 0)
        continue;
      redisReply *r = rp_cmd(g->sentinel[i], "SENTINEL FAILOVER %s", g->name);
      int ok = r != NULL && r->type == REDIS_REPLY_STATUS;
      freeReplyObject(r);
      if (ok) {
        int64_t left = deadline - now_ms();
        return sg_wait_new_master(g, old, left > 0 ? (int)left : 1);
      }
    }
    if (now_ms() > deadline)
      break;
    sleep_ms(200);
  }
  fprintf(stderr, "sentinel_group: no Sentinel accepted SENTINEL FAILOVER\n");
  return -1;
}

int sg_restart_as_replica(sg_group_t *g, int i) {
  int m = sg_master_index(g);
  if (m < 0 || m == i || rp_restart(g->node[i]) != 0)
    return -1;
  redisReply *r =
      rp_cmd(g->node[i], "REPLICAOF 127.0.0.1 %d", sg_node_port(g, m));
  int ok = r != NULL && r->type == REDIS_REPLY_STATUS;
  freeReplyObject(r);
  return ok ? 0 : -1;
}

void sg_free(sg_group_t *g) {
  if (g == NULL)
    return;
  /* Sentinels first, so that none of them starts a failover while the
   * data nodes go. */
  for (int i = 0; i < g->nsentinels; i++)
    rp_free(g->sentinel[i]);
  for (int i = 0; i < g->nnodes; i++)
    rp_free(g->node[i]);
  free(g->url);
  free(g);
}
