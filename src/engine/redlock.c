/*
 * The RedLock: a lock over N independent masters, held when a majority of
 * them granted it within the lease (less the time spent asking and an
 * allowance for clock drift). Its parts are asked at once and their
 * replies taken as they come; the nodes that granted it are made to issue
 * the same tokens from then on.
 */
#include "alloc.h"
#include "composite.h"

#include "error.h"
#include "monotime.h"
#include "sleep.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* A part is sent in parallel when its acquisition script is known here
 * (reentrant and spin locks, what RedLocks are made of); other kinds, and
 * nodes that are clusters, are asked one after the other. */
static int parallel_part(const dlock_t *sub) {
  /* A node that is itself a cluster routes each call (and follows its
   * redirections) through the ordinary path. */
  return (sub->kind->id == DLOCK_REENTRANT || sub->kind->id == DLOCK_SPIN) &&
         dlock__route_one_shard(&sub->c->route);
}

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
  size_t n = l->nsubs, answered = 0, granted = 0, quorum = dlock__red_quorum(n);
  dlock__call *args = dlock__calloc(n, sizeof(*args));
  dlock__pending *pend = dlock__calloc(n, sizeof(*pend));
  dlock__sync_call *sc = dlock__calloc(n, sizeof(*sc));
  unsigned char *awaited = dlock__calloc(n, 1);
  dlock__latch_call *lc = dlock__calloc(n, sizeof(*lc));
  const dlock__eval **sent = dlock__calloc(n, sizeof(*sent));
  dlock__pending **ps = dlock__calloc(n, sizeof(*ps));
  if (args == NULL || pend == NULL || sc == NULL || awaited == NULL ||
      lc == NULL || sent == NULL || ps == NULL) {
    for (size_t i = 0; i < n; i++)
      state[i] = DLOCK_ENOMEM;
    goto out;
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
  /* The replies as they come, whichever node answers first, every node
   * waited for at once, until every node answered or gave up. */
  int64_t grace_end = INT64_MAX;
  while (left > 0) {
    if (granted >= quorum && grace_end == INT64_MAX) {
      int64_t now = dlock__now_us();
      int64_t grace = (now - sent_us) * RED_GRACE_FACTOR;
      grace_end = now + (grace > RED_GRACE_MIN_US ? grace : RED_GRACE_MIN_US);
    }
    for (size_t i = 0; i < n; i++)
      ps[i] = awaited[i] ? &pend[i] : NULL;
    int got = dlock__conn_wait_any(ps, n, grace_end);
    for (size_t i = 0; i < n && left > 0; i++) {
      if (!awaited[i] || (got >= 0 && (size_t)got != i))
        continue;
      dlock_t *sub = l->subs[i];
      /* The grace is over: what came is taken, the rest given up on. */
      if (got < 0)
        dlock__conn_expire(&pend[i]);
      redisReply *reply;
      dlock__synced sy;
      int rc = dlock__eval_wait_synced_until(sub->c, sent[i], &pend[i], &sc[i],
                                             &reply, dlock__now_us(), &sy);
      if (rc == DLOCK__CONN_AGAIN)
        continue; /* sent again (a script reload): awaited again */
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
out:
  dlock__free(args);
  dlock__free(pend);
  dlock__free(sc);
  dlock__free(awaited);
  dlock__free(lc);
  dlock__free((void *)sent);
  dlock__free(ps);
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
    dlock__eval_send(sub->c->route.conn, &args[i].eval, 0, &pend[i]);
    state[i] = 1; /* sent */
  }
  /* The replies as they come, every node waited for at once (one after
   * the other when out of memory for that). */
  dlock__pending **ps = dlock__calloc(n, sizeof(*ps));
  size_t left = 0;
  for (size_t i = 0; i < n; i++) {
    if (state[i] != 1)
      continue;
    if (ps != NULL)
      ps[i] = &pend[i];
    left++;
  }
  for (; left > 0; left--) {
    /* Each send gives up at its own deadline: one always ends. */
    int got = ps != NULL ? dlock__conn_wait_any(ps, n, INT64_MAX) : -1;
    size_t i = 0;
    if (got >= 0)
      i = (size_t)got;
    else
      while (state[i] != 1)
        i++;
    if (ps != NULL)
      ps[i] = NULL;
    dlock_t *sub = l->subs[i];
    redisReply *reply;
    state[i] = dlock__eval_wait(sub->c->route.conn, &args[i].eval, &pend[i],
                                &reply, 0);
    if (state[i] == 0) {
      /* Answered, and sent once: no copy of it can run any more, so its
       * latch goes with a later call of that node's client, as a single
       * lock's does (release.c), rather than stay for its lifetime. */
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
  dlock__free(ps);
  for (size_t i = 0; i < n; i++) {
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
    if (dlock__route_one_shard(&l->subs[i]->c->route))
      dlock__eval_send(l->subs[i]->c->route.conn, &calls[i], 0, &pend[i]);
  }
  for (size_t i = 0; i < l->nsubs; i++) {
    redisReply *reply;
    dlock__synced sy;
    /* A cluster node is asked through its routing, after the others. */
    if (held[i] && !dlock__route_one_shard(&l->subs[i]->c->route)) {
      if (dlock__eval_write(l->subs[i]->c, 1, &calls[i], &reply, 0, &sy) == 0)
        freeReplyObject(reply);
      continue;
    }
    if (held[i] && dlock__eval_wait(l->subs[i]->c->route.conn, &calls[i],
                                    &pend[i], &reply, 0) == 0)
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
  size_t n = l->nsubs;
  unsigned char *held = dlock__calloc(n, 1), *undo = dlock__calloc(n, 1);
  int *state = dlock__calloc(n, sizeof(*state));
  int rc;
  if (held == NULL || undo == NULL || state == NULL) {
    rc = dlock__fail(DLOCK_ENOMEM, "out of memory acquiring a RedLock");
    goto out;
  }
  int fresh = !dlock__holds_any_part(l, owner);
  dlock__riding ride;
  memset(&ride, 0, sizeof(ride));
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
    int64_t validity = dlock__red_validity_ms(l, lease_ms, start);
    char why[256];
    rc = dlock__red_round_verdict(n, answered, granted, validity, why,
                                  sizeof(why));
    if (rc == 0) {
      note_unanswered(l, owner, state);
      align_tokens(l, owner, held);
      rc = dlock__record_composite(l, owner, fresh);
      break;
    }
    red_outcome undone;
    red_release_all(l, owner, undo, &undone);
    note_unanswered(l, owner, state);
    if (rc == DLOCK_ENOQUORUM) {
      /* Too many nodes unreachable or refusing (restarting, failing
       * over): asked again after the outage back-off within the wait, as
       * a single lock's wait rides an outage; ENOQUORUM when it ends. */
      if (dlock__ride_on(l->subs[0]->c, wait_ms, deadline_us, &ride,
                         DLOCK_ENOQUORUM) == 0)
        continue;
      rc = dlock__fail_text(rc, why);
      break;
    }
    if (wait_ms == 0 || dlock__now_us() >= deadline_us) {
      rc = dlock__fail_text(rc, why);
      break;
    }
    int64_t until = dlock__deadline_ms(
        dlock__red_retry_ms(attempt, dlock__jitter(), ttl_ms));
    if (until > deadline_us)
      until = deadline_us;
    dlock__sleep_us(until - dlock__now_us());
  }
out:
  dlock__free(held);
  dlock__free(undo);
  dlock__free(state);
  return rc;
}

/* Whether a RedLock's unlock has anything to ask the nodes (composite.h).
 * Answering from the record when no part was ever taken here keeps an
 * unlock by a non-owner quick and exact while nodes are down. */
int dlock__red_unlock_known(dlock_t *l, uint64_t owner) {
  if (dlock__holds_any_part(l, owner))
    return 0;
  dlock__drop_composite(l, owner, 1);
  return dlock__fail(DLOCK_ENOTHELD, "RedLock is not held by this owner");
}

/* Releases on every node; the lock counts as lost when fewer than a
 * majority still held it. */
static int red_release(dlock_t *l, uint64_t owner) {
  int rc = dlock__red_unlock_known(l, owner);
  if (rc != 0)
    return rc;
  red_outcome o;
  red_release_all(l, owner, NULL, &o);
  if (o.nomem > 0)
    return dlock__fail(DLOCK_ENOMEM, "out of memory releasing a RedLock");
  dlock__drop_composite(l, owner, 0);
  return dlock__red_unlock_outcome(l->nsubs, (size_t)o.ok, (size_t)o.lost,
                                   (size_t)o.failed);
}

const dlock__kind dlock__kind_red =
    DLOCK__COMPOSITE_KIND(DLOCK_RED, red_acquire, red_release);

int dlock_get_red(dlock_t *const *locks, size_t n, dlock_t **out) {
  return dlock__composite_new(locks, n, &dlock__kind_red, out);
}
