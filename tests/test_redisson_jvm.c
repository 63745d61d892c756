/*
 * Interoperability with Redisson itself (Java, the version pinned in
 * tests/java/pom.xml), built into the build tree by the ctest setup test
 * redisson_java_setup (tests/java/setup.sh), which every test here
 * requires. Each test starts one JVM running tests/java's Peer, driven over
 * a pipe: a command names an actor (a Java thread of its own, since
 * Redisson's locks belong to threads) and a tag its reply carries, so that
 * several Java threads can wait at once while the test goes on. Replies
 * say when things happened on CLOCK_MONOTONIC, the clock of these tests.
 *
 * Latencies are printed, not asserted: a missed wake-up would cost the
 * lease of tens of seconds, which the generous bounds here tell apart from
 * a slow machine.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../src/proto/slot.h"
#include "harness/cluster_group.h"
#include "harness/sentinel_group.h"
#include "lock_util.h"

#ifndef DLOCK_JAVA_DIR
#error "DLOCK_JAVA_DIR (the build tree's redisson-java) must be defined"
#endif

/* Generous: a missed message costs a 30 s lease or more. */
#define WAKE_LIMIT_MS 5000
#define REPLY_MS 20000

/* ---- the Java peer ------------------------------------------------------ */

#define PEER_STASH 32

typedef struct peer {
  pid_t pid;
  int in, out;
  char buf[16384];
  size_t len;
  int next_tag;
  int errors_ok; /* an "error" reply is what the test expects */
  /* Replies read while waiting for another tag: "TAG rest". */
  char *stash[PEER_STASH];
} peer_t;

/* The class path: the peer's classes and the jars setup.sh listed. */
static char *java_classpath(void) {
  char path[1024];
  snprintf(path, sizeof(path), "%s/classpath", DLOCK_JAVA_DIR);
  FILE *f = fopen(path, "r");
  if (f == NULL)
    TEST_FAIL("%s: %s (did redisson_java_setup run? see tests/java/setup.sh)",
              path, strerror(errno));
  static char jars[65536];
  size_t n = fread(jars, 1, sizeof(jars) - 1, f);
  fclose(f);
  jars[n] = '\0';
  while (n > 0 && (jars[n - 1] == '\n' || jars[n - 1] == '\r'))
    jars[--n] = '\0';
  char *cp = NULL;
  ASSERT(asprintf(&cp, "%s/target/classes:%s", DLOCK_JAVA_DIR, jars) > 0);
  return cp;
}

/* A peer on 'url' (redis://, sentinel://, cluster://; see Peer.java),
 * with Redisson's lockWatchdogTimeout 'watchdog_ms' (0: its 30 s). */
static peer_t *peer_start(const char *url, int watchdog_ms) {
  peer_t *p = calloc(1, sizeof(*p));
  ASSERT_NOT_NULL(p);
  char *cp = java_classpath();
  char wd[32];
  snprintf(wd, sizeof(wd), "%d", watchdog_ms);
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
    /* C1 alone starts faster, and these tests measure nothing of Java's
     * speed. */
    execlp("java", "java", "-XX:TieredStopAtLevel=1", "-Xss512k", "-Xmx256m",
           "-cp", cp, "dlock.peer.Peer", url, wd, (char *)NULL);
    fprintf(stderr, "cannot run java: %s\n", strerror(errno));
    _exit(127);
  }
  free(cp);
  close(to[0]);
  close(from[1]);
  p->in = to[1];
  p->out = from[0];
  return p;
}

/* Reads one line into 'line' if one comes within 'timeout_ms'; 0 if not. */
static int peer_read_line(peer_t *p, char *line, size_t n, int64_t timeout_ms) {
  int64_t end = lu_now_ms() + timeout_ms;
  for (;;) {
    char *nl = memchr(p->buf, '\n', p->len);
    if (nl != NULL) {
      size_t k = (size_t)(nl - p->buf);
      snprintf(line, n, "%.*s", (int)k, p->buf);
      memmove(p->buf, nl + 1, p->len - k - 1);
      p->len -= k + 1;
      return 1;
    }
    int64_t left = end - lu_now_ms();
    if (left < 0)
      return 0;
    struct pollfd pf = {p->out, POLLIN, 0};
    int r = poll(&pf, 1, (int)left);
    if (r < 0 && errno == EINTR)
      continue;
    ASSERT_GE(r, 0);
    if (r == 0)
      continue;
    ASSERT(p->len < sizeof(p->buf) - 1);
    ssize_t got = read(p->out, p->buf + p->len, sizeof(p->buf) - 1 - p->len);
    if (got <= 0)
      TEST_FAIL("the Redisson peer ended (see its stderr above)");
    p->len += (size_t)got;
  }
}

static peer_t *peer_ready(const char *url, int watchdog_ms) {
  peer_t *p = peer_start(url, watchdog_ms);
  char line[256];
  /* A JVM and Redisson's start can be slow on a loaded machine. */
  if (!peer_read_line(p, line, sizeof(line), 60000))
    TEST_FAIL("the Redisson peer did not start within 60 s");
  if (strncmp(line, "ready ", 6) != 0)
    TEST_FAIL("the Redisson peer said \"%s\", expected ready", line);
  return p;
}

static peer_t *peer_on(const rp_server_t *s, int watchdog_ms) {
  char url[64];
  snprintf(url, sizeof(url), "redis://127.0.0.1:%d", rp_port(s));
  return peer_ready(url, watchdog_ms);
}

/* Sends "TAG ACTOR CMD" and returns the tag. */
static int peer_send(peer_t *p, const char *actor, const char *fmt, ...) {
  char cmd[1024];
  int tag = ++p->next_tag;
  int n = snprintf(cmd, sizeof(cmd), "%d %s ", tag, actor);
  va_list ap;
  va_start(ap, fmt);
  n += vsnprintf(cmd + n, sizeof(cmd) - (size_t)n - 1, fmt, ap);
  va_end(ap);
  ASSERT(n > 0 && (size_t)n < sizeof(cmd) - 1);
  cmd[n++] = '\n';
  ASSERT_EQ(write(p->in, cmd, (size_t)n), n);
  return tag;
}

/* Sends a command that must wait (for a lock, permits, a latch), and
 * checks 300 ms later that it still does: Redisson has tried, subscribed
 * and gone to sleep by then. Returns the tag. */
static int peer_poll(peer_t *p, int tag, char *rest, size_t n,
                     int64_t timeout_ms);
static int peer_waiting(peer_t *p, const char *actor, const char *fmt, ...) {
  char cmd[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(cmd, sizeof(cmd), fmt, ap);
  va_end(ap);
  ASSERT(n > 0 && (size_t)n < sizeof(cmd));
  int tag = peer_send(p, actor, "%s", cmd);
  lu_sleep_ms(300);
  char rest[256];
  if (peer_poll(p, tag, rest, sizeof(rest), 0))
    TEST_FAIL("Redisson's \"%s\" did not wait: %s", cmd, rest);
  return tag;
}

/* The reply to 'tag' into 'rest' (its words, with the time last) if it
 * comes within 'timeout_ms': 1, else 0. Replies to other tags are kept. */
static int peer_poll(peer_t *p, int tag, char *rest, size_t n,
                     int64_t timeout_ms) {
  char want[16];
  int wl = snprintf(want, sizeof(want), "%d ", tag);
  for (int i = 0; i < PEER_STASH; i++)
    if (p->stash[i] != NULL && strncmp(p->stash[i], want, (size_t)wl) == 0) {
      snprintf(rest, n, "%s", p->stash[i] + wl);
      free(p->stash[i]);
      p->stash[i] = NULL;
      goto got;
    }
  int64_t end = lu_now_ms() + timeout_ms;
  for (;;) {
    char line[1024];
    if (!peer_read_line(p, line, sizeof(line), end - lu_now_ms()))
      return 0;
    if (strncmp(line, want, (size_t)wl) == 0) {
      snprintf(rest, n, "%s", line + wl);
      goto got;
    }
    int i = 0;
    while (i < PEER_STASH && p->stash[i] != NULL)
      i++;
    ASSERT(i < PEER_STASH);
    p->stash[i] = strdup(line);
  }
got:
  if (!p->errors_ok && strncmp(rest, "error", 5) == 0)
    TEST_FAIL("Redisson peer: %s", rest);
  return 1;
}

/* The reply to 'tag', which must come; returns its time (ms). */
static double peer_wait(peer_t *p, int tag, char *rest, size_t n) {
  char tmp[1024];
  if (rest == NULL) {
    rest = tmp;
    n = sizeof(tmp);
  }
  if (!peer_poll(p, tag, rest, n, REPLY_MS))
    TEST_FAIL("the Redisson peer did not answer command %d within %d ms", tag,
              REPLY_MS);
  const char *sp = strrchr(rest, ' ');
  return strtod(sp ? sp + 1 : rest, NULL);
}

/* The time in a reply "WORD SENT T": SENT. */
static double sent_at(const char *rest) {
  const char *sp = strchr(rest, ' ');
  ASSERT_NOT_NULL(sp);
  return strtod(sp + 1, NULL);
}

/* Runs a command whose reply is "WORD SENT T" (an unlock, a release, a
 * count-down) and returns SENT, when it was sent to Redis. */
static double peer_sent(peer_t *p, const char *actor, const char *fmt, ...) {
  char cmd[512], rest[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(cmd, sizeof(cmd), fmt, ap);
  va_end(ap);
  ASSERT(n > 0 && (size_t)n < sizeof(cmd));
  peer_wait(p, peer_send(p, actor, "%s", cmd), rest, sizeof(rest));
  return sent_at(rest);
}

/* Runs one command and checks that its reply starts with 'want'; returns
 * the reply's time. */
#define PEER_DO(p, want, actor, ...)                                           \
  peer_expect((p), (want), peer_send((p), (actor), __VA_ARGS__))

static double peer_expect(peer_t *p, const char *want, int tag) {
  char rest[1024];
  p->errors_ok = strcmp(want, "error") == 0;
  double t = peer_wait(p, tag, rest, sizeof(rest));
  p->errors_ok = 0;
  if (strncmp(rest, want, strlen(want)) != 0)
    TEST_FAIL("Redisson peer said \"%s\", expected \"%s...\"", rest, want);
  return t;
}

/* The second word of the reply to a command (a count, a token, an id). */
static void peer_word(peer_t *p, char *out, size_t n, const char *actor,
                      const char *fmt, const char *a, const char *b) {
  char rest[1024];
  peer_wait(p, peer_send(p, actor, fmt, a, b), rest, sizeof(rest));
  char *sp = strchr(rest, ' ');
  ASSERT_NOT_NULL(sp);
  char *end = strchr(sp + 1, ' ');
  ASSERT_NOT_NULL(end);
  snprintf(out, n, "%.*s", (int)(end - sp - 1), sp + 1);
}

static void peer_quit(peer_t *p) {
  ASSERT_EQ(write(p->in, "quit\n", 5), 5);
  int st = 0;
  /* Peer.java exits after shutting Redisson down (2 s at most); a peer
   * that does not is killed. */
  for (int i = 0; i < 500 && waitpid(p->pid, &st, WNOHANG) == 0; i++)
    lu_sleep_ms(20);
  if (waitpid(p->pid, &st, WNOHANG) == 0) {
    kill(p->pid, SIGKILL);
    waitpid(p->pid, &st, 0);
  }
  close(p->in);
  close(p->out);
  for (int i = 0; i < PEER_STASH; i++)
    free(p->stash[i]);
  free(p);
}

static double now_ms(void) { return lu_now_ms_f(); }

/* ---- dlock in threads --------------------------------------------------- */

/* A dlock waiter: takes 'l' as 'owner' in a thread, records when, and
 * unlocks when told (release = 1). */
typedef struct waiter {
  dlock_t *l;
  uint64_t owner;
  int64_t lease;
  pthread_t t;
  atomic_int done, release;
  int rc;
  double at;
} waiter_t;

static void *waiter_main(void *arg) {
  waiter_t *w = arg;
  w->rc = dlock_lock_as(w->l, w->owner, w->lease);
  w->at = now_ms();
  atomic_store(&w->done, 1);
  if (w->rc == 0) {
    while (!atomic_load(&w->release))
      lu_sleep_ms(1);
    w->rc = dlock_unlock_as(w->l, w->owner);
  }
  return NULL;
}

static void waiter_start(waiter_t *w, dlock_t *l, int64_t lease) {
  memset(w, 0, sizeof(*w));
  w->l = l;
  w->owner = dlock_owner_new();
  w->lease = lease;
  ASSERT_EQ(pthread_create(&w->t, NULL, waiter_main, w), 0);
}

/* Waits until the waiter has the lock (up to 'ms'); returns when. */
static double waiter_got(waiter_t *w, int64_t ms) {
  int64_t end = lu_now_ms() + ms;
  while (!atomic_load(&w->done) && lu_now_ms() < end)
    lu_sleep_ms(1);
  if (!atomic_load(&w->done))
    TEST_FAIL("the dlock waiter did not get the lock within %" PRId64 " ms",
              ms);
  ASSERT_DLOCK_OK(w->rc);
  return w->at;
}

static void waiter_finish(waiter_t *w) {
  atomic_store(&w->release, 1);
  ASSERT_EQ(pthread_join(w->t, NULL), 0);
  ASSERT_DLOCK_OK(w->rc);
}

static dlock_client_t *client_url(const char *url, int64_t watchdog_ms) {
  dlock_options_t o;
  dlock_options_init(&o);
  o.url = url;
  o.connect_timeout_ms = 2000;
  o.command_timeout_ms = 5000;
  o.watchdog_timeout_ms = watchdog_ms;
  return lu_client_opts(&o);
}

static dlock_client_t *client(rp_server_t *s, int64_t watchdog_ms) {
  return client_url(rp_url(s), watchdog_ms);
}

/* The fair-lock queue's length, as dlock reads it. */
static size_t fair_waiters(dlock_client_t *c, const char *name) {
  dlock_info_t *info = NULL;
  ASSERT_DLOCK_OK(dlock_inspect(c, name, strlen(name), &info));
  size_t n = info->nwaiters;
  dlock_info_free(info);
  return n;
}

/* The hold count of 'field' on lock 'name', as dlock reads it. */
static int64_t holder_count(dlock_client_t *c, const char *name,
                            const char *field) {
  dlock_info_t *info = NULL;
  ASSERT_DLOCK_OK(dlock_inspect(c, name, strlen(name), &info));
  int64_t n = 0;
  for (size_t i = 0; i < info->nholders; i++)
    if (strcmp(info->holders[i].owner, field) == 0)
      n = info->holders[i].count;
  dlock_info_free(info);
  return n;
}

/* Waits until 'n' clients listen on the lock's unlock channel (classic
 * pub/sub), so that an unlock is sent to a waiter already asleep. */
static void await_numsub(rp_server_t *s, const char *name, int64_t n) {
  char ch[256];
  size_t len = lu_channel(ch, sizeof(ch), name, strlen(name));
  int64_t end = lu_now_ms() + 10000;
  while (lu_numsub(s, ch, len) < n && lu_now_ms() < end)
    lu_sleep_ms(2);
  ASSERT_GE(lu_numsub(s, ch, len), n);
}

/* ---- one server: the exclusive kinds -------------------------------------
 */

static dlock_t *get_kind(dlock_client_t *c, const char *kind,
                         const char *name) {
  dlock_t *l = NULL;
  if (strcmp(kind, "fair") == 0)
    ASSERT_DLOCK_OK(dlock_get_fair(c, name, &l));
  else if (strcmp(kind, "spin") == 0)
    ASSERT_DLOCK_OK(dlock_get_spin(c, name, &l));
  else /* lock, fenced: RFencedLock is RLock's layout plus the token */
    ASSERT_DLOCK_OK(dlock_get(c, name, &l));
  return l;
}

/*
 * For Redisson's 'kind' (lock, fair, spin, fenced) and dlock's matching
 * handle on one name: either side's hold keeps the other out, an unlock on
 * either side wakes a waiter on the other (three rounds, latencies
 * printed), and each side reads the other's reentrant hold count.
 */
static void exclusive_both_ways(const char *kind, const char *name) {
  rp_server_t *s = lu_server(0);
  peer_t *p = peer_on(s, 0);
  dlock_client_t *c = client(s, 30000);
  dlock_t *l = get_kind(c, kind, name);
  uint64_t me = dlock_self();

  /* Exclusion both ways. */
  PEER_DO(p, "locked", "J", "lock %s %s", kind, name);
  ASSERT_DLOCK_ERR(dlock_trylock(l, 0, DLOCK_WATCHDOG), DLOCK_ETIMEDOUT);
  ASSERT_DLOCK_ERR(dlock_trylock(l, 300, DLOCK_WATCHDOG), DLOCK_ETIMEDOUT);
  PEER_DO(p, "unlocked", "J", "unlock %s %s", kind, name);
  ASSERT_DLOCK_OK(dlock_trylock(l, 0, DLOCK_WATCHDOG));
  PEER_DO(p, "false", "J", "trylock %s %s 0", kind, name);
  PEER_DO(p, "false", "J", "trylock %s %s 300", kind, name);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  ASSERT_EQ(lu_exists(s, name), 0);

  /* Reentrancy: each side reads the other's count. */
  char jfield[256], dfield[256], v[64];
  peer_word(p, jfield, sizeof(jfield), "J", "field %s %s", kind, name);
  for (int i = 1; i <= 3; i++) {
    PEER_DO(p, "locked", "J", "lock %s %s", kind, name);
    ASSERT_EQ(holder_count(c, name, jfield), i);
  }
  for (int i = 3; i >= 1; i--) {
    ASSERT_DLOCK_ERR(dlock_trylock(l, 0, DLOCK_WATCHDOG), DLOCK_ETIMEDOUT);
    PEER_DO(p, "unlocked", "J", "unlock %s %s", kind, name);
  }
  lu_field(dfield, sizeof(dfield), c, me);
  for (int i = 1; i <= 3; i++) {
    ASSERT_DLOCK_OK(dlock_trylock(l, 0, DLOCK_WATCHDOG));
    peer_word(p, v, sizeof(v), "J", "hget %s %s", name, dfield);
    ASSERT_EQ(strtoll(v, NULL, 10), i);
    PEER_DO(p, "count ", "J", "count %s %s", kind, name);
  }
  for (int i = 3; i >= 1; i--) {
    PEER_DO(p, "false", "J", "trylock %s %s 0", kind, name);
    ASSERT_DLOCK_OK(dlock_unlock(l));
  }
  PEER_DO(p, "locked false", "J", "locked %s %s", kind, name);

  /* Wake-ups both ways; the holders' leases (60 s) would show a missed
   * message. */
  double to_dlock[3], to_java[3];
  for (int round = 0; round < 3; round++) {
    PEER_DO(p, "locked", "J", "lock %s %s 60000", kind, name);
    waiter_t w;
    waiter_start(&w, l, DLOCK_WATCHDOG);
    if (strcmp(kind, "fair") == 0) {
      for (int i = 0; i < 5000 && fair_waiters(c, name) < 1; i++)
        lu_sleep_ms(2);
    } else if (strcmp(kind, "spin") != 0) {
      await_numsub(s, name, 1);
    }
    lu_sleep_ms(100);
    double sent = peer_sent(p, "J", "unlock %s %s", kind, name);
    to_dlock[round] = waiter_got(&w, 30000) - sent;
    waiter_finish(&w);

    ASSERT_DLOCK_OK(dlock_lock(l, 60000));
    int tag = peer_send(p, "J", "lock %s %s", kind, name);
    lu_sleep_ms(300); /* Redisson tries, subscribes and sleeps */
    char tmp[256];
    ASSERT_EQ(peer_poll(p, tag, tmp, sizeof(tmp), 0), 0);
    double released = now_ms();
    ASSERT_DLOCK_OK(dlock_unlock(l));
    to_java[round] = peer_wait(p, tag, NULL, 0) - released;
    ASSERT_DLOCK_ERR(dlock_trylock(l, 0, DLOCK_WATCHDOG), DLOCK_ETIMEDOUT);
    PEER_DO(p, "unlocked", "J", "unlock %s %s", kind, name);
  }
  printf("%s: dlock woken by Redisson's unlock after %.2f, %.2f, %.2f ms; "
         "Redisson woken by dlock's after %.2f, %.2f, %.2f ms\n",
         kind, to_dlock[0], to_dlock[1], to_dlock[2], to_java[0], to_java[1],
         to_java[2]);
  for (int i = 0; i < 3; i++) {
    ASSERT_LT(to_dlock[i], 30000);
    ASSERT_LT(to_java[i], 30000);
  }
  peer_quit(p);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

TEST(rlock_exclusion_wakeups_reentrancy) {
  exclusive_both_ways("lock", "jv-lock");
}

TEST(fair_lock_exclusion_wakeups_reentrancy) {
  exclusive_both_ways("fair", "jv-fair");
}

TEST(spin_lock_exclusion_wakeups_reentrancy) {
  exclusive_both_ways("spin", "jv-spin");
}

TEST(fenced_lock_exclusion_wakeups_reentrancy) {
  exclusive_both_ways("fenced", "jv-fenced");
}

/* The reply to a command that Redisson must refuse with 'exception'. */
static void peer_refused(peer_t *p, const char *exception, const char *actor,
                         const char *fmt, const char *a, const char *b) {
  char rest[1024];
  int tag = peer_send(p, actor, fmt, a, b);
  p->errors_ok = 1;
  peer_wait(p, tag, rest, sizeof(rest));
  p->errors_ok = 0;
  if (strncmp(rest, "error", 5) != 0 || strstr(rest, exception) == NULL)
    TEST_FAIL("Redisson peer said \"%s\", expected %s", rest, exception);
}

/* Waits until dlock's waiter (or Redisson's) is asleep on the lock: queued
 * 'queued' deep in a fair lock, else subscribed to its channel. */
static void await_asleep(dlock_client_t *c, rp_server_t *s, int fair,
                         const char *name, size_t queued) {
  if (fair) {
    for (int i = 0; i < 5000 && fair_waiters(c, name) < queued; i++)
      lu_sleep_ms(2);
    ASSERT_EQ(fair_waiters(c, name), queued);
  } else {
    await_numsub(s, name, 1);
  }
}

/*
 * Redisson's non-reentrant lock ('kind' nr or nrfair) against dlock's
 * ('dk') on one name: each side's second hold is refused (Redisson with
 * IllegalMonitorStateException, dlock with DLOCK_EINVAL) and leaves the
 * first as it was, either side's hold keeps the other out, and either
 * side's unlock wakes the other's waiter (the holders' 60 s leases would
 * show a missed message).
 */
static void nonreentrant_both_ways(const char *kind, dlock_kind_t dk,
                                   const char *name) {
  rp_server_t *s = lu_server(0);
  peer_t *p = peer_on(s, 0);
  dlock_client_t *c = client(s, 30000);
  dlock_t *l = NULL;
  ASSERT_DLOCK_OK(dlock_get_kind(c, dk, name, strlen(name), &l));
  int fair = dk == DLOCK_NONREENTRANT_FAIR;
  char jfield[256], dfield[256], v[64];
  peer_word(p, jfield, sizeof(jfield), "J", "field %s %s", kind, name);
  lu_field(dfield, sizeof(dfield), c, dlock_self());

  /* Redisson holds: refused its second hold, dlock kept out. */
  PEER_DO(p, "locked", "J", "lock %s %s 60000", kind, name);
  peer_refused(p, "IllegalMonitorStateException", "J", "trylock %s %s 0", kind,
               name);
  peer_refused(p, "IllegalMonitorStateException", "J", "lock %s %s", kind,
               name);
  ASSERT_EQ(holder_count(c, name, jfield), 1);
  ASSERT_DLOCK_ERR(dlock_trylock(l, 0, DLOCK_WATCHDOG), DLOCK_ETIMEDOUT);

  /* Redisson's unlock wakes dlock's waiter, which then keeps Redisson
   * out. */
  waiter_t w;
  waiter_start(&w, l, DLOCK_WATCHDOG);
  await_asleep(c, s, fair, name, 1);
  double sent = peer_sent(p, "J", "unlock %s %s", kind, name);
  double to_dlock = waiter_got(&w, 30000) - sent;
  PEER_DO(p, "false", "J", "trylock %s %s 0", kind, name);
  waiter_finish(&w);

  /* dlock holds: refused its second hold, Redisson kept out, and woken by
   * dlock's unlock. */
  ASSERT_DLOCK_OK(dlock_lock(l, 60000));
  ASSERT_DLOCK_ERR(dlock_lock(l, 60000), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_trylock(l, 1000, 60000), DLOCK_EINVAL);
  peer_word(p, v, sizeof(v), "J", "hget %s %s", name, dfield);
  ASSERT_EQ(strtoll(v, NULL, 10), 1);
  PEER_DO(p, "false", "J", "trylock %s %s 0", kind, name);
  int tag = peer_waiting(p, "J", "lock %s %s", kind, name);
  double released = now_ms();
  ASSERT_DLOCK_OK(dlock_unlock(l));
  double to_java = peer_wait(p, tag, NULL, 0) - released;
  ASSERT_DLOCK_ERR(dlock_trylock(l, 0, DLOCK_WATCHDOG), DLOCK_ETIMEDOUT);
  PEER_DO(p, "unlocked", "J", "unlock %s %s", kind, name);
  printf("%s: dlock woken by Redisson's unlock after %.2f ms; Redisson "
         "woken by dlock's after %.2f ms\n",
         kind, to_dlock, to_java);
  ASSERT_LT(to_dlock, 30000);
  ASSERT_LT(to_java, 30000);
  ASSERT_EQ(lu_exists(s, name), 0);

  if (fair) {
    /* One queue for both: dlock holds; Redisson's J1, dlock's waiter and
     * Redisson's J2 queue in that order, and get the lock in it. */
    ASSERT_DLOCK_OK(dlock_lock(l, 60000));
    int t1 = peer_waiting(p, "J1", "lock %s %s 60000", kind, name);
    await_asleep(c, s, 1, name, 1);
    waiter_start(&w, l, 60000);
    await_asleep(c, s, 1, name, 2);
    int t2 = peer_waiting(p, "J2", "lock %s %s 60000", kind, name);
    await_asleep(c, s, 1, name, 3);
    ASSERT_DLOCK_OK(dlock_unlock(l));
    peer_wait(p, t1, NULL, 0);
    char tmp[256];
    ASSERT_EQ(atomic_load(&w.done), 0);
    ASSERT_EQ(peer_poll(p, t2, tmp, sizeof(tmp), 0), 0);
    PEER_DO(p, "unlocked", "J1", "unlock %s %s", kind, name);
    waiter_got(&w, 30000);
    ASSERT_EQ(peer_poll(p, t2, tmp, sizeof(tmp), 0), 0);
    waiter_finish(&w);
    peer_wait(p, t2, NULL, 0);
    PEER_DO(p, "unlocked", "J2", "unlock %s %s", kind, name);
    ASSERT_EQ(lu_exists(s, name), 0);
  }
  peer_quit(p);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

TEST(nonreentrant_lock_both_ways) {
  nonreentrant_both_ways("nr", DLOCK_NONREENTRANT, "jv-nr");
}

TEST(nonreentrant_fair_lock_both_ways_and_mixed_queue) {
  nonreentrant_both_ways("nrfair", DLOCK_NONREENTRANT_FAIR, "jv-nrfair");
}

/* RFencedLock and dlock's lock share one token counter: alternating holders
 * get consecutive tokens, whichever side takes the lock. */
TEST(fenced_tokens_one_sequence) {
  rp_server_t *s = lu_server(0);
  peer_t *p = peer_on(s, 0);
  dlock_client_t *c = client(s, 30000);
  dlock_t *l = lu_get(c, "jv-tok");
  uint64_t last = 0;
  char word[64];
  for (int i = 0; i < 4; i++) {
    peer_word(p, word, sizeof(word), "J", "lock fenced %s%s", "jv-tok", "");
    uint64_t jt = strtoull(word, NULL, 10);
    PEER_DO(p, "unlocked", "J", "unlock fenced jv-tok");
    ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));
    uint64_t dt = dlock_token(l);
    peer_word(p, word, sizeof(word), "J", "token %s%s", "jv-tok", "");
    ASSERT_EQ(strtoull(word, NULL, 10), dt);
    ASSERT_DLOCK_OK(dlock_unlock(l));
    printf("round %d: Redisson's token %" PRIu64 ", dlock's %" PRIu64 "\n", i,
           jt, dt);
    ASSERT_EQ(jt, last + 1);
    ASSERT_EQ(dt, jt + 1);
    last = dt;
  }
  /* Where they differ: Redisson's plain RLock takes no token (only
   * RFencedLock counts), while every dlock acquisition of the lock does. */
  PEER_DO(p, "locked", "J", "lock lock jv-tok");
  PEER_DO(p, "unlocked", "J", "unlock lock jv-tok");
  peer_word(p, word, sizeof(word), "J", "token %s%s", "jv-tok", "");
  ASSERT_EQ(strtoull(word, NULL, 10), last);
  ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));
  ASSERT_EQ(dlock_token(l), last + 1);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  /* Redisson's tryLockAndGetToken is refused while dlock holds. */
  ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));
  PEER_DO(p, "false", "J", "trylock fenced jv-tok 0");
  ASSERT_DLOCK_OK(dlock_unlock(l));
  peer_quit(p);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/* Java and C waiters queued alternately on one fair lock get it in the
 * order they queued. */
TEST(fair_queue_mixes_java_and_c_in_order) {
  rp_server_t *s = lu_server(0);
  peer_t *p = peer_on(s, 0);
  dlock_client_t *c = client(s, 30000);
  dlock_t *l = NULL;
  ASSERT_DLOCK_OK(dlock_get_fair(c, "jv-fifo", &l));
  enum { N = 6 };
  /* Even: a Java actor; odd: a dlock thread. */
  waiter_t w[N];
  int tag[N];
  char actor[N][8];
  PEER_DO(p, "locked", "H", "lock fair jv-fifo");
  for (int i = 0; i < N; i++) {
    if (i % 2 == 0) {
      snprintf(actor[i], sizeof(actor[i]), "Q%d", i);
      tag[i] = peer_send(p, actor[i], "lock fair jv-fifo");
    } else {
      waiter_start(&w[i], l, DLOCK_WATCHDOG);
    }
    /* Queued before the next one asks. */
    int64_t end = lu_now_ms() + 10000;
    while (fair_waiters(c, "jv-fifo") < (size_t)i + 1 && lu_now_ms() < end)
      lu_sleep_ms(2);
    ASSERT_EQ(fair_waiters(c, "jv-fifo"), (size_t)i + 1);
  }
  PEER_DO(p, "unlocked", "H", "unlock fair jv-fifo");
  char order[N * 4] = "";
  for (int k = 0; k < N; k++) {
    /* Whoever holds it now is the next; it unlocks, and so on. */
    int who = -1;
    int64_t end = lu_now_ms() + 30000;
    while (who < 0 && lu_now_ms() < end) {
      for (int i = 0; i < N && who < 0; i++) {
        if (strchr(order, 'a' + i) != NULL)
          continue;
        char rest[256];
        if (i % 2 == 0 ? peer_poll(p, tag[i], rest, sizeof(rest), 0)
                       : atomic_load(&w[i].done))
          who = i;
      }
      if (who < 0)
        lu_sleep_ms(1);
    }
    ASSERT_GE(who, 0);
    size_t len = strlen(order);
    order[len] = (char)('a' + who);
    order[len + 1] = '\0';
    if (who % 2 == 0)
      PEER_DO(p, "unlocked", actor[who], "unlock fair jv-fifo");
    else
      waiter_finish(&w[who]);
  }
  printf("fair lock order (a, c, e Redisson; b, d, f dlock): %s\n", order);
  ASSERT_STR_EQ(order, "abcdef");
  ASSERT_EQ(fair_waiters(c, "jv-fifo"), 0);
  ASSERT_EQ(lu_exists(s, "jv-fifo"), 0);
  peer_quit(p);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/* Readers of both sides share the read lock; a writer of either side is
 * kept out by them, keeps both sides' readers out, and wakes them. */
TEST(rwlock_readers_share_writers_exclude) {
  rp_server_t *s = lu_server(0);
  peer_t *p = peer_on(s, 0);
  dlock_client_t *c = client(s, 30000);
  dlock_t *rd = NULL, *wr = NULL;
  ASSERT_DLOCK_OK(dlock_get_rw(c, "jv-rw", &rd, &wr));

  /* Both read at once; neither side can write. */
  PEER_DO(p, "locked", "R", "lock read jv-rw");
  ASSERT_DLOCK_OK(dlock_trylock(rd, 0, DLOCK_WATCHDOG));
  ASSERT_DLOCK_ERR(dlock_trylock_as(wr, dlock_owner_new(), 0, DLOCK_WATCHDOG),
                   DLOCK_ETIMEDOUT);
  PEER_DO(p, "false", "W", "trylock write jv-rw 0");
  /* A Java writer waits for both readers, and is woken by the last. */
  int tag = peer_send(p, "W", "lock write jv-rw");
  PEER_DO(p, "unlocked", "R", "unlock read jv-rw");
  lu_sleep_ms(300);
  char rest[256];
  ASSERT_EQ(peer_poll(p, tag, rest, sizeof(rest), 0), 0);
  double released = now_ms();
  ASSERT_DLOCK_OK(dlock_unlock(rd));
  double got = peer_wait(p, tag, NULL, 0);
  printf("Redisson writer woken %.2f ms after dlock's reader left\n",
         got - released);
  ASSERT_LT(got - released, WAKE_LIMIT_MS);
  /* Redisson's writer keeps dlock's reader and writer out, then wakes a
   * dlock reader. */
  ASSERT_DLOCK_ERR(dlock_trylock(rd, 0, DLOCK_WATCHDOG), DLOCK_ETIMEDOUT);
  ASSERT_DLOCK_ERR(dlock_trylock(wr, 0, DLOCK_WATCHDOG), DLOCK_ETIMEDOUT);
  waiter_t w;
  waiter_start(&w, rd, DLOCK_WATCHDOG);
  lu_sleep_ms(300);
  double sent = peer_sent(p, "W", "unlock write jv-rw");
  printf("dlock reader woken %.2f ms after Redisson's writer left\n",
         waiter_got(&w, 30000) - sent);
  /* A Java reader joins dlock's. */
  PEER_DO(p, "true", "R", "trylock read jv-rw 0");
  waiter_finish(&w);
  /* dlock's writer waits for Redisson's reader, then keeps both Java
   * sides out. */
  waiter_t ww;
  waiter_start(&ww, wr, DLOCK_WATCHDOG);
  lu_sleep_ms(300);
  ASSERT_EQ(atomic_load(&ww.done), 0);
  sent = peer_sent(p, "R", "unlock read jv-rw");
  printf("dlock writer woken %.2f ms after Redisson's reader left\n",
         waiter_got(&ww, 30000) - sent);
  PEER_DO(p, "false", "R", "trylock read jv-rw 0");
  PEER_DO(p, "false", "W", "trylock write jv-rw 0");
  /* A Java reader waiting on dlock's writer is woken by its unlock. */
  tag = peer_waiting(p, "R", "lock read jv-rw");
  released = now_ms();
  waiter_finish(&ww);
  got = peer_wait(p, tag, NULL, 0);
  printf("Redisson reader woken %.2f ms after dlock's writer left\n",
         got - released);
  ASSERT_LT(got - released, WAKE_LIMIT_MS);
  PEER_DO(p, "unlocked", "R", "unlock read jv-rw");
  ASSERT_EQ(lu_exists(s, "jv-rw"), 0);
  peer_quit(p);
  dlock_free(rd);
  dlock_free(wr);
  dlock_client_close(c);
  rp_free(s);
}

/* RedissonMultiLock and dlock's MultiLock over overlapping RLocks: either
 * holds all of its locks or none, keeps the other out of the shared one,
 * and wakes it on release. */
TEST(multilock_both_ways) {
  rp_server_t *s = lu_server(0);
  peer_t *p = peer_on(s, 0);
  dlock_client_t *c = client(s, 30000);
  dlock_t *b = lu_get(c, "jv-mb"), *cc = lu_get(c, "jv-mc"),
          *d = lu_get(c, "jv-md");
  dlock_t *parts[3] = {b, cc, d}, *m = NULL;
  ASSERT_DLOCK_OK(dlock_get_multi(parts, 3, &m));

  PEER_DO(p, "locked", "J", "mlock jv-ma,jv-mb");
  ASSERT_EQ(lu_exists(s, "jv-ma"), 1);
  ASSERT_EQ(lu_exists(s, "jv-mb"), 1);
  ASSERT_DLOCK_ERR(dlock_trylock(b, 0, DLOCK_WATCHDOG), DLOCK_ETIMEDOUT);
  ASSERT_DLOCK_ERR(dlock_trylock(m, 200, DLOCK_WATCHDOG), DLOCK_ETIMEDOUT);
  /* All or nothing: the failed attempt left jv-mc and jv-md free. */
  ASSERT_EQ(lu_exists(s, "jv-mc"), 0);
  ASSERT_EQ(lu_exists(s, "jv-md"), 0);
  waiter_t w;
  waiter_start(&w, m, DLOCK_WATCHDOG);
  lu_sleep_ms(300);
  ASSERT_EQ(atomic_load(&w.done), 0);
  double sent = peer_sent(p, "J", "munlock jv-ma,jv-mb");
  printf("dlock MultiLock woken %.2f ms after Redisson's MultiLock unlock\n",
         waiter_got(&w, 30000) - sent);
  PEER_DO(p, "false", "J", "mtrylock jv-ma,jv-md 0");
  ASSERT_EQ(lu_exists(s, "jv-ma"), 0);
  int tag = peer_waiting(p, "J", "mlock jv-ma,jv-mc");
  double released = now_ms();
  waiter_finish(&w);
  double got = peer_wait(p, tag, NULL, 0);
  printf("Redisson MultiLock woken %.2f ms after dlock's MultiLock unlock\n",
         got - released);
  ASSERT_LT(got - released, WAKE_LIMIT_MS);
  PEER_DO(p, "unlocked", "J", "munlock jv-ma,jv-mc");
  /* (The token counters and dlock's short-lived unlock latches stay.) */
  const char *all[] = {"jv-ma", "jv-mb", "jv-mc", "jv-md"};
  for (int i = 0; i < 4; i++)
    ASSERT_EQ(lu_exists(s, all[i]), 0);
  peer_quit(p);
  dlock_free(m);
  dlock_free(b);
  dlock_free(cc);
  dlock_free(d);
  dlock_client_close(c);
  rp_free(s);
}

/* A force unlock on either side wakes the other side's waiter, long before
 * the holder's 60 s lease. */
TEST(force_unlock_wakes_the_other_side) {
  rp_server_t *s = lu_server(0);
  peer_t *p = peer_on(s, 0);
  dlock_client_t *c = client(s, 30000);
  dlock_t *l = lu_get(c, "jv-force");

  PEER_DO(p, "locked", "H", "lock lock jv-force 60000");
  waiter_t w;
  waiter_start(&w, l, DLOCK_WATCHDOG);
  await_numsub(s, "jv-force", 1);
  lu_sleep_ms(100);
  double t0 = now_ms();
  PEER_DO(p, "forced true", "F", "force lock jv-force");
  printf("dlock waiter got the lock %.2f ms after Redisson's forceUnlock\n",
         waiter_got(&w, 30000) - t0);
  waiter_finish(&w);
  PEER_DO(p, "error", "H", "unlock lock jv-force");

  ASSERT_DLOCK_OK(dlock_lock(l, 60000));
  int tag = peer_send(p, "J", "lock lock jv-force");
  lu_sleep_ms(300);
  char rest[256];
  ASSERT_EQ(peer_poll(p, tag, rest, sizeof(rest), 0), 0);
  dlock_t *other = lu_get(c, "jv-force");
  t0 = now_ms();
  ASSERT_EQ(dlock_force_unlock(other), 1);
  double got = peer_wait(p, tag, NULL, 0);
  printf("Redisson waiter got the lock %.2f ms after dlock_force_unlock\n",
         got - t0);
  ASSERT_LT(got - t0, WAKE_LIMIT_MS);
  ASSERT_DLOCK_ERR(dlock_unlock(l), DLOCK_ELOST);
  PEER_DO(p, "unlocked", "J", "unlock lock jv-force");
  peer_quit(p);
  dlock_free(other);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/* ---- one server: leases and watchdogs ------------------------------------
 */

/* A lease set on either side ends the hold for the other side too, not
 * before it; a watchdog on either side keeps the lock past its timeout
 * (3 s here) while its client lives, and lets it go within one timeout
 * once the client stops without unlocking (Redisson's client shut down, a
 * dlock client closed, as after a crash). */
TEST(lease_and_watchdog_expiry_both_ways) {
  rp_server_t *s = lu_server(0);
  peer_t *p = peer_on(s, 3000);
  dlock_client_t *c = client(s, 30000);
  dlock_t *l = lu_get(c, "jv-lease");

  /* Leases. */
  double held = PEER_DO(p, "locked", "J", "lock lock jv-lease 1500");
  ASSERT_DLOCK_OK(dlock_trylock(l, 20000, DLOCK_WATCHDOG));
  double waited = now_ms() - held;
  ASSERT_DLOCK_OK(dlock_unlock(l));
  ASSERT_DLOCK_OK(dlock_lock(l, 1500));
  held = now_ms();
  double got = PEER_DO(p, "true", "J", "trylock lock jv-lease 20000");
  PEER_DO(p, "unlocked", "J", "unlock lock jv-lease");
  printf("1500 ms leases: dlock got Redisson's lock after %.0f ms, Redisson "
         "dlock's after %.0f ms\n",
         waited, got - held);
  /* Not before the lease ends: each side's time is read a moment after
   * its acquisition, which a loaded machine can stretch. */
  ASSERT_GE(waited, 1000);
  ASSERT_GE(got - held, 1000);
  ASSERT_LT(waited, 20000);
  ASSERT_LT(got - held, 20000);

  /* Watchdogs, one lock each side at once. */
  dlock_client_t *c3 = client(s, 3000);
  dlock_t *l3 = lu_get(c3, "jv-wd-c");
  dlock_t *lj = lu_get(c, "jv-wd-j");
  PEER_DO(p, "locked", "J", "lock lock jv-wd-j");
  ASSERT_DLOCK_OK(dlock_lock(l3, DLOCK_WATCHDOG));
  lu_sleep_ms(4500);
  ASSERT_DLOCK_ERR(dlock_trylock(lj, 0, DLOCK_WATCHDOG), DLOCK_ETIMEDOUT);
  PEER_DO(p, "false", "K", "trylock lock jv-wd-c 0");
  /* Both holders stop without unlocking. */
  double stopped = PEER_DO(p, "restarted", "J", "restart");
  dlock_free(l3);
  dlock_client_close(c3);
  double closed = now_ms();
  int tag = peer_send(p, "K", "trylock lock jv-wd-c 20000");
  ASSERT_DLOCK_OK(dlock_trylock(lj, 20000, DLOCK_WATCHDOG));
  double dlock_got = now_ms() - stopped;
  char rest[256];
  double java_got = peer_wait(p, tag, rest, sizeof(rest)) - closed;
  ASSERT(strncmp(rest, "true", 4) == 0);
  printf("3 s watchdogs: dlock got the lock %.0f ms after Redisson's client "
         "stopped, Redisson %.0f ms after dlock's client closed\n",
         dlock_got, java_got);
  ASSERT_LT(dlock_got, 20000);
  ASSERT_LT(java_got, 20000);
  ASSERT_DLOCK_OK(dlock_unlock(lj));
  PEER_DO(p, "unlocked", "K", "unlock lock jv-wd-c");
  peer_quit(p);
  dlock_free(lj);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/* ---- one server: semaphores and latches ----------------------------------
 */

/* A dlock call in a thread, for waits while the test drives the peer. */
typedef struct job {
  pthread_t t;
  int (*fn)(struct job *);
  void *obj;
  int64_t n, wait;
  dlock_permit_t permit;
  atomic_int done;
  int rc;
  double at;
} job_t;

static void *job_main(void *arg) {
  job_t *j = arg;
  j->rc = j->fn(j);
  j->at = now_ms();
  atomic_store(&j->done, 1);
  return NULL;
}

static void job_start(job_t *j, int (*fn)(job_t *), void *obj, int64_t n,
                      int64_t wait) {
  memset(j, 0, sizeof(*j));
  j->fn = fn;
  j->obj = obj;
  j->n = n;
  j->wait = wait;
  ASSERT_EQ(pthread_create(&j->t, NULL, job_main, j), 0);
}

static double job_join(job_t *j) {
  ASSERT_EQ(pthread_join(j->t, NULL), 0);
  ASSERT_DLOCK_OK(j->rc);
  return j->at;
}

static int sem_acquire_job(job_t *j) {
  return dlock_sem_acquire(j->obj, j->n, j->wait);
}
static int psem_acquire_job(job_t *j) {
  return dlock_psem_acquire(j->obj, j->wait, j->n, &j->permit);
}
static int latch_await_job(job_t *j) {
  return dlock_latch_await(j->obj, j->wait);
}

/* RSemaphore and dlock's semaphore count the same permits: what one side
 * takes the other cannot, and a release on either side wakes a waiter on
 * the other. */
TEST(semaphore_permits_both_ways) {
  rp_server_t *s = lu_server(0);
  peer_t *p = peer_on(s, 0);
  dlock_client_t *c = client(s, 30000);
  dlock_sem_t *sem = NULL;
  ASSERT_DLOCK_OK(dlock_sem_get(c, "jv-sem", &sem));
  char word[64];

  PEER_DO(p, "set true", "J", "sem_set jv-sem 3");
  ASSERT_EQ(dlock_sem_try_set_permits(sem, 5), 0);
  ASSERT_DLOCK_OK(dlock_sem_acquire(sem, 2, 0));
  PEER_DO(p, "false", "J", "sem_try jv-sem 2 0");
  PEER_DO(p, "true", "J", "sem_try jv-sem 1 0");
  int64_t avail = -1;
  ASSERT_DLOCK_OK(dlock_sem_available(sem, &avail));
  ASSERT_EQ(avail, 0);
  peer_word(p, word, sizeof(word), "J", "sem_avail %s%s", "jv-sem", "");
  ASSERT_STR_EQ(word, "0");

  /* A Java waiter for 2, woken by dlock's release of 2. */
  int tag = peer_waiting(p, "W", "sem_acquire jv-sem 2");
  double released = now_ms();
  ASSERT_DLOCK_OK(dlock_sem_release(sem, 2));
  double to_java = peer_wait(p, tag, NULL, 0) - released;

  /* A dlock waiter for 3, woken once Redisson's actors gave back 1 and 2. */
  job_t j;
  job_start(&j, sem_acquire_job, sem, 3, 30000);
  lu_sleep_ms(300);
  PEER_DO(p, "released", "J", "sem_release jv-sem 1");
  lu_sleep_ms(100);
  ASSERT_EQ(atomic_load(&j.done), 0); /* 1 free: not enough */
  double sent = peer_sent(p, "W", "sem_release jv-sem 2");
  double to_dlock = job_join(&j) - sent;
  printf("semaphore: Redisson woken %.2f ms after dlock's release, dlock "
         "%.2f ms after Redisson's\n",
         to_java, to_dlock);
  ASSERT_LT(to_java, WAKE_LIMIT_MS);
  ASSERT_LT(to_dlock, WAKE_LIMIT_MS);
  ASSERT_DLOCK_OK(dlock_sem_release(sem, 3));
  peer_word(p, word, sizeof(word), "J", "sem_avail %s%s", "jv-sem", "");
  ASSERT_STR_EQ(word, "3");
  /* Where they differ: Redisson's release adds permits whoever calls it
   * (nothing records who acquired), while dlock gives back only what its
   * client acquired and refuses the rest, changing nothing. */
  ASSERT_DLOCK_ERR(dlock_sem_release(sem, 1), DLOCK_ENOTHELD);
  PEER_DO(p, "released", "J", "sem_release jv-sem 1");
  peer_word(p, word, sizeof(word), "J", "sem_avail %s%s", "jv-sem", "");
  ASSERT_STR_EQ(word, "4");
  peer_quit(p);
  dlock_sem_free(sem);
  dlock_client_close(c);
  rp_free(s);
}

/* RPermitExpirableSemaphore and dlock's: permits taken by either count for
 * both, a Java permit's lease ends for dlock, a release on either side
 * wakes the other's waiter, and either side releases the other's permit by
 * its id. */
TEST(expirable_semaphore_both_ways) {
  rp_server_t *s = lu_server(0);
  peer_t *p = peer_on(s, 0);
  dlock_client_t *c = client(s, 30000);
  dlock_psem_t *sem = NULL;
  ASSERT_DLOCK_OK(dlock_psem_get(c, "jv-psem", &sem));
  char jid[64], rest[256], word[64];

  PEER_DO(p, "set true", "J", "psem_set jv-psem 2");
  ASSERT_EQ(dlock_psem_try_set_permits(sem, 5), 0);
  double taken = now_ms();
  peer_word(p, jid, sizeof(jid), "J", "psem_acquire %s %s", "jv-psem", "1500");
  dlock_permit_t a, b, d;
  ASSERT_DLOCK_OK(dlock_psem_acquire(sem, 0, 60000, &a));
  ASSERT_DLOCK_ERR(dlock_psem_acquire(sem, 0, 60000, &b), DLOCK_ETIMEDOUT);
  PEER_DO(p, "false", "K", "psem_try jv-psem 0 60000");
  /* Redisson's permit comes back when its 1500 ms lease ends. */
  ASSERT_DLOCK_OK(dlock_psem_acquire(sem, 20000, 60000, &b));
  double waited = now_ms() - taken;
  printf("dlock got the permit of Redisson's 1500 ms lease after %.0f ms\n",
         waited);
  ASSERT_GE(waited, 1300);
  ASSERT_LT(waited, 20000);

  /* A Java waiter woken by dlock's release. */
  int tag = peer_waiting(p, "W", "psem_try jv-psem 30000 60000");
  double released = now_ms();
  ASSERT_DLOCK_OK(dlock_psem_release(sem, b.id));
  double to_java = peer_wait(p, tag, rest, sizeof(rest)) - released;
  ASSERT(strncmp(rest, "permit ", 7) == 0);
  snprintf(jid, sizeof(jid), "%.32s", rest + 7);

  /* A dlock waiter woken by Redisson's release of its permit. */
  job_t j;
  job_start(&j, psem_acquire_job, sem, 60000, 30000);
  lu_sleep_ms(300);
  ASSERT_EQ(atomic_load(&j.done), 0);
  double sent = peer_sent(p, "W", "psem_release jv-psem %s", jid);
  double to_dlock = job_join(&j) - sent;
  d = j.permit;
  printf("expirable semaphore: Redisson woken %.2f ms after dlock's "
         "release, dlock %.2f ms after Redisson's\n",
         to_java, to_dlock);
  ASSERT_LT(to_java, WAKE_LIMIT_MS);
  ASSERT_LT(to_dlock, WAKE_LIMIT_MS);

  /* Each side gives back a permit the other took. */
  PEER_DO(p, "released", "J", "psem_release jv-psem %s", a.id);
  peer_word(p, jid, sizeof(jid), "J", "psem_acquire %s %s", "jv-psem", "60000");
  ASSERT_DLOCK_OK(dlock_psem_release(sem, jid));
  ASSERT_DLOCK_OK(dlock_psem_release(sem, d.id));
  int64_t free_n = -1, taken_n = -1;
  ASSERT_DLOCK_OK(dlock_psem_count(sem, &free_n, &taken_n));
  ASSERT_EQ(free_n, 2);
  ASSERT_EQ(taken_n, 0);
  peer_word(p, word, sizeof(word), "J", "psem_avail %s%s", "jv-psem", "");
  ASSERT_STR_EQ(word, "2");
  peer_quit(p);
  dlock_psem_free(sem);
  dlock_client_close(c);
  rp_free(s);
}

/* RCountDownLatch and dlock's latch: both count down one count, and the
 * last count-down on either side wakes the waiters of both. */
TEST(latch_counted_down_by_both) {
  rp_server_t *s = lu_server(0);
  peer_t *p = peer_on(s, 0);
  dlock_client_t *c = client(s, 30000);
  const char *names[2] = {"jv-latch-j", "jv-latch-c"};
  for (int last_java = 1; last_java >= 0; last_java--) {
    const char *name = names[last_java ? 0 : 1];
    dlock_latch_t *l = NULL;
    ASSERT_DLOCK_OK(dlock_latch_get(c, name, &l));
    char word[64], rest[256];
    PEER_DO(p, "set true", "J", "latch_set %s 4", name);
    ASSERT_EQ(dlock_latch_try_set_count(l, 9), 0);
    int64_t left = -1;
    ASSERT_DLOCK_OK(dlock_latch_count_down(l, &left));
    ASSERT_EQ(left, 3);
    PEER_DO(p, "down", "J", "latch_down %s", name);
    peer_word(p, word, sizeof(word), "J", "latch_count %s%s", name, "");
    ASSERT_STR_EQ(word, "2");
    ASSERT_DLOCK_OK(dlock_latch_count(l, &left));
    ASSERT_EQ(left, 2);
    ASSERT_DLOCK_ERR(dlock_latch_await(l, 0), DLOCK_ETIMEDOUT);
    PEER_DO(p, "false", "J", "latch_await %s 0", name);

    int tag = peer_send(p, "W", "latch_await %s 30000", name);
    job_t j;
    job_start(&j, latch_await_job, l, 0, 30000);
    lu_sleep_ms(300);
    ASSERT_EQ(atomic_load(&j.done), 0);
    ASSERT_EQ(peer_poll(p, tag, rest, sizeof(rest), 0), 0);
    double last;
    if (last_java) {
      ASSERT_DLOCK_OK(dlock_latch_count_down(l, NULL));
      last = peer_sent(p, "J", "latch_down %s", name);
    } else {
      PEER_DO(p, "down", "J", "latch_down %s", name);
      last = now_ms();
      ASSERT_DLOCK_OK(dlock_latch_count_down(l, NULL));
    }
    double to_dlock = job_join(&j) - last;
    double to_java = peer_wait(p, tag, rest, sizeof(rest)) - last;
    ASSERT(strncmp(rest, "true", 4) == 0);
    printf("latch counted down to zero by %s: dlock's waiter woken after "
           "%.2f ms, Redisson's after %.2f ms\n",
           last_java ? "Redisson" : "dlock", to_dlock, to_java);
    ASSERT_LT(to_dlock, WAKE_LIMIT_MS);
    ASSERT_LT(to_java, WAKE_LIMIT_MS);
    ASSERT_EQ(lu_exists(s, name), 0);
    /* Where they differ: at zero, Redisson's countDown does nothing and
     * says nothing, dlock's fails with DLOCK_EINVAL (and also changes
     * nothing). */
    PEER_DO(p, "down", "J", "latch_down %s", name);
    ASSERT_DLOCK_ERR(dlock_latch_count_down(l, NULL), DLOCK_EINVAL);
    ASSERT_EQ(lu_exists(s, name), 0);
    dlock_latch_free(l);
  }
  peer_quit(p);
  dlock_client_close(c);
  rp_free(s);
}

/* ---- Sentinel and cluster --------------------------------------------------
 */

/* On 'name': Redisson's 'kind' (lock or fair) and dlock's keep each other
 * out and wake each other; the latencies are printed under 'where'. */
static void deployed_lock_both_ways(peer_t *p, dlock_client_t *c,
                                    const char *kind, const char *name,
                                    const char *where) {
  dlock_t *l = get_kind(c, kind, name);
  PEER_DO(p, "locked", "J", "lock %s %s 60000", kind, name);
  ASSERT_DLOCK_ERR(dlock_trylock(l, 0, DLOCK_WATCHDOG), DLOCK_ETIMEDOUT);
  waiter_t w;
  waiter_start(&w, l, DLOCK_WATCHDOG);
  lu_sleep_ms(300);
  ASSERT_EQ(atomic_load(&w.done), 0);
  double sent = peer_sent(p, "J", "unlock %s %s", kind, name);
  double to_dlock = waiter_got(&w, 30000) - sent;
  PEER_DO(p, "false", "J", "trylock %s %s 0", kind, name);
  int tag = peer_waiting(p, "J", "lock %s %s", kind, name);
  double released = now_ms();
  waiter_finish(&w);
  double to_java = peer_wait(p, tag, NULL, 0) - released;
  ASSERT_DLOCK_ERR(dlock_trylock(l, 0, DLOCK_WATCHDOG), DLOCK_ETIMEDOUT);
  PEER_DO(p, "unlocked", "J", "unlock %s %s", kind, name);
  printf("%s, %s %s: dlock woken by Redisson's unlock after %.2f ms, "
         "Redisson by dlock's after %.2f ms\n",
         where, kind, name, to_dlock, to_java);
  ASSERT_LT(to_dlock, WAKE_LIMIT_MS);
  ASSERT_LT(to_java, WAKE_LIMIT_MS);
  dlock_free(l);
}

/* On 'name': a semaphore's permits counted by both, and a release on each
 * side waking the other's waiter. */
static void deployed_semaphore_both_ways(peer_t *p, dlock_client_t *c,
                                         const char *name, const char *where) {
  dlock_sem_t *sem = NULL;
  ASSERT_DLOCK_OK(dlock_sem_get(c, name, &sem));
  PEER_DO(p, "set true", "J", "sem_set %s 1", name);
  ASSERT_DLOCK_OK(dlock_sem_acquire(sem, 1, 0));
  int tag = peer_waiting(p, "J", "sem_acquire %s 1", name);
  double released = now_ms();
  ASSERT_DLOCK_OK(dlock_sem_release(sem, 1));
  double to_java = peer_wait(p, tag, NULL, 0) - released;
  ASSERT_DLOCK_ERR(dlock_sem_acquire(sem, 1, 0), DLOCK_ETIMEDOUT);
  job_t j;
  job_start(&j, sem_acquire_job, sem, 1, 30000);
  lu_sleep_ms(300);
  ASSERT_EQ(atomic_load(&j.done), 0);
  double sent = peer_sent(p, "J", "sem_release %s 1", name);
  double to_dlock = job_join(&j) - sent;
  ASSERT_DLOCK_OK(dlock_sem_release(sem, 1));
  printf("%s, semaphore %s: Redisson woken by dlock's release after %.2f "
         "ms, dlock by Redisson's after %.2f ms\n",
         where, name, to_java, to_dlock);
  ASSERT_LT(to_java, WAKE_LIMIT_MS);
  ASSERT_LT(to_dlock, WAKE_LIMIT_MS);
  dlock_sem_free(sem);
}

/* Through Sentinel (a master, two replicas, three Sentinels): Redisson with
 * checkLockSyncedSlaves and dlock with replica_sync (its default) exclude
 * and wake each other on a lock, a fair lock and a semaphore. */
TEST(sentinel_both_ways) {
  sg_group_t *g = NULL;
  ASSERT_EQ(sg_start(NULL, &g), 0);
  char url[512];
  snprintf(url, sizeof(url), "sentinel://%s", strstr(sg_url(g), "://") + 3);
  peer_t *p = peer_ready(url, 0);
  dlock_client_t *c = client_url(sg_url(g), 30000);
  /* checkLockSyncedSlaves: Redisson waits for the replicas after a lock
   * write, as dlock does (WAIT on the master). */
  rp_server_t *master = sg_node(g, sg_master_index(g));
  int64_t waits = lu_cmd_calls(master, "wait");
  PEER_DO(p, "locked", "J", "lock lock jv-sent-sync");
  PEER_DO(p, "unlocked", "J", "unlock lock jv-sent-sync");
  printf("Redisson's lock and unlock sent WAIT %" PRId64 " times\n",
         lu_cmd_calls(master, "wait") - waits);
  ASSERT_GE(lu_cmd_calls(master, "wait") - waits, 2);
  deployed_lock_both_ways(p, c, "lock", "jv-sent", "Sentinel");
  deployed_lock_both_ways(p, c, "fair", "jv-sent-fair", "Sentinel");
  deployed_semaphore_both_ways(p, c, "jv-sent-sem", "Sentinel");
  peer_quit(p);
  dlock_client_close(c);
  sg_free(g);
}

/*
 * Replica sync under Redisson's rule, against Redisson itself (a master
 * and two replicas given to it as a master-slave config, where it sends
 * WAIT after its lock writes): with one replica stopped, Redisson and
 * dlock's DLOCK_SYNC_ANY take the lock (dlock's own rule refuses it); with
 * both stopped, both refuse, and give the grant back on the master.
 */
TEST(replica_sync_any_as_redisson) {
  rp_server_t *m, *r[2];
  lu_replicated(&m, r, 2, 0);
  char url[256];
  snprintf(url, sizeof(url),
           "masterslave://127.0.0.1:%d/127.0.0.1:%d,127.0.0.1:%d", rp_port(m),
           rp_port(r[0]), rp_port(r[1]));
  peer_t *p = peer_ready(url, 0);
  dlock_options_t o;
  lu_options(&o, m);
  o.watchdog_timeout_ms = 30000;
  o.replica_sync_timeout_ms = 1000; /* Redisson's slavesSyncTimeout */
  /* Redisson waits for the replicas connected; dlock by default for those
   * in step, which leaves out one silent for over 2 s: both are told of
   * two here, so that a stopped replica counts on both sides. */
  o.replica_sync_replicas = 2;
  dlock_client_t *all = lu_client_opts(&o);
  o.replica_sync_mode = DLOCK_SYNC_ANY;
  dlock_client_t *any = lu_client_opts(&o);
  dlock_t *la = lu_get(any, "jv-rs-d"), *ll = lu_get(all, "jv-rs-d");

  int64_t waits = lu_cmd_calls(m, "wait");
  PEER_DO(p, "true", "J", "trylock lock jv-rs-j 0 30000");
  PEER_DO(p, "unlocked", "J", "unlock lock jv-rs-j");
  ASSERT_DLOCK_OK(dlock_trylock(la, 0, 30000));
  ASSERT_DLOCK_OK(dlock_unlock(la));
  printf("all replicas up: %" PRId64 " WAIT\n",
         lu_cmd_calls(m, "wait") - waits);
  ASSERT_GE(lu_cmd_calls(m, "wait") - waits, 4);

  ASSERT_EQ(rp_pause(r[1]), 0);
  PEER_DO(p, "true", "J", "trylock lock jv-rs-j 0 30000");
  PEER_DO(p, "unlocked", "J", "unlock lock jv-rs-j");
  ASSERT_DLOCK_OK(dlock_trylock(la, 0, 30000));
  ASSERT_DLOCK_OK(dlock_unlock(la));
  ASSERT_EQ(dlock_trylock(ll, 0, 30000), DLOCK_ENOSYNC);
  ASSERT(strstr(dlock_last_error(), "1 of 2") != NULL);
  printf("one of two stopped: Redisson and DLOCK_SYNC_ANY granted; "
         "DLOCK_SYNC_ALL: %s\n",
         dlock_last_error());

  ASSERT_EQ(rp_pause(r[0]), 0);
  waits = lu_cmd_calls(m, "wait");
  int64_t t0 = lu_now_ms();
  peer_refused(p, "NoSyncedSlavesException", "J", "trylock lock %s%s",
               "jv-rs-j 0 30000", "");
  /* Its acquisition's WAIT and its give-back's (retries are off in the
   * peer: Redisson would make retryAttempts more of both). */
  printf("both stopped: Redisson's refused tryLock sent %" PRId64
         " WAIT in %" PRId64 " ms\n",
         lu_cmd_calls(m, "wait") - waits, lu_now_ms() - t0);
  ASSERT_GE(lu_cmd_calls(m, "wait") - waits, 2);
  /* Both give the refused grant back (Redisson's unlock, itself not
   * acknowledged, still ran on the master). */
  ASSERT_EQ(lu_exists(m, "jv-rs-j"), 0);
  ASSERT_EQ(dlock_trylock(la, 0, 30000), DLOCK_ENOSYNC);
  printf("both stopped: Redisson refused; DLOCK_SYNC_ANY: %s\n",
         dlock_last_error());
  ASSERT_EQ(lu_exists(m, "jv-rs-d"), 0);
  ASSERT_EQ(rp_resume(r[0]), 0);
  ASSERT_EQ(rp_resume(r[1]), 0);
  peer_quit(p);
  dlock_free(la);
  dlock_free(ll);
  dlock_client_close(any);
  dlock_client_close(all);
  rp_free(r[0]);
  rp_free(r[1]);
  rp_free(m);
}

/*
 * Redisson's constant back-off (getSpinLock with ConstantBackOff) and
 * dlock's (spin_backoff DLOCK_BACKOFF_CONSTANT): each side's waiter on a
 * spin lock the other holds tries once at once and then every 64 ms at
 * most, and gets the lock once it is released.
 */
TEST(spin_constant_back_off_both_ways) {
  const char *name = "jv-spinc";
  rp_server_t *s = lu_server(0);
  peer_t *p = peer_on(s, 0);
  dlock_options_t o;
  lu_options(&o, s);
  o.spin_backoff = DLOCK_BACKOFF_CONSTANT;
  dlock_client_t *c = lu_client_opts(&o);
  dlock_t *l = NULL;
  ASSERT_DLOCK_OK(dlock_get_spin(c, name, &l));

  /* Redisson waits. */
  ASSERT_DLOCK_OK(dlock_lock(l, 60000));
  int64_t before = lu_cmd_calls(s, "evalsha") + lu_cmd_calls(s, "eval");
  int64_t t0 = lu_now_ms();
  int tag = peer_send(p, "J", "lock spinconst %s", name);
  lu_sleep_ms(1000);
  int64_t java = lu_cmd_calls(s, "evalsha") + lu_cmd_calls(s, "eval") - before;
  int64_t java_ms = lu_now_ms() - t0;
  char tmp[256];
  ASSERT_EQ(peer_poll(p, tag, tmp, sizeof(tmp), 0), 0);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  peer_wait(p, tag, NULL, 0);

  /* dlock waits. */
  waiter_t w;
  waiter_start(&w, l, 60000);
  before = lu_cmd_calls(s, "evalsha") + lu_cmd_calls(s, "eval");
  t0 = lu_now_ms();
  lu_sleep_ms(1000);
  int64_t mine = lu_cmd_calls(s, "evalsha") + lu_cmd_calls(s, "eval") - before;
  int64_t mine_ms = lu_now_ms() - t0;
  ASSERT_EQ(atomic_load(&w.done), 0);
  PEER_DO(p, "unlocked", "J", "unlock spinconst %s", name);
  waiter_got(&w, 30000);
  waiter_finish(&w);
  printf("constant back-off: Redisson tried %" PRId64 " times in %" PRId64
         " ms, dlock %" PRId64 " times in %" PRId64 " ms\n",
         java, java_ms, mine, mine_ms);
  /* Redisson's first attempt may come before 't0' (JVM time), dlock's
   * thread started before it: one more each. */
  ASSERT_LE(java, java_ms / 64 + 2);
  ASSERT_LE(mine, mine_ms / 64 + 2);
  ASSERT_GE(java, 3);
  ASSERT_GE(mine, 3);
  peer_quit(p);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/* One name on each of the cluster's 3 masters ("<prefix>N"). */
static void names_on_masters(cg_group_t *g, const char *prefix,
                             char names[3][32]) {
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
    snprintf(names[n++], 32, "%s", name);
  }
  ASSERT_EQ(n, 3);
}

/* On a 3+3 Redis 7 cluster, where Redisson and dlock both use sharded
 * pub/sub: on a name on every master, locks and fair locks exclude and
 * wake each other both ways, and so do semaphores. */
TEST(cluster_sharded_both_ways) {
  cg_group_t *g = NULL;
  ASSERT_EQ(cg_start(&g), 0);
  char url[512];
  snprintf(url, sizeof(url), "cluster://%s", strstr(cg_url(g), "://") + 3);
  peer_t *p = peer_ready(url, 0);
  dlock_client_t *c = client_url(cg_url(g), 30000);
  char names[3][32], fair[3][32], sems[3][32];
  names_on_masters(g, "jv-cl", names);
  names_on_masters(g, "jv-clf", fair);
  names_on_masters(g, "jv-cls", sems);
  /* Redisson waits on the sharded channel of the lock's master (and on no
   * classic one), as dlock does. */
  dlock_t *l = lu_get(c, names[0]);
  ASSERT_DLOCK_OK(dlock_lock(l, 60000));
  int tag = peer_send(p, "J", "lock lock %s", names[0]);
  char ch[256];
  size_t chlen = lu_channel(ch, sizeof(ch), names[0], strlen(names[0]));
  int64_t sharded = 0, classic = 0, end = lu_now_ms() + 10000;
  while (sharded < 1 && lu_now_ms() < end) {
    lu_sleep_ms(20);
    sharded = classic = 0;
    for (int i = 0; i < cg_nnodes(g); i++) {
      redisReply *r = rp_cmd(cg_node(g, i), "PUBSUB SHARDNUMSUB %b", ch, chlen);
      ASSERT(r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2);
      sharded += r->element[1]->integer;
      freeReplyObject(r);
      classic += lu_numsub(cg_node(g, i), ch, chlen);
    }
  }
  printf("Redisson's waiter on %s: %" PRId64 " sharded, %" PRId64
         " classic subscribers\n",
         names[0], sharded, classic);
  ASSERT_EQ(sharded, 1);
  ASSERT_EQ(classic, 0);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  peer_wait(p, tag, NULL, 0);
  PEER_DO(p, "unlocked", "J", "unlock lock %s", names[0]);
  dlock_free(l);
  for (int k = 0; k < 3; k++) {
    deployed_lock_both_ways(p, c, "lock", names[k], "cluster");
    deployed_lock_both_ways(p, c, "fair", fair[k], "cluster");
    deployed_semaphore_both_ways(p, c, sems[k], "cluster");
  }
  peer_quit(p);
  dlock_client_close(c);
  cg_free(g);
}

/* ---- one server: contention ----------------------------------------------
 */

/* A dlock thread doing 'rounds' of lock, read-and-write KEY plus one,
 * push "C" on KEY:order, unlock. */
typedef struct rounds {
  pthread_t t;
  rp_server_t *s;
  dlock_t *l;
  const char *key;
  int n, failures;
} rounds_t;

static void *rounds_main(void *arg) {
  rounds_t *r = arg;
  redisContext *rc = lu_connect(r->s);
  uint64_t me = dlock_owner_new();
  for (int i = 0; rc != NULL && i < r->n; i++) {
    if (dlock_lock_as(r->l, me, DLOCK_WATCHDOG) != 0) {
      r->failures++;
      continue;
    }
    redisReply *v = redisCommand(rc, "GET %s", r->key);
    long long n = v && v->type == REDIS_REPLY_STRING ? atoll(v->str) : 0;
    freeReplyObject(v);
    freeReplyObject(redisCommand(rc, "SET %s %lld", r->key, n + 1));
    freeReplyObject(redisCommand(rc, "RPUSH %s:order C", r->key));
    if (dlock_unlock_as(r->l, me) != 0)
      r->failures++;
  }
  if (rc == NULL)
    r->failures = r->n;
  redisFree(rc);
  return NULL;
}

/* 4 Redisson threads and 4 dlock threads (two clients) take one lock 25
 * times each and add one to a counter by a read and a write under it: no
 * update is lost. How often the lock changed hands between the languages
 * is printed: it says how the two share a contended lock. */
static void contended(peer_t *p, rp_server_t *s, dlock_client_t *c[2],
                      const char *kind, const char *name, const char *key) {
  enum { THREADS = 4, ROUNDS = 25 };
  dlock_t *l[2] = {get_kind(c[0], kind, name), get_kind(c[1], kind, name)};
  int tag[THREADS];
  rounds_t r[THREADS];
  for (int i = 0; i < THREADS; i++) {
    char actor[8];
    snprintf(actor, sizeof(actor), "R%d", i);
    tag[i] = peer_send(p, actor, "rounds %s %s %s %d", kind, name, key, ROUNDS);
    r[i] = (rounds_t){.s = s, .l = l[i % 2], .key = key, .n = ROUNDS};
    ASSERT_EQ(pthread_create(&r[i].t, NULL, rounds_main, &r[i]), 0);
  }
  for (int i = 0; i < THREADS; i++) {
    char rest[256];
    if (!peer_poll(p, tag[i], rest, sizeof(rest), 60000))
      TEST_FAIL("Redisson's rounds did not end within 60 s");
    ASSERT_EQ(pthread_join(r[i].t, NULL), 0);
    ASSERT_EQ(r[i].failures, 0);
  }
  ASSERT_EQ(lu_get_num_n(s, key, strlen(key)), 2 * THREADS * ROUNDS);
  redisReply *order = rp_cmd(s, "LRANGE %s:order 0 -1", key);
  ASSERT(order != NULL && order->type == REDIS_REPLY_ARRAY);
  ASSERT_EQ(order->elements, 2 * THREADS * ROUNDS);
  int changes = 0, java_first_half = 0;
  for (size_t i = 0; i < order->elements; i++) {
    if (i > 0 && order->element[i]->str[0] != order->element[i - 1]->str[0])
      changes++;
    if (i < order->elements / 2 && order->element[i]->str[0] == 'J')
      java_first_half++;
  }
  freeReplyObject(order);
  printf("%s: %d holds, no update lost; the lock changed hands between "
         "Redisson and dlock %d times; Redisson had %d of the first %d "
         "holds\n",
         kind, 2 * THREADS * ROUNDS, changes, java_first_half,
         THREADS * ROUNDS);
  dlock_free(l[0]);
  dlock_free(l[1]);
}

TEST(contended_lock_loses_no_update) {
  rp_server_t *s = lu_server(0);
  peer_t *p = peer_on(s, 0);
  dlock_client_t *c[2] = {client(s, 30000), client(s, 30000)};
  contended(p, s, c, "lock", "jv-cont", "jv-cont-n");
  contended(p, s, c, "fair", "jv-cont-fair", "jv-cont-fair-n");
  peer_quit(p);
  dlock_client_close(c[0]);
  dlock_client_close(c[1]);
  rp_free(s);
}

/* Runs a peer command until its reply is not an error (a Redisson client
 * between masters throws for a moment), up to 30 s; returns the reply's
 * time and its words in 'rest'. */
static double peer_retry(peer_t *p, const char *actor, const char *cmd,
                         char *rest, size_t n) {
  int64_t end = lu_now_ms() + 30000;
  for (;;) {
    p->errors_ok = 1;
    double t = peer_wait(p, peer_send(p, actor, "%s", cmd), rest, n);
    p->errors_ok = 0;
    if (strncmp(rest, "error", 5) != 0)
      return t;
    if (lu_now_ms() > end)
      TEST_FAIL("Redisson still fails after 30 s: %s", rest);
    lu_sleep_ms(200);
  }
}

/* Through a Sentinel failover, the holds of both sides are on the new
 * master (both wait for replicas after each lock write): each side still
 * keeps the other out there, and each side's unlock on the new master
 * wakes the other's waiter. */
TEST(sentinel_failover_keeps_both_sides_holds) {
  sg_group_t *g = NULL;
  ASSERT_EQ(sg_start(NULL, &g), 0);
  char url[512];
  snprintf(url, sizeof(url), "sentinel://%s", strstr(sg_url(g), "://") + 3);
  peer_t *p = peer_ready(url, 0);
  dlock_options_t o;
  dlock_options_init(&o);
  o.url = sg_url(g);
  o.connect_timeout_ms = 1000;
  o.command_timeout_ms = 2000;
  o.watchdog_timeout_ms = 30000;
  o.outage_wait_ms = 30000;
  dlock_client_t *c = lu_client_opts(&o);
  dlock_t *mine = lu_get(c, "jv-fo-c"), *theirs = lu_get(c, "jv-fo-j");

  PEER_DO(p, "locked", "J", "lock lock jv-fo-j");
  ASSERT_DLOCK_OK(dlock_lock(mine, DLOCK_WATCHDOG));
  int64_t t0 = lu_now_ms();
  int m = sg_failover(g, 60000);
  ASSERT_GT(m, 0);
  printf("failover: node %d is master after %" PRId64 " ms\n", m,
         lu_now_ms() - t0);

  char rest[256];
  t0 = lu_now_ms();
  peer_retry(p, "K", "trylock lock jv-fo-c 0", rest, sizeof(rest));
  ASSERT(strncmp(rest, "false", 5) == 0);
  printf("Redisson answered %" PRId64 " ms after the failover\n",
         lu_now_ms() - t0);
  ASSERT_DLOCK_ERR(dlock_trylock(theirs, 0, DLOCK_WATCHDOG), DLOCK_ETIMEDOUT);

  waiter_t w;
  waiter_start(&w, theirs, DLOCK_WATCHDOG);
  lu_sleep_ms(300);
  ASSERT_EQ(atomic_load(&w.done), 0);
  peer_retry(p, "J", "unlock lock jv-fo-j", rest, sizeof(rest));
  double to_dlock = waiter_got(&w, 30000) - sent_at(rest);
  waiter_finish(&w);

  int tag = peer_waiting(p, "K", "lock lock jv-fo-c");
  double released = now_ms();
  ASSERT_DLOCK_OK(dlock_unlock(mine));
  double to_java = peer_wait(p, tag, NULL, 0) - released;
  PEER_DO(p, "unlocked", "K", "unlock lock jv-fo-c");
  printf("after the failover: dlock woken by Redisson's unlock after %.2f "
         "ms, Redisson by dlock's after %.2f ms\n",
         to_dlock, to_java);
  ASSERT_LT(to_dlock, WAKE_LIMIT_MS);
  ASSERT_LT(to_java, WAKE_LIMIT_MS);
  peer_quit(p);
  dlock_free(mine);
  dlock_free(theirs);
  dlock_client_close(c);
  sg_free(g);
}
