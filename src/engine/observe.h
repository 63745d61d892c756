/*
 * The engine's statistics and events (observe.c): each place in the engine
 * where something worth counting happens calls one of these, so that the
 * files that run locks carry one line per thing counted. With the client's
 * statistics off and no on_event, each call returns at its first test.
 */
#ifndef DLOCK_OBSERVE_H
#define DLOCK_OBSERVE_H

#include "client.h"
#include "lock.h"
#include "sync.h"

/* The start of an acquisition, to be passed to dlock__obs_acquired: the
 * time, or 0 when nothing is counted (the clock is not read then), or -1
 * for a composite's part started inside dlock__obs_parts(1) and (0): it
 * is counted with its whole, not alone. */
int64_t dlock__obs_start(const dlock_t *l);

/* Counts the acquisition of single lock 'l' by 'owner' begun at 'start_us'
 * (dlock__obs_start) with 'wait_ms', which ended with 'rc' after waiting
 * or not ('waited'), and raises its events. Returns 'rc'. */
int dlock__obs_acquired(dlock_t *l, uint64_t owner, int64_t wait_ms,
                        int64_t start_us, int waited, int rc);

/* A hold is recorded from an acquisition whose reply said 'count' (the
 * hold table's mutex held): marks when a first hold began, now (not when
 * the attempt was sent: a hand-over is recorded with the time of the
 * waiter's last attempt, which would count its wait as held), and counts
 * a reentrant one. */
void dlock__obs_recorded(dlock_client_t *c, dlock__hold *h, int64_t count);

/* The owner's last hold 'h' is leaving the hold table after a release
 * (mutex held): counts it, with how long it was held. */
void dlock__obs_hold_ends(dlock_client_t *c, const dlock__hold *h);

/* What an unlock needs of the hold for its event, read before the release
 * (only when events are on). */
typedef struct dlock__obs_hold {
  int found;
  int part; /* released as a composite's part: not counted alone */
  int count;
  uint64_t token;
  int64_t held_us;
} dlock__obs_hold;

void dlock__obs_peek(dlock_t *l, uint64_t owner, dlock__obs_hold *o);

/* Counts an unlock of 'l' that ended with 'rc' and raises the release's
 * event when it gave back the owner's last hold. Returns 'rc'. */
int dlock__obs_unlocked(dlock_t *l, uint64_t owner, const dlock__obs_hold *o,
                        int rc);

/* A hold of lock 'name' by 'owner' was found lost (no lock held). */
void dlock__obs_lost(dlock__stats *st, const char *name, size_t len,
                     uint64_t owner);

/* A watchdog round of 'n' holds ended with 'rc'; 'renewed' says (1/0)
 * which of them Redis renewed. */
void dlock__obs_round(dlock_client_t *c, int rc, const unsigned char *renewed,
                      size_t n);

/* A write was followed by WAIT and 's' says how it went. */
void dlock__obs_synced(dlock_client_t *c, const dlock__synced *s);

/* ---- semaphores, expirable permits and latches ------------------------- */

/* What such an acquisition or release is of, for its counts and events:
 * 'kind' a dlock_stats_kind_t other than DLOCK_STATS_LOCK; 'owner' and
 * 'token' an expirable permit's; 'count' a semaphore's permits. */
typedef struct dlock__obs_what {
  int kind;
  const char *name;
  size_t len;
  uint64_t owner, token, count;
} dlock__obs_what;

/* As dlock__obs_start, for an object of client 'c'. */
int64_t dlock__obs_begin(dlock_client_t *c);

/* Counts an acquisition of 'w' on client 'c' begun at 'start_us'
 * (dlock__obs_begin) with 'wait_ms', which ended with 'rc' after waiting
 * or not ('waited'), and raises its events. Returns 'rc'. */
int dlock__obs_taken(dlock_client_t *c, const dlock__obs_what *w,
                     int64_t wait_ms, int64_t start_us, int waited, int rc);

/* Counts a release of 'w' that ended with 'rc', of what was held since
 * 'since_us' (0: no hold time), and raises its event. Returns 'rc'. */
int dlock__obs_given(dlock_client_t *c, const dlock__obs_what *w,
                     int64_t since_us, int rc);

/* ---- MultiLocks and RedLocks as wholes ---------------------------------- */

/*
 * A composite is counted once, as a whole, in the statistics of its first
 * part's client, where the public verbs hand it to its kind; its parts'
 * own acquisitions and releases are not counted as single locks'. The
 * blocking verbs go through these two, which run the kind's acquire or
 * release with the parts' counting switched off on the calling thread.
 */
int dlock__obs_whole_acquire(dlock_t *l, uint64_t owner, int64_t wait_ms,
                             int64_t lease_ms, int64_t deadline_us);
int dlock__obs_whole_release(dlock_t *l, uint64_t owner);

/* The async verbs start their parts' operations between
 * dlock__obs_parts(1) and dlock__obs_parts(0), which mark them as parts
 * (dlock__obs_start, dlock__obs_peek), and count the whole when it ends
 * with dlock__obs_whole_done. */
void dlock__obs_parts(int enter);

/* When 'owner' began holding composite 'l', if its next release lets go
 * of its parts (none held more than once); else, or when nothing is
 * counted, 0. Read before the release. */
int64_t dlock__obs_whole_since(dlock_t *l, uint64_t owner);

/* Counts the end of a composite's acquisition ('release' 0: begun at
 * 'start_us', dlock__obs_begin of its first part's client, with 'wait_ms',
 * 'waited' when a part had to be waited for) or of its release
 * ('release' 1: held since 'since_us'), with 'rc', and raises its events.
 * Returns 'rc'. */
int dlock__obs_whole_done(dlock_t *l, uint64_t owner, int release,
                          int64_t wait_ms, int64_t start_us, int waited,
                          int64_t since_us, int rc);

#endif
