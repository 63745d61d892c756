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

int64_t dlock__obs_start(const dlock_t *l) {
  return stats_of(l) != NULL ? dlock__now_us() : 0;
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
  dlock__obs_hold o = {0, 0, 0, 0};
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
  if (h->count == 0 || count == 1)
    h->held_us = dlock__now_us();
  if (count > 1)
    dlock__stat(c->stats, DLOCK__ST_REENTRANT);
}

void dlock__obs_hold_ends(dlock_client_t *c, const dlock__hold *h) {
  if (c->stats == NULL)
    return;
  dlock__stat(c->stats, DLOCK__ST_RELEASED);
  if (h->held_us != 0)
    dlock__stat_time(c->stats, DLOCK__H_HOLD, dlock__now_us() - h->held_us);
}

void dlock__obs_peek(dlock_t *l, uint64_t owner, dlock__obs_hold *o) {
  memset(o, 0, sizeof(*o));
  if (dlock__events_on(stats_of(l)))
    look_up(l, owner, o);
}

int dlock__obs_unlocked(dlock_t *l, uint64_t owner, const dlock__obs_hold *o,
                        int rc) {
  dlock__stats *st = stats_of(l);
  if (st == NULL || rc != 0)
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
