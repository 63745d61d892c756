/*
 * Where a connection finds its server when the address is not fixed: for a
 * redis-sentinel:// URL, the master the Sentinels name. The topology, a
 * layer above the link, answers through these calls, so that the link
 * never calls up into it.
 */
#ifndef DLOCK_LOCATOR_H
#define DLOCK_LOCATOR_H

#include <stdint.h>

#include "link/stream.h"

typedef struct dlock__locator {
  /* Connects to the server now in charge, by 'deadline_us', and gives a
   * stream past its handshake and the generation it was found in: 0, or
   * an error with its detail (DLOCK_ECANCELED at once when 'cancel' says
   * stop). */
  int (*open)(void *ctx, int64_t deadline_us, const dlock__cancel *cancel,
              dlock__stream **out, unsigned *gen);
  /* The generation now: it moves on when the server in charge changes,
   * and a connection made in an older one is replaced. */
  unsigned (*gen)(void *ctx);
  void *ctx;
} dlock__locator;

#endif
