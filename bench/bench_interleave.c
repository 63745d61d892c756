/*
 * bench_interleave: the solo workload and its raw limit taken turn about by
 * one thread: a dlock lock+unlock pair, then the raw call twice on a plain
 * hiredis connection, and again, for --seconds. Load from elsewhere on the
 * machine then falls on both alike, which separate runs cannot promise.
 *
 *   bench_interleave --url URL --raw "EVALSHA sha numkeys key... arg..."
 *
 * The raw call is the library's own acquire call (the driver captures it),
 * words separated by single spaces. Each side's rate is its pairs over the
 * time spent in them.
 *
 * Output: pairs rate p50 p99 raw_rate raw_p50 raw_p99 (us) errors
 */
#include "common.h"

#include <dlock.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_WORDS 32

static void usage(void) {
  fprintf(stderr, "usage: bench_interleave --url URL --raw CALL [--seconds S]"
                  " [--name NAME]\n");
  exit(2);
}

static double rate(const bench_samples_t *s) {
  uint64_t total = 0;
  for (size_t i = 0; i < s->n; i++)
    total += s->v[i];
  return total ? (double)s->n * 1e9 / (double)total : 0;
}

int main(int argc, char **argv) {
  const char *url = "redis://127.0.0.1:6379", *name = "bench:interleave";
  char *raw = NULL;
  double seconds = 2.0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (v == NULL)
      usage();
    else if (strcmp(a, "--url") == 0)
      url = v, i++;
    else if (strcmp(a, "--raw") == 0)
      raw = strdup(v), i++;
    else if (strcmp(a, "--seconds") == 0)
      seconds = atof(v), i++;
    else if (strcmp(a, "--name") == 0)
      name = v, i++;
    else
      usage();
  }
  if (raw == NULL || !(seconds > 0))
    usage();
  const char *words[MAX_WORDS];
  int nwords = 0;
  for (char *p = strtok(raw, " "); p != NULL && nwords < MAX_WORDS;
       p = strtok(NULL, " "))
    words[nwords++] = p;

  dlock_options_t o;
  dlock_client_t *c;
  dlock_t *l;
  int rc;
  dlock_options_init(&o);
  o.url = url;
  if ((rc = dlock_client_open(&o, &c)) < 0)
    bench_die("client_open", rc);
  if ((rc = dlock_get(c, name, &l)) < 0)
    bench_die("get", rc);
  redisContext *r = bench_connect(url);
  bench_samples_t lib = {0, 0, 0}, bare = {0, 0, 0};
  uint64_t errors = 0, end = bench_now_ns() + (uint64_t)(seconds * 1e9);
  while (bench_now_ns() < end && errors == 0) {
    uint64_t t = bench_now_ns();
    if ((rc = dlock_trylock(l, 10000, DLOCK_WATCHDOG)) == 0)
      rc = dlock_unlock(l);
    if (rc < 0) {
      fprintf(stderr, "bench_interleave: %s (%s)\n", dlock_strerror(rc),
              dlock_last_error());
      errors++;
    }
    uint64_t u = bench_now_ns();
    bench_samples_add(&lib, u - t);
    for (int k = 0; k < 2; k++) {
      redisReply *rep = redisCommandArgv(r, nwords, words, NULL);
      if (rep == NULL || rep->type == REDIS_REPLY_ERROR) {
        fprintf(stderr, "bench_interleave: %s: %s\n", words[0],
                rep ? rep->str : r->errstr);
        errors++;
      }
      freeReplyObject(rep);
    }
    bench_samples_add(&bare, bench_now_ns() - u);
  }
  double lib_rate = rate(&lib), bare_rate = rate(&bare);
  bench_samples_sort(&lib);
  bench_samples_sort(&bare);
  printf("pairs=%zu rate=%.1f p50=%.1f p99=%.1f raw_rate=%.1f raw_p50=%.1f "
         "raw_p99=%.1f errors=%" PRIu64 "\n",
         lib.n, lib_rate, bench_quantile(&lib, 0.5), bench_quantile(&lib, 0.99),
         bare_rate, bench_quantile(&bare, 0.5), bench_quantile(&bare, 0.99),
         errors);
  redisFree(r);
  dlock_free(l);
  dlock_client_close(c);
  free(lib.v);
  free(bare.v);
  free(raw);
  return errors ? 1 : 0;
}
