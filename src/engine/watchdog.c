/*
 * Lease renewal in the background (see watchdog.h).
 */
#include "watchdog.h"
#include "alloc.h"

#include "engine.h"
#include "error.h"
#include "monotime.h"
#include "observe.h"
#include "proto/slot.h"
#include "scripts.h"
#include "sem_kinds.h"
#include "worker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Locks per script call: big enough that 10 000 locks take 20 calls in one
 * round, small enough that one call does not stall Redis noticeably. */
#define RENEW_BATCH 500
/* After a failed round, retry this much sooner than the usual period. */
#define RETRY_DIVISOR 4

struct dlock__watchdog {
  dlock_client_t *c;
  dlock__worker w;
};

typedef dlock__renewal renewal;

typedef struct round {
  renewal *items;
  size_t n, cap;
  int nomem;
  const dlock_client_t *c;
  int64_t oldest_us; /* the earliest confirmation among the holds */
} round;

void dlock__renewal_free(dlock__renewal *r) {
  dlock__free(r->name);
  dlock__free(r->prefix);
  r->name = r->prefix = NULL;
}

int dlock__renewal_of(const dlock_client_t *c, const dlock__hold *h,
                      dlock__renewal *out) {
  memset(out, 0, sizeof(*out));
  if ((out->name = dlock__malloc(h->name_len + 1)) == NULL)
    return DLOCK_ENOMEM;
  memcpy(out->name, h->name, h->name_len + 1);
  out->name_len = h->name_len;
  out->owner = h->owner;
  out->seq = h->seq;
  out->kind = h->kind;
  int rc = 0;
  if (h->kind == DLOCK__KIND_PERMIT) {
    /* A permit is renewed by its id in the semaphore's zset. */
    dlock__permit_id(c, h->owner, (unsigned char *)out->field);
    out->field_len = DLOCK__PERMIT_ID_BYTES;
    rc = dlock__permit_zset(h->name, h->name_len, &out->prefix,
                            &out->prefix_len);
  } else {
    out->field_len = dlock__owner_field(c, h->owner, out->field);
    if (h->kind == DLOCK_WRITE) {
      memcpy(out->field + out->field_len, ":write", 7);
      out->field_len += 6;
    }
    /* A read hold's "{name}:" without its colon. */
    if (h->kind == DLOCK_READ &&
        (rc = dlock__suffixed(h->name, h->name_len, "", 0, &out->prefix,
                              &out->prefix_len)) == 0)
      out->prefix[--out->prefix_len] = '\0';
  }
  if (rc != 0)
    dlock__renewal_free(out);
  return rc;
}

static void collect_one(dlock__hold *h, void *arg) {
  round *r = arg;
  if (!h->watchdog || h->lost || r->nomem)
    return;
  if (r->n == r->cap) {
    size_t cap = r->cap ? r->cap * 2 : 64;
    renewal *items = dlock__realloc(r->items, cap * sizeof(*items));
    if (items == NULL) {
      r->nomem = 1;
      return;
    }
    r->items = items;
    r->cap = cap;
  }
  renewal *it = &r->items[r->n];
  if (r->oldest_us == 0 || h->confirmed_us < r->oldest_us)
    r->oldest_us = h->confirmed_us;
  if (dlock__renewal_of(r->c, h, it) != 0) {
    r->nomem = 1;
    return;
  }
  r->n++;
}

static void free_round(round *r) {
  for (size_t i = 0; i < r->n; i++)
    dlock__renewal_free(&r->items[i]);
  dlock__free(r->items);
}

/* When a hold confirmed at 'confirmed_us' runs out, saturating. */
static int64_t lease_end(const dlock_client_t *c, int64_t confirmed_us) {
  return dlock__after_ms(confirmed_us, c->opt.watchdog_timeout_ms);
}

/* Which renewal script an item needs, numbered in the order the round
 * sends them: a field in a lock hash (0), a read hold, which renews its
 * timeout keys too (1), or a permit in a semaphore's zset (2). */
enum { GROUP_HASH, GROUP_READ, GROUP_PERMIT, NGROUPS };
static int group_of(const renewal *it) {
  return it->kind == DLOCK_READ           ? GROUP_READ
         : it->kind == DLOCK__KIND_PERMIT ? GROUP_PERMIT
                                          : GROUP_HASH;
}

/* Orders renewals by group, then slot, then as collected. */
typedef struct sort_key {
  int key;
  size_t i;
} sort_key;

static int by_key(const void *a, const void *b) {
  const sort_key *x = a, *y = b;
  if (x->key != y->key)
    return x->key < y->key ? -1 : 1;
  return x->i < y->i ? -1 : x->i > y->i;
}

/*
 * Sends every renewal in one pipelined round of batched script calls,
 * RENEW_BATCH locks per call. Fills 'renewed' (1/0 per item) and returns 0,
 * or an error code.
 */
static int send_renewals(dlock_client_t *c, round *r, unsigned char *renewed,
                         int *synced) {
  size_t ingroup[NGROUPS] = {0}, ncalls = 0;
  int one_shard = dlock__route_one_shard(&c->route);
  for (size_t i = 0; i < r->n; i++)
    ingroup[group_of(&r->items[i])]++;
  for (int g = 0; g < NGROUPS; g++)
    ncalls += (ingroup[g] + RENEW_BATCH - 1) / RENEW_BATCH;
  /* On a cluster batches also end at each slot: one call per item at
   * most. */
  if (!one_shard && ncalls < r->n)
    ncalls = r->n;
  dlock__eval *calls = dlock__calloc(ncalls + 1, sizeof(*calls));
  redisReply **replies = dlock__calloc(ncalls + 1, sizeof(*replies));
  size_t **members = dlock__calloc(ncalls + 1, sizeof(*members));
  const char **argv = dlock__calloc(3 * r->n + ncalls + 1, sizeof(*argv));
  size_t *lens = dlock__calloc(3 * r->n + ncalls + 1, sizeof(*lens));
  size_t *order = dlock__calloc(r->n + 1, sizeof(*order));
  char lease[24];
  int rc = 0;
  if (calls == NULL || replies == NULL || members == NULL || argv == NULL ||
      lens == NULL || order == NULL) {
    rc = dlock__fail(DLOCK_ENOMEM, "out of memory renewing locks");
    goto out;
  }
  snprintf(lease, sizeof(lease), "%lld", (long long)c->opt.watchdog_timeout_ms);
  /* Hash-field holds first, then read holds, then permits, each group in
   * batches. */
  size_t m = 0;
  for (int pass = 0; pass < NGROUPS; pass++)
    for (size_t i = 0; i < r->n; i++)
      if (group_of(&r->items[i]) == pass)
        order[m++] = i;
  /* On a cluster one script call may touch keys of one slot only: within
   * each group the items are ordered by slot, and a batch ends where the
   * slot changes. The calls are then sent per node, pipelined. */
  if (!one_shard) {
    sort_key *keys = dlock__calloc(r->n + 1, sizeof(*keys));
    if (keys == NULL) {
      rc = dlock__fail(DLOCK_ENOMEM, "out of memory renewing locks");
      goto out;
    }
    for (size_t i = 0; i < r->n; i++) {
      renewal *it = &r->items[i];
      it->slot = dlock__route_shard(&c->route, it->name, it->name_len);
      keys[i].key = group_of(it) * DLOCK__SLOTS + it->slot;
      keys[i].i = i;
    }
    qsort(keys, r->n, sizeof(*keys), by_key);
    for (size_t i = 0; i < r->n; i++)
      order[i] = keys[i].i;
    dlock__free(keys);
  }
  size_t pos = 0, k = 0;
  for (size_t first = 0; first < r->n; k++) {
    const renewal *head = &r->items[order[first]];
    int group = group_of(head);
    int read = group == GROUP_READ;
    size_t count = 0;
    while (first + count < r->n && count < RENEW_BATCH &&
           group_of(&r->items[order[first + count]]) == group &&
           (one_shard || r->items[order[first + count]].slot == head->slot))
      count++;
    calls[k].script = read                    ? &dlock__script_renew_read
                      : group == GROUP_PERMIT ? &dlock__script_psem_renew
                                              : &dlock__script_renew;
    calls[k].nkeys = (int)(read ? 2 * count : count);
    calls[k].nargs = (int)count + 1;
    calls[k].argv = &argv[pos];
    calls[k].lens = &lens[pos];
    members[k] = &order[first];
    for (size_t i = 0; i < count; i++) {
      const renewal *it = &r->items[order[first + i]];
      /* A permit's key is its semaphore's zset; a lock's, the lock. */
      argv[pos] = group == GROUP_PERMIT ? it->prefix : it->name;
      lens[pos++] = group == GROUP_PERMIT ? it->prefix_len : it->name_len;
      if (read) {
        argv[pos] = it->prefix;
        lens[pos++] = it->prefix_len;
      }
    }
    argv[pos] = lease;
    lens[pos++] = strlen(lease);
    for (size_t i = 0; i < count; i++, pos++) {
      argv[pos] = r->items[order[first + i]].field;
      lens[pos] = r->items[order[first + i]].field_len;
    }
    first += count;
  }
  ncalls = k;
  /* A round of many thousand locks takes longer than one command timeout
   * (100 000 locks: about 0.3 s), so it fails only when Redis stops
   * answering for a command timeout; one timeout over the whole round
   * declared a connection that answered every script dead. But no answer
   * by the time the oldest hold's lease runs out means that hold is lost
   * whatever the answer would have been: waiting longer would only report
   * it late, and reconnecting is bounded by it too. */
  int64_t now = dlock__now_us();
  int64_t expiry = lease_end(c, r->oldest_us);
  if (expiry <= now)
    expiry = now + 1000;
  dlock__synced sy;
  rc = dlock__eval_write_paced(c, ncalls, calls, replies,
                               c->opt.command_timeout_ms, expiry, &sy);
  *synced = rc == 0 && sy.ok;
  for (k = 0; k < ncalls && rc == 0; k++) {
    const redisReply *rep = replies[k];
    size_t count = (size_t)calls[k].nargs - 1;
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements != count) {
      rc = dlock__fail(DLOCK_EPROTO, "renewal script gave a bad reply");
      break;
    }
    for (size_t i = 0; i < count; i++)
      renewed[members[k][i]] = rep->element[i]->type == REDIS_REPLY_INTEGER &&
                               rep->element[i]->integer == 1;
  }
  for (k = 0; k < ncalls && replies != NULL; k++)
    if (replies[k] != NULL)
      freeReplyObject(replies[k]);
out:
  dlock__free(calls);
  dlock__free(replies);
  dlock__free(members);
  dlock__free((void *)argv);
  dlock__free(lens);
  dlock__free(order);
  return rc;
}

/* Applies a round's outcome to the hold table and returns how many of the
 * items were found lost (their indexes are set in 'lost'). A hold that was
 * released or re-acquired meanwhile (another seq) is left alone. Sets
 * '*next_end_us' to the earliest lease end still to come among the holds
 * left unrenewed (0 when none). A round that too few replicas acknowledged
 * ('synced' 0) renewed the holds on the master only, where a failover
 * could lose the new lease: it confirms none of them, and a hold whose
 * lease runs out with no synced renewal is reported lost. */
static size_t apply_round(dlock_client_t *c, round *r, int rc, int synced,
                          const unsigned char *renewed, int64_t sent_us,
                          unsigned char *lost, int64_t *next_end_us) {
  size_t nlost = 0;
  *next_end_us = 0;
  int64_t now = dlock__now_us();
  int64_t lease_us = dlock__ms_to_us(c->opt.watchdog_timeout_ms);
  pthread_mutex_lock(&c->mu);
  for (size_t i = 0; i < r->n; i++) {
    renewal *it = &r->items[i];
    dlock__hold *h = dlock__holds_find(&c->holds, it->name, it->name_len,
                                       it->owner, it->kind);
    if (h == NULL || h->seq != it->seq || h->lost)
      continue;
    if (rc == 0 && renewed[i] && synced) {
      h->confirmed_us = sent_us;
    } else if (h->releasing > 0) {
      /* An unlock in flight may have run first: its answer decides. */
    } else if ((rc == 0 && !renewed[i]) || now - h->confirmed_us >= lease_us) {
      /* Gone, or unreachable for so long that the key has expired. */
      h->lost = 1;
      lost[i] = 1;
      nlost++;
      continue;
    }
    int64_t end = lease_end(c, h->confirmed_us);
    if (!(rc == 0 && renewed[i] && synced) && end > now &&
        (*next_end_us == 0 || end < *next_end_us))
      *next_end_us = end;
  }
  pthread_mutex_unlock(&c->mu);
  return nlost;
}

/* A hold with a fixed lease that was never released has expired on the
 * server; a second past its lease, the record goes too, so that programs
 * that let leases run out do not grow the table for ever. (Its owner's
 * unlock then says DLOCK_ENOTHELD rather than DLOCK_ELOST.) Saturating: an
 * end that wrapped round into the past would drop the record of a hold
 * that is still there, and the owner's next acquisition, counting no hold,
 * would set the server's count back to 1, so that one unlock freed a lock
 * taken several times. */
static int lease_long_over(const dlock__hold *h, void *arg) {
  int64_t now = *(const int64_t *)arg;
  return !h->watchdog &&
         now > dlock__after_ms(h->confirmed_us, h->lease_ms + 1000);
}

/* One renewal round; returns 0 when Redis answered it. '*lease_end_us' is
 * when the first of the holds it could not renew runs out (0 when none),
 * so that its loss is reported then. */
static int renew_round(dlock_client_t *c, int64_t *lease_end_us) {
  *lease_end_us = 0;
  round r = {.c = c};
  int64_t now = dlock__now_us();
  pthread_mutex_lock(&c->mu);
  dlock__holds_remove_if(&c->holds, lease_long_over, &now);
  dlock__holds_each(&c->holds, collect_one, &r);
  pthread_mutex_unlock(&c->mu);
  if (r.n == 0) {
    free_round(&r);
    return r.nomem ? DLOCK_ENOMEM : 0;
  }
  unsigned char *renewed = dlock__calloc(r.n, 1), *lost = dlock__calloc(r.n, 1);
  int rc = DLOCK_ENOMEM;
  if (renewed != NULL && lost != NULL) {
    int64_t sent_us = dlock__now_us();
    int synced = 0;
    rc = send_renewals(c, &r, renewed, &synced);
    size_t nlost =
        apply_round(c, &r, rc, synced, renewed, sent_us, lost, lease_end_us);
    /* Retried sooner, like a round without an answer. */
    if (rc == 0 && !synced)
      rc = DLOCK_ENOSYNC;
    for (size_t i = 0; i < r.n && nlost > 0; i++) {
      if (lost[i])
        dlock__obs_lost(c->stats, r.items[i].name, r.items[i].name_len,
                        r.items[i].owner);
      if (lost[i] && c->opt.on_lost != NULL)
        c->opt.on_lost(c->opt.on_lost_data, r.items[i].name,
                       r.items[i].name_len, r.items[i].owner);
    }
    dlock__obs_round(c, rc, renewed, r.n);
  }
  dlock__free(renewed);
  dlock__free(lost);
  free_round(&r);
  return r.nomem ? DLOCK_ENOMEM : rc;
}

void dlock__watchdog_renew_now(dlock_client_t *c) {
  int64_t lease_end_us;
  (void)renew_round(c, &lease_end_us);
}

static void *watchdog_main(void *arg) {
  dlock__watchdog *wd = arg;
  /* Bounded by the option's limit, and never 0: a period that overflowed
   * or rounded to nothing would make this loop spin. */
  int64_t period_us = dlock__ms_to_us(wd->c->opt.watchdog_timeout_ms) / 3;
  if (period_us < 1000)
    period_us = 1000;
  int64_t next_us = dlock__add_us(dlock__now_us(), period_us);
  pthread_mutex_lock(&wd->w.mu);
  while (!wd->w.stopping) {
    if (dlock__now_us() < next_us) {
      struct timespec ts = dlock__timespec_at(next_us);
      pthread_cond_timedwait(&wd->w.cv, &wd->w.mu, &ts);
      continue;
    }
    pthread_mutex_unlock(&wd->w.mu);
    int64_t lease_end_us;
    int rc = renew_round(wd->c, &lease_end_us);
    pthread_mutex_lock(&wd->w.mu);
    next_us = dlock__add_us(dlock__now_us(),
                            rc == 0 ? period_us : period_us / RETRY_DIVISOR);
    /* A hold that could not be renewed is reported lost when its lease
     * ends, not up to a retry period later. */
    if (lease_end_us > 0 && lease_end_us < next_us)
      next_us = lease_end_us;
  }
  pthread_mutex_unlock(&wd->w.mu);
  return NULL;
}

int dlock__watchdog_start(dlock_client_t *c, dlock__watchdog **out) {
  dlock__watchdog *wd = dlock__calloc(1, sizeof(*wd));
  if (wd == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory starting the watchdog");
  wd->c = c;
  dlock__worker_init(&wd->w);
  if (dlock__worker_start(&wd->w, watchdog_main, wd) != 0) {
    dlock__worker_stop(&wd->w);
    dlock__free(wd);
    return dlock__fail(DLOCK_ENOMEM, "pthread_create failed");
  }
  *out = wd;
  return 0;
}

void dlock__watchdog_stop(dlock__watchdog *wd) {
  if (wd == NULL)
    return;
  dlock__worker_stop(&wd->w);
  dlock__free(wd);
}

void dlock__watchdog_forget(dlock__watchdog *wd) {
  /* The thread is the parent's: no join, and its mutex and condition
   * variable are left as they are (it may have been waiting on them). */
  dlock__free(wd);
}
