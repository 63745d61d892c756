/*
 * Lock handles as objects: creating one of a kind, with its key names, and
 * freeing it. What a handle does is the engine's (handle.c).
 */
#include "alloc.h"
#include "lock.h"

#include "error.h"

#include <string.h>

size_t dlock__field_plain(dlock_t *l, uint64_t owner,
                          char buf[DLOCK__FIELD_MAX]) {
  return dlock__owner_field(l->c, owner, buf);
}

size_t dlock__kind_field(dlock_t *l, uint64_t owner,
                         char buf[DLOCK__FIELD_MAX]) {
  return l->kind->field != NULL ? l->kind->field(l, owner, buf)
                                : dlock__field_plain(l, owner, buf);
}

static int check_name(const char *name, size_t len) {
  if (name == NULL)
    return dlock__fail(DLOCK_EINVAL, "lock name is NULL");
  if (len == 0)
    return dlock__fail(DLOCK_EINVAL, "lock name is empty");
  if (len > DLOCK_NAME_MAX)
    return dlock__fail(DLOCK_EINVAL,
                       "lock name is %zu bytes long; the limit is %d", len,
                       DLOCK_NAME_MAX);
  return 0;
}

int dlock__handle_new(dlock_client_t *c, const dlock__kind *kind,
                      const char *name, size_t len, dlock_t **out) {
  if (out != NULL)
    *out = NULL;
  if (c == NULL || out == NULL)
    return dlock__fail(DLOCK_EINVAL, "client and out must not be NULL");
  if (dlock__forked_since(c->fork_gen))
    return dlock__fail_forked();
  int rc = check_name(name, len);
  if (rc != 0)
    return rc;
  dlock_t *l = dlock__calloc(1, sizeof(*l));
  if (l == NULL || (l->name = dlock__memdup(name, len)) == NULL) {
    dlock__free(l);
    return dlock__fail(DLOCK_ENOMEM, "out of memory creating a lock handle");
  }
  l->len = len;
  l->c = c;
  l->kind = kind;
  int rw = kind->id == DLOCK_READ || kind->id == DLOCK_WRITE;
  rc = dlock__prefixed(rw ? "redisson_rwlock" : "redisson_lock__channel", name,
                       len, &l->channel, &l->channel_len);
  if (rc == 0)
    rc = dlock__prefixed("redisson_lock_token", name, len, &l->token_key,
                         &l->token_key_len);
  if (rc != 0) {
    dlock_free(l);
    return rc;
  }
  *out = l;
  return 0;
}

dlock_kind_t dlock_kind(const dlock_t *l) {
  return l != NULL ? l->kind->id : DLOCK_REENTRANT;
}

void dlock_free(dlock_t *l) {
  if (l == NULL)
    return;
  dlock__free(l->name);
  dlock__free(l->channel);
  dlock__free(l->token_key);
  if (l->subs != NULL && l->kind->dispose != NULL)
    l->kind->dispose(l);
  dlock__free(l);
}

const char *dlock_name(const dlock_t *l, size_t *len) {
  if (len != NULL)
    *len = l ? l->len : 0;
  return l ? l->name : NULL;
}
