/*
 * Lock handles and lock kinds. Every kind is a dlock_t driven by the same
 * verbs; what differs is in its dlock__kind: how one attempt to acquire is
 * made, how a hold is released, and what the watchdog renews.
 */
#ifndef DLOCK_LOCK_H
#define DLOCK_LOCK_H

#include "client.h"

enum dlock__kind_id { DLOCK__KIND_REENTRANT = 0 };

typedef struct dlock__kind dlock__kind;

struct dlock {
  dlock_client_t *c;
  const dlock__kind *kind;
  char *name; /* NUL-terminated copy; may contain NULs */
  size_t len;
  char *channel; /* redisson_lock__channel:{name} */
  size_t channel_len;
  char *token_key; /* redisson_lock_token:{name} */
  size_t token_key_len;
};

struct dlock__kind {
  int id;
  /*
   * One attempt: 0 when 'owner' holds the lock afterwards (the hold table is
   * updated), 1 when another owner holds it ('*ttl_ms' its remaining lease,
   * -1 none), or an error.
   */
  int (*try_acquire)(dlock_t *l, uint64_t owner, int64_t lease_ms,
                     int64_t *ttl_ms);
  /* Releases one hold of 'owner': 0, DLOCK_ENOTHELD, DLOCK_ELOST or error. */
  int (*release)(dlock_t *l, uint64_t owner);
};

extern const dlock__kind dlock__kind_reentrant;

/* Builds "prefix:{name}", or "prefix:name" when the name holds a '{' (it is
 * then taken to carry its own hash tag), as Redisson does. */
int dlock__prefixed(const char *prefix, const char *name, size_t len,
                    char **out, size_t *out_len);

/* Creates a handle of 'kind' on 'name' after checking the arguments. */
int dlock__handle_new(dlock_client_t *c, const dlock__kind *kind,
                      const char *name, size_t len, dlock_t **out);

#endif
