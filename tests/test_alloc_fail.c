/*
 * Allocation-failure injection: every allocation the library makes on its
 * main paths is made to fail in turn, against real redis-servers.
 *
 * A counting allocator is installed with dlock_set_allocators(). Run N of a
 * scenario makes the N-th allocation after the scenario's setup fail (that
 * one only), for N = 1, 2, ... until a run goes through without reaching
 * its N-th allocation. Every run must:
 *  - get 0 or DLOCK_ENOMEM from each call, nothing else, and no crash;
 *  - find Redis exactly as the results say: a lock call that failed took
 *    nothing (or gave back what it took), one that succeeded holds the
 *    lock with the count the caller expects;
 *  - leak nothing: once the client is closed, every block the library
 *    allocated has been freed (the allocator counts them, and checks that
 *    each block it frees is one of its own);
 *  - leave no lock behind: after the caller released what it was told it
 *    holds, and the client is closed, the lock's keys are gone.
 *
 * Failure is injected into dlock's own allocations only: hiredis allocates
 * through its own malloc, which the library cannot hook (and the Debian
 * build of hiredis 0.14 aborts when it runs out), so an allocation inside
 * hiredis never fails here. The library's background threads (pub/sub,
 * watchdog) allocate through the same allocator, so a run may hit one of
 * theirs instead of the caller's; that is as intended, and why runs are
 * counted until one sees no failure rather than a fixed number.
 */
#include "lock_util.h"
#include "watchdog.h"

#include <stdatomic.h>

/* A scenario with more allocations than this is surely looping. */
#define AF_MAX_RUNS 3000

/* Long enough that the watchdog never renews during a scenario on its own:
 * a run then allocates the same way each time, and renewal gets a scenario
 * of its own (dlock__watchdog_renew_now). */
#define AF_WATCHDOG_MS 30000

/* ---- the failing allocator ---------------------------------------------- */

/* Every block carries this header, so that freeing a block that was not
 * allocated here (or twice) is caught at once. 16 bytes keep the block
 * aligned for any type. */
typedef struct af_header {
  uint64_t magic;
  uint64_t size;
} af_header;

#define AF_MAGIC 0xd10c0a110c0b10c5ULL
#define AF_FREED 0xdeadf4eedeadf4eeULL

static atomic_long af_count; /* allocations since af_arm */
static atomic_long af_fail;  /* the one to fail; 0: none */
static atomic_int af_failed; /* it was reached and failed */
static atomic_long af_live;  /* blocks allocated and not freed */
static atomic_int af_armed;

static int af_should_fail(void) {
  if (!atomic_load(&af_armed))
    return 0;
  long n = atomic_fetch_add(&af_count, 1) + 1;
  if (n != atomic_load(&af_fail))
    return 0;
  atomic_store(&af_failed, 1);
  return 1;
}

static void *af_block(af_header *h, size_t n) {
  if (h == NULL)
    return NULL;
  h->magic = AF_MAGIC;
  h->size = n;
  return h + 1;
}

static af_header *af_header_of(void *p, const char *what) {
  af_header *h = (af_header *)p - 1;
  if (h->magic != AF_MAGIC) {
    fprintf(stderr, "%s of %p: not a live block of dlock's allocator%s\n", what,
            p, h->magic == AF_FREED ? " (freed twice)" : "");
    abort();
  }
  return h;
}

static void *af_malloc(size_t n) {
  if (af_should_fail())
    return NULL;
  void *p = af_block(malloc(sizeof(af_header) + n), n);
  if (p != NULL)
    atomic_fetch_add(&af_live, 1);
  return p;
}

static void *af_calloc(size_t k, size_t n) {
  if (af_should_fail())
    return NULL;
  if (n != 0 && k > (SIZE_MAX - sizeof(af_header)) / n)
    return NULL;
  void *p = af_block(calloc(1, sizeof(af_header) + k * n), k * n);
  if (p != NULL)
    atomic_fetch_add(&af_live, 1);
  return p;
}

static void *af_realloc(void *old, size_t n) {
  if (old == NULL)
    return af_malloc(n);
  af_header *h = af_header_of(old, "realloc");
  if (af_should_fail())
    return NULL;
  return af_block(realloc(h, sizeof(af_header) + n), n);
}

static void af_free(void *p) {
  if (p == NULL)
    return;
  af_header *h = af_header_of(p, "free");
  h->magic = AF_FREED;
  atomic_fetch_sub(&af_live, 1);
  free(h);
}

static void af_install(void) {
  static const dlock_allocators_t a = {af_malloc, af_calloc, af_realloc,
                                       af_free};
  dlock_set_allocators(&a);
}

/* From now on, the n-th allocation fails. */
static void af_arm(long n) {
  atomic_store(&af_count, 0);
  atomic_store(&af_fail, n);
  atomic_store(&af_failed, 0);
  atomic_store(&af_armed, 1);
}

static void af_disarm(void) { atomic_store(&af_armed, 0); }

/* ---- runs -----------------------------------------------------------------
 */

/* The run in progress, for messages: which allocation fails. */
static long af_run;

/* Checks that a call gave 0 or DLOCK_ENOMEM, and returns its result. */
static int af_check(int rc, const char *what) {
  if (rc != 0 && rc != DLOCK_ENOMEM)
    TEST_FAIL("run %ld (allocation %ld fails): %s returned %s (%d) \"%s\"; "
              "expected 0 or DLOCK_ENOMEM",
              af_run, af_run, what, dlock_err_name(rc), rc, dlock_last_error());
  return rc;
}

#define AF_EXPECT(cond, ...)                                                   \
  do {                                                                         \
    if (!(cond)) {                                                             \
      char af__msg[512];                                                       \
      snprintf(af__msg, sizeof af__msg, __VA_ARGS__);                          \
      TEST_FAIL("run %ld (allocation %ld fails): %s: %s", af_run, af_run,      \
                #cond, af__msg);                                               \
    }                                                                          \
  } while (0)

/*
 * Runs 'scenario' with allocation 1, 2, ... failing until a run reaches
 * no failing allocation. The scenario arms the allocator (af_arm(n)) after
 * its setup and disarms it before its checks, and returns nothing: it
 * fails the test itself. After each run no block may be left.
 */
static void af_drive(const char *name, void (*scenario)(long n, void *arg),
                     void *arg) {
  int64_t t0 = lu_now_ms();
  af_install();
  for (long n = 1;; n++) {
    ASSERT_LT(n, AF_MAX_RUNS);
    af_run = n;
    atomic_store(&af_failed, 0);
    scenario(n, arg);
    af_disarm();
    AF_EXPECT(atomic_load(&af_live) == 0, "%ld blocks leaked",
              atomic_load(&af_live));
    if (!atomic_load(&af_failed)) {
      printf("%s: %ld runs (%ld allocations on the path), %lld ms\n", name, n,
             n - 1, (long long)(lu_now_ms() - t0));
      break;
    }
  }
  dlock_set_allocators(NULL);
}

/* A client for the scenarios, opened while the allocator is disarmed. */
static dlock_client_t *af_client(rp_server_t *s) {
  dlock_options_t o;
  lu_options(&o, s);
  o.watchdog_timeout_ms = AF_WATCHDOG_MS;
  return lu_client_opts(&o);
}

/* The hold count of 'field' in hash 'key' as Redis has it; 0 when none. */
static int64_t af_count_in(rp_server_t *s, const char *key, const char *field) {
  int64_t n = lu_hget_num(s, key, field);
  return n < 0 ? 0 : n;
}

/* Keys whose name matches 'pattern' (KEYS: the test databases are tiny). */
static int64_t af_keys(rp_server_t *s, const char *pattern) {
  redisReply *r = rp_cmd(s, "KEYS %s", pattern);
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->type, REDIS_REPLY_ARRAY);
  int64_t n = (int64_t)r->elements;
  freeReplyObject(r);
  return n;
}

/* ---- client and handles -------------------------------------------------- */

static void open_close(long n, void *arg) {
  rp_server_t *s = arg;
  dlock_options_t o;
  lu_options(&o, s);
  dlock_client_t *c = NULL;
  af_arm(n);
  int rc = af_check(dlock_client_open(&o, &c), "dlock_client_open");
  af_disarm();
  AF_EXPECT((rc == 0) == (c != NULL), "client %p with result %d", (void *)c,
            rc);
  dlock_client_close(c);
}

TEST(client_open_close) {
  rp_server_t *s = lu_server(0);
  af_drive("client open+close", open_close, s);
  ASSERT_EQ(lu_dbsize(s), 0);
  rp_free(s);
}

static void handles(long n, void *arg) {
  rp_server_t *s = arg;
  dlock_client_t *c = af_client(s);
  dlock_t *h[10] = {NULL};
  af_arm(n);
  af_check(dlock_get(c, "h-plain", &h[0]), "dlock_get");
  af_check(dlock_getn(c, "h-\0nul", 6, &h[1]), "dlock_getn");
  af_check(dlock_get_fair(c, "h-fair", &h[2]), "dlock_get_fair");
  af_check(dlock_get_spin(c, "h-spin", &h[3]), "dlock_get_spin");
  int rc = af_check(dlock_get_rw(c, "h-rw", &h[4], &h[5]), "dlock_get_rw");
  AF_EXPECT(rc == 0 || (h[4] == NULL && h[5] == NULL),
            "dlock_get_rw failed but left a handle");
  af_check(dlock_get_kind(c, DLOCK_WRITE, "h-{kind}", 8, &h[6]),
           "dlock_get_kind");
  if (h[0] != NULL && h[2] != NULL) {
    dlock_t *parts[] = {h[0], h[2]};
    af_check(dlock_get_multi(parts, 2, &h[7]), "dlock_get_multi");
  }
  if (h[0] != NULL && h[3] != NULL) {
    dlock_t *parts[] = {h[0], h[3]};
    af_check(dlock_get_red(parts, 2, &h[8]), "dlock_get_red");
  }
  af_disarm();
  for (int i = 9; i >= 0; i--)
    dlock_free(h[i]);
  dlock_client_close(c);
}

TEST(handles_get_free) {
  rp_server_t *s = lu_server(0);
  af_drive("handles get+free", handles, s);
  rp_free(s);
}

/* ---- single locks: lock, reentry, unlock -------------------------------- */

/* What a step does: take the lock (waiting), try it once, or release. */
enum { STEP_LOCK, STEP_TRY, STEP_UNLOCK };

static const int reentry_steps[] = {STEP_LOCK, STEP_LOCK,   STEP_UNLOCK,
                                    STEP_TRY,  STEP_UNLOCK, STEP_UNLOCK};
#define NSTEPS (sizeof reentry_steps / sizeof reentry_steps[0])

typedef struct single_case {
  rp_server_t *s;
  dlock_kind_t kind;
  const char *name;
  int64_t lease_ms;
} single_case;

/* The keys a single lock of 'kind' named 'name' must not leave behind. */
static void expect_no_lock_keys(rp_server_t *s, dlock_kind_t kind,
                                const char *name) {
  char key[256];
  AF_EXPECT(lu_exists(s, name) == 0, "lock key \"%s\" left behind", name);
  if (kind == DLOCK_FAIR) {
    snprintf(key, sizeof key, "redisson_lock_queue:{%s}", name);
    AF_EXPECT(lu_exists(s, key) == 0, "\"%s\" left behind", key);
    snprintf(key, sizeof key, "redisson_lock_timeout:{%s}", name);
    AF_EXPECT(lu_exists(s, key) == 0, "\"%s\" left behind", key);
  }
  if (kind == DLOCK_READ || kind == DLOCK_WRITE) {
    snprintf(key, sizeof key, "{%s}:*rwlock_timeout*", name);
    AF_EXPECT(af_keys(s, key) == 0, "read-hold keys of \"%s\" left behind",
              name);
  }
}

static void single_lock(long n, void *arg) {
  single_case *k = arg;
  dlock_client_t *c = af_client(k->s);
  dlock_t *l = NULL;
  ASSERT_DLOCK_OK(dlock_get_kind(c, k->kind, k->name, strlen(k->name), &l));
  char field[300];
  lu_field(field, sizeof field, c, dlock_self());
  if (k->kind == DLOCK_WRITE)
    strcat(field, ":write"); /* the writer's field in the lock hash */
  int64_t held = 0;

  af_arm(n);
  for (size_t i = 0; i < NSTEPS; i++) {
    int step = reentry_steps[i];
    if (step == STEP_UNLOCK && held == 0)
      continue;
    int rc = step == STEP_LOCK
                 ? af_check(dlock_lock(l, k->lease_ms), "dlock_lock")
             : step == STEP_TRY
                 ? af_check(dlock_trylock(l, 0, k->lease_ms), "dlock_trylock")
                 : af_check(dlock_unlock(l), "dlock_unlock");
    if (rc == 0)
      held += step == STEP_UNLOCK ? -1 : 1;
    /* Redis holds exactly what the results say, failed calls included. */
    AF_EXPECT(af_count_in(k->s, k->name, field) == held,
              "after step %zu (%s: %d), Redis has count %lld, the caller "
              "expects %lld",
              i, step == STEP_UNLOCK ? "unlock" : "lock", rc,
              (long long)af_count_in(k->s, k->name, field), (long long)held);
    if (held > 0 && rc == 0 && step != STEP_UNLOCK)
      AF_EXPECT(dlock_token(l) != 0, "a held lock without a token");
    if (held == 0)
      expect_no_lock_keys(k->s, k->kind, k->name);
  }
  af_disarm();

  /* The library must still know every hold it reported: a renewal keeps
   * them, and each releases cleanly. */
  if (k->lease_ms == DLOCK_WATCHDOG)
    dlock__watchdog_renew_now(c);
  for (; held > 0; held--)
    ASSERT_DLOCK_OK(dlock_unlock(l));
  ASSERT_DLOCK_ERR(dlock_unlock(l), DLOCK_ENOTHELD);
  dlock_free(l);
  dlock_client_close(c);
  expect_no_lock_keys(k->s, k->kind, k->name);
}

static void run_single(dlock_kind_t kind, const char *name, const char *what) {
  rp_server_t *s = lu_server(0);
  single_case k = {s, kind, name, DLOCK_WATCHDOG};
  char label[128];
  snprintf(label, sizeof label, "%s, watchdog", what);
  af_drive(label, single_lock, &k);
  k.lease_ms = 10000;
  snprintf(label, sizeof label, "%s, 10 s lease", what);
  af_drive(label, single_lock, &k);
  rp_free(s);
}

TEST(reentrant_lock_unlock) {
  run_single(DLOCK_REENTRANT, "af-reentrant", "reentrant lock/unlock");
}

TEST(spin_lock_unlock) {
  run_single(DLOCK_SPIN, "af-spin", "spin lock/unlock");
}

TEST(fair_lock_unlock) {
  run_single(DLOCK_FAIR, "af-fair", "fair lock/unlock");
}

TEST(write_lock_unlock) {
  run_single(DLOCK_WRITE, "af-write", "write lock/unlock");
}

TEST(read_lock_unlock) {
  run_single(DLOCK_READ, "af-read", "read lock/unlock");
}

/* ---- a read-write lock: write, downgrade to read, release both ---------- */

static void rw_downgrade(long n, void *arg) {
  rp_server_t *s = arg;
  const char *name = "af-rw";
  dlock_client_t *c = af_client(s);
  dlock_t *r = NULL, *w = NULL;
  ASSERT_DLOCK_OK(dlock_get_rw(c, name, &r, &w));
  char field[256], wfield[300];
  lu_field(field, sizeof field, c, dlock_self());
  snprintf(wfield, sizeof wfield, "%s:write", field);
  int64_t nr = 0, nw = 0;

  af_arm(n);
  if (af_check(dlock_lock(w, DLOCK_WATCHDOG), "write dlock_lock") == 0)
    nw++;
  if (af_check(dlock_lock(r, DLOCK_WATCHDOG), "read dlock_lock") == 0)
    nr++;
  if (nw > 0 && af_check(dlock_unlock(w), "write dlock_unlock") == 0)
    nw--;
  if (nr > 0 && af_check(dlock_unlock(r), "read dlock_unlock") == 0)
    nr--;
  AF_EXPECT(
      af_count_in(s, name, wfield) == nw && af_count_in(s, name, field) == nr,
      "Redis has write %lld, read %lld; the caller expects %lld, %lld",
      (long long)af_count_in(s, name, wfield),
      (long long)af_count_in(s, name, field), (long long)nw, (long long)nr);
  af_disarm();

  dlock__watchdog_renew_now(c);
  for (; nw > 0; nw--)
    ASSERT_DLOCK_OK(dlock_unlock(w));
  for (; nr > 0; nr--)
    ASSERT_DLOCK_OK(dlock_unlock(r));
  dlock_free(r);
  dlock_free(w);
  dlock_client_close(c);
  expect_no_lock_keys(s, DLOCK_READ, name);
}

TEST(rw_write_read_downgrade) {
  rp_server_t *s = lu_server(0);
  af_drive("read-write lock, downgrade", rw_downgrade, s);
  rp_free(s);
}

/* ---- contended: waiting on pub/sub, or by back-off ------------------------
 */

typedef struct releaser {
  rp_server_t *s;
  const char *name;
  int64_t after_ms;
} releaser;

/* Releases a lock held by "another program" as Redisson does: deletes the
 * hash and publishes the unlock message on the lock's channel. */
static void *release_later(void *arg) {
  releaser *rel = arg;
  redisContext *r = lu_connect(rel->s);
  if (r == NULL)
    return NULL;
  lu_sleep_ms(rel->after_ms);
  char channel[256];
  size_t len =
      lu_channel(channel, sizeof channel, rel->name, strlen(rel->name));
  redisReply *rep = redisCommand(r, "DEL %s", rel->name);
  if (rep != NULL)
    freeReplyObject(rep);
  rep = redisCommand(r, "PUBLISH %b 0", channel, len);
  if (rep != NULL)
    freeReplyObject(rep);
  redisFree(r);
  return NULL;
}

static void contended(long n, void *arg) {
  single_case *k = arg;
  dlock_client_t *c = af_client(k->s);
  dlock_t *l = NULL;
  ASSERT_DLOCK_OK(dlock_get_kind(c, k->kind, k->name, strlen(k->name), &l));
  char field[256];
  lu_field(field, sizeof field, c, dlock_self());
  /* Held by someone else for at most 400 ms, and released after 40 ms: a
   * waiter that misses the message still gets the lock at the expiry. */
  lu_ok(rp_cmd(k->s, "HSET %s other-client:1 1", k->name));
  lu_ok(rp_cmd(k->s, "PEXPIRE %s 400", k->name));
  releaser rel = {k->s, k->name, 40};
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, release_later, &rel), 0);

  af_arm(n);
  int rc = af_check(dlock_trylock(l, 5000, k->lease_ms), "dlock_trylock");
  af_disarm();
  pthread_join(t, NULL);
  AF_EXPECT(af_count_in(k->s, k->name, field) == (rc == 0),
            "trylock returned %d; Redis has count %lld", rc,
            (long long)af_count_in(k->s, k->name, field));
  if (rc == 0)
    ASSERT_DLOCK_OK(dlock_unlock(l));
  dlock_free(l);
  dlock_client_close(c);
  expect_no_lock_keys(k->s, k->kind, k->name);
}

TEST(trylock_contended_pubsub) {
  rp_server_t *s = lu_server(0);
  single_case k = {s, DLOCK_REENTRANT, "af-contended", 10000};
  af_drive("contended trylock, pub/sub wait", contended, &k);
  rp_free(s);
}

TEST(trylock_contended_spin) {
  rp_server_t *s = lu_server(0);
  single_case k = {s, DLOCK_SPIN, "af-contended-spin", DLOCK_WATCHDOG};
  af_drive("contended trylock, back-off wait", contended, &k);
  rp_free(s);
}

/* ---- MultiLock ---------------------------------------------------------- */

static void multi(long n, void *arg) {
  rp_server_t *s = arg;
  static const char *const names[] = {"af-m1", "af-m2", "af-m3"};
  dlock_client_t *c = af_client(s);
  dlock_t *parts[3], *m = NULL;
  for (int i = 0; i < 3; i++)
    parts[i] = lu_get(c, names[i]);
  ASSERT_DLOCK_OK(dlock_get_multi(parts, 3, &m));
  char field[256];
  lu_field(field, sizeof field, c, dlock_self());
  int64_t held = 0;
  int unlock_failed = 0;

  af_arm(n);
  for (size_t i = 0; i < NSTEPS; i++) {
    int step = reentry_steps[i];
    if (step == STEP_UNLOCK && held == 0)
      continue;
    int rc = step == STEP_LOCK ? af_check(dlock_lock(m, 10000), "dlock_lock")
             : step == STEP_TRY
                 ? af_check(dlock_trylock(m, 0, 10000), "dlock_trylock")
                 : af_check(dlock_unlock(m), "dlock_unlock");
    if (rc == 0)
      held += step == STEP_UNLOCK ? -1 : 1;
    unlock_failed |= step == STEP_UNLOCK && rc != 0;
    /* All or nothing when taking it. A failed release may have released
     * some parts (a retry completes it), so counts are compared only
     * until one fails. */
    for (int j = 0; j < 3 && !unlock_failed; j++)
      AF_EXPECT(af_count_in(s, names[j], field) == held,
                "after step %zu (result %d), part %s has count %lld, the "
                "caller expects %lld",
                i, rc, names[j], (long long)af_count_in(s, names[j], field),
                (long long)held);
  }
  af_disarm();

  for (; held > 0; held--)
    ASSERT_DLOCK_OK(dlock_unlock(m));
  dlock_free(m);
  for (int i = 0; i < 3; i++)
    dlock_free(parts[i]);
  dlock_client_close(c);
  for (int i = 0; i < 3; i++)
    expect_no_lock_keys(s, DLOCK_REENTRANT, names[i]);
}

TEST(multilock_lock_unlock) {
  rp_server_t *s = lu_server(0);
  af_drive("MultiLock lock/unlock", multi, s);
  rp_free(s);
}

/* ---- RedLock over three servers ----------------------------------------- */

typedef struct red_case {
  rp_server_t *s[3];
  int64_t lease_ms;
  int fail_in_unlock; /* 1: the failure is injected into the unlock only */
} red_case;

/* How many of the servers have the owner's field in the lock hash. */
static int red_holding(red_case *k, const char *name, dlock_client_t **c) {
  int n = 0;
  for (int i = 0; i < 3; i++) {
    char field[256];
    lu_field(field, sizeof field, c[i], dlock_self());
    n += af_count_in(k->s[i], name, field) > 0;
  }
  return n;
}

static void red(long n, void *arg) {
  red_case *k = arg;
  const char *name = "af-red";
  dlock_client_t *c[3];
  dlock_t *parts[3], *r = NULL;
  for (int i = 0; i < 3; i++) {
    c[i] = af_client(k->s[i]);
    parts[i] = lu_get(c[i], name);
  }
  ASSERT_DLOCK_OK(dlock_get_red(parts, 3, &r));
  int held = 0;

  if (!k->fail_in_unlock)
    af_arm(n);
  int rc = af_check(dlock_lock(r, k->lease_ms), "RedLock dlock_lock");
  held = rc == 0;
  int holding = red_holding(k, name, c);
  if (rc == 0)
    AF_EXPECT(holding >= 2, "RedLock locked, yet only %d of 3 servers hold it",
              holding);
  else
    AF_EXPECT(holding == 0, "RedLock lock failed, yet %d of 3 servers hold it",
              holding);
  if (k->fail_in_unlock)
    af_arm(n);
  if (held) {
    rc = af_check(dlock_unlock(r), "RedLock dlock_unlock");
    held = rc != 0;
    holding = red_holding(k, name, c);
    if (rc == 0)
      AF_EXPECT(holding == 0,
                "RedLock unlocked, yet %d of 3 servers still hold it", holding);
  }
  af_disarm();

  if (held)
    ASSERT_DLOCK_OK(dlock_unlock(r));
  dlock_free(r);
  for (int i = 0; i < 3; i++) {
    dlock_free(parts[i]);
    dlock_client_close(c[i]);
  }
  for (int i = 0; i < 3; i++)
    AF_EXPECT(lu_exists(k->s[i], name) == 0,
              "server %d still has the RedLock's key", i);
}

static void run_red(int fail_in_unlock) {
  red_case k;
  for (int i = 0; i < 3; i++)
    k.s[i] = lu_server(0);
  k.fail_in_unlock = fail_in_unlock;
  k.lease_ms = 10000;
  af_drive(fail_in_unlock ? "RedLock unlock, 10 s lease"
                          : "RedLock lock, 10 s lease",
           red, &k);
  k.lease_ms = DLOCK_WATCHDOG;
  af_drive(fail_in_unlock ? "RedLock unlock, watchdog"
                          : "RedLock lock, watchdog",
           red, &k);
  for (int i = 0; i < 3; i++)
    rp_free(k.s[i]);
}

TEST(redlock_lock) { run_red(0); }

TEST(redlock_unlock) { run_red(1); }

/* ---- dlock_inspect --------------------------------------------------------
 */

static void inspect(long n, void *arg) {
  rp_server_t *s = arg;
  const char *name = "af-inspect";
  dlock_client_t *c = af_client(s);
  dlock_t *l = lu_get(c, name);
  ASSERT_DLOCK_OK(dlock_lock(l, 10000));
  /* Two queued waiters, as a fair lock has them, to decode too. */
  lu_ok(rp_cmd(s, "RPUSH redisson_lock_queue:{%s} w1 w2", name));
  lu_ok(rp_cmd(s, "ZADD redisson_lock_timeout:{%s} 1 w1 2 w2", name));

  dlock_info_t *info = NULL;
  af_arm(n);
  int rc =
      af_check(dlock_inspect(c, name, strlen(name), &info), "dlock_inspect");
  af_disarm();
  AF_EXPECT((rc == 0) == (info != NULL), "info %p with result %d", (void *)info,
            rc);
  if (info != NULL) {
    AF_EXPECT(info->locked == 1 && info->nholders == 1 && info->nwaiters == 2,
              "locked %d, %zu holders, %zu waiters", info->locked,
              info->nholders, info->nwaiters);
    AF_EXPECT(info->waiters[1].deadline_ms == 2, "deadline %lld",
              (long long)info->waiters[1].deadline_ms);
  }
  dlock_info_free(info);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  lu_ok(rp_cmd(s, "DEL redisson_lock_queue:{%s} redisson_lock_timeout:{%s}",
               name, name));
  dlock_free(l);
  dlock_client_close(c);
  expect_no_lock_keys(s, DLOCK_REENTRANT, name);
}

TEST(inspect) {
  rp_server_t *s = lu_server(0);
  af_drive("dlock_inspect", inspect, s);
  rp_free(s);
}

/* ---- watchdog renewal ------------------------------------------------------
 */

static void renewal(long n, void *arg) {
  rp_server_t *s = arg;
  lu_lost_t lost;
  lu_lost_init(&lost);
  dlock_options_t o;
  lu_options(&o, s);
  o.watchdog_timeout_ms = AF_WATCHDOG_MS;
  o.on_lost = lu_lost_cb;
  o.on_lost_data = &lost;
  dlock_client_t *c = lu_client_opts(&o);
  dlock_t *a = lu_get(c, "af-renew-a"), *r = NULL, *w = NULL;
  ASSERT_DLOCK_OK(dlock_get_rw(c, "af-renew-rw", &r, &w));
  ASSERT_DLOCK_OK(dlock_lock(a, DLOCK_WATCHDOG));
  ASSERT_DLOCK_OK(dlock_lock(w, DLOCK_WATCHDOG));
  ASSERT_DLOCK_OK(dlock_lock(r, DLOCK_WATCHDOG));

  af_arm(n);
  dlock__watchdog_renew_now(c);
  af_disarm();

  /* A renewal that ran out of memory renews less, but loses nothing. */
  AF_EXPECT(lu_lost_count(&lost) == 0, "a lock was reported lost");
  ASSERT_DLOCK_OK(dlock_unlock(r));
  ASSERT_DLOCK_OK(dlock_unlock(w));
  ASSERT_DLOCK_OK(dlock_unlock(a));
  dlock_free(a);
  dlock_free(r);
  dlock_free(w);
  dlock_client_close(c);
  expect_no_lock_keys(s, DLOCK_REENTRANT, "af-renew-a");
  expect_no_lock_keys(s, DLOCK_READ, "af-renew-rw");
}

TEST(watchdog_renewal) {
  rp_server_t *s = lu_server(0);
  af_drive("watchdog renewal", renewal, s);
  rp_free(s);
}
