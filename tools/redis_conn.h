/*
 * A plain hiredis connection for the data of "dlock demo" (the stock and
 * the sale counters), opened from the same URL forms as the lock client, so
 * one --url configures both. The lock itself always goes through dlock.
 */
#ifndef DLOCK_TOOLS_REDIS_CONN_H
#define DLOCK_TOOLS_REDIS_CONN_H

#include <hiredis/hiredis.h>

/*
 * Connects to 'url' ("redis://[user:pass@]host[:port][/db]" or
 * "unix://[:pass@]/path[?db=N]", %XX escapes decoded), authenticates and
 * selects the database. Returns NULL on any failure; the URL should have
 * been validated by opening a dlock client on it first.
 */
redisContext *redis_conn_open(const char *url);

/* Runs a command whose reply is not needed; 0, or -1 on an error reply or
 * a broken connection. */
int redis_conn_run(redisContext *c, const char *fmt, ...);

/* The integer value of string key 'key' (0 when missing). */
long long redis_conn_get_int(redisContext *c, const char *key);

#endif
