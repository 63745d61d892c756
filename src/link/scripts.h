/*
 * The Lua scripts (the files in src/lua, embedded at build time with their
 * SHA-1) and how they are run: EVALSHA first, and EVAL with the body when Redis
 * answers NOSCRIPT (after SCRIPT FLUSH, a restart or a failover), which also
 * loads it for next time. Names and owner ids only ever travel as KEYS and
 * ARGV, never inside script text.
 */
#ifndef DLOCK_SCRIPTS_H
#define DLOCK_SCRIPTS_H

#include <hiredis/hiredis.h>
#include <stddef.h>

#include "conn.h"

typedef struct dlock__script {
  const char *name;
  const char *body;
  size_t len;
  const char *sha; /* 40 lowercase hex digits */
  /* The same script publishing with SPUBLISH where it publishes with
   * PUBLISH (a cluster with sharded pub/sub), or NULL when it publishes
   * nothing. */
  const struct dlock__script *sharded;
} dlock__script;

extern const dlock__script dlock__script_acquire;
extern const dlock__script dlock__script_release;
extern const dlock__script dlock__script_handover;
extern const dlock__script dlock__script_renew;
extern const dlock__script dlock__script_force_release;
extern const dlock__script dlock__script_renew_read;
extern const dlock__script dlock__script_fair_acquire;
extern const dlock__script dlock__script_fair_release;
extern const dlock__script dlock__script_fair_leave;
extern const dlock__script dlock__script_fair_force_release;
extern const dlock__script dlock__script_read_acquire;
extern const dlock__script dlock__script_read_release;
extern const dlock__script dlock__script_write_acquire;
extern const dlock__script dlock__script_write_release;
extern const dlock__script dlock__script_raise_token;

/* One script call: its script, and its keys and arguments as byte strings. */
typedef struct dlock__eval {
  const dlock__script *script;
  int nkeys;
  int nargs;
  const char **argv; /* nkeys keys, then nargs arguments */
  const size_t *lens;
} dlock__eval;

/*
 * Runs 'n' script calls in one pipelined round and stores their replies in
 * 'replies'. Returns 0 when every reply is a non-error reply (owned by the
 * caller), else the first failure's code with every reply freed: a Redis
 * error reply becomes DLOCK_ESERVER or DLOCK_EAUTH with its text as the
 * detail. 'deadline_us' as for dlock__conn_call.
 */
int dlock__eval_run(dlock__conn *conn, size_t n, const dlock__eval *calls,
                    redisReply **replies, int64_t deadline_us);

/* dlock__eval_run for a long round (the watchdog's renewals): it fails
 * only when the connection delivers no reply for 'idle_ms', or at
 * 'limit_us' (see dlock__conn_send_paced). */
int dlock__eval_run_paced(dlock__conn *conn, size_t n, const dlock__eval *calls,
                          redisReply **replies, int64_t idle_ms,
                          int64_t limit_us);

/*
 * dlock__eval_run (paced when 'idle_ms' > 0, see dlock__eval_run_paced)
 * with the 'ntail' formatted commands 'tail' sent after the calls in the
 * same pipeline, and again after the scripts reloaded on NOSCRIPT, so that
 * they always follow the writes they are to cover (replica sync's WAIT).
 * On 0, 'tail_replies' holds their replies (of the last round), owned by
 * the caller; on failure they are NULL. With 'keep', the error replies of
 * a cluster that say "not here" or "not now" (dlock__redirect_kind) stay
 * in 'replies' for the caller (the cluster topology) to act on, where any
 * other error reply fails the round as usual.
 */
int dlock__eval_run_tail(dlock__conn *conn, size_t n, const dlock__eval *calls,
                         redisReply **replies, int64_t deadline_us,
                         int64_t idle_ms, size_t ntail, const char *const *tail,
                         const size_t *tail_lens, redisReply **tail_replies,
                         int keep);

/* What a cluster's error reply asks for: a slot that moved for good
 * (MOVED), one being moved (ASK: ASKING, then the command, once, on the
 * node named), or a moment's patience (TRYAGAIN, CLUSTERDOWN). 0 for any
 * other reply. */
#define DLOCK__REDIRECT_MOVED 1
#define DLOCK__REDIRECT_ASK 2
#define DLOCK__REDIRECT_RETRY 3
int dlock__redirect_kind(const redisReply *r);

/* Formats one call as EVALSHA, or as EVAL with the body ('with_body'). 0
 * or DLOCK_ENOMEM; the command is freed with dlock__format_free. */
int dlock__eval_format(const dlock__eval *e, int with_body, char **cmd,
                       size_t *len);

/*
 * One script call in two halves, so that a caller can send to several
 * servers before waiting for any (RedLock). The wait reloads the script on
 * NOSCRIPT and turns error replies into codes, like dlock__eval_run.
 * Every send must be followed by a wait on the same 'p'.
 */
int dlock__eval_send(dlock__conn *conn, const dlock__eval *call,
                     int64_t deadline_us, dlock__pending *p);
int dlock__eval_wait(dlock__conn *conn, const dlock__eval *call,
                     dlock__pending *p, redisReply **reply,
                     int64_t deadline_us);

/* dlock__eval_wait until 'until_us' at most: DLOCK__CONN_AGAIN when it
 * passes before the reply came (see dlock__conn_wait_until); wait again. */
int dlock__eval_wait_until(dlock__conn *conn, const dlock__eval *call,
                           dlock__pending *p, redisReply **reply,
                           int64_t deadline_us, int64_t until_us);

/*
 * dlock__eval_send followed, in the same pipeline, by 'ntail' (1..3) plain
 * commands already formatted (replica sync's WAIT), which must stay valid
 * until the wait below is done; and its wait, which also gives the tail's
 * replies (the caller's, NULL on failure). On NOSCRIPT the script is run
 * again with its body, the tail again after it: a WAIT must come after the
 * write it is to cover.
 */
int dlock__eval_send_tail(dlock__conn *conn, const dlock__eval *call,
                          int64_t deadline_us, size_t ntail, char *const *tail,
                          const size_t *tail_lens, dlock__pending *p);
int dlock__eval_wait_tail_until(dlock__conn *conn, const dlock__eval *call,
                                dlock__pending *p, redisReply **reply,
                                int64_t deadline_us, int64_t until_us,
                                size_t ntail, char *const *tail,
                                const size_t *tail_lens,
                                redisReply **tail_replies);

#endif
