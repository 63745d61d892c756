/*
 * Helpers shared by the benchmark programs (see common.h).
 */
#include "common.h"

#include <dlock.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

uint64_t bench_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void bench_die(const char *what, int rc) {
  fprintf(stderr, "bench: %s: %s (%s)\n", what, dlock_strerror(rc),
          dlock_last_error());
  exit(1);
}

void bench_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("bench: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(1);
}

redisContext *bench_connect(const char *url) {
  char buf[1024], *db = NULL, *auth = NULL, *host, *p;
  redisContext *r;
  snprintf(buf, sizeof buf, "%s", url);
  if (strncmp(buf, "unix://", 7) == 0) {
    if ((p = strstr(buf, "?db=")))
      *p = '\0', db = p + 4;
    r = redisConnectUnix(buf + 7);
  } else {
    host = strncmp(buf, "redis://", 8) == 0 ? buf + 8 : buf;
    if ((p = strrchr(host, '@')))
      *p = '\0', auth = host, host = p + 1;
    if ((p = strchr(host, '/')))
      *p = '\0', db = p + 1;
    int port = 6379;
    if ((p = strrchr(host, ':')))
      *p = '\0', port = atoi(p + 1);
    r = redisConnect(host, port);
  }
  if (r == NULL || r->err)
    bench_fail("%s: %s", url, r ? r->errstr : "no memory");
  if (auth && (p = strchr(auth, ':')) != NULL) {
    *p = '\0';
    freeReplyObject(*auth ? redisCommand(r, "AUTH %s %s", auth, p + 1)
                          : redisCommand(r, "AUTH %s", p + 1));
  }
  if (db && *db)
    freeReplyObject(redisCommand(r, "SELECT %s", db));
  return r;
}

long long bench_number(redisContext *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  redisReply *rep = redisvCommand(r, fmt, ap);
  va_end(ap);
  long long v = 0;
  if (rep == NULL)
    bench_fail("%s: %s", fmt, r->errstr);
  if (rep->type == REDIS_REPLY_INTEGER)
    v = rep->integer;
  else if (rep->type == REDIS_REPLY_STRING)
    v = atoll(rep->str);
  else if (rep->type == REDIS_REPLY_ERROR)
    bench_fail("%s: %s", fmt, rep->str);
  freeReplyObject(rep);
  return v;
}

void bench_sleep_us(uint64_t us) {
  struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
  while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
  }
}

/* Commands no script can run: whatever of these the server counted came
 * from a client. */
static int wire_only(const char *name, size_t len) {
  static const char *const names[] = {
      "eval",       "evalsha",      "eval_ro",     "evalsha_ro", "fcall",
      "fcall_ro",   "subscribe",    "unsubscribe", "psubscribe", "punsubscribe",
      "ssubscribe", "sunsubscribe", "ping",        "auth",       "select",
      "hello",      "quit",         "reset"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strlen(names[i]) == len && memcmp(names[i], name, len) == 0)
      return 1;
  /* Container commands are reported per subcommand: "client|setname". */
  return (len > 7 && memcmp(name, "client|", 7) == 0) ||
         (len > 7 && memcmp(name, "script|", 7) == 0);
}

void bench_cmdstats(redisContext *r, bench_cmdstats_t *out) {
  redisReply *rep = redisCommand(r, "INFO commandstats");
  memset(out, 0, sizeof *out);
  if (rep == NULL || rep->type != REDIS_REPLY_STRING)
    bench_fail("INFO commandstats: %s", rep ? "bad reply" : r->errstr);
  /* Lines look like "cmdstat_get:calls=12,usec=...". */
  for (char *line = rep->str; line && *line;) {
    char *next = strchr(line, '\n');
    if (strncmp(line, "cmdstat_", 8) == 0) {
      char *name = line + 8, *colon = strchr(name, ':');
      char *calls = colon ? strstr(colon, "calls=") : NULL;
      if (calls && (!next || calls < next)) {
        size_t len = (size_t)(colon - name);
        uint64_t n = strtoull(calls + 6, NULL, 10);
        int is_info = len == 4 && memcmp(name, "info", 4) == 0;
        if (!is_info)
          out->all += n;
        if (wire_only(name, len))
          out->wire += n;
        if (len >= 4 && memcmp(name, "eval", 4) == 0)
          out->evals += n;
      }
    }
    line = next ? next + 1 : NULL;
  }
  freeReplyObject(rep);
}

void bench_samples_add(bench_samples_t *s, uint64_t ns) {
  if (s->n == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 4096;
    uint64_t *v = realloc(s->v, cap * sizeof *v);
    if (v == NULL)
      bench_fail("out of memory");
    s->v = v;
    s->cap = cap;
  }
  s->v[s->n++] = ns;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

void bench_samples_sort(bench_samples_t *s) {
  if (s->n > 1)
    qsort(s->v, s->n, sizeof *s->v, cmp_u64);
}

double bench_quantile(const bench_samples_t *s, double q) {
  if (s->n == 0)
    return 0;
  size_t i = (size_t)((double)(s->n - 1) * q + 0.5);
  return (double)s->v[i < s->n ? i : s->n - 1] / 1e3;
}

void bench_write_dist(const bench_samples_t *s, const char *path) {
  if (path == NULL || s->n == 0)
    return;
  FILE *f = fopen(path, "w");
  if (f == NULL)
    bench_fail("%s: %s", path, strerror(errno));
  for (int i = 0; i <= 200; i++)
    fprintf(f, "%.3f %.1f\n", i / 200.0, bench_quantile(s, i / 200.0));
  fclose(f);
}

int bench_write_all(int fd, const void *buf, size_t len) {
  const char *p = buf;
  while (len > 0) {
    ssize_t n = write(fd, p, len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

int bench_read_all(int fd, void *buf, size_t len) {
  char *p = buf;
  while (len > 0) {
    ssize_t n = read(fd, p, len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

int bench_read_samples(int fd, uint64_t n, bench_samples_t *s) {
  uint64_t buf[4096];
  while (n > 0) {
    size_t k = n < 4096 ? (size_t)n : 4096;
    if (bench_read_all(fd, buf, k * sizeof(buf[0])) < 0)
      return -1;
    for (size_t i = 0; i < k; i++)
      bench_samples_add(s, buf[i]);
    n -= k;
  }
  return 0;
}
