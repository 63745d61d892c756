/*
 * The client's record of the locks its owners hold: hold count, fencing
 * token, lease and whether the watchdog renews it. Redis is the truth; this
 * table is what lets the client renew in batches, answer dlock_token()
 * without a round trip, and tell "lost" apart from "never held".
 * Not thread-safe: the client's mutex guards it.
 */
#ifndef DLOCK_HOLDS_H
#define DLOCK_HOLDS_H

#include <stddef.h>
#include <stdint.h>

typedef struct dlock__hold {
  struct dlock__hold *next; /* bucket chain */
  uint64_t hash;
  char *name; /* lock name, NUL-terminated copy */
  size_t name_len;
  uint64_t owner;
  int kind;             /* the dlock_kind_t of the handle that took it */
  int count;            /* hold count as last reported by Redis */
  uint64_t token;       /* fencing token of this hold */
  int64_t lease_ms;     /* lease sent with the acquisition */
  int watchdog;         /* renewed in the background */
  int lost;             /* found gone; 'count' unlocks left to report it */
  int abandoned;        /* its last unlock failed: finish it before reuse */
  int releasing;        /* an unlock is in flight: "not renewed" is expected */
  int64_t confirmed_us; /* when Redis last confirmed it (send time) */
  uint64_t seq;         /* tells a re-acquired hold from the one it replaced */
  int64_t held_us;      /* when its first hold began (statistics), or 0 */
  int obs_part; /* taken as a composite's part: counted with the whole */
} dlock__hold;

typedef struct dlock__holds {
  dlock__hold **buckets;
  size_t nbuckets; /* a power of two */
  size_t count;
  uint64_t next_seq;
} dlock__holds;

void dlock__holds_init(dlock__holds *h);
void dlock__holds_clear(dlock__holds *h);

/* Holds are keyed by (name, owner, kind): the owner of a read-write lock
 * may hold its read and its write side at once. */
dlock__hold *dlock__holds_find(const dlock__holds *h, const char *name,
                               size_t len, uint64_t owner, int kind);

/* Finds the hold or adds a zeroed one (with a fresh seq); NULL on ENOMEM. */
dlock__hold *dlock__holds_put(dlock__holds *h, const char *name, size_t len,
                              uint64_t owner, int kind);

void dlock__holds_remove(dlock__holds *h, dlock__hold *hold);

/* Removes every hold for which 'pred' returns non-zero. */
void dlock__holds_remove_if(dlock__holds *h,
                            int (*pred)(const dlock__hold *, void *),
                            void *arg);

/* Calls 'fn' for every hold; 'fn' must not add or remove holds. */
void dlock__holds_each(dlock__holds *h, void (*fn)(dlock__hold *, void *),
                       void *arg);

#endif
