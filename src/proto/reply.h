/*
 * Decoding script replies into lock results. Kept apart from the I/O so it
 * can be tested and fuzzed with arbitrary replies: any shape Redis (or
 * something pretending to be Redis) sends gives a result or DLOCK_EPROTO,
 * never a crash.
 */
#ifndef DLOCK_REPLY_H
#define DLOCK_REPLY_H

#include <hiredis/hiredis.h>
#include <stdint.h>

typedef struct dlock__acquired {
  int held;         /* 1: the owner holds the lock now */
  int gone;         /* 1: the hold the client believed in no longer exists */
  uint64_t token;   /* when held: the fencing token */
  int64_t count;    /* when held: the owner's hold count */
  int64_t ttl_ms;   /* when not held: the holder's remaining lease (-1: none,
                       -2: the key vanished meanwhile) */
  uint64_t counter; /* when not held: the fencing counter, if sent (or 0) */
} dlock__acquired;

/* Decodes {1, token, count}, {0, pttl}, {0, pttl, counter} or {2, 0}
 * (gone). 0 or DLOCK_EPROTO. */
int dlock__decode_acquire(const redisReply *r, dlock__acquired *out);

/* Decodes an integer reply. 0 or DLOCK_EPROTO. */
int dlock__decode_integer(const redisReply *r, int64_t *out);

/* Decodes an integer, a numeric string (HGET) or nil (as 'nil_value'). */
int dlock__decode_number(const redisReply *r, int64_t nil_value, int64_t *out);

/* Whether 'r' is a string or status reply that says 's' (ASCII case
 * ignored: Redis's own words, such as "message" or "slots"). NULL: no. */
int dlock__reply_is(const redisReply *r, const char *s);

/* An integer reply's value, or a string's read as one; -1 for anything
 * else (NULL included). */
long long dlock__reply_int(const redisReply *r);

/* The value of 'key' in a flat key/value array (RESP2's form of a map),
 * or NULL. */
const redisReply *dlock__reply_map_get(const redisReply *m, const char *key);

/* An array of 'r->elements / 2' records of 'size' bytes, zeroed, with
 * room for one more, for the pairs of the flat array 'r' (HGETALL, ZRANGE
 * WITHSCORES); NULL with the code in '*rc' and the detail set when 'r' is
 * not an array of pairs (DLOCK_EPROTO, naming 'cmd') or out of memory
 * (DLOCK_ENOMEM, naming 'what'). */
void *dlock__reply_pairs_alloc(const redisReply *r, size_t size,
                               const char *cmd, const char *what, int *rc);

#endif
