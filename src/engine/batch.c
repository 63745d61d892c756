/*
 * The parallel per-server rounds of a MultiLock: one attempt on every part,
 * or one release of every part, with the calls bound for one connection
 * sent in one pipeline and every connection's pipeline sent before any
 * reply is awaited.
 */
#include "alloc.h"
#include "composite.h"

#include "error.h"
#include "monotime.h"
#include "proto/format.h"

#include <stdio.h>
#include <string.h>

/* ---- parts sent at once ------------------------------------------------- */

/*
 * A script call per part, sent to every server at once: the calls bound
 * for one connection (one server, or one master of a cluster) travel in
 * one pipeline, followed by one WAIT when the client syncs with replicas,
 * and every connection's pipeline is sent before any reply is awaited. A
 * part whose call did not run there (NOSCRIPT, a cluster's MOVED, ASK,
 * TRYAGAIN or CLUSTERDOWN, any other error reply, a master that cannot be
 * found, a replica count not known yet or due to be read again) is
 * marked BATCH_ALONE, for the ordinary path of that part, which knows how
 * to deal with all of these: the parallel path is only ever a shortcut.
 */
#define BATCH_ALONE 2

/* A part's call goes in parallel when its script is known here (reentrant
 * and spin locks). */
static int batch_kind(const dlock_t *sub) {
  return sub->kind->id == DLOCK_REENTRANT || sub->kind->id == DLOCK_SPIN;
}

/* The connection the call of a part goes to, with the script variant that
 * publishes where that deployment's waiters listen; NULL when its master
 * is not known. */
static dlock__conn *batch_conn(dlock_t *sub, dlock__eval *call) {
  dlock__route *r = &sub->c->route;
  call->script = dlock__route_script(r, call->script);
  int rc;
  dlock__conn *conn =
      dlock__route_conn_for_key(r, call->argv[0], call->lens[0], &rc);
  /* The ordinary path says why it cannot be found. */
  return conn;
}

/* The replicas the WAIT of a group of 'm' calls on 'c' asks for: 0 for no
 * WAIT, or -1 when the ordinary path must read them first. Through
 * Sentinel, '*gen' is the generation of the master before the count, as
 * for any synced write (sync.h). */
static int batch_wanted(dlock_client_t *c, size_t m, const dlock__eval *calls,
                        unsigned *gen, int *refresh) {
  dlock__sync *s = &c->sync;
  if (!s->on)
    return 0;
  *gen = dlock__route_gen(&c->route);
  if (s->fixed > 0)
    return s->fixed;
  /* The write that claims the once-a-second refresh has the INFO ride
   * along (one per period, whichever thread claims it, as in sync.c); on a
   * cluster a group due for it takes the ordinary path, whose writes read
   * each master's. */
  int due = dlock__route_refresh(&c->route, 1);
  if (due < 0)
    return -1;
  *refresh = due;
  /* Through Sentinel, what the Sentinels see, read again when the master
   * moved. */
  int n;
  if (dlock__route_replicas_known(&c->route, m, calls, &n) != 0)
    return -1;
  return n;
}

/* 1 when two parts are the same lock of one client (a name given twice):
 * the scripts set a hold count from the one the client believes, so the
 * second call must follow the first one's answer, and such a MultiLock
 * takes its parts one after the other. */
static int repeated_part(const dlock_t *l) {
  for (size_t i = 0; i < l->nsubs; i++)
    for (size_t j = i + 1; j < l->nsubs; j++)
      if (l->subs[i]->c == l->subs[j]->c &&
          l->subs[i]->len == l->subs[j]->len &&
          memcmp(l->subs[i]->name, l->subs[j]->name, l->subs[i]->len) == 0)
        return 1;
  return 0;
}

typedef struct batch {
  size_t n;
  dlock_t **subs;     /* the parts */
  dlock__eval *calls; /* per part; script NULL: not in the batch */
  dlock__conn **conn; /* per part */
  redisReply **reply; /* per part, once answered */
  int *rc;            /* per part: 0 (reply), BATCH_ALONE or an error */
  dlock__synced *sy;  /* per part: what its group's WAIT found */
  /* Per part: done unlock latches that its call deletes on the way. */
  dlock__latch_call *lc;
  int64_t sent_us;
  int why_rc; /* the first connection's failure, and its detail */
  char why[300];
} batch;

static void batch_free(batch *b) {
  for (size_t i = 0; b->reply != NULL && i < b->n; i++)
    if (b->reply[i] != NULL)
      freeReplyObject(b->reply[i]);
  for (size_t i = 0; b->lc != NULL && i < b->n; i++)
    dlock__latch_call_end(&b->lc[i]);
  dlock__free(b->lc);
  dlock__free(b->calls);
  dlock__free(b->conn);
  dlock__free(b->reply);
  dlock__free(b->rc);
  dlock__free(b->sy);
}

static int batch_init(batch *b, dlock_t *l) {
  size_t n = l->nsubs;
  memset(b, 0, sizeof(*b));
  b->n = n;
  b->subs = l->subs;
  b->calls = dlock__calloc(n, sizeof(*b->calls));
  b->conn = dlock__calloc(n, sizeof(*b->conn));
  b->reply = dlock__calloc(n, sizeof(*b->reply));
  b->rc = dlock__calloc(n, sizeof(*b->rc));
  b->sy = dlock__calloc(n, sizeof(*b->sy));
  b->lc = dlock__calloc(n, sizeof(*b->lc));
  if (b->calls == NULL || b->conn == NULL || b->reply == NULL ||
      b->rc == NULL || b->sy == NULL || b->lc == NULL) {
    batch_free(b);
    return DLOCK_ENOMEM;
  }
  for (size_t i = 0; i < n; i++)
    b->rc[i] = BATCH_ALONE;
  return 0;
}

/* Puts part i's call in the batch, with the done latches of its client
 * (and slot) riding along, and finds its connection. */
static void batch_add(batch *b, size_t i, const dlock__eval *call) {
  dlock_t *sub = b->subs[i];
  b->calls[i] = *dlock__with_done_latches(sub->c, call, &b->lc[i]);
  if ((b->conn[i] = batch_conn(sub, &b->calls[i])) == NULL)
    b->calls[i].script = NULL;
}

/* One connection's share of a batch. */
typedef struct batch_group {
  dlock__conn *conn;
  dlock_client_t *c;
  size_t m;      /* calls */
  size_t *which; /* their parts */
  int wanted;    /* the WAIT's count, 0: none */
  unsigned gen;  /* through Sentinel: the master's generation before it */
  int refresh;   /* an INFO replication rides last */
  unsigned sent;
  redisReply **got; /* room for the replies, the WAIT's last */
  dlock__pending p;
} batch_group;

/* Sends one group's calls (and WAIT) in one pipeline. 0 when sent (to be
 * waited for), else its parts stay BATCH_ALONE. */
static int group_send(batch *b, batch_group *g) {
  dlock__eval *calls = dlock__calloc(g->m, sizeof(*calls));
  char **cmds = dlock__calloc(g->m + 2, sizeof(*cmds));
  size_t *lens = dlock__calloc(g->m + 2, sizeof(*lens));
  size_t k = 0;
  int rc = calls != NULL && cmds != NULL && lens != NULL ? 0 : DLOCK_ENOMEM;
  for (size_t j = 0; rc == 0 && j < g->m; j++)
    calls[j] = b->calls[g->which[j]];
  if (rc == 0)
    g->wanted = batch_wanted(g->c, g->m, calls, &g->gen, &g->refresh);
  if (g->wanted < 0)
    rc = BATCH_ALONE;
  for (; rc == 0 && k < g->m; k++)
    if ((rc = dlock__eval_format(&calls[k], 0, &cmds[k], &lens[k])) != 0)
      break;
  size_t total = k;
  if (rc == 0 && g->wanted > 0) {
    /* The same WAIT (or WAITAOF) as any synced write's. */
    int len = dlock__sync_format_wait(g->c, g->wanted, &cmds[total]);
    if (len < 0)
      rc = DLOCK_ENOMEM;
    else
      lens[total++] = (size_t)len;
  }
  if (rc == 0 && g->refresh) {
    int len = dlock__route_format_info(&g->c->route, &cmds[total]);
    if (len < 0)
      rc = DLOCK_ENOMEM;
    else
      lens[total++] = (size_t)len;
  }
  if (rc == 0 && (g->got = dlock__calloc(total, sizeof(*g->got))) == NULL)
    rc = DLOCK_ENOMEM;
  if (rc == 0) {
    /* The WAIT may take its whole timeout on top of the command's. */
    int64_t deadline =
        dlock__deadline_ms(g->c->opt.command_timeout_ms +
                           (g->wanted > 0 ? g->c->sync.timeout_ms : 0));
    dlock__conn_send(g->conn, total, cmds, lens, deadline, &g->p);
    g->sent = 1;
  }
  for (size_t j = 0; cmds != NULL && j < total; j++)
    dlock__format_free(cmds[j]);
  dlock__free(calls);
  dlock__free((void *)cmds);
  dlock__free(lens);
  return g->sent ? 0 : -1;
}

/* Takes one group's replies into the batch. */
static void group_collect(batch *b, batch_group *g) {
  redisReply **got = g->got;
  int rc = dlock__conn_wait(&g->p, got);
  if (rc != 0 && b->why_rc == 0) {
    b->why_rc = rc;
    snprintf(b->why, sizeof(b->why), "%s", dlock_last_error());
  }
  /* A master that failed may have failed over: the routing is read again
   * before the next call, as after any call that failed there. */
  dlock__route_failed(&g->c->route, rc);
  dlock__synced sy = {1, 0, 0, 0};
  if (rc == 0 && g->wanted > 0) {
    /* Judged as any synced write is (all replicas, or with
     * DLOCK_SYNC_ANY one). */
    dlock__sync_judge(&g->c->sync, got[g->m], g->wanted, &sy);
    /* The master moved while the write waited: the replicas that
     * acknowledged it may drop it as they follow the new one. */
    if (dlock__route_moved(&g->c->route, g->gen)) {
      sy.moved = 1;
      sy.ok = 0;
    }
  }
  dlock__sync *s = &g->c->sync;
  if (s->on && s->fixed == 0 && (rc != 0 || !sy.ok || sy.acked < sy.wanted)) {
    /* As after any write that failed or fell short (with DLOCK_SYNC_ANY,
     * synced by fewer than asked): the replicas are read again before the
     * next. */
    dlock__route_forget_replicas(&g->c->route);
  }
  for (size_t j = 0; j < g->m; j++) {
    size_t i = g->which[j];
    redisReply *r = rc == 0 ? got[j] : NULL;
    if (rc != 0) {
      b->rc[i] = rc;
    } else if (r == NULL || r->type == REDIS_REPLY_ERROR) {
      /* Not run, or refused: the ordinary path does it again, or says
       * why not. */
      b->rc[i] = BATCH_ALONE;
      if (r != NULL)
        freeReplyObject(r);
    } else {
      b->rc[i] = 0;
      b->reply[i] = r;
      b->sy[i] = sy;
    }
  }
  if (rc == 0 && g->wanted > 0 && got[g->m] != NULL)
    freeReplyObject(got[g->m]);
  if (rc == 0 && g->refresh) {
    redisReply *info = got[g->m + (g->wanted > 0)];
    (void)dlock__route_take_info(&g->c->route, info);
    if (info != NULL)
      freeReplyObject(info);
  }
  dlock__free(got);
  g->got = NULL;
}

/* Takes every sent group's replies as they come, whichever server
 * answers first, all waited for at once. */
static void collect_all(batch *b, batch_group *g, size_t ng) {
  dlock__pending **ps = dlock__calloc(ng, sizeof(*ps));
  size_t left = 0;
  for (size_t k = 0; k < ng; k++) {
    if (!g[k].sent)
      continue;
    if (ps == NULL) {
      /* Out of memory for the wait: one group after the other. */
      group_collect(b, &g[k]);
      continue;
    }
    ps[k] = &g[k].p;
    left++;
  }
  /* Each group gives up at its own deadline: one always ends. The last
   * (the only one, on one server) is waited for as a single call is. */
  while (left > 1) {
    int k = dlock__conn_wait_any(ps, ng, INT64_MAX);
    if (k < 0)
      break;
    group_collect(b, &g[k]);
    ps[k] = NULL;
    left--;
  }
  for (size_t k = 0; ps != NULL && k < ng; k++)
    if (ps[k] != NULL)
      group_collect(b, &g[k]);
  dlock__free(ps);
}

/*
 * Sends the calls of the batch (those with a script), every connection's
 * at once, and collects the replies; 'between' runs after the sends and
 * before the waits (the parts of other kinds, one after the other, while
 * the replies come).
 */
static void batch_run(batch *b, void (*between)(void *), void *arg) {
  size_t n = b->n, ng = 0;
  batch_group *g = dlock__calloc(n, sizeof(*g));
  size_t *which = dlock__calloc(n, sizeof(*which));
  unsigned char *done = dlock__calloc(n, 1);
  if (g == NULL || which == NULL || done == NULL) {
    /* Every part goes the ordinary way. */
    dlock__free(g);
    dlock__free(which);
    dlock__free(done);
    if (between != NULL)
      between(arg);
    return;
  }
  /* The groups, in the order of their first part; 'which' holds the
   * parts of each group one after the other. */
  size_t used = 0;
  for (size_t i = 0; i < n; i++) {
    if (b->calls[i].script == NULL || done[i])
      continue;
    if (b->conn[i] == NULL)
      continue;
    batch_group *gr = &g[ng++];
    gr->conn = b->conn[i];
    gr->c = b->subs[i]->c;
    gr->which = &which[used];
    for (size_t j = i; j < n; j++) {
      if (b->calls[j].script == NULL || done[j] || b->conn[j] != gr->conn)
        continue;
      done[j] = 1;
      gr->which[gr->m++] = j;
    }
    used += gr->m;
  }
  b->sent_us = dlock__now_us();
  dlock__free(done);
  for (size_t k = 0; k < ng; k++)
    group_send(b, &g[k]);
  if (between != NULL)
    between(arg);
  collect_all(b, g, ng);
  dlock__free(g);
  dlock__free(which);
}

/* The parts of other kinds, and those of the batch's kinds that could not
 * join it, released one after the other while the batch's replies come. */
typedef struct release_alone {
  dlock_t *l;
  uint64_t owner;
  int *state;
} release_alone;

#define PART_ALONE BATCH_ALONE
#define PART_SENT 3
#define PART_NOT_ASKED 4

static void release_alone_parts(void *arg) {
  release_alone *a = arg;
  for (size_t i = 0; i < a->l->nsubs; i++)
    if (a->state[i] == PART_ALONE)
      a->state[i] = dlock_unlock_as(a->l->subs[i], a->owner);
}

/* Releases the parts marked in 'which' (all when NULL), every server's at
 * once, each part's outcome in 'state' (as dlock_unlock_as's, or
 * PART_NOT_ASKED). */
void dlock__release_each(dlock_t *l, uint64_t owner, const unsigned char *which,
                         int *state) {
  size_t n = l->nsubs;
  batch b;
  dlock__release *rel = dlock__calloc(n, sizeof(*rel));
  dlock__call *args = dlock__calloc(n, sizeof(*args));
  int ok = rel != NULL && args != NULL && !repeated_part(l) &&
           batch_init(&b, l) == 0;
  for (size_t i = 0; i < n; i++) {
    state[i] = which != NULL && !which[i] ? PART_NOT_ASKED : PART_ALONE;
    dlock_t *sub = l->subs[i];
    if (!ok || state[i] != PART_ALONE || !batch_kind(sub) ||
        dlock__check_handle(sub) != 0)
      continue;
    int rc = dlock__release_begin(sub, owner, &rel[i]);
    if (rc != 0) {
      dlock__release_end(&rel[i]);
      state[i] = rc;
      continue;
    }
    /* A last hold handed to a thread of this client waiting for it goes
     * there, as on the ordinary path. */
    if ((rc = dlock__handover_release(sub, owner, &rel[i])) != 1) {
      state[i] = rc;
      continue;
    }
    dlock__reentrant_release_call(sub, owner, &rel[i], &args[i]);
    batch_add(&b, i, &args[i].eval);
    state[i] = PART_SENT;
  }
  release_alone a = {l, owner, state};
  if (!ok) {
    /* Out of memory for the batch: every part the ordinary way, so that
     * none is left behind. */
    release_alone_parts(&a);
    dlock__free(rel);
    dlock__free(args);
    return;
  }
  batch_run(&b, release_alone_parts, &a);
  for (size_t i = 0; i < n; i++) {
    if (state[i] != PART_SENT)
      continue;
    dlock_t *sub = l->subs[i];
    if (b.rc[i] == 0) {
      /* Answered, and sent once: no copy of it can run any more, so its
       * latch goes with a later call (see release.c). */
      if (rel[i].latch != NULL) {
        dlock__latch_done(sub->c, rel[i].latch, rel[i].latch_len);
        rel[i].latch = NULL;
      }
      state[i] = dlock__finish_release(sub, owner, b.reply[i], &rel[i]);
      b.reply[i] = NULL;
      dlock__release_end(&rel[i]);
    } else {
      /* Not run, refused, or no answer: the ordinary path sends it again
       * with the same latch, which makes a copy that ran already answer
       * as it did. */
      state[i] = dlock__release_run(sub, owner, &rel[i], &args[i].eval);
    }
  }
  batch_free(&b);
  dlock__free(rel);
  dlock__free(args);
}

/* The sequential attempt: each part in turn until one fails. */
static int attempt_in_turn(dlock_t *l, uint64_t owner, int64_t lease_ms,
                           unsigned char *held, size_t *busy) {
  int rc = 0;
  for (size_t i = 0; i < l->nsubs && rc == 0; i++) {
    if (held[i])
      continue;
    rc = dlock_trylock_as(l->subs[i], owner, 0, lease_ms);
    if (rc == 0)
      held[i] = 1;
    else
      *busy = i;
  }
  return rc;
}

/* One attempt on every part not held yet (composite.h). */
int dlock__attempt_all(dlock_t *l, uint64_t owner, int64_t lease_ms,
                       unsigned char *held, size_t *busy) {
  size_t n = l->nsubs;
  batch b;
  dlock__call *args = dlock__calloc(n, sizeof(*args));
  if (args == NULL || repeated_part(l) || batch_init(&b, l) != 0) {
    dlock__free(args);
    return attempt_in_turn(l, owner, lease_ms, held, busy);
  }
  for (size_t i = 0; i < n; i++) {
    dlock_t *sub = l->subs[i];
    /* What cannot go in parallel, or fails before sending (a client shut
     * down, a lost hold, an unsettled attempt that cannot be settled),
     * takes the ordinary path, which says why. */
    if (held[i] || !batch_kind(sub) || dlock__check_handle(sub) != 0 ||
        dlock__settle_before_acquire(sub, owner) != 0)
      continue;
    dlock__ask ask = {owner, lease_ms, dlock__believed_count(sub, owner), 1};
    dlock__reentrant_acquire_call(sub, &ask, &args[i]);
    batch_add(&b, i, &args[i].eval);
  }
  batch_run(&b, NULL, NULL);
  int first = 0;
  char detail[512] = "";
  for (size_t i = 0; i < n; i++) {
    if (held[i])
      continue;
    dlock_t *sub = l->subs[i];
    int rc = b.rc[i];
    int taken = 0;
    if (rc == 0) {
      dlock__busy bz = {-1, 0};
      /* A grant that too few replicas acknowledged is recorded like any
       * other, and the attempt fails with DLOCK_ENOSYNC: the parts are
       * then given back together, in one round trip (and one WAIT), rather
       * than one after the other. */
      rc = dlock__finish_acquire(sub, owner, lease_ms, b.reply[i], b.sent_us,
                                 &bz);
      b.reply[i] = NULL;
      if (rc == 0 && !b.sy[i].ok) {
        taken = 1;
        rc = dlock__sync_fail(sub->c, &b.sy[i], "lock", sub->name, sub->len);
      }
      if (rc == 1)
        rc = dlock__fail(DLOCK_ETIMEDOUT,
                         "lock \"%.100s\" is held by another owner; not "
                         "acquired within 0 ms",
                         sub->name);
    } else if (rc == BATCH_ALONE) {
      /* After a failure the rest is not tried, as the attempt is given up
       * anyway. */
      if (first != 0)
        continue;
      rc = dlock_trylock_as(sub, owner, 0, lease_ms);
    } else {
      dlock__fail_text(rc, b.why);
    }
    /* An attempt that got no answer may have run all the same: what it
     * took is given back once its server answers (settle.c). */
    if (b.rc[i] != BATCH_ALONE && dlock__outcome_unknown(rc))
      dlock__note_unsettled(sub, owner);
    if (rc == 0 || taken)
      held[i] = 1;
    if (rc != 0 && first == 0) {
      first = rc;
      *busy = i;
      snprintf(detail, sizeof(detail), "%s", dlock_last_error());
    }
  }
  batch_free(&b);
  dlock__free(args);
  return first != 0 ? dlock__fail_text(first, detail) : 0;
}

/* Releases the parts marked in 'held' (composite.h). */
int dlock__release_parts(dlock_t *l, uint64_t owner, unsigned char *held) {
  int *state = dlock__calloc(l->nsubs, sizeof(*state));
  int first = 0;
  if (state != NULL)
    dlock__release_each(l, owner, held, state);
  for (size_t i = 0; i < l->nsubs; i++) {
    if (!held[i])
      continue;
    held[i] = 0;
    int rc = state != NULL ? state[i] : dlock_unlock_as(l->subs[i], owner);
    if (rc != 0 && first == 0)
      first = rc;
  }
  dlock__free(state);
  return first;
}
