/*
 * Helpers shared by the lock integration tests: servers and clients with
 * test-friendly timeouts, raw Redis assertions on the Redisson layout, a raw
 * subscriber, a monotonic clock and a recorder for lost-lock callbacks.
 *
 * Everything is static inline so each test binary uses what it needs.
 * Failures go through the harness's ASSERT macros, which end the test.
 */
#ifndef DLOCK_TESTS_LOCK_UTIL_H
#define DLOCK_TESTS_LOCK_UTIL_H

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "dlock.h"
#include "harness/redis_proc.h"
#include "harness/test.h"

/* ---- time ------------------------------------------------------------- */

/* CLOCK_MONOTONIC is system-wide, so values compare across processes. */
static inline int64_t lu_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline double lu_now_ms_f(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

static inline void lu_sleep_ms(int64_t ms) {
  struct timespec ts;
  ts.tv_sec = (time_t)(ms / 1000);
  ts.tv_nsec = (long)((ms % 1000) * 1000000);
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* ---- servers and clients ---------------------------------------------- */

static inline rp_server_t *lu_server_opts(const rp_options_t *o) {
  rp_server_t *s = NULL;
  ASSERT_EQ(rp_start(o, &s), 0);
  ASSERT_NOT_NULL(s);
  return s;
}

static inline rp_server_t *lu_server(int unix_socket) {
  rp_options_t o;
  rp_options_init(&o);
  o.unix_socket = unix_socket;
  return lu_server_opts(&o);
}

/* Options for tests: short timeouts so failures show fast. */
static inline void lu_options(dlock_options_t *o, const rp_server_t *s) {
  dlock_options_init(o);
  o->url = rp_url(s);
  o->connect_timeout_ms = 2000;
  o->command_timeout_ms = 2000;
  o->watchdog_timeout_ms = 600;
}

static inline dlock_client_t *lu_client_opts(const dlock_options_t *o) {
  dlock_client_t *c = NULL;
  ASSERT_DLOCK_OK(dlock_client_open(o, &c));
  ASSERT_NOT_NULL(c);
  ASSERT_NOT_NULL(dlock_client_id(c));
  return c;
}

static inline dlock_client_t *lu_client(const rp_server_t *s) {
  dlock_options_t o;
  lu_options(&o, s);
  return lu_client_opts(&o);
}

static inline dlock_t *lu_get(dlock_client_t *c, const char *name) {
  dlock_t *l = NULL;
  ASSERT_DLOCK_OK(dlock_get(c, name, &l));
  ASSERT_NOT_NULL(l);
  return l;
}

/* Frees the handles of two clients on one server, the clients and the
 * server. */
static inline void lu_free_two(rp_server_t *s, dlock_client_t *a, dlock_t *la,
                               dlock_client_t *b, dlock_t *lb) {
  dlock_free(la);
  dlock_free(lb);
  dlock_client_close(a);
  dlock_client_close(b);
  rp_free(s);
}

/* "<client-id>:<owner>" into 'buf'. */
static inline const char *lu_field(char *buf, size_t n, dlock_client_t *c,
                                   uint64_t owner) {
  snprintf(buf, n, "%s:%" PRIu64, dlock_client_id(c), owner);
  return buf;
}

/*
 * Redisson's key or channel name for a lock: "prefix:{name}", or
 * "prefix:name" when the name contains '{'. Returns the length.
 */
static inline size_t lu_keyname(char *buf, size_t n, const char *prefix,
                                const char *name, size_t len) {
  size_t p = strlen(prefix);
  int braces = memchr(name, '{', len) == NULL;
  size_t need = p + 1 + len + (braces ? 2 : 0);
  ASSERT(need < n);
  size_t i = 0;
  memcpy(buf, prefix, p);
  i = p;
  buf[i++] = ':';
  if (braces)
    buf[i++] = '{';
  memcpy(buf + i, name, len);
  i += len;
  if (braces)
    buf[i++] = '}';
  buf[i] = '\0';
  return i;
}

static inline size_t lu_channel(char *buf, size_t n, const char *name,
                                size_t len) {
  return lu_keyname(buf, n, "redisson_lock__channel", name, len);
}

static inline size_t lu_token_key(char *buf, size_t n, const char *name,
                                  size_t len) {
  return lu_keyname(buf, n, "redisson_lock_token", name, len);
}

/* ---- raw Redis assertions --------------------------------------------- */

static inline int64_t lu_reply_int(redisReply *r) {
  ASSERT_NOT_NULL(r);
  if (r->type != REDIS_REPLY_INTEGER) {
    fprintf(stderr, "expected an integer reply, got type %d (%s)\n", r->type,
            r->str ? r->str : "");
    ASSERT_EQ(r->type, REDIS_REPLY_INTEGER);
  }
  int64_t v = (int64_t)r->integer;
  freeReplyObject(r);
  return v;
}

static inline int64_t lu_exists_n(rp_server_t *s, const char *k, size_t n) {
  return lu_reply_int(rp_cmd(s, "EXISTS %b", k, n));
}

static inline int64_t lu_exists(rp_server_t *s, const char *k) {
  return lu_exists_n(s, k, strlen(k));
}

static inline int64_t lu_pttl_n(rp_server_t *s, const char *k, size_t n) {
  return lu_reply_int(rp_cmd(s, "PTTL %b", k, n));
}

static inline int64_t lu_pttl(rp_server_t *s, const char *k) {
  return lu_pttl_n(s, k, strlen(k));
}

static inline int64_t lu_hlen(rp_server_t *s, const char *k) {
  return lu_reply_int(rp_cmd(s, "HLEN %s", k));
}

static inline int64_t lu_dbsize(rp_server_t *s) {
  return lu_reply_int(rp_cmd(s, "DBSIZE"));
}

static inline int64_t lu_hexists_n(rp_server_t *s, const char *k, size_t n,
                                   const char *field) {
  return lu_reply_int(rp_cmd(s, "HEXISTS %b %s", k, n, field));
}

/* A string or integer reply read as an integer; -1 for nil. */
static inline int64_t lu_reply_num(redisReply *r) {
  ASSERT_NOT_NULL(r);
  int64_t v = -1;
  if (r->type == REDIS_REPLY_INTEGER) {
    v = (int64_t)r->integer;
  } else if (r->type == REDIS_REPLY_STRING) {
    v = strtoll(r->str, NULL, 10);
  } else if (r->type != REDIS_REPLY_NIL) {
    fprintf(stderr, "expected a number, got type %d (%s)\n", r->type,
            r->str ? r->str : "");
    ASSERT(0);
  }
  freeReplyObject(r);
  return v;
}

static inline int64_t lu_hget_num(rp_server_t *s, const char *k,
                                  const char *field) {
  return lu_reply_num(rp_cmd(s, "HGET %s %s", k, field));
}

static inline int64_t lu_get_num_n(rp_server_t *s, const char *k, size_t n) {
  return lu_reply_num(rp_cmd(s, "GET %b", k, n));
}

static inline void lu_ok(redisReply *r) {
  ASSERT_NOT_NULL(r);
  if (r->type == REDIS_REPLY_ERROR) {
    fprintf(stderr, "raw command failed: %s\n", r->str);
    ASSERT(r->type != REDIS_REPLY_ERROR);
  }
  freeReplyObject(r);
}

/* Polls until key 'k' is gone; returns the time it took, or -1. */
static inline int64_t lu_wait_gone(rp_server_t *s, const char *k,
                                   int64_t limit_ms) {
  int64_t t0 = lu_now_ms();
  while (lu_now_ms() - t0 < limit_ms) {
    if (lu_exists(s, k) == 0)
      return lu_now_ms() - t0;
    lu_sleep_ms(10);
  }
  return -1;
}

/* Calls of command 'cmd' (lower case, e.g. "evalsha") so far, from INFO
 * commandstats; 0 when never called. */
static inline int64_t lu_cmd_calls(rp_server_t *s, const char *cmd) {
  redisReply *r = rp_cmd(s, "INFO commandstats");
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->type, REDIS_REPLY_STRING);
  char pat[96];
  snprintf(pat, sizeof(pat), "cmdstat_%s:calls=", cmd);
  const char *p = strstr(r->str, pat);
  int64_t n = p ? strtoll(p + strlen(pat), NULL, 10) : 0;
  freeReplyObject(r);
  return n;
}

/* 1 when replica 'replica' has its link to its master up. */
static inline int lu_link_up(rp_server_t *replica) {
  redisReply *r = rp_cmd(replica, "INFO replication");
  int up = r != NULL && r->type == REDIS_REPLY_STRING &&
           strstr(r->str, "master_link_status:up") != NULL;
  freeReplyObject(r);
  return up;
}

/* A master and 'n' replicas in sync, every one with AOF on when 'aof'. */
static inline void lu_replicated(rp_server_t **m, rp_server_t **r, int n,
                                 int aof) {
  rp_options_t o;
  rp_options_init(&o);
  o.appendonly = aof;
  /* Each replica's first sync starts at once, not after Redis's 5 s wait
   * for more replicas to share it. */
  o.extra_conf = "repl-diskless-sync-delay 0";
  *m = lu_server_opts(&o);
  for (int i = 0; i < n; i++) {
    r[i] = lu_server_opts(&o);
    lu_ok(rp_cmd(r[i], "REPLICAOF 127.0.0.1 %d", rp_port(*m)));
    int64_t until = lu_now_ms() + 10000;
    while (!lu_link_up(r[i]) && lu_now_ms() < until)
      lu_sleep_ms(20);
    ASSERT(lu_link_up(r[i]));
  }
  /* The master counts the replicas in step once they have acknowledged. */
  /* In step once three writes in a row were acknowledged by all of them
   * within 100 ms each (just after its first sync, a replica can be slow
   * to acknowledge new writes for a while). */
  int64_t until = lu_now_ms() + 10000;
  for (int good = 0; good < 3;) {
    freeReplyObject(rp_cmd(*m, "INCR lu:replicated"));
    redisReply *w = rp_cmd(*m, "WAIT %d 100", n);
    good = w != NULL && w->integer == n ? good + 1 : 0;
    freeReplyObject(w);
    ASSERT_LT(lu_now_ms(), until);
  }
  freeReplyObject(rp_cmd(*m, "DEL lu:replicated"));
  /* With AOF, a replica that has just synced rewrites its AOF, and
   * acknowledges no fsync until that is done (Valkey takes longest). */
  until = lu_now_ms() + 10000;
  while (aof) {
    redisReply *w = rp_cmd(*m, "WAITAOF 0 %d 100", n);
    ASSERT_NOT_NULL(w);
    /* An error: a server without WAITAOF, nothing to wait for. */
    int ok = w->type != REDIS_REPLY_ARRAY ||
             (w->elements == 2 && w->element[1]->integer == n);
    freeReplyObject(w);
    if (ok)
      break;
    ASSERT_LT(lu_now_ms(), until);
  }
}

/* Subscribers of channel 'chan' ('len' bytes), from PUBSUB NUMSUB. */
static inline int64_t lu_numsub(rp_server_t *s, const char *chan, size_t len) {
  redisReply *r = rp_cmd(s, "PUBSUB NUMSUB %b", chan, len);
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->type, REDIS_REPLY_ARRAY);
  ASSERT_EQ(r->elements, 2);
  int64_t n = (int64_t)r->element[1]->integer;
  freeReplyObject(r);
  return n;
}

/* ---- raw connections (for threads and children) ------------------------ */

static inline redisContext *lu_connect(const rp_server_t *s) {
  struct timeval tv = {5, 0};
  redisContext *r = rp_socket(s)
                        ? redisConnectUnixWithTimeout(rp_socket(s), tv)
                        : redisConnectWithTimeout("127.0.0.1", rp_port(s), tv);
  if (r == NULL || r->err) {
    fprintf(stderr, "raw connect failed: %s\n", r ? r->errstr : "oom");
    if (r)
      redisFree(r);
    return NULL;
  }
  redisSetTimeout(r, tv);
  return r;
}

/* A raw SUBSCRIBE connection on 'chan' ('len' bytes). */
static inline redisContext *lu_subscribe(const rp_server_t *s, const char *chan,
                                         size_t len) {
  redisContext *r = lu_connect(s);
  ASSERT_NOT_NULL(r);
  redisReply *rep = redisCommand(r, "SUBSCRIBE %b", chan, len);
  ASSERT_NOT_NULL(rep);
  ASSERT_EQ(rep->type, REDIS_REPLY_ARRAY);
  ASSERT_EQ(rep->elements, 3);
  ASSERT_STR_EQ(rep->element[0]->str, "subscribe");
  freeReplyObject(rep);
  return r;
}

/*
 * Waits up to 'timeout_ms' for one message on a raw subscriber. Returns 1 and
 * copies the payload into 'msg' (and the channel into 'chan' if not NULL), or
 * 0 on timeout (the connection is then unusable: free it).
 */
static inline int lu_sub_wait(redisContext *r, int64_t timeout_ms, char *msg,
                              size_t msgn, char *chan, size_t chann) {
  struct timeval tv;
  tv.tv_sec = (time_t)(timeout_ms / 1000);
  tv.tv_usec = (suseconds_t)((timeout_ms % 1000) * 1000);
  redisSetTimeout(r, tv);
  void *v = NULL;
  if (redisGetReply(r, &v) != REDIS_OK || v == NULL)
    return 0;
  redisReply *rep = v;
  int ok = rep->type == REDIS_REPLY_ARRAY && rep->elements == 3 &&
           rep->element[0]->type == REDIS_REPLY_STRING &&
           strcmp(rep->element[0]->str, "message") == 0;
  if (ok) {
    snprintf(msg, msgn, "%.*s", (int)rep->element[2]->len,
             rep->element[2]->str);
    if (chan)
      snprintf(chan, chann, "%.*s", (int)rep->element[1]->len,
               rep->element[1]->str);
  }
  freeReplyObject(rep);
  return ok;
}

/* ---- lost-lock callback recorder --------------------------------------- */

typedef struct lu_lost {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int count;
  char name[512];
  size_t name_len;
  uint64_t owner;
  int64_t at_ms;
} lu_lost_t;

static inline void lu_lost_init(lu_lost_t *r) {
  memset(r, 0, sizeof(*r));
  pthread_mutex_init(&r->mu, NULL);
  pthread_cond_init(&r->cv, NULL);
}

static inline void lu_lost_cb(void *data, const char *name, size_t name_len,
                              uint64_t owner) {
  lu_lost_t *r = data;
  pthread_mutex_lock(&r->mu);
  if (r->count++ == 0) {
    size_t n = name_len < sizeof(r->name) - 1 ? name_len : sizeof(r->name) - 1;
    memcpy(r->name, name, n);
    r->name[n] = '\0';
    r->name_len = name_len;
    r->owner = owner;
    r->at_ms = lu_now_ms();
  }
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
}

/* Waits until the callback fired at least once; returns the count. */
static inline int lu_lost_wait(lu_lost_t *r, int64_t timeout_ms) {
  int64_t end = lu_now_ms() + timeout_ms;
  pthread_mutex_lock(&r->mu);
  while (r->count == 0 && lu_now_ms() < end) {
    pthread_mutex_unlock(&r->mu);
    lu_sleep_ms(5);
    pthread_mutex_lock(&r->mu);
  }
  int n = r->count;
  pthread_mutex_unlock(&r->mu);
  return n;
}

static inline int lu_lost_count(lu_lost_t *r) {
  pthread_mutex_lock(&r->mu);
  int n = r->count;
  pthread_mutex_unlock(&r->mu);
  return n;
}

#endif
