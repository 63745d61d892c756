/*
 * The engine's statistics and events (see observe.h). Counting goes to the
 * client's statistics block (stats.h); events are raised here, never with
 * the client's mutex held, so that a callback may call dlock again.
 */
#include "observe.h"

#include "monotime.h"

#include <string.h>

static dlock__stats *stats_of(const dlock_t *l) {
  return l->c != NULL ? l->c->stats : NULL;
}

/* The composites whose parts the calling thread is acquiring or releasing
 * now (nested: 'depth'), and whether one of those parts waited. */
static _Thread_local struct {
  int depth;
  int waited;
} parts;

int64_t dlock__obs_start(const dlock_t *l) {
  if (stats_of(l) == NULL)
    return 0;
  return parts.depth > 0 ? -1 : dlock__now_us();
}

/* The owner's hold of 'l' as the hold table has it. */
static void look_up(dlock_t *l, uint64_t owner, dlock__obs_hold *o) {
  memset(o, 0, sizeof(*o));
  dlock_client_t *c = l->c;
  pthread_mutex_lock(&c->mu);
  dlock__hold *h =
      dlock__holds_find(&c->holds, l->name, l->len, owner, l->kind->id);
  if (h != NULL && !h->lost) {
    o->found = 1;
    o->count = h->count;
    o->token = h->token;
    o->held_us = h->held_us;
  }
  pthread_mutex_unlock(&c->mu);
}

int dlock__obs_acquired(dlock_t *l, uint64_t owner, int64_t wait_ms,
                        int64_t start_us, int waited, int rc) {
  dlock__stats *st = stats_of(l);
  if (st == NULL)
    return rc;
  if (start_us < 0) {
    /* A composite's part: its wait is told to the whole (on this thread
     * for the blocking verbs; the async ones know it themselves), and
     * still counted for its name among the contended ones. */
    if (waited) {
      parts.waited = 1;
      dlock__stat_contended(st, l->name, l->len, rc != 0, 0);
    }
    /* Its end is not counted as a single lock's (an async part's hold is
     * recorded by the loop, outside the composite's start). */
    if (rc == 0)
      dlock__mark_hold(l, owner, DLOCK__MARK_PART);
    return rc;
  }
  int64_t took = dlock__now_us() - start_us;
  dlock__stat_time(st, DLOCK__H_ACQUIRE, took);
  if (waited) {
    dlock__stat(st, DLOCK__ST_WAITS);
    dlock__stat_time(st, DLOCK__H_WAIT, took);
    dlock__stat_contended(st, l->name, l->len, rc != 0, took);
  }
  if (rc == 0)
    dlock__stat(st, DLOCK__ST_ACQUIRED);
  else if (rc == DLOCK_ETIMEDOUT && wait_ms == 0)
    dlock__stat(st, DLOCK__ST_REFUSED);
  else if (rc == DLOCK_ETIMEDOUT)
    dlock__stat(st, DLOCK__ST_TIMED_OUT);
  else
    dlock__stat_failed(st, rc);
  if (!dlock__events_on(st))
    return rc;
  if (waited)
    dlock__event(st, &(dlock_event_t){.kind = DLOCK_EVENT_WAITED,
                                      .name = l->name,
                                      .name_len = l->len,
                                      .owner = owner,
                                      .wait_us = took});
  dlock__obs_hold o = {0, 0, 0, 0, 0};
  if (rc == 0)
    look_up(l, owner, &o);
  int kind = rc == 0                 ? DLOCK_EVENT_ACQUIRED
             : rc == DLOCK_ETIMEDOUT ? DLOCK_EVENT_TIMED_OUT
                                     : DLOCK_EVENT_FAILED;
  dlock__event(st,
               &(dlock_event_t){.kind = kind,
                                .name = l->name,
                                .name_len = l->len,
                                .owner = owner,
                                .token = o.token,
                                .count = o.count > 0 ? (uint64_t)o.count : 0,
                                .wait_us = took,
                                .err = rc});
  return rc;
}

void dlock__obs_recorded(dlock_client_t *c, dlock__hold *h, int64_t count) {
  if (c->stats == NULL)
    return;
  if (h->count == 0 || count == 1) {
    h->held_us = dlock__now_us();
    h->obs_part = parts.depth > 0;
  }
  if (count > 1 && !h->obs_part && parts.depth == 0)
    dlock__stat(c->stats, DLOCK__ST_REENTRANT);
}

void dlock__obs_hold_ends(dlock_client_t *c, const dlock__hold *h) {
  if (c->stats == NULL || h->obs_part)
    return;
  dlock__stat(c->stats, DLOCK__ST_RELEASED);
  if (h->held_us != 0)
    dlock__stat_time(c->stats, DLOCK__H_HOLD, dlock__now_us() - h->held_us);
}

void dlock__obs_peek(dlock_t *l, uint64_t owner, dlock__obs_hold *o) {
  memset(o, 0, sizeof(*o));
  dlock__stats *st = stats_of(l);
  if (st == NULL)
    return;
  if (dlock__events_on(st))
    look_up(l, owner, o);
  o->part = parts.depth > 0;
}

int dlock__obs_unlocked(dlock_t *l, uint64_t owner, const dlock__obs_hold *o,
                        int rc) {
  dlock__stats *st = stats_of(l);
  if (st == NULL || rc != 0 || o->part)
    return rc;
  dlock__stat(st, DLOCK__ST_UNLOCKS);
  if (dlock__events_on(st) && o->found && o->count == 1)
    dlock__event(
        st, &(dlock_event_t){
                .kind = DLOCK_EVENT_RELEASED,
                .name = l->name,
                .name_len = l->len,
                .owner = owner,
                .token = o->token,
                .hold_us = o->held_us != 0 ? dlock__now_us() - o->held_us : 0});
  return rc;
}

void dlock__obs_lost(dlock__stats *st, const char *name, size_t len,
                     uint64_t owner) {
  if (st == NULL)
    return;
  dlock__stat(st, DLOCK__ST_LOST);
  dlock__event(st, &(dlock_event_t){.kind = DLOCK_EVENT_LOST,
                                    .name = name,
                                    .name_len = len,
                                    .owner = owner,
                                    .err = DLOCK_ELOST});
}

void dlock__obs_round(dlock_client_t *c, int rc, const unsigned char *renewed,
                      size_t n) {
  if (c->stats == NULL)
    return;
  size_t done = 0;
  for (size_t i = 0; i < n && rc == 0; i++)
    done += renewed[i] != 0;
  dlock__stat_add(c->stats, DLOCK__ST_RENEWED, done);
  dlock__stat_event(c->stats, DLOCK__ST_WATCHDOG_ROUNDS,
                    DLOCK_EVENT_RENEWAL_ROUND, done, rc);
}

void dlock__obs_synced(dlock_client_t *c, const dlock__synced *s) {
  dlock__stat(c->stats, DLOCK__ST_SYNC_WAITS);
  if (!s->ok)
    dlock__stat_event(c->stats, DLOCK__ST_SYNC_SHORTFALLS,
                      DLOCK_EVENT_SYNC_SHORTFALL,
                      s->acked > 0 ? (uint64_t)s->acked : 0, DLOCK_ENOSYNC);
}

/* ---- semaphores, expirable permits and latches ------------------------- */

int64_t dlock__obs_begin(dlock_client_t *c) {
  return c->stats != NULL ? dlock__now_us() : 0;
}

/* Counts an acquisition of 'w' in 'st' (not NULL), as dlock__obs_taken
 * says. */
static int count_taken(dlock__stats *st, const dlock__obs_what *w,
                       int64_t wait_ms, int64_t start_us, int waited, int rc) {
  int64_t took = dlock__now_us() - start_us;
  dlock__stat_kind_time(st, w->kind, DLOCK__KH_ACQUIRE, took);
  if (waited) {
    dlock__stat_kind(st, w->kind, DLOCK__KC_WAITS);
    dlock__stat_kind_time(st, w->kind, DLOCK__KH_WAIT, took);
  }
  int timed_out = rc == DLOCK_ETIMEDOUT;
  dlock__stat_kind(st, w->kind,
                   rc == 0                     ? DLOCK__KC_ACQUIRED
                   : timed_out && wait_ms == 0 ? DLOCK__KC_REFUSED
                   : timed_out                 ? DLOCK__KC_TIMED_OUT
                                               : DLOCK__KC_FAILED);
  if (!dlock__events_on(st))
    return rc;
  dlock_event_t e = {.name = w->name,
                     .name_len = w->len,
                     .owner = w->owner,
                     .wait_us = took,
                     .what = w->kind};
  if (waited) {
    e.kind = DLOCK_EVENT_WAITED;
    dlock__event(st, &e);
  }
  e.kind = rc == 0     ? DLOCK_EVENT_ACQUIRED
           : timed_out ? DLOCK_EVENT_TIMED_OUT
                       : DLOCK_EVENT_FAILED;
  e.token = rc == 0 ? w->token : 0;
  e.count = rc == 0 ? w->count : 0;
  e.err = rc;
  dlock__event(st, &e);
  return rc;
}

int dlock__obs_taken(dlock_client_t *c, const dlock__obs_what *w,
                     int64_t wait_ms, int64_t start_us, int waited, int rc) {
  return c->stats != NULL
             ? count_taken(c->stats, w, wait_ms, start_us, waited, rc)
             : rc;
}

/* Counts a release of 'w' in 'st' (not NULL), as dlock__obs_given says. */
static void count_given(dlock__stats *st, const dlock__obs_what *w,
                        int64_t since_us) {
  int64_t held = since_us != 0 ? dlock__now_us() - since_us : 0;
  dlock__stat_kind(st, w->kind, DLOCK__KC_RELEASED);
  if (since_us != 0)
    dlock__stat_kind_time(st, w->kind, DLOCK__KH_HOLD, held);
  dlock__event(st, &(dlock_event_t){.kind = DLOCK_EVENT_RELEASED,
                                    .name = w->name,
                                    .name_len = w->len,
                                    .owner = w->owner,
                                    .token = w->token,
                                    .count = w->count,
                                    .hold_us = held,
                                    .what = w->kind});
}

int dlock__obs_given(dlock_client_t *c, const dlock__obs_what *w,
                     int64_t since_us, int rc) {
  if (c->stats != NULL && rc == 0)
    count_given(c->stats, w, since_us);
  return rc;
}

/* ---- MultiLocks and RedLocks as wholes ---------------------------------- */

/* A composite is counted in its first part's client. */
static dlock_client_t *whole_client(const dlock_t *l) {
  return l->nsubs > 0 ? l->subs[0]->c : NULL;
}

void dlock__obs_parts(int enter) { parts.depth += enter ? 1 : -1; }

int64_t dlock__obs_whole_since(dlock_t *l, uint64_t owner) {
  dlock_client_t *wc = whole_client(l);
  if (wc == NULL || wc->stats == NULL)
    return 0;
  int64_t since = 0;
  for (size_t i = 0; i < l->nsubs; i++) {
    dlock_t *p = l->subs[i];
    pthread_mutex_lock(&p->c->mu);
    dlock__hold *h =
        dlock__holds_find(&p->c->holds, p->name, p->len, owner, p->kind->id);
    int count = h != NULL ? h->count : 0;
    /* The whole was held once its last part was taken. */
    if (count == 1 && h->held_us > since)
      since = h->held_us;
    pthread_mutex_unlock(&p->c->mu);
    if (count > 1)
      return 0;
  }
  return since;
}

int dlock__obs_whole_done(dlock_t *l, uint64_t owner, int release,
                          int64_t wait_ms, int64_t start_us, int waited,
                          int64_t since_us, int rc) {
  dlock_client_t *wc = whole_client(l);
  dlock__stats *st = wc != NULL ? wc->stats : NULL;
  if (st == NULL)
    return rc;
  dlock__obs_what w = {l->kind->id == DLOCK_RED ? DLOCK_STATS_REDLOCK
                                                : DLOCK_STATS_MULTILOCK,
                       l->subs[0]->name,
                       l->subs[0]->len,
                       owner,
                       0,
                       0};
  /* A released whole's record is gone: its event carries no token. */
  if (dlock__events_on(st) && !release && rc == 0)
    w.token = l->kind->token(l, owner);
  if (release) {
    if (rc == 0)
      count_given(st, &w, since_us);
    return rc;
  }
  return count_taken(st, &w, wait_ms, start_us, waited, rc);
}

int dlock__obs_whole_acquire(dlock_t *l, uint64_t owner, int64_t wait_ms,
                             int64_t lease_ms, int64_t deadline_us) {
  dlock_client_t *wc = whole_client(l);
  int64_t start_us = wc != NULL ? dlock__obs_begin(wc) : 0;
  int outer_waited = parts.waited;
  parts.waited = 0;
  dlock__obs_parts(1);
  int rc = l->kind->acquire(l, owner, wait_ms, lease_ms, deadline_us);
  dlock__obs_parts(0);
  int waited = parts.waited;
  parts.waited = outer_waited;
  return dlock__obs_whole_done(l, owner, 0, wait_ms, start_us, waited, 0, rc);
}

int dlock__obs_whole_release(dlock_t *l, uint64_t owner) {
  int64_t since_us = dlock__obs_whole_since(l, owner);
  dlock__obs_parts(1);
  int rc = l->kind->release(l, owner);
  dlock__obs_parts(0);
  return dlock__obs_whole_done(l, owner, 1, 0, 0, 0, since_us, rc);
}
