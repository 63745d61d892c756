/*
 * dlock_soak: a long run of mixed load with faults that watches the
 * workers' memory and descriptors ("make soak", scripts/soak.sh).
 *
 * This process, the coordinator, starts three redis-servers with AOF on and
 * forks the worker processes. Each worker opens one client per server and
 * runs several threads that take and release every kind of lock in turn:
 * reentrant, fair, read, write, spin, a MultiLock over locks on two servers
 * and a RedLock over all three, each with a bounded wait, some reentrant,
 * with watchdog and fixed leases. Until the time is up the coordinator
 * injects a fault every few seconds (CLIENT KILL of the command or the
 * pub/sub connections, a pause shorter than the command timeout, SCRIPT
 * FLUSH, a restart that reloads the AOF) and samples every worker's VmRSS
 * and open descriptors. Counters live in a shared mapping, so it reads them
 * while the workers run.
 *
 * The verdict looks at the second half of the run only: the first is
 * warm-up, while allocator arenas, hiredis's buffers and the hold tables
 * reach their working size. It compares the start of the second half with
 * its end: memory by the median of a few samples (RSS moves in steps), and
 * descriptors by their minimum (a reconnect in progress holds one more for
 * a moment). Leaks show as growth that the warm-up cannot explain.
 */
/* For MAP_ANONYMOUS and prctl(). */
#define _GNU_SOURCE

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dlock.h"
#include "redis_proc.h"

#define NSERVERS 3
#define NAMES_PER_KIND 3
#define MAX_PROCS 16
#define MAX_THREADS 32
/* Error codes are small negative numbers; index 0 collects any other. */
#define NCODES 16

/* The client options of the workers. A pause is shorter than the command
 * timeout, so that it delays calls without failing them; the watchdog lease
 * is longer than both, so that a pause cannot cost a lock. */
#define COMMAND_TIMEOUT_MS 3000
#define PAUSE_MS 1000
#define WATCHDOG_MS 6000
#define FIXED_LEASE_MS 5000
/* How long a lock call waits for a lock held by another worker. */
#define WAIT_MS 1000
/* How long stopped workers get to finish their last call and exit. */
#define STOP_GRACE_MS 30000
/* A worker whose count of finished operations did not move for this long
 * is reported as stalled. */
#define STALL_MS 60000

enum kind {
  K_REENTRANT,
  K_FAIR,
  K_READ,
  K_WRITE,
  K_SPIN,
  K_MULTI,
  K_RED,
  NKINDS
};
static const char *const kind_names[NKINDS] = {
    "reentrant", "fair", "read", "write", "spin", "multi", "redlock"};

enum fault {
  F_KILL_NORMAL,
  F_PAUSE,
  F_SCRIPT_FLUSH,
  F_KILL_PUBSUB,
  F_RESTART,
  NFAULTS
};
static const char *const fault_names[NFAULTS] = {
    "client-kill", "pause", "script-flush", "client-kill-pubsub",
    "restart-aof"};

/* One worker's counters, written by its threads, read by the coordinator.
 * Lock-free atomics work across processes in a shared mapping. */
typedef struct counters {
  _Atomic uint64_t attempts[NKINDS];
  _Atomic uint64_t cycles[NKINDS]; /* acquired and released cleanly */
  _Atomic uint64_t lock_err[NCODES];
  _Atomic uint64_t unlock_err[NCODES];
  _Atomic uint64_t lost; /* on_lost reports */
  /* The first detail (dlock_last_error) seen for each code, and the kind
   * of lock it came from, for the summary. */
  atomic_int detail_taken[NCODES];
  int detail_kind[NCODES];
  char detail[NCODES][160];
} counters_t;

typedef struct shared {
  atomic_int stop;
  atomic_int ready;
  counters_t per[MAX_PROCS];
} shared_t;

typedef struct config {
  int seconds;
  int procs;
  int threads;
  int sample_ms;
  int fault_every_ms;
} config_t;

typedef struct sample {
  int64_t t_ms; /* since the start of the run */
  long rss_kb;
  long fds;
  uint64_t ops;
} sample_t;

static shared_t *sh;
static volatile sig_atomic_t interrupted;

/* ---- small helpers ------------------------------------------------------ */

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int64_t ms) {
  if (ms <= 0)
    return;
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR && !interrupted) {
  }
}

/* xorshift64*: each thread draws from its own state, no locking. */
static uint64_t next_rand(uint64_t *s) {
  uint64_t x = *s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *s = x;
  return x * 0x2545F4914F6CDD1DULL;
}

static void count_code(counters_t *cnt, _Atomic uint64_t *by_code, int kind,
                       int rc) {
  int i = -rc;
  if (i <= 0 || i >= NCODES)
    i = 0;
  atomic_fetch_add(&by_code[i], 1);
  if (atomic_exchange(&cnt->detail_taken[i], 1) == 0) {
    cnt->detail_kind[i] = kind;
    snprintf(cnt->detail[i], sizeof(cnt->detail[i]), "%s", dlock_last_error());
  }
}

static uint64_t total_ops(const counters_t *c) {
  uint64_t n = 0;
  for (int k = 0; k < NKINDS; k++)
    n += atomic_load(&c->attempts[k]);
  return n;
}

/* ---- the workers -------------------------------------------------------- */

typedef struct wthread {
  dlock_client_t **clients; /* NSERVERS of them, shared by the threads */
  counters_t *cnt;
  uint64_t rng;
  int64_t end_ms; /* a bound of its own, should the stop flag never come */
  pthread_t thread;
} wthread_t;

static void on_lost(void *data, const char *name, size_t len, uint64_t owner) {
  counters_t *cnt = data;
  (void)name;
  (void)len;
  (void)owner;
  atomic_fetch_add(&cnt->lost, 1);
}

/*
 * Takes 'l' with a bounded wait, sometimes once more (reentrant), holds it
 * for a moment and releases every hold, one unlock each.
 */
static void cycle(wthread_t *t, int kind, dlock_t *l, int may_reenter) {
  counters_t *cnt = t->cnt;
  atomic_fetch_add(&cnt->attempts[kind], 1);
  int64_t lease = next_rand(&t->rng) % 2 ? DLOCK_WATCHDOG : FIXED_LEASE_MS;
  int rc = dlock_trylock(l, WAIT_MS, lease);
  if (rc != 0) {
    count_code(cnt, cnt->lock_err, kind, rc);
    return;
  }
  int held = 1;
  if (may_reenter && next_rand(&t->rng) % 4 == 0) {
    rc = dlock_trylock(l, 0, lease);
    if (rc == 0)
      held++;
    else
      count_code(cnt, cnt->lock_err, kind, rc);
  }
  sleep_ms((int64_t)(next_rand(&t->rng) % 3));
  /* One unlock per hold, whatever each returns: a failed unlock counts as
   * done (the library finishes it with the owner's next call, and a last
   * hold is no longer renewed meanwhile), and a lost lock reports
   * DLOCK_ELOST to each of its unlocks. Trying a failed unlock again would
   * release a hold the owner still has. */
  int clean = 1;
  for (; held > 0; held--) {
    rc = dlock_unlock(l);
    if (rc == 0)
      continue;
    count_code(cnt, cnt->unlock_err, kind, rc);
    clean = 0;
    if (rc == DLOCK_ENOTHELD)
      break;
  }
  if (clean)
    atomic_fetch_add(&cnt->cycles[kind], 1);
}

static void name_of(char *buf, size_t n, const char *kind, unsigned i) {
  snprintf(buf, n, "soak:%s:%u", kind, i);
}

/* One operation of 'kind' on a lock picked at random among a few, so that
 * threads of all workers contend. Single locks live on the server their
 * number picks; faults on any server hit some of them. */
static void one_op(wthread_t *t, int kind) {
  char name[64];
  unsigned i = (unsigned)(next_rand(&t->rng) % NAMES_PER_KIND);
  dlock_client_t *c = t->clients[i % NSERVERS];
  dlock_t *l = NULL, *r = NULL, *w = NULL;
  dlock_t *parts[NSERVERS] = {NULL, NULL, NULL};
  int rc = 0;
  switch (kind) {
  case K_REENTRANT:
    name_of(name, sizeof(name), "reentrant", i);
    if ((rc = dlock_get(c, name, &l)) == 0)
      cycle(t, kind, l, 1);
    break;
  case K_FAIR:
    name_of(name, sizeof(name), "fair", i);
    if ((rc = dlock_get_fair(c, name, &l)) == 0)
      cycle(t, kind, l, 1);
    break;
  case K_SPIN:
    name_of(name, sizeof(name), "spin", i);
    if ((rc = dlock_get_spin(c, name, &l)) == 0)
      cycle(t, kind, l, 1);
    break;
  case K_READ:
  case K_WRITE:
    name_of(name, sizeof(name), "rw", i);
    if ((rc = dlock_get_rw(c, name, &r, &w)) == 0)
      cycle(t, kind, kind == K_READ ? r : w, 1);
    break;
  case K_MULTI: {
    /* Two different names, in either order, on two servers. */
    unsigned j = (i + 1 + (unsigned)(next_rand(&t->rng) % 2)) % NAMES_PER_KIND;
    unsigned pick[2] = {i, j};
    for (int k = 0; k < 2 && rc == 0; k++) {
      name_of(name, sizeof(name), "multi", pick[k]);
      rc = dlock_get(t->clients[(unsigned)k % NSERVERS], name, &parts[k]);
    }
    if (rc == 0 && (rc = dlock_get_multi(parts, 2, &l)) == 0)
      cycle(t, kind, l, 0);
    break;
  }
  case K_RED:
    name_of(name, sizeof(name), "red", i);
    for (int k = 0; k < NSERVERS && rc == 0; k++)
      rc = dlock_get(t->clients[k], name, &parts[k]);
    if (rc == 0 && (rc = dlock_get_red(parts, NSERVERS, &l)) == 0)
      cycle(t, kind, l, 0);
    break;
  default:
    break;
  }
  if (rc != 0) {
    atomic_fetch_add(&t->cnt->attempts[kind], 1);
    count_code(t->cnt, t->cnt->lock_err, kind, rc);
  }
  /* The composite handle first: it uses its parts. */
  dlock_free(l);
  dlock_free(r);
  dlock_free(w);
  for (int k = 0; k < NSERVERS; k++)
    dlock_free(parts[k]);
}

static void *worker_thread(void *arg) {
  wthread_t *t = arg;
  while (!atomic_load(&sh->stop) && now_ms() < t->end_ms) {
    one_op(t, (int)(next_rand(&t->rng) % NKINDS));
    /* A little think time, so that the run is a steady load rather than
     * a saturated machine, where every timeout would fire. */
    sleep_ms(1 + (int64_t)(next_rand(&t->rng) % 3));
  }
  return NULL;
}

static int worker_main(int w, const config_t *cfg, rp_server_t **srv) {
  counters_t *cnt = &sh->per[w];
  dlock_client_t *clients[NSERVERS] = {NULL, NULL, NULL};
  for (int i = 0; i < NSERVERS; i++) {
    dlock_options_t o;
    dlock_options_init(&o);
    o.url = rp_url(srv[i]);
    o.command_timeout_ms = COMMAND_TIMEOUT_MS;
    o.watchdog_timeout_ms = WATCHDOG_MS;
    /* Short enough that a waiter dropped by a fault leaves the queue
     * within the run. */
    o.fair_wait_timeout_ms = 20000;
    o.on_lost = on_lost;
    o.on_lost_data = cnt;
    int rc = dlock_client_open(&o, &clients[i]);
    if (rc != 0) {
      fprintf(stderr, "soak: worker %d: open %s: %s: %s\n", w, rp_url(srv[i]),
              dlock_err_name(rc), dlock_last_error());
      return 2;
    }
  }
  wthread_t threads[MAX_THREADS];
  int64_t end = now_ms() + (int64_t)cfg->seconds * 1000 + STOP_GRACE_MS;
  int started = 0;
  for (int i = 0; i < cfg->threads; i++) {
    threads[i].clients = clients;
    threads[i].cnt = cnt;
    threads[i].rng = ((uint64_t)getpid() << 20) ^ ((uint64_t)i << 8) ^
                     (uint64_t)now_ms() ^ 0x9E3779B97F4A7C15ULL;
    threads[i].end_ms = end;
    if (pthread_create(&threads[i].thread, NULL, worker_thread, &threads[i]) !=
        0) {
      fprintf(stderr, "soak: worker %d: pthread_create failed\n", w);
      atomic_store(&sh->stop, 1);
      break;
    }
    started++;
  }
  atomic_fetch_add(&sh->ready, 1);
  for (int i = 0; i < started; i++)
    pthread_join(threads[i].thread, NULL);
  for (int i = 0; i < NSERVERS; i++)
    dlock_client_close(clients[i]);
  return started == cfg->threads ? 0 : 2;
}

/* ---- sampling ----------------------------------------------------------- */

static long read_rss_kb(pid_t pid) {
  char path[64], line[256];
  snprintf(path, sizeof(path), "/proc/%ld/status", (long)pid);
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return -1;
  long kb = -1;
  while (fgets(line, sizeof(line), f)) {
    if (strncmp(line, "VmRSS:", 6) == 0) {
      kb = strtol(line + 6, NULL, 10);
      break;
    }
  }
  fclose(f);
  return kb;
}

static long count_fds(pid_t pid) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%ld/fd", (long)pid);
  DIR *d = opendir(path);
  if (d == NULL)
    return -1;
  long n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] != '.')
      n++;
  }
  closedir(d);
  return n;
}

/* ---- faults ------------------------------------------------------------- */

/* Runs a CLIENT KILL and returns how many connections it closed, or -1. */
static long client_kill(rp_server_t *s, const char *type) {
  redisReply *r = rp_cmd(s, "CLIENT KILL TYPE %s", type);
  long n = r && r->type == REDIS_REPLY_INTEGER ? (long)r->integer : -1;
  freeReplyObject(r);
  return n;
}

/* Injects one fault; 0 when it took effect. */
static int inject(int f, rp_server_t *s, long *killed) {
  redisReply *r;
  int ok;
  long n;
  switch (f) {
  case F_KILL_NORMAL:
  case F_KILL_PUBSUB:
    n = client_kill(s, f == F_KILL_NORMAL ? "normal" : "pubsub");
    if (n > 0)
      *killed += n;
    return n >= 0 ? 0 : -1;
  case F_PAUSE:
    if (rp_pause(s) != 0)
      return -1;
    sleep_ms(PAUSE_MS);
    return rp_resume(s);
  case F_SCRIPT_FLUSH:
    r = rp_cmd(s, "SCRIPT FLUSH");
    ok = r && r->type == REDIS_REPLY_STATUS;
    freeReplyObject(r);
    return ok ? 0 : -1;
  case F_RESTART:
    return rp_restart(s);
  default:
    return -1;
  }
}

/* ---- the verdict -------------------------------------------------------- */

static int cmp_long(const void *a, const void *b) {
  long x = *(const long *)a, y = *(const long *)b;
  return (x > y) - (x < y);
}

static long median(long *v, size_t n) {
  qsort(v, n, sizeof(*v), cmp_long);
  return v[n / 2];
}

static long min_of(const long *v, size_t n) {
  long m = v[0];
  for (size_t i = 1; i < n; i++)
    if (v[i] < m)
      m = v[i];
  return m;
}

/* Least-squares slope of y over t, per minute. */
static double slope_per_min(const sample_t *s, size_t n, int fds) {
  double st = 0, sy = 0, stt = 0, sty = 0;
  for (size_t i = 0; i < n; i++) {
    double t = (double)s[i].t_ms / 60000.0;
    double y = fds ? (double)s[i].fds : (double)s[i].rss_kb;
    st += t;
    sy += y;
    stt += t * t;
    sty += t * y;
  }
  double d = (double)n * stt - st * st;
  return d > 0 ? ((double)n * sty - st * sy) / d : 0;
}

typedef struct judgement {
  int judged; /* 0: too few samples in the second half */
  long rss_mid, rss_end, fds_mid, fds_end;
  double rss_slope, fds_slope;
  int rss_grew, fds_grew, stalled;
} judgement_t;

static void judge(const sample_t *s, size_t n, int64_t run_ms, judgement_t *j) {
  memset(j, 0, sizeof(*j));
  size_t first = 0;
  while (first < n && s[first].t_ms < run_ms / 2)
    first++;
  size_t m = n - first;
  /* Progress over the last STALL_MS, whatever the half. */
  if (n > 0) {
    size_t k = n - 1;
    while (k > 0 && s[n - 1].t_ms - s[k - 1].t_ms <= STALL_MS)
      k--;
    j->stalled =
        s[n - 1].t_ms - s[k].t_ms >= STALL_MS / 2 && s[n - 1].ops == s[k].ops;
  }
  if (m < 4)
    return;
  j->judged = 1;
  size_t w = m / 4 > 0 ? m / 4 : 1;
  long a[4096], b[4096];
  if (w > sizeof(a) / sizeof(a[0]))
    w = sizeof(a) / sizeof(a[0]);
  for (size_t i = 0; i < w; i++) {
    a[i] = s[first + i].rss_kb;
    b[i] = s[n - w + i].rss_kb;
  }
  j->rss_mid = median(a, w);
  j->rss_end = median(b, w);
  for (size_t i = 0; i < w; i++) {
    a[i] = s[first + i].fds;
    b[i] = s[n - w + i].fds;
  }
  j->fds_mid = min_of(a, w);
  j->fds_end = min_of(b, w);
  j->rss_slope = slope_per_min(s + first, m, 0);
  j->fds_slope = slope_per_min(s + first, m, 1);
  /* Memory moves in allocator-sized steps: growth counts past 512 KiB or
   * 2 %, whichever is more. A descriptor more is a descriptor leaked. */
  long tol = j->rss_mid / 50 > 512 ? j->rss_mid / 50 : 512;
  j->rss_grew = j->rss_end - j->rss_mid > tol;
  j->fds_grew = j->fds_end > j->fds_mid;
}

/* ---- the coordinator ---------------------------------------------------- */

static void on_signal(int sig) {
  (void)sig;
  interrupted = 1;
}

static int parse_int(const char *s, int lo, int hi, int *out) {
  char *end = NULL;
  long v = strtol(s, &end, 10);
  if (end == s || *end != '\0' || v < lo || v > hi)
    return -1;
  *out = (int)v;
  return 0;
}

static void usage(void) {
  fprintf(stderr,
          "usage: dlock_soak [--seconds N] [--processes N] [--threads N]\n"
          "                  [--sample-ms N] [--fault-every-ms N]\n"
          "Mixed load with faults on every lock kind against three\n"
          "throwaway redis-servers; prints a summary and a verdict on\n"
          "memory and descriptor growth. Exits 0 when nothing grew.\n");
}

static int parse_args(int argc, char **argv, config_t *cfg) {
  for (int i = 1; i < argc; i++) {
    int *dst = NULL, lo = 1, hi = 1 << 30;
    if (strcmp(argv[i], "--seconds") == 0)
      dst = &cfg->seconds;
    else if (strcmp(argv[i], "--processes") == 0)
      dst = &cfg->procs, hi = MAX_PROCS;
    else if (strcmp(argv[i], "--threads") == 0)
      dst = &cfg->threads, hi = MAX_THREADS;
    else if (strcmp(argv[i], "--sample-ms") == 0)
      dst = &cfg->sample_ms, lo = 100;
    else if (strcmp(argv[i], "--fault-every-ms") == 0)
      dst = &cfg->fault_every_ms, lo = 100;
    if (dst == NULL || i + 1 >= argc || parse_int(argv[i + 1], lo, hi, dst)) {
      usage();
      return -1;
    }
    i++;
  }
  return 0;
}

int main(int argc, char **argv) {
  config_t cfg = {600, 3, 6, 0, 8000};
  if (parse_args(argc, argv, &cfg) != 0)
    return 64;
  if (cfg.sample_ms == 0) {
    /* About a hundred samples, every 1 to 5 s. */
    cfg.sample_ms = cfg.seconds * 10;
    if (cfg.sample_ms < 1000)
      cfg.sample_ms = 1000;
    if (cfg.sample_ms > 5000)
      cfg.sample_ms = 5000;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);

  sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
            MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) {
    perror("soak: mmap");
    return 1;
  }
  memset(sh, 0, sizeof(*sh));

  /* AOF on, so that a restart keeps the locks; fsync once a second is
   * enough, since a restart stops the server with SIGTERM, which writes
   * the AOF out. The AOF is rewritten from 4 MB on, rather than 64 MB, so
   * that a restart spends a moment loading it, not seconds. */
  rp_server_t *srv[NSERVERS];
  for (int i = 0; i < NSERVERS; i++) {
    rp_options_t o;
    rp_options_init(&o);
    o.appendonly = 1;
    o.extra_conf = "appendfsync everysec\nauto-aof-rewrite-min-size 4mb";
    if (rp_start(&o, &srv[i]) != 0) {
      fprintf(stderr, "soak: cannot start redis-server %d\n", i);
      return 1;
    }
  }

  printf("soak: %d s, %d processes x %d threads, %d redis-servers with AOF "
         "(%s %s %s)\n",
         cfg.seconds, cfg.procs, cfg.threads, NSERVERS, rp_url(srv[0]),
         rp_url(srv[1]), rp_url(srv[2]));
  printf("soak: a fault every %d ms, a sample every %d ms\n",
         cfg.fault_every_ms, cfg.sample_ms);

  pid_t pids[MAX_PROCS];
  int status[MAX_PROCS];
  int done[MAX_PROCS];
  pid_t me = getpid();
  for (int w = 0; w < cfg.procs; w++) {
    fflush(NULL);
    pid_t p = fork();
    if (p < 0) {
      perror("soak: fork");
      atomic_store(&sh->stop, 1);
      return 1;
    }
    if (p == 0) {
      /* A worker dies with the coordinator, even a killed one. */
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != me)
        _exit(3);
      int rc = worker_main(w, &cfg, srv);
      fflush(NULL);
      /* _exit: the servers belong to the coordinator, and so do the
       * atexit handlers that stop them. */
      _exit(rc);
    }
    pids[w] = p;
    done[w] = 0;
    status[w] = 0;
  }

  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);

  /* All workers running before the clock starts. */
  int64_t ready_by = now_ms() + 30000;
  while (atomic_load(&sh->ready) < cfg.procs && now_ms() < ready_by &&
         !interrupted) {
    for (int w = 0; w < cfg.procs; w++) {
      if (!done[w] && waitpid(pids[w], &status[w], WNOHANG) == pids[w])
        done[w] = 1;
    }
    int dead = 0;
    for (int w = 0; w < cfg.procs; w++)
      dead += done[w];
    if (dead)
      break;
    sleep_ms(50);
  }
  if (atomic_load(&sh->ready) < cfg.procs) {
    fprintf(stderr, "soak: the workers did not start\n");
    atomic_store(&sh->stop, 1);
    for (int w = 0; w < cfg.procs; w++) {
      if (!done[w]) {
        kill(pids[w], SIGKILL);
        waitpid(pids[w], NULL, 0);
      }
    }
    return 1;
  }

  size_t cap = (size_t)cfg.seconds * 1000 / (size_t)cfg.sample_ms + 16;
  sample_t *samples[MAX_PROCS];
  size_t nsamples = 0;
  for (int w = 0; w < cfg.procs; w++) {
    samples[w] = calloc(cap, sizeof(sample_t));
    if (samples[w] == NULL) {
      fprintf(stderr, "soak: out of memory\n");
      return 1;
    }
  }
  uint64_t faults[NFAULTS] = {0}, faults_failed[NFAULTS] = {0};
  long killed = 0;
  int nfaults = 0;

  int64_t t0 = now_ms();
  int64_t run_ms = (int64_t)cfg.seconds * 1000;
  int64_t next_sample = t0, next_fault = t0 + cfg.fault_every_ms;
  int64_t next_report = t0 + 30000;
  int64_t stopped_at = run_ms;
  for (;;) {
    int64_t now = now_ms();
    int last = now - t0 >= run_ms || interrupted;
    if ((now >= next_sample || last) && nsamples < cap) {
      for (int w = 0; w < cfg.procs; w++) {
        sample_t *s = &samples[w][nsamples];
        s->t_ms = now - t0;
        s->rss_kb = done[w] ? -1 : read_rss_kb(pids[w]);
        s->fds = done[w] ? -1 : count_fds(pids[w]);
        s->ops = total_ops(&sh->per[w]);
      }
      nsamples++;
      next_sample += cfg.sample_ms;
    }
    if (last) {
      stopped_at = now - t0;
      break;
    }
    if (now >= next_report) {
      uint64_t ops = 0;
      for (int w = 0; w < cfg.procs; w++)
        ops += total_ops(&sh->per[w]);
      printf("soak: %3" PRId64 " s: %" PRIu64 " operations, %d faults; "
             "worker 0: RSS %ld KiB, %ld fds\n",
             (now - t0) / 1000, ops, nfaults, samples[0][nsamples - 1].rss_kb,
             samples[0][nsamples - 1].fds);
      next_report += 30000;
    }
    if (now >= next_fault) {
      /* Every kind in turn on one server, then on the next: every
       * NFAULTS * NSERVERS faults, each server has seen each kind. */
      int f = nfaults % NFAULTS;
      rp_server_t *s = srv[(nfaults / NFAULTS) % NSERVERS];
      if (inject(f, s, &killed) == 0) {
        faults[f]++;
      } else {
        faults_failed[f]++;
        fprintf(stderr, "soak: fault %s on %s failed\n", fault_names[f],
                rp_url(s));
        if (f == F_RESTART || f == F_PAUSE) {
          /* A server that is down or stopped would turn the rest of the
           * run into a different test. */
          fprintf(stderr, "soak: giving up\n");
          interrupted = 1;
        }
      }
      nfaults++;
      next_fault = now_ms() + cfg.fault_every_ms;
    }
    for (int w = 0; w < cfg.procs; w++) {
      if (!done[w] && waitpid(pids[w], &status[w], WNOHANG) == pids[w]) {
        done[w] = 1;
        fprintf(stderr, "soak: worker %d (pid %ld) ended early\n", w,
                (long)pids[w]);
      }
    }
    sleep_ms(100);
  }

  /* Stop: every worker finishes its current call and closes its clients. */
  atomic_store(&sh->stop, 1);
  int64_t grace_end = now_ms() + STOP_GRACE_MS;
  int left = 0;
  for (;;) {
    left = 0;
    for (int w = 0; w < cfg.procs; w++) {
      if (!done[w] && waitpid(pids[w], &status[w], WNOHANG) == pids[w])
        done[w] = 1;
      left += !done[w];
    }
    if (left == 0 || now_ms() >= grace_end)
      break;
    sleep_ms(50);
  }
  int64_t stop_ms = now_ms() - t0 - stopped_at;
  for (int w = 0; w < cfg.procs; w++) {
    if (!done[w]) {
      fprintf(stderr, "soak: worker %d (pid %ld) did not stop; killing it\n", w,
              (long)pids[w]);
      kill(pids[w], SIGKILL);
      waitpid(pids[w], &status[w], 0);
      done[w] = 1;
    }
  }

  /* ---- summary ---- */
  uint64_t attempts[NKINDS] = {0}, cycles[NKINDS] = {0};
  uint64_t lock_err[NCODES] = {0}, unlock_err[NCODES] = {0}, lost = 0;
  for (int w = 0; w < cfg.procs; w++) {
    const counters_t *c = &sh->per[w];
    for (int k = 0; k < NKINDS; k++) {
      attempts[k] += atomic_load(&c->attempts[k]);
      cycles[k] += atomic_load(&c->cycles[k]);
    }
    for (int e = 0; e < NCODES; e++) {
      lock_err[e] += atomic_load(&c->lock_err[e]);
      unlock_err[e] += atomic_load(&c->unlock_err[e]);
    }
    lost += atomic_load(&c->lost);
  }

  printf("\n==== dlock soak summary ====\n");
  printf("ran %.1f s%s, %d processes x %d threads; workers stopped in "
         "%" PRId64 " ms\n",
         (double)stopped_at / 1000.0, interrupted ? " (interrupted)" : "",
         cfg.procs, cfg.threads, stop_ms);
  printf("\noperations by kind (attempts, clean lock+unlock cycles):\n");
  uint64_t all = 0, all_cycles = 0;
  for (int k = 0; k < NKINDS; k++) {
    uint64_t a = attempts[k], c = cycles[k];
    all += a;
    all_cycles += c;
    printf("  %-10s %10" PRIu64 " %10" PRIu64 "\n", kind_names[k], a, c);
  }
  printf("  %-10s %10" PRIu64 " %10" PRIu64 "  (%.0f/s)\n", "all", all,
         all_cycles,
         stopped_at > 0 ? (double)all * 1000.0 / (double)stopped_at : 0.0);
  printf("\nerrors by code (lock, unlock):\n");
  int any = 0;
  for (int e = 0; e < NCODES; e++) {
    uint64_t a = lock_err[e], b = unlock_err[e];
    if (a == 0 && b == 0)
      continue;
    any = 1;
    printf("  %-16s %10" PRIu64 " %10" PRIu64 "\n",
           e == 0 ? "other" : dlock_err_name(-e), a, b);
    for (int w = 0; w < cfg.procs; w++) {
      const counters_t *c = &sh->per[w];
      if (atomic_load(&c->detail_taken[e]) && c->detail[e][0] != '\0') {
        printf("    first seen (%s): %s\n", kind_names[c->detail_kind[e]],
               c->detail[e]);
        break;
      }
    }
  }
  if (!any)
    printf("  none\n");
  printf("  (DLOCK_ETIMEDOUT on lock is contention: another worker held the "
         "lock for the whole wait)\n");
  printf("lost-lock reports (on_lost): %" PRIu64 "\n", lost);

  printf("\nfaults injected (%d):", nfaults);
  for (int f = 0; f < NFAULTS; f++)
    printf(" %s %" PRIu64 "%s", fault_names[f], faults[f],
           f + 1 < NFAULTS ? "," : "");
  printf("\n  connections closed by CLIENT KILL: %ld\n", killed);
  for (int f = 0; f < NFAULTS; f++) {
    if (faults_failed[f])
      printf("  %s failed %" PRIu64 " times\n", fault_names[f],
             faults_failed[f]);
  }

  printf("\nworkers (samples every %d ms; start / middle / end):\n",
         cfg.sample_ms);
  int grew = 0, stalled = 0, judged = 1, died = 0;
  for (int w = 0; w < cfg.procs; w++) {
    const sample_t *s = samples[w];
    size_t n = nsamples;
    /* Samples of a worker that ended early stop where it did. */
    while (n > 0 && s[n - 1].rss_kb < 0)
      n--;
    int ok_exit = WIFEXITED(status[w]) && WEXITSTATUS(status[w]) == 0;
    if (!ok_exit)
      died = 1;
    if (n == 0) {
      printf("  worker %d: no samples\n", w);
      judged = 0;
      continue;
    }
    size_t mid = 0;
    while (mid + 1 < n && s[mid].t_ms < stopped_at / 2)
      mid++;
    judgement_t j;
    judge(s, n, stopped_at, &j);
    printf(
        "  worker %d (pid %ld): RSS %ld / %ld / %ld KiB, fds %ld / %ld / "
        "%ld, exit %s%d\n",
        w, (long)pids[w], s[0].rss_kb, s[mid].rss_kb, s[n - 1].rss_kb, s[0].fds,
        s[mid].fds, s[n - 1].fds, WIFSIGNALED(status[w]) ? "signal " : "",
        WIFSIGNALED(status[w]) ? WTERMSIG(status[w]) : WEXITSTATUS(status[w]));
    if (!j.judged) {
      judged = 0;
      printf("    second half: too few samples to judge\n");
    } else {
      printf("    second half: RSS %ld -> %ld KiB (%+ld, trend %+.0f "
             "KiB/min), fds %ld -> %ld (trend %+.2f/min)%s%s\n",
             j.rss_mid, j.rss_end, j.rss_end - j.rss_mid, j.rss_slope,
             j.fds_mid, j.fds_end, j.fds_slope,
             j.rss_grew ? "  MEMORY GREW" : "",
             j.fds_grew ? "  DESCRIPTORS GREW" : "");
      grew |= j.rss_grew || j.fds_grew;
    }
    if (j.stalled) {
      stalled = 1;
      printf("    no operation finished in the last %d s: STALLED\n",
             STALL_MS / 1000);
    }
  }

  printf("\nverdict: ");
  int bad = grew || stalled || died;
  if (grew)
    printf("growth found (see MEMORY GREW / DESCRIPTORS GREW above)");
  else if (judged)
    printf("no growth");
  else
    printf("not judged (run too short)");
  if (stalled)
    printf("; a worker stalled");
  if (died)
    printf("; a worker did not exit cleanly");
  printf("\n");

  for (int w = 0; w < cfg.procs; w++)
    free(samples[w]);
  for (int i = 0; i < NSERVERS; i++)
    rp_free(srv[i]);
  munmap(sh, sizeof(*sh));
  return bad ? 1 : 0;
}
