/*
 * bench_multi: lock+unlock pairs per second of a MultiLock of N parts, one
 * thread, against the same N locks taken and released one after the other
 * by hand (what a MultiLock costs when its parts are not sent at once).
 * The two are taken in turns of a quarter second, so that both see the
 * same load on the machine.
 *
 *   bench_multi --url URL [--parts N] [--seconds S]
 *
 * URL may be a cluster's (redis-cluster://...): the names "bm:<i>" then
 * spread over its masters by their slots.
 *
 * Output, one line of key=value pairs: parts, multi_pairs_per_s,
 * multi_p50_us, multi_p99_us, in_turn_pairs_per_s, in_turn_p50_us,
 * in_turn_p99_us, errors.
 */
#include "common.h"

#include <dlock.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PARTS 64

static void usage(void) {
  fprintf(stderr, "usage: bench_multi --url URL [--parts N] [--seconds S]\n");
  exit(2);
}

/* One lock+unlock of the MultiLock, timed. */
static int multi_pair(dlock_t *m, bench_samples_t *s) {
  uint64_t t = bench_now_ns();
  int rc = dlock_trylock(m, 10000, 30000);
  if (rc == 0)
    rc = dlock_unlock(m);
  if (rc == 0)
    bench_samples_add(s, bench_now_ns() - t);
  return rc;
}

/* The same locks one after the other, then released in the same order. */
static int in_turn_pair(dlock_t **h, int n, bench_samples_t *s) {
  uint64_t t = bench_now_ns();
  int rc = 0;
  for (int i = 0; i < n && rc == 0; i++)
    rc = dlock_trylock(h[i], 10000, 30000);
  for (int i = 0; i < n && rc == 0; i++)
    rc = dlock_unlock(h[i]);
  if (rc == 0)
    bench_samples_add(s, bench_now_ns() - t);
  return rc;
}

int main(int argc, char **argv) {
  const char *url = NULL;
  int parts = 3;
  double seconds = 5;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (v == NULL)
      usage();
    if (strcmp(a, "--url") == 0)
      url = v;
    else if (strcmp(a, "--parts") == 0)
      parts = atoi(v);
    else if (strcmp(a, "--seconds") == 0)
      seconds = atof(v);
    else
      usage();
    i++;
  }
  if (url == NULL || parts < 1 || parts > MAX_PARTS || seconds <= 0)
    usage();
  dlock_options_t o;
  dlock_options_init(&o);
  o.url = url;
  dlock_client_t *c = NULL;
  int rc = dlock_client_open(&o, &c);
  if (rc != 0)
    bench_die("dlock_client_open", rc);
  dlock_t *h[MAX_PARTS], *m = NULL;
  for (int i = 0; i < parts; i++) {
    char name[32];
    snprintf(name, sizeof(name), "bm:%d", i);
    if ((rc = dlock_get(c, name, &h[i])) != 0)
      bench_die("dlock_get", rc);
  }
  if ((rc = dlock_get_multi(h, (size_t)parts, &m)) != 0)
    bench_die("dlock_get_multi", rc);
  bench_samples_t sm = {0}, st = {0};
  /* Warm up: connections made, scripts loaded. */
  for (int i = 0; i < 50; i++) {
    bench_samples_t w = {0};
    if ((rc = multi_pair(m, &w)) != 0 || (rc = in_turn_pair(h, parts, &w)))
      bench_die("warm-up", rc);
    free(w.v);
  }
  uint64_t errors = 0, tm = 0, tt = 0;
  uint64_t end = bench_now_ns() + (uint64_t)(seconds * 1e9);
  for (int turn = 0; bench_now_ns() < end; turn++) {
    uint64_t t0 = bench_now_ns(), until = t0 + 250000000ULL;
    while (bench_now_ns() < until) {
      rc = turn % 2 == 0 ? multi_pair(m, &sm) : in_turn_pair(h, parts, &st);
      if (rc != 0) {
        fprintf(stderr, "bench_multi: %s (%s)\n", dlock_strerror(rc),
                dlock_last_error());
        errors++;
      }
    }
    if (turn % 2 == 0)
      tm += bench_now_ns() - t0;
    else
      tt += bench_now_ns() - t0;
  }
  bench_samples_sort(&sm);
  bench_samples_sort(&st);
  printf("parts=%d multi_pairs_per_s=%.0f multi_p50_us=%.1f "
         "multi_p99_us=%.1f in_turn_pairs_per_s=%.0f in_turn_p50_us=%.1f "
         "in_turn_p99_us=%.1f errors=%llu\n",
         parts, tm ? (double)sm.n * 1e9 / (double)tm : 0,
         bench_quantile(&sm, 0.5), bench_quantile(&sm, 0.99),
         tt ? (double)st.n * 1e9 / (double)tt : 0, bench_quantile(&st, 0.5),
         bench_quantile(&st, 0.99), (unsigned long long)errors);
  free(sm.v);
  free(st.v);
  dlock_free(m);
  for (int i = 0; i < parts; i++)
    dlock_free(h[i]);
  dlock_client_close(c);
  return errors != 0;
}
