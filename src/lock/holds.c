/*
 * A chained hash table keyed by (lock name, owner). It grows when it holds
 * more entries than buckets, so lookups stay O(1) with ten thousand locks.
 */
#include "holds.h"
#include "alloc.h"

#include <stdlib.h>
#include <string.h>

#define INITIAL_BUCKETS 16

/* FNV-1a over the name, mixed with the owner. */
static uint64_t hash_of(const char *name, size_t len, uint64_t owner,
                        int kind) {
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < len; i++) {
    h ^= (unsigned char)name[i];
    h *= 1099511628211ULL;
  }
  h ^= owner + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  h ^= (uint64_t)kind * 0xff51afd7ed558ccdULL;
  return h;
}

void dlock__holds_init(dlock__holds *h) { memset(h, 0, sizeof(*h)); }

void dlock__holds_clear(dlock__holds *h) {
  for (size_t i = 0; i < h->nbuckets; i++) {
    dlock__hold *e = h->buckets[i];
    while (e != NULL) {
      dlock__hold *next = e->next;
      dlock__free(e->name);
      dlock__free(e);
      e = next;
    }
  }
  dlock__free(h->buckets);
  memset(h, 0, sizeof(*h));
}

dlock__hold *dlock__holds_find(const dlock__holds *h, const char *name,
                               size_t len, uint64_t owner, int kind) {
  if (h->nbuckets == 0)
    return NULL;
  uint64_t hash = hash_of(name, len, owner, kind);
  for (dlock__hold *e = h->buckets[hash & (h->nbuckets - 1)]; e; e = e->next)
    if (e->hash == hash && e->owner == owner && e->kind == kind &&
        e->name_len == len && memcmp(e->name, name, len) == 0)
      return e;
  return NULL;
}

static int grow(dlock__holds *h) {
  size_t n = h->nbuckets ? h->nbuckets * 2 : INITIAL_BUCKETS;
  dlock__hold **b = dlock__calloc(n, sizeof(*b));
  if (b == NULL)
    return -1;
  for (size_t i = 0; i < h->nbuckets; i++) {
    dlock__hold *e = h->buckets[i];
    while (e != NULL) {
      dlock__hold *next = e->next;
      e->next = b[e->hash & (n - 1)];
      b[e->hash & (n - 1)] = e;
      e = next;
    }
  }
  dlock__free(h->buckets);
  h->buckets = b;
  h->nbuckets = n;
  return 0;
}

dlock__hold *dlock__holds_put(dlock__holds *h, const char *name, size_t len,
                              uint64_t owner, int kind) {
  dlock__hold *e = dlock__holds_find(h, name, len, owner, kind);
  if (e != NULL)
    return e;
  if (h->count >= h->nbuckets && grow(h) != 0)
    return NULL;
  e = dlock__calloc(1, sizeof(*e));
  if (e == NULL || (e->name = dlock__memdup(name, len)) == NULL) {
    dlock__free(e);
    return NULL;
  }
  e->name_len = len;
  e->owner = owner;
  e->kind = kind;
  e->hash = hash_of(name, len, owner, kind);
  e->seq = ++h->next_seq;
  e->next = h->buckets[e->hash & (h->nbuckets - 1)];
  h->buckets[e->hash & (h->nbuckets - 1)] = e;
  h->count++;
  return e;
}

void dlock__holds_remove(dlock__holds *h, dlock__hold *hold) {
  dlock__hold **p = &h->buckets[hold->hash & (h->nbuckets - 1)];
  while (*p != NULL && *p != hold)
    p = &(*p)->next;
  if (*p == NULL)
    return;
  *p = hold->next;
  h->count--;
  dlock__free(hold->name);
  dlock__free(hold);
}

void dlock__holds_remove_if(dlock__holds *h,
                            int (*pred)(const dlock__hold *, void *),
                            void *arg) {
  for (size_t i = 0; i < h->nbuckets; i++) {
    dlock__hold **p = &h->buckets[i];
    while (*p != NULL) {
      dlock__hold *e = *p;
      if (pred(e, arg)) {
        *p = e->next;
        h->count--;
        dlock__free(e->name);
        dlock__free(e);
      } else {
        p = &e->next;
      }
    }
  }
}

void dlock__holds_each(dlock__holds *h, void (*fn)(dlock__hold *, void *),
                       void *arg) {
  for (size_t i = 0; i < h->nbuckets; i++)
    for (dlock__hold *e = h->buckets[i]; e != NULL; e = e->next)
      fn(e, arg);
}
