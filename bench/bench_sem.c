/*
 * bench_sem: dlock's semaphores under the semaphore workloads of
 * bench/run.sh.
 *
 * P processes of T threads (workers), forked before any client exists;
 * each process opens its own dlock client, shared by its threads. All
 * start on one signal from the parent, which first gives the semaphore
 * --permits permits. Every worker loops "acquire one permit; [INCR, DECR a
 * counter of holders]; release" for --seconds:
 *
 *   --kind sem   a semaphore (dlock_sem_acquire / dlock_sem_release);
 *   --kind psem  an expirable-permit semaphore, each permit held by the
 *                watchdog (or for --lease MS) and released by its id.
 *
 * With --work each hold increments a counter of holders on entry and
 * decrements it on exit (plain commands on a connection of the worker's
 * own); the value INCR returns is how many held a permit then, and must
 * never exceed --permits.
 *
 * Output is one line of key=value pairs, as bench_lock's: acq win seconds
 * rate pair_p50 pair_p99 wait_p50 wait_p99 (us) min max cmds cmds_all
 * counter (ok/bad/-) errors, and max_holders (the most INCR saw; 0 without
 * --work) permits. The exit status is non-zero when a call failed or more
 * than --permits held at once.
 */
#include "common.h"

#include <dlock.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define HOLDERS_KEY "bench:sem:holders"

static const char *url = "redis://127.0.0.1:6379";
static const char *name = "bench:sem";
static const char *dist;
static int nprocs = 1, nthreads = 1, work, expirable;
static long long permits = 4;
static int64_t lease_ms = DLOCK_WATCHDOG;
static double seconds = 2.0;

typedef struct worker {
  pthread_t tid;
  dlock_sem_t *sem;
  dlock_psem_t *psem;
  redisContext *redis; /* --work */
  uint64_t acq, win, errors, max_holders;
  bench_samples_t pair, wait;
} worker_t;

/* What a child sends its parent, then 'nthreads' per-worker counts, then
 * 'npair' pair latencies and 'nwait' wait latencies. */
typedef struct child_header {
  uint64_t acq, win, errors, max_holders, npair, nwait;
} child_header_t;

static pthread_barrier_t start_barrier;
static uint64_t end_ns;

static void report(worker_t *w, const char *what, int rc) {
  fprintf(stderr, "bench_sem: %s: %s (%s)\n", what, dlock_strerror(rc),
          dlock_last_error());
  w->errors++;
}

/* One permit, waiting up to 30 s: a semaphore whose permits never come
 * back shows up as an error, not as a run that never ends. Fills 'p' for
 * an expirable permit. */
static int acquire(worker_t *w, dlock_permit_t *p) {
  int rc = expirable ? dlock_psem_acquire(w->psem, 30000, lease_ms, p)
                     : dlock_sem_acquire(w->sem, 1, 30000);
  if (rc < 0)
    report(w, "acquire", rc);
  return rc;
}

static int release(worker_t *w, const dlock_permit_t *p) {
  int rc = expirable ? dlock_psem_release(w->psem, p->id)
                     : dlock_sem_release(w->sem, 1);
  if (rc < 0)
    report(w, "release", rc);
  return rc;
}

/* The hold: how many hold a permit now, counted on entry and exit. */
static void critical_section(worker_t *w) {
  long long n = bench_number(w->redis, "INCR " HOLDERS_KEY);
  if (n > 0 && (uint64_t)n > w->max_holders)
    w->max_holders = (uint64_t)n;
  freeReplyObject(redisCommand(w->redis, "DECR " HOLDERS_KEY));
}

static void *loop_thread(void *arg) {
  worker_t *w = arg;
  pthread_barrier_wait(&start_barrier);
  for (uint64_t now = bench_now_ns(); now < end_ns;) {
    dlock_permit_t p;
    if (acquire(w, &p) < 0)
      break;
    uint64_t got = bench_now_ns();
    if (work)
      critical_section(w);
    if (release(w, &p) < 0)
      break;
    uint64_t done = bench_now_ns();
    bench_samples_add(&w->wait, got - now);
    bench_samples_add(&w->pair, done - now);
    w->acq++;
    w->win += done <= end_ns;
    now = done;
  }
  return NULL;
}

static void run_child(int in, int out) {
  dlock_options_t o;
  dlock_client_t *client;
  dlock_sem_t *sem = NULL;
  dlock_psem_t *psem = NULL;
  worker_t *w = calloc((size_t)nthreads, sizeof *w);
  char go;
  int rc;
  if (w == NULL)
    exit(1);
  dlock_options_init(&o);
  o.url = url;
  if ((rc = dlock_client_open(&o, &client)) < 0)
    bench_die("client_open", rc);
  rc = expirable ? dlock_psem_get(client, name, &psem)
                 : dlock_sem_get(client, name, &sem);
  if (rc < 0)
    bench_die("get", rc);
  pthread_barrier_init(&start_barrier, NULL, (unsigned)nthreads + 1);
  for (int i = 0; i < nthreads; i++) {
    w[i].sem = sem;
    w[i].psem = psem;
    if (work)
      w[i].redis = bench_connect(url);
    if (pthread_create(&w[i].tid, NULL, loop_thread, &w[i]) != 0)
      bench_fail("pthread_create failed");
  }
  if (bench_write_all(out, "r", 1) < 0 || bench_read_all(in, &go, 1) < 0)
    exit(1);
  end_ns = bench_now_ns() + (uint64_t)(seconds * 1e9);
  pthread_barrier_wait(&start_barrier);
  child_header_t h;
  memset(&h, 0, sizeof h);
  for (int i = 0; i < nthreads; i++) {
    pthread_join(w[i].tid, NULL);
    h.acq += w[i].acq;
    h.win += w[i].win;
    h.errors += w[i].errors;
    h.npair += w[i].pair.n;
    h.nwait += w[i].wait.n;
    if (w[i].max_holders > h.max_holders)
      h.max_holders = w[i].max_holders;
  }
  int sent = bench_write_all(out, &h, sizeof h);
  for (int i = 0; i < nthreads && sent == 0; i++)
    sent = bench_write_all(out, &w[i].win, sizeof w[i].win);
  for (int i = 0; i < nthreads && sent == 0; i++)
    sent = bench_write_all(out, w[i].pair.v, w[i].pair.n * sizeof(uint64_t));
  for (int i = 0; i < nthreads && sent == 0; i++)
    sent = bench_write_all(out, w[i].wait.v, w[i].wait.n * sizeof(uint64_t));
  for (int i = 0; i < nthreads; i++) {
    free(w[i].pair.v);
    free(w[i].wait.v);
    if (w[i].redis)
      redisFree(w[i].redis);
  }
  dlock_sem_free(sem);
  dlock_psem_free(psem);
  dlock_client_close(client);
  free(w);
  exit(sent == 0 ? 0 : 1);
}

static void usage(void) {
  fprintf(stderr,
          "usage: bench_sem [--url URL] [--kind sem|psem] [--permits N]\n"
          "         [--procs P] [--threads T] [--work] [--seconds S]\n"
          "         [--lease MS] [--name NAME] [--dist PREFIX]\n");
  exit(2);
}

static void write_dist(const bench_samples_t *s, const char *suffix) {
  char path[4096];
  if (dist == NULL)
    return;
  snprintf(path, sizeof path, "%s.%s", dist, suffix);
  bench_write_dist(s, path);
}

int main(int argc, char **argv) {
  if (getenv("DLOCK_URL"))
    url = getenv("DLOCK_URL");
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--work") == 0)
      work = 1;
    else if (v == NULL)
      usage();
    else if (strcmp(a, "--url") == 0)
      url = v, i++;
    else if (strcmp(a, "--kind") == 0) {
      if (strcmp(v, "psem") == 0)
        expirable = 1;
      else if (strcmp(v, "sem") != 0)
        usage();
      i++;
    } else if (strcmp(a, "--permits") == 0)
      permits = atoll(v), i++;
    else if (strcmp(a, "--procs") == 0)
      nprocs = atoi(v), i++;
    else if (strcmp(a, "--threads") == 0)
      nthreads = atoi(v), i++;
    else if (strcmp(a, "--seconds") == 0)
      seconds = atof(v), i++;
    else if (strcmp(a, "--lease") == 0)
      lease_ms = atoll(v), i++;
    else if (strcmp(a, "--name") == 0)
      name = v, i++;
    else if (strcmp(a, "--dist") == 0)
      dist = v, i++;
    else
      usage();
  }
  if (nprocs < 1 || nprocs > 64 || nthreads < 1 || nthreads > 1024 ||
      permits < 1 || permits > DLOCK_PERMITS_MAX || !(seconds > 0))
    usage();

  /* The semaphore's permits, in the layout both kinds share (a string of
   * free permits; the expirable kind keeps its permits taken in a zset
   * beside it), set before any worker starts. */
  redisContext *r = bench_connect(url);
  freeReplyObject(
      redisCommand(r, "DEL %s {%s}:timeout " HOLDERS_KEY, name, name));
  freeReplyObject(redisCommand(r, "SET %s %lld", name, permits));
  signal(SIGPIPE, SIG_IGN);
  pid_t *pids = calloc((size_t)nprocs, sizeof *pids);
  int *to_child = calloc((size_t)nprocs, sizeof(int));
  int *from_child = calloc((size_t)nprocs, sizeof(int));
  if (!pids || !to_child || !from_child)
    return 1;
  for (int p = 0; p < nprocs; p++) {
    int down[2], up[2];
    fflush(NULL);
    if (pipe(down) < 0 || pipe(up) < 0 || (pids[p] = fork()) < 0)
      bench_fail("pipe/fork failed");
    if (pids[p] == 0) {
      close(down[1]);
      close(up[0]);
      for (int q = 0; q < p; q++)
        close(to_child[q]), close(from_child[q]);
      free(pids);
      free(to_child);
      free(from_child);
      redisFree(r);
      run_child(down[0], up[1]);
    }
    close(down[0]);
    close(up[1]);
    to_child[p] = down[1];
    from_child[p] = up[0];
  }
  int failed = 0;
  char byte;
  for (int p = 0; p < nprocs; p++)
    if (bench_read_all(from_child[p], &byte, 1) < 0)
      failed = 1;
  bench_cmdstats_t before, after;
  bench_cmdstats(r, &before);
  for (int p = 0; p < nprocs; p++)
    if (bench_write_all(to_child[p], "g", 1) < 0)
      failed = 1;

  uint64_t acq = 0, win = 0, errors = 0, max_holders = 0;
  uint64_t *counts = calloc((size_t)nprocs * (size_t)nthreads, sizeof *counts);
  bench_samples_t pair = {0, 0, 0}, wait = {0, 0, 0};
  if (counts == NULL)
    return 1;
  for (int p = 0; p < nprocs; p++) {
    child_header_t h;
    if (bench_read_all(from_child[p], &h, sizeof h) < 0 ||
        bench_read_all(from_child[p], counts + (size_t)p * (size_t)nthreads,
                       (size_t)nthreads * sizeof *counts) < 0) {
      failed = 1;
      continue;
    }
    if (bench_read_samples(from_child[p], h.npair, &pair) < 0 ||
        bench_read_samples(from_child[p], h.nwait, &wait) < 0)
      failed = 1;
    acq += h.acq;
    win += h.win;
    errors += h.errors;
    if (h.max_holders > max_holders)
      max_holders = h.max_holders;
  }
  bench_cmdstats(r, &after);
  for (int p = 0; p < nprocs; p++) {
    int status;
    close(to_child[p]);
    close(from_child[p]);
    if (waitpid(pids[p], &status, 0) < 0 || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0)
      failed = 1;
  }
  bench_samples_sort(&pair);
  bench_samples_sort(&wait);
  write_dist(&pair, "pair");
  write_dist(&wait, "wait");
  uint64_t min = UINT64_MAX, max = 0;
  for (size_t i = 0; i < (size_t)nprocs * (size_t)nthreads; i++) {
    if (counts[i] < min)
      min = counts[i];
    if (counts[i] > max)
      max = counts[i];
  }
  /* Every permit must be back: free permits equal to those given. */
  long long free_end = bench_number(r, "GET %s", name);
  const char *counter = "-";
  if (work) {
    int ok = max_holders <= (uint64_t)permits && free_end == permits;
    counter = ok ? "ok" : "bad";
    if (!ok)
      fprintf(stderr,
              "bench_sem: %" PRIu64 " held at once of %lld permits, %lld "
              "free at the end\n",
              max_holders, permits, free_end);
  }
  /* What the clients sent: the commands only a client can send, plus the
   * INCR and DECR of every hold. */
  uint64_t own = work ? 2 * acq : 0;
  printf("acq=%" PRIu64 " win=%" PRIu64
         " seconds=%.3f rate=%.1f pair_p50=%.1f pair_p99=%.1f "
         "wait_p50=%.1f wait_p99=%.1f min=%" PRIu64 " max=%" PRIu64
         " cmds=%" PRIu64 " cmds_all=%" PRIu64 " counter=%s errors=%" PRIu64
         " max_holders=%" PRIu64 " permits=%lld\n",
         acq, win, seconds, (double)win / seconds, bench_quantile(&pair, 0.5),
         bench_quantile(&pair, 0.99), bench_quantile(&wait, 0.5),
         bench_quantile(&wait, 0.99), min, max, after.wire - before.wire + own,
         after.all - before.all, counter, errors, max_holders, permits);
  redisFree(r);
  free(pair.v);
  free(wait.v);
  free(counts);
  free(pids);
  free(to_child);
  free(from_child);
  return failed || errors || strcmp(counter, "bad") == 0 ? 1 : 0;
}
