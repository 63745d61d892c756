/*
 * A Redis Cluster on loopback; see cluster_group.h.
 */
#define _GNU_SOURCE

#include "cluster_group.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NODES 6
#define START_TIMEOUT_MS 60000

struct cg_group {
  rp_server_t *node[NODES];
  char id[NODES][48];
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

/* The redis-cli next to the redis-server in use, else the one on PATH. */
static const char *cli_path(void) {
  static char path[4096];
  const char *server = getenv("DLOCK_REDIS_SERVER");
  if (server != NULL) {
    snprintf(path, sizeof(path), "%s", server);
    char *slash = strrchr(path, '/');
    if (slash != NULL) {
      snprintf(slash + 1, sizeof(path) - (size_t)(slash + 1 - path),
               "redis-cli");
      if (access(path, X_OK) == 0)
        return path;
    }
  }
  return "redis-cli";
}

/* Runs redis-cli with 'argv' (NULL-terminated, without argv[0]), its
 * output in the log file of node 0's dir; 0 when it exited with 0. */
static int run_cli(cg_group_t *g, const char **args) {
  char log[4096];
  snprintf(log, sizeof(log), "%s/cluster-create.log", rp_dir(g->node[0]));
  char *argv[64];
  int n = 0;
  argv[n++] = (char *)cli_path();
  for (int i = 0; args[i] != NULL && n < 63; i++)
    argv[n++] = (char *)args[i];
  argv[n] = NULL;
  pid_t pid = fork();
  if (pid < 0)
    return -1;
  if (pid == 0) {
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    int in = open("/dev/null", O_RDONLY);
    if (in >= 0)
      dup2(in, 0);
    execvp(argv[0], argv);
    _exit(127);
  }
  int status;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "cluster_group: redis-cli failed, see %s\n", log);
    return -1;
  }
  return 0;
}

static int info_ok(rp_server_t *s) {
  redisReply *r = rp_cmd(s, "CLUSTER INFO");
  int ok = r != NULL && r->type == REDIS_REPLY_STRING &&
           strstr(r->str, "cluster_state:ok") != NULL &&
           strstr(r->str, "cluster_slots_assigned:16384") != NULL;
  if (r != NULL)
    freeReplyObject(r);
  return ok;
}

static int node_of_port(cg_group_t *g, long long port) {
  for (int i = 0; i < NODES; i++)
    if (g->node[i] != NULL && rp_port(g->node[i]) == port)
      return i;
  return -1;
}

int cg_master_of_slot(cg_group_t *g, int asked, int slot) {
  redisReply *r = rp_cmd(g->node[asked], "CLUSTER SLOTS");
  int found = -1;
  for (size_t i = 0; r != NULL && r->type == REDIS_REPLY_ARRAY &&
                     i < r->elements && found < 0;
       i++) {
    redisReply *e = r->element[i];
    if (e->type == REDIS_REPLY_ARRAY && e->elements >= 3 &&
        e->element[0]->integer <= slot && slot <= e->element[1]->integer)
      found = node_of_port(g, e->element[2]->element[1]->integer);
  }
  if (r != NULL)
    freeReplyObject(r);
  return found;
}

static int is_master(cg_group_t *g, int i) {
  redisReply *r = rp_cmd(g->node[i], "ROLE");
  int m = r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
          strcmp(r->element[0]->str, "master") == 0;
  if (r != NULL)
    freeReplyObject(r);
  return m;
}

int cg_masters(cg_group_t *g, int *out) {
  int n = 0;
  for (int i = 0; i < NODES; i++)
    if (rp_pid(g->node[i]) != 0 && is_master(g, i))
      out[n++] = i;
  return n;
}

int cg_replica_of(cg_group_t *g, int m) {
  for (int i = 0; i < NODES; i++) {
    if (i == m || rp_pid(g->node[i]) == 0)
      continue;
    redisReply *r = rp_cmd(g->node[i], "ROLE");
    /* A replica counts once its sync is done ("connected"): one still
     * loading has nothing to be promoted with. */
    int of = r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements >= 4 &&
             strcmp(r->element[0]->str, "slave") == 0 &&
             r->element[2]->integer == rp_port(g->node[m]) &&
             strcmp(r->element[3]->str, "connected") == 0;
    if (r != NULL)
      freeReplyObject(r);
    if (of)
      return i;
  }
  return -1;
}

int cg_wait_agree(cg_group_t *g, int slot, int timeout_ms) {
  int64_t end = now_ms() + timeout_ms;
  while (now_ms() < end) {
    int ok = 1, owner = -1;
    for (int i = 0; i < NODES && ok; i++) {
      if (rp_pid(g->node[i]) == 0)
        continue;
      ok = info_ok(g->node[i]);
      for (int s = slot < 0 ? 0 : slot; ok && s <= (slot < 0 ? 16383 : slot);
           s += slot < 0 ? 5461 : 1) {
        int m = cg_master_of_slot(g, i, s);
        if (slot >= 0) {
          ok = m >= 0 && (owner < 0 || owner == m);
          owner = m;
        } else {
          ok = m >= 0;
        }
      }
    }
    if (ok)
      return 0;
    sleep_ms(50);
  }
  fprintf(stderr, "cluster_group: nodes did not agree in %d ms\n", timeout_ms);
  return -1;
}

/* 1 when master 'm' lists a replica online (INFO replication), so that
 * its writes are streamed to it and a WAIT counts it. */
static int master_sees_replica(cg_group_t *g, int m) {
  redisReply *r = rp_cmd(g->node[m], "INFO replication");
  int ok = r != NULL && r->type == REDIS_REPLY_STRING &&
           strstr(r->str, "state=online") != NULL;
  if (r != NULL)
    freeReplyObject(r);
  return ok;
}

int cg_start(cg_group_t **out) { return cg_start_conf(NULL, out); }

int cg_start_conf(const char *extra_conf, cg_group_t **out) {
  *out = NULL;
  cg_group_t *g = calloc(1, sizeof(*g));
  if (g == NULL)
    return -1;
  rp_options_t o;
  rp_options_init(&o);
  o.cluster = 1;
  o.extra_conf = extra_conf;
  for (int i = 0; i < NODES; i++)
    if (rp_start(&o, &g->node[i]) != 0) {
      cg_free(g);
      return -1;
    }
  char addr[NODES][32];
  const char *args[NODES + 8];
  int n = 0;
  args[n++] = "--cluster";
  args[n++] = "create";
  for (int i = 0; i < NODES; i++) {
    snprintf(addr[i], sizeof(addr[i]), "127.0.0.1:%d", rp_port(g->node[i]));
    args[n++] = addr[i];
  }
  args[n++] = "--cluster-replicas";
  args[n++] = "1";
  args[n++] = "--cluster-yes";
  args[n] = NULL;
  if (run_cli(g, args) != 0 || cg_wait_agree(g, -1, START_TIMEOUT_MS) != 0) {
    cg_free(g);
    return -1;
  }
  /* Every replica linked and in sync, so that a failover can be run at
   * once. */
  int64_t end = now_ms() + START_TIMEOUT_MS;
  for (;;) {
    int masters[NODES], nm = cg_masters(g, masters), linked = 0;
    for (int k = 0; k < nm; k++)
      linked += cg_replica_of(g, masters[k]) >= 0 &&
                master_sees_replica(g, masters[k]);
    if (nm == 3 && linked == 3)
      break;
    if (now_ms() > end) {
      fprintf(stderr, "cluster_group: replicas never linked\n");
      cg_free(g);
      return -1;
    }
    sleep_ms(50);
  }
  for (int i = 0; i < NODES; i++) {
    redisReply *r = rp_cmd(g->node[i], "CLUSTER MYID");
    if (r != NULL && r->type == REDIS_REPLY_STRING)
      snprintf(g->id[i], sizeof(g->id[i]), "%s", r->str);
    if (r != NULL)
      freeReplyObject(r);
  }
  if (asprintf(&g->url, "redis-cluster://127.0.0.1:%d,127.0.0.1:%d",
               rp_port(g->node[0]), rp_port(g->node[1])) < 0) {
    g->url = NULL;
    cg_free(g);
    return -1;
  }
  *out = g;
  return 0;
}

const char *cg_url(const cg_group_t *g) { return g->url; }
int cg_nnodes(const cg_group_t *g) {
  (void)g;
  return NODES;
}
rp_server_t *cg_node(cg_group_t *g, int i) { return g->node[i]; }

int cg_keyslot(cg_group_t *g, const char *key) {
  redisReply *r = rp_cmd(g->node[0], "CLUSTER KEYSLOT %s", key);
  int slot = r != NULL && r->type == REDIS_REPLY_INTEGER ? (int)r->integer : -1;
  if (r != NULL)
    freeReplyObject(r);
  return slot;
}

static int ok_reply(redisReply *r, const char *what) {
  int ok = r != NULL && r->type != REDIS_REPLY_ERROR;
  if (!ok)
    fprintf(stderr, "cluster_group: %s: %s\n", what,
            r != NULL ? r->str : "no answer");
  if (r != NULL)
    freeReplyObject(r);
  return ok ? 0 : -1;
}

int cg_migrate_begin(cg_group_t *g, int slot, int from, int to) {
  if (ok_reply(rp_cmd(g->node[to], "CLUSTER SETSLOT %d IMPORTING %s", slot,
                      g->id[from]),
               "SETSLOT IMPORTING") != 0)
    return -1;
  return ok_reply(
      rp_cmd(g->node[from], "CLUSTER SETSLOT %d MIGRATING %s", slot, g->id[to]),
      "SETSLOT MIGRATING");
}

int cg_migrate_keys(cg_group_t *g, int slot, int from, int to) {
  for (;;) {
    redisReply *r = rp_cmd(g->node[from], "CLUSTER GETKEYSINSLOT %d 100", slot);
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
      if (r != NULL)
        freeReplyObject(r);
      return -1;
    }
    size_t n = r->elements;
    for (size_t i = 0; i < n; i++) {
      char port[16];
      snprintf(port, sizeof(port), "%d", rp_port(g->node[to]));
      const char *argv[] = {"MIGRATE",          "127.0.0.1", port,
                            r->element[i]->str, "0",         "5000"};
      size_t lens[] = {7, 9, strlen(port), r->element[i]->len, 1, 4};
      if (ok_reply(rp_cmd_argv(g->node[from], 6, argv, lens), "MIGRATE") != 0) {
        freeReplyObject(r);
        return -1;
      }
    }
    freeReplyObject(r);
    if (n == 0)
      return 0;
  }
}

int cg_migrate_end(cg_group_t *g, int slot, int to) {
  /* The importing node first, then the one it came from, then the rest
   * (the order the specification gives). */
  int rc = ok_reply(
      rp_cmd(g->node[to], "CLUSTER SETSLOT %d NODE %s", slot, g->id[to]),
      "SETSLOT NODE");
  int masters[NODES], nm = cg_masters(g, masters);
  for (int k = 0; k < nm && rc == 0; k++)
    if (masters[k] != to)
      rc = ok_reply(rp_cmd(g->node[masters[k]], "CLUSTER SETSLOT %d NODE %s",
                           slot, g->id[to]),
                    "SETSLOT NODE");
  return rc;
}

int cg_failover(cg_group_t *g, int r, int timeout_ms) {
  int64_t t0 = now_ms(), end = t0 + timeout_ms;
  /* A replica may refuse or stall (its master's offset not reached yet):
   * the request is made again every 5 s until the deadline. */
  while (!is_master(g, r)) {
    if (now_ms() > end)
      return -1;
    redisReply *rep = rp_cmd(g->node[r], "CLUSTER FAILOVER");
    if (rep == NULL || rep->type == REDIS_REPLY_ERROR)
      fprintf(stderr, "cluster_group: CLUSTER FAILOVER: %s\n",
              rep != NULL ? rep->str : "no answer");
    if (rep != NULL)
      freeReplyObject(rep);
    int64_t retry = now_ms() + 5000;
    while (!is_master(g, r) && now_ms() < retry && now_ms() < end)
      sleep_ms(20);
  }
  printf("cluster_group: node %d master after %lld ms\n", r,
         (long long)(now_ms() - t0));
  return cg_wait_agree(g, -1, (int)(end - now_ms() > 0 ? end - now_ms() : 1));
}

void cg_free(cg_group_t *g) {
  if (g == NULL)
    return;
  for (int i = 0; i < NODES; i++)
    rp_free(g->node[i]);
  free(g->url);
  free(g);
}
