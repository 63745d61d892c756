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

#include "error.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t write_field(dlock_t *l, uint64_t owner,
                          char buf[DLOCK__FIELD_MAX]) {
  size_t n = dlock__field_plain(l, owner, buf);
  memcpy(buf + n, ":write", 7);
  return n + 6;
}

/* "{name}:<owner field>:rwlock_timeout", the prefix of one owner's read
 * hold timeout keys. */
static int timeout_prefix(dlock_t *l, uint64_t owner, char **out, size_t *len) {
  char suffix[DLOCK__FIELD_MAX + 16];
  size_t n = dlock__field_plain(l, owner, suffix);
  memcpy(suffix + n, ":rwlock_timeout", 16);
  return dlock__suffixed(l->name, l->len, suffix, n + 15, out, len);
}

static void lease_text(dlock_t *l, int64_t lease_ms, char buf[24]) {
  snprintf(buf, 24, "%" PRId64,
           lease_ms == DLOCK_WATCHDOG ? l->c->opt.watchdog_timeout_ms
                                      : lease_ms);
}

static int read_try_acquire(dlock_t *l, uint64_t owner, int64_t lease_ms,
                            int queue, dlock__busy *busy) {
  (void)queue;
  char *prefix;
  size_t prefix_len;
  int rc = timeout_prefix(l, owner, &prefix, &prefix_len);
  if (rc != 0)
    return rc;
  char field[DLOCK__FIELD_MAX], wfield[DLOCK__FIELD_MAX], lease[24],
      believed[24];
  size_t field_len = dlock__field_plain(l, owner, field);
  size_t wfield_len = write_field(l, owner, wfield);
  lease_text(l, lease_ms, lease);
  snprintf(believed, sizeof(believed), "%" PRId64,
           dlock__believed_count(l, owner));
  const char *argv[] = {l->name, prefix, l->token_key, lease,
                        field,   wfield, believed};
  const size_t lens[] = {l->len,    prefix_len, l->token_key_len, strlen(lease),
                         field_len, wfield_len, strlen(believed)};
  dlock__eval call = {&dlock__script_read_acquire, 3, 4, argv, lens};
  rc = dlock__run_acquire(l, owner, lease_ms, &call, busy);
  dlock__free(prefix);
  return rc;
}

/* Runs the read release script for 'r' (begun as a release, or as an
 * undo: see settle.c). */
static int read_release_with(dlock_t *l, uint64_t owner, dlock__release *r,
                             int undo) {
  char *prefix = NULL, *all = NULL;
  size_t prefix_len, all_len;
  int rc = timeout_prefix(l, owner, &prefix, &prefix_len);
  if (rc == 0)
    rc = dlock__suffixed(l->name, l->len, "", 0, &all, &all_len);
  if (rc != 0) {
    dlock__release_end(r);
    dlock__free(prefix);
    return rc;
  }
  all[--all_len] = '\0'; /* "{name}:" without its colon */
  char field[DLOCK__FIELD_MAX];
  size_t field_len = dlock__field_plain(l, owner, field);
  const char *argv[] = {l->name, l->channel, prefix,       all,     r->latch,
                        "0",     field,      r->latch_ttl, r->count};
  const size_t lens[] = {l->len,    l->channel_len,       prefix_len,
                         all_len,   r->latch_len,         1,
                         field_len, strlen(r->latch_ttl), strlen(r->count)};
  dlock__eval call = {&dlock__script_read_release, 5, 4, argv, lens};
  rc = undo ? dlock__undo_run(l, r, &call)
            : dlock__release_run(l, owner, r, &call);
  dlock__free(prefix);
  dlock__free(all);
  return rc;
}

static int read_release(dlock_t *l, uint64_t owner) {
  dlock__release r;
  int rc = dlock__release_begin(l, owner, &r);
  if (rc != 0) {
    dlock__release_end(&r);
    return rc;
  }
  return read_release_with(l, owner, &r, 0);
}

static int read_undo(dlock_t *l, uint64_t owner, int64_t believed) {
  dlock__release r;
  int rc = dlock__undo_begin(l, owner, believed, &r);
  if (rc != 0) {
    dlock__release_end(&r);
    return rc;
  }
  return read_release_with(l, owner, &r, 1);
}

static int write_try_acquire(dlock_t *l, uint64_t owner, int64_t lease_ms,
                             int queue, dlock__busy *busy) {
  (void)queue;
  char wfield[DLOCK__FIELD_MAX], lease[24], believed[24];
  size_t wfield_len = write_field(l, owner, wfield);
  lease_text(l, lease_ms, lease);
  snprintf(believed, sizeof(believed), "%" PRId64,
           dlock__believed_count(l, owner));
  const char *argv[] = {l->name, l->token_key, lease, wfield, believed};
  const size_t lens[] = {l->len, l->token_key_len, strlen(lease), wfield_len,
                         strlen(believed)};
  dlock__eval call = {&dlock__script_write_acquire, 2, 3, argv, lens};
  return dlock__run_acquire(l, owner, lease_ms, &call, busy);
}

/* Runs the write release script for 'r' (begun as a release, or as an
 * undo: see settle.c). */
static int write_release_with(dlock_t *l, uint64_t owner, dlock__release *r,
                              int undo) {
  char wfield[DLOCK__FIELD_MAX];
  size_t wfield_len = write_field(l, owner, wfield);
  const char *argv[] = {l->name,  l->channel, r->latch,     "1",
                        r->lease, wfield,     r->latch_ttl, r->count};
  const size_t lens[] = {
      l->len,           l->channel_len, r->latch_len,         1,
      strlen(r->lease), wfield_len,     strlen(r->latch_ttl), strlen(r->count)};
  dlock__eval call = {&dlock__script_write_release, 3, 5, argv, lens};
  return undo ? dlock__undo_run(l, r, &call)
              : dlock__release_run(l, owner, r, &call);
}

static int write_release(dlock_t *l, uint64_t owner) {
  dlock__release r;
  int rc = dlock__release_begin(l, owner, &r);
  if (rc != 0) {
    dlock__release_end(&r);
    return rc;
  }
  return write_release_with(l, owner, &r, 0);
}

static int write_undo(dlock_t *l, uint64_t owner, int64_t believed) {
  dlock__release r;
  int rc = dlock__undo_begin(l, owner, believed, &r);
  if (rc != 0) {
    dlock__release_end(&r);
    return rc;
  }
  return write_release_with(l, owner, &r, 1);
}

/* Deleting a read-write lock frees every reader and the writer: all
 * waiters may try ("1"). */
static int rw_force_release(dlock_t *l) {
  return dlock__force_release_plain(l, "1");
}

const dlock__kind dlock__kind_read = {
    .id = DLOCK_READ,
    .wait_by = DLOCK__WAIT_PUBSUB,
    .try_acquire = read_try_acquire,
    .undo = read_undo,
    .release = read_release,
    .field = dlock__field_plain,
    .force_release = rw_force_release,
};

const dlock__kind dlock__kind_write = {
    .id = DLOCK_WRITE,
    .wait_by = DLOCK__WAIT_PUBSUB,
    .try_acquire = write_try_acquire,
    .undo = write_undo,
    .release = write_release,
    .field = write_field,
    .force_release = rw_force_release,
};
