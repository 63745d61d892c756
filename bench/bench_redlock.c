/*
 * bench_redlock: lock+unlock latency of a RedLock over N servers against a
 * plain lock on one of them, taken alternately by one thread so that both
 * see the same load on the machine.
 *
 *   bench_redlock --url URL1 --url URL2 ... [--seconds S] [--paused URL]
 *
 * With --paused, the URL of a server that does not answer (the driver
 * stops it with SIGSTOP), a third lock taken in turn with the others: a
 * RedLock over the same servers but the last, replaced by the paused one.
 * Its lock+unlock latency against the all-healthy RedLock's is what a
 * paused server costs; the first acquisition, which finds out that it does
 * not answer, is reported apart (red_paused_first_ms).
 *
 * Beside them, the floor this machine sets: the bare RedLock protocol of
 * redis.io (SET NX PX, then DEL) on plain hiredis connections, sent to all
 * N servers before reading any reply, and the same on one server. Their
 * ratio is what N servers cost here whatever the library (with fewer cores
 * than servers, the servers cannot all answer at once).
 *
 * Output: pairs single_p50 single_p99 red_p50 red_p99 bare1_p50 bare_p50
 * bare_p99 (us) nodes errors, and with --paused red_paused_p50
 * red_paused_p99 (us) red_paused_first_ms
 */
#include "common.h"

#include <dlock.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NODES 16

static void usage(void) {
  fprintf(stderr, "usage: bench_redlock --url URL... [--seconds S]\n"
                  "         [--dist PREFIX] [--paused URL]\n");
  exit(2);
}

/* One lock+unlock, timed; an error is counted and the sample dropped. */
static int pair(dlock_t *l, bench_samples_t *s, uint64_t *errors) {
  uint64_t t = bench_now_ns();
  int rc = dlock_trylock(l, 10000, DLOCK_WATCHDOG);
  if (rc == 0)
    rc = dlock_unlock(l);
  if (rc < 0) {
    fprintf(stderr, "bench_redlock: %s (%s)\n", dlock_strerror(rc),
            dlock_last_error());
    (*errors)++;
    return rc;
  }
  bench_samples_add(s, bench_now_ns() - t);
  return 0;
}

/* One bare lock+unlock on 'n' plain connections: every request written
 * before any reply is read, as a parallel RedLock client does. */
static void bare_pair(redisContext **r, int n, bench_samples_t *s) {
  static const char *const cmds[2][6] = {
      {"SET", "bench:bare", "owner", "NX", "PX", "30000"},
      {"DEL", "bench:bare", NULL, NULL, NULL, NULL}};
  static const int argc[2] = {6, 2};
  uint64_t t = bench_now_ns();
  for (int k = 0; k < 2; k++) {
    for (int i = 0; i < n; i++) {
      int done = 0;
      if (redisAppendCommandArgv(r[i], argc[k], (const char **)cmds[k], NULL) !=
          REDIS_OK)
        bench_fail("bare: %s", r[i]->errstr);
      while (!done)
        if (redisBufferWrite(r[i], &done) != REDIS_OK)
          bench_fail("bare: %s", r[i]->errstr);
    }
    for (int i = 0; i < n; i++) {
      void *rep;
      if (redisGetReply(r[i], &rep) != REDIS_OK)
        bench_fail("bare: %s", r[i]->errstr);
      freeReplyObject(rep);
    }
  }
  bench_samples_add(s, bench_now_ns() - t);
}

int main(int argc, char **argv) {
  const char *urls[MAX_NODES], *dist = NULL, *paused = NULL;
  int n = 0;
  double seconds = 2.0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (v == NULL)
      usage();
    else if (strcmp(a, "--url") == 0 && n < MAX_NODES)
      urls[n++] = v, i++;
    else if (strcmp(a, "--seconds") == 0)
      seconds = atof(v), i++;
    else if (strcmp(a, "--dist") == 0)
      dist = v, i++;
    else if (strcmp(a, "--paused") == 0)
      paused = v, i++;
    else
      usage();
  }
  if (n < 1 || !(seconds > 0))
    usage();
  dlock_client_t *c[MAX_NODES];
  dlock_t *h[MAX_NODES], *red, *single;
  int rc;
  for (int i = 0; i < n; i++) {
    dlock_options_t o;
    dlock_options_init(&o);
    o.url = urls[i];
    if ((rc = dlock_client_open(&o, &c[i])) < 0)
      bench_die("client_open", rc);
    if ((rc = dlock_get(c[i], "bench:red", &h[i])) < 0)
      bench_die("get", rc);
  }
  if ((rc = dlock_get_red(h, (size_t)n, &red)) < 0)
    bench_die("get_red", rc);
  if ((rc = dlock_get(c[0], "bench:single", &single)) < 0)
    bench_die("get", rc);
  /* The paused server's client starts without it (lazily): opening waits
   * for the handshake's answer a command timeout, then goes on. */
  dlock_client_t *pc = NULL;
  dlock_t *ph[MAX_NODES], *redp = NULL;
  double paused_first_ms = 0;
  if (paused != NULL) {
    if (n < 3)
      usage();
    dlock_options_t o;
    dlock_options_init(&o);
    o.url = paused;
    o.lazy_connect = 1;
    o.connect_timeout_ms = 1000;
    o.command_timeout_ms = 1000;
    if ((rc = dlock_client_open(&o, &pc)) < 0)
      bench_die("client_open (paused)", rc);
    for (int i = 0; i < n; i++)
      if ((rc = dlock_get(i < n - 1 ? c[i] : pc, "bench:redp", &ph[i])) < 0)
        bench_die("get", rc);
    if ((rc = dlock_get_red(ph, (size_t)n, &redp)) < 0)
      bench_die("get_red", rc);
    uint64_t t = bench_now_ns();
    if ((rc = dlock_trylock(redp, 10000, DLOCK_WATCHDOG)) < 0)
      bench_die("RedLock with a paused server", rc);
    if ((rc = dlock_unlock(redp)) < 0)
      bench_die("RedLock with a paused server", rc);
    paused_first_ms = (double)(bench_now_ns() - t) / 1e6;
  }
  redisContext *bare[MAX_NODES];
  for (int i = 0; i < n; i++)
    bare[i] = bench_connect(urls[i]);
  bench_samples_t s1 = {0, 0, 0}, sn = {0, 0, 0}, b1 = {0, 0, 0},
                  bn = {0, 0, 0}, sp = {0, 0, 0};
  uint64_t errors = 0;
  uint64_t end = bench_now_ns() + (uint64_t)(seconds * 1e9);
  while (bench_now_ns() < end && errors < 10) {
    pair(single, &s1, &errors);
    pair(red, &sn, &errors);
    if (redp != NULL)
      pair(redp, &sp, &errors);
    bare_pair(bare, 1, &b1);
    bare_pair(bare, n, &bn);
  }
  bench_samples_sort(&s1);
  bench_samples_sort(&sn);
  bench_samples_sort(&b1);
  bench_samples_sort(&bn);
  bench_samples_sort(&sp);
  if (dist != NULL) {
    char path[4096];
    snprintf(path, sizeof path, "%s.single", dist);
    bench_write_dist(&s1, path);
    snprintf(path, sizeof path, "%s.red", dist);
    bench_write_dist(&sn, path);
  }
  /* One line: the driver reads the last line of key=value pairs. */
  printf("pairs=%zu single_p50=%.1f single_p99=%.1f red_p50=%.1f "
         "red_p99=%.1f bare1_p50=%.1f bare1_p99=%.1f bare_p50=%.1f "
         "bare_p99=%.1f nodes=%d errors=%" PRIu64,
         sn.n, bench_quantile(&s1, 0.5), bench_quantile(&s1, 0.99),
         bench_quantile(&sn, 0.5), bench_quantile(&sn, 0.99),
         bench_quantile(&b1, 0.5), bench_quantile(&b1, 0.99),
         bench_quantile(&bn, 0.5), bench_quantile(&bn, 0.99), n, errors);
  if (redp != NULL && sp.n > 0)
    printf(" red_paused_p50=%.1f red_paused_p99=%.1f red_paused_first_ms=%.1f",
           bench_quantile(&sp, 0.5), bench_quantile(&sp, 0.99),
           paused_first_ms);
  printf("\n");
  for (int i = 0; i < n; i++)
    redisFree(bare[i]);
  free(b1.v);
  free(bn.v);
  dlock_free(red);
  dlock_free(single);
  if (redp != NULL) {
    dlock_free(redp);
    for (int i = 0; i < n; i++)
      dlock_free(ph[i]);
  }
  dlock_client_close(pc);
  free(sp.v);
  for (int i = 0; i < n; i++) {
    dlock_free(h[i]);
    dlock_client_close(c[i]);
  }
  free(s1.v);
  free(sn.v);
  return errors || sn.n == 0 ? 1 : 0;
}
