/*
 * Script reply decoding (see reply.h).
 */
#include "reply.h"
#include "alloc.h"

#include "error.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int dlock__decode_integer(const redisReply *r, int64_t *out) {
  if (r == NULL || r->type != REDIS_REPLY_INTEGER)
    return dlock__fail(DLOCK_EPROTO, "expected an integer reply from Redis");
  *out = (int64_t)r->integer;
  return 0;
}

int dlock__decode_number(const redisReply *r, int64_t nil_value, int64_t *out) {
  if (r != NULL && r->type == REDIS_REPLY_NIL) {
    *out = nil_value;
    return 0;
  }
  if (r != NULL && r->type == REDIS_REPLY_STRING && r->len > 0 && r->len < 21) {
    char buf[24], *end;
    memcpy(buf, r->str, r->len);
    buf[r->len] = '\0';
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    /* The whole reply must be the number: a NUL inside it ends strtoll
     * early, and "1\0002" is not 1. */
    if (errno == 0 && end == buf + r->len && end != buf) {
      *out = v;
      return 0;
    }
  }
  if (r != NULL && r->type == REDIS_REPLY_INTEGER)
    return dlock__decode_integer(r, out);
  return dlock__fail(DLOCK_EPROTO, "expected a number from Redis");
}

int dlock__decode_acquire(const redisReply *r, dlock__acquired *out) {
  memset(out, 0, sizeof(*out));
  if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements < 2)
    return dlock__fail(DLOCK_EPROTO, "acquire script gave a bad reply");
  for (size_t i = 0; i < r->elements; i++)
    if (r->element[i] == NULL || r->element[i]->type != REDIS_REPLY_INTEGER)
      return dlock__fail(DLOCK_EPROTO, "acquire script gave a bad reply");
  long long flag = r->element[0]->integer;
  if (flag == 2 && r->elements == 2) {
    out->gone = 1;
    return 0;
  }
  if (flag == 0 &&
      (r->elements == 2 || (r->elements == 3 && r->element[2]->integer >= 0))) {
    out->ttl_ms = r->element[1]->integer;
    if (r->elements == 3)
      out->counter = (uint64_t)r->element[2]->integer;
    return 0;
  }
  if (flag == 1 && r->elements == 3 && r->element[1]->integer >= 0 &&
      r->element[2]->integer > 0) {
    out->held = 1;
    out->token = (uint64_t)r->element[1]->integer;
    out->count = r->element[2]->integer;
    return 0;
  }
  return dlock__fail(DLOCK_EPROTO, "acquire script gave a bad reply");
}

int dlock__reply_is(const redisReply *r, const char *s) {
  size_t n = strlen(s);
  return r != NULL &&
         (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) &&
         r->len == n && strncasecmp(r->str, s, n) == 0;
}

long long dlock__reply_int(const redisReply *r) {
  if (r == NULL)
    return -1;
  if (r->type == REDIS_REPLY_INTEGER)
    return r->integer;
  if (r->type == REDIS_REPLY_STRING)
    return atoll(r->str);
  return -1;
}

const redisReply *dlock__reply_map_get(const redisReply *m, const char *key) {
  if (m == NULL || m->type != REDIS_REPLY_ARRAY)
    return NULL;
  for (size_t i = 0; i + 1 < m->elements; i += 2)
    if (dlock__reply_is(m->element[i], key))
      return m->element[i + 1];
  return NULL;
}

void *dlock__reply_pairs_alloc(const redisReply *r, size_t size,
                               const char *cmd, const char *what, int *rc) {
  *rc = 0;
  if (r->type != REDIS_REPLY_ARRAY || r->elements % 2 != 0) {
    *rc = dlock__fail(DLOCK_EPROTO, "%s gave a bad reply", cmd);
    return NULL;
  }
  void *p = dlock__calloc(r->elements / 2 + 1, size);
  if (p == NULL)
    *rc = dlock__fail(DLOCK_ENOMEM, "out of memory inspecting a %s", what);
  return p;
}
