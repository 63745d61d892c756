/*
 * The kind registry: which dlock__kind each public constructor of a single
 * lock makes. (Composite locks are made in multi.c.)
 */
#include "lock.h"

#include "error.h"

#include <string.h>

int dlock_get(dlock_client_t *c, const char *name, dlock_t **out) {
  return dlock__handle_new(c, &dlock__kind_reentrant, name,
                           name ? strlen(name) : 0, out);
}

int dlock_getn(dlock_client_t *c, const char *name, size_t len, dlock_t **out) {
  return dlock__handle_new(c, &dlock__kind_reentrant, name, len, out);
}

int dlock_get_kind(dlock_client_t *c, dlock_kind_t kind, const char *name,
                   size_t len, dlock_t **out) {
  /* Indexed by kind; the composites' places are NULL. */
  static const dlock__kind *const single[] = {&dlock__kind_reentrant,
                                              &dlock__kind_fair,
                                              &dlock__kind_spin,
                                              &dlock__kind_read,
                                              &dlock__kind_write,
                                              NULL,
                                              NULL,
                                              &dlock__kind_nonreentrant,
                                              &dlock__kind_nonreentrant_fair};
  if ((int)kind < 0 || (size_t)kind >= sizeof(single) / sizeof(single[0]) ||
      single[kind] == NULL) {
    if (out != NULL)
      *out = NULL;
    return dlock__fail(DLOCK_EINVAL,
                       "dlock_get_kind makes single locks only (kind %d)",
                       (int)kind);
  }
  return dlock__handle_new(c, single[kind], name, len, out);
}

int dlock_get_fair(dlock_client_t *c, const char *name, dlock_t **out) {
  return dlock__handle_new(c, &dlock__kind_fair, name, name ? strlen(name) : 0,
                           out);
}

int dlock_get_spin(dlock_client_t *c, const char *name, dlock_t **out) {
  return dlock__handle_new(c, &dlock__kind_spin, name, name ? strlen(name) : 0,
                           out);
}

int dlock_get_nonreentrant(dlock_client_t *c, const char *name, dlock_t **out) {
  return dlock__handle_new(c, &dlock__kind_nonreentrant, name,
                           name ? strlen(name) : 0, out);
}

int dlock_get_nonreentrant_fair(dlock_client_t *c, const char *name,
                                dlock_t **out) {
  return dlock__handle_new(c, &dlock__kind_nonreentrant_fair, name,
                           name ? strlen(name) : 0, out);
}

int dlock_get_rw(dlock_client_t *c, const char *name, dlock_t **read,
                 dlock_t **write) {
  size_t len = name ? strlen(name) : 0;
  if (read == NULL || write == NULL)
    return dlock__fail(DLOCK_EINVAL, "read and write must not be NULL");
  *write = NULL;
  int rc = dlock__handle_new(c, &dlock__kind_read, name, len, read);
  if (rc == 0 &&
      (rc = dlock__handle_new(c, &dlock__kind_write, name, len, write)) != 0) {
    dlock_free(*read);
    *read = NULL;
  }
  return rc;
}
