/*
 * Questions about a lock that read Redis directly: is it locked, by whom,
 * for how long; and the forced release. Composite kinds answer through
 * their own query function.
 */
#include "alloc.h"
#include "engine.h"

#include "error.h"
#include "reply.h"

#include <stdint.h>
#include <string.h>

/* Runs "VERB name [field]" and decodes a number (nil as 'nil_value'). */
static int ask_number(dlock_t *l, const char *verb, int with_field,
                      uint64_t owner, int64_t nil_value, int64_t *out) {
  int rc = dlock__check_blocking(l->c);
  if (rc != 0)
    return rc;
  char field[DLOCK__FIELD_MAX];
  size_t field_len = with_field ? dlock__kind_field(l, owner, field) : 0;
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

/* Answers one dlock__query about a single lock or a composite. */
static int query(dlock_t *l, uint64_t owner, int what, int64_t *out) {
  if (l == NULL)
    return dlock__fail(DLOCK_EINVAL, "lock handle is NULL");
  int rc = dlock__check_handle(l);
  if (rc != 0)
    return rc;
  if (l->kind->query != NULL)
    return l->kind->query(l, owner, what, out);
  switch (what) {
  case DLOCK__Q_LOCKED:
    return ask_number(l, "EXISTS", 0, 0, 0, out);
  case DLOCK__Q_HELD:
    return ask_number(l, "HEXISTS", 1, owner, 0, out);
  case DLOCK__Q_COUNT:
    return ask_number(l, "HGET", 1, owner, 0, out);
  default: {
    int rc = ask_number(l, "PTTL", 0, 0, 0, out);
    if (rc == 0 && *out == -2)
      *out = 0; /* no such key: nobody holds it */
    else if (rc == 0 && *out == -1)
      *out = INT64_MAX; /* held without expiry */
    return rc;
  }
  }
}

int dlock__query_single(dlock_t *l, uint64_t owner, int what, int64_t *out) {
  return query(l, owner, what, out);
}

int dlock_is_locked(dlock_t *l) {
  int64_t n;
  int rc = query(l, 0, DLOCK__Q_LOCKED, &n);
  return rc != 0 ? rc : n > 0;
}

int dlock_is_held_as(dlock_t *l, uint64_t owner) {
  int64_t n;
  int rc = query(l, owner, DLOCK__Q_HELD, &n);
  return rc != 0 ? rc : n > 0;
}

int dlock_is_held(dlock_t *l) { return dlock_is_held_as(l, dlock_self()); }

int dlock_hold_count_as(dlock_t *l, uint64_t owner) {
  int64_t n;
  int rc = query(l, owner, DLOCK__Q_COUNT, &n);
  if (rc != 0)
    return rc;
  return n < 0 ? 0 : n > INT32_MAX ? INT32_MAX : (int)n;
}

int dlock_hold_count(dlock_t *l) {
  return dlock_hold_count_as(l, dlock_self());
}

int64_t dlock_ttl(dlock_t *l) {
  int64_t ms;
  int rc = query(l, 0, DLOCK__Q_TTL, &ms);
  return rc != 0 ? rc : ms;
}

int dlock_force_unlock(dlock_t *l) {
  if (l == NULL)
    return dlock__fail(DLOCK_EINVAL, "lock handle is NULL");
  int rc = dlock__check_handle(l);
  if (rc != 0)
    return rc;
  return l->kind->force_release != NULL ? l->kind->force_release(l)
                                        : dlock__force_release(l);
}
