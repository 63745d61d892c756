/*
 * The engine's one back-off policy (see dlock__backoff in engine.h): the
 * pauses of the spin lock between its attempts, of a call riding out an
 * outage, of an unlock sent again, of the settling of unknown outcomes
 * and of a call that a cluster refused for now (TRYAGAIN) differ only in their
 * first pause, their longest, and whether they wait for the connection's own
 * reconnect back-off.
 */
#include "engine.h"

#include "error.h"
#include "monotime.h"
#include "sleep.h"

#include <stdio.h>

int64_t dlock__backoff_next(dlock_client_t *c, dlock__backoff *b,
                            int64_t now_us, int64_t until_us) {
  int64_t base_us = b->first_us
                    << (b->step < b->max_step ? b->step : b->max_step);
  if (b->step < b->max_step)
    b->step++;
  /* Jitter keeps clients that retry the same lock or server from doing so
   * in lockstep (unless the policy asks for exact pauses). */
  int64_t at =
      b->exact ? now_us + base_us
               : now_us + base_us / 2 +
                     (int64_t)(dlock__jitter() % (uint64_t)(base_us / 2 + 1));
  if (b->after_reconnect) {
    int64_t reconnect_at = dlock__route_retry_at(&c->route);
    if (reconnect_at > at)
      at = reconnect_at;
  }
  return at < until_us ? at : until_us;
}

int dlock__backoff_pause(dlock_client_t *c, dlock__backoff *b,
                         int64_t until_us) {
  int64_t now = dlock__now_us();
  dlock__sleep_us(dlock__backoff_next(c, b, now, until_us) - now);
  return dlock__check_canceled(c);
}

int dlock__busy_pause(dlock_client_t *c, int *step, int64_t until_us) {
  dlock__backoff b = DLOCK__BACKOFF_BUSY;
  b.step = *step;
  int64_t now = dlock__now_us();
  int64_t at = dlock__backoff_next(c, &b, now, INT64_MAX);
  /* A pause cut short by the deadline would only send the call again to
   * be refused once more: the caller says the cluster is still busy. */
  if (at >= until_us)
    return DLOCK_ETIMEDOUT;
  *step = b.step;
  dlock__sleep_us(at - now);
  return dlock__check_canceled(c);
}

int64_t dlock__outage_plan(dlock_client_t *c, dlock__riding *r,
                           int64_t until_us) {
  int64_t now = dlock__now_us();
  if (r->until_us == 0) {
    r->first_us = now;
    r->until_us = until_us;
  }
  if (now >= r->until_us)
    return 0;
  snprintf(r->why, sizeof(r->why), "%s", dlock_last_error());
  r->tries++;
  dlock__backoff b = DLOCK__BACKOFF_OUTAGE;
  b.step = r->step;
  int64_t at = dlock__backoff_next(c, &b, now, r->until_us);
  r->step = b.step;
  return at;
}

int dlock__outage_next(dlock_client_t *c, dlock__riding *r, int rc,
                       int64_t until_us) {
  int64_t at = dlock__outage_plan(c, r, until_us);
  if (at == 0)
    return rc;
  dlock__sleep_us(at - dlock__now_us());
  int prc = dlock__check_canceled(c);
  if (prc != 0) {
    r->tries = 0; /* canceled: that is the news, not the ride */
    return prc;
  }
  if (dlock__now_us() >= r->until_us)
    /* No time for another attempt: the last error stands. */
    return dlock__fail_text(rc, r->why);
  return 0;
}

int64_t dlock__outage_until(dlock_client_t *c, int64_t wait_ms,
                            int64_t deadline_us) {
  return wait_ms == DLOCK_WAIT_FOREVER
             ? dlock__after_ms(dlock__now_us(), c->opt.outage_wait_ms)
             : deadline_us;
}

int dlock__outage_end(const dlock__riding *r, int rc) {
  if (r->tries == 0)
    return rc;
  char why[300];
  snprintf(why, sizeof(why), "%s", dlock_last_error());
  return dlock__fail(rc, "%s (tried %d more times over %lld ms)", why, r->tries,
                     (long long)((dlock__now_us() - r->first_us) / 1000));
}
