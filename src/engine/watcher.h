/*
 * A thread that drives a Sentinel watcher (see dlock__sentinel_watch_step)
 * for a client, so that failovers are followed as they are announced.
 */
#ifndef DLOCK_WATCHER_H
#define DLOCK_WATCHER_H

#include "sentinel.h"

typedef struct dlock__watcher dlock__watcher;

/* Starts the thread stepping the watcher of 's'. 0, DLOCK_EIO or
 * DLOCK_ENOMEM. */
int dlock__watcher_start(dlock__sentinel *s, dlock__watcher **out);

/* Stops the thread (the watcher's callback is not called any more),
 * closes the watcher's connection and frees 'w'. NULL is ignored. */
void dlock__watcher_stop(dlock__watcher *w);

#endif
