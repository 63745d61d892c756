/*
 * Questions about a lock that read Redis directly: is it locked, by whom,
 * for how long; and the forced release.
 */
#include "lock.h"

#include "error.h"
#include "reply.h"
#include "scripts.h"

#include <stdint.h>
#include <string.h>

/* Runs "VERB name [field]" and decodes a number (nil as 'nil_value'). */
static int ask_number(dlock_t *l, const char *verb, int with_field,
                      uint64_t owner, int64_t nil_value, int64_t *out) {
  if (l == NULL)
    return dlock__fail(DLOCK_EINVAL, "lock handle is NULL");
  int rc = dlock__check_canceled(l->c);
  if (rc != 0)
    return rc;
  char field[DLOCK__FIELD_MAX];
  size_t field_len = with_field ? dlock__owner_field(l->c, owner, field) : 0;
  const char *argv[] = {verb, l->name, field};
  const size_t lens[] = {strlen(verb), l->len, field_len};
  redisReply *reply;
  rc = dlock__command(l->c, with_field ? 3 : 2, argv, lens, &reply);
  if (rc != 0)
    return rc;
  rc = dlock__decode_number(reply, nil_value, out);
  freeReplyObject(reply);
  return rc;
}

int dlock_is_locked(dlock_t *l) {
  int64_t n;
  int rc = ask_number(l, "EXISTS", 0, 0, 0, &n);
  return rc != 0 ? rc : n > 0;
}

int dlock_is_held_as(dlock_t *l, uint64_t owner) {
  int64_t n;
  int rc = ask_number(l, "HEXISTS", 1, owner, 0, &n);
  return rc != 0 ? rc : n > 0;
}

int dlock_is_held(dlock_t *l) { return dlock_is_held_as(l, dlock_self()); }

int dlock_hold_count_as(dlock_t *l, uint64_t owner) {
  int64_t n;
  int rc = ask_number(l, "HGET", 1, owner, 0, &n);
  if (rc != 0)
    return rc;
  return n < 0 ? 0 : n > INT32_MAX ? INT32_MAX : (int)n;
}

int dlock_hold_count(dlock_t *l) {
  return dlock_hold_count_as(l, dlock_self());
}

int64_t dlock_ttl(dlock_t *l) {
  int64_t ms;
  int rc = ask_number(l, "PTTL", 0, 0, 0, &ms);
  if (rc != 0)
    return rc;
  if (ms == -2)
    return 0; /* no such key: nobody holds it */
  if (ms == -1)
    return INT64_MAX; /* held without expiry */
  return ms;
}

int dlock_force_unlock(dlock_t *l) {
  if (l == NULL)
    return dlock__fail(DLOCK_EINVAL, "lock handle is NULL");
  int rc = dlock__check_canceled(l->c);
  if (rc != 0)
    return rc;
  const char *argv[] = {l->name, l->channel, "0"};
  const size_t lens[] = {l->len, l->channel_len, 1};
  dlock__eval call = {&dlock__script_force_release, 2, 1, argv, lens};
  redisReply *reply;
  rc = dlock__eval_run(l->c->conn, 1, &call, &reply, 0);
  if (rc != 0)
    return rc;
  int64_t deleted;
  rc = dlock__decode_integer(reply, &deleted);
  freeReplyObject(reply);
  return rc != 0 ? rc : deleted > 0;
}
