/*
 * Finding the master through Sentinel.
 *
 * A client opened with a redis-sentinel:// URL has one of these; its
 * command and pub/sub connections ask it for a stream to the current
 * master at every (re)connect (dlock__sentinel_open):
 *
 *  - the master last known (from the Sentinels or from +switch-master) is
 *    tried first; otherwise, or when it is not a master any more, the
 *    Sentinels are asked in turn, starting with the last one that
 *    answered, with SENTINEL GET-MASTER-ADDR-BY-NAME; one that is down or
 *    does not know the name is passed over for the next;
 *  - the address found is confirmed with ROLE on the new connection
 *    itself, so that nothing is ever written to a replica that a stale
 *    Sentinel still names (it is passed over too);
 *  - a thread stays subscribed to +switch-master on one Sentinel (the next
 *    when it goes), so that a failover is known at once, not at the next
 *    error: the generation (dlock__sentinel_gen) moves on, a connection
 *    made in an older generation is replaced at its next use, and the
 *    client's callback wakes the pub/sub thread to replace its own.
 */
#ifndef DLOCK_SENTINEL_H
#define DLOCK_SENTINEL_H

#include <stdint.h>

#include "link/stream.h"
#include "url.h"

typedef struct dlock__sentinel dlock__sentinel;

/* Called from the watcher thread after the master moved. */
typedef void (*dlock__sentinel_cb)(void *data);

/*
 * Takes over 'url' (zeroed on return, whatever the outcome) and makes the
 * discovery; nothing is connected yet. The timeouts are those of every
 * connection to a Sentinel or a data node; 'tls' (the caller's, kept until
 * dlock__sentinel_free) is used for every endpoint of 'url' whose tls is
 * set. 0 or DLOCK_ENOMEM.
 */
int dlock__sentinel_new(dlock__sentinel_url *url, const dlock__tls *tls,
                        int64_t connect_timeout_ms, int64_t command_timeout_ms,
                        dlock__sentinel **out);

/* Starts the +switch-master watcher, which calls 'cb' after each switch
 * of the master it follows. 0 or DLOCK_ENOMEM. */
int dlock__sentinel_watch(dlock__sentinel *s, dlock__sentinel_cb cb,
                          void *data);

/*
 * Opens a stream to the current master (handshake done, the data nodes'
 * password and db applied), confirmed with ROLE, by 'deadline_us'. '*gen'
 * is the generation it belongs to. DLOCK_EIO, with every Sentinel's and
 * node's reason in the detail, when no confirmed master was found;
 * DLOCK_EAUTH when a password was refused; DLOCK_ECANCELED as soon as
 * 'cancel' (NULL: never) says stop, whatever server it waits for.
 */
int dlock__sentinel_open(dlock__sentinel *s, int64_t deadline_us,
                         const dlock__cancel *cancel, dlock__stream **out,
                         unsigned *gen);

/*
 * How many replicas of the master the Sentinels list and do not flag down
 * (SENTINEL REPLICAS, asked of the Sentinels in turn): what replica sync
 * waits for in a Sentinel deployment. Unlike the master's own INFO, it
 * does not drop when a failover takes replicas away from a master that is
 * being replaced, whose writes those replicas will never have.
 */
int dlock__sentinel_replicas(dlock__sentinel *s, int64_t deadline_us, int *out);

/* The replicas replica sync waits for, from a SENTINEL REPLICAS reply: those
 * not flagged down that say they are replicas, and the one a failover under
 * way is promoting. */
int dlock__sentinel_count_replicas(const redisReply *r);

/* The current generation: it moves on each time the master changes. */
unsigned dlock__sentinel_gen(dlock__sentinel *s);

/* 1 once a Sentinel has named a master: a failure to reach it since is an
 * outage that passes (the master died and is being replaced), not a URL
 * that never worked (no Sentinel answers, none knows the name). */
int dlock__sentinel_named(dlock__sentinel *s);

/* The master last known, as "host:port" ("?" before the first). */
void dlock__sentinel_describe(dlock__sentinel *s, char *buf, size_t n);

/* Stops the watcher (the callback is not called any more). NULL is
 * ignored; so is a second call. */
void dlock__sentinel_stop(dlock__sentinel *s);

/* Stops the watcher and frees 's'. NULL is ignored. */
void dlock__sentinel_free(dlock__sentinel *s);

#endif
