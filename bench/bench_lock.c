/*
 * bench_lock: lock+unlock pairs per second through the public dlock API.
 *
 * The workload is P processes of T threads each, every thread looping
 * "lock; (optional work); unlock" for a fixed time on either one shared lock
 * name or a name of its own. Processes are forked before any client exists,
 * each opens its own dlock client (as separate programs would), and they all
 * start on one signal from the parent so the measured windows overlap.
 *
 * Output is one machine-readable line for bench/run.sh:
 *   pairs=N seconds=S rate=R p50_us=X p99_us=Y errors=E counter=ok|bad|-
 * The exit status is non-zero when any call failed or, with --work, when the
 * counter guarded by the lock does not equal the number of acquisitions.
 */
#define _POSIX_C_SOURCE 200809L
#include <dlock.h>
#include <errno.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define COUNTER_KEY "bench:counter"

/* Settings from the command line; read-only once the run starts. */
static const char *url;
static const char *prefix = "bench:lock";
static int nprocs = 1, nthreads = 1, distinct, work;
static int64_t lease_ms = DLOCK_WATCHDOG;
static double seconds = 3.0;

/* What each thread measured; written by its thread, read after the join. */
typedef struct thread_result {
  pthread_t tid;
  dlock_t *lock;
  redisContext *redis; /* --work only */
  uint64_t pairs, errors;
  uint64_t *lat; /* pair latencies, ns */
  size_t nlat, caplat;
} thread_result_t;

/* What a child process sends back to the parent through its pipe, followed
 * by 'nlat' latencies. */
typedef struct child_header {
  uint64_t pairs, errors, elapsed_ns, nlat;
} child_header_t;

static pthread_barrier_t start_barrier;
static uint64_t start_ns, end_ns;

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void die(const char *what, int rc) {
  fprintf(stderr, "bench_lock: %s: %s (%s)\n", what, dlock_strerror(rc),
          dlock_last_error());
  exit(1);
}

/* A plain hiredis connection to the server named by 'u', in either URL form
 * dlock accepts; the guarded counter lives outside the library on purpose,
 * as a user's data would. */
static redisContext *connect_url(const char *u) {
  char buf[1024], *db = NULL, *auth = NULL, *host, *p;
  redisContext *r;
  snprintf(buf, sizeof buf, "%s", u);
  if (strncmp(buf, "unix://", 7) == 0) {
    if ((p = strstr(buf, "?db="))) *p = '\0', db = p + 4;
    r = redisConnectUnix(buf + 7);
  } else {
    host = strncmp(buf, "redis://", 8) == 0 ? buf + 8 : buf;
    if ((p = strrchr(host, '@'))) *p = '\0', auth = host, host = p + 1;
    if ((p = strchr(host, '/'))) *p = '\0', db = p + 1;
    int port = 6379;
    if ((p = strrchr(host, ':'))) *p = '\0', port = atoi(p + 1);
    r = redisConnect(host, port);
  }
  if (r == NULL || r->err) {
    fprintf(stderr, "bench_lock: %s: %s\n", u, r ? r->errstr : "no memory");
    exit(1);
  }
  if (auth && (p = strchr(auth, ':')) != NULL) {
    *p = '\0';
    freeReplyObject(*auth ? redisCommand(r, "AUTH %s %s", auth, p + 1)
                          : redisCommand(r, "AUTH %s", p + 1));
  }
  if (db && *db) freeReplyObject(redisCommand(r, "SELECT %s", db));
  return r;
}

/* Sends 'cmd' and returns its integer or string reply as a number; any
 * other reply ends the run, since the benchmark cannot be trusted after it. */
static long long redis_number(redisContext *r, const char *cmd) {
  redisReply *rep = redisCommand(r, cmd);
  long long v = 0;
  if (rep == NULL) {
    fprintf(stderr, "bench_lock: %s: %s\n", cmd, r->errstr);
    exit(1);
  }
  if (rep->type == REDIS_REPLY_INTEGER) v = rep->integer;
  else if (rep->type == REDIS_REPLY_STRING) v = atoll(rep->str);
  else if (rep->type == REDIS_REPLY_ERROR) {
    fprintf(stderr, "bench_lock: %s: %s\n", cmd, rep->str);
    exit(1);
  }
  freeReplyObject(rep);
  return v;
}

static void record(thread_result_t *t, uint64_t ns) {
  if (t->nlat == t->caplat) {
    size_t cap = t->caplat ? t->caplat * 2 : 65536;
    uint64_t *n = realloc(t->lat, cap * sizeof *n);
    if (n == NULL) {
      fprintf(stderr, "bench_lock: out of memory\n");
      exit(1);
    }
    t->lat = n;
    t->caplat = cap;
  }
  t->lat[t->nlat++] = ns;
}

static void *run_thread(void *arg) {
  thread_result_t *t = arg;
  pthread_barrier_wait(&start_barrier);
  for (uint64_t now = mono_ns(); now < end_ns;) {
    /* A bounded wait rather than dlock_lock: a lock that is never released
     * must show up as an error, not as a benchmark that never ends. */
    int rc = dlock_trylock(t->lock, 10000, lease_ms);
    if (rc < 0) {
      fprintf(stderr, "bench_lock: trylock: %s (%s)\n", dlock_strerror(rc),
              dlock_last_error());
      t->errors++;
      break;
    }
    if (work) {
      /* A deliberately non-atomic read-modify-write: the final counter
       * equals the number of acquisitions only if no two holders overlap. */
      long long v = redis_number(t->redis, "GET " COUNTER_KEY);
      redisReply *rep = redisCommand(t->redis, "SET " COUNTER_KEY " %lld", v + 1);
      freeReplyObject(rep);
    }
    if ((rc = dlock_unlock(t->lock)) < 0) {
      fprintf(stderr, "bench_lock: unlock: %s (%s)\n", dlock_strerror(rc),
              dlock_last_error());
      t->errors++;
      break;
    }
    uint64_t done = mono_ns();
    record(t, done - now);
    t->pairs++;
    now = done;
  }
  return NULL;
}

static int write_all(int fd, const void *buf, size_t len) {
  const char *p = buf;
  while (len > 0) {
    ssize_t n = write(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

static int read_all(int fd, void *buf, size_t len) {
  char *p = buf;
  while (len > 0) {
    ssize_t n = read(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

/* The body of one benchmark process: set everything up, report ready on
 * 'out', wait for the go byte on 'in', run, and send the results on 'out'. */
static void run_child(int proc, int in, int out) {
  dlock_options_t o;
  dlock_client_t *client;
  dlock_t *shared = NULL;
  thread_result_t *t = calloc((size_t)nthreads, sizeof *t);
  char name[256], go;
  int rc;
  if (t == NULL) exit(1);
  dlock_options_init(&o);
  o.url = url;
  if ((rc = dlock_client_open(&o, &client)) < 0) die("client_open", rc);
  if (!distinct && (rc = dlock_get(client, prefix, &shared)) < 0)
    die("get", rc);
  pthread_barrier_init(&start_barrier, NULL, (unsigned)nthreads + 1);
  for (int i = 0; i < nthreads; i++) {
    t[i].lock = shared;
    if (distinct) {
      snprintf(name, sizeof name, "%s:%d:%d", prefix, proc, i);
      if ((rc = dlock_get(client, name, &t[i].lock)) < 0) die("get", rc);
    }
    if (work) t[i].redis = connect_url(url);
    if (pthread_create(&t[i].tid, NULL, run_thread, &t[i]) != 0) exit(1);
  }
  if (write_all(out, "r", 1) < 0 || read_all(in, &go, 1) < 0) exit(1);
  start_ns = mono_ns();
  end_ns = start_ns + (uint64_t)(seconds * 1e9);
  pthread_barrier_wait(&start_barrier);
  child_header_t h = {0, 0, 0, 0};
  for (int i = 0; i < nthreads; i++) {
    pthread_join(t[i].tid, NULL);
    h.pairs += t[i].pairs;
    h.errors += t[i].errors;
    h.nlat += t[i].nlat;
  }
  h.elapsed_ns = mono_ns() - start_ns;
  int sent = write_all(out, &h, sizeof h);
  for (int i = 0; i < nthreads; i++) {
    if (sent == 0) sent = write_all(out, t[i].lat, t[i].nlat * sizeof *t[i].lat);
    free(t[i].lat);
    if (distinct) dlock_free(t[i].lock);
    if (t[i].redis) redisFree(t[i].redis);
  }
  dlock_free(shared);
  dlock_client_close(client);
  free(t);
  exit(sent == 0 ? 0 : 1);
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* One acquisition and release of 'prefix', so that bench/run.sh can see on
 * a MONITOR connection exactly which script call the library makes. */
static int probe(void) {
  dlock_options_t o;
  dlock_client_t *client;
  dlock_t *l;
  int rc;
  dlock_options_init(&o);
  o.url = url;
  if ((rc = dlock_client_open(&o, &client)) < 0) die("client_open", rc);
  if ((rc = dlock_get(client, prefix, &l)) < 0) die("get", rc);
  if ((rc = dlock_lock(l, lease_ms)) < 0) die("lock", rc);
  if ((rc = dlock_unlock(l)) < 0) die("unlock", rc);
  dlock_free(l);
  dlock_client_close(client);
  printf("probe=ok\n");
  return 0;
}

static void usage(void) {
  fprintf(stderr,
          "usage: bench_lock [--url URL] [--procs P] [--threads T]\n"
          "                  [--distinct] [--work] [--seconds S]\n"
          "                  [--lease MS] [--name NAME] [--probe]\n");
  exit(2);
}

int main(int argc, char **argv) {
  int do_probe = 0;
  url = getenv("DLOCK_URL") ? getenv("DLOCK_URL") : "redis://127.0.0.1:6379";
  if (getenv("BENCH_SECONDS")) seconds = atof(getenv("BENCH_SECONDS"));
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--distinct") == 0) distinct = 1;
    else if (strcmp(a, "--work") == 0) work = 1;
    else if (strcmp(a, "--probe") == 0) do_probe = 1;
    else if (v == NULL) usage();
    else if (strcmp(a, "--url") == 0) url = v, i++;
    else if (strcmp(a, "--procs") == 0) nprocs = atoi(v), i++;
    else if (strcmp(a, "--threads") == 0) nthreads = atoi(v), i++;
    else if (strcmp(a, "--seconds") == 0) seconds = atof(v), i++;
    else if (strcmp(a, "--lease") == 0) lease_ms = atoll(v), i++;
    else if (strcmp(a, "--name") == 0) prefix = v, i++;
    else usage();
  }
  if (nprocs < 1 || nprocs > 64 || nthreads < 1 || nthreads > 1024 ||
      !(seconds > 0))
    usage();
  if (do_probe) return probe();

  redisContext *r = NULL;
  if (work) {
    r = connect_url(url);
    freeReplyObject(redisCommand(r, "SET " COUNTER_KEY " 0"));
  }
  /* A child that dies must not kill the parent with SIGPIPE on its go pipe;
   * the missing results are reported instead. */
  signal(SIGPIPE, SIG_IGN);
  pid_t *pids = calloc((size_t)nprocs, sizeof *pids);
  int *to_child = calloc((size_t)nprocs, sizeof(int));
  int *from_child = calloc((size_t)nprocs, sizeof(int));
  if (!pids || !to_child || !from_child) return 1;
  for (int p = 0; p < nprocs; p++) {
    int down[2], up[2];
    fflush(NULL);
    if (pipe(down) < 0 || pipe(up) < 0 || (pids[p] = fork()) < 0) {
      perror("bench_lock: pipe/fork");
      return 1;
    }
    if (pids[p] == 0) {
      close(down[1]);
      close(up[0]);
      for (int q = 0; q < p; q++) close(to_child[q]), close(from_child[q]);
      /* The child never returns to this loop; it keeps none of the
       * parent's bookkeeping. */
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
  char ready;
  for (int p = 0; p < nprocs; p++)
    if (read_all(from_child[p], &ready, 1) < 0) failed = 1;
  for (int p = 0; p < nprocs; p++)
    if (write_all(to_child[p], "g", 1) < 0) failed = 1;

  uint64_t pairs = 0, errors = 0, elapsed = 0, nlat = 0;
  uint64_t *lat = NULL;
  for (int p = 0; p < nprocs; p++) {
    child_header_t h;
    if (read_all(from_child[p], &h, sizeof h) < 0) {
      failed = 1;
      continue;
    }
    uint64_t *n = realloc(lat, (size_t)(nlat + h.nlat + 1) * sizeof *lat);
    if (n == NULL) return 1;
    lat = n;
    if (read_all(from_child[p], lat + nlat, (size_t)h.nlat * sizeof *lat) < 0)
      failed = 1;
    nlat += h.nlat;
    pairs += h.pairs;
    errors += h.errors;
    if (h.elapsed_ns > elapsed) elapsed = h.elapsed_ns;
  }
  for (int p = 0; p < nprocs; p++) {
    int status;
    close(to_child[p]);
    close(from_child[p]);
    if (waitpid(pids[p], &status, 0) < 0 || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0)
      failed = 1;
  }
  if (nlat > 0) qsort(lat, (size_t)nlat, sizeof *lat, cmp_u64);
  double p50 = nlat ? (double)lat[(nlat - 1) / 2] / 1e3 : 0;
  double p99 = nlat ? (double)lat[(size_t)((double)(nlat - 1) * 0.99)] / 1e3 : 0;
  double secs = (double)elapsed / 1e9;
  const char *counter = "-";
  if (work) {
    long long c = redis_number(r, "GET " COUNTER_KEY);
    counter = (uint64_t)c == pairs ? "ok" : "bad";
    if ((uint64_t)c != pairs)
      fprintf(stderr, "bench_lock: counter is %lld after %" PRIu64
              " acquisitions: holders overlapped\n", c, pairs);
    redisFree(r);
  }
  printf("pairs=%" PRIu64 " seconds=%.3f rate=%.1f p50_us=%.1f p99_us=%.1f "
         "errors=%" PRIu64 " counter=%s\n",
         pairs, secs, secs > 0 ? (double)pairs / secs : 0, p50, p99, errors,
         counter);
  free(lat);
  free(pids);
  free(to_child);
  free(from_child);
  return failed || errors || strcmp(counter, "bad") == 0 ? 1 : 0;
}
