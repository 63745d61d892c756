/*
 * Replica sync (see sync.h).
 */
#include "sync.h"

#include "client.h"
#include "error.h"
#include "monotime.h"
#include "proto/format.h"

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

void dlock__sync_init(dlock__sync *s, const dlock_options_t *o) {
  s->on = o->replica_sync != 0;
  s->fixed = o->replica_sync_replicas;
  s->timeout_ms = o->replica_sync_timeout_ms;
  atomic_store(&s->replicas, s->fixed > 0 ? s->fixed : -1);
  atomic_store(&s->read_us, 0);
  atomic_store(&s->warned, 0);
  atomic_store(&s->seen, -1);
}

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

int dlock__sync_count_info(const char *text, size_t len) {
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

/* Takes the replicas from an INFO replication reply. */
static void apply_info(dlock_client_t *c, const redisReply *r) {
  dlock__sync *s = &c->sync;
  if (r == NULL)
    return;
  if (r->type == REDIS_REPLY_STRING && c->sentinel != NULL) {
    int n = dlock__sync_count_info(r->str, r->len);
    atomic_store(&s->seen, n);
    atomic_store(&s->read_us, dlock__now_us());
    /* Not a master: the write failed with READONLY; the Sentinels are
     * asked again before the next. */
    if (n < 0)
      atomic_store(&s->replicas, -1);
    return;
  }
  if (r->type == REDIS_REPLY_STRING) {
    int n = dlock__sync_count_info(r->str, r->len);
    /* Not a master: the write failed with READONLY; the next one reads
     * again on whatever master it reaches. */
    atomic_store(&s->replicas, n);
    atomic_store(&s->read_us, dlock__now_us());
    return;
  }
  if (r->type == REDIS_REPLY_ERROR) {
    /* INFO refused (an ACL without it): nothing says how many replicas
     * there are, so none is waited for; said once. */
    atomic_store(&s->replicas, 0);
    atomic_store(&s->read_us, dlock__now_us());
    if (c->opt.on_warning != NULL && atomic_exchange(&s->warned, 1) == 0) {
      char text[400];
      snprintf(text, sizeof(text),
               "replica sync cannot read INFO replication (%.*s): writes "
               "wait for no replica; allow the user INFO, or set "
               "replica_sync_replicas",
               (int)(r->len < 200 ? r->len : 200), r->str);
      c->opt.on_warning(c->opt.on_warning_data, text);
    }
  }
}

void dlock__sync_take_info(dlock_client_t *c, const redisReply *r) {
  apply_info(c, r);
}

int dlock__sync_wanted(dlock_client_t *c) {
  dlock__sync *s = &c->sync;
  if (!s->on)
    return 0;
  int n = atomic_load(&s->replicas);
  if (c->sentinel != NULL && s->fixed == 0 &&
      atomic_load(&s->gen) != dlock__sentinel_gen(c->sentinel))
    n = -1;
  if (n >= 0 && c->sentinel != NULL && s->fixed == 0) {
    int seen = atomic_load(&s->seen);
    return seen > n ? seen : n;
  }
  if (n >= 0)
    return n;
  if (c->sentinel != NULL) {
    unsigned gen = dlock__sentinel_gen(c->sentinel);
    int rc = dlock__sentinel_replicas(
        c->sentinel, dlock__deadline_ms(c->opt.command_timeout_ms), &n);
    if (rc != 0)
      return rc;
    /* The master's own count, when the master moved, is of the master
     * before: read again. Otherwise it stays: a replica just back from an
     * outage that the Sentinels still flag down is in step there, and a
     * failover may promote it (a write that the other replica alone
     * acknowledged would be lost). */
    if (atomic_load(&s->gen) != gen)
      atomic_store(&s->seen, -1);
    atomic_store(&s->gen, gen);
    atomic_store(&s->replicas, n);
    atomic_store(&s->read_us, dlock__now_us());
    return n;
  }
  /* Not known: read now, a round trip before the write. */
  const char *argv[] = {"INFO", "replication"};
  char *cmd;
  int len = dlock__format_argv(&cmd, 2, argv, NULL);
  if (len < 0)
    return dlock__fail(DLOCK_ENOMEM, "out of memory formatting INFO");
  size_t slen = (size_t)len;
  redisReply *r = NULL;
  /* On a cluster, the master of slot 0 stands for every shard: their
   * replicas are set up alike (see "Redis Cluster" in the README). Asked
   * through the routing, so that a master that failed gets the map read
   * again. */
  int rc = c->cluster != NULL
               ? dlock__cluster_call(c->cluster, 0, 1, &cmd, &slen, &r, 0)
               : dlock__conn_call(c->conn, 1, &cmd, &slen, &r, 0);
  dlock__format_free(cmd);
  if (rc != 0)
    return rc;
  apply_info(c, r);
  freeReplyObject(r);
  n = atomic_load(&s->replicas);
  /* A replica answered: the write will fail with READONLY and say so. */
  return n >= 0 ? n : 0;
}

/* "WAIT n timeout" as a command, as dlock__format_argv formats it. */
static int format_wait(int n, int64_t timeout_ms, char **cmd) {
  char nrep[DLOCK__DEC_MAX], tmo[DLOCK__DEC_MAX];
  dlock__fmt_i64(nrep, n);
  dlock__fmt_i64(tmo, timeout_ms);
  const char *wait_argv[] = {"WAIT", nrep, tmo};
  return dlock__format_argv(cmd, 3, wait_argv, NULL);
}

/*
 * On a cluster: the replicas a write of 'calls' waits for, the fewest that
 * the masters of their slots have in step, reading each master's INFO
 * replication (a round trip) when its count is not known. A master that
 * refuses INFO is counted as having none (said once, as on one server).
 */
static int shard_replicas(dlock_client_t *c, size_t n,
                          const dlock__eval *calls) {
  static const char info[] = "*2\r\n$4\r\nINFO\r\n$11\r\nreplication\r\n";
  for (int tries = 0; tries < 4; tries++) {
    int slot = dlock__cluster_unknown_replicas(c->cluster, n, calls);
    if (slot < 0)
      break;
    char *cmd = (char *)info;
    size_t len = sizeof(info) - 1;
    redisReply *r = NULL;
    int rc = dlock__cluster_call(c->cluster, slot, 1, &cmd, &len, &r, 0);
    if (rc != 0)
      return rc;
    int count = 0;
    if (r->type == REDIS_REPLY_STRING) {
      count = dlock__sync_count_info(r->str, r->len);
      /* A replica answered (a stale map): the write fails with READONLY
       * or is redirected, and says so. */
      if (count < 0)
        count = 0;
    } else {
      apply_info(c, r); /* the warning about INFO refused */
    }
    freeReplyObject(r);
    dlock__cluster_set_replicas(c->cluster, slot, count);
  }
  int wanted = dlock__cluster_replicas(c->cluster, n, calls);
  return wanted >= 0 ? wanted : 0;
}

/* The script calls on the client's server, or each on the master of its
 * slot on a cluster. */
static int run_calls(dlock_client_t *c, size_t n, const dlock__eval *calls,
                     redisReply **replies, int64_t deadline_us, int64_t idle_ms,
                     size_t ntail, const char *const *tail,
                     const size_t *tail_lens, redisReply **tail_replies) {
  if (c->cluster != NULL)
    return dlock__cluster_eval(c->cluster, n, calls, replies, deadline_us,
                               idle_ms, ntail, tail, tail_lens, tail_replies);
  if (ntail > 0)
    return dlock__eval_run_tail(c->conn, n, calls, replies, deadline_us,
                                idle_ms, ntail, tail, tail_lens, tail_replies);
  return idle_ms > 0 ? dlock__eval_run_paced(c->conn, n, calls, replies,
                                             idle_ms, deadline_us)
                     : dlock__eval_run(c->conn, n, calls, replies, deadline_us);
}

static int write_round(dlock_client_t *c, size_t n, const dlock__eval *calls,
                       redisReply **replies, int64_t deadline_us,
                       int64_t idle_ms, dlock__synced *out) {
  dlock__sync *s = &c->sync;
  out->ok = 1;
  out->acked = out->wanted = out->moved = 0;
  /* The generation before the count: when it is still the current one
   * after the WAIT, the count and the connection that carried the write
   * (replaced at its use when the generation moved) are of one master. */
  unsigned gen = c->sentinel != NULL ? dlock__sentinel_gen(c->sentinel) : 0;
  /* On a cluster each shard is counted by its own replicas. */
  int per_shard = c->cluster != NULL && s->on && s->fixed == 0;
  int wanted = per_shard ? shard_replicas(c, n, calls) : dlock__sync_wanted(c);
  if (wanted < 0)
    return wanted;
  int refresh = 0;
  if (per_shard) {
    /* Once a second (the thread that moves 'read_us' on) every shard's
     * count is read again, at its next write. */
    int64_t now = dlock__now_us(), read = atomic_load(&s->read_us);
    if (now - read > REFRESH_US &&
        atomic_compare_exchange_strong(&s->read_us, &read, now))
      dlock__cluster_forget_replicas(c->cluster);
  } else if (s->on && s->fixed == 0) {
    /* One write per period asks: the thread that moves 'read_us' on claims
     * the refresh, so that threads writing at once do not all pipeline an
     * INFO (16 threads asked 34 times in 2 s before). A refresh that fails
     * leaves the count as it was until the next period. */
    int64_t now = dlock__now_us(), read = atomic_load(&s->read_us);
    refresh = now - read > REFRESH_US &&
              atomic_compare_exchange_strong(&s->read_us, &read, now);
  }
  if (wanted == 0 && !refresh)
    return run_calls(c, n, calls, replies, deadline_us, idle_ms, 0, NULL, NULL,
                     NULL);
  char *tail[2];
  size_t lens[2], ntail = 0;
  redisReply *got[2] = {NULL, NULL};
  const char *info_argv[] = {"INFO", "replication"};
  int len;
  int rc = 0;
  if (wanted > 0) {
    if ((len = format_wait(wanted, s->timeout_ms, &tail[ntail])) < 0)
      rc = DLOCK_ENOMEM;
    else
      lens[ntail++] = (size_t)len;
  }
  if (rc == 0 && refresh) {
    if ((len = dlock__format_argv(&tail[ntail], 2, info_argv, NULL)) < 0)
      rc = DLOCK_ENOMEM;
    else
      lens[ntail++] = (size_t)len;
  }
  if (rc != 0) {
    for (size_t k = 0; k < ntail; k++)
      dlock__format_free(tail[k]);
    return dlock__fail(DLOCK_ENOMEM, "out of memory formatting WAIT");
  }
  /* The WAIT may take its whole timeout on top of the command's. */
  int64_t extra_ms = wanted > 0 ? s->timeout_ms : 0;
  if (idle_ms > 0)
    idle_ms += extra_ms;
  else if (deadline_us == 0)
    deadline_us = dlock__deadline_ms(c->opt.command_timeout_ms + extra_ms);
  rc = run_calls(c, n, calls, replies, deadline_us, idle_ms, ntail,
                 (const char *const *)tail, lens, got);
  for (size_t k = 0; k < ntail; k++)
    dlock__format_free(tail[k]);
  if (rc == 0 && wanted > 0) {
    const redisReply *w = got[0];
    out->wanted = wanted;
    out->acked =
        w != NULL && w->type == REDIS_REPLY_INTEGER ? (int)w->integer : 0;
    out->ok = out->acked >= wanted;
    /* The master moved while the write waited: it may have gone to the
     * old master, whose replicas acknowledge what they drop when they
     * follow the new one. */
    if (c->sentinel != NULL && dlock__sentinel_gen(c->sentinel) != gen) {
      out->moved = 1;
      out->ok = 0;
    }
  }
  if (rc == 0 && refresh)
    apply_info(c, got[ntail - 1]);
  for (size_t k = 0; k < ntail; k++)
    if (got[k] != NULL)
      freeReplyObject(got[k]);
  /* A write that failed may be followed by a connection to another master
   * (a failover), and one that fell short by a replica gone: either way
   * the replicas are read again before the next write. */
  if (s->on && s->fixed == 0 && (rc != 0 || !out->ok)) {
    atomic_store(&s->replicas, -1);
    if (c->cluster != NULL)
      dlock__cluster_forget_replicas(c->cluster);
  }
  return rc;
}

int dlock__eval_write(dlock_client_t *c, size_t n, const dlock__eval *calls,
                      redisReply **replies, int64_t deadline_us,
                      dlock__synced *out) {
  return write_round(c, n, calls, replies, deadline_us, 0, out);
}

int dlock__eval_write_paced(dlock_client_t *c, size_t n,
                            const dlock__eval *calls, redisReply **replies,
                            int64_t idle_ms, int64_t limit_us,
                            dlock__synced *out) {
  return write_round(c, n, calls, replies, limit_us, idle_ms > 0 ? idle_ms : 1,
                     out);
}

int dlock__eval_send_synced(dlock_client_t *c, const dlock__eval *call,
                            dlock__pending *p, dlock__sync_call *sc) {
  dlock__sync *s = &c->sync;
  memset(sc, 0, sizeof(*sc));
  sc->gen = c->sentinel != NULL ? dlock__sentinel_gen(c->sentinel) : 0;
  /* The WAIT may take its whole timeout on top of the command's. */
  sc->deadline_us =
      dlock__deadline_ms(c->opt.command_timeout_ms + s->timeout_ms);
  if (s->on && c->sentinel == NULL && atomic_load(&s->replicas) < 0) {
    /* The count is not known, and reading it first would hold the other
     * servers' sends for a server that does not answer: INFO rides after
     * the script instead, and the WAIT follows once it is read. */
    const char *info_argv[] = {"INFO", "replication"};
    int len = dlock__format_argv(&sc->wait_cmd, 2, info_argv, NULL);
    if (len < 0) {
      sc->wait_cmd = NULL;
      return dlock__fail(DLOCK_ENOMEM, "out of memory formatting INFO");
    }
    sc->wait_len = (size_t)len;
    sc->wanted = -1;
    dlock__eval_send_tail(c->conn, call, sc->deadline_us, 1, &sc->wait_cmd,
                          &sc->wait_len, p);
    return 0;
  }
  int wanted = dlock__sync_wanted(c);
  if (wanted < 0)
    return wanted;
  if (wanted == 0) {
    /* A send that fails says so in 'p', to the wait. */
    dlock__eval_send(c->conn, call, 0, p);
    return 0;
  }
  int len = format_wait(wanted, s->timeout_ms, &sc->wait_cmd);
  if (len < 0) {
    sc->wait_cmd = NULL;
    return dlock__fail(DLOCK_ENOMEM, "out of memory formatting WAIT");
  }
  sc->wait_len = (size_t)len;
  sc->wanted = wanted;
  dlock__eval_send_tail(c->conn, call, sc->deadline_us, 1, &sc->wait_cmd,
                        &sc->wait_len, p);
  return 0;
}

int dlock__eval_wait_synced_until(dlock_client_t *c, const dlock__eval *call,
                                  dlock__pending *p, dlock__sync_call *sc,
                                  redisReply **reply, int64_t until_us,
                                  dlock__synced *out) {
  dlock__sync *s = &c->sync;
  out->ok = 1;
  out->acked = out->wanted = out->moved = 0;
  if (sc->wanted == 0 && sc->wait_cmd == NULL)
    return dlock__eval_wait_until(c->conn, call, p, reply, 0, until_us);
  redisReply *w = NULL;
  int rc = dlock__eval_wait_tail_until(c->conn, call, p, reply, sc->deadline_us,
                                       until_us, 1, &sc->wait_cmd,
                                       &sc->wait_len, &w);
  if (rc == DLOCK__CONN_AGAIN)
    return rc;
  if (rc == 0 && sc->wanted < 0) {
    /* 'w' is the INFO that rode after the script: the WAIT now, on the
     * same connection, after the write. */
    apply_info(c, w);
    freeReplyObject(w);
    w = NULL;
    int n = atomic_load(&s->replicas);
    sc->wanted = n > 0 ? n : 0;
    if (n > 0) {
      char *cmd;
      int len = format_wait(n, s->timeout_ms, &cmd);
      if (len < 0) {
        rc = dlock__fail(DLOCK_ENOMEM, "out of memory formatting WAIT");
      } else {
        size_t slen = (size_t)len;
        rc = dlock__conn_call(c->conn, 1, &cmd, &slen, &w, sc->deadline_us);
        dlock__format_free(cmd);
      }
      if (rc != 0) {
        /* The write is done; whether it reached the replicas is not
         * known, so it counts as not synced. */
        freeReplyObject(*reply);
        *reply = NULL;
      }
    }
  }
  if (rc == 0) {
    out->wanted = sc->wanted;
    out->acked =
        w != NULL && w->type == REDIS_REPLY_INTEGER ? (int)w->integer : 0;
    out->ok = out->acked >= sc->wanted;
    /* As in write_round: a master that moved meanwhile makes the
     * acknowledgements worthless. */
    if (c->sentinel != NULL && dlock__sentinel_gen(c->sentinel) != sc->gen) {
      out->moved = 1;
      out->ok = 0;
    }
  }
  if (w != NULL)
    freeReplyObject(w);
  dlock__format_free(sc->wait_cmd);
  sc->wait_cmd = NULL;
  if (s->on && s->fixed == 0 && (rc != 0 || !out->ok))
    atomic_store(&s->replicas, -1);
  return rc;
}

int dlock__sync_fail(const dlock_client_t *c, const dlock__synced *s,
                     const char *what, const char *name, size_t len) {
  if (s->moved)
    return dlock__fail(DLOCK_ENOSYNC,
                       "%s \"%.*s\" was written while the master moved "
                       "(Sentinel): the replicas that acknowledged it may "
                       "not keep it, so it was given back",
                       what, (int)(len < 100 ? len : 100), name);
  return dlock__fail(DLOCK_ENOSYNC,
                     "%s \"%.*s\" was written on the master but only %d of "
                     "%d replicas acknowledged it within %lld ms "
                     "(replica_sync): a failover could lose it, so it was "
                     "given back",
                     what, (int)(len < 100 ? len : 100), name, s->acked,
                     s->wanted, (long long)c->sync.timeout_ms);
}
