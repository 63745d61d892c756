/*
 * dlock_inspect: everything about one lock in one pipelined round, for
 * "dlock status" and for people debugging a stuck lock. It reads Redisson's
 * layout, so it works on locks taken by Java services too.
 */
#include "alloc.h"
#include "engine.h"

#include "error.h"
#include "proto/format.h"
#include "proto/format_list.h"
#include "reply.h"

#include <stdlib.h>
#include <string.h>

enum { Q_HASH, Q_PTTL, Q_TOKEN, Q_QUEUE, Q_TIMEOUTS, Q_COUNT };

void dlock_info_free(dlock_info_t *info) {
  if (info == NULL)
    return;
  for (size_t i = 0; i < info->nholders; i++)
    dlock__free(info->holders[i].owner);
  for (size_t i = 0; i < info->nwaiters; i++)
    dlock__free(info->waiters[i].owner);
  dlock__free(info->holders);
  dlock__free(info->waiters);
  dlock__free(info->mode);
  dlock__free(info);
}

/* Fields of the lock hash: "mode" names a read-write lock's mode, every
 * other field is a holder and its count. */
static int read_holders(const redisReply *hash, dlock_info_t *info) {
  int rc;
  info->holders = dlock__reply_pairs_alloc(hash, sizeof(*info->holders),
                                           "HGETALL", "lock", &rc);
  if (info->holders == NULL)
    return rc;
  for (size_t i = 0; i + 1 < hash->elements; i += 2) {
    const redisReply *k = hash->element[i], *v = hash->element[i + 1];
    if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING)
      return dlock__fail(DLOCK_EPROTO, "HGETALL gave a bad reply");
    if (k->len == 4 && memcmp(k->str, "mode", 4) == 0) {
      if ((info->mode = dlock__memdup(v->str, v->len)) == NULL)
        return dlock__fail(DLOCK_ENOMEM, "out of memory inspecting a lock");
      continue;
    }
    dlock_holder_t *h = &info->holders[info->nholders];
    if ((h->owner = dlock__memdup(k->str, k->len)) == NULL)
      return dlock__fail(DLOCK_ENOMEM, "out of memory inspecting a lock");
    info->nholders++;
    int64_t count = 0;
    if (dlock__decode_number(v, 0, &count) == 0)
      h->count = count;
  }
  return 0;
}

/* The fair-lock queue, head first, with each waiter's deadline. */
static int read_waiters(const redisReply *queue, const redisReply *timeouts,
                        dlock_info_t *info) {
  if (queue->type != REDIS_REPLY_ARRAY || timeouts->type != REDIS_REPLY_ARRAY)
    return dlock__fail(DLOCK_EPROTO, "fair-lock queue has a bad shape");
  info->waiters = dlock__calloc(queue->elements + 1, sizeof(*info->waiters));
  if (info->waiters == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory inspecting a lock");
  for (size_t i = 0; i < queue->elements; i++) {
    const redisReply *q = queue->element[i];
    if (q->type != REDIS_REPLY_STRING)
      continue;
    dlock_waiter_t *w = &info->waiters[info->nwaiters];
    if ((w->owner = dlock__memdup(q->str, q->len)) == NULL)
      return dlock__fail(DLOCK_ENOMEM, "out of memory inspecting a lock");
    info->nwaiters++;
    for (size_t j = 0; j + 1 < timeouts->elements; j += 2) {
      const redisReply *m = timeouts->element[j];
      if (m->type == REDIS_REPLY_STRING && m->len == q->len &&
          memcmp(m->str, q->str, q->len) == 0) {
        int64_t at = 0;
        if (dlock__decode_number(timeouts->element[j + 1], 0, &at) == 0)
          w->deadline_ms = at;
      }
    }
  }
  return 0;
}

static int decode_info(redisReply **r, dlock_info_t *info) {
  int64_t pttl = 0, token = 0;
  int rc = read_holders(r[Q_HASH], info);
  if (rc == 0)
    rc = dlock__decode_integer(r[Q_PTTL], &pttl);
  if (rc == 0)
    rc = dlock__decode_number(r[Q_TOKEN], 0, &token);
  if (rc == 0)
    rc = read_waiters(r[Q_QUEUE], r[Q_TIMEOUTS], info);
  info->locked = pttl != -2;
  info->ttl_ms = pttl == -2 ? 0 : pttl == -1 ? INT64_MAX : pttl;
  info->token = token > 0 ? (uint64_t)token : 0;
  return rc;
}

static int send_queries(dlock_client_t *c, const char *name, size_t len,
                        redisReply **r) {
  char *keys[3] = {NULL, NULL, NULL};
  size_t klen[3];
  static const char *const prefixes[3] = {
      "redisson_lock_token", "redisson_lock_queue", "redisson_lock_timeout"};
  char *cmds[Q_COUNT] = {NULL};
  size_t lens[Q_COUNT];
  int rc = 0;
  for (int i = 0; i < 3 && rc == 0; i++)
    rc = dlock__prefixed(prefixes[i], name, len, &keys[i], &klen[i]);
  if (rc == 0) {
    const char *hash[] = {"HGETALL", name};
    const size_t hash_l[] = {7, len};
    const char *pttl[] = {"PTTL", name};
    const size_t pttl_l[] = {4, len};
    const char *get[] = {"GET", keys[0]};
    const size_t get_l[] = {3, klen[0]};
    const char *lrange[] = {"LRANGE", keys[1], "0", "-1"};
    const size_t lrange_l[] = {6, klen[1], 1, 2};
    const char *zrange[] = {"ZRANGE", keys[2], "0", "-1", "WITHSCORES"};
    const size_t zrange_l[] = {6, klen[2], 1, 2, 10};
    const dlock__words words[Q_COUNT] = {[Q_HASH] = {2, hash, hash_l},
                                         [Q_PTTL] = {2, pttl, pttl_l},
                                         [Q_TOKEN] = {2, get, get_l},
                                         [Q_QUEUE] = {4, lrange, lrange_l},
                                         [Q_TIMEOUTS] = {5, zrange, zrange_l}};
    rc = dlock__format_list(Q_COUNT, words, cmds, lens, "a lock");
  }
  if (rc == 0)
    rc = dlock__client_call(c, name, len, Q_COUNT, cmds, lens, r, 0);
  dlock__format_list_free(Q_COUNT, cmds);
  for (int i = 0; i < 3; i++)
    dlock__free(keys[i]);
  return rc;
}

int dlock_inspect(dlock_client_t *c, const char *name, size_t len,
                  dlock_info_t **out) {
  if (c == NULL || name == NULL || out == NULL)
    return dlock__fail(DLOCK_EINVAL, "client, name and out must not be NULL");
  *out = NULL;
  if (len == 0 || len > DLOCK_NAME_MAX)
    return dlock__fail(DLOCK_EINVAL, "lock name must be 1..%d bytes",
                       DLOCK_NAME_MAX);
  int rc = dlock__check_blocking(c);
  if (rc != 0)
    return rc;
  redisReply *r[Q_COUNT] = {NULL};
  rc = send_queries(c, name, len, r);
  for (int i = 0; i < Q_COUNT && rc == 0; i++)
    if (r[i]->type == REDIS_REPLY_ERROR)
      rc = dlock__fail_reply(r[i]->str, r[i]->len);
  dlock_info_t *info = NULL;
  if (rc == 0 && (info = dlock__calloc(1, sizeof(*info))) == NULL)
    rc = dlock__fail(DLOCK_ENOMEM, "out of memory inspecting a lock");
  if (rc == 0)
    rc = decode_info(r, info);
  for (int i = 0; i < Q_COUNT; i++)
    if (r[i] != NULL)
      freeReplyObject(r[i]);
  if (rc != 0) {
    dlock_info_free(info);
    return rc;
  }
  *out = info;
  return 0;
}
