/*
 * dlock_chaos: the long fault-injection run behind "make chaos".
 *
 *   dlock_chaos [options] [scenario...]
 *
 * With no scenario, or "all", it runs every scenario alone for
 * --each seconds, then the mixed scenarios for --mixed seconds, and prints
 * a summary after each; it exits with 1 when any run broke a promise.
 * Options: --duration S (every named scenario), --each S, --mixed S,
 * --procs N, --threads N, --seed N, --keep DIR (keep the histories),
 * --verbose (print each fault).
 */
#include "chaos.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct opts {
  int64_t duration_ms, each_ms, mixed_ms;
  int procs, threads, verbose;
  unsigned seed;
  const char *keep;
} opts;

static int usage(void) {
  fprintf(stderr,
          "usage: dlock_chaos [--duration S] [--each S] [--mixed S] "
          "[--procs N] [--threads N] [--seed N] [--keep DIR] [--verbose] "
          "[all | scenario...]\nscenarios:");
  for (int i = 0; chaos_scenarios[i] != NULL; i++)
    fprintf(stderr, " %s", chaos_scenarios[i]);
  fprintf(stderr, "\n");
  return 2;
}

static int is_mixed(const char *name) { return strstr(name, "mixed") != NULL; }

/* Runs one scenario; 1 when it kept every promise. */
static int run_one(const char *name, int64_t duration_ms, const opts *o,
                   int index) {
  chaos_config_t c;
  if (chaos_config_init(&c, name) != 0) {
    fprintf(stderr, "dlock_chaos: unknown scenario %s\n", name);
    return 0;
  }
  c.duration_ms = duration_ms;
  /* The long runs use more workers than the test suite's. */
  c.procs = o->procs;
  c.threads = o->threads;
  c.seed = o->seed ? o->seed + (unsigned)index : 0;
  c.verbose = o->verbose;
  char keep[512];
  if (o->keep != NULL) {
    mkdir(o->keep, 0700);
    snprintf(keep, sizeof(keep), "%s/%s", o->keep, name);
    c.keep_dir = keep;
  }
  chaos_result_t r;
  fprintf(stderr, "dlock_chaos: running %s for %lld s\n", name,
          (long long)(duration_ms / 1000));
  if (chaos_run(&c, &r) != 0)
    fprintf(stderr, "dlock_chaos: %s could not run\n", name);
  chaos_print_summary(stdout, &c, &r);
  fflush(stdout);
  return chaos_verdict(&c, &r, NULL, 0);
}

int main(int argc, char **argv) {
  opts o = {0, 20000, 120000, 4, 3, 0, 0, NULL};
  int first = argc;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--verbose") == 0) {
      o.verbose = 1;
    } else if (a[0] == '-' && a[1] == '-' && v == NULL) {
      return usage();
    } else if (strcmp(a, "--duration") == 0) {
      o.duration_ms = atoll(v) * 1000, i++;
    } else if (strcmp(a, "--each") == 0) {
      o.each_ms = atoll(v) * 1000, i++;
    } else if (strcmp(a, "--mixed") == 0) {
      o.mixed_ms = atoll(v) * 1000, i++;
    } else if (strcmp(a, "--procs") == 0) {
      o.procs = atoi(v), i++;
    } else if (strcmp(a, "--threads") == 0) {
      o.threads = atoi(v), i++;
    } else if (strcmp(a, "--seed") == 0) {
      o.seed = (unsigned)strtoul(v, NULL, 10), i++;
    } else if (strcmp(a, "--keep") == 0) {
      o.keep = v, i++;
    } else if (a[0] == '-') {
      return usage();
    } else {
      first = i;
      break;
    }
  }
  if (o.procs < 1 || o.threads < 1 || o.each_ms <= 0 || o.mixed_ms <= 0)
    return usage();
  int all =
      first == argc || (first == argc - 1 && strcmp(argv[first], "all") == 0);
  int failed = 0, runs = 0;
  if (all) {
    /* Each fault alone first, then the mixed runs, the long one last so
     * that its summary ends the output. */
    for (int i = 0; chaos_scenarios[i] != NULL; i++)
      if (!is_mixed(chaos_scenarios[i]))
        failed += !run_one(chaos_scenarios[i], o.each_ms, &o, runs++);
    failed += !run_one("redlock-mixed", o.each_ms * 3, &o, runs++);
    failed += !run_one("sem-mixed", o.each_ms * 3, &o, runs++);
    failed += !run_one("tls-mixed", o.each_ms * 3, &o, runs++);
    failed += !run_one("mixed", o.mixed_ms, &o, runs++);
  } else {
    for (int i = first; i < argc; i++) {
      int64_t d = o.duration_ms       ? o.duration_ms
                  : is_mixed(argv[i]) ? o.mixed_ms
                                      : o.each_ms;
      failed += !run_one(argv[i], d, &o, runs++);
    }
  }
  printf("dlock_chaos: %d of %d runs kept every promise\n", runs - failed,
         runs);
  return failed ? 1 : 0;
}
