/*
 * What the cluster tests share: a cluster of 3 masters and 3 replicas
 * (harness/cluster_group.h) started and timed, and names spread over its
 * masters.
 */
#ifndef DLOCK_TESTS_CLUSTER_UTIL_H
#define DLOCK_TESTS_CLUSTER_UTIL_H

#include <string.h>

#include "../src/proto/slot.h"
#include "harness/cluster_group.h"
#include "lock_util.h"

static inline cg_group_t *cluster(void) {
  cg_group_t *g = NULL;
  int64_t t0 = lu_now_ms();
  ASSERT_EQ(cg_start(&g), 0);
  printf("cluster up in %" PRId64 " ms: %s\n", lu_now_ms() - t0, cg_url(g));
  return g;
}

/* Fills 'names' with 'per' names on each of the 3 masters ("<prefix>N"),
 * and 'owner' with the node that serves each. Returns how many. */
static inline int spread_names(cg_group_t *g, const char *prefix, int per,
                               char names[][32], int *owner) {
  int masters[6], nm = cg_masters(g, masters), n = 0;
  ASSERT_EQ(nm, 3);
  int count[6] = {0};
  for (int i = 0; n < 3 * per && i < 10000; i++) {
    char name[32];
    snprintf(name, sizeof(name), "%s%d", prefix, i);
    int m = cg_master_of_slot(g, 0, dlock__key_slot(name, strlen(name)));
    ASSERT_GE(m, 0);
    if (count[m] >= per)
      continue;
    count[m]++;
    snprintf(names[n], 32, "%s", name);
    owner[n++] = m;
  }
  ASSERT_EQ(n, 3 * per);
  return n;
}

#endif
