/*
 * Composite locks over several handles: what the MultiLock and the RedLock
 * share (making one, each owner's record of its token and depth, riding an
 * outage, the queries), and the MultiLock itself (all of its parts). The
 * RedLock is in redlock.c, the parallel rounds of a MultiLock's parts in
 * batch.c.
 */
#include "alloc.h"
#include "composite.h"

#include "error.h"
#include "monotime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t max_token(dlock_t *l, uint64_t owner);
static int count_acquisition(dlock_t *l, uint64_t owner, uint64_t token);

/* Makes a composite of 'kind' (composite.h). */
int dlock__composite_new(dlock_t *const *locks, size_t n,
                         const dlock__kind *kind, dlock_t **out) {
  if (out != NULL)
    *out = NULL;
  if (locks == NULL || out == NULL || n == 0)
    return dlock__fail(DLOCK_EINVAL, "locks and out must not be NULL, n > 0");
  for (size_t i = 0; i < n; i++) {
    if (locks[i] == NULL)
      return dlock__fail(DLOCK_EINVAL, "lock %zu of %zu is NULL", i, n);
    if (locks[i]->kind->acquire != NULL)
      return dlock__fail(DLOCK_EINVAL,
                         "lock %zu is itself a MultiLock or RedLock", i);
    if (dlock__forked_since(locks[i]->c->fork_gen))
      return dlock__fail_forked();
  }
  dlock_t *l = dlock__calloc(1, sizeof(*l));
  if (l == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory creating a composite");
  /* Set first: dlock_free frees the parts' records through it. */
  l->kind = kind;
  pthread_mutex_init(&l->cmu, NULL);
  l->subs = dlock__calloc(n, sizeof(*l->subs));
  l->name = dlock__strdup(kind->id == DLOCK_RED ? "(redlock)" : "(multilock)");
  if (l->subs == NULL || l->name == NULL) {
    if (l->subs == NULL)
      pthread_mutex_destroy(&l->cmu);
    dlock_free(l);
    return dlock__fail(DLOCK_ENOMEM, "out of memory creating a composite");
  }
  memcpy(l->subs, locks, n * sizeof(*locks));
  l->nsubs = n;
  l->len = strlen(l->name);
  *out = l;
  return 0;
}

/* Whether 'owner' holds a part already (composite.h). */
int dlock__holds_any_part(dlock_t *l, uint64_t owner) {
  for (size_t i = 0; i < l->nsubs; i++)
    if (dlock__has_hold(l->subs[i], owner))
      return 1;
  return 0;
}

/* Records a composite acquisition (composite.h). */
int dlock__record_composite(dlock_t *l, uint64_t owner, int fresh) {
  if (fresh)
    dlock__drop_composite(l, owner, 1);
  int rc = count_acquisition(l, owner, max_token(l, owner));
  if (rc != 0) {
    l->kind->release(l, owner);
    rc = dlock__fail(DLOCK_ENOMEM, "out of memory recording a hold");
  }
  return rc;
}

/* Whether to try again after an outage (composite.h). */
int dlock__ride_on(dlock_client_t *c, int64_t wait_ms, int64_t deadline_us,
                   dlock__riding *ride, int rc) {
  if (wait_ms == 0 || c->opt.outage_wait_ms == 0)
    return -1;
  return dlock__outage_next(c, ride, rc,
                            dlock__outage_until(c, wait_ms, deadline_us)) == 0
             ? 0
             : -1;
}

/* Force-releases every part: whether any was held, or a MultiLock's first
 * error. */
int dlock__composite_force(dlock_t *l) {
  int any = 0;
  for (size_t i = 0; i < l->nsubs; i++) {
    int rc = dlock_force_unlock(l->subs[i]);
    if (rc < 0 && l->kind->id == DLOCK_MULTI)
      return rc;
    any |= rc > 0;
  }
  return any;
}

static int cmp_desc(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

/*
 * Asks every part and combines the answers: a MultiLock is locked, held,
 * counted and timed by its weakest part; a RedLock by its majority-th
 * part (the answers sorted from most to least, taken at n/2+1). An
 * unreachable RedLock node counts as "no".
 */
int dlock__composite_query(dlock_t *l, uint64_t owner, int what, int64_t *out) {
  int64_t *v = dlock__calloc(l->nsubs, sizeof(*v));
  if (v == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory querying locks");
  int red = l->kind->id == DLOCK_RED;
  for (size_t i = 0; i < l->nsubs; i++) {
    int rc = dlock__query_single(l->subs[i], owner, what, &v[i]);
    if (rc != 0 && !red) {
      dlock__free(v);
      return rc;
    }
    if (rc != 0)
      v[i] = 0;
  }
  qsort(v, l->nsubs, sizeof(*v), cmp_desc);
  *out = v[red ? l->nsubs / 2 : l->nsubs - 1];
  dlock__free(v);
  return 0;
}

/* ---- per-owner records of a composite ------------------------------------ */

struct dlock__chold {
  struct dlock__chold *next;
  uint64_t owner;
  uint64_t token;
  int depth; /* acquisitions not yet released */
};

void dlock__composite_free(dlock_t *l) {
  while (l->cholds != NULL) {
    struct dlock__chold *next = l->cholds->next;
    dlock__free(l->cholds);
    l->cholds = next;
  }
  dlock__free(l->subs);
  pthread_mutex_destroy(&l->cmu);
}

static struct dlock__chold **find_chold(dlock_t *l, uint64_t owner) {
  struct dlock__chold **p = &l->cholds;
  while (*p != NULL && (*p)->owner != owner)
    p = &(*p)->next;
  return p;
}

/* Counts one more acquisition by 'owner'; the first fixes the token. */
static int count_acquisition(dlock_t *l, uint64_t owner, uint64_t token) {
  pthread_mutex_lock(&l->cmu);
  struct dlock__chold **p = find_chold(l, owner);
  if (*p == NULL && (*p = dlock__calloc(1, sizeof(**p))) != NULL) {
    (*p)->owner = owner;
    (*p)->token = token;
  }
  int ok = *p != NULL;
  if (ok)
    (*p)->depth++;
  pthread_mutex_unlock(&l->cmu);
  return ok ? 0 : dlock__fail(DLOCK_ENOMEM, "out of memory recording a hold");
}

/* Drops one acquisition of 'owner' (composite.h). */
void dlock__drop_composite(dlock_t *l, uint64_t owner, int all) {
  pthread_mutex_lock(&l->cmu);
  struct dlock__chold **p = find_chold(l, owner);
  if (*p != NULL && (all || --(*p)->depth <= 0)) {
    struct dlock__chold *gone = *p;
    *p = gone->next;
    dlock__free(gone);
  }
  pthread_mutex_unlock(&l->cmu);
}

uint64_t dlock__composite_token(dlock_t *l, uint64_t owner) {
  pthread_mutex_lock(&l->cmu);
  struct dlock__chold *h = *find_chold(l, owner);
  uint64_t token = h != NULL ? h->token : 0;
  pthread_mutex_unlock(&l->cmu);
  return token;
}

/* The largest of the parts' tokens: every part's counter went up when the
 * whole was taken, so for one set of names it increases with each holder. */
static uint64_t max_token(dlock_t *l, uint64_t owner) {
  uint64_t best = 0;
  for (size_t i = 0; i < l->nsubs; i++) {
    uint64_t t = dlock_token_as(l->subs[i], owner);
    if (t == 0 && l->kind->id == DLOCK_MULTI)
      return 0;
    if (t > best)
      best = t;
  }
  return best;
}

/* ---- MultiLock --------------------------------------------------------- */

static int64_t ms_left(int64_t deadline_us) {
  if (deadline_us == INT64_MAX)
    return DLOCK_WAIT_FOREVER;
  int64_t left = (deadline_us - dlock__now_us()) / 1000;
  return left > 0 ? left : 0;
}

/*
 * Takes every part without waiting; when one is taken by someone else,
 * lets go of all, waits for that one alone (holding nothing, so two
 * callers with overlapping sets in any order cannot deadlock), and goes
 * round again holding it.
 */
static int multi_acquire(dlock_t *l, uint64_t owner, int64_t wait_ms,
                         int64_t lease_ms, int64_t deadline_us) {
  unsigned char *held = dlock__calloc(l->nsubs, 1);
  if (held == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory acquiring a MultiLock");
  int fresh = !dlock__holds_any_part(l, owner);
  int rc;
  dlock__riding ride;
  memset(&ride, 0, sizeof(ride));
  for (;;) {
    size_t busy = l->nsubs;
    rc = dlock__attempt_all(l, owner, lease_ms, held, &busy);
    if (rc == 0)
      break;
    int err = rc;
    char detail[512];
    snprintf(detail, sizeof(detail), "%s", dlock_last_error());
    dlock__release_parts(l, owner, held);
    /* A part that failed with an error an outage causes (its server
     * unreachable, READONLY, LOADING, too few replicas) is tried again,
     * every part from the start, after the outage back-off, as a single
     * lock's wait does: within the wait, or outage_wait_ms after the first
     * such error for a wait without end. */
    if ((err == DLOCK_EIO || err == DLOCK_ENOSYNC) &&
        dlock__ride_on(l->subs[busy]->c, wait_ms, deadline_us, &ride, err) == 0)
      continue;
    if (!dlock__multi_waits_for_part(err, wait_ms, deadline_us)) {
      rc = dlock__fail_text(err, detail);
      break;
    }
    rc = dlock_trylock_as(l->subs[busy], owner, ms_left(deadline_us), lease_ms);
    if (rc != 0)
      break;
    held[busy] = 1;
  }
  dlock__free(held);
  return rc == 0 ? dlock__record_composite(l, owner, fresh) : rc;
}

/* Releases every part; DLOCK_ELOST when any had been lost, DLOCK_ENOTHELD
 * when none was held. */
static int multi_release(dlock_t *l, uint64_t owner) {
  int lost = 0, notheld = 0, other = 0;
  int *state = dlock__calloc(l->nsubs, sizeof(*state));
  if (state != NULL)
    dlock__release_each(l, owner, NULL, state);
  for (size_t i = 0; i < l->nsubs; i++) {
    int rc = state != NULL ? state[i] : dlock_unlock_as(l->subs[i], owner);
    if (rc == DLOCK_ELOST)
      lost++;
    else if (rc == DLOCK_ENOTHELD)
      notheld++;
    else if (rc != 0 && other == 0)
      other = rc;
  }
  dlock__free(state);
  if ((size_t)notheld < l->nsubs)
    dlock__drop_composite(l, owner, 0);
  if (other != 0)
    return other;
  return dlock__multi_unlock_outcome(l->nsubs, (size_t)lost, (size_t)notheld);
}

const dlock__kind dlock__kind_multi =
    DLOCK__COMPOSITE_KIND(DLOCK_MULTI, multi_acquire, multi_release);

int dlock_get_multi(dlock_t *const *locks, size_t n, dlock_t **out) {
  return dlock__composite_new(locks, n, &dlock__kind_multi, out);
}
