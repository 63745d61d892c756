/*
 * Replica sync's settings and what one synced write found: the client
 * keeps the first, the engine's writes (engine/replica.h) report the
 * second. The rules are in engine/replica.h.
 */
#ifndef DLOCK_SYNC_H
#define DLOCK_SYNC_H

#include <stddef.h>
#include <stdint.h>

#include "dlock.h"

typedef struct dlock__sync {
  int on;    /* replica_sync */
  int fixed; /* replica_sync_replicas: N > 0, or 0 for those in step */
  /* replica_sync_mode DLOCK_SYNC_ANY: one acknowledgement is enough, and
   * a master with AOF on is asked with WAITAOF (Redisson's rule). */
  int any;
  int64_t timeout_ms;
  /* The replicas in step, when 'fixed' is 0, are counted by the client's
   * routing (dlock__route_replicas, route.h), by the rules above. */
} dlock__sync;

/* What one synced write found. */
typedef struct dlock__synced {
  int ok;     /* 1: enough replicas acknowledged (or none was asked for) */
  int acked;  /* how many did */
  int wanted; /* how many were asked for */
  int moved;  /* through Sentinel: the master moved meanwhile (not ok) */
} dlock__synced;

#endif
