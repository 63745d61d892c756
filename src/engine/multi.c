/*
 * Composite locks over several handles: the MultiLock (all of them) and
 * the RedLock (a majority of independent nodes).
 */
#include "alloc.h"
#include "engine.h"

#include "error.h"
#include "monotime.h"
#include "proto/format.h"
#include "proto/slot.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int composite_new(dlock_t *const *locks, size_t n,
                         const dlock__kind *kind, dlock_t **out) {
  if (out != NULL)
    *out = NULL;
  if (locks == NULL || out == NULL || n == 0)
    return dlock__fail(DLOCK_EINVAL, "locks and out must not be NULL, n > 0");
  for (size_t i = 0; i < n; i++) {
    if (locks[i] == NULL)
      return dlock__fail(DLOCK_EINVAL, "lock %zu of %zu is NULL", i, n);
    if (locks[i]->kind->acquire != NULL)
      return dlock__fail(DLOCK_EINVAL,
                         "lock %zu is itself a MultiLock or RedLock", i);
    if (dlock__forked_since(locks[i]->c->fork_gen))
      return dlock__fail_forked();
  }
  dlock_t *l = dlock__calloc(1, sizeof(*l));
  if (l == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory creating a composite");
  /* Set first: dlock_free frees the parts' records through it. */
  l->kind = kind;
  pthread_mutex_init(&l->cmu, NULL);
  l->subs = dlock__calloc(n, sizeof(*l->subs));
  l->name = dlock__strdup(kind->id == DLOCK_RED ? "(redlock)" : "(multilock)");
  if (l->subs == NULL || l->name == NULL) {
    if (l->subs == NULL)
      pthread_mutex_destroy(&l->cmu);
    dlock_free(l);
    return dlock__fail(DLOCK_ENOMEM, "out of memory creating a composite");
  }
  memcpy(l->subs, locks, n * sizeof(*locks));
  l->nsubs = n;
  l->len = strlen(l->name);
  *out = l;
  return 0;
}

int dlock_get_multi(dlock_t *const *locks, size_t n, dlock_t **out) {
  return composite_new(locks, n, &dlock__kind_multi, out);
}

int dlock_get_red(dlock_t *const *locks, size_t n, dlock_t **out) {
  return composite_new(locks, n, &dlock__kind_red, out);
}

static int count_acquisition(dlock_t *l, uint64_t owner, uint64_t token);
static void count_release(dlock_t *l, uint64_t owner);
static uint64_t max_token(dlock_t *l, uint64_t owner);
static int multi_release(dlock_t *l, uint64_t owner);
static int red_release(dlock_t *l, uint64_t owner);

static void forget_composite(dlock_t *l, uint64_t owner);

/* 1 when 'owner' has a record of any part: a new acquisition is then a
 * reentrant one. */
static int holds_any_part(dlock_t *l, uint64_t owner) {
  for (size_t i = 0; i < l->nsubs; i++)
    if (dlock__has_hold(l->subs[i], owner))
      return 1;
  return 0;
}

/* Records a composite acquisition ('fresh': no part was held before, so
 * any older record is stale); if even that fails, gives it back. */
static int record_composite(dlock_t *l, uint64_t owner, int fresh) {
  if (fresh)
    forget_composite(l, owner);
  int rc = count_acquisition(l, owner, max_token(l, owner));
  if (rc != 0) {
    l->kind->release(l, owner);
    rc = dlock__fail(DLOCK_ENOMEM, "out of memory recording a hold");
  }
  return rc;
}

static int64_t ms_left(int64_t deadline_us) {
  if (deadline_us == INT64_MAX)
    return DLOCK_WAIT_FOREVER;
  int64_t left = (deadline_us - dlock__now_us()) / 1000;
  return left > 0 ? left : 0;
}

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

/* How often the replicas in step are read again (as sync.c does): on one
 * server an INFO rides after the WAIT; on a cluster a group due for it
 * takes the ordinary path, whose writes read each master's. */
#define BATCH_SYNC_REFRESH_US 1000000

/* A part's call goes in parallel when its script is known here (reentrant
 * and spin locks). */
static int batch_kind(const dlock_t *sub) {
  return sub->kind->id == DLOCK_REENTRANT || sub->kind->id == DLOCK_SPIN;
}

/* The connection the call of a part goes to, with the script variant that
 * publishes where that deployment's waiters listen; NULL when its master
 * is not known. */
static dlock__conn *batch_conn(dlock_t *sub, dlock__eval *call) {
  dlock_client_t *c = sub->c;
  if (c->cluster == NULL)
    return c->conn;
  if (dlock__cluster_sharded(c->cluster) && call->script->sharded != NULL)
    call->script = call->script->sharded;
  int rc;
  dlock__conn *conn = dlock__cluster_conn(
      c->cluster, dlock__key_slot(call->argv[0], call->lens[0]), &rc);
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
  *gen = c->sentinel != NULL ? dlock__sentinel_gen(c->sentinel) : 0;
  if (s->fixed > 0)
    return s->fixed;
  int64_t now = dlock__now_us(), read = atomic_load(&s->read_us);
  if (c->cluster != NULL)
    return now - read > BATCH_SYNC_REFRESH_US
               ? -1
               : dlock__cluster_replicas(c->cluster, m, calls);
  /* The write that moves 'read_us' on has the INFO ride along (one per
   * period, whichever thread claims it, as in sync.c). */
  *refresh = now - read > BATCH_SYNC_REFRESH_US &&
             atomic_compare_exchange_strong(&s->read_us, &read, now);
  if (c->sentinel == NULL)
    return atomic_load(&s->replicas);
  /* What the Sentinels see, read again when the master moved. */
  int n = dlock__sync_wanted(c);
  return n >= 0 ? n : -1;
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
    char nrep[DLOCK__DEC_MAX], tmo[DLOCK__DEC_MAX];
    dlock__fmt_i64(nrep, g->wanted);
    dlock__fmt_i64(tmo, g->c->sync.timeout_ms);
    const char *argv[] = {"WAIT", nrep, tmo};
    int len = dlock__format_argv(&cmds[total], 3, argv, NULL);
    if (len < 0)
      rc = DLOCK_ENOMEM;
    else
      lens[total++] = (size_t)len;
  }
  if (rc == 0 && g->refresh) {
    const char *argv[] = {"INFO", "replication"};
    int len = dlock__format_argv(&cmds[total], 2, argv, NULL);
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
  /* A master that failed may have failed over: the slot map is read again
   * before the next call, as after any call that failed there. */
  if ((rc == DLOCK_EIO || rc == DLOCK_ETIMEDOUT) && g->c->cluster != NULL)
    dlock__cluster_mark_stale(g->c->cluster);
  dlock__synced sy = {1, 0, 0, 0};
  if (rc == 0 && g->wanted > 0) {
    const redisReply *w = got[g->m];
    sy.wanted = g->wanted;
    sy.acked =
        w != NULL && w->type == REDIS_REPLY_INTEGER ? (int)w->integer : 0;
    sy.ok = sy.acked >= g->wanted;
    /* The master moved while the write waited: the replicas that
     * acknowledged it may drop it as they follow the new one. */
    if (g->c->sentinel != NULL &&
        dlock__sentinel_gen(g->c->sentinel) != g->gen) {
      sy.moved = 1;
      sy.ok = 0;
    }
  }
  dlock__sync *s = &g->c->sync;
  if (s->on && s->fixed == 0 && (rc != 0 || !sy.ok)) {
    /* As after any write that failed or fell short: the replicas are read
     * again before the next. */
    atomic_store(&s->replicas, -1);
    if (g->c->cluster != NULL)
      dlock__cluster_forget_replicas(g->c->cluster);
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
    dlock__sync_take_info(g->c, info);
    if (info != NULL)
      freeReplyObject(info);
  }
  dlock__free(got);
  g->got = NULL;
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
  for (size_t k = 0; k < ng; k++)
    if (g[k].sent)
      group_collect(b, &g[k]);
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
static void release_each(dlock_t *l, uint64_t owner, const unsigned char *which,
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
    if (sub->kind->no_barging &&
        (rc = dlock__handover_release(sub, owner, &rel[i])) != 1) {
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
       * latch goes with a later call (see hashlock.c). */
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

/*
 * One attempt, without waiting, on every part not held yet ('held'),
 * every server's at once. 0 when all are held afterwards; else the code
 * of the first part (in order) that failed, DLOCK_ETIMEDOUT when another
 * owner holds it, with its index in '*busy' and its detail as the last
 * error. Parts that cannot go in parallel are tried one after the other
 * (after those that can), up to the first failure.
 */
static int attempt_all(dlock_t *l, uint64_t owner, int64_t lease_ms,
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

/* Releases the parts marked in 'held' (every server's at once) and clears
 * the marks; the first failure's code, or 0. */
static int release_parts(dlock_t *l, uint64_t owner, unsigned char *held) {
  int *state = dlock__calloc(l->nsubs, sizeof(*state));
  int first = 0;
  if (state != NULL)
    release_each(l, owner, held, state);
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

/* ---- MultiLock --------------------------------------------------------- */

/*
 * Takes every part without waiting; when one is taken by someone else,
 * lets go of all, waits for that one alone (holding nothing, so two
 * callers with overlapping sets in any order cannot deadlock), and goes
 * round again holding it.
 */
/* Whether an acquisition whose last attempt failed with an error an
 * outage causes tries again: 0 after the pause (the outage back-off), else
 * -1 (no wait, riding switched off, out of time, or canceled; the last
 * error stands). '*until_us' (0 at first) is when riding ends. */
static int ride_on(dlock_client_t *c, int64_t wait_ms, int64_t deadline_us,
                   int64_t *until_us, int *step) {
  if (wait_ms == 0 || c->opt.outage_wait_ms == 0)
    return -1;
  int64_t now = dlock__now_us();
  if (*until_us == 0)
    *until_us = wait_ms == DLOCK_WAIT_FOREVER
                    ? dlock__after_ms(now, c->opt.outage_wait_ms)
                    : deadline_us;
  if (now >= *until_us)
    return -1;
  char why[512];
  snprintf(why, sizeof(why), "%s", dlock_last_error());
  int rc = dlock__outage_pause(c, step, *until_us);
  int late = dlock__now_us() >= *until_us;
  if (rc == 0 && !late)
    return 0;
  if (rc == 0)
    dlock__fail_text(DLOCK_EIO, why);
  return -1;
}

static int multi_acquire(dlock_t *l, uint64_t owner, int64_t wait_ms,
                         int64_t lease_ms, int64_t deadline_us) {
  unsigned char *held = dlock__calloc(l->nsubs, 1);
  if (held == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory acquiring a MultiLock");
  int fresh = !holds_any_part(l, owner);
  int rc;
  int64_t ride_until = 0;
  int ride_step = 0;
  for (;;) {
    size_t busy = l->nsubs;
    rc = attempt_all(l, owner, lease_ms, held, &busy);
    if (rc == 0)
      break;
    int err = rc;
    char detail[512];
    snprintf(detail, sizeof(detail), "%s", dlock_last_error());
    release_parts(l, owner, held);
    /* A part that failed with an error an outage causes (its server
     * unreachable, READONLY, LOADING, too few replicas) is tried again,
     * every part from the start, after the outage back-off, as a single
     * lock's wait does: within the wait, or outage_wait_ms after the first
     * such error for a wait without end. */
    if ((err == DLOCK_EIO || err == DLOCK_ENOSYNC) &&
        ride_on(l->subs[busy]->c, wait_ms, deadline_us, &ride_until,
                &ride_step) == 0)
      continue;
    if (err != DLOCK_ETIMEDOUT || wait_ms == 0 ||
        dlock__now_us() >= deadline_us) {
      rc = dlock__fail_text(err, detail);
      break;
    }
    rc = dlock_trylock_as(l->subs[busy], owner, ms_left(deadline_us), lease_ms);
    if (rc != 0)
      break;
    held[busy] = 1;
  }
  dlock__free(held);
  return rc == 0 ? record_composite(l, owner, fresh) : rc;
}

/* Releases every part; DLOCK_ELOST when any had been lost, DLOCK_ENOTHELD
 * when none was held. */
static int multi_release(dlock_t *l, uint64_t owner) {
  int lost = 0, notheld = 0, other = 0;
  int *state = dlock__calloc(l->nsubs, sizeof(*state));
  if (state != NULL)
    release_each(l, owner, NULL, state);
  for (size_t i = 0; i < l->nsubs; i++) {
    int rc = state != NULL ? state[i] : dlock_unlock_as(l->subs[i], owner);
    if (rc == DLOCK_ELOST)
      lost++;
    else if (rc == DLOCK_ENOTHELD)
      notheld++;
    else if (rc != 0 && other == 0)
      other = rc;
  }
  dlock__free(state);
  if ((size_t)notheld < l->nsubs)
    count_release(l, owner);
  if (other != 0)
    return other;
  if (lost > 0)
    return dlock__fail(DLOCK_ELOST, "%d of the %zu locks were lost while held",
                       lost, l->nsubs);
  if ((size_t)notheld == l->nsubs)
    return dlock__fail(DLOCK_ENOTHELD, "none of the %zu locks is held",
                       l->nsubs);
  return 0;
}

static int force_all(dlock_t *l) {
  int any = 0;
  for (size_t i = 0; i < l->nsubs; i++) {
    int rc = dlock_force_unlock(l->subs[i]);
    if (rc < 0 && l->kind->id == DLOCK_MULTI)
      return rc;
    any |= rc > 0;
  }
  return any;
}

static int cmp_desc(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

/*
 * Asks every part and combines the answers: a MultiLock is locked, held,
 * counted and timed by its weakest part; a RedLock by its majority-th
 * part (the answers sorted from most to least, taken at n/2+1). An
 * unreachable RedLock node counts as "no".
 */
static int composite_query(dlock_t *l, uint64_t owner, int what, int64_t *out) {
  int64_t *v = dlock__calloc(l->nsubs, sizeof(*v));
  if (v == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory querying locks");
  int red = l->kind->id == DLOCK_RED;
  for (size_t i = 0; i < l->nsubs; i++) {
    int rc = dlock__query_single(l->subs[i], owner, what, &v[i]);
    if (rc != 0 && !red) {
      dlock__free(v);
      return rc;
    }
    if (rc != 0)
      v[i] = 0;
  }
  qsort(v, l->nsubs, sizeof(*v), cmp_desc);
  *out = v[red ? l->nsubs / 2 : l->nsubs - 1];
  dlock__free(v);
  return 0;
}

/* ---- per-owner records of a composite ------------------------------------ */

struct dlock__chold {
  struct dlock__chold *next;
  uint64_t owner;
  uint64_t token;
  int depth; /* acquisitions not yet released */
};

void dlock__composite_free(dlock_t *l) {
  while (l->cholds != NULL) {
    struct dlock__chold *next = l->cholds->next;
    dlock__free(l->cholds);
    l->cholds = next;
  }
  dlock__free(l->subs);
  pthread_mutex_destroy(&l->cmu);
}

static struct dlock__chold **find_chold(dlock_t *l, uint64_t owner) {
  struct dlock__chold **p = &l->cholds;
  while (*p != NULL && (*p)->owner != owner)
    p = &(*p)->next;
  return p;
}

/* Counts one more acquisition by 'owner'; the first fixes the token. */
static int count_acquisition(dlock_t *l, uint64_t owner, uint64_t token) {
  pthread_mutex_lock(&l->cmu);
  struct dlock__chold **p = find_chold(l, owner);
  if (*p == NULL && (*p = dlock__calloc(1, sizeof(**p))) != NULL) {
    (*p)->owner = owner;
    (*p)->token = token;
  }
  int ok = *p != NULL;
  if (ok)
    (*p)->depth++;
  pthread_mutex_unlock(&l->cmu);
  return ok ? 0 : dlock__fail(DLOCK_ENOMEM, "out of memory recording a hold");
}

static void forget_composite(dlock_t *l, uint64_t owner) {
  pthread_mutex_lock(&l->cmu);
  struct dlock__chold **p = find_chold(l, owner);
  if (*p != NULL) {
    struct dlock__chold *gone = *p;
    *p = gone->next;
    dlock__free(gone);
  }
  pthread_mutex_unlock(&l->cmu);
}

/* Counts one release by 'owner'; the record goes with the last. */
static void count_release(dlock_t *l, uint64_t owner) {
  pthread_mutex_lock(&l->cmu);
  struct dlock__chold **p = find_chold(l, owner);
  if (*p != NULL && --(*p)->depth <= 0) {
    struct dlock__chold *gone = *p;
    *p = gone->next;
    dlock__free(gone);
  }
  pthread_mutex_unlock(&l->cmu);
}

static uint64_t composite_token(dlock_t *l, uint64_t owner) {
  pthread_mutex_lock(&l->cmu);
  struct dlock__chold *h = *find_chold(l, owner);
  uint64_t token = h != NULL ? h->token : 0;
  pthread_mutex_unlock(&l->cmu);
  return token;
}

/* The largest of the parts' tokens: every part's counter went up when the
 * whole was taken, so for one set of names it increases with each holder. */
static uint64_t max_token(dlock_t *l, uint64_t owner) {
  uint64_t best = 0;
  for (size_t i = 0; i < l->nsubs; i++) {
    uint64_t t = dlock_token_as(l->subs[i], owner);
    if (t == 0 && l->kind->id == DLOCK_MULTI)
      return 0;
    if (t > best)
      best = t;
  }
  return best;
}

const dlock__kind dlock__kind_multi = {
    .id = DLOCK_MULTI,
    .release = multi_release,
    .force_release = force_all,
    .acquire = multi_acquire,
    .query = composite_query,
    .token = composite_token,
    .dispose = dlock__composite_free,
};

/* ---- RedLock ----------------------------------------------------------- */

/* A part is sent in parallel when its acquisition script is known here
 * (reentrant and spin locks, what RedLocks are made of); other kinds, and
 * nodes that are clusters, are asked one after the other. */
static int parallel_part(const dlock_t *sub) {
  /* A node that is itself a cluster routes each call (and follows its
   * redirections) through the ordinary path. */
  return (sub->kind->id == DLOCK_REENTRANT || sub->kind->id == DLOCK_SPIN) &&
         sub->c->cluster == NULL;
}

/* How long a wait on one node lasts before the next node's turn, while
 * several are awaited: replies are taken as they come, whichever node
 * answers first. */
#define RED_TURN_US 1000

/* Once a majority granted, how long the other nodes are still waited for:
 * three times as long as the majority took, and at least this, so that a
 * healthy node that is merely a little later (a busy machine) still counts.
 * A node that has not answered by then (paused, or accepting connections
 * and never answering) is given up on, its attempt settled once it answers
 * (settle.c) and the node not asked again until then, rather than hold
 * the acquisition for a command timeout and eat the lease. */
#define RED_GRACE_MIN_US 50000
#define RED_GRACE_FACTOR 3

/* One attempt on every node at once; 'state[i]' becomes 0 (granted), 1
 * (held by another owner) or an error. Returns how many nodes answered. */
static size_t red_attempt(dlock_t *l, uint64_t owner, int64_t lease_ms,
                          int *state, int64_t *ttl_ms) {
  size_t n = l->nsubs, answered = 0, granted = 0, quorum = n / 2 + 1;
  dlock__call *args = dlock__calloc(n, sizeof(*args));
  dlock__pending *pend = dlock__calloc(n, sizeof(*pend));
  dlock__sync_call *sc = dlock__calloc(n, sizeof(*sc));
  unsigned char *awaited = dlock__calloc(n, 1);
  dlock__latch_call *lc = dlock__calloc(n, sizeof(*lc));
  const dlock__eval **sent = dlock__calloc(n, sizeof(*sent));
  if (args == NULL || pend == NULL || sc == NULL || awaited == NULL ||
      lc == NULL || sent == NULL) {
    dlock__free(args);
    dlock__free(pend);
    dlock__free(sc);
    dlock__free(awaited);
    dlock__free(lc);
    dlock__free((void *)sent);
    for (size_t i = 0; i < n; i++)
      state[i] = DLOCK_ENOMEM;
    return 0;
  }
  int64_t sent_us = dlock__now_us();
  size_t left = 0;
  for (size_t i = 0; i < n; i++) {
    /* A node where an earlier attempt got no answer is settled in the
     * background as soon as it answers; settling it here, one node after
     * the other, would cost a command timeout per silent node. Until then
     * it is not asked. */
    if (dlock__unsettled_pending(l->subs[i], owner, NULL))
      state[i] = dlock__fail(DLOCK_EIO,
                             "RedLock node %zu not asked: an "
                             "earlier attempt there is unsettled",
                             i);
    else
      state[i] = dlock__settle_before_acquire(l->subs[i], owner);
    if (!parallel_part(l->subs[i]) || state[i] != 0)
      continue;
    /* A node not connected yet starts connecting here and the others go
     * on at once: every connect runs at the same time. */
    dlock__ask ask = {owner, lease_ms, dlock__believed_count(l->subs[i], owner),
                      1};
    dlock__reentrant_acquire_call(l->subs[i], &ask, &args[i]);
    /* The node's done unlock latches ride along and are deleted. */
    sent[i] = dlock__with_done_latches(l->subs[i]->c, &args[i].eval, &lc[i]);
    /* With replica sync, WAIT rides after the script, as on the serial
     * path: a part that the node's replicas did not acknowledge is given
     * back and does not count towards the quorum. */
    state[i] =
        dlock__eval_send_synced(l->subs[i]->c, sent[i], &pend[i], &sc[i]);
    if (state[i] != 0)
      continue;
    awaited[i] = 1;
    left++;
  }
  /* Parts of other kinds, one after the other; the replies of the others
   * arrive meanwhile. */
  for (size_t i = 0; i < n; i++) {
    if (awaited[i] || state[i] != 0)
      continue;
    dlock__busy busy = {-1, 0};
    dlock_t *sub = l->subs[i];
    state[i] = dlock__attempt(sub, owner, lease_ms, 0, &busy);
    answered += state[i] == 0 || state[i] == 1;
    granted += state[i] == 0;
    if (state[i] == 1 && busy.ttl_ms > *ttl_ms)
      *ttl_ms = busy.ttl_ms;
  }
  /* The replies as they come, each node waited for a turn at a time (a
   * lone node until it answers), until every node answered or gave up. */
  int64_t grace_end = INT64_MAX;
  while (left > 0) {
    int expired = dlock__now_us() >= grace_end;
    for (size_t i = 0; i < n && left > 0; i++) {
      if (!awaited[i])
        continue;
      dlock_t *sub = l->subs[i];
      int64_t now = dlock__now_us();
      if (granted >= quorum && grace_end == INT64_MAX) {
        int64_t grace = (now - sent_us) * RED_GRACE_FACTOR;
        grace_end = now + (grace > RED_GRACE_MIN_US ? grace : RED_GRACE_MIN_US);
      }
      if (expired)
        dlock__conn_expire(&pend[i]);
      int64_t until = now + RED_TURN_US;
      if (until > grace_end)
        until = grace_end;
      if (left == 1 && grace_end == INT64_MAX)
        until = INT64_MAX;
      redisReply *reply;
      dlock__synced sy;
      int rc = dlock__eval_wait_synced_until(sub->c, sent[i], &pend[i], &sc[i],
                                             &reply, until, &sy);
      if (rc == DLOCK__CONN_AGAIN)
        continue;
      awaited[i] = 0;
      left--;
      dlock__busy busy = {-1, 0};
      if (rc == 0)
        rc = dlock__finish_acquire_synced(sub, owner, lease_ms, reply, sent_us,
                                          &busy, &sy);
      state[i] = rc;
      answered += rc == 0 || rc == 1;
      granted += rc == 0;
      if (rc == 1 && busy.ttl_ms > *ttl_ms)
        *ttl_ms = busy.ttl_ms;
    }
  }
  for (size_t i = 0; i < n; i++)
    if (sent[i] != NULL)
      dlock__latch_call_end(&lc[i]);
  dlock__free(args);
  dlock__free(pend);
  dlock__free(sc);
  dlock__free(awaited);
  dlock__free(lc);
  dlock__free((void *)sent);
  return answered;
}

/* Releases the parts on the nodes marked in 'which' (all when NULL) at
 * once. Counts the outcomes. */
typedef struct red_outcome {
  int ok, lost, notheld, nomem, failed;
} red_outcome;

static void red_release_all(dlock_t *l, uint64_t owner,
                            const unsigned char *which, red_outcome *o) {
  size_t n = l->nsubs;
  dlock__release *rel = dlock__calloc(n, sizeof(*rel));
  dlock__call *args = dlock__calloc(n, sizeof(*args));
  dlock__pending *pend = dlock__calloc(n, sizeof(*pend));
  int *state = dlock__calloc(n, sizeof(*state));
  memset(o, 0, sizeof(*o));
  if (rel == NULL || args == NULL || pend == NULL || state == NULL) {
    o->nomem = (int)n;
    goto out;
  }
  for (size_t i = 0; i < n; i++) {
    dlock_t *sub = l->subs[i];
    if (which != NULL && !which[i]) {
      state[i] = 2; /* not asked */
      continue;
    }
    if (!parallel_part(sub)) {
      state[i] = dlock_unlock_as(sub, owner);
      continue;
    }
    /* A part without a hold whose attempt is unsettled is released by
     * that settling (settle.c), in the background: not held here. */
    int64_t believed = -1;
    if (dlock__unsettled_pending(sub, owner, &believed) && believed == 0 &&
        !dlock__has_hold(sub, owner)) {
      state[i] = DLOCK_ENOTHELD;
      continue;
    }
    state[i] = dlock__release_begin(sub, owner, &rel[i]);
    if (state[i] != 0)
      continue;
    dlock__reentrant_release_call(sub, owner, &rel[i], &args[i]);
    dlock__eval_send(sub->c->conn, &args[i].eval, 0, &pend[i]);
    state[i] = 1; /* sent */
  }
  for (size_t i = 0; i < n; i++) {
    if (state[i] == 1) {
      dlock_t *sub = l->subs[i];
      redisReply *reply;
      state[i] =
          dlock__eval_wait(sub->c->conn, &args[i].eval, &pend[i], &reply, 0);
      if (state[i] == 0) {
        /* Answered, and sent once: no copy of it can run any more, so its
         * latch goes with a later call of that node's client, as a single
         * lock's does (hashlock.c), rather than stay for its lifetime. */
        if (rel[i].latch != NULL) {
          dlock__latch_done(sub->c, rel[i].latch, rel[i].latch_len);
          rel[i].latch = NULL;
        }
        state[i] = dlock__finish_release(sub, owner, reply, &rel[i]);
      } else {
        dlock__release_failed(sub, owner);
        /* A part found lost stays lost, whatever its node says now. */
        if (rel[i].lost)
          state[i] = DLOCK_ELOST;
      }
    }
    dlock__release_end(&rel[i]);
    if (state[i] == 2)
      continue;
    /* A part that could not even be sent for want of memory gets one
     * more, plain, try: leaving it would leave the lock on that node. */
    if (state[i] == DLOCK_ENOMEM)
      state[i] = dlock_unlock_as(l->subs[i], owner);
    o->ok += state[i] == 0;
    o->lost += state[i] == DLOCK_ELOST;
    o->notheld += state[i] == DLOCK_ENOTHELD;
    o->nomem += state[i] == DLOCK_ENOMEM;
    o->failed += state[i] != 0 && state[i] != DLOCK_ELOST &&
                 state[i] != DLOCK_ENOTHELD && state[i] != DLOCK_ENOMEM;
  }
out:
  dlock__free(rel);
  dlock__free(args);
  dlock__free(pend);
  dlock__free(state);
}

/* Makes every node that granted the lock issue tokens above 'token' from
 * now on (see dlock_get_red). */
static void raise_tokens(dlock_t *l, const unsigned char *held,
                         uint64_t token) {
  char value[24];
  snprintf(value, sizeof(value), "%" PRIu64, token);
  dlock__eval *calls = dlock__calloc(l->nsubs, sizeof(*calls));
  dlock__pending *pend = dlock__calloc(l->nsubs, sizeof(*pend));
  const char **argv = dlock__calloc(2 * l->nsubs, sizeof(*argv));
  size_t *lens = dlock__calloc(2 * l->nsubs, sizeof(*lens));
  if (calls == NULL || pend == NULL || argv == NULL || lens == NULL)
    goto out;
  for (size_t i = 0; i < l->nsubs; i++) {
    if (!held[i])
      continue;
    argv[2 * i] = l->subs[i]->token_key;
    lens[2 * i] = l->subs[i]->token_key_len;
    argv[2 * i + 1] = value;
    lens[2 * i + 1] = strlen(value);
    dlock__eval call = {&dlock__script_raise_token, 1, 1, &argv[2 * i],
                        &lens[2 * i]};
    calls[i] = call;
    if (l->subs[i]->c->cluster == NULL)
      dlock__eval_send(l->subs[i]->c->conn, &calls[i], 0, &pend[i]);
  }
  for (size_t i = 0; i < l->nsubs; i++) {
    redisReply *reply;
    dlock__synced sy;
    /* A cluster node is asked through its routing, after the others. */
    if (held[i] && l->subs[i]->c->cluster != NULL) {
      if (dlock__eval_write(l->subs[i]->c, 1, &calls[i], &reply, 0, &sy) == 0)
        freeReplyObject(reply);
      continue;
    }
    if (held[i] && dlock__eval_wait(l->subs[i]->c->conn, &calls[i], &pend[i],
                                    &reply, 0) == 0)
      freeReplyObject(reply);
  }
out:
  dlock__free(calls);
  dlock__free(pend);
  dlock__free((void *)argv);
  dlock__free(lens);
}

/* Aligns the granting nodes' counters when their tokens differ. */
static void align_tokens(dlock_t *l, uint64_t owner,
                         const unsigned char *held) {
  uint64_t lo = UINT64_MAX, hi = 0;
  for (size_t i = 0; i < l->nsubs; i++) {
    if (!held[i])
      continue;
    uint64_t t = dlock_token_as(l->subs[i], owner);
    lo = t < lo ? t : lo;
    hi = t > hi ? t : hi;
  }
  if (hi > lo)
    raise_tokens(l, held, hi);
}

/* Parts whose attempt got no answer may be granted on their node all the
 * same: they are given back once the node answers (settle.c). */
static void note_unanswered(dlock_t *l, uint64_t owner, const int *state) {
  for (size_t i = 0; i < l->nsubs; i++)
    if (dlock__outcome_unknown(state[i]))
      dlock__note_unsettled(l->subs[i], owner);
}

static int red_acquire(dlock_t *l, uint64_t owner, int64_t wait_ms,
                       int64_t lease_ms, int64_t deadline_us) {
  size_t n = l->nsubs, quorum = n / 2 + 1;
  unsigned char *held = dlock__calloc(n, 1), *undo = dlock__calloc(n, 1);
  int *state = dlock__calloc(n, sizeof(*state));
  int rc;
  if (held == NULL || undo == NULL || state == NULL) {
    rc = dlock__fail(DLOCK_ENOMEM, "out of memory acquiring a RedLock");
    goto out;
  }
  int fresh = !holds_any_part(l, owner);
  int64_t ride_until = 0;
  int ride_step = 0;
  for (int attempt = 0;; attempt++) {
    int64_t start = dlock__now_us(), ttl_ms = -1;
    /* Every part this owner had before, lost ones included: undoing the
     * attempt must not take the record of a lost hold, whose loss the
     * owner's unlock is still to report. */
    for (size_t i = 0; i < n; i++)
      held[i] = dlock__has_hold(l->subs[i], owner);
    size_t answered = red_attempt(l, owner, lease_ms, state, &ttl_ms);
    if (answered == 0 && state[0] == DLOCK_ENOMEM) {
      rc = dlock__fail(DLOCK_ENOMEM, "out of memory acquiring a RedLock");
      break;
    }
    size_t granted = 0;
    for (size_t i = 0; i < n; i++) {
      granted += state[i] == 0;
      /* Give back what was granted, and what may have been granted with
       * its reply lost; but never a hold this owner had before. */
      undo[i] = state[i] == 0 || (state[i] < 0 && !held[i]);
      held[i] = state[i] == 0;
    }
    /* The lease the nodes will keep, less the time spent asking and the
     * allowance for clock drift between them. */
    int64_t lease = lease_ms == DLOCK_WATCHDOG
                        ? l->subs[0]->c->opt.watchdog_timeout_ms
                        : lease_ms;
    int64_t elapsed_ms = (dlock__now_us() - start) / 1000;
    int64_t validity = lease - elapsed_ms - (lease / 100 + 2);
    if (granted >= quorum && validity > 0) {
      note_unanswered(l, owner, state);
      align_tokens(l, owner, held);
      rc = record_composite(l, owner, fresh);
      break;
    }
    red_outcome undone;
    red_release_all(l, owner, undo, &undone);
    note_unanswered(l, owner, state);
    if (answered < quorum) {
      rc = dlock__fail(DLOCK_ENOQUORUM,
                       "RedLock: only %zu of %zu nodes answered; %zu needed",
                       answered, n, quorum);
      /* Too many nodes unreachable or refusing (restarting, failing
       * over): asked again after the outage back-off within the wait, as
       * a single lock's wait rides an outage; ENOQUORUM when it ends. */
      if (ride_on(l->subs[0]->c, wait_ms, deadline_us, &ride_until,
                  &ride_step) == 0)
        continue;
      rc = dlock__fail(DLOCK_ENOQUORUM,
                       "RedLock: only %zu of %zu nodes answered; %zu needed",
                       answered, n, quorum);
      break;
    }
    if (wait_ms == 0 || dlock__now_us() >= deadline_us) {
      rc = dlock__fail(DLOCK_ETIMEDOUT,
                       "RedLock: %zu of %zu nodes granted it (validity %lld "
                       "ms); %zu needed",
                       granted, n, (long long)validity, quorum);
      break;
    }
    /* Retry after a random delay, so that competing clients do not split
     * the nodes between them again; never longer than the holder's lease. */
    int64_t delay_ms = 5 + (int64_t)(dlock__now_us() % 45) + attempt;
    if (ttl_ms >= 0 && ttl_ms < delay_ms)
      delay_ms = ttl_ms;
    int64_t until = dlock__deadline_ms(delay_ms);
    if (until > deadline_us)
      until = deadline_us;
    int64_t sleep_us = until - dlock__now_us();
    if (sleep_us > 0) {
      struct timespec ts = {(time_t)(sleep_us / 1000000),
                            (long)(sleep_us % 1000000) * 1000};
      nanosleep(&ts, NULL);
    }
  }
out:
  dlock__free(held);
  dlock__free(undo);
  dlock__free(state);
  return rc;
}

/* Releases on every node; the lock counts as lost when fewer than a
 * majority still held it. */
static int red_release(dlock_t *l, uint64_t owner) {
  /* Nothing to ask the nodes when no part was ever taken here: answering
   * from the record keeps an unlock by a non-owner quick and exact while
   * nodes are down. */
  size_t known = 0;
  for (size_t i = 0; i < l->nsubs; i++)
    known += dlock__has_hold(l->subs[i], owner);
  if (known == 0) {
    forget_composite(l, owner);
    return dlock__fail(DLOCK_ENOTHELD, "RedLock is not held by this owner");
  }
  red_outcome o;
  red_release_all(l, owner, NULL, &o);
  size_t quorum = l->nsubs / 2 + 1;
  if (o.nomem > 0)
    return dlock__fail(DLOCK_ENOMEM, "out of memory releasing a RedLock");
  count_release(l, owner);
  if ((size_t)o.ok >= quorum)
    return 0;
  if (o.ok == 0 && o.lost == 0 && o.failed == 0)
    return dlock__fail(DLOCK_ENOTHELD, "RedLock is not held by this owner");
  if ((size_t)(o.ok + o.failed) < quorum && o.lost > 0)
    return dlock__fail(DLOCK_ELOST,
                       "RedLock lost: only %d of %zu nodes still held it", o.ok,
                       l->nsubs);
  return dlock__fail(DLOCK_ENOQUORUM,
                     "RedLock released on %d of %zu nodes; %d unreachable",
                     o.ok, l->nsubs, o.failed);
}

const dlock__kind dlock__kind_red = {
    .id = DLOCK_RED,
    .release = red_release,
    .force_release = force_all,
    .acquire = red_acquire,
    .query = composite_query,
    .token = composite_token,
    .dispose = dlock__composite_free,
};
