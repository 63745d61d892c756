/*
 * An async client's loop (see loop.h): the operations in progress and
 * their ready queue, and requests whose answer comes back to an operation,
 * sent on the link the routing names for their shard (topo/links.c) and
 * sent again where a redirection says. What the application watches is
 * loop_watch.c's.
 */
#include "loop.h"

#include "alloc.h"
#include "error.h"
#include "machine.h"
#include "monotime.h"
#include "proto/format.h"
#include "replica.h"

#include <poll.h>
#include <stdio.h>
#include <string.h>

int dlock__loop_new(dlock_client_t *c, const dlock__locator *locator,
                    void (*renew)(dlock__loop *lp), dlock__loop **out) {
  dlock__loop *lp = dlock__calloc(1, sizeof(*lp));
  if (lp == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory opening a client");
  lp->c = c;
  lp->fd[DLOCK__LOOP_SUB] = lp->fd[DLOCK__LOOP_WATCHER] = -1;
  /* The watcher's first step is due at once (it asks for nothing where
   * there is nothing to watch). */
  lp->watch = (dlock__watch_io){-1, 0, 0};
  lp->timer_at = INT64_MAX;
  lp->renew_at = INT64_MAX;
  lp->renew = renew;
  int rc = dlock__lsub_new(&c->ep, c->tls, locator, c->opt.connect_timeout_ms,
                           c->opt.command_timeout_ms, &lp->sub);
  if (rc != 0) {
    dlock__free(lp);
    return rc;
  }
  dlock__lsub_set_stats(lp->sub, c->stats);
  *out = lp;
  return 0;
}

/* ---- operations --------------------------------------------------------- */

void dlock__loop_add(dlock__loop *lp, dlock__aop *op) {
  op->lp = lp;
  op->at_us = INT64_MAX;
  op->next = NULL;
  op->prev = lp->ops_tail;
  if (lp->ops_tail != NULL)
    lp->ops_tail->next = op;
  else
    lp->ops = op;
  lp->ops_tail = op;
  lp->nops++;
}

static void unqueue(dlock__aop *op) {
  dlock__loop *lp = op->lp;
  if (!op->queued)
    return;
  dlock__aop *prev = NULL;
  for (dlock__aop *x = lp->ready; x != NULL; prev = x, x = x->rnext) {
    if (x != op)
      continue;
    if (prev != NULL)
      prev->rnext = op->rnext;
    else
      lp->ready = op->rnext;
    if (lp->ready_tail == op)
      lp->ready_tail = prev;
    break;
  }
  op->queued = 0;
  op->rnext = NULL;
}

static void drop_answers(dlock__aop *op);

static void drop_sent(dlock__aop *op) {
  for (int i = 0; i < op->nsent; i++)
    dlock__free(op->sent[i]);
  op->nsent = 0;
}

/* The requests of 'op' still in flight are forgotten by the links they
 * went to (any of them): 'op' is about to be freed. */
static void abandon_requests(dlock__aop *op) {
  dlock__route *r = &op->lp->c->route;
  for (int i = 0; i < dlock__route_nlinks(r); i++) {
    dlock__conn *link = dlock__route_link(r, i);
    if (link != NULL)
      dlock__conn_abandon(link, op);
  }
  op->in_flight = 0;
}

void dlock__loop_remove(dlock__aop *op) {
  dlock__loop *lp = op->lp;
  if (op->in_flight > 0)
    abandon_requests(op);
  unqueue(op);
  if (op->prev != NULL)
    op->prev->next = op->next;
  else
    lp->ops = op->next;
  if (op->next != NULL)
    op->next->prev = op->prev;
  else
    lp->ops_tail = op->prev;
  lp->nops--;
  drop_answers(op);
  drop_sent(op);
  if (op->kept != NULL)
    freeReplyObject(op->kept);
  op->kept = NULL;
}

void dlock__loop_ready(dlock__aop *op) {
  dlock__loop *lp = op->lp;
  if (op->queued)
    return;
  op->queued = 1;
  op->rnext = NULL;
  if (lp->ready_tail != NULL)
    lp->ready_tail->rnext = op;
  else
    lp->ready = op;
  lp->ready_tail = op;
}

/* ---- requests ----------------------------------------------------------- */

static void drop_answers(dlock__aop *op) {
  if (op->reply != NULL)
    freeReplyObject(op->reply);
  for (int i = 0; i < 2; i++) {
    if (op->tail[i] != NULL)
      freeReplyObject(op->tail[i]);
    op->tail[i] = NULL;
  }
  op->reply = NULL;
  op->nanswered = 0;
  op->err = 0;
}

/* A request's completion, inside the connection's service with its mutex
 * held: the answer is kept for the operation's step. A connection answers
 * in order, so the k-th completion is the k-th request's. */
static void on_answer(dlock__request *r, redisReply *reply, int err,
                      const char *detail) {
  dlock__aop *op = r->arg;
  if (op->skip > 0 && err == 0) {
    /* ASKING's answer, before the command it lets through. */
    op->skip--;
    if (reply != NULL)
      freeReplyObject(reply);
    if (--op->in_flight == 0)
      dlock__loop_ready(op);
    return;
  }
  int k = op->nanswered++;
  if (k == 0)
    op->reply = reply;
  else if (k <= 2)
    op->tail[k - 1] = reply;
  else if (reply != NULL)
    freeReplyObject(reply);
  if (err != 0 && op->err == 0) {
    op->err = err;
    snprintf(op->detail, sizeof(op->detail), "%s",
             detail != NULL ? detail : "");
  }
  if (--op->in_flight == 0)
    dlock__loop_ready(op);
}

/* ---- the links of the shards --------------------------------------------- */

/* A read of the slot map (where the deployment has one) by the loop, from
 * one link: its answer is applied to the map when it comes; requests
 * meanwhile go where the map said, and are redirected from there. */
#define MAP_EVERY_US 100000 /* at most once per 100 ms */

static void map_done(dlock__aop *op) {
  op->lp->mapping = 0;
  dlock__loop_remove(op);
  dlock__free(op);
}

static void map_run(dlock__aop *op) {
  dlock__loop *lp = op->lp;
  if (op->in_flight)
    return;
  if (op->err != 0 || op->reply == NULL ||
      dlock__route_take_map(&lp->c->route, op->slot, op->reply) != 0)
    lp->refresh_due = 1; /* another link is asked next time */
  map_done(op);
}

/* Sends a read of the map to the next link not waiting to reconnect,
 * unless one is in flight or was sent less than MAP_EVERY_US ago. */
static void read_map(dlock__loop *lp) {
  dlock__route *r = &lp->c->route;
  int64_t now = dlock__now_us();
  size_t len;
  const char *cmd = dlock__route_map_cmd(r, &len);
  if (cmd == NULL || lp->mapping || now - lp->mapped_us < MAP_EVERY_US ||
      dlock__loop_know_nodes(lp) != 0)
    return;
  int n = lp->nnodes, idx = -1;
  for (int k = 0; k < n && idx < 0; k++) {
    int i = (lp->map_next + k) % n;
    if (dlock__conn_retry_at(dlock__route_link(r, i)) <= now)
      idx = i;
  }
  if (idx < 0)
    return; /* every node waits to reconnect: asked again later */
  dlock__aop *op = dlock__calloc(1, sizeof(*op));
  if (op == NULL)
    return;
  op->run = map_run;
  op->cancel = map_done;
  op->slot = idx; /* the link asked */
  dlock__loop_add(lp, op);
  op->in_flight = 1;
  if (dlock__conn_submit(dlock__route_link(r, idx), cmd, len, 0, on_answer,
                         op) != 0) {
    op->in_flight = 0;
    lp->map_next = idx + 1;
    map_done(op);
    return;
  }
  lp->mapping = 1;
  lp->mapped_us = now;
  lp->map_next = idx + 1;
  lp->refresh_due = 0;
}

/* The link of the master of 'shard', as the map says: never waits. The
 * map is read again (by the loop, see read_map) when it does not say, when
 * a link failed since it was read, or when that master's link failed and
 * waits to connect again (it may have failed over); until the answer
 * comes, a shard with no known master goes to link 0 (a cluster's first
 * seed), whose MOVED names it. */
static int owner(dlock__loop *lp, int shard) {
  dlock__route *r = &lp->c->route;
  int idx = dlock__route_link_known(r, shard);
  if (idx < 0 ||
      dlock__conn_retry_at(dlock__route_link(r, idx)) > dlock__now_us())
    lp->refresh_due = 1;
  if (lp->refresh_due)
    read_map(lp);
  return idx >= 0 ? idx : 0;
}

/* ---- where waiters listen -------------------------------------------------
 */

static int send_all(dlock__aop *op, int n, char *const *cmds,
                    const size_t *lens);

static void probe_end(dlock__aop *op) {
  dlock__loop *lp = op->lp;
  lp->probed = 2;
  lp->probe_op = NULL;
  dlock__loop_remove(op);
  dlock__free(op);
}

static void probe_run(dlock__aop *op) {
  if (op->in_flight)
    return;
  /* Without an answer, classic pub/sub is kept, as at a blocking open. */
  dlock__route_take_probe(&op->lp->c->route, op->err == 0 ? op->reply : NULL,
                          op->err == 0 ? op->tail[0] : NULL);
  probe_end(op);
}

/* Finds out once whether the scripts publish with SPUBLISH (and waiters
 * listen with SSUBSCRIBE), as the blocking client does at its open,
 * where the routing has that to ask: a request of the loop to the link of
 * shard 0; the requests made meanwhile are held (see held_for_probe). */
static void probe(dlock__loop *lp) {
  if (lp->probed != 0)
    return;
  lp->probed = 2;
  char *cmds[2];
  size_t lens[2];
  int n = dlock__route_probe_cmds(&lp->c->route, cmds, lens);
  dlock__aop *op = n > 0 ? dlock__calloc(1, sizeof(*op)) : NULL;
  if (op == NULL)
    return; /* nothing to ask, or no memory to ask: classic */
  op->run = probe_run;
  op->cancel = probe_end;
  dlock__loop_add(lp, op);
  op->slot = 0;
  if (send_all(op, n, cmds, lens) != 0) {
    probe_end(op);
    return;
  }
  lp->probed = 1;
  lp->probe_op = op;
}

/*
 * Holds 'op' on the loop's timer for 'us', its answers dropped. The
 * requests held meanwhile share that time, and go again then in the order
 * of their operations, oldest first; a request for a slot that an older
 * one waits for waits with it (behind_held). Held each on a timer of its
 * own, a later request could overtake an earlier one to the same master,
 * such as an owner's next attempt overtaking the undo of its attempt that
 * got no answer (async_lock.c), which would then take back the new grant.
 */
static void hold(dlock__aop *op, int64_t us) {
  dlock__loop *lp = op->lp;
  int64_t now = dlock__now_us();
  drop_answers(op);
  op->in_flight = 0;
  op->skip = 0;
  if (lp->held_until <= now)
    lp->held_until = now + us;
  op->resend_at = lp->held_until;
  op->at_us = op->resend_at;
}

/* 1 when an operation older than 'op' is held with a request for the
 * same slot (for a master that is down, or refused with TRYAGAIN): 'op'
 * then waits with it, so as not to go ahead of it. Only while something
 * is held does this look at the other operations; requests for other
 * slots go on meanwhile. */
static int behind_held(dlock__aop *op) {
  dlock__loop *lp = op->lp;
  if (lp->held_until == 0)
    return 0; /* the usual case: nothing held, nothing to look at */
  int older = 1, held = 0;
  for (dlock__aop *o = lp->ops; o != NULL; o = o->next) {
    if (o == op) {
      older = 0;
      continue;
    }
    if (o->resend_at == 0)
      continue;
    held = 1;
    if (older && o->slot == op->slot) {
      /* Due now perhaps, but not run yet: 'op' goes after it all the
       * same, as the loop runs what is due oldest first. */
      hold(op, 0);
      return 1;
    }
  }
  if (!held)
    lp->held_until = 0;
  return 0;
}

/* 1 when 'op' is to wait for the pub/sub probe's answer (looking again
 * every 10 ms): a script's variant depends on it. */
static int held_for_probe(dlock__aop *op) {
  dlock__loop *lp = op->lp;
  probe(lp);
  if (lp->probed != 1 || op == lp->probe_op)
    return 0;
  hold(op, 10000);
  return 1;
}

dlock__lsub *dlock__loop_sub_for(dlock__loop *lp, const char *channel,
                                 size_t len) {
  dlock__route *r = &lp->c->route;
  probe(lp);
  if (!dlock__route_sharded(r))
    return lp->sub;
  int idx = owner(lp, dlock__route_shard(r, channel, len));
  if (idx < 0 || dlock__loop_know_nodes(lp) != 0)
    return lp->sub; /* heard by nobody: the waiter sleeps by the TTL */
  dlock__lnode *nd = &lp->nodes[idx];
  if (nd->sub == NULL) {
    dlock_client_t *c = lp->c;
    if (dlock__lsub_new(dlock__route_link_ep(r, idx), c->tls, NULL,
                        c->opt.connect_timeout_ms, c->opt.command_timeout_ms,
                        &nd->sub) != 0)
      return lp->sub;
    dlock__lsub_set_sharded(nd->sub);
  }
  return nd->sub;
}

/* ---- sending ------------------------------------------------------------ */

/* The link 'op's requests go to: that of the shard 'op->slot' ('ask'
 * >= 0: the link an ASK named; a request with no key, or on one server,
 * link 0). NULL with the error set. */
static dlock__conn *conn_for(dlock__aop *op, int ask, int *rc) {
  int idx = ask >= 0 ? ask : op->slot >= 0 ? owner(op->lp, op->slot) : 0;
  *rc = dlock__loop_know_nodes(op->lp);
  if (*rc != 0)
    return NULL;
  dlock__conn *link = dlock__route_link(&op->lp->c->route, idx);
  if (link == NULL)
    *rc = dlock__fail(DLOCK_EIO, "no connection to the node of slot %d",
                      op->slot);
  return link;
}

/* Keeps what is sent for a shard of its own, to send it again where a
 * redirection says: 0 or DLOCK_ENOMEM. */
static int keep_sent(dlock__aop *op, int n, char *const *cmds,
                     const size_t *lens) {
  if (op->slot < 0 || op->sent[0] == cmds[0])
    return 0;
  drop_sent(op);
  for (int i = 0; i < n; i++) {
    op->sent[i] = dlock__memdup(cmds[i], lens[i]);
    if (op->sent[i] == NULL) {
      drop_sent(op);
      return dlock__fail(DLOCK_ENOMEM, "out of memory keeping a request");
    }
    op->sent_len[i] = lens[i];
    op->nsent = i + 1;
  }
  return 0;
}

/* A request for a shard of its own (on a cluster) whose master's link
 * failed and waits to reconnect is held (on the loop's timer, looking
 * again every 20 ms) while the map is read again, since the master may
 * have failed over, for up to a command timeout: then it is sent, and
 * fails as on one server. 1 when 'op' is held. */
static int parked(dlock__aop *op, dlock__conn *conn) {
  int64_t now = dlock__now_us();
  if (dlock__conn_retry_at(conn) <= now)
    return 0;
  if (op->parked_us == 0)
    op->parked_us = now;
  if (now - op->parked_us >= dlock__ms_to_us(op->lp->c->opt.command_timeout_ms))
    return 0;
  hold(op, 20000);
  return 1;
}

/* Sends 'n' formatted commands (1..3) for 'op' in this order, after
 * ASKING when 'ask' (>= 0) names the node an ASK sent it to. 0, or an
 * error with nothing sent; when a later one cannot be sent, those sent
 * are answered and the answer carries the error. */
static int send_to(dlock__aop *op, int n, char *const *cmds, const size_t *lens,
                   int ask) {
  int rc;
  dlock__conn *conn = conn_for(op, ask, &rc);
  if (conn == NULL)
    return rc;
  rc = keep_sent(op, n, cmds, lens);
  if (rc != 0)
    return rc;
  if (held_for_probe(op) ||
      (ask < 0 && op->slot >= 0 && (behind_held(op) || parked(op, conn))))
    return 0;
  drop_answers(op);
  op->in_flight = 0;
  op->skip = 0;
  if (ask >= 0) {
    static const char asking[] = "*1\r\n$6\r\nASKING\r\n";
    rc = dlock__conn_submit(conn, asking, sizeof(asking) - 1, 0, on_answer, op);
    if (rc != 0)
      return rc;
    op->in_flight++;
    op->skip++;
  }
  for (int i = 0; i < n; i++) {
    op->in_flight++;
    int rc = dlock__conn_submit(conn, cmds[i], lens[i], 0, on_answer, op);
    if (rc == 0)
      continue;
    op->in_flight--;
    if (i == 0 && ask < 0)
      return rc;
    op->err = rc;
    snprintf(op->detail, sizeof(op->detail), "%s", dlock_last_error());
    break;
  }
  return 0;
}

static int send_all(dlock__aop *op, int n, char *const *cmds,
                    const size_t *lens) {
  op->redirects = 0;
  op->resend_at = 0;
  op->parked_us = 0;
  return send_to(op, n, cmds, lens, -1);
}

int dlock__loop_send(dlock__aop *op, const char *cmd, size_t len) {
  char *cmds[1] = {(char *)cmd};
  op->wanted = 0;
  op->wait_at = op->info_at = -1;
  op->slot = dlock__route_cmd_shard(&op->lp->c->route, cmd, len);
  return send_all(op, 1, cmds, &len);
}

/* ---- redirections -------------------------------------------------------- */

/* Redirections followed for one request before its answer is given as
 * it came: a slot moves once, and an ASK during a migration adds one. */
#define REDIRECTS_MAX 16

/* A request that could not be sent again: its failure 'rc' (with the
 * detail set) is its answer. */
static void answer_failure(dlock__aop *op, int rc) {
  drop_answers(op);
  op->err = rc;
  snprintf(op->detail, sizeof(op->detail), "%s", dlock_last_error());
  dlock__loop_ready(op);
}

/* Sends what 'op' sent again, to the link 'ask' (an ASK's) or to that of
 * the master of its slot; a failure to send is its answer. */
static void resend(dlock__aop *op, int ask) {
  char *cmds[3];
  size_t lens[3];
  int n = op->nsent;
  for (int i = 0; i < n; i++) {
    cmds[i] = op->sent[i];
    lens[i] = op->sent_len[i];
  }
  int rc = send_to(op, n, cmds, lens, ask);
  if (rc != 0)
    answer_failure(op, rc);
}

static int send_eval(dlock__aop *op, const dlock__eval *call, int with_body,
                     int synced);

/* Before 'op' runs: follows a MOVED or an ASK in its answer
 * by sending its requests again where it says, and waits out a TRYAGAIN or
 * a CLUSTERDOWN (refusals made before anything ran) before sending them
 * again, never waiting in the loop. 1 when 'op' is not to run now. */
static int redirected(dlock__aop *op) {
  if (op->resend_at != 0) {
    if (dlock__now_us() < op->resend_at) {
      op->at_us = op->resend_at;
      return 1;
    }
    op->resend_at = 0;
    const dlock__eval *call = op->eval_call;
    op->eval_call = NULL;
    int rc = 0;
    if (call == NULL)
      resend(op, -1);
    else if ((rc = send_eval(op, call, op->eval_body, op->eval_synced)) != 0)
      answer_failure(op, rc);
    return 1;
  }
  if (op->err != 0 && (op->err == DLOCK_EIO || op->err == DLOCK_ETIMEDOUT))
    op->lp->refresh_due = 1; /* a master may have failed over */
  if (op->nsent == 0 || op->in_flight > 0 || op->err != 0 ||
      op->redirects >= REDIRECTS_MAX)
    return 0;
  int kind = dlock__redirect_kind(op->reply);
  if (kind == 0)
    return 0;
  op->redirects++;
  if (kind == DLOCK__REDIRECT_RETRY) {
    /* 10 ms, doubled at each refusal, at most a second. */
    int shift = op->redirects < 7 ? op->redirects : 7;
    op->resend_at = dlock__now_us() + (10000 << shift) / 2;
    op->at_us = op->resend_at;
    /* Later requests for its slot wait for it (behind_held). */
    if (op->lp->held_until < op->resend_at)
      op->lp->held_until = op->resend_at;
    drop_answers(op);
    return 1;
  }
  int idx = dlock__route_follow(&op->lp->c->route, op->reply);
  if (idx < 0)
    return 0;
  resend(op, kind == DLOCK__REDIRECT_ASK ? idx : -1);
  return 1;
}

/* The replicas a synced write of 'call' waits for: as many as asked, or
 * as counted (-1: not known yet, an INFO is to ride after it). */
static int replicas_wanted(dlock_client_t *c, const dlock__eval *call) {
  if (!c->sync.on)
    return 0;
  if (c->sync.fixed > 0)
    return c->sync.fixed;
  int n = -1;
  if (dlock__route_replicas_known(&c->route, 1, call, &n) != 0)
    n = -1;
  return n;
}

static int send_eval(dlock__aop *op, const dlock__eval *call, int with_body,
                     int synced) {
  dlock_client_t *c = op->lp->c;
  char *cmds[3];
  size_t lens[3];
  /* To the master of its key's shard, publishing where its waiters listen
   * (formatted once that is known). */
  op->redirects = 0;
  op->parked_us = 0;
  op->eval_call = NULL;
  if (held_for_probe(op)) {
    op->eval_call = call;
    op->eval_body = with_body;
    op->eval_synced = synced;
    return 0;
  }
  dlock__eval routed = *call;
  routed.script = dlock__route_script(&c->route, call->script);
  op->slot = call->nkeys > 0
                 ? dlock__route_shard(&c->route, call->argv[0], call->lens[0])
                 : -1;
  call = &routed;
  int n = 0, rc = dlock__eval_format(call, with_body, &cmds[0], &lens[0]);
  if (rc != 0)
    return rc;
  n = 1;
  op->wanted = synced ? replicas_wanted(c, call) : 0;
  op->wait_at = op->info_at = -1;
  int len;
  if (op->wanted > 0 &&
      (len = dlock__sync_format_wait(c, op->wanted, &cmds[n])) >= 0) {
    lens[n] = (size_t)len;
    op->wait_at = n++ - 1;
  }
  /* Counted for the first time, or again once a second. */
  if (synced && c->sync.on && c->sync.fixed == 0 &&
      (op->wanted < 0 || dlock__route_refresh(&c->route, 0) == 1) &&
      (len = dlock__route_format_info(&c->route, &cmds[n])) >= 0) {
    lens[n] = (size_t)len;
    op->info_at = n++ - 1;
  }
  if (op->wanted < 0 && op->info_at < 0)
    op->wanted = 0; /* out of memory for the INFO: not synced */
  rc = send_all(op, n, cmds, lens);
  dlock__format_free(cmds[0]);
  for (int i = 1; i < n; i++)
    dlock__format_free(cmds[i]);
  return rc;
}

int dlock__loop_eval(dlock__aop *op, const dlock__eval *call) {
  return send_eval(op, call, 0, 1);
}

int dlock__loop_eval_plain(dlock__aop *op, const dlock__eval *call) {
  return send_eval(op, call, 0, 0);
}

static int is_noscript(const redisReply *r) {
  return r != NULL && r->type == REDIS_REPLY_ERROR && r->len >= 8 &&
         memcmp(r->str, "NOSCRIPT", 8) == 0;
}

/* What the WAIT reply 'w' says of a write that waited for 'wanted'. */
static void apply_wait(dlock__aop *op, const redisReply *w, dlock__synced *sy) {
  dlock_client_t *c = op->lp->c;
  if (op->wanted <= 0)
    return;
  dlock__sync_judge(&c->sync, w, op->wanted, sy);
  /* A replica gone: counted again before the next write. */
  if ((!sy->ok || sy->acked < sy->wanted) && c->sync.fixed == 0)
    dlock__route_forget_replicas(&c->route);
}

int dlock__loop_eval_answer(dlock__aop *op, const dlock__eval *call,
                            redisReply **reply, dlock__synced *sy) {
  dlock__synced ignored;
  if (sy == NULL)
    sy = &ignored;
  memset(sy, 0, sizeof(*sy));
  sy->ok = 1;
  *reply = NULL;
  if (op->err != 0) {
    int err = op->err;
    if (op->kept != NULL)
      freeReplyObject(op->kept);
    op->kept = NULL;
    drop_answers(op);
    /* Perhaps another master after a reconnect: counted again. */
    if (op->lp->c->sync.fixed == 0)
      dlock__route_forget_replicas(&op->lp->c->route);
    return dlock__fail(err, "%s", op->detail);
  }
  redisReply *r = op->reply;
  op->reply = NULL;
  if (op->kept != NULL) {
    /* The WAIT sent once the replicas were counted. */
    apply_wait(op, r, sy);
    freeReplyObject(r);
    *reply = op->kept;
    op->kept = NULL;
    return 0;
  }
  if (is_noscript(r)) {
    /* Not loaded (a restart, SCRIPT FLUSH): sent again with its body,
     * which loads it for the next EVALSHA, with the same tail. */
    freeReplyObject(r);
    int rc = send_eval(op, call, 1, op->wait_at >= 0 || op->info_at >= 0);
    return rc != 0 ? rc : DLOCK__ACQ_INFLIGHT;
  }
  if (r != NULL && r->type == REDIS_REPLY_ERROR) {
    int rc = dlock__fail_reply_in(r->str, r->len, call->script->name);
    freeReplyObject(r);
    drop_answers(op);
    return rc;
  }
  int counted = -1;
  if (op->info_at >= 0)
    counted = dlock__route_take_shard_info(&op->lp->c->route, op->slot,
                                           op->tail[op->info_at]);
  if (op->wanted < 0 && counted > 0) {
    /* Counted only now: the WAIT goes after the write, on the same
     * connection. */
    char *cmd;
    int len = dlock__sync_format_wait(op->lp->c, counted, &cmd);
    drop_answers(op);
    if (len < 0) {
      freeReplyObject(r);
      return dlock__fail(DLOCK_ENOMEM, "out of memory formatting WAIT");
    }
    op->kept = r;
    /* On the same node as the write (op->slot is kept). */
    size_t wlen = (size_t)len;
    op->wait_at = op->info_at = -1;
    int rc = send_all(op, 1, &cmd, &wlen);
    dlock__format_free(cmd);
    op->wanted = counted;
    if (rc != 0) {
      op->kept = NULL;
      freeReplyObject(r);
      return rc;
    }
    return DLOCK__ACQ_INFLIGHT;
  }
  if (op->wait_at >= 0)
    apply_wait(op, op->tail[op->wait_at], sy);
  drop_answers(op);
  *reply = r;
  return 0;
}

int dlock__loop_attach(dlock__loop *lp, dlock_socket_cb on_socket,
                       dlock_timer_cb on_timer, void *data) {
  if (lp->attached)
    return dlock__fail(DLOCK_EINVAL, "the client is attached to a loop");
  lp->on_socket = on_socket;
  lp->on_timer = on_timer;
  lp->data = data;
  lp->attached = 1;
  lp->timer_at = INT64_MIN; /* tell it, whatever it is */
  dlock__loop_update_watch(lp);
  return 0;
}

/* Makes the operations whose time came ready. */
static void ready_timers(dlock__loop *lp) {
  int64_t now = dlock__now_us();
  for (dlock__aop *op = lp->ops; op != NULL; op = op->next) {
    if (op->at_us <= now) {
      op->at_us = INT64_MAX;
      dlock__loop_ready(op);
    }
  }
}

/* Runs the ready operations, and those that their steps make ready. */
static void run_ready(dlock__loop *lp) {
  while (lp->ready != NULL && !lp->closing) {
    dlock__aop *op = lp->ready;
    lp->ready = op->rnext;
    if (lp->ready == NULL)
      lp->ready_tail = NULL;
    op->queued = 0;
    op->rnext = NULL;
    if (redirected(op))
      continue;
    op->run(op);
  }
}

void dlock__loop_action(dlock__loop *lp, int fd, int events) {
  /* The application's timer ran out and is gone: it is told the next
   * one whatever it is, also when its clock ran a little ahead of ours. */
  if (fd == DLOCK_SOCKET_TIMEOUT)
    lp->timer_at = INT64_MIN;
  /* A callback that calls back in (dlock_loop_action from inside a
   * callback) finds its work done by the outer call. */
  if (lp->dispatching)
    return;
  lp->dispatching = 1;
  /* Both connections are serviced whatever the descriptor: servicing
   * one that has nothing to do costs a look at its state only. */
  int watcher = fd >= 0 && fd == lp->fd[DLOCK__LOOP_WATCHER];
  if (watcher || dlock__now_us() >= lp->watch.until_us) {
    short revents = watcher ? (short)(((events & DLOCK_POLL_IN) ? POLLIN : 0) |
                                      ((events & DLOCK_POLL_OUT) ? POLLOUT : 0))
                            : 0;
    dlock__route_watch_step(&lp->c->route, revents, &lp->watch);
    lp->watch_steps++;
  }
  dlock__loop_service(lp);
  ready_timers(lp);
  if (dlock__now_us() >= lp->renew_at)
    lp->renew(lp);
  run_ready(lp);
  lp->dispatching = 0;
  if (!lp->closing)
    dlock__loop_update_watch(lp);
}

void dlock__loop_poke(dlock__loop *lp) {
  if (!lp->dispatching)
    dlock__loop_update_watch(lp);
}

/* ---- closing ------------------------------------------------------------ */

/* Whether an answer still on its way may have granted something. */
static int awaits_grants(const dlock__loop *lp) {
  for (const dlock__aop *op = lp->ops; op != NULL; op = op->next)
    if (op->in_flight > 0 && !op->grants_nothing)
      return 1;
  return 0;
}

void dlock__loop_cancel_all(dlock__loop *lp) {
  if (lp->closing)
    return;
  lp->closing = 1;
  dlock__loop_unwatch(lp);
  /* The answers already on their way come in first, so that what they
   * granted is given back: bounded by the command timeout. Plain commands
   * alone are not worth that wait. */
  dlock_client_t *c = lp->c;
  if (awaits_grants(lp)) {
    int64_t until = dlock__deadline_ms(c->opt.command_timeout_ms);
    for (int i = 0; i < dlock__route_nlinks(&c->route); i++) {
      dlock__conn *link = dlock__route_link(&c->route, i);
      if (link != NULL)
        (void)dlock__conn_pump(link, until);
    }
  }
  /* Each cancel takes its operation out (and may add none: the verbs
   * refuse a closing client); the oldest ends first, as it would have. */
  while (lp->ops != NULL)
    lp->ops->cancel(lp->ops);
}

void dlock__loop_free(dlock__loop *lp) {
  if (lp == NULL)
    return;
  dlock__loop_cancel_all(lp);
  /* Last: whatever the loop keeps for the client can go. */
  if (lp->attached)
    lp->on_socket(lp->c, -1, DLOCK_POLL_REMOVE, lp->data);
  dlock__route_watch_end(&lp->c->route);
  dlock__lsub_free(lp->sub);
  for (int i = 0; i < lp->nnodes; i++)
    dlock__lsub_free(lp->nodes[i].sub);
  dlock__free(lp->nodes);
  dlock__free(lp);
}

void dlock__loop_watch_holds(dlock__loop *lp) {
  if (lp->renew_at == INT64_MAX)
    lp->renew_at =
        dlock__after_ms(dlock__now_us(), lp->c->opt.watchdog_timeout_ms / 3);
}
