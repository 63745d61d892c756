/*
 * What the client believes a handle's owner holds, read from its hold
 * table (holds.c) under the client's mutex: the count the kinds' scripts
 * are told, and the error of a hold found lost.
 */
#include "lock.h"

#include "error.h"

int64_t dlock__believed_count(dlock_t *l, uint64_t owner) {
  dlock_client_t *c = l->c;
  pthread_mutex_lock(&c->mu);
  dlock__hold *h =
      dlock__holds_find(&c->holds, l->name, l->len, owner, l->kind->id);
  int64_t n = h != NULL && !h->lost ? h->count : 0;
  pthread_mutex_unlock(&c->mu);
  return n;
}

int dlock__has_hold(dlock_t *l, uint64_t owner) {
  dlock_client_t *c = l->c;
  pthread_mutex_lock(&c->mu);
  int known =
      dlock__holds_find(&c->holds, l->name, l->len, owner, l->kind->id) != NULL;
  pthread_mutex_unlock(&c->mu);
  return known;
}

void dlock__mark_hold(dlock_t *l, uint64_t owner, int mark) {
  dlock_client_t *c = l->c;
  pthread_mutex_lock(&c->mu);
  dlock__hold *h =
      dlock__holds_find(&c->holds, l->name, l->len, owner, l->kind->id);
  if (h != NULL && mark == DLOCK__MARK_LOST)
    h->lost = 1;
  else if (h != NULL)
    h->obs_part = 1;
  pthread_mutex_unlock(&c->mu);
}

int dlock__lost_error(const dlock_t *l) {
  return dlock__fail(DLOCK_ELOST,
                     "lock \"%.100s\" was lost while held (its lease ran out "
                     "or it was deleted); unlock what this owner took",
                     l->name);
}
