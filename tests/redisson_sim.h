/*
 * A stand-in for a Java service using Redisson, for the compatibility
 * tests: the Lua scripts below do what Redisson's RLock, RFairLock,
 * RReadWriteLock and RSpinLock do to Redis (the same keys, fields,
 * channels, messages and deadline arithmetic, as its documentation and
 * source describe them), written afresh for these tests, and run with
 * EVAL over a plain hiredis connection. The clock a Java client passes to
 * its fair-lock scripts is the JVM's wall clock: here CLOCK_REALTIME plus
 * a skew the test may set.
 *
 * Layout (a name without '{' gets braces as a hash tag):
 *   lock hash NAME                      "<client-id>:<thread>" -> count
 *   redisson_lock__channel:{NAME}       "0" on unlock
 *   redisson_unlock_latch:{NAME}:<req>  the answer of an unlock, deleted by
 *                                       the client once the reply is in
 *   redisson_lock_queue:{NAME}          fair queue (list)
 *   redisson_lock_timeout:{NAME}        fair deadlines (zset, JVM ms)
 *   redisson_lock__channel:{NAME}:<f>   the head fair waiter's wake-up
 *   {NAME}:<field>:rwlock_timeout:<n>   one key per read hold
 *   redisson_rwlock:{NAME}              "0" read unlock, "1" write unlock
 *
 * Everything is static inline; failures end the test through ASSERT.
 */
#ifndef DLOCK_TESTS_REDISSON_SIM_H
#define DLOCK_TESTS_REDISSON_SIM_H

#include <stdatomic.h>
#include <time.h>

#include "lock_util.h"

/* Redisson's defaults. */
#define RS_WATCHDOG_MS 30000
#define RS_FAIR_WAIT_MS 300000

typedef struct rs_client {
  redisContext *r;
  char id[64];     /* Redisson's per-client UUID */
  int64_t skew_ms; /* added to this host's wall clock */
  /* Publish with SPUBLISH, as Redisson's scripts do on a cluster where
   * its start-up probe found sharded pub/sub (its getPublishCommand()). */
  int sharded;
  atomic_uint_fast64_t seq;
} rs_client_t;

static inline rs_client_t *rs_client_new(const rp_server_t *s, const char *id) {
  rs_client_t *c = calloc(1, sizeof(*c));
  ASSERT_NOT_NULL(c);
  c->r = lu_connect(s);
  ASSERT_NOT_NULL(c->r);
  snprintf(c->id, sizeof(c->id), "%s", id);
  atomic_init(&c->seq, 1);
  return c;
}

static inline void rs_client_free(rs_client_t *c) {
  if (c == NULL)
    return;
  redisFree(c->r);
  free(c);
}

/* The JVM's System.currentTimeMillis(). */
static inline int64_t rs_wall_ms(const rs_client_t *c) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + c->skew_ms;
}

/* "<client-id>:<thread>" */
static inline void rs_field(const rs_client_t *c, long thread, char *buf,
                            size_t n) {
  snprintf(buf, n, "%s:%ld", c->id, thread);
}

/* Runs 'script' with 'nkeys' keys then 'nargv' arguments, all strings, in
 * 'args'. */
static inline redisReply *rs_eval(rs_client_t *c, const char *script, int nkeys,
                                  int nargv, const char **args) {
  const char *argv[24];
  char nk[8];
  int nargs = nkeys + nargv;
  ASSERT_LT(nargs, 20);
  snprintf(nk, sizeof(nk), "%d", nkeys);
  /* Redisson passes the publish command to its scripts; the stand-in's
   * scripts name PUBLISH, which becomes SPUBLISH here when sharded. */
  char *text = NULL;
  if (c->sharded) {
    static const char from[] = "redis.call('publish'";
    text = malloc(strlen(script) * 2 + 1);
    ASSERT_NOT_NULL(text);
    char *o = text;
    for (const char *p = script; *p;) {
      if (strncmp(p, from, sizeof(from) - 1) == 0) {
        o += sprintf(o, "redis.call('spublish'");
        p += sizeof(from) - 1;
      } else {
        *o++ = *p++;
      }
    }
    *o = '\0';
  }
  argv[0] = "EVAL";
  argv[1] = text != NULL ? text : script;
  argv[2] = nk;
  for (int i = 0; i < nargs; i++)
    argv[3 + i] = args[i];
  redisReply *rep = redisCommandArgv(c->r, 3 + nargs, argv, NULL);
  free(text);
  ASSERT_NOT_NULL(rep);
  if (rep->type == REDIS_REPLY_ERROR) {
    fprintf(stderr, "Redisson stand-in script failed: %s\n", rep->str);
    ASSERT(rep->type != REDIS_REPLY_ERROR);
  }
  return rep;
}

/* nil -> -1 (acquired, in Redisson's acquire scripts), else the integer. */
static inline int64_t rs_nil_or_int(redisReply *rep) {
  int64_t v = rep->type == REDIS_REPLY_NIL ? -1 : (int64_t)rep->integer;
  ASSERT(rep->type == REDIS_REPLY_NIL || rep->type == REDIS_REPLY_INTEGER);
  freeReplyObject(rep);
  return v;
}

static inline void rs_key(char *buf, size_t n, const char *prefix,
                          const char *name) {
  lu_keyname(buf, n, prefix, name, strlen(name));
}

/* ---- RLock --------------------------------------------------------------
 */

/* Free or already ours: one more hold and the lease; else the lock's TTL. */
static const char RS_LOCK[] =
    "if redis.call('exists', KEYS[1]) == 0 or "
    "   redis.call('hexists', KEYS[1], ARGV[2]) == 1 then\n"
    "  redis.call('hincrby', KEYS[1], ARGV[2], 1)\n"
    "  redis.call('pexpire', KEYS[1], ARGV[1])\n"
    "  return nil\n"
    "end\n"
    "return redis.call('pttl', KEYS[1])\n";

/* One hold less, answered from the latch when this request ran already;
 * the last hold deletes the lock and announces it. nil: not ours. */
static const char RS_UNLOCK[] =
    "local seen = redis.call('get', KEYS[3])\n"
    "if seen then return tonumber(seen) end\n"
    "if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then return nil end\n"
    "local left = redis.call('hincrby', KEYS[1], ARGV[3], -1)\n"
    "if left > 0 then\n"
    "  redis.call('pexpire', KEYS[1], ARGV[2])\n"
    "  redis.call('set', KEYS[3], 0, 'px', ARGV[4])\n"
    "  return 0\n"
    "end\n"
    "redis.call('del', KEYS[1])\n"
    "redis.call('publish', KEYS[2], ARGV[1])\n"
    "redis.call('set', KEYS[3], 1, 'px', ARGV[4])\n"
    "return 1\n";

/* -1 when acquired (or re-entered), else the holder's TTL in ms. */
static inline int64_t rs_lock_try(rs_client_t *c, const char *name, long thread,
                                  int64_t lease_ms) {
  char field[128], lease[24];
  rs_field(c, thread, field, sizeof(field));
  snprintf(lease, sizeof(lease), "%" PRId64, lease_ms);
  const char *args[] = {name, lease, field};
  return rs_nil_or_int(rs_eval(c, RS_LOCK, 1, 2, args));
}

/* The unlock latch of one request: redisson_unlock_latch:{NAME}:<id>. */
static inline void rs_latch(rs_client_t *c, const char *name, char *buf,
                            size_t n) {
  char base[512];
  rs_key(base, sizeof(base), "redisson_unlock_latch", name);
  snprintf(buf, n, "%s:%s-%" PRIuFAST64, base, c->id,
           (uint_fast64_t)atomic_fetch_add(&c->seq, 1));
}

/* Redisson deletes the latch once the unlock's reply is in. */
static inline void rs_drop_latch(rs_client_t *c, const char *latch) {
  lu_ok(redisCommand(c->r, "DEL %s", latch));
}

/* 1 released, 0 one hold less, -1 not held by this thread. */
static inline int64_t rs_unlock(rs_client_t *c, const char *name, long thread,
                                int64_t lease_ms) {
  char field[128], lease[24], chan[512], latch[600];
  rs_field(c, thread, field, sizeof(field));
  snprintf(lease, sizeof(lease), "%" PRId64, lease_ms);
  rs_key(chan, sizeof(chan), "redisson_lock__channel", name);
  rs_latch(c, name, latch, sizeof(latch));
  const char *args[] = {name, chan, latch, "0", lease, field, "9000"};
  int64_t v = rs_nil_or_int(rs_eval(c, RS_UNLOCK, 3, 4, args));
  rs_drop_latch(c, latch);
  return v;
}

/* ---- RFairLock ------------------------------------------------------------
 * KEYS: lock, queue, timeouts. ARGV[1] lease, ARGV[2] field, ARGV[3] the
 * waiter's allowance (fairLockWaitTimeout), ARGV[4] the JVM's clock.
 */

/* Heads whose deadline passed are dropped (no other deadline changes). */
#define RS_FAIR_DROP_STALE(now)                                                \
  "while true do\n"                                                            \
  "  local first = redis.call('lindex', KEYS[2], 0)\n"                         \
  "  if first == false then break end\n"                                       \
  "  local at = redis.call('zscore', KEYS[3], first)\n"                        \
  "  if at ~= false and tonumber(at) <= tonumber(" now ") then\n"              \
  "    redis.call('zrem', KEYS[3], first)\n"                                   \
  "    redis.call('lpop', KEYS[2])\n"                                          \
  "  else break end\n"                                                         \
  "end\n"

static const char RS_FAIR_LOCK[] = RS_FAIR_DROP_STALE("ARGV[4]")
    /* Free and nobody ahead: take it, and take one allowance off every
       queued deadline. */
    "if redis.call('exists', KEYS[1]) == 0 and "
    "   (redis.call('exists', KEYS[2]) == 0 or "
    "    redis.call('lindex', KEYS[2], 0) == ARGV[2]) then\n"
    "  redis.call('lpop', KEYS[2])\n"
    "  redis.call('zrem', KEYS[3], ARGV[2])\n"
    "  local all = redis.call('zrange', KEYS[3], 0, -1)\n"
    "  for i = 1, #all do\n"
    "    redis.call('zincrby', KEYS[3], -tonumber(ARGV[3]), all[i])\n"
    "  end\n"
    "  redis.call('hset', KEYS[1], ARGV[2], 1)\n"
    "  redis.call('pexpire', KEYS[1], ARGV[1])\n"
    "  return nil\n"
    "end\n"
    "if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then\n"
    "  redis.call('hincrby', KEYS[1], ARGV[2], 1)\n"
    "  redis.call('pexpire', KEYS[1], ARGV[1])\n"
    "  return nil\n"
    "end\n"
    /* Queued already: the lock's TTL (never below 0). */
    "if redis.call('zscore', KEYS[3], ARGV[2]) ~= false then\n"
    "  return math.max(0, redis.call('pttl', KEYS[1]))\n"
    "end\n"
    /* A newcomer: its deadline chained after the last waiter's, or after
       the lock's TTL. */
    "local last = redis.call('lindex', KEYS[2], -1)\n"
    "local ttl\n"
    "if last ~= false and last ~= ARGV[2] and "
    "   redis.call('zscore', KEYS[3], last) ~= false then\n"
    "  ttl = tonumber(redis.call('zscore', KEYS[3], last)) - "
    "tonumber(ARGV[4])\n"
    "else\n"
    "  ttl = redis.call('pttl', KEYS[1])\n"
    "end\n"
    "local at = ttl + tonumber(ARGV[3]) + tonumber(ARGV[4])\n"
    "if redis.call('zadd', KEYS[3], at, ARGV[2]) == 1 then\n"
    "  redis.call('rpush', KEYS[2], ARGV[2])\n"
    "end\n"
    "return ttl\n";

/* KEYS: lock, queue, timeouts, channel, latch. ARGV[1] message, ARGV[2]
 * lease, ARGV[3] field, ARGV[4] the JVM's clock, ARGV[5] latch ms. */
static const char RS_FAIR_UNLOCK[] =
    "local seen = redis.call('get', KEYS[5])\n"
    "if seen then return tonumber(seen) end\n" RS_FAIR_DROP_STALE(
        "ARGV[4]") "if redis.call('exists', KEYS[1]) == 0 then\n"
                   "  local nxt = redis.call('lindex', KEYS[2], 0)\n"
                   "  if nxt ~= false then\n"
                   "    redis.call('publish', KEYS[4] .. ':' .. nxt, ARGV[1])\n"
                   "  end\n"
                   "  redis.call('set', KEYS[5], 1, 'px', ARGV[5])\n"
                   "  return 1\n"
                   "end\n"
                   "if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then "
                   "return nil end\n"
                   "local left = redis.call('hincrby', KEYS[1], ARGV[3], -1)\n"
                   "if left > 0 then\n"
                   "  redis.call('pexpire', KEYS[1], ARGV[2])\n"
                   "  redis.call('set', KEYS[5], 0, 'px', ARGV[5])\n"
                   "  return 0\n"
                   "end\n"
                   "redis.call('del', KEYS[1])\n"
                   "redis.call('set', KEYS[5], 1, 'px', ARGV[5])\n"
                   "local nxt = redis.call('lindex', KEYS[2], 0)\n"
                   "if nxt ~= false then\n"
                   "  redis.call('publish', KEYS[4] .. ':' .. nxt, ARGV[1])\n"
                   "end\n"
                   "return 1\n";

/* A waiter that gives up: those behind it lose one allowance each.
 * KEYS: queue, timeouts. ARGV[1] field, ARGV[2] allowance. */
static const char RS_FAIR_GIVE_UP[] =
    "local queue = redis.call('lrange', KEYS[1], 0, -1)\n"
    "local i = 1\n"
    "while i <= #queue and queue[i] ~= ARGV[1] do i = i + 1 end\n"
    "for j = i + 1, #queue do\n"
    "  redis.call('zincrby', KEYS[2], -tonumber(ARGV[2]), queue[j])\n"
    "end\n"
    "redis.call('zrem', KEYS[2], ARGV[1])\n"
    "redis.call('lrem', KEYS[1], 0, ARGV[1])\n";

/* -1 when acquired, else the TTL to wait (queued behind others). */
static inline int64_t rs_fair_try(rs_client_t *c, const char *name, long thread,
                                  int64_t lease_ms, int64_t wait_ms) {
  char field[128], lease[24], wait[24], now[24], qk[512], tk[512];
  rs_field(c, thread, field, sizeof(field));
  rs_key(qk, sizeof(qk), "redisson_lock_queue", name);
  rs_key(tk, sizeof(tk), "redisson_lock_timeout", name);
  snprintf(lease, sizeof(lease), "%" PRId64, lease_ms);
  snprintf(wait, sizeof(wait), "%" PRId64, wait_ms);
  snprintf(now, sizeof(now), "%" PRId64, rs_wall_ms(c));
  const char *args[] = {name, qk, tk, lease, field, wait, now};
  return rs_nil_or_int(rs_eval(c, RS_FAIR_LOCK, 3, 4, args));
}

static inline int64_t rs_fair_unlock(rs_client_t *c, const char *name,
                                     long thread, int64_t lease_ms) {
  char field[128], lease[24], now[24], qk[512], tk[512], chan[512], latch[600];
  rs_field(c, thread, field, sizeof(field));
  rs_key(qk, sizeof(qk), "redisson_lock_queue", name);
  rs_key(tk, sizeof(tk), "redisson_lock_timeout", name);
  rs_key(chan, sizeof(chan), "redisson_lock__channel", name);
  rs_latch(c, name, latch, sizeof(latch));
  snprintf(lease, sizeof(lease), "%" PRId64, lease_ms);
  snprintf(now, sizeof(now), "%" PRId64, rs_wall_ms(c));
  const char *args[] = {name, qk,    tk,    chan, latch,
                        "0",  lease, field, now,  "9000"};
  int64_t v = rs_nil_or_int(rs_eval(c, RS_FAIR_UNLOCK, 5, 5, args));
  rs_drop_latch(c, latch);
  return v;
}

static inline void rs_fair_give_up(rs_client_t *c, const char *name,
                                   long thread, int64_t wait_ms) {
  char field[128], wait[24], qk[512], tk[512];
  rs_field(c, thread, field, sizeof(field));
  rs_key(qk, sizeof(qk), "redisson_lock_queue", name);
  rs_key(tk, sizeof(tk), "redisson_lock_timeout", name);
  snprintf(wait, sizeof(wait), "%" PRId64, wait_ms);
  const char *args[] = {qk, tk, field, wait};
  freeReplyObject(rs_eval(c, RS_FAIR_GIVE_UP, 2, 2, args));
}

/* ---- RReadWriteLock -------------------------------------------------------
 * Read: KEYS lock, this holder's timeout prefix "{NAME}:<field>:
 * rwlock_timeout"; ARGV lease, field, writer field.
 */
static const char RS_READ_LOCK[] =
    "local mode = redis.call('hget', KEYS[1], 'mode')\n"
    "if mode == false then\n"
    "  redis.call('hset', KEYS[1], 'mode', 'read')\n"
    "  redis.call('hset', KEYS[1], ARGV[2], 1)\n"
    "  redis.call('set', KEYS[2] .. ':1', 1)\n"
    "  redis.call('pexpire', KEYS[2] .. ':1', ARGV[1])\n"
    "  redis.call('pexpire', KEYS[1], ARGV[1])\n"
    "  return nil\n"
    "end\n"
    "if mode == 'read' or (mode == 'write' and "
    "   redis.call('hexists', KEYS[1], ARGV[3]) == 1) then\n"
    "  local n = redis.call('hincrby', KEYS[1], ARGV[2], 1)\n"
    "  local key = KEYS[2] .. ':' .. n\n"
    "  redis.call('set', key, 1)\n"
    "  redis.call('pexpire', key, ARGV[1])\n"
    "  local left = redis.call('pttl', KEYS[1])\n"
    "  redis.call('pexpire', KEYS[1], math.max(left, ARGV[1]))\n"
    "  return nil\n"
    "end\n"
    "return redis.call('pttl', KEYS[1])\n";

/* KEYS lock, channel, this holder's timeout prefix, "{NAME}". ARGV
 * message, field. */
static const char RS_READ_UNLOCK[] =
    "local mode = redis.call('hget', KEYS[1], 'mode')\n"
    "if mode == false then\n"
    "  redis.call('publish', KEYS[2], ARGV[1])\n"
    "  return 1\n"
    "end\n"
    "if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then return nil end\n"
    "local n = redis.call('hincrby', KEYS[1], ARGV[2], -1)\n"
    "if n == 0 then redis.call('hdel', KEYS[1], ARGV[2]) end\n"
    "redis.call('del', KEYS[3] .. ':' .. (n + 1))\n"
    "if redis.call('hlen', KEYS[1]) > 1 then\n"
    "  local longest = -3\n"
    "  for _, f in ipairs(redis.call('hkeys', KEYS[1])) do\n"
    "    local c = tonumber(redis.call('hget', KEYS[1], f))\n"
    "    if type(c) == 'number' then\n"
    "      for i = c, 1, -1 do\n"
    "        local left = redis.call('pttl', KEYS[4] .. ':' .. f .. "
    "                                ':rwlock_timeout:' .. i)\n"
    "        longest = math.max(left, longest)\n"
    "      end\n"
    "    end\n"
    "  end\n"
    "  if longest > 0 then\n"
    "    redis.call('pexpire', KEYS[1], longest)\n"
    "    return 0\n"
    "  end\n"
    "  if mode == 'write' then return 0 end\n"
    "end\n"
    "redis.call('del', KEYS[1])\n"
    "redis.call('publish', KEYS[2], ARGV[1])\n"
    "return 1\n";

/* The read lock's renewal, as Redisson's renewal task does it: only this
 * holder's own timeout keys, and the lock's lease. KEYS lock, "{NAME}";
 * ARGV lease, field. */
static const char RS_READ_RENEW[] =
    "local n = redis.call('hget', KEYS[1], ARGV[2])\n"
    "if n == false then return 0 end\n"
    "for i = tonumber(n), 1, -1 do\n"
    "  redis.call('pexpire', KEYS[2] .. ':' .. ARGV[2] .. "
    "             ':rwlock_timeout:' .. i, ARGV[1])\n"
    "end\n"
    "redis.call('pexpire', KEYS[1], ARGV[1])\n"
    "return 1\n";

/* Write: KEYS lock; ARGV lease, writer field. */
static const char RS_WRITE_LOCK[] =
    "local mode = redis.call('hget', KEYS[1], 'mode')\n"
    "if mode == false then\n"
    "  redis.call('hset', KEYS[1], 'mode', 'write')\n"
    "  redis.call('hset', KEYS[1], ARGV[2], 1)\n"
    "  redis.call('pexpire', KEYS[1], ARGV[1])\n"
    "  return nil\n"
    "end\n"
    "if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then\n"
    "  redis.call('hincrby', KEYS[1], ARGV[2], 1)\n"
    "  local left = redis.call('pttl', KEYS[1])\n"
    "  redis.call('pexpire', KEYS[1], left + ARGV[1])\n"
    "  return nil\n"
    "end\n"
    "return redis.call('pttl', KEYS[1])\n";

/* KEYS lock, channel; ARGV message ("1"), lease, writer field. */
static const char RS_WRITE_UNLOCK[] =
    "local mode = redis.call('hget', KEYS[1], 'mode')\n"
    "if mode == false then\n"
    "  redis.call('publish', KEYS[2], ARGV[1])\n"
    "  return 1\n"
    "end\n"
    "if mode ~= 'write' then return nil end\n"
    "if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then return nil end\n"
    "local n = redis.call('hincrby', KEYS[1], ARGV[3], -1)\n"
    "if n > 0 then\n"
    "  redis.call('pexpire', KEYS[1], ARGV[2])\n"
    "  return 0\n"
    "end\n"
    "redis.call('hdel', KEYS[1], ARGV[3])\n"
    "if redis.call('hlen', KEYS[1]) == 1 then\n"
    "  redis.call('del', KEYS[1])\n"
    "  redis.call('publish', KEYS[2], ARGV[1])\n"
    "else\n"
    "  redis.call('hset', KEYS[1], 'mode', 'read')\n"
    "end\n"
    "return 1\n";

/* "{NAME}" (or NAME when it has a '{'). */
static inline void rs_tag(char *buf, size_t n, const char *name) {
  int braces = strchr(name, '{') == NULL;
  snprintf(buf, n, "%s%s%s", braces ? "{" : "", name, braces ? "}" : "");
}

static inline int64_t rs_read_try(rs_client_t *c, const char *name, long thread,
                                  int64_t lease_ms) {
  char field[128], wfield[140], lease[24], tag[512], prefix[700];
  rs_field(c, thread, field, sizeof(field));
  snprintf(wfield, sizeof(wfield), "%s:write", field);
  rs_tag(tag, sizeof(tag), name);
  snprintf(prefix, sizeof(prefix), "%s:%s:rwlock_timeout", tag, field);
  snprintf(lease, sizeof(lease), "%" PRId64, lease_ms);
  const char *args[] = {name, prefix, lease, field, wfield};
  return rs_nil_or_int(rs_eval(c, RS_READ_LOCK, 2, 3, args));
}

static inline int64_t rs_read_unlock(rs_client_t *c, const char *name,
                                     long thread) {
  char field[128], tag[512], prefix[700], chan[512];
  rs_field(c, thread, field, sizeof(field));
  rs_tag(tag, sizeof(tag), name);
  snprintf(prefix, sizeof(prefix), "%s:%s:rwlock_timeout", tag, field);
  rs_key(chan, sizeof(chan), "redisson_rwlock", name);
  const char *args[] = {name, chan, prefix, tag, "0", field};
  return rs_nil_or_int(rs_eval(c, RS_READ_UNLOCK, 4, 2, args));
}

static inline int64_t rs_read_renew(rs_client_t *c, const char *name,
                                    long thread, int64_t lease_ms) {
  char field[128], tag[512], lease[24];
  rs_field(c, thread, field, sizeof(field));
  rs_tag(tag, sizeof(tag), name);
  snprintf(lease, sizeof(lease), "%" PRId64, lease_ms);
  const char *args[] = {name, tag, lease, field};
  redisReply *rep = rs_eval(c, RS_READ_RENEW, 2, 2, args);
  int64_t v = (int64_t)rep->integer;
  freeReplyObject(rep);
  return v;
}

static inline int64_t rs_write_try(rs_client_t *c, const char *name,
                                   long thread, int64_t lease_ms) {
  char field[140], lease[24];
  rs_field(c, thread, field, sizeof(field) - 6);
  strcat(field, ":write");
  snprintf(lease, sizeof(lease), "%" PRId64, lease_ms);
  const char *args[] = {name, lease, field};
  return rs_nil_or_int(rs_eval(c, RS_WRITE_LOCK, 1, 2, args));
}

static inline int64_t rs_write_unlock(rs_client_t *c, const char *name,
                                      long thread, int64_t lease_ms) {
  char field[140], lease[24], chan[512];
  rs_field(c, thread, field, sizeof(field) - 6);
  strcat(field, ":write");
  rs_key(chan, sizeof(chan), "redisson_rwlock", name);
  snprintf(lease, sizeof(lease), "%" PRId64, lease_ms);
  const char *args[] = {name, chan, "1", lease, field};
  return rs_nil_or_int(rs_eval(c, RS_WRITE_UNLOCK, 2, 3, args));
}

#endif
