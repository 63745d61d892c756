/*
 * Inside the composite locks: what the MultiLock and the RedLock share
 * (multi.c: making a composite, each owner's record of token and depth,
 * riding an outage, the queries), and the parallel per-server rounds in
 * which a MultiLock tries and gives back its parts (batch.c). The RedLock
 * (redlock.c) uses the first; it sends to its nodes itself, and says
 * whether its unlock has anything to ask them. The rules over
 * the parts' outcomes, which the async composites (async_multi.c) share,
 * are in quorum.c.
 */
#ifndef DLOCK_COMPOSITE_H
#define DLOCK_COMPOSITE_H

#include "engine.h"

#include <stdint.h>

/* ---- multi.c: what both kinds share ------------------------------------ */

/* A composite of 'kind' over the handles 'locks' (not owned), in '*out'. */
int dlock__composite_new(dlock_t *const *locks, size_t n,
                         const dlock__kind *kind, dlock_t **out);

/* 1 when 'owner' has a record of any part: a new acquisition is then a
 * reentrant one. */
int dlock__holds_any_part(dlock_t *l, uint64_t owner);

/* Records a composite acquisition ('fresh': no part was held before, so
 * any older record is stale); if even that fails, gives it back. */
int dlock__record_composite(dlock_t *l, uint64_t owner, int fresh);

/* Drops one acquisition of 'owner' from its record ('all': the whole
 * record, whatever its depth); the record goes with the last. */
void dlock__drop_composite(dlock_t *l, uint64_t owner, int all);

/* Whether an acquisition whose last attempt failed with 'rc', an error an
 * outage causes, tries again: 0 after the pause (the outage back-off,
 * dlock__outage_next), else -1 (no wait, riding switched off, out of
 * time, or canceled; the caller says what failed). */
int dlock__ride_on(dlock_client_t *c, int64_t wait_ms, int64_t deadline_us,
                   dlock__riding *ride, int rc);

/* The verbs of a dlock__kind that both composite kinds share. */
int dlock__composite_force(dlock_t *l);
int dlock__composite_query(dlock_t *l, uint64_t owner, int what, int64_t *out);
uint64_t dlock__composite_token(dlock_t *l, uint64_t owner);

/* A composite kind: its own acquisition and release, the rest shared. */
#define DLOCK__COMPOSITE_KIND(ID, ACQUIRE, RELEASE)                            \
  {                                                                            \
    .id = (ID), .release = (RELEASE), .force_release = dlock__composite_force, \
    .acquire = (ACQUIRE), .query = dlock__composite_query,                     \
    .token = dlock__composite_token, .dispose = dlock__composite_free          \
  }

/* ---- redlock.c --------------------------------------------------------- */

/* Before a RedLock's unlock by 'owner': 0 when it took a part here, else
 * DLOCK_ENOTHELD (said at once, and any stale record of 'owner' dropped). */
int dlock__red_unlock_known(dlock_t *l, uint64_t owner);

/* ---- batch.c: a MultiLock's parts, every server's at once --------------- */

/*
 * One attempt, without waiting, on every part not held yet ('held'),
 * every server's at once. 0 when all are held afterwards; else the code
 * of the first part (in order) that failed, DLOCK_ETIMEDOUT when another
 * owner holds it, with its index in '*busy' and its detail as the last
 * error. Parts that cannot go in parallel are tried one after the other
 * (after those that can), up to the first failure.
 */
int dlock__attempt_all(dlock_t *l, uint64_t owner, int64_t lease_ms,
                       unsigned char *held, size_t *busy);

/* Releases the parts marked in 'which' (all when NULL), every server's at
 * once, each part's outcome in 'state' (as dlock_unlock_as's, or
 * another code for a part not asked). */
void dlock__release_each(dlock_t *l, uint64_t owner, const unsigned char *which,
                         int *state);

/* Releases the parts marked in 'held' (every server's at once) and clears
 * the marks; the first failure's code, or 0. */
int dlock__release_parts(dlock_t *l, uint64_t owner, unsigned char *held);

/* ---- quorum.c: the rules over the parts' outcomes ------------------------ */

/* How many of a RedLock's 'n' nodes make a majority. */
size_t dlock__red_quorum(size_t n);

/* How long a RedLock whose round started at 'start_us' stays valid: the
 * lease its nodes keep (the watchdog's for DLOCK_WATCHDOG), less the time
 * spent asking and an allowance for clock drift. */
int64_t dlock__red_validity_ms(const dlock_t *l, int64_t lease_ms,
                               int64_t start_us);

/* A RedLock round's verdict, of 'n' nodes of which 'answered' said granted
 * or taken and 'granted' granted: 0 held (a majority within the
 * validity), DLOCK_ENOQUORUM (too few answered) or DLOCK_ETIMEDOUT (not a
 * majority), with the failure's detail in 'detail'. */
int dlock__red_round_verdict(size_t n, size_t answered, size_t granted,
                             int64_t validity_ms, char *detail, size_t len);

/* The random pause before a RedLock's next round, in ms: 'rounds' so far,
 * 'jitter' a random number, never past 'ttl_ms' (a holder's lease, -1:
 * not known). */
int64_t dlock__red_retry_ms(int rounds, uint64_t jitter, int64_t ttl_ms);

/* A RedLock's unlock over 'n' nodes, of which 'ok' released it, 'lost'
 * had lost it and 'failed' did not answer: 0 when a majority released
 * it, else DLOCK_ENOTHELD, DLOCK_ELOST or DLOCK_ENOQUORUM with the
 * detail. */
int dlock__red_unlock_outcome(size_t n, size_t ok, size_t lost, size_t failed);

/* Whether a MultiLock round that failed with 'err' waits for the part
 * taken by another owner (holding nothing meanwhile): a part was taken,
 * and there is time left. */
int dlock__multi_waits_for_part(int err, int64_t wait_ms, int64_t deadline_us);

/* A MultiLock's unlock over 'n' parts, of which 'lost' had been lost and
 * 'notheld' were not held, when no part failed otherwise: 0, DLOCK_ELOST
 * or DLOCK_ENOTHELD with the detail. */
int dlock__multi_unlock_outcome(size_t n, size_t lost, size_t notheld);

#endif
