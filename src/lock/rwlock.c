/*
 * The read-write lock (Redisson's RReadWriteLock): one hash holds the mode
 * ("read" or "write"), each reader's hold count under its owner field and
 * the writer's under "<owner field>:write". Every read hold also has its own
 * timeout key, {name}:<owner field>:rwlock_timeout:<n>, so the lock expires
 * with the longest remaining read lease. Unlocks are announced on
 * redisson_rwlock:{name}: "0" lets one waiter try, "1" (the write lock
 * released) lets all of them.
 */
#include "alloc.h"
#include "lock.h"

#include "proto/format.h"

#include <string.h>

static size_t write_field(dlock_t *l, uint64_t owner,
                          char buf[DLOCK__FIELD_MAX]) {
  size_t n = dlock__field_plain(l, owner, buf);
  memcpy(buf + n, ":write", 7);
  return n + 6;
}

/* "{name}:<owner field>:rwlock_timeout", the prefix of one owner's read
 * hold timeout keys, as the call's first owned name. */
static int timeout_prefix(dlock_t *l, uint64_t owner, dlock__call *out,
                          size_t *len) {
  char suffix[DLOCK__FIELD_MAX + 16];
  size_t n = dlock__field_plain(l, owner, suffix);
  memcpy(suffix + n, ":rwlock_timeout", 16);
  return dlock__suffixed(l->name, l->len, suffix, n + 15, &out->owned[0], len);
}

static int read_acquire_call(dlock_t *l, const dlock__ask *a,
                             dlock__call *out) {
  size_t prefix_len;
  int rc = timeout_prefix(l, a->owner, out, &prefix_len);
  if (rc != 0)
    return rc;
  size_t field_len = dlock__field_plain(l, a->owner, out->field);
  size_t wfield_len = write_field(l, a->owner, out->field2);
  size_t lease_len =
      dlock__fmt_i64(out->num[0], dlock__lease_for(l, a->lease_ms));
  size_t believed_len = dlock__fmt_i64(out->num[1], a->believed);
  const char *argv[] = {l->name,    out->owned[0], l->token_key, out->num[0],
                        out->field, out->field2,   out->num[1]};
  const size_t lens[] = {l->len,    prefix_len, l->token_key_len, lease_len,
                         field_len, wfield_len, believed_len};
  dlock__call_set(out, &dlock__script_read_acquire, 3, argv, lens, 7);
  return 0;
}

/* The read release script for 'r' (a release, or an undo: see
 * settle.c). */
static int read_release_call(dlock_t *l, uint64_t owner,
                             const dlock__release *r, dlock__call *out) {
  size_t prefix_len, all_len;
  int rc = timeout_prefix(l, owner, out, &prefix_len);
  if (rc == 0)
    rc = dlock__suffixed(l->name, l->len, "", 0, &out->owned[1], &all_len);
  if (rc != 0)
    return rc;
  out->owned[1][--all_len] = '\0'; /* "{name}:" without its colon */
  size_t field_len = dlock__field_plain(l, owner, out->field);
  const char *argv[] = {l->name,       l->channel,   out->owned[0],
                        out->owned[1], r->latch,     "0",
                        out->field,    r->latch_ttl, r->count};
  const size_t lens[] = {l->len,    l->channel_len,       prefix_len,
                         all_len,   r->latch_len,         1,
                         field_len, strlen(r->latch_ttl), strlen(r->count)};
  dlock__call_set(out, &dlock__script_read_release, 5, argv, lens, 9);
  return 0;
}

static int write_acquire_call(dlock_t *l, const dlock__ask *a,
                              dlock__call *out) {
  size_t wfield_len = write_field(l, a->owner, out->field);
  size_t lease_len =
      dlock__fmt_i64(out->num[0], dlock__lease_for(l, a->lease_ms));
  size_t believed_len = dlock__fmt_i64(out->num[1], a->believed);
  const char *argv[] = {l->name, l->token_key, out->num[0], out->field,
                        out->num[1]};
  const size_t lens[] = {l->len, l->token_key_len, lease_len, wfield_len,
                         believed_len};
  dlock__call_set(out, &dlock__script_write_acquire, 2, argv, lens, 5);
  return 0;
}

/* The write release script for 'r' (a release, or an undo: see
 * settle.c). */
static int write_release_call(dlock_t *l, uint64_t owner,
                              const dlock__release *r, dlock__call *out) {
  size_t wfield_len = write_field(l, owner, out->field);
  const char *argv[] = {l->name,  l->channel, r->latch,     "1",
                        r->lease, out->field, r->latch_ttl, r->count};
  const size_t lens[] = {
      l->len,           l->channel_len, r->latch_len,         1,
      strlen(r->lease), wfield_len,     strlen(r->latch_ttl), strlen(r->count)};
  dlock__call_set(out, &dlock__script_write_release, 3, argv, lens, 8);
  return 0;
}

/* Deleting a read-write lock frees every reader and the writer: all
 * waiters may try ("1"). */
static int rw_force_call(dlock_t *l, dlock__call *out) {
  return dlock__force_plain_call(l, "1", out);
}

const dlock__kind dlock__kind_read = {
    .id = DLOCK_READ,
    .wait_by = DLOCK__WAIT_PUBSUB,
    .acquire_call = read_acquire_call,
    .release_call = read_release_call,
    .force_call = rw_force_call,
};

const dlock__kind dlock__kind_write = {
    .id = DLOCK_WRITE,
    .wait_by = DLOCK__WAIT_PUBSUB,
    .acquire_call = write_acquire_call,
    .release_call = write_release_call,
    .force_call = rw_force_call,
    .field = write_field,
};
