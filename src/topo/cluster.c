/*
 * Redis Cluster topology (see cluster.h).
 */
#include "topo/cluster.h"

#include "alloc.h"
#include "error.h"
#include "monotime.h"
#include "proto/format.h"
#include "proto/reply.h"
#include "proto/slot.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A cluster with more nodes than this is refused at refresh time (Redis
 * recommends at most 1000 masters; the nodes of the clusters this client
 * talks to fit many times over). */
#define NODES_MAX 512
/* Redirections followed for one call before giving up: a slot is moved by
 * one MOVED, and an ASK during a migration adds one more. */
#define REDIRECTS_MAX 16
/* The map is read again at most this often when nodes keep failing, so
 * that a dead node does not make every call ask for it. */
#define REFRESH_MIN_US 100000

typedef struct node {
  dlock__endpoint ep; /* host, port and the cluster's credentials */
  dlock__conn *conn;
  /* As a master: the replicas in step that its own INFO showed when replica
   * sync last read it (dlock__cluster_set_replicas); -1 when not known. */
  atomic_int replicas;
} node;

struct dlock__cluster {
  dlock__endpoint data; /* user, pass, tls of every node */
  const dlock__tls *tls;
  int64_t connect_timeout_ms, command_timeout_ms;
  pthread_mutex_t mu; /* adding nodes; one refresh at a time */
  node *nodes[NODES_MAX];
  atomic_int nnodes;
  size_t nseeds; /* nodes[0..nseeds) are the seeds of the URL */
  /* The node index of each slot's master, -1 when not known. */
  atomic_short owner[DLOCK__SLOTS];
  atomic_int stale;             /* the map is to be read again */
  _Atomic int64_t refreshed_us; /* when it last was */
  atomic_int masters;           /* masters in the last map read */
  atomic_int answered; /* a node has given a map (dlock__cluster_answered) */
  /* Scripts publish with SPUBLISH (dlock__cluster_probe_sharded). */
  atomic_int sharded;
  /* The URL's sharded_pubsub=off: classic pub/sub whatever the cluster
   * runs. */
  int sharded_off;
  dlock__stats *stats; /* the client's statistics, or NULL */
};

/* ---- nodes -------------------------------------------------------------- */

/* The index of the node at host:port, added when new; -1 when the table is
 * full or memory is short. */
static int node_get(dlock__cluster *cl, const char *host, size_t hlen,
                    int port) {
  int n = atomic_load(&cl->nnodes);
  for (int i = 0; i < n; i++) {
    node *x = cl->nodes[i];
    if (x->ep.port == port && strlen(x->ep.host) == hlen &&
        memcmp(x->ep.host, host, hlen) == 0)
      return i;
  }
  pthread_mutex_lock(&cl->mu);
  n = atomic_load(&cl->nnodes);
  int found = -1;
  for (int i = 0; i < n && found < 0; i++) {
    node *x = cl->nodes[i];
    if (x->ep.port == port && strlen(x->ep.host) == hlen &&
        memcmp(x->ep.host, host, hlen) == 0)
      found = i;
  }
  if (found >= 0 || n >= NODES_MAX) {
    pthread_mutex_unlock(&cl->mu);
    if (found < 0)
      dlock__fail(DLOCK_EPROTO, "cluster has more than %d nodes", NODES_MAX);
    return found;
  }
  node *x = dlock__calloc(1, sizeof(*x));
  int ok = x != NULL;
  if (ok) {
    atomic_init(&x->replicas, -1);
    x->ep.port = port;
    x->ep.db = 0;
    x->ep.tls = cl->data.tls;
    x->ep.host = dlock__memdup(host, hlen);
    x->ep.user = cl->data.user ? dlock__strdup(cl->data.user) : NULL;
    x->ep.pass = cl->data.pass ? dlock__strdup(cl->data.pass) : NULL;
    ok = x->ep.host != NULL && (cl->data.user == NULL || x->ep.user) &&
         (cl->data.pass == NULL || x->ep.pass);
  }
  if (ok) {
    dlock__conn_cfg cfg = {.ep = &x->ep,
                           .connect_timeout_ms = cl->connect_timeout_ms,
                           .command_timeout_ms = cl->command_timeout_ms,
                           .tls = cl->tls,
                           .stats = cl->stats};
    ok = dlock__conn_new(&cfg, &x->conn) == 0;
  }
  if (!ok) {
    if (x != NULL)
      dlock__endpoint_free(&x->ep);
    dlock__free(x);
    pthread_mutex_unlock(&cl->mu);
    dlock__fail(DLOCK_ENOMEM, "out of memory adding a cluster node");
    return -1;
  }
  cl->nodes[n] = x;
  atomic_store(&cl->nnodes, n + 1);
  pthread_mutex_unlock(&cl->mu);
  return n;
}

int dlock__cluster_new(dlock__cluster_url *u, const dlock__tls *tls,
                       int64_t connect_timeout_ms, int64_t command_timeout_ms,
                       dlock__cluster **out) {
  *out = NULL;
  dlock__cluster *cl = dlock__calloc(1, sizeof(*cl));
  if (cl == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory opening a cluster");
  pthread_mutex_init(&cl->mu, NULL);
  cl->data = u->data;
  memset(&u->data, 0, sizeof(u->data));
  cl->sharded_off = u->sharded_off;
  cl->stats = u->stats;
  cl->tls = tls;
  cl->connect_timeout_ms = connect_timeout_ms;
  cl->command_timeout_ms = command_timeout_ms;
  for (int s = 0; s < DLOCK__SLOTS; s++)
    atomic_init(&cl->owner[s], (short)-1);
  atomic_init(&cl->stale, 1);
  for (size_t i = 0; i < u->n; i++) {
    const dlock__endpoint *e = &u->seeds[i];
    if (node_get(cl, e->host, strlen(e->host), e->port) < 0) {
      int rc = dlock__fail(DLOCK_ENOMEM, "out of memory opening a cluster");
      dlock__cluster_free(cl);
      return rc;
    }
  }
  cl->nseeds = (size_t)atomic_load(&cl->nnodes);
  dlock__cluster_url_free(u);
  *out = cl;
  return 0;
}

void dlock__cluster_free(dlock__cluster *cl) {
  if (cl == NULL)
    return;
  int n = atomic_load(&cl->nnodes);
  for (int i = 0; i < n; i++) {
    dlock__conn_free(cl->nodes[i]->conn);
    dlock__endpoint_free(&cl->nodes[i]->ep);
    dlock__free(cl->nodes[i]);
  }
  dlock__endpoint_free(&cl->data);
  pthread_mutex_destroy(&cl->mu);
  dlock__free(cl);
}

int dlock__cluster_forget(dlock__cluster *cl) {
  if (cl == NULL)
    return 0;
  int n = atomic_load(&cl->nnodes), failed = 0;
  for (int i = 0; i < n; i++) {
    if (cl->nodes[i]->conn == NULL)
      continue;
    if (dlock__conn_forget(cl->nodes[i]->conn) == 0)
      cl->nodes[i]->conn = NULL;
    else
      failed = 1;
  }
  return failed ? -1 : 0;
}

void dlock__cluster_cancel(dlock__cluster *cl) {
  int n = atomic_load(&cl->nnodes);
  for (int i = 0; i < n; i++)
    dlock__conn_cancel(cl->nodes[i]->conn);
}

dlock__conn *dlock__cluster_any(dlock__cluster *cl) {
  return cl->nodes[0]->conn;
}

int dlock__cluster_nnodes(dlock__cluster *cl) {
  return atomic_load(&cl->nnodes);
}

const dlock__endpoint *dlock__cluster_node_ep(dlock__cluster *cl, int i) {
  return &cl->nodes[i]->ep;
}

int dlock__cluster_answered(dlock__cluster *cl) {
  return atomic_load(&cl->answered);
}

int dlock__cluster_masters(dlock__cluster *cl) {
  return atomic_load(&cl->masters);
}

/* ---- reading the map ---------------------------------------------------- */

/* Sets slots [lo, hi] of 'map' to the node at host:port ('host' empty:
 * the node that was asked, 'asked'). */
static int assign(dlock__cluster *cl, short *map, long long lo, long long hi,
                  const redisReply *host, long long port, int asked) {
  if (lo < 0 || hi >= DLOCK__SLOTS || lo > hi || port <= 0 || port > 65535)
    return dlock__fail(DLOCK_EPROTO, "cluster gave a bad slot range");
  int idx = asked;
  if (host != NULL && host->type == REDIS_REPLY_STRING && host->len > 0 &&
      !dlock__reply_is(host, "?"))
    idx = node_get(cl, host->str, host->len, (int)port);
  else
    idx = node_get(cl, cl->nodes[asked]->ep.host,
                   strlen(cl->nodes[asked]->ep.host), (int)port);
  if (idx < 0)
    return DLOCK_ENOMEM;
  for (long long s = lo; s <= hi; s++)
    map[s] = (short)idx;
  return 0;
}

/* CLUSTER SHARDS: [ "slots", [lo, hi, ...], "nodes", [ {ip, port, role,
 * health...}, ... ] ] per shard. */
static int parse_shards(dlock__cluster *cl, const redisReply *r, short *map,
                        int asked, int *masters) {
  for (size_t i = 0; i < r->elements; i++) {
    const redisReply *shard = r->element[i];
    const redisReply *slots = dlock__reply_map_get(shard, "slots");
    const redisReply *nodes = dlock__reply_map_get(shard, "nodes");
    if (slots == NULL || nodes == NULL || slots->type != REDIS_REPLY_ARRAY ||
        nodes->type != REDIS_REPLY_ARRAY)
      return dlock__fail(DLOCK_EPROTO, "CLUSTER SHARDS gave a bad shard");
    if (slots->elements == 0)
      continue; /* a master without slots (yet) */
    const redisReply *master = NULL;
    for (size_t k = 0; k < nodes->elements && master == NULL; k++)
      if (dlock__reply_is(dlock__reply_map_get(nodes->element[k], "role"),
                          "master") &&
          !dlock__reply_is(dlock__reply_map_get(nodes->element[k], "health"),
                           "fail"))
        master = nodes->element[k];
    if (master == NULL)
      continue; /* no master now: its slots stay unknown */
    const redisReply *port =
        cl->data.tls && dlock__reply_map_get(master, "tls-port") != NULL
            ? dlock__reply_map_get(master, "tls-port")
            : dlock__reply_map_get(master, "port");
    const redisReply *ip = dlock__reply_map_get(master, "ip");
    if (ip == NULL || ip->len == 0)
      ip = dlock__reply_map_get(master, "endpoint");
    (*masters)++;
    for (size_t k = 0; k + 1 < slots->elements; k += 2) {
      int rc = assign(cl, map, dlock__reply_int(slots->element[k]),
                      dlock__reply_int(slots->element[k + 1]), ip,
                      dlock__reply_int(port), asked);
      if (rc != 0)
        return rc;
    }
  }
  return 0;
}

/* CLUSTER SLOTS: [lo, hi, [ip, port, id...], replicas...] per range. */
static int parse_slots(dlock__cluster *cl, const redisReply *r, short *map,
                       int asked, int *masters) {
  for (size_t i = 0; i < r->elements; i++) {
    const redisReply *e = r->element[i];
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
        e->element[2]->type != REDIS_REPLY_ARRAY || e->element[2]->elements < 2)
      return dlock__fail(DLOCK_EPROTO, "CLUSTER SLOTS gave a bad range");
    const redisReply *m = e->element[2];
    int rc = assign(cl, map, dlock__reply_int(e->element[0]),
                    dlock__reply_int(e->element[1]), m->element[0],
                    dlock__reply_int(m->element[1]), asked);
    if (rc != 0)
      return rc;
    (*masters)++;
  }
  return 0;
}

static const char shards_cmd[] = "*2\r\n$7\r\nCLUSTER\r\n$6\r\nSHARDS\r\n";
const char dlock__cluster_slots_cmd[] =
    "*2\r\n$7\r\nCLUSTER\r\n$5\r\nSLOTS\r\n";

/* Sends the map command 'what' to node 'idx'; its reply in '*r'. */
static int ask_map(dlock__cluster *cl, int idx, const char *what,
                   int64_t deadline_us, redisReply **r) {
  char *cmd = (char *)what;
  size_t len = strlen(what);
  *r = NULL;
  return dlock__conn_call(cl->nodes[idx]->conn, 1, &cmd, &len, r, deadline_us);
}

/* A slot map in which no slot has a master yet, for the reply 'r' being
 * read into it; NULL out of memory, with the detail set and 'r' freed. */
static short *empty_map(redisReply *r) {
  short *map = dlock__malloc(DLOCK__SLOTS * sizeof(*map));
  if (map == NULL) {
    freeReplyObject(r);
    (void)dlock__fail(DLOCK_ENOMEM, "out of memory reading a cluster map");
    return NULL;
  }
  for (int s = 0; s < DLOCK__SLOTS; s++)
    map[s] = -1;
  return map;
}

/* Fills the slots of 'map' that have no owner from node 'idx''s CLUSTER
 * SLOTS. Redis 7.2 to 7.4 list a shard's slots as those of the first node
 * in it: after a failover that is often the dead master, which has none
 * left, so the shard of the promoted replica comes with no slots at all.
 * CLUSTER SLOTS names each range's master from the slot table itself and
 * is right there. Asked only when CLUSTER SHARDS left a hole (a shard so
 * misreported, a master down and not yet replaced, slots nobody serves),
 * which a healthy cluster never has. */
static int fill_holes(dlock__cluster *cl, int idx, short *map,
                      int64_t deadline_us) {
  int holes = 0;
  for (int s = 0; s < DLOCK__SLOTS && !holes; s++)
    holes = map[s] < 0;
  if (!holes)
    return 0;
  redisReply *r = NULL;
  int rc = ask_map(cl, idx, dlock__cluster_slots_cmd, deadline_us, &r);
  if (rc != 0)
    return rc;
  if (r->type != REDIS_REPLY_ARRAY) {
    freeReplyObject(r);
    return 0; /* what CLUSTER SHARDS said stands */
  }
  short *from_slots = empty_map(r);
  if (from_slots == NULL)
    return DLOCK_ENOMEM;
  int ranges = 0;
  rc = parse_slots(cl, r, from_slots, idx, &ranges);
  freeReplyObject(r);
  for (int s = 0; s < DLOCK__SLOTS && rc == 0; s++)
    if (map[s] < 0)
      map[s] = from_slots[s];
  dlock__free(from_slots);
  return rc;
}

/* The number of distinct nodes that own a slot in 'map'. */
static int count_owners(const dlock__cluster *cl, const short *map) {
  int n = atomic_load(&cl->nnodes), count = 0;
  unsigned char *seen = dlock__calloc((size_t)n + 1, 1);
  if (seen == NULL)
    return 1; /* only a count for status output */
  for (int s = 0; s < DLOCK__SLOTS; s++)
    if (map[s] >= 0 && map[s] < n && !seen[map[s]]) {
      seen[map[s]] = 1;
      count++;
    }
  dlock__free(seen);
  return count;
}

/* Asks node 'idx' for the map and applies it. */
static int refresh_from(dlock__cluster *cl, int idx, int64_t deadline_us) {
  redisReply *r = NULL;
  int rc = ask_map(cl, idx, shards_cmd, deadline_us, &r);
  int use_slots = 0;
  if (rc == 0 && r->type == REDIS_REPLY_ERROR) {
    /* Before Redis 7 there is no CLUSTER SHARDS. */
    freeReplyObject(r);
    use_slots = 1;
    rc = ask_map(cl, idx, dlock__cluster_slots_cmd, deadline_us, &r);
  }
  if (rc != 0)
    return rc;
  if (r->type == REDIS_REPLY_ERROR) {
    rc = dlock__fail(DLOCK_EPROTO,
                     "%s does not serve a cluster map (%.*s): is it a "
                     "cluster node?",
                     cl->nodes[idx]->ep.host, (int)(r->len < 80 ? r->len : 80),
                     r->str);
    freeReplyObject(r);
    return rc;
  }
  if (r->type != REDIS_REPLY_ARRAY) {
    freeReplyObject(r);
    return dlock__fail(DLOCK_EPROTO, "cluster map is not an array");
  }
  short *map = empty_map(r);
  if (map == NULL)
    return DLOCK_ENOMEM;
  int masters = 0;
  rc = use_slots ? parse_slots(cl, r, map, idx, &masters)
                 : parse_shards(cl, r, map, idx, &masters);
  freeReplyObject(r);
  if (rc == 0 && !use_slots) {
    rc = fill_holes(cl, idx, map, deadline_us);
    if (rc == 0)
      masters = count_owners(cl, map);
  }
  if (rc == 0)
    atomic_store(&cl->answered, 1);
  if (rc == 0 && masters == 0)
    rc = dlock__fail(DLOCK_EIO, "cluster has no master serving slots yet");
  if (rc == 0) {
    /* Slots that no master serves now keep their last known owner: a
     * call goes there and is told where to go, or fails like a call to
     * a server that is down, rather than not being tried at all. */
    for (int s = 0; s < DLOCK__SLOTS; s++)
      if (map[s] >= 0)
        atomic_store(&cl->owner[s], map[s]);
    atomic_store(&cl->masters, masters);
  }
  dlock__free(map);
  return rc;
}

int dlock__cluster_refresh(dlock__cluster *cl, int64_t deadline_us) {
  if (deadline_us == 0)
    deadline_us = dlock__deadline_ms(cl->command_timeout_ms);
  atomic_store(&cl->refreshed_us, dlock__now_us());
  atomic_store(&cl->stale, 0);
  /* Masters first (they are most likely up and know the latest map), then
   * every other node, seeds included; a node in its reconnect back-off is
   * left for last. */
  int n = atomic_load(&cl->nnodes);
  unsigned char *tried = dlock__calloc((size_t)n + 1, 1);
  if (tried == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory reading a cluster map");
  int rc = DLOCK_EIO;
  int64_t now = dlock__now_us();
  for (int pass = 0; pass < 3 && rc != 0; pass++) {
    for (int i = 0; i < n && rc != 0; i++) {
      if (tried[i])
        continue;
      int is_master = 0;
      for (int s = 0; s < DLOCK__SLOTS && pass == 0 && !is_master;
           s += 1 + (s & 63))
        is_master = atomic_load(&cl->owner[s]) == i;
      int backing_off = dlock__conn_retry_at(cl->nodes[i]->conn) > now;
      if ((pass == 0 && (!is_master || backing_off)) ||
          (pass == 1 && backing_off))
        continue;
      tried[i] = 1;
      if (dlock__now_us() >= deadline_us)
        break;
      rc = refresh_from(cl, i, deadline_us);
      if (rc == DLOCK_ENOMEM)
        break;
    }
  }
  dlock__free(tried);
  if (rc != 0)
    atomic_store(&cl->stale, 1);
  return rc;
}

/* Reads the map again if it was found out of date, by one thread at a time
 * and not more often than REFRESH_MIN_US; its failure is not the caller's
 * (the next failure says what is wrong). */
static void refresh_if_stale(dlock__cluster *cl, int64_t deadline_us) {
  if (!atomic_load(&cl->stale))
    return;
  int64_t last = atomic_load(&cl->refreshed_us), now = dlock__now_us();
  if (now - last < REFRESH_MIN_US ||
      !atomic_compare_exchange_strong(&cl->refreshed_us, &last, now))
    return;
  int64_t until = dlock__deadline_ms(cl->command_timeout_ms);
  dlock__cluster_refresh(
      cl, deadline_us > 0 && deadline_us < until ? deadline_us : until);
  dlock__fail_text(0, "");
}

static int owner_of(dlock__cluster *cl, int slot, int64_t deadline_us,
                    int *rc) {
  refresh_if_stale(cl, deadline_us);
  int idx = atomic_load(&cl->owner[slot]);
  if (idx < 0) {
    *rc = dlock__cluster_refresh(cl, deadline_us);
    idx = atomic_load(&cl->owner[slot]);
    if (idx < 0 && *rc == 0)
      *rc = dlock__fail(DLOCK_EIO, "no cluster node serves slot %d", slot);
  }
  if (idx >= 0)
    *rc = 0;
  return idx;
}

int dlock__cluster_replicas(dlock__cluster *cl, size_t n,
                            const dlock__eval *calls) {
  int fewest = -1;
  for (size_t i = 0; i < n; i++) {
    if (calls[i].nkeys < 1)
      continue;
    int idx = atomic_load(
        &cl->owner[dlock__key_slot(calls[i].argv[0], calls[i].lens[0])]);
    int r = idx >= 0 ? atomic_load(&cl->nodes[idx]->replicas) : -1;
    if (r < 0)
      return -1;
    if (fewest < 0 || r < fewest)
      fewest = r;
  }
  return fewest;
}

int dlock__cluster_unknown_replicas(dlock__cluster *cl, size_t n,
                                    const dlock__eval *calls) {
  for (size_t i = 0; i < n; i++) {
    if (calls[i].nkeys < 1)
      continue;
    int slot = dlock__key_slot(calls[i].argv[0], calls[i].lens[0]);
    int idx = atomic_load(&cl->owner[slot]);
    if (idx < 0 || atomic_load(&cl->nodes[idx]->replicas) < 0)
      return slot;
  }
  return -1;
}

void dlock__cluster_set_replicas(dlock__cluster *cl, int slot, int n) {
  int idx = atomic_load(&cl->owner[slot]);
  if (idx >= 0)
    atomic_store(&cl->nodes[idx]->replicas, n);
}

void dlock__cluster_forget_replicas(dlock__cluster *cl) {
  int n = atomic_load(&cl->nnodes);
  for (int i = 0; i < n; i++)
    atomic_store(&cl->nodes[i]->replicas, -1);
}

int dlock__cluster_owner(dlock__cluster *cl, int slot, int *rc) {
  return owner_of(cl, slot, 0, rc);
}

void dlock__cluster_mark_stale(dlock__cluster *cl) {
  atomic_store(&cl->stale, 1);
}

int dlock__cluster_sharded(dlock__cluster *cl) {
  return atomic_load(&cl->sharded);
}

int dlock__cluster_probe_cmds(dlock__cluster *cl, char **cmds, size_t *lens) {
  /* Redisson (shardedSubscriptionMode AUTO) decides at start by whether a
   * node answers PUBSUB SHARDNUMSUB (with a channel: without one, some
   * services hang); that is asked here too, so that both sides pick the
   * same kind wherever Redisson's pick works. And SPUBLISH must run as
   * well, since the scripts are to use it: a cluster that answers the
   * first and refuses the second (a command renamed or denied by ACL)
   * would otherwise fail every release; Redisson cannot release there
   * either. Both go in one round trip to the master of slot 0 (the empty
   * channel's), following a redirection. Told to keep off sharded pub/sub
   * (for peers that speak classic pub/sub only), it asks nothing, as
   * Redisson in its mode OFF. */
  if (cl->sharded_off) {
    atomic_store(&cl->sharded, 0);
    return 0;
  }
  static const char numsub[] =
      "*3\r\n$6\r\nPUBSUB\r\n$11\r\nSHARDNUMSUB\r\n$1\r\n0\r\n";
  static const char publish[] = "*3\r\n$8\r\nSPUBLISH\r\n$0\r\n\r\n$0\r\n\r\n";
  cmds[0] = (char *)numsub;
  cmds[1] = (char *)publish;
  lens[0] = sizeof(numsub) - 1;
  lens[1] = sizeof(publish) - 1;
  return 2;
}

int dlock__cluster_take_probe(dlock__cluster *cl, const redisReply *numsub,
                              const redisReply *publish) {
  int on = numsub != NULL && publish != NULL &&
           numsub->type == REDIS_REPLY_ARRAY &&
           publish->type == REDIS_REPLY_INTEGER;
  atomic_store(&cl->sharded, on);
  return on;
}

int dlock__cluster_probe_sharded(dlock__cluster *cl, int64_t deadline_us) {
  char *cmds[2];
  size_t lens[2];
  if (dlock__cluster_probe_cmds(cl, cmds, lens) == 0)
    return 0;
  redisReply *r[2] = {NULL, NULL};
  int rc = dlock__cluster_call(cl, 0, 2, cmds, lens, r, deadline_us);
  if (rc != 0)
    return rc;
  int on = dlock__cluster_take_probe(cl, r[0], r[1]);
  freeReplyObject(r[0]);
  freeReplyObject(r[1]);
  return on;
}

dlock__conn *dlock__cluster_conn(dlock__cluster *cl, int slot, int *rc) {
  int idx = owner_of(cl, slot, 0, rc);
  return idx >= 0 ? cl->nodes[idx]->conn : NULL;
}

/* ---- redirections ------------------------------------------------------- */

/* Parses "MOVED <slot> <host>:<port>" or "ASK ..." and returns the node it
 * names (added when new), or -1. A MOVED also updates the map. */
static int follow(dlock__cluster *cl, const redisReply *r, int kind) {
  const char *p = memchr(r->str, ' ', r->len);
  if (p == NULL)
    return -1;
  const char *end = r->str + r->len;
  long slot = strtol(p + 1, NULL, 10);
  const char *addr = memchr(p + 1, ' ', (size_t)(end - p - 1));
  if (addr == NULL || slot < 0 || slot >= DLOCK__SLOTS)
    return -1;
  addr++;
  const char *colon = NULL;
  for (const char *q = addr; q < end; q++)
    if (*q == ':')
      colon = q;
  if (colon == NULL)
    return -1;
  int port = atoi(colon + 1);
  const char *host = addr, *host_end = colon;
  if (host < host_end && *host == '[' && host_end[-1] == ']') {
    host++;
    host_end--;
  }
  if (port <= 0 || port > 65535)
    return -1;
  dlock__stat(cl->stats, DLOCK__ST_REDIRECTIONS);
  int idx;
  if (host == host_end) /* "MOVED 3999 :6381": the same host */
    idx = -1;
  else
    idx = node_get(cl, host, (size_t)(host_end - host), port);
  if (idx >= 0 && kind == DLOCK__REDIRECT_MOVED) {
    atomic_store(&cl->owner[slot], (short)idx);
    /* Others may have moved with it (a resharding moves many): the map
     * is read again. */
    atomic_store(&cl->stale, 1);
  }
  return idx;
}

int dlock__cluster_take_slots(dlock__cluster *cl, int idx,
                              const redisReply *r) {
  if (r == NULL || r->type != REDIS_REPLY_ARRAY)
    return dlock__fail(DLOCK_EPROTO, "cluster map is not an array");
  short *map = dlock__malloc(DLOCK__SLOTS * sizeof(*map));
  if (map == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory reading a cluster map");
  for (int s = 0; s < DLOCK__SLOTS; s++)
    map[s] = -1;
  int ranges = 0;
  int rc = parse_slots(cl, r, map, idx, &ranges);
  if (rc == 0 && ranges > 0) {
    /* As refresh_from: slots no master serves keep their last owner. */
    for (int s = 0; s < DLOCK__SLOTS; s++)
      if (map[s] >= 0)
        atomic_store(&cl->owner[s], map[s]);
    atomic_store(&cl->masters, count_owners(cl, map));
    atomic_store(&cl->answered, 1);
    atomic_store(&cl->stale, 0);
    atomic_store(&cl->refreshed_us, dlock__now_us());
  }
  dlock__free(map);
  return rc;
}

int dlock__cluster_follow(dlock__cluster *cl, const redisReply *r) {
  int kind = dlock__redirect_kind(r);
  if (kind != DLOCK__REDIRECT_MOVED && kind != DLOCK__REDIRECT_ASK)
    return -1;
  return follow(cl, r, kind);
}

dlock__conn *dlock__cluster_node_conn(dlock__cluster *cl, int i) {
  return i >= 0 && i < atomic_load(&cl->nnodes) ? cl->nodes[i]->conn : NULL;
}

int dlock__cluster_known_owner(dlock__cluster *cl, int slot) {
  return atomic_load(&cl->owner[slot]);
}

/* A call the cluster refused for now (TRYAGAIN or CLUSTERDOWN, 'why'):
 * the caller pauses and makes it again (see DLOCK__CLUSTER_BUSY), with the
 * detail to report should its time run out first. */
static int busy(const char *why) {
  dlock__fail(DLOCK_EIO, "cluster still busy at the deadline (%s)", why);
  return DLOCK__CLUSTER_BUSY;
}

/* ASKING and the call (as EVAL: the node importing the slot may not have
 * the script) in one batch, then the tail, on node 'idx'. */
static int ask_eval(dlock__cluster *cl, int idx, const dlock__eval *call,
                    redisReply **reply, int64_t deadline_us, size_t ntail,
                    const char *const *tail, const size_t *tail_lens,
                    redisReply **tail_replies) {
  static const char asking[] = "*1\r\n$6\r\nASKING\r\n";
  char *cmds[8];
  size_t lens[8];
  redisReply *got[8] = {NULL};
  if (ntail > 6)
    return dlock__fail(DLOCK_EINVAL, "too many commands after a script");
  cmds[0] = (char *)asking;
  lens[0] = sizeof(asking) - 1;
  int rc = dlock__eval_format(call, 1, &cmds[1], &lens[1]);
  if (rc != 0)
    return rc;
  for (size_t k = 0; k < ntail; k++) {
    cmds[2 + k] = (char *)tail[k];
    lens[2 + k] = tail_lens[k];
  }
  rc = dlock__conn_call(cl->nodes[idx]->conn, 2 + ntail, cmds, lens, got,
                        deadline_us);
  dlock__format_free(cmds[1]);
  if (rc != 0)
    return rc;
  freeReplyObject(got[0]);
  *reply = got[1];
  for (size_t k = 0; k < ntail; k++)
    tail_replies[k] = got[2 + k];
  return 0;
}

/* Keeps in 'best' the tail reply whose integer is the smallest. */
void dlock__cluster_keep_tail(redisReply **best, redisReply **got,
                              size_t ntail) {
  for (size_t k = 0; k < ntail; k++) {
    if (got[k] == NULL)
      continue;
    int replace = best[k] == NULL || got[k]->type != REDIS_REPLY_INTEGER ||
                  (best[k]->type == REDIS_REPLY_INTEGER &&
                   got[k]->integer < best[k]->integer);
    if (replace) {
      if (best[k] != NULL)
        freeReplyObject(best[k]);
      best[k] = got[k];
    } else {
      freeReplyObject(got[k]);
    }
    got[k] = NULL;
  }
}

#define TAIL_MAX 6

/* Calls routed with their bookkeeping on the stack (see below). */
#define ROUTE_STACK 8

int dlock__cluster_eval(dlock__cluster *cl, size_t n, const dlock__eval *calls,
                        redisReply **replies, int64_t deadline_us,
                        int64_t idle_ms, size_t ntail, const char *const *tail,
                        const size_t *tail_lens, redisReply **tail_replies) {
  memset(replies, 0, n * sizeof(*replies));
  redisReply *best[TAIL_MAX] = {NULL}, *got_tail[TAIL_MAX] = {NULL};
  if (ntail > TAIL_MAX)
    return dlock__fail(DLOCK_EINVAL, "too many commands after a script");
  if (deadline_us == 0)
    deadline_us = dlock__deadline_ms(cl->command_timeout_ms);
  /* Per call: its target node, and -2 once answered. 'ask' marks a call
   * to be sent with ASKING to that node. A lock call routes one script
   * (a watchdog round, many): for fewer than ROUTE_STACK calls the
   * bookkeeping lives on the stack, since six allocations per call cost a
   * lock+unlock pair about a fifth more instructions than on one server. */
  int target_s[ROUTE_STACK];
  unsigned char ask_s[ROUTE_STACK], sent_s[ROUTE_STACK];
  dlock__eval sub_s[ROUTE_STACK];
  redisReply *subrep_s[ROUTE_STACK];
  size_t which_s[ROUTE_STACK];
  int heap = n + 1 > ROUTE_STACK;
  int *target = heap ? dlock__calloc(n + 1, sizeof(*target)) : target_s;
  unsigned char *ask = heap ? dlock__calloc(n + 1, 1) : ask_s;
  dlock__eval *sub = heap ? dlock__calloc(n + 1, sizeof(*sub)) : sub_s;
  redisReply **subrep = heap ? dlock__calloc(n + 1, sizeof(*subrep)) : subrep_s;
  size_t *which = heap ? dlock__calloc(n + 1, sizeof(*which)) : which_s;
  unsigned char *sent = heap ? dlock__calloc(n + 1, 1) : sent_s;
  if (!heap) {
    memset(ask_s, 0, sizeof(ask_s));
    memset(subrep_s, 0, sizeof(subrep_s));
  }
  int rc = 0;
  if (target == NULL || ask == NULL || sub == NULL || subrep == NULL ||
      which == NULL || sent == NULL) {
    rc = dlock__fail(DLOCK_ENOMEM, "out of memory routing scripts");
    goto out;
  }
  for (size_t i = 0; i < n && rc == 0; i++) {
    if (calls[i].nkeys < 1) {
      rc = dlock__fail(DLOCK_EINVAL, "a script call names no key to route");
      break;
    }
    target[i] =
        owner_of(cl, dlock__key_slot(calls[i].argv[0], calls[i].lens[0]),
                 deadline_us, &rc);
  }
  int sharded = atomic_load(&cl->sharded);
  /* Rounds that followed a MOVED or ASK; TRYAGAIN and CLUSTERDOWN end
   * the call, to be made again after the caller's pause. */
  int redirected = 0;
  while (rc == 0) {
    int left = 0, refused = 0, moved = 0;
    const char *busy_why = "";
    for (size_t i = 0; i < n; i++)
      left += target[i] != -2;
    if (left == 0)
      break;
    if (redirected > REDIRECTS_MAX) {
      rc = dlock__fail(DLOCK_EIO,
                       "cluster redirected a call more than %d "
                       "times",
                       REDIRECTS_MAX);
      break;
    }
    /* One round per node, each in one pipeline; calls sent with ASKING go
     * one by one. A call redirected to a node already done this round
     * waits for the next round. */
    memset(sent, 0, n);
    for (size_t first = 0; first < n && rc == 0; first++) {
      if (target[first] < 0 || sent[first])
        continue;
      int idx = target[first];
      size_t m = 0;
      if (ask[first]) {
        which[m++] = first;
        dlock__eval one = calls[first];
        if (atomic_load(&cl->sharded) && one.script->sharded != NULL)
          one.script = one.script->sharded;
        rc = ask_eval(cl, idx, &one, &subrep[0], deadline_us, ntail, tail,
                      tail_lens, got_tail);
      } else {
        for (size_t i = first; i < n; i++)
          if (target[i] == idx && !ask[i] && !sent[i]) {
            sub[m] = calls[i];
            /* Unlock messages go where the cluster's waiters listen. */
            if (sharded && sub[m].script->sharded != NULL)
              sub[m].script = sub[m].script->sharded;
            which[m++] = i;
          }
        rc = dlock__eval_run_tail(cl->nodes[idx]->conn, m, sub, subrep,
                                  deadline_us, idle_ms, ntail, tail, tail_lens,
                                  got_tail, 1);
      }
      if (rc != 0) {
        /* The node failed (or refused): the map may be out of date (a
         * failover), so it is read again before the next call. */
        if (rc == DLOCK_EIO || rc == DLOCK_ETIMEDOUT)
          atomic_store(&cl->stale, 1);
        break;
      }
      dlock__cluster_keep_tail(best, got_tail, ntail);
      for (size_t j = 0; j < m; j++) {
        size_t i = which[j];
        sent[i] = 1;
        redisReply *r = subrep[j];
        subrep[j] = NULL;
        int kind = dlock__redirect_kind(r);
        ask[i] = 0;
        if (kind == 0 && r != NULL && r->type == REDIS_REPLY_ERROR) {
          /* An ASKING call's reply is not checked by the round. */
          rc = dlock__fail_reply_in(r->str, r->len, calls[i].script->name);
          freeReplyObject(r);
          continue;
        }
        if (kind == 0) {
          replies[i] = r;
          target[i] = -2;
          continue;
        }
        if (kind == DLOCK__REDIRECT_RETRY) {
          refused = 1;
          busy_why = r->len >= 8 && memcmp(r->str, "TRYAGAIN", 8) == 0
                         ? "TRYAGAIN"
                         : "CLUSTERDOWN";
          if (r->str[0] == 'C')
            atomic_store(&cl->stale, 1);
        } else {
          int to = follow(cl, r, kind);
          if (to < 0) {
            rc = dlock__fail_reply_in(r->str, r->len, calls[i].script->name);
          } else {
            target[i] = to;
            ask[i] = kind == DLOCK__REDIRECT_ASK;
            moved = 1;
          }
        }
        freeReplyObject(r);
      }
    }
    redirected += moved;
    if (rc == 0 && refused)
      rc = busy(busy_why);
  }
out:
  /* Refused for now: what was answered stays, for the caller's next go. */
  if (rc != 0 && rc != DLOCK__CLUSTER_BUSY) {
    for (size_t i = 0; i < n; i++) {
      if (replies[i] != NULL)
        freeReplyObject(replies[i]);
      replies[i] = NULL;
    }
    for (size_t k = 0; k < ntail; k++) {
      if (best[k] != NULL)
        freeReplyObject(best[k]);
      best[k] = NULL;
    }
  }
  for (size_t k = 0; k < ntail; k++)
    tail_replies[k] = best[k];
  if (heap) {
    dlock__free(target);
    dlock__free(ask);
    dlock__free(sub);
    dlock__free(subrep);
    dlock__free(which);
    dlock__free(sent);
  }
  return rc;
}

int dlock__cluster_call(dlock__cluster *cl, int slot, size_t n,
                        char *const *cmd, const size_t *len,
                        redisReply **replies, int64_t deadline_us) {
  static const char asking[] = "*1\r\n$6\r\nASKING\r\n";
  memset(replies, 0, n * sizeof(*replies));
  if (n == 0 || n > 8)
    return dlock__fail(DLOCK_EINVAL, "1 to 8 commands per routed call");
  if (deadline_us == 0)
    deadline_us = dlock__deadline_ms(cl->command_timeout_ms);
  int rc = 0;
  int idx = owner_of(cl, slot, deadline_us, &rc);
  int with_ask = 0;
  /* As for script calls: only MOVED and ASK count. */
  int redirected = 0;
  while (rc == 0) {
    if (redirected > REDIRECTS_MAX)
      return dlock__fail(DLOCK_EIO,
                         "cluster redirected a command more "
                         "than %d times",
                         REDIRECTS_MAX);
    /* With ASK, every command is preceded by its own ASKING (it holds for
     * one command only). */
    char *cmds[16];
    size_t lens[16];
    redisReply *got[16] = {NULL};
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
      if (with_ask) {
        cmds[m] = (char *)asking;
        lens[m++] = sizeof(asking) - 1;
      }
      cmds[m] = cmd[i];
      lens[m++] = len[i];
    }
    rc =
        dlock__conn_call(cl->nodes[idx]->conn, m, cmds, lens, got, deadline_us);
    if (rc != 0) {
      if (rc == DLOCK_EIO || rc == DLOCK_ETIMEDOUT)
        atomic_store(&cl->stale, 1);
      return rc;
    }
    redisReply *redirect = NULL;
    for (size_t i = 0, j = 0; i < m; i++) {
      if (with_ask && i % 2 == 0) {
        freeReplyObject(got[i]);
        continue;
      }
      replies[j++] = got[i];
      if (redirect == NULL && dlock__redirect_kind(got[i]) != 0)
        redirect = got[i];
    }
    with_ask = 0;
    if (redirect == NULL)
      return 0;
    int kind = dlock__redirect_kind(redirect);
    if (kind == DLOCK__REDIRECT_RETRY) {
      /* The whole batch is made again after the caller's pause. */
      rc = busy("TRYAGAIN or CLUSTERDOWN");
    } else {
      int to = follow(cl, redirect, kind);
      if (to < 0)
        return 0; /* the caller reports the error reply */
      idx = to;
      with_ask = kind == DLOCK__REDIRECT_ASK;
      redirected++;
    }
    for (size_t i = 0; i < n; i++) {
      freeReplyObject(replies[i]);
      replies[i] = NULL;
    }
  }
  return rc;
}
