/*
 * bench_async: dlock's event-loop API under the lock workloads of
 * bench/run.sh: the same as bench_lock, but each process is one thread
 * running a plain epoll loop, with its T workers as operations in flight
 * on one async client rather than threads.
 *
 *   bench_async --url URL --mode loop|herd --procs P --threads T
 *               [--distinct] [--work] [--seconds S] [--timeout S]
 *               [--name PREFIX] [--dist PATH]
 *
 * Each worker loops "lock; [GET+SET counter, through the client's own
 * connection]; unlock" on one lock name, or a name of its own with
 * --distinct. With --mode herd the parent holds the lock while every
 * worker starts waiting for it (within --timeout seconds), then releases
 * it: each worker takes it once, does the GET+SET and unlocks, and the
 * time is that from the release to the last worker done. Output: one line
 * of key=value pairs, as bench_lock's.
 */
#include "common.h"

#include <dlock.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/wait.h>
#include <unistd.h>

#define COUNTER_KEY "bench:counter"

static const char *url = "redis://127.0.0.1:6379";
static const char *prefix = "bench:lock";
static const char *dist;
static int nprocs = 1, nthreads = 1, distinct, work, herd;
static double seconds = 2.0, herd_timeout = 120.0;

typedef struct loop {
  int ep;
  uint64_t timer_at_ns; /* 0: none */
  dlock_client_t *c;
} loop;

typedef struct worker {
  loop *lp;
  dlock_t *l;
  uint64_t owner;
  int step; /* 0 lock, 1 get, 2 set, 3 unlock */
  long long seen;
  uint64_t start_ns, asked_ns;
  uint64_t acq, win, errors, done_ns;
  int stopped;
} worker;

static uint64_t end_ns;
static int running;
static bench_samples_t pairs, waits;

static void on_socket(dlock_client_t *c, int fd, int what, void *data) {
  loop *lp = data;
  (void)c;
  if (fd < 0)
    return;
  if (what & DLOCK_POLL_REMOVE) {
    epoll_ctl(lp->ep, EPOLL_CTL_DEL, fd, NULL);
    return;
  }
  struct epoll_event ev = {0};
  ev.events = ((what & DLOCK_POLL_IN) ? EPOLLIN : 0) |
              ((what & DLOCK_POLL_OUT) ? EPOLLOUT : 0);
  ev.data.fd = fd;
  if (epoll_ctl(lp->ep, EPOLL_CTL_MOD, fd, &ev) != 0)
    epoll_ctl(lp->ep, EPOLL_CTL_ADD, fd, &ev);
}

static void on_timer(dlock_client_t *c, int64_t ms, void *data) {
  loop *lp = data;
  (void)c;
  lp->timer_at_ns = ms < 0 ? 0 : bench_now_ns() + (uint64_t)ms * 1000000;
}

static void next(worker *w);

static void failed(worker *w, const char *what, int rc) {
  fprintf(stderr, "bench_async: %s: %s (%s)\n", what, dlock_strerror(rc),
          dlock_last_error());
  w->errors++;
  w->stopped = 1;
  running--;
}

static void locked(dlock_t *l, uint64_t owner, int status, void *data) {
  worker *w = data;
  (void)l;
  (void)owner;
  if (status != 0) {
    failed(w, "lock", status);
    return;
  }
  uint64_t now = bench_now_ns();
  bench_samples_add(&waits, now - w->asked_ns);
  w->acq++;
  w->step = work || herd ? 1 : 3;
  next(w);
}

static void replied(dlock_client_t *c, int status, dlock_reply_t *r,
                    void *data) {
  worker *w = data;
  (void)c;
  if (status != 0) {
    failed(w, "command", status);
    return;
  }
  if (w->step == 1)
    w->seen = r->type == DLOCK_REPLY_STRING ? atoll(r->str) : 0;
  dlock_reply_free(r);
  w->step++;
  next(w);
}

static void unlocked(dlock_t *l, uint64_t owner, int status, void *data) {
  worker *w = data;
  (void)l;
  (void)owner;
  if (status != 0) {
    failed(w, "unlock", status);
    return;
  }
  uint64_t now = bench_now_ns();
  bench_samples_add(&pairs, now - w->start_ns);
  if (now <= end_ns || herd)
    w->win++;
  w->done_ns = now;
  w->step = 0;
  /* A herd's worker takes the lock once. */
  if (herd) {
    w->stopped = 1;
    running--;
    return;
  }
  next(w);
}

static void next(worker *w) {
  int rc = 0;
  char buf[32];
  const char *get[] = {"GET", COUNTER_KEY};
  const char *set[] = {"SET", COUNTER_KEY, buf};
  switch (w->step) {
  case 0:
    if (bench_now_ns() >= end_ns) {
      w->stopped = 1;
      running--;
      return;
    }
    w->start_ns = w->asked_ns = bench_now_ns();
    rc = herd ? dlock_trylock_async(w->l, w->owner,
                                    (int64_t)(herd_timeout * 1000),
                                    DLOCK_WATCHDOG, locked, w)
              : dlock_lock_async(w->l, w->owner, DLOCK_WATCHDOG, locked, w);
    break;
  case 1:
    rc = dlock_client_command_async(w->lp->c, 2, get, NULL, replied, w);
    break;
  case 2:
    snprintf(buf, sizeof buf, "%lld", w->seen + 1);
    rc = dlock_client_command_async(w->lp->c, 3, set, NULL, replied, w);
    break;
  default:
    rc = dlock_unlock_async(w->l, w->owner, unlocked, w);
    break;
  }
  if (rc != 0)
    failed(w, "start", rc);
}

static void turn(loop *lp) {
  int wait = 100;
  if (lp->timer_at_ns != 0) {
    uint64_t now = bench_now_ns();
    wait = lp->timer_at_ns <= now
               ? 0
               : (int)((lp->timer_at_ns - now + 999999) / 1000000);
  }
  struct epoll_event evs[8];
  int n = epoll_wait(lp->ep, evs, 8, wait);
  for (int i = 0; i < n; i++)
    dlock_loop_action(lp->c, evs[i].data.fd,
                      ((evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP))
                           ? DLOCK_POLL_IN
                           : 0) |
                          ((evs[i].events & EPOLLOUT) ? DLOCK_POLL_OUT : 0));
  if (lp->timer_at_ns != 0 && bench_now_ns() >= lp->timer_at_ns) {
    lp->timer_at_ns = 0;
    dlock_loop_action(lp->c, DLOCK_SOCKET_TIMEOUT, 0);
  }
}

typedef struct child_header {
  uint64_t acq, win, errors, done_ns, npair, nwait;
} child_header_t;

static void run_child(int proc, int go_fd, int out_fd) {
  dlock_options_t o;
  dlock_options_init(&o);
  o.url = url;
  loop lp = {epoll_create1(0), 0, NULL};
  int rc = dlock_client_open_async(&o, &lp.c);
  if (rc != 0)
    bench_die("client_open_async", rc);
  if ((rc = dlock_loop_attach(lp.c, on_socket, on_timer, &lp)) != 0)
    bench_die("loop_attach", rc);
  worker *ws = calloc((size_t)nthreads, sizeof *ws);
  if (ws == NULL)
    bench_fail("out of memory");
  for (int i = 0; i < nthreads; i++) {
    char name[256];
    if (distinct)
      snprintf(name, sizeof name, "%s:%d:%d", prefix, proc, i);
    else
      snprintf(name, sizeof name, "%s", prefix);
    if ((rc = dlock_get(lp.c, name, &ws[i].l)) != 0)
      bench_die("get", rc);
    ws[i].lp = &lp;
    ws[i].owner = dlock_owner_new();
  }
  char byte = 'r';
  if (bench_write_all(out_fd, &byte, 1) < 0 ||
      bench_read_all(go_fd, &byte, 1) < 0)
    exit(1);
  end_ns = bench_now_ns() + (uint64_t)(seconds * 1e9);
  running = nthreads;
  for (int i = 0; i < nthreads; i++)
    next(&ws[i]);
  /* A herd's workers say they wait; the parent releases the lock once
   * every worker has and they had time to settle, while this loop turns. */
  for (int i = 0; herd && i < nthreads; i++)
    if (bench_write_all(out_fd, "w", 1) < 0)
      exit(1);
  while (running > 0)
    turn(&lp);
  child_header_t h = {0, 0, 0, 0, pairs.n, waits.n};
  uint64_t *counts = calloc((size_t)nthreads, sizeof *counts);
  if (counts == NULL)
    bench_fail("out of memory");
  for (int i = 0; i < nthreads; i++) {
    h.acq += ws[i].acq;
    h.win += ws[i].win;
    h.errors += ws[i].errors;
    counts[i] = ws[i].acq;
    if (ws[i].done_ns > h.done_ns)
      h.done_ns = ws[i].done_ns;
    dlock_free(ws[i].l);
  }
  if (bench_write_all(out_fd, &h, sizeof h) < 0 ||
      bench_write_all(out_fd, pairs.v, pairs.n * sizeof(uint64_t)) < 0 ||
      bench_write_all(out_fd, waits.v, waits.n * sizeof(uint64_t)) < 0 ||
      bench_write_all(out_fd, counts, (size_t)nthreads * sizeof *counts) < 0)
    exit(1);
  free(counts);
  dlock_client_close(lp.c);
  close(lp.ep);
  free(ws);
  exit(0);
}

static void usage(void) {
  fprintf(stderr, "usage: bench_async --url URL --mode loop|herd --procs P "
                  "--threads T [--distinct] [--work] [--seconds S] "
                  "[--timeout S] [--name PREFIX] [--dist PATH]\n");
  exit(2);
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--distinct") == 0)
      distinct = 1;
    else if (strcmp(a, "--work") == 0)
      work = 1;
    else if (v == NULL)
      usage();
    else if (strcmp(a, "--url") == 0)
      url = v, i++;
    else if (strcmp(a, "--mode") == 0) {
      if (strcmp(v, "herd") == 0)
        herd = 1;
      else if (strcmp(v, "loop") != 0)
        usage();
      i++;
    } else if (strcmp(a, "--timeout") == 0)
      herd_timeout = atof(v), i++;
    else if (strcmp(a, "--procs") == 0)
      nprocs = atoi(v), i++;
    else if (strcmp(a, "--threads") == 0)
      nthreads = atoi(v), i++;
    else if (strcmp(a, "--seconds") == 0)
      seconds = atof(v), i++;
    else if (strcmp(a, "--name") == 0)
      prefix = v, i++;
    else if (strcmp(a, "--dist") == 0)
      dist = v, i++;
    else
      usage();
  }
  if (nprocs < 1 || nprocs > 64 || nthreads < 1 || nthreads > 4096 ||
      !(seconds > 0) || !(herd_timeout > 0) || (herd && distinct))
    usage();
  redisContext *r = bench_connect(url);
  freeReplyObject(redisCommand(r, "SET " COUNTER_KEY " 0"));
  /* In a herd the parent holds the lock while the workers line up. */
  dlock_client_t *holder = NULL;
  dlock_t *held = NULL;
  if (herd) {
    dlock_options_t o;
    int rc;
    dlock_options_init(&o);
    o.url = url;
    if ((rc = dlock_client_open(&o, &holder)) != 0 ||
        (rc = dlock_get(holder, prefix, &held)) != 0 ||
        (rc = dlock_lock(held, DLOCK_WATCHDOG)) != 0)
      bench_die("herd holder", rc);
  }
  signal(SIGPIPE, SIG_IGN);
  pid_t pids[64];
  int to_child[64], from_child[64];
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
      run_child(p, down[0], up[1]);
    }
    close(down[0]);
    close(up[1]);
    to_child[p] = down[1];
    from_child[p] = up[0];
  }
  int failed_run = 0;
  char byte;
  for (int p = 0; p < nprocs; p++)
    if (bench_read_all(from_child[p], &byte, 1) < 0)
      failed_run = 1;
  bench_cmdstats_t before, after;
  bench_cmdstats(r, &before);
  uint64_t t0 = bench_now_ns();
  for (int p = 0; p < nprocs; p++)
    if (bench_write_all(to_child[p], "g", 1) < 0)
      failed_run = 1;
  if (herd) {
    /* Every worker waits; a short pause lets the last ones make their
     * first attempt and go to sleep. */
    for (int p = 0; p < nprocs; p++)
      for (int i = 0; i < nthreads; i++)
        if (bench_read_all(from_child[p], &byte, 1) < 0)
          failed_run = 1;
    bench_sleep_us(200000);
    bench_cmdstats(r, &before);
    t0 = bench_now_ns();
    int rc = dlock_unlock(held);
    if (rc != 0)
      bench_die("herd unlock", rc);
  }
  uint64_t acq = 0, win = 0, errors = 0, done = 0;
  /* The fewest and most acquisitions of one worker, as bench_lock's
   * threads: how evenly the lock went round. */
  uint64_t min = UINT64_MAX, max = 0;
  uint64_t *counts = calloc((size_t)nthreads, sizeof *counts);
  if (counts == NULL)
    bench_fail("out of memory");
  bench_samples_t pair = {0, 0, 0}, wait = {0, 0, 0};
  for (int p = 0; p < nprocs; p++) {
    child_header_t h;
    if (bench_read_all(from_child[p], &h, sizeof h) < 0 ||
        bench_read_samples(from_child[p], h.npair, &pair) < 0 ||
        bench_read_samples(from_child[p], h.nwait, &wait) < 0 ||
        bench_read_all(from_child[p], counts,
                       (size_t)nthreads * sizeof *counts) < 0) {
      failed_run = 1;
      continue;
    }
    acq += h.acq;
    win += h.win;
    errors += h.errors;
    if (h.done_ns > done)
      done = h.done_ns;
    for (int i = 0; i < nthreads; i++) {
      if (counts[i] < min)
        min = counts[i];
      if (counts[i] > max)
        max = counts[i];
    }
  }
  free(counts);
  if (min == UINT64_MAX)
    min = 0;
  bench_cmdstats(r, &after);
  for (int p = 0; p < nprocs; p++) {
    int status;
    close(to_child[p]);
    close(from_child[p]);
    if (waitpid(pids[p], &status, 0) < 0 || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0)
      failed_run = 1;
  }
  bench_samples_sort(&pair);
  bench_samples_sort(&wait);
  if (dist != NULL) {
    char path[4096];
    snprintf(path, sizeof path, "%s.pair", dist);
    bench_write_dist(&pair, path);
    snprintf(path, sizeof path, "%s.wait", dist);
    bench_write_dist(&wait, path);
  }
  /* The herd's time runs from the release to the last worker done. */
  double secs = herd ? (double)((done > t0 ? done : t0) - t0) / 1e9 : seconds;
  const char *counter = "-";
  long long c = bench_number(r, "GET " COUNTER_KEY);
  if (work || herd) {
    counter = (uint64_t)c == acq ? "ok" : "bad";
    if ((uint64_t)c != acq)
      fprintf(stderr,
              "bench_async: counter is %lld after %" PRIu64
              " acquisitions: holders overlapped\n",
              c, acq);
  }
  /* The GET and SET of each critical section went through the client's
   * connection and are in the wire count already. */
  printf("acq=%" PRIu64 " win=%" PRIu64
         " seconds=%.3f rate=%.1f pair_p50=%.1f pair_p99=%.1f "
         "wait_p50=%.1f wait_p99=%.1f min=%" PRIu64 " max=%" PRIu64
         " cmds=%" PRIu64 " cmds_all=%" PRIu64 " counter=%s errors=%" PRIu64
         "\n",
         acq, win, secs, secs > 0 ? (double)win / secs : 0,
         bench_quantile(&pair, 0.5), bench_quantile(&pair, 0.99),
         bench_quantile(&wait, 0.5), bench_quantile(&wait, 0.99), min, max,
         after.wire - before.wire, after.all - before.all, counter, errors);
  dlock_free(held);
  dlock_client_close(holder);
  redisFree(r);
  free(pair.v);
  free(wait.v);
  return failed_run || errors || strcmp(counter, "bad") == 0 ? 1 : 0;
}
