/*
 * What the single-lock kinds' calls share: freeing a built call, the lease
 * a script is given, the refusal of a non-reentrant kind's second hold,
 * and the force release of a lock whose waiters listen on its one channel.
 */
#include "alloc.h"
#include "lock.h"

#include "error.h"

#include <string.h>

void dlock__call_free(dlock__call *call) {
  for (size_t i = 0; i < sizeof(call->owned) / sizeof(*call->owned); i++) {
    dlock__free(call->owned[i]);
    call->owned[i] = NULL;
  }
}

int64_t dlock__lease_for(const dlock_t *l, int64_t lease_ms) {
  return lease_ms == DLOCK_WATCHDOG ? l->c->opt.watchdog_timeout_ms : lease_ms;
}

void dlock__call_init(dlock__call *call) {
  memset(call->owned, 0, sizeof(call->owned));
}

void dlock__call_set(dlock__call *out, const dlock__script *script, int nkeys,
                     const char *const *argv, const size_t *lens, int n) {
  memcpy(out->argv, argv, (size_t)n * sizeof(*argv));
  memcpy(out->lens, lens, (size_t)n * sizeof(*lens));
  dlock__eval call = {script, nkeys, n - nkeys, out->argv, out->lens};
  out->eval = call;
}

int dlock__refuse_reentry(const dlock_t *l, const dlock__ask *a) {
  if (a->believed <= 0)
    return 0;
  return dlock__fail(DLOCK_EINVAL,
                     "lock \"%.100s\" is not reentrant and this owner "
                     "holds it already",
                     l->name);
}

int dlock__force_plain_call(dlock_t *l, const char *message, dlock__call *out) {
  /* The script deletes only a lock of the kind named here. */
  const char *kind = l->kind->id == DLOCK_READ || l->kind->id == DLOCK_WRITE
                         ? "rw"
                         : "exclusive";
  const char *argv[] = {l->name, l->channel, message, kind};
  const size_t lens[] = {l->len, l->channel_len, strlen(message), strlen(kind)};
  dlock__call_set(out, &dlock__script_force_release, 2, argv, lens, 4);
  return 0;
}
