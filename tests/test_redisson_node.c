/*
 * Interoperability with a real Redisson-compatible peer: node-redisson
 * (npm, a port of Redisson's RLock that shares its layout), pinned in
 * tests/node/package-lock.json and installed into the build tree by the
 * ctest setup test redisson_node_setup (tests/node/setup.sh), which every
 * test here requires. The peer runs as a node process driven over a pipe
 * (tests/node/peer.js) and reports when things happened on CLOCK_MONOTONIC,
 * the clock of these tests.
 *
 * node-redisson has bugs of its own, which the tests keep clear of rather
 * than take for dlock's: it adds braces to names that contain '{' unless
 * the name starts with one (Redisson: only when there is none), so the
 * names here have no braces; it subscribes only after a failed attempt, so
 * an unlock in between is missed and it waits for the lock's TTL, so the
 * tests wait until it listens before unlocking; its tryLock(wait) gives up
 * after one TTL-bounded wait, so waits here are lock(); and its unlock
 * latch lives 10 ms, which no test relies on. On a cluster (the tests at
 * the end) its unlock messages are always classic pub/sub.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../src/proto/slot.h"
#include "harness/cluster_group.h"
#include "loop_util.h"

#ifndef DLOCK_NODE_PEER
#error "DLOCK_NODE_PEER (tests/node/peer.js) must be defined by the build"
#endif

/* ---- the node peer ------------------------------------------------------- */

typedef struct peer {
  pid_t pid;
  int in, out; /* its stdin (we write), its stdout (we read) */
  char buf[8192];
  size_t len;
} peer_t;

/* A peer on 'url': redis://host:port, or redis-cluster://host:port,... */
static peer_t *peer_start_url(const char *url) {
  peer_t *p = calloc(1, sizeof(*p));
  ASSERT_NOT_NULL(p);
  int to[2], from[2];
  ASSERT_EQ(pipe(to), 0);
  ASSERT_EQ(pipe(from), 0);
  p->pid = fork();
  ASSERT_GE(p->pid, 0);
  if (p->pid == 0) {
    dup2(to[0], 0);
    dup2(from[1], 1);
    close(to[0]);
    close(to[1]);
    close(from[0]);
    close(from[1]);
    setenv("NODE_PATH", DLOCK_NODE_MODULES, 1);
    execlp("node", "node", DLOCK_NODE_PEER, url, (char *)NULL);
    fprintf(stderr, "cannot run node: %s\n", strerror(errno));
    _exit(127);
  }
  close(to[0]);
  close(from[1]);
  p->in = to[1];
  p->out = from[0];
  return p;
}

static peer_t *peer_start(const rp_server_t *s) {
  ASSERT(rp_port(s) > 0);
  char url[64];
  snprintf(url, sizeof(url), "redis://127.0.0.1:%d", rp_port(s));
  return peer_start_url(url);
}

/* Reads the next line the peer prints, waiting up to 'timeout_ms'. */
static void peer_line(peer_t *p, char *line, size_t n, int64_t timeout_ms) {
  int64_t end = lu_now_ms() + timeout_ms;
  for (;;) {
    char *nl = memchr(p->buf, '\n', p->len);
    if (nl != NULL) {
      size_t k = (size_t)(nl - p->buf);
      snprintf(line, n, "%.*s", (int)k, p->buf);
      memmove(p->buf, nl + 1, p->len - k - 1);
      p->len -= k + 1;
      if (strncmp(line, "error", 5) == 0)
        TEST_FAIL("node-redisson peer: %s", line);
      return;
    }
    int64_t left = end - lu_now_ms();
    if (left <= 0)
      TEST_FAIL("node-redisson peer said nothing within %" PRId64 " ms",
                timeout_ms);
    struct pollfd pf = {p->out, POLLIN, 0};
    int r = poll(&pf, 1, (int)left);
    if (r < 0 && errno == EINTR)
      continue;
    ASSERT_GE(r, 0);
    if (r == 0)
      continue;
    ssize_t got = read(p->out, p->buf + p->len, sizeof(p->buf) - 1 - p->len);
    if (got <= 0)
      TEST_FAIL("the node-redisson peer ended (is it installed? see "
                "tests/node/setup.sh)");
    p->len += (size_t)got;
  }
}

static void peer_say(peer_t *p, const char *fmt, ...) {
  char cmd[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(cmd, sizeof(cmd) - 1, fmt, ap);
  va_end(ap);
  ASSERT(n > 0 && (size_t)n < sizeof(cmd) - 1);
  cmd[n++] = '\n';
  ASSERT_EQ(write(p->in, cmd, (size_t)n), n);
}

/* Expects a line starting with 'word NAME' and returns the time at its
 * end (ms, CLOCK_MONOTONIC), or the rest in 'rest'. */
static double peer_expect(peer_t *p, const char *word, const char *name,
                          char *rest, size_t rest_n, int64_t timeout_ms) {
  char line[1024], want[512];
  peer_line(p, line, sizeof(line), timeout_ms);
  snprintf(want, sizeof(want), "%s %s ", word, name);
  if (strncmp(line, want, strlen(want)) != 0)
    TEST_FAIL("node-redisson peer said \"%s\", expected \"%s...\"", line, want);
  const char *tail = line + strlen(want);
  if (rest != NULL)
    snprintf(rest, rest_n, "%s", tail);
  const char *sp = strrchr(tail, ' ');
  return strtod(sp ? sp + 1 : tail, NULL);
}

static peer_t *peer_ready_started(peer_t *p) {
  char line[256];
  /* The first start of node can be slow on a loaded machine. */
  peer_line(p, line, sizeof(line), 30000);
  ASSERT_STR_EQ(line, "ready");
  return p;
}

static peer_t *peer_ready(const rp_server_t *s) {
  return peer_ready_started(peer_start(s));
}

static void peer_kill(peer_t *p) {
  kill(p->pid, SIGKILL);
  waitpid(p->pid, NULL, 0);
  close(p->in);
  close(p->out);
  free(p);
}

static void peer_quit(peer_t *p) {
  peer_say(p, "quit");
  int st = 0;
  ASSERT_EQ(waitpid(p->pid, &st, 0), p->pid);
  close(p->in);
  close(p->out);
  free(p);
}

static double now_ms(void) { return lu_now_ms_f(); }

/* Waits until 'n' clients listen on the lock's unlock channel:
 * node-redisson subscribes only after its failed attempt. (A dlock client
 * stays subscribed for a moment after its last waiter left: wait for
 * nobody first, with 'n' 0, to count node-redisson alone.) */
static void wait_listening(rp_server_t *s, const char *name, int64_t n) {
  char ch[256];
  size_t len = lu_channel(ch, sizeof(ch), name, strlen(name));
  int64_t t0 = lu_now_ms();
  while (lu_numsub(s, ch, len) != n && lu_now_ms() - t0 < 10000)
    lu_sleep_ms(2);
  ASSERT_EQ(lu_numsub(s, ch, len), n);
}

/* Runs the dlock command with 'args' and returns its output (static). */
static const char *cli(rp_server_t *s, const char *args) {
  static char out[8192];
  char cmd[1024];
  snprintf(cmd, sizeof(cmd), "%s --url %s %s", DLOCK_CLI_PATH, rp_url(s), args);
  FILE *f = popen(cmd, "r");
  ASSERT_NOT_NULL(f);
  size_t n = fread(out, 1, sizeof(out) - 1, f);
  out[n] = '\0';
  int st = pclose(f);
  ASSERT(WIFEXITED(st));
  ASSERT_EQ(WEXITSTATUS(st), 0);
  return out;
}

static dlock_client_t *client(rp_server_t *s) {
  dlock_options_t o;
  lu_options(&o, s);
  o.watchdog_timeout_ms = 30000;
  return lu_client_opts(&o);
}

/* ---- tests ----------------------------------------------------------------
 */

/* Either side holding the lock keeps the other out. */
TEST(exclusion_both_ways) {
  rp_server_t *s = lu_server(0);
  peer_t *p = peer_ready(s);
  dlock_client_t *c = client(s);
  dlock_t *l = lu_get(c, "node-ex");

  peer_say(p, "lock node-ex");
  peer_expect(p, "locked", "node-ex", NULL, 0, 10000);
  ASSERT_DLOCK_ERR(dlock_trylock(l, 0, DLOCK_WATCHDOG), DLOCK_ETIMEDOUT);
  ASSERT_DLOCK_ERR(dlock_trylock(l, 200, DLOCK_WATCHDOG), DLOCK_ETIMEDOUT);
  peer_say(p, "unlock node-ex");
  peer_expect(p, "unlocked", "node-ex", NULL, 0, 10000);

  ASSERT_DLOCK_OK(dlock_trylock(l, 0, DLOCK_WATCHDOG));
  char rest[64];
  peer_say(p, "trylock node-ex 0");
  peer_expect(p, "trylock", "node-ex", rest, sizeof(rest), 10000);
  ASSERT(strncmp(rest, "false", 5) == 0);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  peer_say(p, "trylock node-ex 0");
  peer_expect(p, "trylock", "node-ex", rest, sizeof(rest), 10000);
  ASSERT(strncmp(rest, "true", 4) == 0);
  peer_say(p, "unlock node-ex");
  peer_expect(p, "unlocked", "node-ex", NULL, 0, 10000);
  ASSERT_EQ(lu_exists(s, "node-ex"), 0);

  peer_quit(p);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/* A dlock waiter in a thread, for the main thread's owner: the main thread
 * unlocks what it gets. */
typedef struct waiter {
  dlock_t *l;
  int rc;
  double at;
  uint64_t owner;
} waiter_t;

static void *dlock_waiter(void *arg) {
  waiter_t *w = arg;
  w->rc = dlock_lock_as(w->l, w->owner, DLOCK_WATCHDOG);
  w->at = now_ms();
  return NULL;
}

/* An unlock on either side wakes a waiter on the other at once (pub/sub),
 * not at the end of the holder's 20 s lease. */
TEST(wake_ups_both_ways) {
  rp_server_t *s = lu_server(0);
  peer_t *p = peer_ready(s);
  dlock_client_t *c = client(s);
  dlock_t *l = lu_get(c, "node-wake");
  double dlock_wake[3], node_wake[3];

  for (int round = 0; round < 3; round++) {
    /* node holds, dlock waits. */
    peer_say(p, "lock node-wake 20000");
    peer_expect(p, "locked", "node-wake", NULL, 0, 10000);
    waiter_t w = {l, -1, 0, dlock_self()};
    pthread_t t;
    ASSERT_EQ(pthread_create(&t, NULL, dlock_waiter, &w), 0);
    /* dlock's waiter listens before it sleeps (its client may also still
     * listen from the last round). */
    char ch[256];
    size_t chlen = lu_channel(ch, sizeof(ch), "node-wake", 9);
    for (int i = 0; i < 500 && lu_numsub(s, ch, chlen) < 1; i++)
      lu_sleep_ms(2);
    lu_sleep_ms(50);
    peer_say(p, "unlock node-wake");
    char times[128];
    peer_expect(p, "unlocked", "node-wake", times, sizeof(times), 10000);
    double unlocked = strtod(times, NULL); /* when node sent it */
    ASSERT_EQ(pthread_join(t, NULL), 0);
    ASSERT_DLOCK_OK(w.rc);
    dlock_wake[round] = w.at - unlocked;

    /* dlock holds (it does now), node waits. */
    wait_listening(s, "node-wake", 0);
    peer_say(p, "lock node-wake 20000");
    wait_listening(s, "node-wake", 1);
    lu_sleep_ms(50);
    double released = now_ms();
    ASSERT_DLOCK_OK(dlock_unlock(l));
    double got = peer_expect(p, "locked", "node-wake", NULL, 0, 30000);
    node_wake[round] = got - released;
    peer_say(p, "unlock node-wake");
    peer_expect(p, "unlocked", "node-wake", NULL, 0, 10000);
  }
  printf("dlock woken by node-redisson's unlock after %.2f, %.2f, %.2f ms; "
         "node-redisson woken by dlock's after %.2f, %.2f, %.2f ms\n",
         dlock_wake[0], dlock_wake[1], dlock_wake[2], node_wake[0],
         node_wake[1], node_wake[2]);
  for (int i = 0; i < 3; i++) {
    /* A few ms when the message works; a missed one costs the 20 s lease.
     * Generous for a loaded machine. */
    ASSERT_LT(dlock_wake[i], 2000);
    ASSERT_LT(node_wake[i], 2000);
  }
  peer_quit(p);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/* The same with dlock's event-loop API: an async waiter is woken by
 * node-redisson's unlock message, and node-redisson's waiter by the async
 * client's unlock, each long before the holder's 20 s lease would end. */
TEST(async_wake_ups_both_ways) {
  rp_server_t *s = lu_server(0);
  peer_t *p = peer_ready(s);
  dlock_options_t o;
  lu_options(&o, s);
  dlock_client_t *c = tl_client_opts(&o);
  tl_loop t;
  tl_init(&t, c);
  dlock_t *l = lu_get(c, "node-async");
  uint64_t owner = dlock_owner_new();
  char ch[256];
  size_t chlen = lu_channel(ch, sizeof(ch), "node-async", 10);

  /* node holds, the async client waits. */
  peer_say(p, "lock node-async 20000");
  peer_expect(p, "locked", "node-async", NULL, 0, 10000);
  tl_done got = {0};
  ASSERT_DLOCK_OK(
      dlock_trylock_async(l, owner, 60000, 30000, tl_done_cb, &got));
  int64_t until = lu_now_ms() + 10000;
  while (lu_numsub(s, ch, chlen) < 1) {
    ASSERT_LT(lu_now_ms(), until);
    tl_turn(&t, 10);
  }
  tl_run_for(&t, 50);
  ASSERT_EQ(got.calls, 0);
  peer_say(p, "unlock node-async");
  char times[128];
  peer_expect(p, "unlocked", "node-async", times, sizeof(times), 10000);
  double unlocked = strtod(times, NULL);
  tl_run_until(&t, &got.calls, 30000);
  ASSERT_DLOCK_OK(got.status);
  double async_wake = (double)got.at_ms - unlocked;

  /* The async client holds, node waits. */
  peer_say(p, "lock node-async 20000");
  until = lu_now_ms() + 10000;
  while (lu_numsub(s, ch, chlen) < 1) {
    ASSERT_LT(lu_now_ms(), until);
    tl_turn(&t, 10);
  }
  tl_run_for(&t, 50);
  tl_done freed = {0};
  double released = now_ms();
  ASSERT_DLOCK_OK(dlock_unlock_async(l, owner, tl_done_cb, &freed));
  tl_run_until(&t, &freed.calls, 30000);
  ASSERT_DLOCK_OK(freed.status);
  double node_got = peer_expect(p, "locked", "node-async", NULL, 0, 30000);
  printf("async dlock woken by node-redisson's unlock after %.2f ms; "
         "node-redisson woken by the async unlock after %.2f ms\n",
         async_wake, node_got - released);
  /* A few ms when the message works; a missed one costs the 20 s lease. */
  ASSERT_LT(async_wake, 10000);
  ASSERT_LT(node_got - released, 10000);
  peer_say(p, "unlock node-async");
  peer_expect(p, "unlocked", "node-async", NULL, 0, 10000);
  ASSERT_EQ(lu_exists(s, "node-async"), 0);
  peer_quit(p);
  dlock_free(l);
  dlock_client_close(c);
  tl_close(&t);
  rp_free(s);
}

/* node-redisson's reentrant holds, as `dlock status` shows them. */
TEST(reentrancy_counts_in_dlock_status) {
  rp_server_t *s = lu_server(0);
  peer_t *p = peer_ready(s);
  char field[256], want[512];
  peer_say(p, "field node-re");
  peer_expect(p, "field", "node-re", field, sizeof(field), 10000);
  for (int i = 1; i <= 3; i++) {
    peer_say(p, "lock node-re");
    peer_expect(p, "locked", "node-re", NULL, 0, 10000);
    const char *out = cli(s, "status --json node-re");
    snprintf(want, sizeof(want),
             "\"holders\":[{\"owner\":\"%s\",\"count\":%d}]", field, i);
    if (strstr(out, want) == NULL)
      TEST_FAIL("dlock status: %s, expected %s", out, want);
  }
  printf("dlock status after three locks by node-redisson: %s",
         cli(s, "status node-re"));
  for (int i = 0; i < 3; i++) {
    peer_say(p, "unlock node-re");
    peer_expect(p, "unlocked", "node-re", NULL, 0, 10000);
  }
  ASSERT_NOT_NULL(strstr(cli(s, "status --json node-re"), "\"locked\":false"));
  peer_quit(p);
  rp_free(s);
}

/* `dlock unlock --force` on a lock node-redisson waits for wakes it. */
TEST(force_unlock_wakes_node_waiter) {
  rp_server_t *s = lu_server(0);
  peer_t *p = peer_ready(s);
  dlock_client_t *c = client(s);
  dlock_t *l = lu_get(c, "node-force");
  ASSERT_DLOCK_OK(dlock_lock(l, 30000));
  peer_say(p, "lock node-force 20000");
  wait_listening(s, "node-force", 1);
  lu_sleep_ms(50);
  double t0 = now_ms();
  cli(s, "unlock --force node-force");
  double got = peer_expect(p, "locked", "node-force", NULL, 0, 30000);
  printf("node-redisson waiter got the lock %.2f ms after dlock unlock "
         "--force (lease left: 30 s)\n",
         got - t0);
  ASSERT_LT(got - t0, 3000);
  peer_say(p, "unlock node-force");
  peer_expect(p, "unlocked", "node-force", NULL, 0, 10000);
  /* dlock's own hold was taken away: its unlock says so. */
  ASSERT_DLOCK_ERR(dlock_unlock(l), DLOCK_ELOST);
  peer_quit(p);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/* A node-redisson holder killed while holding: dlock gets the lock when
 * its lease ends, not before and not never. */
TEST(dead_node_holder_lease) {
  rp_server_t *s = lu_server(0);
  peer_t *p = peer_ready(s);
  dlock_client_t *c = client(s);
  dlock_t *l = lu_get(c, "node-dead");
  peer_say(p, "lock node-dead 1500");
  double locked = peer_expect(p, "locked", "node-dead", NULL, 0, 10000);
  peer_kill(p);
  ASSERT_DLOCK_OK(dlock_trylock(l, 10000, DLOCK_WATCHDOG));
  double got = now_ms() - locked;
  printf("dlock got the lock %.0f ms after the killed holder took it with "
         "a 1500 ms lease\n",
         got);
  ASSERT_GE(got, 1300);
  ASSERT_LT(got, 6000);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/* The same with node-redisson's watchdog (30 s, renewed every 10 s): a
 * dlock waiter is woken by its unlock, and dlock's hold is renewed past
 * node-redisson's own lease setting. */
TEST(watchdog_holders_take_turns) {
  rp_server_t *s = lu_server(0);
  peer_t *p = peer_ready(s);
  dlock_client_t *c = client(s);
  dlock_t *l = lu_get(c, "node-wd");
  for (int i = 0; i < 5; i++) {
    peer_say(p, "lock node-wd");
    peer_expect(p, "locked", "node-wd", NULL, 0, 10000);
    ASSERT_DLOCK_ERR(dlock_trylock(l, 0, DLOCK_WATCHDOG), DLOCK_ETIMEDOUT);
    waiter_t w = {l, -1, 0, dlock_self()};
    pthread_t t;
    ASSERT_EQ(pthread_create(&t, NULL, dlock_waiter, &w), 0);
    lu_sleep_ms(100);
    peer_say(p, "unlock node-wd");
    peer_expect(p, "unlocked", "node-wd", NULL, 0, 10000);
    ASSERT_EQ(pthread_join(t, NULL), 0);
    ASSERT_DLOCK_OK(w.rc);
    char rest[64];
    peer_say(p, "trylock node-wd 0");
    peer_expect(p, "trylock", "node-wd", rest, sizeof(rest), 10000);
    ASSERT(strncmp(rest, "false", 5) == 0);
    ASSERT_DLOCK_OK(dlock_unlock(l));
  }
  peer_quit(p);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/* ---- on a Redis Cluster ---------------------------------------------------
 *
 * node-redisson runs on a cluster: given seed nodes ({ redis: { clusters }
 * }) it makes ioredis Cluster connections, which send each lock's scripts
 * to the master of its slot. Its unlock messages are classic whatever the
 * cluster runs: its scripts PUBLISH and it listens with SUBSCRIBE, on one
 * node of ioredis's choosing (a cluster carries a classic message to every
 * node). Redisson, and dlock, use sharded pub/sub where the cluster has it
 * (Redis 7): there node-redisson and they do not hear each other's unlock
 * messages. (node-redisson's other event mode, eventAdapter "streams",
 * has its unlock script XADD to one stream, redisson:events, a key it does
 * not declare: not Redisson's layout, and on a cluster the release of a
 * lock on another master than that key's fails with "Script attempted to
 * access a non local key". It is not tested.)
 */

static cg_group_t *cluster_start(const char *conf) {
  cg_group_t *g = NULL;
  ASSERT_EQ(cg_start_conf(conf, &g), 0);
  return g;
}

/* A client of the cluster, its URL followed by 'query' ("" for none). */
static dlock_client_t *cluster_client(cg_group_t *g, const char *query) {
  char url[256];
  snprintf(url, sizeof(url), "%s%s", cg_url(g), query);
  dlock_options_t o;
  dlock_options_init(&o);
  o.url = url;
  o.connect_timeout_ms = 2000;
  o.command_timeout_ms = 5000;
  o.watchdog_timeout_ms = 30000;
  return lu_client_opts(&o);
}

/* One name without braces on each of the 3 masters ("<prefix>N"), and the
 * node that serves it. */
static void names_on_masters(cg_group_t *g, const char *prefix,
                             char names[3][32], int owner[3]) {
  int masters[6];
  ASSERT_EQ(cg_masters(g, masters), 3);
  int n = 0, taken[6] = {0};
  for (int i = 0; n < 3 && i < 10000; i++) {
    char name[32];
    snprintf(name, sizeof(name), "%s%d", prefix, i);
    int m = cg_master_of_slot(g, 0, dlock__key_slot(name, strlen(name)));
    ASSERT_GE(m, 0);
    if (taken[m])
      continue;
    taken[m] = 1;
    snprintf(names[n], 32, "%s", name);
    owner[n++] = m;
  }
  ASSERT_EQ(n, 3);
}

/* Classic subscribers of the unlock channel of 'name', over every node. */
static int64_t cluster_numsub(cg_group_t *g, const char *name) {
  char ch[256];
  size_t len = lu_channel(ch, sizeof(ch), name, strlen(name));
  int64_t n = 0;
  for (int k = 0; k < cg_nnodes(g); k++)
    if (rp_pid(cg_node(g, k)) > 0)
      n += lu_numsub(cg_node(g, k), ch, len);
  return n;
}

/* Sharded subscribers of the unlock channel of 'name' on node 'i'. */
static int64_t shard_numsub(cg_group_t *g, int i, const char *name) {
  char ch[256];
  size_t len = lu_channel(ch, sizeof(ch), name, strlen(name));
  redisReply *r = rp_cmd(cg_node(g, i), "PUBSUB SHARDNUMSUB %b", ch, len);
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->type, REDIS_REPLY_ARRAY);
  ASSERT_EQ(r->elements, 2);
  int64_t n = (int64_t)r->element[1]->integer;
  freeReplyObject(r);
  return n;
}

/* Waits (up to 10 s) until 'count' returns at least 'min' (exactly 0 when
 * 'min' is 0). */
#define AWAIT_COUNT(count, min)                                                \
  do {                                                                         \
    int64_t until_ = lu_now_ms() + 10000;                                      \
    while (((min) == 0 ? (count) != 0 : (count) < (min)) &&                    \
           lu_now_ms() < until_)                                               \
      lu_sleep_ms(5);                                                          \
    if ((min) == 0)                                                            \
      ASSERT_EQ((count), 0);                                                   \
    else                                                                       \
      ASSERT_GE((count), (min));                                               \
  } while (0)

/* Both directions on one name: node-redisson holds (with 'lease' ms) and a
 * dlock waiter waits, then dlock holds and node-redisson waits; each side
 * refuses the other's hold. 'dlock_listens' returns once dlock's waiter
 * listens where it does; the times from each release to the other side's
 * acquisition go in 'dlock_wake' and 'node_wake'. */
static void take_turns(cg_group_t *g, peer_t *p, dlock_t *l, const char *name,
                       int lease, int dlock_lease,
                       int64_t (*dlock_listens)(cg_group_t *, int,
                                                const char *),
                       int owner, double *dlock_wake, double *node_wake) {
  char rest[64];
  peer_say(p, "lock %s %d", name, lease);
  peer_expect(p, "locked", name, NULL, 0, 10000);
  ASSERT_DLOCK_ERR(dlock_trylock(l, 0, DLOCK_WATCHDOG), DLOCK_ETIMEDOUT);
  waiter_t w = {l, -1, 0, dlock_self()};
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, dlock_waiter, &w), 0);
  AWAIT_COUNT(dlock_listens(g, owner, name), 1);
  lu_sleep_ms(50);
  peer_say(p, "unlock %s", name);
  char times[128];
  peer_expect(p, "unlocked", name, times, sizeof(times), 10000);
  double unlocked = strtod(times, NULL);
  ASSERT_EQ(pthread_join(t, NULL), 0);
  ASSERT_DLOCK_OK(w.rc);
  *dlock_wake = w.at - unlocked;

  /* dlock holds (it does now, for its watchdog or for 'dlock_lease'). */
  peer_say(p, "trylock %s 0", name);
  peer_expect(p, "trylock", name, rest, sizeof(rest), 10000);
  ASSERT(strncmp(rest, "false", 5) == 0);
  if (dlock_lease > 0) {
    ASSERT_DLOCK_OK(dlock_unlock(l));
    ASSERT_DLOCK_OK(dlock_lock(l, dlock_lease));
  }
  /* A dlock client stays subscribed a moment after its last waiter left:
   * nobody first, then node-redisson alone. */
  AWAIT_COUNT(cluster_numsub(g, name), 0);
  peer_say(p, "lock %s %d", name, lease);
  AWAIT_COUNT(cluster_numsub(g, name), 1);
  lu_sleep_ms(50);
  double released = now_ms();
  ASSERT_DLOCK_OK(dlock_unlock(l));
  double got = peer_expect(p, "locked", name, NULL, 0, 30000);
  *node_wake = got - released;
  ASSERT_DLOCK_ERR(dlock_trylock(l, 0, DLOCK_WATCHDOG), DLOCK_ETIMEDOUT);
  peer_say(p, "unlock %s", name);
  peer_expect(p, "unlocked", name, NULL, 0, 10000);
}

static int64_t classic_listens(cg_group_t *g, int owner, const char *name) {
  (void)owner;
  return cluster_numsub(g, name);
}

/* On a cluster started with 'conf' and a dlock client whose URL ends in
 * 'query': on a name on every master, dlock and node-redisson keep each
 * other out and wake each other at once through classic pub/sub (a few
 * ms; a missed message would cost the 20 s lease: generous for a loaded
 * machine). */
static void classic_wake_ups_both_ways(const char *conf, const char *query,
                                       const char *prefix) {
  cg_group_t *g = cluster_start(conf);
  peer_t *p = peer_ready_started(peer_start_url(cg_url(g)));
  dlock_client_t *c = cluster_client(g, query);
  char names[3][32];
  int owner[3];
  names_on_masters(g, prefix, names, owner);
  for (int k = 0; k < 3; k++) {
    dlock_t *l = lu_get(c, names[k]);
    double dlock_wake, node_wake;
    take_turns(g, p, l, names[k], 20000, 0, classic_listens, owner[k],
               &dlock_wake, &node_wake);
    printf("%s (node %d)%s: dlock woken by node-redisson's unlock after %.2f "
           "ms, node-redisson by dlock's after %.2f ms\n",
           names[k], owner[k], query, dlock_wake, node_wake);
    ASSERT_LT(dlock_wake, 2000);
    ASSERT_LT(node_wake, 2000);
    dlock_free(l);
  }
  peer_quit(p);
  dlock_client_close(c);
  cg_free(g);
}

/* On a cluster without sharded pub/sub, dlock falls back to classic pub/sub
 * as node-redisson always uses: on a name on every master, either side's
 * hold keeps the other out, and either side's unlock wakes a waiter on the
 * other at once (not at the end of the 20 s lease). */
TEST(cluster_classic_wake_ups_both_ways) {
  classic_wake_ups_both_ways(CG_NO_SHARDED_PUBSUB, "", "node-cl");
}

static int64_t sharded_listens(cg_group_t *g, int owner, const char *name) {
  return shard_numsub(g, owner, name);
}

/* Either side's hold keeps the other out, on 'name'. */
static void exclude_both_ways(peer_t *p, dlock_t *l, const char *name) {
  char rest[64];
  peer_say(p, "lock %s 30000", name);
  peer_expect(p, "locked", name, NULL, 0, 10000);
  ASSERT_DLOCK_ERR(dlock_trylock(l, 0, DLOCK_WATCHDOG), DLOCK_ETIMEDOUT);
  peer_say(p, "unlock %s", name);
  peer_expect(p, "unlocked", name, NULL, 0, 10000);
  ASSERT_DLOCK_OK(dlock_trylock(l, 0, DLOCK_WATCHDOG));
  peer_say(p, "trylock %s 0", name);
  peer_expect(p, "trylock", name, rest, sizeof(rest), 10000);
  ASSERT(strncmp(rest, "false", 5) == 0);
  ASSERT_DLOCK_OK(dlock_unlock(l));
}

/* On a Redis 7 cluster dlock uses sharded pub/sub, as Redisson does, and
 * node-redisson classic: exclusion holds both ways on a name on every
 * master, but neither side hears the other's unlock message, so a waiter
 * gets the lock only when the lease it saw runs out (5 s here), which this
 * test shows rather than hides (the next test shows the way out). */
TEST(cluster_sharded_exclusion_lease_bound_wake_ups) {
  cg_group_t *g = cluster_start(NULL);
  peer_t *p = peer_ready_started(peer_start_url(cg_url(g)));
  dlock_client_t *c = cluster_client(g, "");
  char names[3][32];
  int owner[3];
  names_on_masters(g, "node-sh", names, owner);
  for (int k = 0; k < 3; k++) {
    dlock_t *l = lu_get(c, names[k]);
    exclude_both_ways(p, l, names[k]);
    dlock_free(l);
  }
  dlock_t *l = lu_get(c, names[0]);
  double dlock_wake, node_wake;
  take_turns(g, p, l, names[0], 5000, 5000, sharded_listens, owner[0],
             &dlock_wake, &node_wake);
  printf("%s (node %d): dlock got the lock %.0f ms after node-redisson's "
         "unlock, node-redisson %.0f ms after dlock's (5 s leases)\n",
         names[0], owner[0], dlock_wake, node_wake);
  ASSERT_LT(dlock_wake, 20000);
  ASSERT_LT(node_wake, 20000);
  dlock_free(l);
  peer_quit(p);
  dlock_client_close(c);
  cg_free(g);
}

/* On the same Redis 7 cluster, a dlock client whose URL says
 * sharded_pubsub=off uses classic pub/sub as node-redisson does: on a name
 * on every master they exclude each other and wake each other at once
 * (not at the end of the 20 s lease). */
TEST(cluster_sharded_pubsub_off_wakes_both_ways) {
  classic_wake_ups_both_ways(NULL, "?sharded_pubsub=off", "node-off");
}
