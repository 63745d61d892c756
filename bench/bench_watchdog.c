/*
 * bench_watchdog: one client holds --locks watchdog locks; how long does a
 * renewal round take, and how many commands does it send?
 *
 * The locks are taken by 16 threads on one client (each its own names).
 * The client's watchdog timeout is set long enough that its own thread never
 * runs a round during the measurement; the rounds are run with the library's
 * internal dlock__watchdog_renew_now(), the very function that thread calls,
 * so this program links the static library and includes its private
 * headers. Each round is timed and bracketed by INFO commandstats. At the
 * end every lock is released; a renewal that lost one would show as an
 * error there (DLOCK_ELOST).
 *
 * Output: locks rounds round_p50 round_max (ms) cmds (sent per round,
 * median) cmds_all (with the commands inside the scripts) renewed (ok/bad)
 * take_s (seconds to take the locks) errors
 */
#include "common.h"

#include <dlock.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "watchdog.h"

#define THREADS 16

static const char *url = "redis://127.0.0.1:6379";
static int nlocks = 10000, nrounds = 10;

typedef struct part {
  pthread_t tid;
  dlock_client_t *c;
  int first, count, take; /* take: 1 lock them, 0 unlock them */
  uint64_t owner;         /* the same in both phases, whatever thread */
  dlock_t **locks;
  uint64_t errors;
} part_t;

static void *run_part(void *arg) {
  part_t *p = arg;
  char name[64];
  for (int i = p->first; i < p->first + p->count; i++) {
    int rc;
    if (p->take) {
      snprintf(name, sizeof name, "bench:wd:%d", i);
      if ((rc = dlock_get(p->c, name, &p->locks[i])) < 0)
        bench_die("get", rc);
      rc = dlock_lock_as(p->locks[i], p->owner, DLOCK_WATCHDOG);
    } else {
      rc = dlock_unlock_as(p->locks[i], p->owner);
      dlock_free(p->locks[i]);
    }
    if (rc < 0 && p->errors++ < 3) {
      fprintf(stderr, "bench_watchdog: %s %d: %s (%s)\n",
              p->take ? "lock" : "unlock", i, dlock_strerror(rc),
              dlock_last_error());
    }
  }
  return NULL;
}

/* Locks or unlocks them all, THREADS threads at once; returns the errors. */
static uint64_t all_locks(dlock_client_t *c, dlock_t **locks, int take) {
  static uint64_t owners[THREADS];
  part_t parts[THREADS];
  uint64_t errors = 0;
  for (int t = 0; t < THREADS; t++) {
    if (owners[t] == 0)
      owners[t] = dlock_owner_new();
    parts[t] = (part_t){0};
    parts[t].owner = owners[t];
    parts[t].c = c;
    parts[t].locks = locks;
    parts[t].take = take;
    parts[t].first = nlocks * t / THREADS;
    parts[t].count = nlocks * (t + 1) / THREADS - parts[t].first;
    if (pthread_create(&parts[t].tid, NULL, run_part, &parts[t]) != 0)
      bench_fail("pthread_create failed");
  }
  for (int t = 0; t < THREADS; t++) {
    pthread_join(parts[t].tid, NULL);
    errors += parts[t].errors;
  }
  return errors;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static void usage(void) {
  fprintf(stderr,
          "usage: bench_watchdog [--url URL] [--locks N] [--rounds R]\n");
  exit(2);
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (v == NULL)
      usage();
    else if (strcmp(a, "--url") == 0)
      url = v, i++;
    else if (strcmp(a, "--locks") == 0)
      nlocks = atoi(v), i++;
    else if (strcmp(a, "--rounds") == 0)
      nrounds = atoi(v), i++;
    else
      usage();
  }
  if (nlocks < THREADS || nlocks > 1000000 || nrounds < 1 || nrounds > 1000)
    usage();
  dlock_options_t o;
  dlock_client_t *c;
  int rc;
  dlock_options_init(&o);
  o.url = url;
  /* A round every 200 s: the client's own watchdog stays out of the way. */
  o.watchdog_timeout_ms = 600000;
  if ((rc = dlock_client_open(&o, &c)) < 0)
    bench_die("client_open", rc);
  dlock_t **locks = calloc((size_t)nlocks, sizeof *locks);
  uint64_t *ns = calloc((size_t)nrounds, sizeof *ns);
  uint64_t *wire = calloc((size_t)nrounds, sizeof *wire);
  uint64_t *all = calloc((size_t)nrounds, sizeof *all);
  if (!locks || !ns || !wire || !all)
    bench_fail("out of memory");
  redisContext *r = bench_connect(url);

  uint64_t t = bench_now_ns();
  uint64_t errors = all_locks(c, locks, 1);
  double take_s = (double)(bench_now_ns() - t) / 1e9;
  /* Each lock renewed costs its script an HEXISTS and a PEXPIRE. */
  int renewed = 1;
  for (int k = 0; k < nrounds; k++) {
    bench_cmdstats_t before, after;
    bench_cmdstats(r, &before);
    t = bench_now_ns();
    dlock__watchdog_renew_now(c);
    ns[k] = bench_now_ns() - t;
    bench_cmdstats(r, &after);
    wire[k] = after.wire - before.wire;
    all[k] = after.all - before.all;
    if (all[k] - wire[k] < 2 * (uint64_t)nlocks)
      renewed = 0;
  }
  /* Every lock must still be held by its owner after all those rounds. */
  errors += all_locks(c, locks, 0);
  qsort(ns, (size_t)nrounds, sizeof *ns, cmp_u64);
  qsort(wire, (size_t)nrounds, sizeof *wire, cmp_u64);
  qsort(all, (size_t)nrounds, sizeof *all, cmp_u64);
  printf("locks=%d rounds=%d round_p50=%.2f round_max=%.2f cmds=%" PRIu64
         " cmds_all=%" PRIu64 " renewed=%s take_s=%.2f errors=%" PRIu64 "\n",
         nlocks, nrounds, (double)ns[(nrounds - 1) / 2] / 1e6,
         (double)ns[nrounds - 1] / 1e6, wire[(nrounds - 1) / 2],
         all[(nrounds - 1) / 2], renewed ? "ok" : "bad", take_s, errors);
  redisFree(r);
  dlock_client_close(c);
  free(locks);
  free(ns);
  free(wire);
  free(all);
  return errors || !renewed ? 1 : 0;
}
