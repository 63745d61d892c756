/*
 * Replica sync: every write that changes a lock is followed, in the same
 * round trip, by "WAIT n timeout", and the number of replicas that
 * acknowledged it is checked (see "Replicated Redis" in dlock.h).
 *
 * n is the client's replica_sync_replicas, or else the replicas the master
 * has in step, read from INFO replication: before the first write, after a
 * write that failed (the next connection may reach another master) or fell
 * short, and every second in the round trip of a write (the INFO rides
 * along after the WAIT, so it costs no round trip of its own). Through
 * Sentinel, n is what the Sentinels see (dlock__sentinel_replicas, only
 * from a Sentinel that names the master this client writes to), read
 * before the first write, after one that failed or fell short, and when
 * the master moved, or the master's own count when it is larger; and a
 * write is synced only when the master did not move between the count's
 * reading and the WAIT's answer.
 */
#ifndef DLOCK_REPLICA_H
#define DLOCK_REPLICA_H

#include <hiredis/hiredis.h>

#include "client.h"
#include "scripts.h"
#include "sync.h"

void dlock__sync_init(dlock__sync *s, const dlock_options_t *o);

/*
 * dlock__eval_run on the client's connection, followed by WAIT when the
 * client syncs with replicas; '*out' says whether they acknowledged. The
 * replies are as dlock__eval_run's: a write that fell short is still done
 * on the master, and the caller decides what that means. 'deadline_us' 0:
 * a command timeout plus the sync timeout from now.
 */
int dlock__eval_write(dlock_client_t *c, size_t n, const dlock__eval *calls,
                      redisReply **replies, int64_t deadline_us,
                      dlock__synced *out);

/* The same for a long round (dlock__eval_run_paced): the sync timeout is
 * added to 'idle_ms', as the WAIT at its end may be silent that long. */
int dlock__eval_write_paced(dlock_client_t *c, size_t n,
                            const dlock__eval *calls, redisReply **replies,
                            int64_t idle_ms, int64_t limit_us,
                            dlock__synced *out);

/*
 * The two halves of dlock__eval_write for one call on the client's own
 * connection (not a cluster), so that a caller can send to several
 * servers at once (a RedLock) and collect the replies as they come:
 * dlock__eval_send with the WAIT pipelined after it when the client syncs
 * with replicas. A send that returns an error sent nothing and is not
 * waited for; every other is followed by waits on the same 'p' and 'sc'
 * until one returns something else than DLOCK__CONN_AGAIN. The replica
 * count is the one dlock__eval_write uses; when it is not known (and the
 * client is not on Sentinel, whose count is read first), INFO rides after
 * the script instead of WAIT, and the WAIT follows in a round trip of its
 * own once the count is read, so that a server that does not answer holds
 * up no other server's send. The periodic INFO refresh rides only on
 * dlock__eval_write.
 */
typedef struct dlock__sync_call {
  int wanted;   /* the replicas the WAIT asks for; 0: no WAIT sent */
  unsigned gen; /* the Sentinel generation before the count */
  int64_t deadline_us;
  char *wait_cmd; /* the formatted WAIT (or INFO), or NULL */
  size_t wait_len;
} dlock__sync_call;

int dlock__eval_send_synced(dlock_client_t *c, const dlock__eval *call,
                            dlock__pending *p, dlock__sync_call *sc);
int dlock__eval_wait_synced_until(dlock_client_t *c, const dlock__eval *call,
                                  dlock__pending *p, dlock__sync_call *sc,
                                  redisReply **reply, int64_t until_us,
                                  dlock__synced *out);

/* The command that waits for 'n' replicas after a write of 'c',
 * formatted into '*cmd' (freed with dlock__format_free): "WAIT n
 * timeout", or with DLOCK_SYNC_ANY on a master with AOF on "WAITAOF 1 n
 * timeout", as Redisson sends. Its length, or -1 out of memory. */
int dlock__sync_format_wait(dlock_client_t *c, int n, char **cmd);

/* What the answer 'w' to that command (NULL: none) says of a write that
 * waited for 'wanted' replicas: '*out's wanted, acked and ok. ok needs
 * them all, or with DLOCK_SYNC_ANY one of them. */
void dlock__sync_judge(const dlock__sync *s, const redisReply *w, int wanted,
                       dlock__synced *out);

/* DLOCK_ENOSYNC with a detail naming 'what' and lock 'name'. */
int dlock__sync_fail(const dlock_client_t *c, const dlock__synced *s,
                     const char *what, const char *name, size_t len);

/* The replicas a write of 'c' waits for now, reading them first when they
 * are not known: >= 0, or a negative code when Redis does not answer. */
int dlock__sync_wanted(dlock_client_t *c);

#endif
