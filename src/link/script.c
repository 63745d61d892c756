/*
 * Running the embedded scripts with EVALSHA, falling back to EVAL.
 */
#include "alloc.h"
#include "scripts.h"

#include "error.h"
#include "proto/format.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Formats one call as EVALSHA (or EVAL with the body when 'with_body'). */
int dlock__eval_format(const dlock__eval *e, int with_body, char **cmd,
                       size_t *len) {
  int argc = 3 + e->nkeys + e->nargs;
  const char *local_argv[16];
  size_t local_lens[16];
  const char **argv =
      argc <= 16 ? local_argv : dlock__malloc(argc * sizeof(*argv));
  size_t *lens = argc <= 16 ? local_lens : dlock__malloc(argc * sizeof(*lens));
  char nkeys[DLOCK__DEC_MAX];
  int rc = 0;
  if (argv == NULL || lens == NULL) {
    rc = dlock__fail(DLOCK_ENOMEM, "out of memory formatting a script call");
    goto out;
  }
  dlock__fmt_i64(nkeys, e->nkeys);
  argv[0] = with_body ? "EVAL" : "EVALSHA";
  lens[0] = strlen(argv[0]);
  argv[1] = with_body ? e->script->body : e->script->sha;
  lens[1] = with_body ? e->script->len : 40;
  argv[2] = nkeys;
  lens[2] = strlen(nkeys);
  memcpy(argv + 3, e->argv, (size_t)(argc - 3) * sizeof(*argv));
  memcpy(lens + 3, e->lens, (size_t)(argc - 3) * sizeof(*lens));
  int n = dlock__format_argv(cmd, argc, argv, lens);
  if (n < 0)
    rc = dlock__fail(DLOCK_ENOMEM, "out of memory formatting a script call");
  else
    *len = (size_t)n;
out:
  if (argv != local_argv)
    dlock__free((void *)argv);
  if (lens != local_lens)
    dlock__free(lens);
  return rc;
}

/* Whether 'r' says the server lacks the script, which the caller then
 * loads (counted in the connection's statistics). */
static int is_noscript(dlock__conn *conn, const redisReply *r) {
  int no = r != NULL && r->type == REDIS_REPLY_ERROR && r->len >= 8 &&
           memcmp(r->str, "NOSCRIPT", 8) == 0;
  if (no)
    dlock__stat(dlock__conn_stats(conn), DLOCK__ST_SCRIPT_RELOADS);
  return no;
}

/* Plain commands sent after the calls of every round, in the same
 * pipeline (replica sync's WAIT), and their replies from the last round. */
typedef struct tail_cmd {
  size_t n;
  const char *const *cmds;
  const size_t *lens;
  redisReply **replies;
} tail_cmd;

/* Sends the calls flagged in 'which' (all when NULL) in one round, then
 * 'tail' (if any). */
static int send_round(dlock__conn *conn, size_t n, const dlock__eval *calls,
                      const unsigned char *which, int with_body,
                      redisReply **replies, int64_t deadline_us,
                      int64_t idle_ms, tail_cmd *tail) {
  /* One call (the common case) needs no allocation for the bookkeeping. */
  char *cmd1[4];
  size_t len1[4], slot1[4];
  redisReply *got1[4];
  size_t ntail = tail != NULL ? tail->n : 0;
  int one = n == 1 && ntail <= 3;
  size_t room = n + ntail;
  char **cmds = one ? cmd1 : dlock__calloc(room, sizeof(*cmds));
  size_t *lens = one ? len1 : dlock__calloc(room, sizeof(*lens));
  redisReply **got = one ? got1 : dlock__calloc(room, sizeof(*got));
  size_t *slot = one ? slot1 : dlock__calloc(room, sizeof(*slot));
  size_t m = 0;
  int rc = 0;
  if (cmds == NULL || lens == NULL || got == NULL || slot == NULL)
    rc = dlock__fail(DLOCK_ENOMEM, "out of memory sending %zu scripts", n);
  for (size_t i = 0; i < n && rc == 0; i++) {
    if (which != NULL && !which[i])
      continue;
    rc = dlock__eval_format(&calls[i], with_body, &cmds[m], &lens[m]);
    /* A command that could not be formatted is not there to be freed. */
    if (rc == 0)
      slot[m++] = i;
  }
  /* The tail is the caller's text, sent as it is (not freed here). */
  size_t total = m;
  for (size_t k = 0; rc == 0 && k < ntail; k++) {
    cmds[total] = (char *)tail->cmds[k];
    lens[total++] = tail->lens[k];
  }
  if (rc == 0 && idle_ms > 0) {
    dlock__pending p;
    dlock__conn_send_paced(conn, total, cmds, lens, idle_ms, deadline_us, &p);
    rc = dlock__conn_wait(&p, got);
  } else if (rc == 0) {
    rc = dlock__conn_call(conn, total, cmds, lens, got, deadline_us);
  }
  for (size_t j = 0; j < m; j++) {
    if (rc == 0)
      replies[slot[j]] = got[j];
    dlock__format_free(cmds[j]);
  }
  for (size_t k = 0; rc == 0 && k < ntail; k++) {
    if (tail->replies[k] != NULL)
      freeReplyObject(tail->replies[k]);
    tail->replies[k] = got[m + k];
  }
  if (!one) {
    dlock__free(cmds);
    dlock__free(lens);
    dlock__free(got);
    dlock__free(slot);
  }
  return rc;
}

int dlock__redirect_kind(const redisReply *r) {
  if (r == NULL || r->type != REDIS_REPLY_ERROR)
    return 0;
  if (r->len > 6 && memcmp(r->str, "MOVED ", 6) == 0)
    return DLOCK__REDIRECT_MOVED;
  if (r->len > 4 && memcmp(r->str, "ASK ", 4) == 0)
    return DLOCK__REDIRECT_ASK;
  if ((r->len >= 8 && memcmp(r->str, "TRYAGAIN", 8) == 0) ||
      (r->len >= 11 && memcmp(r->str, "CLUSTERDOWN", 11) == 0))
    return DLOCK__REDIRECT_RETRY;
  return 0;
}

/* 'keep': a cluster's redirections and refusals (dlock__redirect_kind)
 * are left in 'replies' for the caller to act on, not turned into codes. */
static int eval_run(dlock__conn *conn, size_t n, const dlock__eval *calls,
                    redisReply **replies, int64_t deadline_us, int64_t idle_ms,
                    tail_cmd *tail, int keep) {
  memset(replies, 0, n * sizeof(*replies));
  int rc =
      send_round(conn, n, calls, NULL, 0, replies, deadline_us, idle_ms, tail);
  if (rc != 0)
    return rc;
  unsigned char *reload = NULL;
  for (size_t i = 0; i < n; i++) {
    if (!is_noscript(conn, replies[i]))
      continue;
    if (reload == NULL && (reload = dlock__calloc(n, 1)) == NULL) {
      rc = dlock__fail(DLOCK_ENOMEM, "out of memory reloading scripts");
      break;
    }
    reload[i] = 1;
    freeReplyObject(replies[i]);
    replies[i] = NULL;
  }
  /* The tail goes again after the scripts that run only now: a WAIT must
   * come after the writes it is to cover. */
  if (rc == 0 && reload != NULL)
    rc = send_round(conn, n, calls, reload, 1, replies, deadline_us, idle_ms,
                    tail);
  dlock__free(reload);
  for (size_t i = 0; i < n && rc == 0; i++) {
    if (replies[i] != NULL && replies[i]->type == REDIS_REPLY_ERROR &&
        !(keep && dlock__redirect_kind(replies[i]) != 0))
      rc = dlock__fail_reply_in(replies[i]->str, replies[i]->len,
                                calls[i].script->name);
  }
  if (rc != 0) {
    for (size_t i = 0; i < n; i++) {
      if (replies[i] != NULL)
        freeReplyObject(replies[i]);
      replies[i] = NULL;
    }
  }
  return rc;
}

int dlock__eval_run(dlock__conn *conn, size_t n, const dlock__eval *calls,
                    redisReply **replies, int64_t deadline_us) {
  return eval_run(conn, n, calls, replies, deadline_us, 0, NULL, 0);
}

int dlock__eval_run_paced(dlock__conn *conn, size_t n, const dlock__eval *calls,
                          redisReply **replies, int64_t idle_ms,
                          int64_t limit_us) {
  return eval_run(conn, n, calls, replies, limit_us, idle_ms > 0 ? idle_ms : 1,
                  NULL, 0);
}

int dlock__eval_run_tail(dlock__conn *conn, size_t n, const dlock__eval *calls,
                         redisReply **replies, int64_t deadline_us,
                         int64_t idle_ms, size_t ntail, const char *const *tail,
                         const size_t *tail_lens, redisReply **tail_replies,
                         int keep) {
  memset(tail_replies, 0, ntail * sizeof(*tail_replies));
  tail_cmd t = {ntail, tail, tail_lens, tail_replies};
  int rc = eval_run(conn, n, calls, replies, deadline_us, idle_ms,
                    ntail > 0 ? &t : NULL, keep);
  for (size_t k = 0; rc != 0 && k < ntail; k++) {
    if (tail_replies[k] != NULL)
      freeReplyObject(tail_replies[k]);
    tail_replies[k] = NULL;
  }
  return rc;
}

int dlock__eval_send(dlock__conn *conn, const dlock__eval *call,
                     int64_t deadline_us, dlock__pending *p) {
  char *cmd;
  size_t len;
  int rc = dlock__eval_format(call, 0, &cmd, &len);
  if (rc != 0) {
    memset(p, 0, sizeof(*p));
    p->rc = rc;
    return rc;
  }
  rc = dlock__conn_send(conn, 1, &cmd, &len, deadline_us, p);
  dlock__format_free(cmd);
  return rc;
}

int dlock__eval_wait(dlock__conn *conn, const dlock__eval *call,
                     dlock__pending *p, redisReply **reply,
                     int64_t deadline_us) {
  return dlock__eval_wait_until(conn, call, p, reply, deadline_us, INT64_MAX);
}

int dlock__eval_wait_until(dlock__conn *conn, const dlock__eval *call,
                           dlock__pending *p, redisReply **reply,
                           int64_t deadline_us, int64_t until_us) {
  *reply = NULL;
  int rc = dlock__conn_wait_until(p, reply, until_us);
  if (rc == DLOCK__CONN_AGAIN)
    return rc;
  if (rc == 0 && is_noscript(conn, *reply)) {
    freeReplyObject(*reply);
    *reply = NULL;
    return dlock__eval_run(conn, 1, call, reply, deadline_us);
  }
  if (rc == 0 && (*reply)->type == REDIS_REPLY_ERROR) {
    rc = dlock__fail_reply_in((*reply)->str, (*reply)->len, call->script->name);
    freeReplyObject(*reply);
    *reply = NULL;
  }
  return rc;
}

/* The tail of one call is short: replica sync sends WAIT and at most an
 * INFO after a script. */
#define TAIL_MAX 3

int dlock__eval_send_tail(dlock__conn *conn, const dlock__eval *call,
                          int64_t deadline_us, size_t ntail, char *const *tail,
                          const size_t *tail_lens, dlock__pending *p) {
  char *cmds[1 + TAIL_MAX];
  size_t lens[1 + TAIL_MAX];
  if (ntail > TAIL_MAX) {
    memset(p, 0, sizeof(*p));
    p->rc = dlock__fail(DLOCK_EINVAL, "too many commands after a script");
    return p->rc;
  }
  int rc = dlock__eval_format(call, 0, &cmds[0], &lens[0]);
  if (rc != 0) {
    memset(p, 0, sizeof(*p));
    p->rc = rc;
    return rc;
  }
  for (size_t k = 0; k < ntail; k++) {
    cmds[1 + k] = tail[k];
    lens[1 + k] = tail_lens[k];
  }
  rc = dlock__conn_send(conn, 1 + ntail, cmds, lens, deadline_us, p);
  dlock__format_free(cmds[0]);
  return rc;
}

int dlock__eval_wait_tail_until(dlock__conn *conn, const dlock__eval *call,
                                dlock__pending *p, redisReply **reply,
                                int64_t deadline_us, int64_t until_us,
                                size_t ntail, char *const *tail,
                                const size_t *tail_lens,
                                redisReply **tail_replies) {
  redisReply *got[1 + TAIL_MAX] = {NULL};
  *reply = NULL;
  memset(tail_replies, 0, ntail * sizeof(*tail_replies));
  int rc = dlock__conn_wait_until(p, got, until_us);
  if (rc == DLOCK__CONN_AGAIN)
    return rc;
  if (rc != 0)
    return rc;
  if (is_noscript(conn, got[0])) {
    for (size_t k = 0; k <= ntail; k++)
      if (got[k] != NULL)
        freeReplyObject(got[k]);
    return dlock__eval_run_tail(conn, 1, call, reply, deadline_us, 0, ntail,
                                (const char *const *)tail, tail_lens,
                                tail_replies, 0);
  }
  if (got[0]->type == REDIS_REPLY_ERROR) {
    rc = dlock__fail_reply_in(got[0]->str, got[0]->len, call->script->name);
    for (size_t k = 0; k <= ntail; k++)
      if (got[k] != NULL)
        freeReplyObject(got[k]);
    return rc;
  }
  *reply = got[0];
  for (size_t k = 0; k < ntail; k++)
    tail_replies[k] = got[1 + k];
  return 0;
}
