/*
 * Replica sync (see sync.h).
 */
#include "replica.h"

#include "alloc.h"
#include "client.h"
#include "engine.h"
#include "error.h"
#include "monotime.h"
#include "observe.h"
#include "proto/format.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dlock__sync_init(dlock__sync *s, const dlock_options_t *o) {
  s->on = o->replica_sync != 0;
  s->fixed = o->replica_sync_replicas;
  s->timeout_ms = o->replica_sync_timeout_ms;
  s->any = o->replica_sync_mode == DLOCK_SYNC_ANY;
}

int dlock__sync_format_wait(dlock_client_t *c, int n, char **cmd) {
  char nrep[DLOCK__DEC_MAX], tmo[DLOCK__DEC_MAX];
  dlock__fmt_i64(nrep, n);
  dlock__fmt_i64(tmo, c->sync.timeout_ms);
  if (c->sync.any && dlock__route_aof(&c->route)) {
    /* Redisson's form: the master's own fsync, and n replicas'. */
    const char *argv[] = {"WAITAOF", "1", nrep, tmo};
    return dlock__format_argv(cmd, 4, argv, NULL);
  }
  const char *argv[] = {"WAIT", nrep, tmo};
  return dlock__format_argv(cmd, 3, argv, NULL);
}

void dlock__sync_judge(const dlock__sync *s, const redisReply *w, int wanted,
                       dlock__synced *out) {
  out->wanted = wanted;
  out->acked = 0;
  if (w != NULL && w->type == REDIS_REPLY_INTEGER)
    out->acked = (int)w->integer;
  /* WAITAOF answers {local fsyncs, replicas' fsyncs}. */
  else if (w != NULL && w->type == REDIS_REPLY_ARRAY && w->elements == 2 &&
           w->element[1]->type == REDIS_REPLY_INTEGER)
    out->acked = (int)w->element[1]->integer;
  out->ok = out->acked >= (s->any && wanted > 0 ? 1 : wanted);
}

int dlock__sync_wanted(dlock_client_t *c) {
  dlock__sync *s = &c->sync;
  if (!s->on)
    return 0;
  if (s->fixed > 0)
    return s->fixed;
  return dlock__route_replicas(&c->route, 0, NULL);
}

/* Frees what a call that ends in a failure had answered so far. */
static void drop_replies(redisReply **replies, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (replies[i] != NULL)
      freeReplyObject(replies[i]);
    replies[i] = NULL;
  }
}

/*
 * The calls that a cluster refused for now (DLOCK__CLUSTER_BUSY: those
 * whose reply is still NULL), made again after the busy back-off until
 * every one is answered or the deadline would pass (DLOCK_EIO, with the
 * cluster's detail); the replies, and the tail's, merge with what came.
 */
static int again_later(dlock_client_t *c, size_t n, const dlock__eval *calls,
                       redisReply **replies, int64_t deadline_us,
                       int64_t idle_ms, size_t ntail, const char *const *tail,
                       const size_t *tail_lens, redisReply **tail_replies) {
  int64_t until = deadline_us != 0
                      ? deadline_us
                      : dlock__deadline_ms(c->opt.command_timeout_ms);
  dlock__eval *sub = dlock__calloc(n, sizeof(*sub));
  redisReply **got = dlock__calloc(n, sizeof(*got));
  size_t *which = dlock__calloc(n, sizeof(*which));
  redisReply *got_tail[2] = {NULL, NULL};
  int rc = sub != NULL && which != NULL && got != NULL && ntail <= 2
               ? DLOCK__CLUSTER_BUSY
               : dlock__fail(DLOCK_ENOMEM, "out of memory routing scripts");
  for (int step = 0; rc == DLOCK__CLUSTER_BUSY;) {
    int paused = dlock__busy_pause(c, &step, until);
    if (paused != 0) {
      rc = paused == DLOCK_ETIMEDOUT ? DLOCK_EIO : paused;
      break;
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
      if (replies[i] == NULL) {
        which[m] = i;
        sub[m++] = calls[i];
      }
    rc = dlock__route_eval(&c->route, m, sub, got, deadline_us, idle_ms, ntail,
                           tail, tail_lens, got_tail);
    for (size_t j = 0; j < m; j++)
      replies[which[j]] = got[j];
    dlock__route_keep_tail(tail_replies, got_tail, ntail);
  }
  if (rc != 0) {
    drop_replies(replies, n);
    drop_replies(tail_replies, ntail);
  }
  dlock__free(sub);
  dlock__free(got);
  dlock__free(which);
  return rc;
}

/* dlock__route_eval, whose calls a cluster refuses for now made again
 * after a pause. */
static int routed_eval(dlock_client_t *c, size_t n, const dlock__eval *calls,
                       redisReply **replies, int64_t deadline_us,
                       int64_t idle_ms, size_t ntail, const char *const *tail,
                       const size_t *tail_lens, redisReply **tail_replies) {
  int rc = dlock__route_eval(&c->route, n, calls, replies, deadline_us, idle_ms,
                             ntail, tail, tail_lens, tail_replies);
  if (rc != DLOCK__CLUSTER_BUSY)
    return rc;
  return again_later(c, n, calls, replies, deadline_us, idle_ms, ntail, tail,
                     tail_lens, tail_replies);
}

static int write_round(dlock_client_t *c, size_t n, const dlock__eval *calls,
                       redisReply **replies, int64_t deadline_us,
                       int64_t idle_ms, dlock__synced *out) {
  dlock__sync *s = &c->sync;
  dlock__route *r = &c->route;
  out->ok = 1;
  out->acked = out->wanted = out->moved = 0;
  /* The generation before the count: when it is still the current one
   * after the WAIT, the count and the connection that carried the write
   * (replaced at its use when the generation moved) are of one master. */
  unsigned gen = dlock__route_gen(r);
  /* The replicas in step behind the master(s) of these calls (each shard
   * by its own on a cluster), unless the client names how many. */
  int counted = s->on && s->fixed == 0;
  int wanted =
      counted ? dlock__route_replicas(r, n, calls) : dlock__sync_wanted(c);
  if (wanted < 0)
    return wanted;
  /* Once a second the counts are read again: an INFO rides after this
   * write (on a cluster, each shard's count is read at its next write). */
  int refresh = counted ? dlock__route_refresh(r, 0) : 0;
  if (wanted == 0 && !refresh)
    return routed_eval(c, n, calls, replies, deadline_us, idle_ms, 0, NULL,
                       NULL, NULL);
  char *tail[2];
  size_t lens[2], ntail = 0;
  redisReply *got[2] = {NULL, NULL};
  int len;
  int rc = 0;
  if (wanted > 0) {
    if ((len = dlock__sync_format_wait(c, wanted, &tail[ntail])) < 0)
      rc = DLOCK_ENOMEM;
    else
      lens[ntail++] = (size_t)len;
  }
  if (rc == 0 && refresh) {
    if ((len = dlock__route_format_info(r, &tail[ntail])) < 0)
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
  rc = routed_eval(c, n, calls, replies, deadline_us, idle_ms, ntail,
                   (const char *const *)tail, lens, got);
  for (size_t k = 0; k < ntail; k++)
    dlock__format_free(tail[k]);
  if (rc == 0 && wanted > 0) {
    dlock__sync_judge(s, got[0], wanted, out);
    /* The master moved while the write waited: it may have gone to the
     * old master, whose replicas acknowledge what they drop when they
     * follow the new one. */
    if (dlock__route_moved(r, gen)) {
      out->moved = 1;
      out->ok = 0;
    }
  }
  if (rc == 0 && wanted > 0)
    dlock__obs_synced(c, out);
  if (rc == 0 && refresh)
    (void)dlock__route_take_info(r, got[ntail - 1]);
  for (size_t k = 0; k < ntail; k++)
    if (got[k] != NULL)
      freeReplyObject(got[k]);
  /* A write that failed may be followed by a connection to another master
   * (a failover), and one that fell short by a replica gone: either way
   * the replicas are read again before the next write (with
   * DLOCK_SYNC_ANY, also after one that was synced by fewer than asked). */
  if (counted && (rc != 0 || !out->ok || out->acked < out->wanted))
    dlock__route_forget_replicas(r);
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
  dlock__route *r = &c->route;
  memset(sc, 0, sizeof(*sc));
  sc->gen = dlock__route_gen(r);
  /* The WAIT may take its whole timeout on top of the command's. */
  sc->deadline_us =
      dlock__deadline_ms(c->opt.command_timeout_ms + s->timeout_ms);
  int wanted = 0;
  if (s->on && s->fixed > 0) {
    wanted = s->fixed;
  } else if (s->on) {
    int rc = dlock__route_replicas_known(r, 1, call, &wanted);
    if (rc != 0)
      return rc;
  }
  if (wanted < 0) {
    /* The count is not known, and reading it first would hold the other
     * servers' sends for a server that does not answer: INFO rides after
     * the script instead, and the WAIT follows once it is read. */
    int len = dlock__route_format_info(r, &sc->wait_cmd);
    if (len < 0) {
      sc->wait_cmd = NULL;
      return dlock__fail(DLOCK_ENOMEM, "out of memory formatting INFO");
    }
    sc->wait_len = (size_t)len;
    sc->wanted = -1;
    dlock__eval_send_tail(r->conn, call, sc->deadline_us, 1, &sc->wait_cmd,
                          &sc->wait_len, p);
    return 0;
  }
  if (wanted == 0) {
    /* A send that fails says so in 'p', to the wait. */
    dlock__eval_send(r->conn, call, 0, p);
    return 0;
  }
  int len = dlock__sync_format_wait(c, wanted, &sc->wait_cmd);
  if (len < 0) {
    sc->wait_cmd = NULL;
    return dlock__fail(DLOCK_ENOMEM, "out of memory formatting WAIT");
  }
  sc->wait_len = (size_t)len;
  sc->wanted = wanted;
  dlock__eval_send_tail(r->conn, call, sc->deadline_us, 1, &sc->wait_cmd,
                        &sc->wait_len, p);
  return 0;
}

int dlock__eval_wait_synced_until(dlock_client_t *c, const dlock__eval *call,
                                  dlock__pending *p, dlock__sync_call *sc,
                                  redisReply **reply, int64_t until_us,
                                  dlock__synced *out) {
  dlock__sync *s = &c->sync;
  dlock__route *r = &c->route;
  out->ok = 1;
  out->acked = out->wanted = out->moved = 0;
  if (sc->wanted == 0 && sc->wait_cmd == NULL)
    return dlock__eval_wait_until(r->conn, call, p, reply, 0, until_us);
  redisReply *w = NULL;
  int rc = dlock__eval_wait_tail_until(r->conn, call, p, reply, sc->deadline_us,
                                       until_us, 1, &sc->wait_cmd,
                                       &sc->wait_len, &w);
  if (rc == DLOCK__CONN_AGAIN)
    return rc;
  if (rc == 0 && sc->wanted < 0) {
    /* 'w' is the INFO that rode after the script: the WAIT now, on the
     * same connection, after the write. */
    int n = dlock__route_take_info(r, w);
    freeReplyObject(w);
    w = NULL;
    sc->wanted = n > 0 ? n : 0;
    if (n > 0) {
      char *cmd;
      int len = dlock__sync_format_wait(c, n, &cmd);
      if (len < 0) {
        rc = dlock__fail(DLOCK_ENOMEM, "out of memory formatting WAIT");
      } else {
        size_t slen = (size_t)len;
        rc = dlock__conn_call(r->conn, 1, &cmd, &slen, &w, sc->deadline_us);
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
    dlock__sync_judge(s, w, sc->wanted, out);
    /* As in write_round: a master that moved meanwhile makes the
     * acknowledgements worthless. */
    if (dlock__route_moved(r, sc->gen)) {
      out->moved = 1;
      out->ok = 0;
    }
  }
  if (rc == 0)
    dlock__obs_synced(c, out);
  if (w != NULL)
    freeReplyObject(w);
  dlock__format_free(sc->wait_cmd);
  sc->wait_cmd = NULL;
  if (s->on && s->fixed == 0 &&
      (rc != 0 || !out->ok || out->acked < out->wanted))
    dlock__route_forget_replicas(r);
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
