/*
 * The small services a client gives the lock code: owner fields, the check
 * for a client shut down or inherited across fork().
 */
#include "client.h"
#include "lock.h"

#include "error.h"
#include "proto/format.h"

#include <string.h>

size_t dlock__owner_field(const dlock_client_t *c, uint64_t owner,
                          char buf[DLOCK__FIELD_MAX]) {
  /* "<client id>:<owner>" without stdio: this is on every call's path. */
  size_t id_len = strlen(c->id);
  memcpy(buf, c->id, id_len);
  buf[id_len] = ':';
  return id_len + 1 + dlock__fmt_u64(buf + id_len + 1, owner);
}

int dlock__check_blocking(dlock_client_t *c) {
  int rc = dlock__check_canceled(c);
  if (rc == 0 && c->loop != NULL)
    rc = dlock__fail(DLOCK_EINVAL,
                     "a blocking call on a client opened with "
                     "dlock_client_open_async() (use the _async verbs)");
  return rc;
}

int dlock__check_canceled(dlock_client_t *c) {
  if (dlock__forked_since(c->fork_gen))
    return dlock__fail_forked();
  if (atomic_load(&c->canceled))
    return dlock__fail(DLOCK_ECANCELED, "client is shutting down");
  return 0;
}
