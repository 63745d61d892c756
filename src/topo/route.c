/*
 * The routing of a client's calls (see route.h).
 */
#include "topo/route.h"

#include "error.h"
#include "monotime.h"
#include "proto/format.h"
#include "proto/slot.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How often the replicas in step are read again, in the round trip of a
 * write. */
#define REFRESH_US 1000000
/* A replica acknowledges its master every second; one silent for longer
 * than this (in whole seconds, as INFO counts) is not counted in step: it
 * is cut off or far behind, and every write would wait for it in vain. */
#define LAG_MAX_S 2

void dlock__route_init(dlock__route *r, int64_t command_timeout_ms,
                       void (*warn)(void *data, const char *text),
                       void *warn_data) {
  r->conn = NULL;
  r->sentinel = NULL;
  r->cluster = NULL;
  r->command_timeout_ms = command_timeout_ms;
  r->warn = warn;
  r->warn_data = warn_data;
  atomic_store(&r->replicas, -1);
  atomic_store(&r->read_us, 0);
  atomic_store(&r->warned, 0);
  atomic_store(&r->gen, 0);
  atomic_store(&r->seen, -1);
  r->info_all = 0;
  atomic_store(&r->aof, 0);
}

/* ---- routing ------------------------------------------------------------ */

/* dlock__conn_call on the master of 'slot' on a cluster (redirections
 * followed), else on the client's one link. */
static int call_slot(dlock__route *r, int slot, size_t n, char *const *cmds,
                     const size_t *lens, redisReply **replies,
                     int64_t deadline_us) {
  if (r->cluster != NULL)
    return dlock__cluster_call(r->cluster, slot, n, cmds, lens, replies,
                               deadline_us);
  return dlock__conn_call(r->conn, n, cmds, lens, replies, deadline_us);
}

int dlock__route_call(dlock__route *r, const char *key, size_t key_len,
                      size_t n, char *const *cmds, const size_t *lens,
                      redisReply **replies, int64_t deadline_us) {
  if (r->cluster != NULL && key != NULL)
    return dlock__cluster_call(r->cluster, dlock__key_slot(key, key_len), n,
                               cmds, lens, replies, deadline_us);
  return dlock__conn_call(r->conn, n, cmds, lens, replies, deadline_us);
}

dlock__conn *dlock__route_conn_for_key(dlock__route *r, const char *key,
                                       size_t len, int *rc) {
  *rc = 0;
  if (r->cluster == NULL)
    return r->conn;
  return dlock__cluster_conn(r->cluster, dlock__key_slot(key, len), rc);
}

const dlock__script *dlock__route_script(dlock__route *r,
                                         const dlock__script *script) {
  if (r->cluster != NULL && dlock__cluster_sharded(r->cluster) &&
      script->sharded != NULL)
    return script->sharded;
  return script;
}

int64_t dlock__route_retry_at(dlock__route *r) {
  /* On a cluster the next attempt goes where the slot map says, which a
   * failover changes: waiting for the dead master's reconnect back-off (up
   * to a second) would hold a retry back from its promoted replica. The
   * callers' own pauses keep a node that is down from a busy loop. */
  return r->cluster != NULL ? 0 : dlock__conn_retry_at(r->conn);
}

void dlock__route_failed(dlock__route *r, int rc) {
  /* A master that failed may have failed over: the slot map is read again
   * before the next call, as after any call that failed there. */
  if ((rc == DLOCK_EIO || rc == DLOCK_ETIMEDOUT) && r->cluster != NULL)
    dlock__cluster_mark_stale(r->cluster);
}

/* ---- replica counts ----------------------------------------------------- */

/* The value of 'key=' in one "slaveN:ip=...,state=online,...,lag=0" line
 * ('line' up to 'end'), or NULL. */
static const char *field_in(const char *line, const char *end,
                            const char *key) {
  size_t klen = strlen(key);
  for (const char *p = line; p + klen <= end; p++)
    if ((p == line || p[-1] == ',' || p[-1] == ':') &&
        memcmp(p, key, klen) == 0)
      return p + klen;
  return NULL;
}

int dlock__route_count_info(const char *text, size_t len) {
  const char *end = text + len;
  int master = 0, n = 0;
  for (const char *line = text; line < end;) {
    const char *eol = memchr(line, '\n', (size_t)(end - line));
    if (eol == NULL)
      eol = end;
    size_t ll = (size_t)(eol - line);
    if (ll >= 11 && memcmp(line, "role:master", 11) == 0)
      master = 1;
    if (ll > 6 && memcmp(line, "slave", 5) == 0 && line[5] >= '0' &&
        line[5] <= '9') {
      const char *state = field_in(line, eol, "state=");
      const char *lag = field_in(line, eol, "lag=");
      if (state != NULL && (size_t)(eol - state) >= 6 &&
          memcmp(state, "online", 6) == 0 && lag != NULL &&
          atol(lag) <= LAG_MAX_S)
        n++;
    }
    line = eol + 1;
  }
  return master ? n : -1;
}

/* The value after "key:" on a line of 'text', or NULL. */
static const char *info_value(const char *text, const char *end,
                              const char *key) {
  size_t klen = strlen(key);
  for (const char *line = text; line < end;) {
    const char *eol = memchr(line, '\n', (size_t)(end - line));
    if (eol == NULL)
      eol = end;
    if ((size_t)(eol - line) > klen + 1 && memcmp(line, key, klen) == 0 &&
        line[klen] == ':')
      return line + klen + 1;
    line = eol + 1;
  }
  return NULL;
}

int dlock__route_aof_info(const char *text, size_t len) {
  const char *end = text + len;
  const char *aof = info_value(text, end, "aof_enabled");
  if (aof == NULL)
    return -1;
  if (*aof != '1')
    return 0;
  /* WAITAOF came with Redis 7.2; Valkey, which forked from 7.2.4, reports
   * that version here too. */
  const char *v = info_value(text, end, "redis_version");
  if (v == NULL)
    return 0;
  char *dot;
  long major = strtol(v, &dot, 10);
  long minor = *dot == '.' ? strtol(dot + 1, NULL, 10) : 0;
  return major > 7 || (major == 7 && minor >= 2);
}

int dlock__route_format_info(const dlock__route *r, char **cmd) {
  const char *argv[] = {"INFO", "replication"};
  return dlock__format_argv(cmd, r->info_all ? 1 : 2, argv, NULL);
}

int dlock__route_aof(const dlock__route *r) { return atomic_load(&r->aof); }

/* Takes the replicas from an INFO replication reply (and, from a whole
 * INFO, whether the master has AOF on). */
static void apply_info(dlock__route *r, const redisReply *reply) {
  if (reply == NULL)
    return;
  if (reply->type == REDIS_REPLY_STRING) {
    int aof = dlock__route_aof_info(reply->str, reply->len);
    if (aof >= 0)
      atomic_store(&r->aof, aof);
  }
  if (reply->type == REDIS_REPLY_STRING && r->sentinel != NULL) {
    int n = dlock__route_count_info(reply->str, reply->len);
    atomic_store(&r->seen, n);
    atomic_store(&r->read_us, dlock__now_us());
    /* Not a master: the write failed with READONLY; the Sentinels are
     * asked again before the next. */
    if (n < 0)
      atomic_store(&r->replicas, -1);
    return;
  }
  if (reply->type == REDIS_REPLY_STRING) {
    int n = dlock__route_count_info(reply->str, reply->len);
    /* Not a master: the write failed with READONLY; the next one reads
     * again on whatever master it reaches. */
    atomic_store(&r->replicas, n);
    atomic_store(&r->read_us, dlock__now_us());
    return;
  }
  if (reply->type == REDIS_REPLY_ERROR) {
    /* INFO refused (an ACL without it): nothing says how many replicas
     * there are, so none is waited for; said once. */
    atomic_store(&r->replicas, 0);
    atomic_store(&r->read_us, dlock__now_us());
    if (r->warn != NULL && atomic_exchange(&r->warned, 1) == 0) {
      char text[400];
      snprintf(text, sizeof(text),
               "replica sync cannot read INFO replication (%.*s): writes "
               "wait for no replica; allow the user INFO, or set "
               "replica_sync_replicas",
               (int)(reply->len < 200 ? reply->len : 200), reply->str);
      r->warn(r->warn_data, text);
    }
  }
}

int dlock__route_take_info(dlock__route *r, const redisReply *reply) {
  apply_info(r, reply);
  return atomic_load(&r->replicas);
}

/* Through Sentinel: the count known, read again from the Sentinels when
 * the master moved; -1 when it is to be read. */
static int sentinel_known(dlock__route *r) {
  int n = atomic_load(&r->replicas);
  if (atomic_load(&r->gen) != dlock__sentinel_gen(r->sentinel))
    n = -1;
  if (n >= 0) {
    int seen = atomic_load(&r->seen);
    return seen > n ? seen : n;
  }
  return -1;
}

/* Through Sentinel: the count the Sentinels see now, read when not known
 * or when the master moved. */
static int sentinel_replicas(dlock__route *r) {
  int n = sentinel_known(r);
  if (n >= 0)
    return n;
  unsigned gen = dlock__sentinel_gen(r->sentinel);
  int rc = dlock__sentinel_replicas(
      r->sentinel, dlock__deadline_ms(r->command_timeout_ms), &n);
  if (rc != 0)
    return rc;
  /* The master's own count, when the master moved, is of the master
   * before: read again. Otherwise it stays: a replica just back from an
   * outage that the Sentinels still flag down is in step there, and a
   * failover may promote it (a write that the other replica alone
   * acknowledged would be lost). */
  if (atomic_load(&r->gen) != gen)
    atomic_store(&r->seen, -1);
  atomic_store(&r->gen, gen);
  atomic_store(&r->replicas, n);
  atomic_store(&r->read_us, dlock__now_us());
  return n;
}

/* The client's master's count (not per shard), read first when not
 * known. */
/* The INFO that replica sync reads (dlock__route_format_info) from the
 * master of 'slot' (on one server: the server), through the routing
 * ('routed') or straight from the cluster's map. INFO names no key: a
 * cluster refuses it for now only when something is wrong with the node,
 * and the count is not worth a wait. */
static int read_info(dlock__route *r, int slot, int routed,
                     redisReply **reply) {
  char *cmd;
  int len = dlock__route_format_info(r, &cmd);
  if (len < 0)
    return dlock__fail(DLOCK_ENOMEM, "out of memory formatting INFO");
  size_t slen = (size_t)len;
  int rc =
      routed ? call_slot(r, slot, 1, &cmd, &slen, reply, 0)
             : dlock__cluster_call(r->cluster, slot, 1, &cmd, &slen, reply, 0);
  dlock__format_free(cmd);
  return rc == DLOCK__CLUSTER_BUSY ? DLOCK_EIO : rc;
}

static int master_replicas(dlock__route *r) {
  if (r->sentinel != NULL)
    return sentinel_replicas(r);
  int n = atomic_load(&r->replicas);
  if (n >= 0)
    return n;
  /* Not known: read now, a round trip before the write. On a cluster,
   * the master of slot 0 stands for every shard: their replicas are set
   * up alike (see "Redis Cluster" in the README). Asked through the
   * routing, so that a master that failed gets the map read again. */
  redisReply *reply = NULL;
  int rc = read_info(r, 0, 1, &reply);
  if (rc != 0)
    return rc;
  apply_info(r, reply);
  freeReplyObject(reply);
  n = atomic_load(&r->replicas);
  /* A replica answered: the write will fail with READONLY and say so. */
  return n >= 0 ? n : 0;
}

/*
 * On a cluster: the replicas a write of 'calls' waits for, the fewest that
 * the masters of their slots have in step, reading each master's INFO
 * replication (a round trip) when its count is not known. A master that
 * refuses INFO is counted as having none (said once, as on one server).
 */
static int shard_replicas(dlock__route *r, size_t n, const dlock__eval *calls) {
  for (int tries = 0; tries < 4; tries++) {
    int slot = dlock__cluster_unknown_replicas(r->cluster, n, calls);
    if (slot < 0)
      break;
    redisReply *reply = NULL;
    int rc = read_info(r, slot, 0, &reply);
    if (rc != 0)
      return rc;
    if (reply->type == REDIS_REPLY_STRING) {
      /* The shards are set up alike: any one's AOF stands for all. */
      int aof = dlock__route_aof_info(reply->str, reply->len);
      if (aof >= 0)
        atomic_store(&r->aof, aof);
    }
    int count = 0;
    if (reply->type == REDIS_REPLY_STRING) {
      count = dlock__route_count_info(reply->str, reply->len);
      /* A replica answered (a stale map): the write fails with READONLY
       * or is redirected, and says so. */
      if (count < 0)
        count = 0;
    } else {
      apply_info(r, reply); /* the warning about INFO refused */
    }
    freeReplyObject(reply);
    dlock__cluster_set_replicas(r->cluster, slot, count);
  }
  int wanted = dlock__cluster_replicas(r->cluster, n, calls);
  return wanted >= 0 ? wanted : 0;
}

int dlock__route_replicas(dlock__route *r, size_t n, const dlock__eval *calls) {
  /* On a cluster each shard is counted by its own replicas. */
  if (r->cluster != NULL && n > 0)
    return shard_replicas(r, n, calls);
  return master_replicas(r);
}

int dlock__route_replicas_known(dlock__route *r, size_t n,
                                const dlock__eval *calls, int *out) {
  if (r->cluster != NULL && n > 0) {
    *out = dlock__cluster_replicas(r->cluster, n, calls);
    return 0;
  }
  if (r->sentinel != NULL) {
    /* What the Sentinels see, read again when the master moved. */
    int rc = sentinel_replicas(r);
    *out = rc >= 0 ? rc : -1;
    return rc >= 0 ? 0 : rc;
  }
  *out = atomic_load(&r->replicas);
  return 0;
}

int dlock__route_refresh(dlock__route *r, int defer_shards) {
  int64_t now = dlock__now_us(), read = atomic_load(&r->read_us);
  if (now - read <= REFRESH_US)
    return 0;
  if (r->cluster != NULL && defer_shards)
    return -1;
  /* One write per period asks: the thread that moves 'read_us' on claims
   * the refresh, so that threads writing at once do not all pipeline an
   * INFO (16 threads asked 34 times in 2 s before). A refresh that fails
   * leaves the count as it was until the next period. */
  if (!atomic_compare_exchange_strong(&r->read_us, &read, now))
    return 0;
  if (r->cluster == NULL)
    return 1;
  /* On a cluster every shard's count is read again, at its next write. */
  dlock__cluster_forget_replicas(r->cluster);
  return 0;
}

void dlock__route_forget_replicas(dlock__route *r) {
  atomic_store(&r->replicas, -1);
  if (r->cluster != NULL)
    dlock__cluster_forget_replicas(r->cluster);
}

/* ---- life --------------------------------------------------------------- */

int dlock__route_open(dlock__route *r, int64_t deadline_us) {
  return r->cluster != NULL ? dlock__cluster_refresh(r->cluster, deadline_us)
                            : dlock__conn_open(r->conn, deadline_us);
}

int dlock__route_in_outage(dlock__route *r) {
  if (r->sentinel != NULL)
    return dlock__sentinel_named(r->sentinel);
  return r->cluster != NULL && dlock__cluster_answered(r->cluster);
}

void dlock__route_cancel(dlock__route *r) {
  if (r->cluster != NULL)
    dlock__cluster_cancel(r->cluster);
  else if (r->conn != NULL)
    dlock__conn_cancel(r->conn);
}

void dlock__route_free(dlock__route *r) {
  if (r->cluster != NULL)
    dlock__cluster_free(r->cluster); /* 'conn' is one of its nodes' */
  else
    dlock__conn_free(r->conn);
  dlock__sentinel_free(r->sentinel);
  r->cluster = NULL;
  r->conn = NULL;
  r->sentinel = NULL;
}

int dlock__route_forget(dlock__route *r) {
  if (r->cluster != NULL) {
    if (dlock__cluster_forget(r->cluster) == 0) {
      r->conn = NULL;
      dlock__cluster_free(r->cluster);
      r->cluster = NULL;
    }
  } else if (dlock__conn_forget(r->conn) == 0)
    r->conn = NULL;
  /* A Sentinel watcher is the parent's thread, as the others are: its
   * memory stays with the rest. */
  return r->conn != NULL || r->sentinel != NULL ? -1 : 0;
}

void dlock__route_describe(dlock__route *r, const dlock__endpoint *ep,
                           char *buf, size_t n) {
  if (r->sentinel != NULL)
    dlock__sentinel_describe(r->sentinel, buf, n);
  else
    dlock__endpoint_describe(ep, buf, n);
}

/* ---- the master's moves ------------------------------------------------- */

void dlock__route_watch_step(dlock__route *r, short revents,
                             dlock__watch_io *next) {
  if (r->sentinel == NULL) {
    *next = (dlock__watch_io){-1, 0, INT64_MAX};
    return;
  }
  dlock__sentinel_watch_step(r->sentinel, revents, next);
}

void dlock__route_watch_end(dlock__route *r) {
  if (r->sentinel != NULL)
    dlock__sentinel_watch_end(r->sentinel);
}
