/*
 * Durations at and beyond their limit: every lease, wait and *_ms option
 * above DLOCK_DURATION_MAX_MS is refused with DLOCK_EINVAL and leaves
 * nothing on the server; the limit itself works for every kind (a lease
 * that long expires, a wait that long waits); deadlines never overflow,
 * not even for a lock some other program set to expire in 300 000 years;
 * the watchdog does not spin with the longest timeout; and the Lua scripts
 * check every number they are given before they write anything, since
 * Redis does not undo a script's writes when a later command in it fails.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/resource.h>

#include "lock_util.h"

#include "client.h"
#include "scripts.h"
#include "watchdog.h"

/* Values above the limit, among them the ones that used to overflow:
 * INT64_MAX itself, a value whose microseconds overflow (INT64_MAX/1000
 * ms, whose watchdog bookkeeping used to overflow too), 1e16 ms. */
static const int64_t too_long[] = {INT64_MAX, DLOCK_DURATION_MAX_MS + 1,
                                   INT64_MAX / 1000, 10000000000000000LL};
#define NTOO_LONG (sizeof(too_long) / sizeof(too_long[0]))

/* ---- every kind, built the same way ------------------------------------ */

static const dlock_kind_t all_kinds[] = {
    DLOCK_REENTRANT, DLOCK_FAIR,  DLOCK_SPIN, DLOCK_READ,
    DLOCK_WRITE,     DLOCK_MULTI, DLOCK_RED};
#define NKINDS (sizeof(all_kinds) / sizeof(all_kinds[0]))

static const char *kind_name(dlock_kind_t k) {
  static const char *const names[] = {"reentrant", "fair",  "spin", "read",
                                      "write",     "multi", "red"};
  return names[k];
}

/* A handle of one kind, with whatever else it needs freed. */
typedef struct kind_handle {
  dlock_t *l;
  dlock_t *extra[3]; /* the parts of a composite, or the other rw side */
  size_t nextra;
} kind_handle;

static void kind_open(dlock_client_t *c, dlock_kind_t k, const char *name,
                      kind_handle *h) {
  memset(h, 0, sizeof(*h));
  char part[128];
  switch (k) {
  case DLOCK_READ:
    ASSERT_DLOCK_OK(dlock_get_rw(c, name, &h->l, &h->extra[0]));
    h->nextra = 1;
    break;
  case DLOCK_WRITE:
    ASSERT_DLOCK_OK(dlock_get_rw(c, name, &h->extra[0], &h->l));
    h->nextra = 1;
    break;
  case DLOCK_MULTI:
  case DLOCK_RED:
    h->nextra = k == DLOCK_MULTI ? 2 : 3;
    for (size_t i = 0; i < h->nextra; i++) {
      snprintf(part, sizeof(part), "%s:%zu", name, i);
      h->extra[i] = lu_get(c, part);
    }
    if (k == DLOCK_MULTI)
      ASSERT_DLOCK_OK(dlock_get_multi(h->extra, h->nextra, &h->l));
    else
      ASSERT_DLOCK_OK(dlock_get_red(h->extra, h->nextra, &h->l));
    break;
  default:
    ASSERT_DLOCK_OK(dlock_get_kind(c, k, name, strlen(name), &h->l));
  }
}

static void kind_close(kind_handle *h) {
  dlock_free(h->l);
  for (size_t i = 0; i < h->nextra; i++)
    dlock_free(h->extra[i]);
}

/* Every key but the fencing counters (which live for ever by design)
 * expires; lock keys not before 'min_pttl' ms. */
static void assert_every_key_expires(rp_server_t *s, int64_t min_pttl) {
  redisReply *r = rp_cmd(s, "KEYS *");
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->type, REDIS_REPLY_ARRAY);
  for (size_t i = 0; i < r->elements; i++) {
    const char *k = r->element[i]->str;
    size_t n = r->element[i]->len;
    if (strncmp(k, "redisson_lock_token:", 20) == 0)
      continue;
    int64_t pttl = lu_pttl_n(s, k, n);
    if (pttl <= 0)
      fprintf(stderr, "key %.*s has PTTL %" PRId64 "\n", (int)n, k, pttl);
    ASSERT_GT(pttl, 0);
    if (strncmp(k, "redisson_unlock_latch:", 22) != 0 && pttl < min_pttl)
      fprintf(stderr, "key %.*s has PTTL %" PRId64 "\n", (int)n, k, pttl);
    if (strncmp(k, "redisson_unlock_latch:", 22) != 0)
      ASSERT_GE(pttl, min_pttl);
  }
  freeReplyObject(r);
}

/* Every key left is a fencing counter or an unlock latch. */
static void assert_no_lock_left(rp_server_t *s) {
  redisReply *r = rp_cmd(s, "KEYS *");
  ASSERT_NOT_NULL(r);
  for (size_t i = 0; i < r->elements; i++) {
    const char *k = r->element[i]->str;
    int ok = strncmp(k, "redisson_lock_token:", 20) == 0 ||
             strncmp(k, "redisson_unlock_latch:", 22) == 0;
    if (!ok)
      fprintf(stderr, "key left: %s\n", k);
    ASSERT(ok);
  }
  freeReplyObject(r);
}

static void assert_detail_names(const char *what) {
  const char *e = dlock_last_error();
  if (strstr(e, what) == NULL || strstr(e, "DLOCK_DURATION_MAX_MS") == NULL)
    fprintf(stderr, "detail \"%s\" should name %s and the limit\n", e, what);
  ASSERT_NOT_NULL(strstr(e, what));
  ASSERT_NOT_NULL(strstr(e, "DLOCK_DURATION_MAX_MS"));
}

/* ---- leases and waits beyond the limit ---------------------------------- */

TEST(dur_beyond_max_refused_by_every_kind) {
  rp_server_t *s = lu_server(1);
  dlock_client_t *c = lu_client(s);
  for (size_t k = 0; k < NKINDS; k++) {
    kind_handle h;
    kind_open(c, all_kinds[k], "dur:beyond", &h);
    uint64_t o = dlock_owner_new();
    for (size_t i = 0; i < NTOO_LONG; i++) {
      int64_t v = too_long[i];
      ASSERT_DLOCK_ERR(dlock_lock(h.l, v), DLOCK_EINVAL);
      assert_detail_names("lease_ms");
      ASSERT_DLOCK_ERR(dlock_lock_as(h.l, o, v), DLOCK_EINVAL);
      ASSERT_DLOCK_ERR(dlock_trylock(h.l, 0, v), DLOCK_EINVAL);
      ASSERT_DLOCK_ERR(dlock_trylock(h.l, 1000, v), DLOCK_EINVAL);
      ASSERT_DLOCK_ERR(dlock_trylock(h.l, v, 1000), DLOCK_EINVAL);
      assert_detail_names("wait_ms");
      ASSERT_DLOCK_ERR(dlock_trylock(h.l, v, DLOCK_WATCHDOG), DLOCK_EINVAL);
      ASSERT_DLOCK_ERR(dlock_trylock_as(h.l, o, v, v), DLOCK_EINVAL);
      /* Refused before anything reached the server. */
      ASSERT_EQ(lu_dbsize(s), 0);
      ASSERT_EQ(dlock_is_held(h.l), 0);
    }
    kind_close(&h);
  }
  dlock_client_close(c);
  rp_free(s);
}

/* A lease of the limit, taken three times: the lock expires (no key is
 * left without expiry), the watchdog's bookkeeping of it does not
 * overflow (a lease of INT64_MAX/1000 used to make the watchdog drop the
 * hold's record, after which one unlock freed a lock taken three times),
 * and it takes three unlocks. */
TEST(dur_max_lease_every_kind) {
  rp_server_t *s = lu_server(1);
  dlock_client_t *c = lu_client(s);
  const int64_t min_pttl = DLOCK_DURATION_MAX_MS - 3600 * 1000;
  for (size_t k = 0; k < NKINDS; k++) {
    kind_handle h;
    kind_open(c, all_kinds[k], "dur:max", &h);
    printf("%s\n", kind_name(all_kinds[k]));
    for (int i = 0; i < 3; i++) {
      ASSERT_DLOCK_OK(dlock_lock(h.l, DLOCK_DURATION_MAX_MS));
      dlock__watchdog_renew_now(c);
    }
    assert_every_key_expires(s, min_pttl);
    ASSERT_EQ(dlock_hold_count(h.l), 3);
    ASSERT_DLOCK_OK(dlock_unlock(h.l));
    dlock__watchdog_renew_now(c);
    ASSERT_EQ(dlock_is_held(h.l), 1);
    ASSERT_EQ(dlock_hold_count(h.l), 2);
    assert_every_key_expires(s, min_pttl);
    ASSERT_DLOCK_OK(dlock_unlock(h.l));
    ASSERT_EQ(dlock_is_held(h.l), 1);
    ASSERT_DLOCK_OK(dlock_unlock(h.l));
    ASSERT_EQ(dlock_is_held(h.l), 0);
    ASSERT_DLOCK_ERR(dlock_unlock(h.l), DLOCK_ENOTHELD);
    assert_no_lock_left(s);
    kind_close(&h);
  }
  dlock_client_close(c);
  rp_free(s);
}

/* ---- waits of the limit wait --------------------------------------------- */

typedef struct waiter_arg {
  dlock_t *l;
  atomic_int done;
  int rc;
  char detail[256];
} waiter_arg;

static void *wait_max(void *p) {
  waiter_arg *w = p;
  w->rc = dlock_trylock(w->l, DLOCK_DURATION_MAX_MS, 30000);
  snprintf(w->detail, sizeof(w->detail), "%s", dlock_last_error());
  if (w->rc == 0)
    ASSERT_DLOCK_OK(dlock_unlock(w->l));
  atomic_store(&w->done, 1);
  return NULL;
}

TEST(dur_max_wait_waits_every_kind) {
  rp_server_t *s = lu_server(1);
  dlock_client_t *a = lu_client(s), *b = lu_client(s);
  for (size_t k = 0; k < NKINDS; k++) {
    dlock_kind_t kind = all_kinds[k];
    printf("%s\n", kind_name(kind));
    /* A reader waits for a writer; every other kind for its own kind. */
    kind_handle holder, waiter;
    kind_open(a, kind == DLOCK_READ ? DLOCK_WRITE : kind, "dur:wait", &holder);
    kind_open(b, kind, "dur:wait", &waiter);
    ASSERT_DLOCK_OK(dlock_lock(holder.l, 60000));
    waiter_arg w = {.l = waiter.l};
    pthread_t t;
    ASSERT_EQ(pthread_create(&t, NULL, wait_max, &w), 0);
    /* It waits rather than time out at once. */
    lu_sleep_ms(300);
    ASSERT_EQ(atomic_load(&w.done), 0);
    ASSERT_DLOCK_OK(dlock_unlock(holder.l));
    ASSERT_EQ(pthread_join(t, NULL), 0);
    if (w.rc != 0)
      fprintf(stderr, "waiter: %s \"%s\"\n", dlock_err_name(w.rc), w.detail);
    ASSERT_DLOCK_OK(w.rc);
    assert_no_lock_left(s);
    kind_close(&holder);
    kind_close(&waiter);
  }
  dlock_client_close(a);
  dlock_client_close(b);
  rp_free(s);
}

/* A lock that another program set to expire in some 300 000 years: a
 * waiter bounds its sleep by that TTL, and the microseconds of it used to
 * overflow into a deadline in the past, so the waiter retried without
 * sleeping until its wait was over. */
TEST(dur_foreign_huge_ttl_does_not_spin) {
  rp_server_t *s = lu_server(1);
  dlock_client_t *c = lu_client(s);
  static const dlock_kind_t kinds[] = {DLOCK_REENTRANT, DLOCK_SPIN, DLOCK_READ,
                                       DLOCK_WRITE};
  for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
    printf("%s\n", kind_name(kinds[k]));
    lu_ok(rp_cmd(s, "FLUSHALL"));
    if (kinds[k] == DLOCK_READ || kinds[k] == DLOCK_WRITE)
      lu_ok(rp_cmd(s, "HSET dur:foreign mode write other:1:write 1"));
    else
      lu_ok(rp_cmd(s, "HSET dur:foreign other:1 1"));
    /* Beyond INT64_MAX microseconds, within what Redis accepts. */
    ASSERT_EQ(lu_reply_int(rp_cmd(s, "PEXPIRE dur:foreign 9300000000000000")),
              1);
    kind_handle h;
    kind_open(c, kinds[k], "dur:foreign", &h);
    int64_t calls0 = lu_cmd_calls(s, "evalsha");
    int64_t t0 = lu_now_ms();
    ASSERT_DLOCK_ERR(dlock_trylock(h.l, 300, 1000), DLOCK_ETIMEDOUT);
    int64_t took = lu_now_ms() - t0;
    int64_t attempts = lu_cmd_calls(s, "evalsha") - calls0;
    printf("  %" PRId64 " ms, %" PRId64 " attempts\n", took, attempts);
    ASSERT_GE(took, 250);
    /* A spin lock backs off from 1 ms to 128 ms: about ten attempts. */
    ASSERT_LE(attempts, 40);
    kind_close(&h);
  }
  dlock_client_close(c);
  rp_free(s);
}

/* ---- options ------------------------------------------------------------ */

TEST(dur_options_beyond_max_refused) {
  rp_server_t *s = lu_server(1);
  static const char *const fields[] = {
      "connect_timeout_ms", "command_timeout_ms", "watchdog_timeout_ms",
      "fair_wait_timeout_ms"};
  for (size_t f = 0; f < 4; f++) {
    for (size_t i = 0; i < NTOO_LONG; i++) {
      dlock_options_t o;
      lu_options(&o, s);
      int64_t *field[] = {&o.connect_timeout_ms, &o.command_timeout_ms,
                          &o.watchdog_timeout_ms, &o.fair_wait_timeout_ms};
      *field[f] = too_long[i];
      dlock_client_t *c = NULL;
      ASSERT_DLOCK_ERR(dlock_client_open(&o, &c), DLOCK_EINVAL);
      ASSERT_NULL(c);
      assert_detail_names(fields[f]);
    }
  }
  /* unlock_retries multiplies the command timeout (the unlock latch lives
   * through every retry): it has a limit too. */
  static const int retries[] = {INT_MAX, DLOCK_UNLOCK_RETRIES_MAX + 1};
  for (size_t i = 0; i < 2; i++) {
    dlock_options_t o;
    lu_options(&o, s);
    o.unlock_retries = retries[i];
    dlock_client_t *c = NULL;
    ASSERT_DLOCK_ERR(dlock_client_open(&o, &c), DLOCK_EINVAL);
    ASSERT_NOT_NULL(strstr(dlock_last_error(), "unlock_retries"));
  }
  ASSERT_EQ(lu_dbsize(s), 0);
  rp_free(s);
}

/* The CPU time this process used, in ms. */
static int64_t cpu_ms(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (int64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000 +
         (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000;
}

/* Every option at the limit: the client works, a watchdog lock of every
 * kind gets the longest lease and expires, and the watchdog thread sleeps
 * (its period used to overflow with a huge timeout, and it spun at 100%
 * CPU). */
TEST(dur_options_at_max_work) {
  rp_server_t *s = lu_server(1);
  dlock_options_t o;
  lu_options(&o, s);
  o.connect_timeout_ms = DLOCK_DURATION_MAX_MS;
  o.command_timeout_ms = DLOCK_DURATION_MAX_MS;
  o.watchdog_timeout_ms = DLOCK_DURATION_MAX_MS;
  o.fair_wait_timeout_ms = DLOCK_DURATION_MAX_MS;
  o.unlock_retries = DLOCK_UNLOCK_RETRIES_MAX;
  dlock_client_t *c = lu_client_opts(&o);
  kind_handle h[NKINDS];
  for (size_t k = 0; k < NKINDS; k++) {
    char name[64];
    snprintf(name, sizeof(name), "dur:opt:%s", kind_name(all_kinds[k]));
    kind_open(c, all_kinds[k], name, &h[k]);
    ASSERT_DLOCK_OK(dlock_lock(h[k].l, DLOCK_WATCHDOG));
    ASSERT_DLOCK_OK(dlock_lock(h[k].l, DLOCK_WATCHDOG));
  }
  dlock__watchdog_renew_now(c);
  assert_every_key_expires(s, DLOCK_DURATION_MAX_MS - 3600 * 1000);

  /* With every thread of this process idle but the watchdog's, the process
   * uses next to no CPU; a spinning watchdog would use a whole core. */
  int64_t cpu0 = cpu_ms(), t0 = lu_now_ms();
  lu_sleep_ms(1000);
  int64_t cpu = cpu_ms() - cpu0, wall = lu_now_ms() - t0;
  printf("CPU %" PRId64 " ms in %" PRId64 " ms\n", cpu, wall);
  ASSERT_LT(cpu * 2, wall);

  for (size_t k = 0; k < NKINDS; k++) {
    ASSERT_DLOCK_OK(dlock_unlock(h[k].l));
    ASSERT_EQ(dlock_is_held(h[k].l), 1);
    ASSERT_DLOCK_OK(dlock_unlock(h[k].l));
    kind_close(&h[k]);
  }
  assert_no_lock_left(s);
  dlock_client_close(c);
  rp_free(s);
}

/* ---- the scripts check their numbers first ------------------------------ */

enum { DUR = 1, CNT = 2 }; /* a duration in ms, or a count */

typedef struct script_case {
  const dlock__script *script;
  const char *mode; /* the lock hash's "mode" field, or NULL */
  int nkeys, nargs;
  const char *argv[13]; /* keys, then arguments, all valid */
  int numeric[8];       /* per argument: DUR, CNT or 0 */
} script_case;

/* Owner "f" holds lock "L" twice, with 100 s left: every script below
 * writes something when its arguments are valid. */
static const script_case script_cases[] = {
    {&dlock__script_acquire,
     NULL,
     2,
     3,
     {"L", "T", "5000", "f", "2"},
     {DUR, 0, CNT}},
    {&dlock__script_fair_acquire,
     NULL,
     6,
     5,
     {"L", "Q", "Z", "T", "C", "H", "5000", "f", "5000", "2", "1"},
     {DUR, 0, DUR, CNT, 0}},
    {&dlock__script_fair_release,
     NULL,
     7,
     6,
     {"L", "Q", "Z", "C", "LATCH", "H", "T", "0", "5000", "f", "5000", "2",
      "5000"},
     {0, DUR, 0, DUR, CNT, DUR}},
    {&dlock__script_fair_leave,
     NULL,
     5,
     3,
     {"L", "Q", "Z", "C", "H", "f", "0", "5000"},
     {0, CNT, DUR}},
    {&dlock__script_handover,
     NULL,
     4,
     6,
     {"L", "T", "LATCH", "C", "f", "g", "5000", "5000", "0", "0"},
     {0, 0, DUR, DUR, 0, 0}},
    {&dlock__script_raise_token, NULL, 1, 1, {"T", "7"}, {CNT}},
    {&dlock__script_read_acquire,
     "read",
     3,
     4,
     {"L", "P", "T", "5000", "f", "f:write", "2"},
     {DUR, 0, 0, CNT}},
    {&dlock__script_read_release,
     "read",
     5,
     4,
     {"L", "C", "P", "A", "LATCH", "0", "f", "5000", "2"},
     {0, 0, DUR, CNT}},
    {&dlock__script_release,
     NULL,
     3,
     5,
     {"L", "C", "LATCH", "0", "5000", "f", "5000", "2"},
     {0, DUR, 0, DUR, CNT}},
    {&dlock__script_renew, NULL, 1, 2, {"L", "5000", "f"}, {DUR, 0}},
    {&dlock__script_renew_read,
     "read",
     2,
     2,
     {"L", "P", "5000", "f"},
     {DUR, 0}},
    {&dlock__script_write_acquire,
     "write",
     2,
     3,
     {"L", "T", "5000", "f", "2"},
     {DUR, 0, CNT}},
    {&dlock__script_write_release,
     "write",
     3,
     5,
     {"L", "C", "LATCH", "1", "5000", "f", "5000", "2"},
     {0, DUR, 0, DUR, CNT}},
};

static void seed(rp_server_t *s, const char *mode) {
  lu_ok(rp_cmd(s, "FLUSHALL"));
  if (mode != NULL)
    lu_ok(rp_cmd(s, "HSET L mode %s f 2", mode));
  else
    lu_ok(rp_cmd(s, "HSET L f 2"));
  ASSERT_EQ(lu_reply_int(rp_cmd(s, "PEXPIRE L 100000")), 1);
}

/* Nothing was written since seed(). */
static void assert_untouched(rp_server_t *s, const script_case *sc) {
  ASSERT_EQ(lu_dbsize(s), 1);
  ASSERT_EQ(lu_hget_num(s, "L", "f"), 2);
  ASSERT_EQ(lu_hlen(s, "L"), sc->mode != NULL ? 2 : 1);
  ASSERT_GT(lu_pttl(s, "L"), 90000);
}

/* The case of one script in script_cases. */
static const script_case *case_of(const dlock__script *script) {
  for (size_t i = 0; i < sizeof(script_cases) / sizeof(script_cases[0]); i++)
    if (script_cases[i].script == script)
      return &script_cases[i];
  ASSERT(0);
  return NULL;
}

static redisReply *run_script(rp_server_t *s, const script_case *sc, int arg,
                              const char *value) {
  const char *argv[16];
  size_t lens[16];
  char nkeys[8];
  snprintf(nkeys, sizeof(nkeys), "%d", sc->nkeys);
  argv[0] = "EVAL";
  argv[1] = sc->script->body;
  argv[2] = nkeys;
  int n = sc->nkeys + sc->nargs;
  for (int i = 0; i < n; i++)
    argv[3 + i] = sc->argv[i];
  if (arg >= 0)
    argv[3 + sc->nkeys + arg] = value;
  for (int i = 0; i < 3 + n; i++)
    lens[i] = strlen(argv[i]);
  lens[1] = sc->script->len;
  return rp_cmd_argv(s, 3 + n, argv, lens);
}

TEST(dur_scripts_check_numbers_before_writing) {
  rp_server_t *s = lu_server(1);
  static const char *const bad_ms[] = {"9223372036854775807",
                                       "1000000000001",
                                       "9300000000000000",
                                       "0",
                                       "-1",
                                       "1e3",
                                       "1.5",
                                       " 5",
                                       "",
                                       "x",
                                       "05"};
  static const char *const bad_count[] = {
      "-1", "1e3", "1.5", "", "x", " 2", "02", "99999999999999999999999"};
  int checked = 0;
  for (size_t i = 0; i < sizeof(script_cases) / sizeof(script_cases[0]); i++) {
    const script_case *sc = &script_cases[i];
    /* With valid arguments the script runs. */
    seed(s, sc->mode);
    redisReply *r = run_script(s, sc, -1, NULL);
    ASSERT_NOT_NULL(r);
    if (r->type == REDIS_REPLY_ERROR)
      fprintf(stderr, "%s: %s\n", sc->script->name, r->str);
    ASSERT(r->type != REDIS_REPLY_ERROR);
    freeReplyObject(r);
    for (int a = 0; a < sc->nargs; a++) {
      if (sc->numeric[a] == 0)
        continue;
      int dur = sc->numeric[a] == DUR;
      size_t nbad = dur ? sizeof(bad_ms) / sizeof(bad_ms[0])
                        : sizeof(bad_count) / sizeof(bad_count[0]);
      for (size_t b = 0; b < nbad; b++) {
        const char *v = dur ? bad_ms[b] : bad_count[b];
        seed(s, sc->mode);
        r = run_script(s, sc, a, v);
        ASSERT_NOT_NULL(r);
        if (r->type != REDIS_REPLY_ERROR ||
            strncmp(r->str, "DLOCK_EINVAL ", 13) != 0)
          fprintf(stderr, "%s with ARGV[%d] = \"%s\": type %d \"%s\"\n",
                  sc->script->name, a + 1, v, r->type, r->str ? r->str : "");
        ASSERT_EQ(r->type, REDIS_REPLY_ERROR);
        ASSERT_EQ(strncmp(r->str, "DLOCK_EINVAL ", 13), 0);
        freeReplyObject(r);
        assert_untouched(s, sc);
        checked++;
      }
    }
  }
  printf("%d refused calls, nothing written\n", checked);

  /* The checks compare digits with the bound as strings: a token of the
   * largest counter Redis keeps (2^63-1) passes, one above it does not. */
  const script_case *rt = case_of(&dlock__script_raise_token);
  seed(s, rt->mode);
  redisReply *top = run_script(s, rt, 0, "9223372036854775808");
  ASSERT_NOT_NULL(top);
  ASSERT_EQ(top->type, REDIS_REPLY_ERROR);
  ASSERT_EQ(strncmp(top->str, "DLOCK_EINVAL ", 13), 0);
  freeReplyObject(top);
  assert_untouched(s, rt);
  top = run_script(s, rt, 0, "9223372036854775807");
  ASSERT_NOT_NULL(top);
  ASSERT_EQ(top->type, REDIS_REPLY_INTEGER);
  freeReplyObject(top);
  ASSERT_EQ(lu_reply_int(rp_cmd(s, "INCRBY T -1")), INT64_MAX - 1);

  /* The client maps the scripts' refusal to DLOCK_EINVAL, with the
   * script's words as the detail. */
  dlock_client_t *c = lu_client(s);
  seed(s, NULL);
  const script_case *sc = &script_cases[0];
  const char *argv[5];
  size_t lens[5];
  for (int i = 0; i < 5; i++) {
    argv[i] = sc->argv[i];
    lens[i] = strlen(argv[i]);
  }
  argv[2] = "9223372036854775807";
  lens[2] = strlen(argv[2]);
  dlock__eval call = {sc->script, 2, 3, argv, lens};
  redisReply *reply = NULL;
  ASSERT_DLOCK_ERR(dlock__eval_run(c->route.conn, 1, &call, &reply, 0),
                   DLOCK_EINVAL);
  ASSERT_NULL(reply);
  printf("detail: %s\n", dlock_last_error());
  ASSERT_NOT_NULL(strstr(dlock_last_error(), "acquire"));
  assert_untouched(s, sc);
  dlock_client_close(c);
  rp_free(s);
}

/* ---- a retried release answers like its first run ---------------------- */

/* The release scripts read their latch only when it can change the answer
 * (the owner holds nothing, or the client does not know its count). Both
 * copies of a release run here, as when a reply is lost and the client
 * sends it again: the second must answer like the first and change
 * nothing, for a partial release, a final one and one whose count the
 * client does not know; and the first copy of a release with a known count
 * must not read the latch at all. */
typedef struct retry_case {
  const dlock__script *script;
  int count_arg; /* the argument (from 0) with the believed count, or -1 */
} retry_case;

/* Owner "f" holds "L" 'holds' times (with a read hold's timeout keys for
 * the read lock, so that its lease stays what they say). */
static void seed_holds(rp_server_t *s, const char *mode, int holds) {
  seed(s, mode);
  lu_ok(rp_cmd(s, "HSET L f %d", holds));
  if (mode != NULL && strcmp(mode, "read") == 0)
    for (int i = 1; i <= holds; i++)
      lu_ok(rp_cmd(s, "SET A:f:rwlock_timeout:%d 1 PX 100000", i));
}

/* The reply of one run: its integer, or for an array its first two. */
static int64_t run_answer(rp_server_t *s, const script_case *sc, int arg,
                          const char *value, int64_t *second) {
  redisReply *r = run_script(s, sc, arg, value);
  ASSERT_NOT_NULL(r);
  if (r->type == REDIS_REPLY_ERROR)
    fprintf(stderr, "%s: %s\n", sc->script->name, r->str);
  int64_t v;
  *second = 0;
  if (r->type == REDIS_REPLY_ARRAY) {
    ASSERT_GE(r->elements, 2);
    v = r->element[0]->integer;
    *second = r->element[1]->integer;
  } else {
    ASSERT_EQ(r->type, REDIS_REPLY_INTEGER);
    v = r->integer;
  }
  freeReplyObject(r);
  return v;
}

/* Runs the release twice with the same latch: the same answer, and the
 * owner's count in Redis (-1: no field) as the first run left it. */
static void run_twice(rp_server_t *s, const script_case *sc, int arg,
                      const char *value, int64_t *answer, int64_t *left) {
  int64_t second1, second2;
  *answer = run_answer(s, sc, arg, value, &second1);
  int64_t after_first = lu_hget_num(s, "L", "f");
  int64_t again = run_answer(s, sc, arg, value, &second2);
  ASSERT_EQ(again, *answer);
  ASSERT_EQ(second2, second1);
  ASSERT_EQ(lu_hget_num(s, "L", "f"), after_first);
  *left = after_first;
}

TEST(dur_release_scripts_retry_answers_like_the_first_run) {
  rp_server_t *s = lu_server(1);
  static const retry_case cases[] = {
      {&dlock__script_release, 4},       {&dlock__script_fair_release, 4},
      {&dlock__script_write_release, 4}, {&dlock__script_read_release, 3},
      {&dlock__script_handover, -1},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    const script_case *sc = case_of(cases[i].script);
    int ca = cases[i].count_arg;
    int64_t answer, left;

    /* A release of a held lock with its count known: no latch read. */
    seed_holds(s, sc->mode, 2);
    int64_t gets = lu_cmd_calls(s, "get");
    run_twice(s, sc, ca, ca >= 0 ? "2" : NULL, &answer, &left);
    int64_t first_gets = lu_cmd_calls(s, "get") - gets;
    printf("%s: held twice, answered %" PRId64 ", count left %" PRId64
           ", GETs in two runs %" PRId64 "\n",
           sc->script->name, answer, left, first_gets);
    if (ca >= 0) {
      ASSERT_EQ(answer, 1);
      ASSERT_EQ(left, 1);
      /* Neither run read the latch: the count was there both times. */
      ASSERT_EQ(first_gets, 0);

      /* The final release: the second run finds no hold and answers from
       * the latch, not "not held". */
      seed_holds(s, sc->mode, 1);
      run_twice(s, sc, ca, "1", &answer, &left);
      ASSERT_EQ(answer, 0);
      ASSERT_EQ(left, -1);

      /* A count the client does not know: the second run must not take
       * a second hold away. */
      seed_holds(s, sc->mode, 2);
      run_twice(s, sc, ca, "0", &answer, &left);
      ASSERT_EQ(answer, 1);
      ASSERT_EQ(left, 1);
    } else {
      /* The hand-over: handed over once, to the same token, and only the
       * second run (which finds no hold) reads the latch. */
      ASSERT_EQ(answer, 0);
      ASSERT_EQ(left, -1);
      ASSERT_EQ(lu_hget_num(s, "L", "g"), 1);
      ASSERT_EQ(first_gets, 1);
    }
  }
  rp_free(s);
}
