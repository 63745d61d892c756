/*
 * bench_lock: dlock under the lock workloads of bench/run.sh.
 *
 * P processes of T threads (workers). Processes are forked before any client
 * exists; each opens its own dlock client, as separate programs would, and
 * its threads share it. All start on one signal from the parent.
 *
 *   --mode loop  every worker loops "lock; [GET+SET counter]; unlock" for
 *                --seconds on one lock name, or a name of its own with
 *                --distinct (solo, spread, contended);
 *   --mode herd  the parent holds the lock while every worker starts
 *                waiting for it, then releases it; each worker takes it once
 *                (GET+SET counter inside) and stops. Measures the time from
 *                the release to the last worker done.
 *
 * --no-sync turns replica sync off (dlock_options_t.replica_sync), to
 * measure what waiting for replicas costs on a master that has some.
 *
 * Output is one line of key=value pairs for the driver:
 *   acq (acquisitions) win (those done within the --seconds window) seconds
 *   rate (win/seconds; herd: acq/time to serve all) pair_p50 pair_p99
 *   wait_p50 wait_p99 (us) min max (window acquisitions of the least and
 *   most served worker) cmds (commands the clients sent, from INFO
 *   commandstats) cmds_all (with the commands run inside scripts) counter
 *   (ok/bad/-) errors
 * The exit status is non-zero when a call failed or the counter guarded by
 * the lock differs from the number of acquisitions. With BENCH_COUNTS set
 * in the environment, each worker's acquisitions go to stderr, processes
 * separated by "|".
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

#define COUNTER_KEY "bench:counter"

/* Settings from the command line; read-only once the run starts. */
static const char *url = "redis://127.0.0.1:6379";
/* For a rediss:// URL: the CA to trust, and a plain URL of the same server
 * for the benchmark's own hiredis connections (counter, statistics), which
 * speak no TLS. */
static const char *cacert = NULL;
static const char *stats_url = NULL;
static const char *prefix = "bench:lock";
static const char *dist;
static int nprocs = 1, nthreads = 1, distinct, work, fair, herd;
/* --no-sync: replica_sync off (the cost of waiting for replicas). */
static int no_sync;
/* --no-stats: clients keep no statistics (the A/B of their cost). */
static int no_stats;
/* --spin-us N: the clients' spin_us (-1: the default). */
static long long spin_us = -1;
static int64_t lease_ms = DLOCK_WATCHDOG;
static double seconds = 2.0, herd_timeout = 120.0;

/* One worker thread. */
typedef struct worker {
  pthread_t tid;
  dlock_t *lock;
  redisContext *redis; /* --work */
  int up;              /* herd: the pipe that tells the parent "waiting" */
  uint64_t acq, win, errors, done_ns; /* win: done within the window */
  bench_samples_t pair, wait;
} worker_t;

/* What a child sends its parent, then 'nthreads' per-worker counts, then
 * 'npair' pair latencies and 'nwait' wait latencies. */
typedef struct child_header {
  uint64_t acq, win, errors, done_ns, npair, nwait;
} child_header_t;

static pthread_barrier_t start_barrier;
static uint64_t end_ns;

static int open_lock(dlock_client_t *c, const char *name, dlock_t **out) {
  return fair ? dlock_get_fair(c, name, out) : dlock_get(c, name, out);
}

/* The critical section: a deliberately non-atomic read-modify-write. The
 * counter ends equal to the acquisitions only if no two holders overlap. */
static void critical_section(redisContext *r) {
  long long v = bench_number(r, "GET " COUNTER_KEY);
  freeReplyObject(redisCommand(r, "SET " COUNTER_KEY " %lld", v + 1));
}

static int acquire(worker_t *w, int64_t wait_ms) {
  int rc = dlock_trylock(w->lock, wait_ms, lease_ms);
  if (rc < 0) {
    fprintf(stderr, "bench_lock: trylock: %s (%s)\n", dlock_strerror(rc),
            dlock_last_error());
    w->errors++;
  }
  return rc;
}

static int release(worker_t *w) {
  int rc = dlock_unlock(w->lock);
  if (rc < 0) {
    fprintf(stderr, "bench_lock: unlock: %s (%s)\n", dlock_strerror(rc),
            dlock_last_error());
    w->errors++;
  }
  return rc;
}

static void *loop_thread(void *arg) {
  worker_t *w = arg;
  pthread_barrier_wait(&start_barrier);
  for (uint64_t now = bench_now_ns(); now < end_ns;) {
    /* A bounded wait rather than dlock_lock: a lock that is never released
     * must show up as an error, not as a run that never ends. */
    if (acquire(w, 30000) < 0)
      break;
    uint64_t got = bench_now_ns();
    if (work)
      critical_section(w->redis);
    if (release(w) < 0)
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

static void *herd_thread(void *arg) {
  worker_t *w = arg;
  pthread_barrier_wait(&start_barrier);
  uint64_t start = bench_now_ns();
  /* Tell the parent this worker is about to wait; it releases the lock
   * once every worker has and they had time to settle. */
  if (bench_write_all(w->up, "w", 1) < 0) {
    w->errors++;
    return NULL;
  }
  if (acquire(w, (int64_t)(herd_timeout * 1000)) < 0)
    return NULL;
  uint64_t got = bench_now_ns();
  critical_section(w->redis);
  if (release(w) == 0)
    w->acq = w->win = 1;
  w->done_ns = bench_now_ns();
  bench_samples_add(&w->wait, got - start);
  bench_samples_add(&w->pair, w->done_ns - start);
  return NULL;
}

/* The body of one benchmark process: set everything up, say ready on 'out',
 * wait for the go byte on 'in', run, and send the results on 'out'. */
static void run_child(int proc, int in, int out) {
  dlock_options_t o;
  dlock_client_t *client;
  dlock_t *shared = NULL;
  worker_t *w = calloc((size_t)nthreads, sizeof *w);
  char name[256], go;
  int rc;
  if (w == NULL)
    exit(1);
  dlock_options_init(&o);
  o.url = url;
  o.tls_ca_file = cacert;
  o.replica_sync = !no_sync;
  o.stats_off = no_stats;
  if (spin_us >= 0)
    o.spin_us = spin_us;
  if ((rc = dlock_client_open(&o, &client)) < 0)
    bench_die("client_open", rc);
  if (!distinct && (rc = open_lock(client, prefix, &shared)) < 0)
    bench_die("get", rc);
  pthread_barrier_init(&start_barrier, NULL, (unsigned)nthreads + 1);
  for (int i = 0; i < nthreads; i++) {
    w[i].lock = shared;
    w[i].up = out;
    if (distinct) {
      snprintf(name, sizeof name, "%s:%d:%d", prefix, proc, i);
      if ((rc = open_lock(client, name, &w[i].lock)) < 0)
        bench_die("get", rc);
    }
    if (work || herd)
      w[i].redis = bench_connect(stats_url ? stats_url : url);
    if (pthread_create(&w[i].tid, NULL, herd ? herd_thread : loop_thread,
                       &w[i]) != 0)
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
    if (w[i].done_ns > h.done_ns)
      h.done_ns = w[i].done_ns;
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
    if (distinct)
      dlock_free(w[i].lock);
    if (w[i].redis)
      redisFree(w[i].redis);
  }
  dlock_free(shared);
  dlock_client_close(client);
  free(w);
  exit(sent == 0 ? 0 : 1);
}

/* One acquisition and release of 'prefix', so that the driver can see on a
 * MONITOR connection exactly which script call the library makes. */
static int probe(void) {
  dlock_options_t o;
  dlock_client_t *client;
  dlock_t *l;
  int rc;
  dlock_options_init(&o);
  o.url = url;
  o.tls_ca_file = cacert;
  if ((rc = dlock_client_open(&o, &client)) < 0)
    bench_die("client_open", rc);
  if ((rc = dlock_get(client, prefix, &l)) < 0)
    bench_die("get", rc);
  if ((rc = dlock_lock(l, lease_ms)) < 0)
    bench_die("lock", rc);
  if ((rc = dlock_unlock(l)) < 0)
    bench_die("unlock", rc);
  dlock_free(l);
  dlock_client_close(client);
  printf("probe=ok\n");
  return 0;
}

static void usage(void) {
  fprintf(stderr,
          "usage: bench_lock [--url URL] [--cacert FILE] [--stats-url URL]\n"
          "         [--mode loop|herd] [--procs P]\n"
          "         [--threads T] [--distinct] [--work] [--fair]\n"
          "         [--seconds S] [--timeout S] [--lease MS] [--name NAME]\n"
          "         [--dist PREFIX] [--probe] [--no-sync] [--no-stats]\n"
          "         [--spin-us N]\n");
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
  int do_probe = 0;
  if (getenv("DLOCK_URL"))
    url = getenv("DLOCK_URL");
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--distinct") == 0)
      distinct = 1;
    else if (strcmp(a, "--work") == 0)
      work = 1;
    else if (strcmp(a, "--fair") == 0)
      fair = 1;
    else if (strcmp(a, "--probe") == 0)
      do_probe = 1;
    else if (strcmp(a, "--no-sync") == 0)
      no_sync = 1;
    else if (strcmp(a, "--no-stats") == 0)
      no_stats = 1;
    else if (strcmp(a, "--spin-us") == 0 && i + 1 < argc)
      spin_us = atoll(argv[++i]);
    else if (v == NULL)
      usage();
    else if (strcmp(a, "--url") == 0)
      url = v, i++;
    else if (strcmp(a, "--cacert") == 0)
      cacert = v, i++;
    else if (strcmp(a, "--stats-url") == 0)
      stats_url = v, i++;
    else if (strcmp(a, "--mode") == 0) {
      if (strcmp(v, "herd") == 0)
        herd = 1;
      else if (strcmp(v, "loop") != 0)
        usage();
      i++;
    } else if (strcmp(a, "--procs") == 0)
      nprocs = atoi(v), i++;
    else if (strcmp(a, "--threads") == 0)
      nthreads = atoi(v), i++;
    else if (strcmp(a, "--seconds") == 0)
      seconds = atof(v), i++;
    else if (strcmp(a, "--timeout") == 0)
      herd_timeout = atof(v), i++;
    else if (strcmp(a, "--lease") == 0)
      lease_ms = atoll(v), i++;
    else if (strcmp(a, "--name") == 0)
      prefix = v, i++;
    else if (strcmp(a, "--dist") == 0)
      dist = v, i++;
    else
      usage();
  }
  if (nprocs < 1 || nprocs > 64 || nthreads < 1 || nthreads > 1024 ||
      !(seconds > 0) || !(herd_timeout > 0) || (herd && distinct))
    usage();
  if (do_probe)
    return probe();

  redisContext *r = bench_connect(stats_url ? stats_url : url);
  freeReplyObject(redisCommand(r, "SET " COUNTER_KEY " 0"));
  /* In a herd the parent holds the lock while the workers line up. */
  dlock_client_t *holder = NULL;
  dlock_t *held = NULL;
  if (herd) {
    dlock_options_t o;
    int rc;
    dlock_options_init(&o);
    o.url = url;
    o.tls_ca_file = cacert;
    if ((rc = dlock_client_open(&o, &holder)) < 0)
      bench_die("client_open", rc);
    if ((rc = open_lock(holder, prefix, &held)) < 0)
      bench_die("get", rc);
    if ((rc = dlock_lock(held, lease_ms)) < 0)
      bench_die("lock", rc);
  }
  /* A child that dies must not kill the parent with SIGPIPE on its go pipe;
   * the missing results are reported instead. */
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
      /* The child never returns to this loop; it keeps none of the
       * parent's bookkeeping, nor its connections. */
      free(pids);
      free(to_child);
      free(from_child);
      run_child(p, down[0], up[1]);
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
  uint64_t t0 = bench_now_ns();
  for (int p = 0; p < nprocs; p++)
    if (bench_write_all(to_child[p], "g", 1) < 0)
      failed = 1;
  if (herd) {
    /* Every worker says when it starts waiting; a short pause then lets
     * the last ones make their first attempt and go to sleep. */
    for (int p = 0; p < nprocs; p++)
      for (int i = 0; i < nthreads; i++)
        if (bench_read_all(from_child[p], &byte, 1) < 0)
          failed = 1;
    bench_sleep_us(200000);
    bench_cmdstats(r, &before);
    t0 = bench_now_ns();
    int rc = dlock_unlock(held);
    if (rc < 0)
      bench_die("unlock", rc);
  }

  uint64_t acq = 0, win = 0, errors = 0, done = 0;
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
    if (h.done_ns > done)
      done = h.done_ns;
  }
  uint64_t end = bench_now_ns();
  bench_cmdstats(r, &after);
  if (getenv("BENCH_COUNTS") != NULL) {
    for (int i = 0; i < nprocs * nthreads; i++)
      fprintf(stderr, "%s%" PRIu64, i % nthreads ? " " : (i ? " | " : ""),
              counts[i]);
    fprintf(stderr, "\n");
  }
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
  /* The rate counts what was done within the window (a lock call still
   * waiting when it closes is finished, but not counted); the herd's time
   * runs from the release to the last worker done. */
  double secs = herd ? (double)((done > t0 ? done : end) - t0) / 1e9 : seconds;
  const char *counter = "-";
  long long c = bench_number(r, "GET " COUNTER_KEY);
  if (work || herd) {
    counter = (uint64_t)c == acq ? "ok" : "bad";
    if ((uint64_t)c != acq)
      fprintf(stderr,
              "bench_lock: counter is %lld after %" PRIu64
              " acquisitions: holders overlapped\n",
              c, acq);
  }
  /* What the clients sent: the commands only a client can send, plus the
   * GET and SET of every critical section. */
  uint64_t own = (work || herd) ? 2 * acq : 0;
  printf(
      "acq=%" PRIu64 " win=%" PRIu64
      " seconds=%.3f rate=%.1f pair_p50=%.1f pair_p99=%.1f "
      "wait_p50=%.1f wait_p99=%.1f min=%" PRIu64 " max=%" PRIu64
      " cmds=%" PRIu64 " cmds_all=%" PRIu64 " counter=%s errors=%" PRIu64 "\n",
      acq, win, secs, secs > 0 ? (double)win / secs : 0,
      bench_quantile(&pair, 0.5), bench_quantile(&pair, 0.99),
      bench_quantile(&wait, 0.5), bench_quantile(&wait, 0.99), min, max,
      after.wire - before.wire + own, after.all - before.all, counter, errors);
  dlock_free(held);
  dlock_client_close(holder);
  redisFree(r);
  free(pair.v);
  free(wait.v);
  free(counts);
  free(pids);
  free(to_child);
  free(from_child);
  return failed || errors || strcmp(counter, "bad") == 0 ? 1 : 0;
}
