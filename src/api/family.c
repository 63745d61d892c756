/*
 * The regular forms of the API: a name-and-length constructor for every
 * single lock kind, inspection through a handle, and questions whose answer
 * cannot be mistaken for an error code. Each is a thin layer over the call
 * it mirrors, so the two forms never disagree.
 */
#include "lock.h"

#include "error.h"

#include <stdint.h>

int dlock_getn_fair(dlock_client_t *c, const char *name, size_t len,
                    dlock_t **out) {
  return dlock_get_kind(c, DLOCK_FAIR, name, len, out);
}

int dlock_getn_spin(dlock_client_t *c, const char *name, size_t len,
                    dlock_t **out) {
  return dlock_get_kind(c, DLOCK_SPIN, name, len, out);
}

int dlock_getn_nonreentrant(dlock_client_t *c, const char *name, size_t len,
                            dlock_t **out) {
  return dlock_get_kind(c, DLOCK_NONREENTRANT, name, len, out);
}

int dlock_getn_nonreentrant_fair(dlock_client_t *c, const char *name,
                                 size_t len, dlock_t **out) {
  return dlock_get_kind(c, DLOCK_NONREENTRANT_FAIR, name, len, out);
}

int dlock_getn_rw(dlock_client_t *c, const char *name, size_t len,
                  dlock_t **read, dlock_t **write) {
  if (read == NULL || write == NULL)
    return dlock__fail(DLOCK_EINVAL, "read and write must not be NULL");
  *write = NULL;
  int rc = dlock_get_kind(c, DLOCK_READ, name, len, read);
  if (rc == 0 && (rc = dlock_get_kind(c, DLOCK_WRITE, name, len, write)) != 0) {
    dlock_free(*read);
    *read = NULL;
  }
  return rc;
}

int dlock_inspect_lock(dlock_t *l, dlock_info_t **out) {
  if (out != NULL)
    *out = NULL;
  if (l == NULL)
    return dlock__fail(DLOCK_EINVAL, "lock handle is NULL");
  if (l->c == NULL)
    return dlock__fail(DLOCK_EINVAL,
                       "a MultiLock or RedLock spans several locks: inspect "
                       "its parts");
  return dlock_inspect(l->c, l->name, l->len, out);
}

/* Splits the answer of a call returning "value or negative code". */
static int split(int rc, int *out) {
  if (out == NULL)
    return dlock__fail(DLOCK_EINVAL, "out must not be NULL");
  *out = rc < 0 ? 0 : rc;
  return rc < 0 ? rc : 0;
}

int dlock_query_locked(dlock_t *l, int *out) {
  return out == NULL ? split(0, NULL) : split(dlock_is_locked(l), out);
}

int dlock_query_held(dlock_t *l, int *out) {
  return dlock_query_held_as(l, dlock_self(), out);
}

int dlock_query_held_as(dlock_t *l, uint64_t owner, int *out) {
  return out == NULL ? split(0, NULL) : split(dlock_is_held_as(l, owner), out);
}

int dlock_query_hold_count(dlock_t *l, int *out) {
  return dlock_query_hold_count_as(l, dlock_self(), out);
}

int dlock_query_hold_count_as(dlock_t *l, uint64_t owner, int *out) {
  return out == NULL ? split(0, NULL)
                     : split(dlock_hold_count_as(l, owner), out);
}

int dlock_query_ttl(dlock_t *l, int64_t *out) {
  if (out == NULL)
    return dlock__fail(DLOCK_EINVAL, "out must not be NULL");
  int64_t ttl = dlock_ttl(l);
  *out = ttl < 0 ? 0 : ttl;
  return ttl < 0 ? (int)ttl : 0;
}
