/*
 * bench_raw: the raw limit of a lock+unlock pair for a blocking client.
 * Each of --clients threads has a plain hiredis connection of its own and
 * makes, in turn, the library's own acquire call and its own release call
 * (the driver captures both on MONITOR), for --seconds.
 *
 *   bench_raw --url URL --acquire CALL --release CALL --name NAME
 *             [--clients N] [--seconds S] [--dist PREFIX] [--event-loop]
 *
 * CALL is a command whose words are separated by single spaces. NAME is the
 * lock name the calls were captured with: each thread puts "NAME:<i>" in
 * its place in every word, so that the threads take distinct locks, as the
 * spread workload's do. The acquire call also deletes the release's unlock
 * latch, as the library's next call does, so that the server does the same
 * work per pair as for the library.
 *
 * redis-benchmark, the other raw limit of the report, runs one call over
 * and over from an event loop; it can neither alternate the two calls nor
 * show what a thread that waits for each reply costs. This is the same two
 * calls, with nothing but hiredis between the thread and the socket.
 *
 * With --event-loop the N workers are not threads but N pairs kept in
 * flight on one connection by one thread, each worker's next call sent as
 * soon as its last reply is read, as an event loop's lock calls would be
 * (node's peers work this way): the floor of a client that never hands a
 * reply to another thread.
 *
 * Output: acq rate (pairs/s) pair_p50 pair_p99 (us) threads errors
 */
#include "common.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_WORDS 40
#define MAX_CLIENTS 256

static void usage(void) {
  fprintf(stderr, "usage: bench_raw --url URL --acquire CALL --release CALL"
                  " --name NAME\n"
                  "         [--clients N] [--seconds S] [--dist PREFIX]"
                  " [--event-loop]\n");
  exit(2);
}

/* A command as words, ready for redisCommandArgv. */
typedef struct words {
  int n;
  char *v[MAX_WORDS];
  size_t len[MAX_WORDS];
} words;

typedef struct worker {
  pthread_t tid;
  const char *url;
  words acquire, release;
  uint64_t end_ns;
  bench_samples_t pairs;
  uint64_t errors;
} worker;

/* 'w' with every occurrence of 'from' replaced by 'to' (a new string). */
static char *replace_all(const char *w, const char *from, const char *to) {
  size_t fl = strlen(from), tl = strlen(to), n = 0;
  for (const char *p = strstr(w, from); p; p = strstr(p + fl, from))
    n++;
  char *out = malloc(strlen(w) + n * tl + 1);
  if (out == NULL)
    bench_fail("out of memory");
  char *o = out;
  const char *p = w;
  for (const char *q; (q = strstr(p, from)) != NULL; p = q + fl) {
    memcpy(o, p, (size_t)(q - p));
    o += q - p;
    memcpy(o, to, tl);
    o += tl;
  }
  strcpy(o, p);
  return out;
}

/* Splits 'call' at single spaces, putting 'to' in the place of 'name'. */
static void parse(words *out, const char *call, const char *name,
                  const char *to) {
  char *copy = strdup(call);
  if (copy == NULL)
    bench_fail("out of memory");
  out->n = 0;
  for (char *p = strtok(copy, " "); p != NULL; p = strtok(NULL, " ")) {
    if (out->n == MAX_WORDS)
      bench_fail("a call of more than %d words", MAX_WORDS);
    out->v[out->n] = replace_all(p, name, to);
    out->len[out->n] = strlen(out->v[out->n]);
    out->n++;
  }
  free(copy);
  if (out->n < 3 || strncmp(out->v[0], "EVAL", 4) != 0)
    bench_fail("not a script call: %s", call);
}

/* Adds 'key' as one more key of script call 'c' (EVAL[SHA] body numkeys
 * keys... args...): the acquire call deletes the keys after its own. */
static void add_key(words *c, const char *key) {
  if (c->n == MAX_WORDS)
    bench_fail("a call of more than %d words", MAX_WORDS);
  int numkeys = atoi(c->v[2]);
  int at = 3 + numkeys;
  memmove(&c->v[at + 1], &c->v[at], sizeof(c->v[0]) * (size_t)(c->n - at));
  memmove(&c->len[at + 1], &c->len[at],
          sizeof(c->len[0]) * (size_t)(c->n - at));
  c->v[at] = strdup(key);
  c->len[at] = strlen(key);
  c->n++;
  char n[16];
  snprintf(n, sizeof n, "%d", numkeys + 1);
  free(c->v[2]);
  c->v[2] = strdup(n);
  c->len[2] = strlen(n);
}

static void words_free(words *c) {
  for (int i = 0; i < c->n; i++)
    free(c->v[i]);
}

/* One call; an error reply or a lost connection counts as an error. */
static void call(worker *w, redisContext *r, words *c) {
  redisReply *rep = redisCommandArgv(r, c->n, (const char **)c->v, c->len);
  if (rep == NULL || rep->type == REDIS_REPLY_ERROR) {
    if (w->errors++ == 0)
      fprintf(stderr, "bench_raw: %s: %s\n", c->v[0],
              rep ? rep->str : r->errstr);
  }
  freeReplyObject(rep);
}

static void *run(void *arg) {
  worker *w = arg;
  redisContext *r = bench_connect(w->url);
  while (bench_now_ns() < w->end_ns && w->errors == 0) {
    uint64_t t = bench_now_ns();
    call(w, r, &w->acquire);
    call(w, r, &w->release);
    bench_samples_add(&w->pairs, bench_now_ns() - t);
  }
  redisFree(r);
  return NULL;
}

static void append(redisContext *r, const words *c) {
  if (redisAppendCommandArgv(r, c->n, (const char **)c->v, c->len) != REDIS_OK)
    bench_fail("out of memory");
}

/*
 * --event-loop: every worker's calls on one connection from this thread.
 * Redis answers in order, so the replies come in the order of the ring of
 * worker numbers below; each reply sends that worker's next call (written
 * with the next read, all that were appended at once). A worker stops after
 * a release once the time is up, so that no lock is left held.
 */
static void run_event_loop(worker *ws, int n) {
  redisContext *r = bench_connect(ws[0].url);
  int *ring = calloc((size_t)n, sizeof(*ring));
  int *releasing = calloc((size_t)n, sizeof(*releasing));
  uint64_t *t0 = calloc((size_t)n, sizeof(*t0));
  if (ring == NULL || releasing == NULL || t0 == NULL)
    bench_fail("out of memory");
  int head = 0, inflight = n;
  for (int i = 0; i < n; i++) {
    ring[i] = i;
    t0[i] = bench_now_ns();
    append(r, &ws[i].acquire);
  }
  while (inflight > 0) {
    redisReply *rep = NULL;
    if (redisGetReply(r, (void **)&rep) != REDIS_OK)
      bench_fail("bench_raw: %s", r->errstr);
    int i = ring[head];
    head = (head + 1) % n;
    worker *w = &ws[i];
    if (rep->type == REDIS_REPLY_ERROR && w->errors++ == 0)
      fprintf(stderr, "bench_raw: %s\n", rep->str);
    freeReplyObject(rep);
    uint64_t now = bench_now_ns();
    if (!releasing[i]) {
      releasing[i] = 1;
      append(r, &w->release);
    } else {
      bench_samples_add(&w->pairs, now - t0[i]);
      releasing[i] = 0;
      if (now >= w->end_ns || w->errors != 0) {
        inflight--;
        continue;
      }
      t0[i] = now;
      append(r, &w->acquire);
    }
    /* The worker's next call is answered after every other one in flight:
     * it goes to the back of the ring. */
    ring[(head + inflight - 1) % n] = i;
  }
  free(ring);
  free(releasing);
  free(t0);
  redisFree(r);
}

/* The release's unlock latch: its one key named like the library's. */
static const char *latch_of(const words *release) {
  for (int i = 3; i < release->n; i++)
    if (strncmp(release->v[i], "redisson_unlock_latch:", 22) == 0)
      return release->v[i];
  bench_fail("the release call names no unlock latch");
}

int main(int argc, char **argv) {
  const char *url = "redis://127.0.0.1:6379", *acquire = NULL;
  const char *release = NULL, *name = NULL, *dist = NULL;
  double seconds = 2.0;
  int clients = 1, event_loop = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--event-loop") == 0)
      event_loop = 1;
    else if (v == NULL)
      usage();
    else if (strcmp(a, "--url") == 0)
      url = v, i++;
    else if (strcmp(a, "--acquire") == 0)
      acquire = v, i++;
    else if (strcmp(a, "--release") == 0)
      release = v, i++;
    else if (strcmp(a, "--name") == 0)
      name = v, i++;
    else if (strcmp(a, "--clients") == 0)
      clients = atoi(v), i++;
    else if (strcmp(a, "--seconds") == 0)
      seconds = atof(v), i++;
    else if (strcmp(a, "--dist") == 0)
      dist = v, i++;
    else
      usage();
  }
  if (acquire == NULL || release == NULL || name == NULL || *name == '\0' ||
      clients < 1 || clients > MAX_CLIENTS || !(seconds > 0))
    usage();

  worker *ws = calloc((size_t)clients, sizeof(*ws));
  if (ws == NULL)
    bench_fail("out of memory");
  uint64_t end = bench_now_ns() + (uint64_t)(seconds * 1e9);
  for (int i = 0; i < clients; i++) {
    char mine[512];
    snprintf(mine, sizeof mine, "%s:%d", name, i);
    ws[i].url = url;
    ws[i].end_ns = end;
    parse(&ws[i].acquire, acquire, name, mine);
    parse(&ws[i].release, release, name, mine);
    add_key(&ws[i].acquire, latch_of(&ws[i].release));
  }
  if (event_loop) {
    run_event_loop(ws, clients);
  } else {
    for (int i = 0; i < clients; i++)
      if (pthread_create(&ws[i].tid, NULL, run, &ws[i]) != 0)
        bench_fail("pthread_create failed");
    for (int i = 0; i < clients; i++)
      pthread_join(ws[i].tid, NULL);
  }
  bench_samples_t all = {0, 0, 0};
  uint64_t errors = 0;
  for (int i = 0; i < clients; i++) {
    for (size_t k = 0; k < ws[i].pairs.n; k++)
      bench_samples_add(&all, ws[i].pairs.v[k]);
    errors += ws[i].errors;
    free(ws[i].pairs.v);
    words_free(&ws[i].acquire);
    words_free(&ws[i].release);
  }
  bench_samples_sort(&all);
  bench_write_dist(&all, dist);
  printf("acq=%zu rate=%.1f pair_p50=%.1f pair_p99=%.1f threads=%d"
         " errors=%" PRIu64 "\n",
         all.n, (double)all.n / seconds, bench_quantile(&all, 0.5),
         bench_quantile(&all, 0.99), event_loop ? 1 : clients, errors);
  free(all.v);
  free(ws);
  return errors ? 1 : 0;
}
