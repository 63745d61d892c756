/*
 * Security: Redis ACL users limited to what dlock needs, passwords that
 * never show in errors or in the dlock command's output, and hostile lock
 * names and owner ids that never reach script text.
 *
 * ACL. The commands dlock needs are those it sends (ACL_DIRECT) and those
 * its Lua scripts run (ACL_SCRIPTED): Redis checks both against the user.
 * A workload touching every lock kind and every path (reentry, waiting on
 * pub/sub and by back-off, fair queues with a vanished waiter, read-write
 * downgrade, MultiLock, RedLock with token alignment, renewal, forced
 * release, inspection) must pass for a user allowed exactly those, also
 * with key and channel patterns narrowed to one name prefix; and without
 * any one of them it must fail with DLOCK_EAUTH or DLOCK_ESERVER and
 * Redis's permission message (which names the command when dlock sends it
 * itself; Redis 7 does not name the command refused inside a script). The
 * list is written out in docs/security.md.
 *
 * Passwords. Failing opens (wrong password, unknown user, unreachable
 * server, bad URL) never put the password in dlock_last_error(); the dlock
 * command never prints it, on failures, in "status" output or in help.
 *
 * Names. Quotes, Lua code, NULs, braces, glob characters, invalid UTF-8,
 * DLOCK_NAME_MAX bytes: every kind locks and unlocks them with exactly the
 * documented keys, leaves other keys alone, and Redis never caches more
 * scripts than dlock embeds (a name spliced into script text would make a
 * new script). Longer names, up to 1 MiB, are refused with DLOCK_EINVAL.
 */
#define _GNU_SOURCE
#include "lock_util.h"
#include "scripts.h"
#include "watchdog.h"

#include <ctype.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern const dlock__script *const dlock__scripts_all[];

/* ---- helpers ------------------------------------------------------------- */

/* A loopback port nothing listens on: bound, then closed. */
static int closed_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT(fd >= 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
  socklen_t len = sizeof a;
  ASSERT_EQ(getsockname(fd, (struct sockaddr *)&a, &len), 0);
  close(fd);
  return ntohs(a.sin_port);
}

/* 1 when 'hay' ('n' bytes) contains the string 'needle'. */
static int has(const char *hay, size_t n, const char *needle) {
  return memmem(hay, n, needle, strlen(needle)) != NULL;
}

/* Opens a client on 'url', expecting failure with 'code'; then checks
 * that no secret of 'secrets' (NULL-terminated) is in the detail. */
static void expect_open_fails(const char *url, int code,
                              const char *const *secrets) {
  dlock_options_t o;
  dlock_options_init(&o);
  o.url = url;
  o.connect_timeout_ms = 2000;
  o.command_timeout_ms = 2000;
  dlock_client_t *c = NULL;
  int rc = dlock_client_open(&o, &c);
  const char *detail = dlock_last_error();
  if (rc != code)
    TEST_FAIL("opening \"%s\" gave %s (%d) \"%s\", expected %s", url,
              dlock_err_name(rc), rc, detail, dlock_err_name(code));
  ASSERT_NULL(c);
  ASSERT(detail[0] != '\0');
  for (const char *const *s = secrets; *s != NULL; s++)
    if (strstr(detail, *s) != NULL)
      TEST_FAIL("the detail of opening \"%s\" shows the password \"%s\": "
                "\"%s\"",
                url, *s, detail);
}

/* ---- ACL users ------------------------------------------------------------
 */

/* The commands dlock sends itself. SELECT is needed only when the URL
 * names a database other than 0; AUTH is always allowed by Redis. */
static const char *const acl_direct[] = {
    "ping",   "evalsha",   "eval",        "exists", "hexists",
    "hget",   "pttl",      "hgetall",     "get",    "lrange",
    "zrange", "subscribe", "unsubscribe", "type"};

/* The commands the scripts run (the files in src/lua). */
static const char *const acl_scripted[] = {
    "del",     "exists", "get",   "hdel",    "hexists",      "hget",
    "hgetall", "hkeys",  "hlen",  "hset",    "incr",         "lindex",
    "lpop",    "lrange", "lrem",  "pexpire", "pttl",         "publish",
    "rpush",   "set",    "time",  "type",    "zadd",         "zrem",
    "zscore",  "incrby", "zcard", "zrange",  "zrangebyscore"};

/* Commands a script may be refused without failing: it runs them with
 * redis.pcall and does without the answer (docs/security.md says what is
 * lost). The users below lack them, so the workloads run without them. */
static const char *const acl_optional[] = {"pubsub"};

#define NDIRECT (sizeof acl_direct / sizeof acl_direct[0])
#define NOPTIONAL (sizeof acl_optional / sizeof acl_optional[0])
#define NSCRIPTED (sizeof acl_scripted / sizeof acl_scripted[0])

static int in_list(const char *const *list, size_t n, const char *cmd) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(list[i], cmd) == 0)
      return 1;
  return 0;
}

/* The union of both lists, each command once, into 'out'; returns the
 * count. */
static size_t acl_commands(const char **out) {
  size_t n = 0;
  for (size_t i = 0; i < NDIRECT; i++)
    out[n++] = acl_direct[i];
  for (size_t i = 0; i < NSCRIPTED; i++)
    if (!in_list(acl_direct, NDIRECT, acl_scripted[i]))
      out[n++] = acl_scripted[i];
  return n;
}

/* Every key and channel pattern at once. */
static const char *const patterns_all[] = {"~*", "&*", NULL};

/* Keys and channels of locks whose names start with "app:": the name
 * itself, the keys dlock derives from it, and the two channel families.
 * The channels are key patterns too: the scripts get them among their
 * KEYS (as Redisson's do), and Redis checks every KEYS entry. */
static const char *const patterns_app[] = {
    "~app:*",
    "~{app:*",
    "~redisson_lock_token:{app:*",
    "~redisson_lock_queue:{app:*",
    "~redisson_lock_timeout:{app:*",
    "~dlock_lock_grant:{app:*",
    "~redisson_unlock_latch:{app:*",
    "~redisson_lock__channel:{app:*",
    "~redisson_rwlock:{app:*",
    "&redisson_lock__channel:{app:*",
    "&redisson_rwlock:{app:*",
    "~dlock_permit_token:{app:*",
    "~redisson_sc:{app:*",
    "&redisson_sc:{app:*",
    "~redisson_countdownlatch__channel__{app:*",
    "&redisson_countdownlatch__channel__{app:*",
    NULL};

/* (Re)defines user 'dl' (password "dl-pw") with 'patterns' and every
 * command of the lists except 'omit' (may be NULL), plus 'extra'. */
static void acl_user(rp_server_t *s, const char *const *patterns,
                     const char *omit, const char *extra) {
  const char *argv[80];
  char plus[64][32];
  size_t argc = 0, np = 0;
  argv[argc++] = "ACL";
  argv[argc++] = "SETUSER";
  argv[argc++] = "dl";
  argv[argc++] = "reset";
  argv[argc++] = "on";
  argv[argc++] = ">dl-pw";
  for (const char *const *p = patterns; *p != NULL; p++)
    argv[argc++] = *p;
  const char *cmds[64];
  size_t n = acl_commands(cmds);
  for (size_t i = 0; i < n; i++) {
    if (omit != NULL && strcmp(cmds[i], omit) == 0)
      continue;
    snprintf(plus[np], sizeof plus[np], "+%s", cmds[i]);
    argv[argc++] = plus[np++];
  }
  if (extra != NULL)
    argv[argc++] = extra;
  lu_ok(rp_cmd_argv(s, (int)argc, argv, NULL));
}

static void acl_url(rp_server_t *s, char *buf, size_t n, const char *db) {
  snprintf(buf, n, "redis://dl:dl-pw@127.0.0.1:%d%s", rp_port(s), db);
}

/* Where a workload stopped: the step, what it returned, and the detail. */
typedef struct wl_result {
  const char *step;
  int rc;
  char detail[512];
} wl_result_t;

/* A waiter on another thread: its lock call's result and detail (the
 * detail is per thread). */
typedef struct waiter {
  pthread_t thread;
  int running; /* started and not joined yet */
  dlock_t *lock;
  uint64_t owner; /* the waiter's own owner, so another thread may unlock */
  int64_t wait_ms;
  int rc;
  int64_t done_ms; /* when the lock call returned */
  char detail[512];
} waiter_t;

static void *waiter_main(void *arg) {
  waiter_t *w = arg;
  w->rc = dlock_trylock_as(w->lock, w->owner, w->wait_ms, 10000);
  w->done_ms = lu_now_ms();
  snprintf(w->detail, sizeof w->detail, "%s", dlock_last_error());
  return NULL;
}

static void waiter_start(waiter_t *w, dlock_t *l, int64_t wait_ms) {
  memset(w, 0, sizeof *w);
  w->lock = l;
  w->owner = dlock_owner_new();
  w->wait_ms = wait_ms;
  ASSERT_EQ(pthread_create(&w->thread, NULL, waiter_main, w), 0);
  w->running = 1;
}

/* Runs a step and stops the workload when it does not give 'want'. */
#define WL(expr, want, name)                                                   \
  do {                                                                         \
    int wl__rc = (int)(expr);                                                  \
    if (wl__rc != (want)) {                                                    \
      res->step = (name);                                                      \
      res->rc = wl__rc;                                                        \
      snprintf(res->detail, sizeof res->detail, "%s", dlock_last_error());     \
      goto out;                                                                \
    }                                                                          \
  } while (0)

/* A check of Redis's state, which has no library detail of its own. */
#define WL_STATE(cond, name, what)                                             \
  do {                                                                         \
    if (!(cond)) {                                                             \
      res->step = (name);                                                      \
      res->rc = 1;                                                             \
      snprintf(res->detail, sizeof res->detail, "%s", (what));                 \
      goto out;                                                                \
    }                                                                          \
  } while (0)

/* The same for a waiter, joined after the release that should wake it
 * at 'released_ms': woken by the unlock message, it gets the lock at once;
 * one that never heard it would get it only at its deadline. */
#define WL_WAITER(w, released_ms, name)                                        \
  do {                                                                         \
    pthread_join((w).thread, NULL);                                            \
    (w).running = 0;                                                           \
    if ((w).rc == 0 && (w).done_ms - (released_ms) > 1000) {                   \
      (w).rc = DLOCK_ETIMEDOUT;                                                \
      snprintf((w).detail, sizeof(w).detail,                                   \
               "no error, but woken %lld ms after the release: the unlock "    \
               "message never came",                                           \
               (long long)((w).done_ms - (released_ms)));                      \
    }                                                                          \
    if ((w).rc != 0) {                                                         \
      res->step = (name);                                                      \
      res->rc = (w).rc;                                                        \
      snprintf(res->detail, sizeof res->detail, "%s", (w).detail);             \
      goto out;                                                                \
    }                                                                          \
  } while (0)

/* The workload: every kind and path, with lock names starting with
 * 'prefix', through clients on 'url'. 0 when all went as expected. */
static int workload(rp_server_t *s, const char *url, const char *prefix,
                    int check_unsubscribe, wl_result_t *res) {
  enum { NH = 24 };
  dlock_t *h[NH] = {NULL};
  dlock_client_t *c1 = NULL, *c2 = NULL;
  char name[8][64];
  static const char *const suffix[] = {"re",   "spin", "fair", "rw",
                                       "red1", "red2", "red3", "x"};
  for (int i = 0; i < 8; i++)
    snprintf(name[i], sizeof name[i], "%s%s", prefix, suffix[i]);
  memset(res, 0, sizeof *res);
  /* A step that fails while a waiter waits ends the workload; the waiter
   * is joined before the handles it uses are freed. */
  waiter_t w = {0};
  dlock_sem_t *sm = NULL;
  dlock_psem_t *ps = NULL;
  dlock_latch_t *lt = NULL;
  dlock_options_t o;
  lu_options(&o, s);
  o.url = url;
  WL(dlock_client_open(&o, &c1), 0, "open the first client");
  WL(dlock_client_open(&o, &c2), 0, "open the second client");

  /* Reentrant: reentry, queries, renewal, a waiter timing out on pub/sub
   * and one woken by the unlock, forced release, inspection. */
  dlock_t *a1 = h[0] = lu_get(c1, name[0]), *a2 = h[1] = lu_get(c2, name[0]);
  WL(dlock_lock(a1, DLOCK_WATCHDOG), 0, "reentrant lock");
  WL(dlock_lock(a1, DLOCK_WATCHDOG), 0, "reentrant lock again");
  WL(dlock_is_locked(a2), 1, "dlock_is_locked");
  WL(dlock_is_held(a1), 1, "dlock_is_held");
  WL(dlock_hold_count(a1), 2, "dlock_hold_count");
  int64_t ttl = dlock_ttl(a1);
  WL(ttl > 0 ? 0 : (int)ttl, 0, "dlock_ttl");
  dlock__watchdog_renew_now(c1);
  WL(dlock_trylock(a2, 50, 5000), DLOCK_ETIMEDOUT, "reentrant, contended");
  WL(dlock_unlock(a1), 0, "reentrant unlock");
  WL(dlock_unlock(a1), 0, "reentrant unlock, last");
  WL(dlock_lock(a1, 5000), 0, "reentrant lock before a waiter");
  waiter_start(&w, a2, 3000);
  lu_sleep_ms(50);
  WL(dlock_unlock(a1), 0, "reentrant unlock waking a waiter");
  int64_t released = lu_now_ms();
  WL_WAITER(w, released, "reentrant waiter woken by pub/sub");
  WL(dlock_force_unlock(a1), 1, "reentrant forced release");
  dlock_info_t *info = NULL;
  WL(dlock_inspect(c1, name[0], strlen(name[0]), &info), 0, "dlock_inspect");
  dlock_info_free(info);

  /* Spin: waiting by back-off, without pub/sub. */
  WL(dlock_get_spin(c1, name[1], &h[2]), 0, "dlock_get_spin");
  WL(dlock_get_spin(c2, name[1], &h[3]), 0, "dlock_get_spin");
  dlock_t *s1 = h[2], *s2 = h[3];
  WL(dlock_lock(s1, 5000), 0, "spin lock");
  WL(dlock_trylock(s2, 30, 5000), DLOCK_ETIMEDOUT, "spin, contended");
  WL(dlock_unlock(s1), 0, "spin unlock");

  /* Fair: a waiter that gives up and leaves the queue, a vanished waiter
   * dropped from the head of the queue, the head waiter woken. */
  WL(dlock_get_fair(c1, name[2], &h[4]), 0, "dlock_get_fair");
  WL(dlock_get_fair(c2, name[2], &h[5]), 0, "dlock_get_fair");
  dlock_t *f1 = h[4], *f2 = h[5];
  WL(dlock_lock(f1, 5000), 0, "fair lock");
  WL(dlock_trylock(f2, 50, 5000), DLOCK_ETIMEDOUT, "fair, contended");
  {
    char q[128], t[128];
    snprintf(q, sizeof q, "redisson_lock_queue:{%s}", name[2]);
    snprintf(t, sizeof t, "redisson_lock_timeout:{%s}", name[2]);
    /* The waiter that gave up left the queue (a best-effort script whose
     * failure would show only here). */
    WL_STATE(lu_exists(s, q) == 0, "fair queue empty after a waiter gave up",
             "the waiter that gave up is still queued");
    lu_ok(rp_cmd(s, "RPUSH %s vanished:1", q));
    lu_ok(rp_cmd(s, "ZADD %s 1 vanished:1", t));
  }
  waiter_start(&w, f2, 3000);
  lu_sleep_ms(50);
  WL(dlock_unlock(f1), 0, "fair unlock waking the head waiter");
  released = lu_now_ms();
  WL_WAITER(w, released, "fair waiter woken");
  WL(dlock_force_unlock(f1), 1, "fair forced release");
  WL(dlock_inspect(c1, name[2], strlen(name[2]), &info), 0,
     "dlock_inspect, fair");
  dlock_info_free(info);

  /* Read-write: write, downgrade, renewal of both, readers sharing, a
   * writer waiting for them, forced release. */
  WL(dlock_get_rw(c1, name[3], &h[6], &h[7]), 0, "dlock_get_rw");
  WL(dlock_get_rw(c2, name[3], &h[8], &h[9]), 0, "dlock_get_rw");
  dlock_t *r1 = h[6], *w1 = h[7], *r2 = h[8], *w2 = h[9];
  WL(dlock_lock(w1, DLOCK_WATCHDOG), 0, "write lock");
  WL(dlock_lock(r1, DLOCK_WATCHDOG), 0, "read lock, downgrade");
  dlock__watchdog_renew_now(c1);
  WL(dlock_unlock(w1), 0, "write unlock");
  WL(dlock_lock(r2, 5000), 0, "read lock, shared");
  waiter_start(&w, w2, 3000);
  lu_sleep_ms(50);
  WL(dlock_unlock(r1), 0, "read unlock");
  WL(dlock_unlock(r2), 0, "read unlock, last");
  released = lu_now_ms();
  WL_WAITER(w, released, "writer woken");
  WL(dlock_unlock_as(w2, w.owner), 0, "write unlock, waiter");
  WL(dlock_lock(r1, 5000), 0, "read lock");
  WL(dlock_force_unlock(w2), 1, "read-write forced release");

  /* MultiLock over a reentrant and a spin lock. */
  {
    dlock_t *parts[] = {a1, s1};
    WL(dlock_get_multi(parts, 2, &h[10]), 0, "dlock_get_multi");
    WL(dlock_lock(h[10], 5000), 0, "MultiLock lock");
    WL(dlock_unlock(h[10]), 0, "MultiLock unlock");
  }

  /* RedLock over three names (one server is enough for the commands);
   * one counter ahead of the others, so the tokens are aligned. */
  {
    char token_key[128];
    snprintf(token_key, sizeof token_key, "redisson_lock_token:{%s}", name[5]);
    lu_ok(rp_cmd(s, "INCRBY %s 5", token_key));
    dlock_t *parts[3];
    for (int i = 0; i < 3; i++)
      parts[i] = h[11 + i] = lu_get(c1, name[4 + i]);
    WL(dlock_get_red(parts, 3, &h[14]), 0, "dlock_get_red");
    WL(dlock_lock(h[14], 5000), 0, "RedLock lock");
    WL(dlock_unlock(h[14]), 0, "RedLock unlock");
  }

  /* Semaphores and latches: every script and query of theirs, waits on
   * their channels included. */
  {
    char sn[80], pn[80], ln[80];
    snprintf(sn, sizeof sn, "%ssem", prefix);
    snprintf(pn, sizeof pn, "%spsem", prefix);
    snprintf(ln, sizeof ln, "%slatch", prefix);
    int64_t n;
    WL(dlock_sem_get(c1, sn, &sm), 0, "dlock_sem_get");
    WL(dlock_sem_try_set_permits(sm, 2), 1, "semaphore try-set");
    WL(dlock_sem_acquire(sm, 2, 0), 0, "semaphore acquire");
    WL(dlock_sem_acquire(sm, 1, 50), DLOCK_ETIMEDOUT, "semaphore, waiting");
    WL(dlock_sem_release(sm, 2), 0, "semaphore release");
    WL(dlock_sem_add_permits(sm, 1, &n), 0, "semaphore add permits");
    WL(dlock_sem_available(sm, &n), 0, "semaphore available");
    WL(dlock_sem_drain(sm, &n), 0, "semaphore drain");
    WL(dlock_psem_get(c1, pn, &ps), 0, "dlock_psem_get");
    WL(dlock_psem_try_set_permits(ps, 1), 1, "expirable semaphore try-set");
    dlock_permit_t pm, none;
    WL(dlock_psem_acquire(ps, 0, DLOCK_WATCHDOG, &pm), 0,
       "expirable permit acquire");
    dlock__watchdog_renew_now(c1);
    WL(dlock_psem_acquire(ps, 50, 5000, &none), DLOCK_ETIMEDOUT,
       "expirable permit, waiting");
    WL(dlock_psem_count(ps, &n, NULL), 0, "expirable semaphore count");
    WL(dlock_psem_release(ps, pm.id), 0, "expirable permit release");
    dlock_counter_info_t *ci = NULL;
    WL(dlock_inspect_counter(c1, pn, strlen(pn), &ci), 0,
       "dlock_inspect_counter");
    dlock_counter_info_free(ci);
    WL(dlock_latch_get(c1, ln, &lt), 0, "dlock_latch_get");
    WL(dlock_latch_try_set_count(lt, 1), 1, "latch try-set");
    WL(dlock_latch_await(lt, 50), DLOCK_ETIMEDOUT, "latch, waiting");
    WL(dlock_latch_count_down(lt, NULL), 0, "latch count down");
    WL(dlock_latch_count(lt, &n), 0, "latch count");
  }

  /* Channels nobody waits on are dropped after a short linger. */
  if (check_unsubscribe) {
    lu_sleep_ms(800);
    redisReply *r = rp_cmd(s, "PUBSUB CHANNELS *");
    ASSERT_NOT_NULL(r);
    size_t left = r->elements;
    freeReplyObject(r);
    WL_STATE(left == 0, "idle channels unsubscribed",
             "channels nobody waits on are still subscribed");
  }

out:
  if (w.running)
    pthread_join(w.thread, NULL);
  dlock_sem_free(sm);
  dlock_psem_free(ps);
  dlock_latch_free(lt);
  for (int i = NH - 1; i >= 0; i--)
    dlock_free(h[i]);
  dlock_client_close(c1);
  dlock_client_close(c2);
  return res->step != NULL ? -1 : 0;
}

static void expect_workload_ok(rp_server_t *s, const char *url,
                               const char *prefix) {
  wl_result_t res;
  if (workload(s, url, prefix, 1, &res) != 0)
    TEST_FAIL("%s (%s): %s (%d) \"%s\"", res.step, url, dlock_err_name(res.rc),
              res.rc, res.detail);
}

/* The scripted list is exactly what the embedded scripts call, so that a
 * script using a new command cannot go unnoticed here or in the docs. */
TEST(acl_list_matches_the_scripts) {
  char seen[64][32];
  size_t nseen = 0;
  for (const dlock__script *const *p = dlock__scripts_all; *p != NULL; p++) {
    const char *body = (*p)->body;
    for (const char *q = strstr(body, "redis."); q != NULL;
         q = strstr(q + 1, "redis.")) {
      const char *open = NULL;
      if (strncmp(q, "redis.call(", 11) == 0)
        open = q + 11;
      else if (strncmp(q, "redis.pcall(", 12) == 0)
        open = q + 12;
      if (open == NULL)
        continue;
      if (*open != '\'' && *open != '"')
        TEST_FAIL("script %s calls a command that is not a literal: %.40s",
                  (*p)->name, q);
      size_t len = strcspn(open + 1, "'\"");
      ASSERT_LT(len, 32);
      char cmd[32];
      for (size_t i = 0; i < len; i++)
        cmd[i] = (char)tolower((unsigned char)open[1 + i]);
      cmd[len] = '\0';
      if (in_list(acl_optional, NOPTIONAL, cmd)) {
        if (strncmp(q, "redis.pcall(", 12) != 0)
          TEST_FAIL("script %s runs optional \"%s\" without pcall", (*p)->name,
                    cmd);
        continue;
      }
      if (!in_list(acl_scripted, NSCRIPTED, cmd))
        TEST_FAIL("script %s runs \"%s\", which is not in acl_scripted "
                  "(nor in docs/security.md)",
                  (*p)->name, cmd);
      int known = 0;
      for (size_t i = 0; i < nseen; i++)
        known |= strcmp(seen[i], cmd) == 0;
      if (!known && nseen < 64)
        snprintf(seen[nseen++], sizeof seen[0], "%s", cmd);
    }
  }
  for (size_t i = 0; i < NSCRIPTED; i++) {
    int used = 0;
    for (size_t j = 0; j < nseen; j++)
      used |= strcmp(seen[j], acl_scripted[i]) == 0;
    if (!used)
      TEST_FAIL("\"%s\" is in acl_scripted but no script runs it",
                acl_scripted[i]);
  }
}

TEST(acl_user_with_exactly_the_listed_commands) {
  rp_server_t *s = lu_server(0);
  char url[128];
  acl_user(s, patterns_all, NULL, NULL);
  acl_url(s, url, sizeof url, "");
  expect_workload_ok(s, url, "acl:");
  rp_free(s);
}

TEST(acl_user_with_narrow_key_patterns) {
  rp_server_t *s = lu_server(0);
  char url[128];
  acl_user(s, patterns_app, NULL, NULL);
  acl_url(s, url, sizeof url, "");
  expect_workload_ok(s, url, "app:");

  /* A lock outside the prefix is refused, clearly. */
  dlock_options_t o;
  lu_options(&o, s);
  o.url = url;
  dlock_client_t *c = lu_client_opts(&o);
  dlock_t *l = lu_get(c, "other:lock");
  int rc = dlock_lock(l, 5000);
  ASSERT(rc == DLOCK_EAUTH || rc == DLOCK_ESERVER);
  printf("outside the key patterns: %s \"%s\"\n", dlock_err_name(rc),
         dlock_last_error());
  ASSERT_NOT_NULL(strstr(dlock_last_error(), "NOPERM"));
  ASSERT_EQ(lu_exists(s, "other:lock"), 0);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

TEST(acl_select_for_a_database) {
  rp_server_t *s = lu_server(0);
  char url[128];
  acl_user(s, patterns_all, NULL, "+select");
  acl_url(s, url, sizeof url, "/3");
  dlock_options_t o;
  lu_options(&o, s);
  o.url = url;
  dlock_client_t *c = lu_client_opts(&o);
  dlock_t *l = lu_get(c, "acl-db");
  ASSERT_DLOCK_OK(dlock_lock(l, 5000));
  ASSERT_DLOCK_OK(dlock_unlock(l));
  dlock_free(l);
  dlock_client_close(c);

  acl_user(s, patterns_all, NULL, NULL);
  c = NULL;
  int rc = dlock_client_open(&o, &c);
  ASSERT(rc == DLOCK_EAUTH || rc == DLOCK_ESERVER);
  ASSERT_NOT_NULL(strstr(dlock_last_error(), "select"));
  rp_free(s);
}

TEST(acl_every_listed_command_is_needed) {
  rp_server_t *s = lu_server(0);
  char url[128];
  acl_url(s, url, sizeof url, "");
  const char *cmds[64];
  size_t n = acl_commands(cmds);
  for (size_t i = 0; i < n; i++) {
    acl_user(s, patterns_all, cmds[i], NULL);
    lu_ok(rp_cmd(s, "FLUSHALL"));
    wl_result_t res;
    int unsub = strcmp(cmds[i], "unsubscribe") == 0;
    int rc = workload(s, url, "acl:", unsub, &res);
    if (rc == 0)
      TEST_FAIL("the workload passed without \"%s\": is it needed?", cmds[i]);
    printf("without %-11s %s: %s (%s)\n", cmds[i], res.step,
           res.rc == 1 ? "left behind" : dlock_err_name(res.rc), res.detail);
    /* Refusals no caller could be told of show only by what they left
     * behind: a best-effort script (a fair waiter leaving the queue), and
     * the background UNSUBSCRIBE of idle channels. */
    if (res.rc == 1 && (strstr(res.step, "queue empty") != NULL ||
                        strstr(res.step, "unsubscribed") != NULL))
      continue;
    if (res.rc != DLOCK_EAUTH && res.rc != DLOCK_ESERVER)
      TEST_FAIL("without \"%s\", %s gave %s (%d) \"%s\"; expected "
                "DLOCK_EAUTH or DLOCK_ESERVER",
                cmds[i], res.step, dlock_err_name(res.rc), res.rc, res.detail);
    /* Redis names the command when dlock sent it itself; inside a script
     * it only says the user cannot run "this command". */
    char quoted[40];
    snprintf(quoted, sizeof quoted, "'%s'", cmds[i]);
    int named = strstr(res.detail, quoted) != NULL;
    int refused = strstr(res.detail, "NOPERM") != NULL ||
                  strstr(res.detail, "can't run this command") != NULL;
    if (!in_list(acl_scripted, NSCRIPTED, cmds[i]) && !named)
      TEST_FAIL("without \"%s\": the detail does not name it: \"%s\"", cmds[i],
                res.detail);
    if (!named && !refused)
      TEST_FAIL("without \"%s\": the detail does not say it was refused: "
                "\"%s\"",
                cmds[i], res.detail);
  }
  rp_free(s);
}

/* ---- passwords in errors ------------------------------------------------- */

TEST(passwords_absent_from_open_errors) {
  rp_options_t ro;
  rp_options_init(&ro);
  ro.requirepass = "Srv-Pw-7781";
  rp_server_t *s = lu_server_opts(&ro);
  int port = rp_port(s), dead = closed_port();
  lu_ok(rp_cmd(s, "ACL SETUSER carol on >CarolPw-5521 ~* &* +@all"));
  lu_ok(rp_cmd(s, "ACL SETUSER dave off >DavePw-9013 ~* &* +@all"));
  char url[256];

  static const char *const wrong[] = {"WrongPw-4431", NULL};
  snprintf(url, sizeof url, "redis://:WrongPw-4431@127.0.0.1:%d", port);
  expect_open_fails(url, DLOCK_EAUTH, wrong);

  static const char *const bad_user[] = {"BadPw-6612", NULL};
  snprintf(url, sizeof url, "redis://carol:BadPw-6612@127.0.0.1:%d", port);
  expect_open_fails(url, DLOCK_EAUTH, bad_user);
  snprintf(url, sizeof url, "redis://nobody:BadPw-6612@127.0.0.1:%d/2", port);
  expect_open_fails(url, DLOCK_EAUTH, bad_user);

  static const char *const disabled[] = {"DavePw-9013", NULL};
  snprintf(url, sizeof url, "redis://dave:DavePw-9013@127.0.0.1:%d", port);
  expect_open_fails(url, DLOCK_EAUTH, disabled);

  /* %-encoded: neither the text of the URL nor the decoded password. */
  static const char *const encoded[] = {"Enc%41Pw-77", "EncAPw-77", NULL};
  snprintf(url, sizeof url, "redis://:Enc%%41Pw-77@127.0.0.1:%d", port);
  expect_open_fails(url, DLOCK_EAUTH, encoded);

  static const char *const unreachable[] = {"Unreach-9912", NULL};
  snprintf(url, sizeof url, "redis://:Unreach-9912@127.0.0.1:%d", dead);
  expect_open_fails(url, DLOCK_EIO, unreachable);
  expect_open_fails("unix://:Unreach-9912@/nonexistent-dlock/redis.sock",
                    DLOCK_EIO, unreachable);
  /* TLS to a plain port: the handshake fails, the password never went. */
  snprintf(url, sizeof url, "rediss://:Unreach-9912@127.0.0.1:%d", dead);
  expect_open_fails(url, DLOCK_EIO, unreachable);

  /* URLs refused before any connection. */
  static const char *const invalid[] = {"BadUrlPw-12", NULL};
  static const char *const bad_urls[] = {
      "redis://:BadUrlPw-12@127.0.0.1:0",
      "redis://:BadUrlPw-12@127.0.0.1:99999",
      "redis://:BadUrlPw-12@127.0.0.1:6379/x",
      "redis://:BadUrlPw-12@:6379",
      "redis://:BadUrlPw-12@[::1",
      "rediss://:BadUrlPw-12@127.0.0.1:0",
      "http://:BadUrlPw-12@127.0.0.1",
      "BadUrlPw-12",
      "unix://:BadUrlPw-12@relative/path",
      "unix://:BadUrlPw-12@/tmp/x?db=y",
      NULL};
  for (const char *const *u = bad_urls; *u != NULL; u++) {
    /* The bare word is no password to the parser, which may quote it. */
    if (strcmp(*u, "BadUrlPw-12") == 0)
      continue;
    expect_open_fails(*u, DLOCK_EINVAL, invalid);
  }
  static const char *const bad_escape[] = {"Bad%zzPw", "zzPw", NULL};
  expect_open_fails("redis://:Bad%zzPw@127.0.0.1", DLOCK_EINVAL, bad_escape);
  ASSERT_EQ(lu_dbsize(s), 0);
  rp_free(s);
}

/* "redis://user@host": a user name without a password. Redis reads a
 * single AUTH argument as the default user's password, so the open must
 * fail cleanly, and not print the word either. */
TEST(url_with_a_user_and_no_password) {
  rp_options_t ro;
  rp_options_init(&ro);
  ro.requirepass = "Srv-Pw-7781";
  rp_server_t *s = lu_server_opts(&ro);
  char url[256];
  snprintf(url, sizeof url, "redis://LoneWord-3141@127.0.0.1:%d", rp_port(s));
  dlock_options_t o;
  dlock_options_init(&o);
  o.url = url;
  dlock_client_t *c = NULL;
  int rc = dlock_client_open(&o, &c);
  printf("\"%s\": %s \"%s\"\n", url, dlock_err_name(rc), dlock_last_error());
  ASSERT(rc == DLOCK_EAUTH || rc == DLOCK_EINVAL);
  ASSERT_NULL(c);
  ASSERT_NULL(strstr(dlock_last_error(), "LoneWord-3141"));
  rp_free(s);
}

/* ---- passwords and the dlock command ----------------------------------- */

/* The dlock binary, found as test_cli finds it. */
static const char *cli_path(void) {
  const char *env = getenv("DLOCK_CLI");
  if (env != NULL && env[0] != '\0')
    return env;
#ifdef DLOCK_CLI_PATH
  return DLOCK_CLI_PATH;
#else
  static char path[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  ASSERT_GT(n, 0);
  path[n] = '\0';
  char *slash = strrchr(path, '/');
  ASSERT_NOT_NULL(slash);
  snprintf(slash + 1, sizeof path - (size_t)(slash + 1 - path), "dlock");
  return path;
#endif
}

typedef struct cli_run {
  int status; /* exit status, or 128 + signal */
  char out[65536];
  size_t len; /* stdout and stderr together */
} cli_run_t;

/* Runs the dlock command with 'argv' (NULL-terminated, without argv[0])
 * and $DLOCK_URL set to 'env_url' (NULL: unset), and collects its output,
 * for at most 20 s. */
static void run_cli(cli_run_t *r, const char *env_url,
                    const char *const *argv) {
  const char *path = cli_path();
  if (access(path, X_OK) != 0)
    TEST_FAIL("the dlock command is not at %s (build it first)", path);
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  ASSERT(pid >= 0);
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    if (env_url != NULL)
      setenv("DLOCK_URL", env_url, 1);
    else
      unsetenv("DLOCK_URL");
    const char *args[32];
    int n = 0;
    args[n++] = "dlock";
    for (; argv[n - 1] != NULL && n < 31; n++)
      args[n] = argv[n - 1];
    args[n] = NULL;
    execv(path, (char *const *)args);
    _exit(127);
  }
  close(fds[1]);
  memset(r, 0, sizeof *r);
  int64_t end = lu_now_ms() + 20000;
  for (;;) {
    struct pollfd p = {fds[0], POLLIN, 0};
    int left = (int)(end - lu_now_ms());
    if (left <= 0 || poll(&p, 1, left) <= 0) {
      kill(pid, SIGKILL);
      break;
    }
    ssize_t k = read(fds[0], r->out + r->len, sizeof r->out - 1 - r->len);
    if (k <= 0)
      break;
    r->len += (size_t)k;
  }
  close(fds[0]);
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  r->out[r->len] = '\0';
}

/* Runs the command and checks that none of 'secrets' shows and that it
 * exited with 'status' (-1: any). */
static void cli_expect(const char *env_url, const char *const *argv, int status,
                       const char *const *secrets) {
  cli_run_t *r = malloc(sizeof *r);
  ASSERT_NOT_NULL(r);
  run_cli(r, env_url, argv);
  char shown[256] = "";
  for (const char *const *a = argv; *a != NULL; a++)
    snprintf(shown + strlen(shown), sizeof shown - strlen(shown), " %s", *a);
  if (status >= 0 && r->status != status)
    TEST_FAIL("dlock%s exited %d, expected %d; output:\n%s", shown, r->status,
              status, r->out);
  for (const char *const *s = secrets; *s != NULL; s++)
    if (has(r->out, r->len, *s))
      TEST_FAIL("dlock%s printed the password \"%s\":\n%s", shown, *s, r->out);
  free(r);
}

TEST(cli_never_prints_passwords) {
  rp_options_t ro;
  rp_options_init(&ro);
  ro.requirepass = "RightPw-2718";
  rp_server_t *s = lu_server_opts(&ro);
  int port = rp_port(s), dead = closed_port();
  static const char *const secrets[] = {
      "RightPw-2718", "WrongCliPw-11", "Unreach-8080",
      "BadUrlPw-12",  "EnvPw-5566",    "Pct%41Pw-33",
      "PctAPw-33",    "HelpPw-99",     NULL};
  char right[128], wrong[128], unreachable[128], bad[128], pct[128],
      env_dead[128];
  snprintf(right, sizeof right, "redis://:RightPw-2718@127.0.0.1:%d", port);
  snprintf(wrong, sizeof wrong, "redis://:WrongCliPw-11@127.0.0.1:%d", port);
  snprintf(unreachable, sizeof unreachable,
           "redis://:Unreach-8080@127.0.0.1:%d", dead);
  snprintf(bad, sizeof bad, "redis://:BadUrlPw-12@127.0.0.1:99999");
  snprintf(pct, sizeof pct, "redis://:Pct%%41Pw-33@127.0.0.1:%d", port);
  snprintf(env_dead, sizeof env_dead, "redis://:EnvPw-5566@127.0.0.1:%d", dead);

  /* Refused, unreachable, malformed. */
  const char *const a1[] = {"--url", wrong, "status", "cli-pw", NULL};
  cli_expect(NULL, a1, 69, secrets);
  const char *const a2[] = {"--url", unreachable, "status", "cli-pw", NULL};
  cli_expect(NULL, a2, 69, secrets);
  const char *const a3[] = {"--url", bad, "status", "cli-pw", NULL};
  cli_expect(NULL, a3, 64, secrets);
  const char *const a4[] = {"--url", pct, "unlock", "--force", "cli-pw", NULL};
  cli_expect(NULL, a4, 69, secrets);
  const char *const a5[] = {"status", "cli-pw", NULL};
  cli_expect(env_dead, a5, 69, secrets);
  const char *const a6[] = {"--url",  wrong, "run",  "--wait", "0",
                            "cli-pw", "--",  "true", NULL};
  cli_expect(NULL, a6, 69, secrets);
  const char *const a7[] = {"--url", bad, "--url", bad, "status", "x", NULL};
  cli_expect(NULL, a7, 64, secrets);

  /* Working: status (table and JSON), a run that waits in vain while the
   * lock is held, a forced unlock, a RedLock with a node down. */
  dlock_options_t o;
  lu_options(&o, s);
  o.url = right;
  dlock_client_t *c = lu_client_opts(&o);
  dlock_t *l = lu_get(c, "cli-pw");
  ASSERT_DLOCK_OK(dlock_lock(l, 20000));
  const char *const b1[] = {"--url", right, "status", "cli-pw", "free", NULL};
  cli_expect(NULL, b1, 0, secrets);
  const char *const b2[] = {"--url", right, "status", "--json", "cli-pw", NULL};
  cli_expect(NULL, b2, 0, secrets);
  const char *const b3[] = {"status", "cli-pw", NULL};
  cli_expect(right, b3, 0, secrets);
  const char *const b4[] = {"--url",  right, "run",  "--wait", "0",
                            "cli-pw", "--",  "true", NULL};
  cli_expect(NULL, b4, 75, secrets);
  const char *const b5[] = {"--url", right,    "--url",  unreachable, "--url",
                            wrong,   "status", "cli-pw", NULL};
  cli_expect(NULL, b5, -1, secrets);
  const char *const b6[] = {"--url", right,  "--url",  unreachable, "--url",
                            wrong,   "run",  "--wait", "0",         "x",
                            "--",    "true", NULL};
  cli_expect(NULL, b6, -1, secrets);
  const char *const b7[] = {"--url",   right,    "unlock",
                            "--force", "cli-pw", NULL};
  cli_expect(NULL, b7, 0, secrets);
  const char *const b8[] = {"--url", right, "run", "cli-pw",
                            "--",    "sh",  "-c",  "echo \"$DLOCK_NAME\"",
                            NULL};
  cli_expect(NULL, b8, 0, secrets);
  dlock_free(l);
  dlock_client_close(c);

  /* Help, with a password on the command line and in the environment. */
  static const char *const help_url = "redis://:HelpPw-99@127.0.0.1:1";
  const char *const h1[] = {"--url", help_url, "--help", NULL};
  cli_expect(help_url, h1, 0, secrets);
  static const char *const commands[] = {"run", "status", "unlock", "demo"};
  for (size_t i = 0; i < 4; i++) {
    const char *const h2[] = {"--url", help_url, commands[i], "--help", NULL};
    cli_expect(help_url, h2, 0, secrets);
  }
  rp_free(s);
}

/* ---- hostile names --------------------------------------------------------
 */

typedef struct bytes {
  const char *p;
  size_t n;
} bytes_t;

#define B(lit)                                                                 \
  { lit, sizeof(lit) - 1 }

static const bytes_t hostile[] = {
    B("it's a \"quoted\" name"),
    B("'); redis.call('flushall') --"),
    B("\"); redis.call('flushall'); --[["),
    B("]]..redis.call('flushall')..[["),
    B("return redis.call('flushall')"),
    B("{"),
    B("}"),
    B("{}"),
    B("}{"),
    B("a{b}c"),
    B("{{x}}"),
    B("nul\0inside"),
    B("\0"),
    B("trailing nul\0"),
    B("line\nbreak\r\ttab"),
    B("%s%n%x%%"),
    B("\\"),
    B("*?[a-z]"),
    B(" "),
    B("\xc4\xb9\xc3\xb6\xc3\xa7k \xe2\x98\x83"),
    B("\xff\xfe\x80"),
};
#define NHOSTILE (sizeof hostile / sizeof hostile[0])

/* A growable set of byte strings, for comparing key lists. */
typedef struct keyset {
  char **k;
  size_t *n;
  size_t len, cap;
} keyset_t;

static void ks_add(keyset_t *s, const char *p, size_t n) {
  if (s->len == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 16;
    s->k = realloc(s->k, s->cap * sizeof *s->k);
    s->n = realloc(s->n, s->cap * sizeof *s->n);
    ASSERT(s->k != NULL && s->n != NULL);
  }
  s->k[s->len] = malloc(n + 1);
  ASSERT_NOT_NULL(s->k[s->len]);
  memcpy(s->k[s->len], p, n);
  s->k[s->len][n] = '\0';
  s->n[s->len++] = n;
}

static void ks_free(keyset_t *s) {
  for (size_t i = 0; i < s->len; i++)
    free(s->k[i]);
  free(s->k);
  free(s->n);
  memset(s, 0, sizeof *s);
}

static int ks_has(const keyset_t *s, const char *p, size_t n) {
  for (size_t i = 0; i < s->len; i++)
    if (s->n[i] == n && memcmp(s->k[i], p, n) == 0)
      return 1;
  return 0;
}

/* 'name' with the prefix ("prefix:{name}", or "prefix:name" when the name
 * has a '{'), as the README's layout table says. */
static void ks_prefixed(keyset_t *s, const char *prefix, bytes_t name) {
  size_t plen = strlen(prefix);
  int braces = memchr(name.p, '{', name.n) == NULL;
  size_t n = plen + 1 + name.n + (braces ? 2 : 0);
  char *buf = malloc(n);
  ASSERT_NOT_NULL(buf);
  size_t i = 0;
  memcpy(buf, prefix, plen);
  i = plen;
  buf[i++] = ':';
  if (braces)
    buf[i++] = '{';
  memcpy(buf + i, name.p, name.n);
  i += name.n;
  if (braces)
    buf[i++] = '}';
  ks_add(s, buf, i);
  free(buf);
}

/* A read hold's lease key: "{name}:<field>:rwlock_timeout:1". */
static void ks_read_timeout(keyset_t *s, bytes_t name, const char *field) {
  int braces = memchr(name.p, '{', name.n) == NULL;
  size_t fl = strlen(field);
  size_t n = name.n + fl + 32;
  char *buf = malloc(n);
  ASSERT_NOT_NULL(buf);
  size_t i = 0;
  if (braces)
    buf[i++] = '{';
  memcpy(buf + i, name.p, name.n);
  i += name.n;
  if (braces)
    buf[i++] = '}';
  i += (size_t)snprintf(buf + i, n - i, ":%s:rwlock_timeout:1", field);
  ks_add(s, buf, i);
  free(buf);
}

/* Every key in the database, except the unlock latches, which live a few
 * seconds after each unlock; those are counted in '*latches'. */
static void ks_from_server(keyset_t *s, rp_server_t *srv, size_t *latches) {
  redisReply *r = rp_cmd(srv, "KEYS *");
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->type, REDIS_REPLY_ARRAY);
  *latches = 0;
  for (size_t i = 0; i < r->elements; i++) {
    const redisReply *k = r->element[i];
    if (k->len >= 22 && memcmp(k->str, "redisson_unlock_latch:", 22) == 0)
      (*latches)++;
    else
      ks_add(s, k->str, k->len);
  }
  freeReplyObject(r);
}

static void print_bytes(char *out, size_t size, const char *p, size_t n) {
  size_t o = 0;
  for (size_t i = 0; i < n && o + 5 < size; i++) {
    unsigned char ch = (unsigned char)p[i];
    if (ch >= 0x20 && ch < 0x7f && ch != '\\')
      out[o++] = (char)ch;
    else
      o += (size_t)snprintf(out + o, size - o, "\\x%02x", ch);
  }
  if (n > 0 && o + 5 >= size && o + 4 < size)
    o += (size_t)snprintf(out + o, size - o, "...");
  out[o] = '\0';
}

/* Compares the keys in Redis with 'want' plus the sentinels. */
static void expect_keys(rp_server_t *srv, const keyset_t *want, bytes_t name,
                        const char *kind, const char *when) {
  keyset_t got = {0};
  size_t latches;
  ks_from_server(&got, srv, &latches);
  char shown[160];
  print_bytes(shown, sizeof shown, name.p, name.n);
  for (size_t i = 0; i < want->len; i++) {
    if (!ks_has(&got, want->k[i], want->n[i])) {
      char key[200];
      print_bytes(key, sizeof key, want->k[i], want->n[i]);
      TEST_FAIL("%s lock \"%s\", %s: key \"%s\" is missing", kind, shown, when,
                key);
    }
  }
  for (size_t i = 0; i < got.len; i++) {
    if (!ks_has(want, got.k[i], got.n[i])) {
      char key[200];
      print_bytes(key, sizeof key, got.k[i], got.n[i]);
      TEST_FAIL("%s lock \"%s\", %s: unexpected key \"%s\"", kind, shown, when,
                key);
    }
  }
  ks_free(&got);
}

/* The keys that are not dlock's, set before and compared after. */
static void put_sentinels(rp_server_t *s) {
  lu_ok(rp_cmd(s, "SET sentinel keep-me"));
  lu_ok(rp_cmd(s, "HSET other-lock someone:1 1"));
}

static void check_sentinels(rp_server_t *s) {
  redisReply *r = rp_cmd(s, "GET sentinel");
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->type, REDIS_REPLY_STRING);
  ASSERT_STR_EQ(r->str, "keep-me");
  freeReplyObject(r);
  ASSERT_EQ(lu_hget_num(s, "other-lock", "someone:1"), 1);
}

static void sentinel_keys(keyset_t *want) {
  ks_add(want, "sentinel", 8);
  ks_add(want, "other-lock", 10);
}

/* Scripts Redis has cached (INFO memory): one per script body sent. */
static int64_t cached_scripts(rp_server_t *s) {
  redisReply *r = rp_cmd(s, "INFO memory");
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->type, REDIS_REPLY_STRING);
  const char *p = strstr(r->str, "number_of_cached_scripts:");
  ASSERT_NOT_NULL(p);
  int64_t n = strtoll(p + strlen("number_of_cached_scripts:"), NULL, 10);
  freeReplyObject(r);
  return n;
}

static const struct {
  dlock_kind_t kind;
  const char *label;
} kinds[] = {{DLOCK_REENTRANT, "reentrant"},
             {DLOCK_FAIR, "fair"},
             {DLOCK_SPIN, "spin"},
             {DLOCK_READ, "read"},
             {DLOCK_WRITE, "write"}};

/* Locks 'name' with each kind, checks the exact keys while held and after,
 * that the unlock is announced on the documented channel, that inspection
 * sees the holder, and that nothing else changed. */
static void exercise_name(rp_server_t *s, dlock_client_t *c, bytes_t name) {
  char field[256];
  lu_field(field, sizeof field, c, dlock_self());
  char shown[160];
  print_bytes(shown, sizeof shown, name.p, name.n);
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
    lu_ok(rp_cmd(s, "FLUSHALL"));
    put_sentinels(s);
    dlock_t *l = NULL;
    ASSERT_DLOCK_OK(dlock_get_kind(c, kinds[k].kind, name.p, name.n, &l));
    size_t got_len = 0;
    const char *got = dlock_name(l, &got_len);
    ASSERT_EQ(got_len, name.n);
    ASSERT(memcmp(got, name.p, name.n) == 0);

    ASSERT_DLOCK_OK(dlock_lock(l, 20000));
    keyset_t want = {0};
    sentinel_keys(&want);
    ks_add(&want, name.p, name.n);
    ks_prefixed(&want, "redisson_lock_token", name);
    if (kinds[k].kind == DLOCK_READ)
      ks_read_timeout(&want, name, field);
    expect_keys(s, &want, name, kinds[k].label, "held");

    /* The holder's field, exactly. */
    char wfield[300];
    snprintf(wfield, sizeof wfield, "%s%s", field,
             kinds[k].kind == DLOCK_WRITE ? ":write" : "");
    redisReply *r = rp_cmd(s, "HGET %b %s", name.p, name.n, wfield);
    ASSERT_NOT_NULL(r);
    if (r->type != REDIS_REPLY_STRING || strcmp(r->str, "1") != 0)
      TEST_FAIL("%s lock \"%s\": no field \"%s\" with count 1", kinds[k].label,
                shown, wfield);
    freeReplyObject(r);
    dlock_info_t *info = NULL;
    ASSERT_DLOCK_OK(dlock_inspect(c, name.p, name.n, &info));
    ASSERT_EQ(info->locked, 1);
    ASSERT_EQ(info->nholders, 1);
    ASSERT_STR_EQ(info->holders[0].owner, wfield);
    dlock_info_free(info);

    /* The unlock message goes to the documented channel (the fair lock
     * tells only its next waiter, and has none here). */
    char chan[DLOCK_NAME_MAX + 64];
    const char *prefix =
        kinds[k].kind == DLOCK_READ || kinds[k].kind == DLOCK_WRITE
            ? "redisson_rwlock"
            : "redisson_lock__channel";
    size_t chan_len = 0;
    redisContext *sub = NULL;
    if (kinds[k].kind != DLOCK_FAIR) {
      chan_len = lu_keyname(chan, sizeof chan, prefix, name.p, name.n);
      sub = lu_subscribe(s, chan, chan_len);
    }
    ASSERT_DLOCK_OK(dlock_unlock(l));
    if (sub != NULL) {
      char msg[32];
      if (!lu_sub_wait(sub, 2000, msg, sizeof msg, NULL, 0))
        TEST_FAIL("%s lock \"%s\": no unlock message on its channel",
                  kinds[k].label, shown);
      redisFree(sub);
    }

    /* Only the fencing counter (and a short-lived latch) stays. */
    ks_free(&want);
    sentinel_keys(&want);
    ks_prefixed(&want, "redisson_lock_token", name);
    expect_keys(s, &want, name, kinds[k].label, "after unlock");
    ks_free(&want);
    check_sentinels(s);
    dlock_free(l);
  }
}

TEST(hostile_names_every_kind) {
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  for (size_t i = 0; i < NHOSTILE; i++)
    exercise_name(s, c, hostile[i]);

  /* Exactly DLOCK_NAME_MAX bytes works, braces and all. */
  char *big = malloc(DLOCK_NAME_MAX);
  ASSERT_NOT_NULL(big);
  memset(big, 'n', DLOCK_NAME_MAX);
  big[0] = '\'';
  big[DLOCK_NAME_MAX - 1] = '}';
  bytes_t max = {big, DLOCK_NAME_MAX};
  exercise_name(s, c, max);
  big[DLOCK_NAME_MAX / 2] = '{';
  exercise_name(s, c, max);
  free(big);

  /* A name spliced into script text would have made a new script. */
  int nscripts = 0;
  for (const dlock__script *const *p = dlock__scripts_all; *p != NULL; p++)
    nscripts++;
  ASSERT_LE(cached_scripts(s), nscripts);
  dlock_client_close(c);
  rp_free(s);
}

TEST(names_longer_than_the_limit_are_refused) {
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  put_sentinels(s);
  static const size_t sizes[] = {DLOCK_NAME_MAX + 1, 1 << 20};
  /* One byte more than the largest size, for the terminating NUL. */
  char *big = malloc((1 << 20) + 1);
  ASSERT_NOT_NULL(big);
  memset(big, 'x', (1 << 20) + 1);
  for (size_t i = 0; i < 2; i++) {
    size_t n = sizes[i];
    dlock_t *l = (dlock_t *)1, *r = NULL, *w = NULL;
    ASSERT_DLOCK_ERR(dlock_getn(c, big, n, &l), DLOCK_EINVAL);
    ASSERT_NULL(l);
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
      l = (dlock_t *)1;
      ASSERT_DLOCK_ERR(dlock_get_kind(c, kinds[k].kind, big, n, &l),
                       DLOCK_EINVAL);
      ASSERT_NULL(l);
    }
    dlock_info_t *info = NULL;
    ASSERT_DLOCK_ERR(dlock_inspect(c, big, n, &info), DLOCK_EINVAL);
    ASSERT_NULL(info);
    /* The NUL-terminated constructors see the same limit. */
    big[n] = '\0';
    ASSERT_DLOCK_ERR(dlock_get(c, big, &l), DLOCK_EINVAL);
    ASSERT_DLOCK_ERR(dlock_get_fair(c, big, &l), DLOCK_EINVAL);
    ASSERT_DLOCK_ERR(dlock_get_spin(c, big, &l), DLOCK_EINVAL);
    ASSERT_DLOCK_ERR(dlock_get_rw(c, big, &r, &w), DLOCK_EINVAL);
    ASSERT_NULL(r);
    ASSERT_NULL(w);
    big[n] = 'x';
    ASSERT_NOT_NULL(strstr(dlock_last_error(), "65536"));
  }
  free(big);
  ASSERT_EQ(lu_dbsize(s), 2);
  check_sentinels(s);
  dlock_client_close(c);
  rp_free(s);
}

/* Owner ids: a hostile client id and the largest owner number travel as
 * data too, and make exactly the documented field. */
TEST(hostile_client_id_and_owner) {
  rp_server_t *s = lu_server(0);
  put_sentinels(s);
  dlock_options_t o;
  lu_options(&o, s);
  o.client_id = "x'); redis.call('flushall') --{}\"";
  dlock_client_t *c = lu_client_opts(&o);
  ASSERT_STR_EQ(dlock_client_id(c), o.client_id);
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
    dlock_t *l = NULL;
    ASSERT_DLOCK_OK(dlock_get_kind(c, kinds[k].kind, "owner-lock", 10, &l));
    ASSERT_DLOCK_OK(dlock_lock_as(l, UINT64_MAX, 20000));
    char field[256];
    snprintf(field, sizeof field, "%s:%" PRIu64 "%s", o.client_id, UINT64_MAX,
             kinds[k].kind == DLOCK_WRITE ? ":write" : "");
    ASSERT_EQ(lu_hget_num(s, "owner-lock", field), 1);
    ASSERT_EQ(dlock_hold_count_as(l, UINT64_MAX), 1);
    ASSERT_DLOCK_OK(dlock_unlock_as(l, UINT64_MAX));
    ASSERT_EQ(lu_exists(s, "owner-lock"), 0);
    dlock_free(l);
  }
  check_sentinels(s);
  dlock_client_close(c);
  rp_free(s);
}
