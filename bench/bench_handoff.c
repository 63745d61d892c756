/*
 * bench_handoff: the time from an unlock in one process to the acquisition
 * by a process that was waiting for the lock, beside a plain round trip
 * (PING) measured in the same processes at the same time.
 *
 * Two processes, each with its own dlock client, pass the lock back and
 * forth. The holder tells the other to start waiting, keeps the lock for
 * 5-15 ms (random, so that a polling waiter is caught at any point of its
 * cycle; meanwhile it times a PING on a plain connection), notes the time
 * and unlocks. The waiter notes the time its lock call returns; the
 * difference is one hand-off. Then the roles swap, for --seconds.
 *
 * Output: handoffs p50 p99 (us) ping_p50 ping_p99 (us) errors
 */
#include "common.h"

#include <dlock.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *url = "redis://127.0.0.1:6379";
static const char *name = "bench:handoff";
static const char *dist;
static double seconds = 2.0;
static int fair;

/* What each side recorded: as holder the unlock times, as waiter the
 * acquisition times, in the order of the hand-offs it took part in. */
typedef struct side {
  bench_samples_t released, acquired, ping;
  bench_samples_t bare_released, bare_acquired;
  uint64_t errors;
} side_t;

static uint64_t xorshift(uint64_t *x) {
  *x ^= *x << 13;
  *x ^= *x >> 7;
  *x ^= *x << 17;
  return *x;
}

/*
 * Holds the lock 5-15 ms, timing one PING meanwhile, then unlocks. The PING
 * waits 3 ms, for the other side to settle in its wait, and is alone: like
 * each step of the hand-off that follows, it starts from a server and a
 * client that were idle, not from a hot loop of requests.
 */
static int hold_and_release(dlock_t *l, redisContext *r, side_t *s,
                            uint64_t *rng) {
  uint64_t until = bench_now_ns() + 5000000 + xorshift(rng) % 10000000;
  bench_sleep_us(3000);
  {
    uint64_t t = bench_now_ns();
    redisReply *rep = redisCommand(r, "PING");
    if (rep == NULL)
      bench_fail("PING: %s", r->errstr);
    freeReplyObject(rep);
    bench_samples_add(&s->ping, bench_now_ns() - t);
  }
  uint64_t now = bench_now_ns();
  if (now < until)
    bench_sleep_us((until - now) / 1000);
  bench_samples_add(&s->released, bench_now_ns());
  int rc = dlock_unlock(l);
  if (rc < 0) {
    fprintf(stderr, "bench_handoff: unlock: %s (%s)\n", dlock_strerror(rc),
            dlock_last_error());
    s->errors++;
  }
  return rc;
}

static int send_samples(int fd, const bench_samples_t *s) {
  uint64_t n = s->n;
  return bench_write_all(fd, &n, sizeof n) < 0 ||
                 bench_write_all(fd, s->v, s->n * sizeof *s->v) < 0
             ? -1
             : 0;
}

static int recv_samples(int fd, bench_samples_t *s) {
  uint64_t n;
  if (bench_read_all(fd, &n, sizeof n) < 0)
    return -1;
  return bench_read_samples(fd, n, s);
}

/* The bare hand-off: plain hiredis, no library. The holder PUBLISHes to
 * the other side's channel; the other side, blocked reading its
 * subscription, takes the message and sends one SET NX PX: the least any
 * pub/sub lock can do. */
typedef struct bare {
  redisContext *sub; /* subscribed to this side's channel */
  int other;         /* the other side's number */
} bare_t;

static int bare_release(redisContext *r, const bare_t *b, side_t *s,
                        uint64_t *rng) {
  bench_sleep_us(5000 + xorshift(rng) % 10000);
  bench_samples_add(&s->bare_released, bench_now_ns());
  redisReply *rep = redisCommand(r, "PUBLISH bench:bare:%d 0", b->other);
  if (rep == NULL)
    bench_fail("PUBLISH: %s", r->errstr);
  freeReplyObject(rep);
  return 0;
}

static int bare_acquire(redisContext *r, const bare_t *b, side_t *s) {
  redisReply *msg = NULL, *rep;
  if (redisGetReply(b->sub, (void **)&msg) != REDIS_OK) {
    fprintf(stderr, "bench_handoff: bare wait: %s\n", b->sub->errstr);
    return -1;
  }
  freeReplyObject(msg);
  rep = redisCommand(r, "SET bench:bare:lock %d NX PX 30000", 1 - b->other);
  bench_samples_add(&s->bare_acquired, bench_now_ns());
  if (rep == NULL)
    bench_fail("SET: %s", r->errstr);
  freeReplyObject(rep);
  rep = redisCommand(r, "DEL bench:bare:lock");
  freeReplyObject(rep);
  return 0;
}

/*
 * Passes the lock back and forth until 'end': through dlock ('b' NULL) or
 * bare. The holder sends 'w' (start waiting, a release is coming) or, once
 * the time is up, 'q' (the run is over; released all the same).
 */
static void back_and_forth(int holding, dlock_t *l, redisContext *r,
                           const bare_t *b, int peer_in, int peer_out,
                           uint64_t end, side_t *s, uint64_t *rng) {
  char byte;
  for (;;) {
    if (holding) {
      int over = bench_now_ns() >= end;
      if (bench_write_all(peer_out, over ? "q" : "w", 1) < 0)
        break;
      int rc = b ? bare_release(r, b, s, rng) : hold_and_release(l, r, s, rng);
      if (rc < 0 || over)
        break;
      holding = 0;
    } else {
      if (bench_read_all(peer_in, &byte, 1) < 0 || byte == 'q')
        break;
      int rc;
      if (b) {
        rc = bare_acquire(r, b, s);
      } else {
        rc = dlock_trylock(l, 30000, DLOCK_WATCHDOG);
        bench_samples_add(&s->acquired, bench_now_ns());
        if (rc < 0)
          fprintf(stderr, "bench_handoff: trylock: %s (%s)\n",
                  dlock_strerror(rc), dlock_last_error());
      }
      if (rc < 0) {
        s->errors++;
        /* Let the other side stop too instead of waiting for a 'w'. */
        if (bench_write_all(peer_out, "q", 1) < 0)
          break;
        break;
      }
      holding = 1;
    }
  }
}

/*
 * One side. 'first' starts holding the lock. 'peer_in'/'peer_out' connect
 * to the other side, 'up'/'down' to the parent: ready, go, and the results.
 * The dlock hand-offs come first, for --seconds, then the bare ones for
 * half as long.
 */
static void run_side(int first, int peer_in, int peer_out, int up, int down) {
  dlock_options_t o;
  dlock_client_t *c;
  dlock_t *l;
  side_t s;
  int rc;
  char byte;
  uint64_t rng = bench_now_ns() ^ ((uint64_t)getpid() << 32) ^ 1;
  memset(&s, 0, sizeof s);
  dlock_options_init(&o);
  o.url = url;
  if ((rc = dlock_client_open(&o, &c)) < 0)
    bench_die("client_open", rc);
  rc = fair ? dlock_get_fair(c, name, &l) : dlock_get(c, name, &l);
  if (rc < 0)
    bench_die("get", rc);
  redisContext *r = bench_connect(url);
  bare_t b = {bench_connect(url), first ? 1 : 0};
  struct timeval tv = {30, 0};
  redisSetTimeout(b.sub, tv);
  freeReplyObject(redisCommand(b.sub, "SUBSCRIBE bench:bare:%d", 1 - b.other));
  if (first && (rc = dlock_lock(l, DLOCK_WATCHDOG)) < 0)
    bench_die("lock", rc);
  if (bench_write_all(up, "r", 1) < 0 || bench_read_all(down, &byte, 1) < 0)
    exit(1);
  uint64_t end = bench_now_ns() + (uint64_t)(seconds * 1e9);
  back_and_forth(first, l, r, NULL, peer_in, peer_out, end, &s, &rng);
  end = bench_now_ns() + (uint64_t)(seconds * 0.5e9);
  if (s.errors == 0)
    back_and_forth(first, NULL, r, &b, peer_in, peer_out, end, &s, &rng);
  int bad =
      bench_write_all(up, &s.errors, sizeof s.errors) < 0 ||
      send_samples(up, &s.released) < 0 || send_samples(up, &s.acquired) < 0 ||
      send_samples(up, &s.ping) < 0 || send_samples(up, &s.bare_released) < 0 ||
      send_samples(up, &s.bare_acquired) < 0;
  redisFree(r);
  redisFree(b.sub);
  dlock_free(l);
  dlock_client_close(c);
  exit(bad ? 1 : 0);
}

static void usage(void) {
  fprintf(stderr, "usage: bench_handoff [--url URL] [--seconds S] [--fair]\n"
                  "         [--name NAME] [--dist PREFIX]\n");
  exit(2);
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--fair") == 0)
      fair = 1;
    else if (v == NULL)
      usage();
    else if (strcmp(a, "--url") == 0)
      url = v, i++;
    else if (strcmp(a, "--seconds") == 0)
      seconds = atof(v), i++;
    else if (strcmp(a, "--name") == 0)
      name = v, i++;
    else if (strcmp(a, "--dist") == 0)
      dist = v, i++;
    else
      usage();
  }
  if (!(seconds > 0))
    usage();
  signal(SIGPIPE, SIG_IGN);
  /* ab: A to B, ba: B to A; up/down: each side to and from the parent. */
  int ab[2], ba[2], up[2][2], down[2][2];
  pid_t pid[2];
  if (pipe(ab) < 0 || pipe(ba) < 0 || pipe(up[0]) < 0 || pipe(up[1]) < 0 ||
      pipe(down[0]) < 0 || pipe(down[1]) < 0)
    bench_fail("pipe failed");
  for (int k = 0; k < 2; k++) {
    fflush(NULL);
    if ((pid[k] = fork()) < 0)
      bench_fail("fork failed");
    if (pid[k] == 0) {
      /* Keep only this side's ends open, so that a side that dies is seen
       * as end-of-file by the other and by the parent, not waited for. */
      int keep[4] = {k == 0 ? ba[0] : ab[0], k == 0 ? ab[1] : ba[1], up[k][1],
                     down[k][0]};
      int all[12] = {ab[0],      ab[1],      ba[0],      ba[1],
                     up[0][0],   up[0][1],   up[1][0],   up[1][1],
                     down[0][0], down[0][1], down[1][0], down[1][1]};
      for (int i = 0; i < 12; i++)
        if (all[i] != keep[0] && all[i] != keep[1] && all[i] != keep[2] &&
            all[i] != keep[3])
          close(all[i]);
      run_side(k == 0, keep[0], keep[1], keep[2], keep[3]);
    }
  }
  close(ab[0]);
  close(ab[1]);
  close(ba[0]);
  close(ba[1]);
  for (int k = 0; k < 2; k++)
    close(up[k][1]), close(down[k][0]);
  int failed = 0;
  char byte;
  /* B must be ready before A starts: A's first 'w' would otherwise wait in
   * the pipe while B is still connecting, and count in the first hand-off. */
  for (int k = 0; k < 2; k++)
    if (bench_read_all(up[k][0], &byte, 1) < 0)
      failed = 1;
  for (int k = 0; k < 2; k++)
    if (bench_write_all(down[k][1], "g", 1) < 0)
      failed = 1;
  side_t s[2];
  memset(s, 0, sizeof s);
  for (int k = 0; k < 2; k++)
    if (bench_read_all(up[k][0], &s[k].errors, sizeof s[k].errors) < 0 ||
        recv_samples(up[k][0], &s[k].released) < 0 ||
        recv_samples(up[k][0], &s[k].acquired) < 0 ||
        recv_samples(up[k][0], &s[k].ping) < 0 ||
        recv_samples(up[k][0], &s[k].bare_released) < 0 ||
        recv_samples(up[k][0], &s[k].bare_acquired) < 0)
      failed = 1;
  for (int k = 0; k < 2; k++) {
    int status;
    if (waitpid(pid[k], &status, 0) < 0 || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0)
      failed = 1;
  }
  /* A's k-th release is handed to B's k-th acquisition, and B's k-th
   * release to A's k-th acquisition. */
  bench_samples_t h = {0, 0, 0}, ping = {0, 0, 0}, bare = {0, 0, 0};
  for (int k = 0; k < 2; k++) {
    const side_t *from = &s[k], *to = &s[1 - k];
    for (size_t i = 0; i < from->released.n && i < to->acquired.n; i++)
      if (to->acquired.v[i] > from->released.v[i])
        bench_samples_add(&h, to->acquired.v[i] - from->released.v[i]);
    for (size_t i = 0; i < from->bare_released.n && i < to->bare_acquired.n;
         i++)
      if (to->bare_acquired.v[i] > from->bare_released.v[i])
        bench_samples_add(&bare,
                          to->bare_acquired.v[i] - from->bare_released.v[i]);
    for (size_t i = 0; i < from->ping.n; i++)
      bench_samples_add(&ping, from->ping.v[i]);
  }
  bench_samples_sort(&h);
  bench_samples_sort(&ping);
  bench_samples_sort(&bare);
  if (dist != NULL) {
    char path[4096];
    snprintf(path, sizeof path, "%s.handoff", dist);
    bench_write_dist(&h, path);
  }
  uint64_t errors = s[0].errors + s[1].errors;
  printf("handoffs=%zu p50=%.1f p99=%.1f ping_p50=%.1f ping_p99=%.1f "
         "bare_p50=%.1f bare_p99=%.1f errors=%" PRIu64 "\n",
         h.n, bench_quantile(&h, 0.5), bench_quantile(&h, 0.99),
         bench_quantile(&ping, 0.5), bench_quantile(&ping, 0.99),
         bench_quantile(&bare, 0.5), bench_quantile(&bare, 0.99), errors);
  for (int k = 0; k < 2; k++) {
    free(s[k].released.v);
    free(s[k].acquired.v);
    free(s[k].ping.v);
    free(s[k].bare_released.v);
    free(s[k].bare_acquired.v);
  }
  free(h.v);
  free(ping.v);
  free(bare.v);
  return failed || errors || h.n == 0 ? 1 : 0;
}
