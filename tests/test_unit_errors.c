/*
 * Unit tests that need no server: error codes and their texts, option
 * defaults, owner numbers, and NULL handling of the public API.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dlock.h"
#include "harness/test.h"

/* ---- error table ------------------------------------------------------- */

TEST(err_table_texts_and_names) {
  int n = 0;
#define CHECK_ERR(name, code, text)                                            \
  ASSERT_EQ(DLOCK_##name, code);                                               \
  ASSERT_LT(code, 0);                                                          \
  ASSERT_NOT_NULL(dlock_strerror(code));                                       \
  ASSERT_STR_EQ(dlock_strerror(code), text);                                   \
  ASSERT_STR_EQ(dlock_err_name(code), "DLOCK_" #name);                         \
  n++;
  DLOCK_ERRNO_MAP(CHECK_ERR)
#undef CHECK_ERR
  ASSERT_GE(n, 12);
}

TEST(err_codes_distinct) {
  static const int codes[] = {
#define CODE(name, code, text) code,
      DLOCK_ERRNO_MAP(CODE)
#undef CODE
  };
  size_t n = sizeof(codes) / sizeof(codes[0]);
  for (size_t i = 0; i < n; i++) {
    for (size_t j = i + 1; j < n; j++) {
      ASSERT_NE(codes[i], codes[j]);
      ASSERT(strcmp(dlock_strerror(codes[i]), dlock_strerror(codes[j])) != 0);
      ASSERT(strcmp(dlock_err_name(codes[i]), dlock_err_name(codes[j])) != 0);
    }
  }
  /* The ones the contract names explicitly. */
  ASSERT_STR_EQ(dlock_err_name(DLOCK_ETIMEDOUT), "DLOCK_ETIMEDOUT");
  ASSERT_STR_EQ(dlock_err_name(DLOCK_ENOTHELD), "DLOCK_ENOTHELD");
  ASSERT_STR_EQ(dlock_err_name(DLOCK_ELOST), "DLOCK_ELOST");
  ASSERT_STR_EQ(dlock_err_name(DLOCK_ECANCELED), "DLOCK_ECANCELED");
  ASSERT_STR_EQ(dlock_err_name(DLOCK_EFORKED), "DLOCK_EFORKED");
  ASSERT_NOT_NULL(strstr(dlock_strerror(DLOCK_EFORKED), "fork()"));
}

TEST(err_unknown_codes) {
  static const int unknown[] = {-15, -64, -100,    -1000,   1,
                                2,   42,  INT_MIN, INT_MAX, -(INT_MAX)};
  for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
    const char *s = dlock_strerror(unknown[i]);
    ASSERT_NOT_NULL(s);
    ASSERT_GT((int64_t)strlen(s), 0);
    const char *n = dlock_err_name(unknown[i]);
    ASSERT_NOT_NULL(n);
    ASSERT_STR_EQ(n, "DLOCK_E?");
  }
  /* 0 is success: whatever it says, it must be a string. */
  ASSERT_NOT_NULL(dlock_strerror(0));
  ASSERT_NOT_NULL(dlock_err_name(0));
}

/* ---- options ----------------------------------------------------------- */

static void dummy_lost(void *d, const char *n, size_t l, uint64_t o) {
  (void)d;
  (void)n;
  (void)l;
  (void)o;
}

TEST(err_options_defaults) {
  dlock_options_t o;
  /* Garbage first, so every field must really be written. */
  memset(&o, 0xA5, sizeof(o));
  dlock_options_init(&o);
  if (o.url != NULL)
    ASSERT_STR_EQ(o.url, "redis://127.0.0.1:6379");
  ASSERT_EQ(o.connect_timeout_ms, 2000);
  ASSERT_EQ(o.command_timeout_ms, 3000);
  ASSERT_EQ(o.watchdog_timeout_ms, 30000);
  ASSERT_NULL(o.client_id);
  ASSERT_EQ(o.unlock_retries, 2);
  ASSERT_EQ(o.fair_wait_timeout_ms, 300000);
  ASSERT(o.on_lost == NULL);
  ASSERT_NULL(o.on_lost_data);
  ASSERT(o.on_warning == NULL);
  ASSERT_NULL(o.on_warning_data);

  /* Calling it again resets fields changed by the caller. */
  o.connect_timeout_ms = 1;
  o.watchdog_timeout_ms = 7;
  o.on_lost = dummy_lost;
  dlock_options_init(&o);
  ASSERT_EQ(o.connect_timeout_ms, 2000);
  ASSERT_EQ(o.watchdog_timeout_ms, 30000);
  ASSERT(o.on_lost == NULL);
}

/* ---- owners ------------------------------------------------------------ */

typedef struct self_rec {
  uint64_t a, b;
} self_rec_t;

static void *self_thread(void *arg) {
  self_rec_t *r = arg;
  r->a = dlock_self();
  r->b = dlock_self();
  return NULL;
}

TEST(err_self_stable_in_thread) {
  uint64_t a = dlock_self();
  uint64_t b = dlock_self();
  ASSERT_EQ(a, b);
  for (int i = 0; i < 1000; i++)
    ASSERT_EQ(dlock_self(), a);
}

TEST(err_self_distinct_across_threads) {
  enum { N = 8 };
  pthread_t t[N];
  self_rec_t r[N];
  memset(r, 0, sizeof(r));
  for (int i = 0; i < N; i++)
    ASSERT_EQ(pthread_create(&t[i], NULL, self_thread, &r[i]), 0);
  for (int i = 0; i < N; i++)
    ASSERT_EQ(pthread_join(t[i], NULL), 0);
  uint64_t me = dlock_self();
  for (int i = 0; i < N; i++) {
    ASSERT_EQ(r[i].a, r[i].b);
    ASSERT_NE(r[i].a, me);
    for (int j = i + 1; j < N; j++)
      ASSERT_NE(r[i].a, r[j].a);
  }
}

TEST(err_self_never_reused_after_exit) {
  /* Threads created one after another often get the same pthread_t and
   * the same kernel tid; their owner numbers must still differ. */
  enum { N = 50 };
  uint64_t seen[N];
  for (int i = 0; i < N; i++) {
    pthread_t t;
    self_rec_t r = {0, 0};
    ASSERT_EQ(pthread_create(&t, NULL, self_thread, &r), 0);
    ASSERT_EQ(pthread_join(t, NULL), 0);
    seen[i] = r.a;
    for (int j = 0; j < i; j++)
      ASSERT_NE(seen[i], seen[j]);
  }
}

enum { OWN_THREADS = 4, OWN_PER = 2000 };
static uint64_t owners[OWN_THREADS][OWN_PER];
static uint64_t owner_selfs[OWN_THREADS];

static void *owner_thread(void *arg) {
  int k = (int)(intptr_t)arg;
  owner_selfs[k] = dlock_self();
  for (int i = 0; i < OWN_PER; i++)
    owners[k][i] = dlock_owner_new();
  return NULL;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

TEST(err_owner_new_unique) {
  pthread_t t[OWN_THREADS];
  for (int i = 0; i < OWN_THREADS; i++)
    ASSERT_EQ(pthread_create(&t[i], NULL, owner_thread, (void *)(intptr_t)i),
              0);
  for (int i = 0; i < OWN_THREADS; i++)
    ASSERT_EQ(pthread_join(t[i], NULL), 0);
  size_t n = (size_t)OWN_THREADS * OWN_PER;
  uint64_t *all = malloc((n + OWN_THREADS + 1) * sizeof(uint64_t));
  ASSERT_NOT_NULL(all);
  memcpy(all, owners, n * sizeof(uint64_t));
  /* Owners drawn by dlock_owner_new never collide with thread owners. */
  for (int i = 0; i < OWN_THREADS; i++)
    all[n++] = owner_selfs[i];
  all[n++] = dlock_self();
  qsort(all, n, sizeof(uint64_t), cmp_u64);
  for (size_t i = 1; i < n; i++)
    ASSERT_NE(all[i], all[i - 1]);
  free(all);
  /* And a new owner drawn later is not the current thread's either. */
  ASSERT_NE(dlock_owner_new(), dlock_self());
}

/* ---- NULL handling ----------------------------------------------------- */

TEST(err_null_frees_are_noops) {
  dlock_free(NULL);
  dlock_client_close(NULL);
  dlock_info_free(NULL);
  ASSERT(1);
}

TEST(err_get_null_client) {
  dlock_t *l = NULL;
  ASSERT_DLOCK_ERR(dlock_get(NULL, "x", &l), DLOCK_EINVAL);
  ASSERT_NULL(l);
  ASSERT_NOT_NULL(dlock_last_error());
  ASSERT_GT((int64_t)strlen(dlock_last_error()), 0);
  ASSERT_DLOCK_ERR(dlock_getn(NULL, "x", 1, &l), DLOCK_EINVAL);
  ASSERT_NULL(l);
  ASSERT_GT((int64_t)strlen(dlock_last_error()), 0);
}

TEST(err_null_handle_verbs) {
  uint64_t o = dlock_owner_new();
  ASSERT_DLOCK_ERR(dlock_lock(NULL, 1000), DLOCK_EINVAL);
  ASSERT_GT((int64_t)strlen(dlock_last_error()), 0);
  ASSERT_DLOCK_ERR(dlock_lock(NULL, DLOCK_WATCHDOG), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_trylock(NULL, 0, 1000), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_unlock(NULL), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_lock_as(NULL, o, 1000), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_trylock_as(NULL, o, 0, 1000), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_unlock_as(NULL, o), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_force_unlock(NULL), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_is_locked(NULL), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_is_held(NULL), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_is_held_as(NULL, o), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_hold_count(NULL), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_hold_count_as(NULL, o), DLOCK_EINVAL);
  ASSERT_EQ(dlock_ttl(NULL), DLOCK_EINVAL);
  ASSERT_EQ(dlock_token(NULL), 0);
  ASSERT_EQ(dlock_token_as(NULL, o), 0);
}

TEST(err_inspect_null) {
  dlock_info_t *info = NULL;
  ASSERT_DLOCK_ERR(dlock_inspect(NULL, "x", 1, &info), DLOCK_EINVAL);
  ASSERT_NULL(info);
}

TEST(err_client_open_null) {
  dlock_options_t o;
  dlock_options_init(&o);
  ASSERT_DLOCK_ERR(dlock_client_open(&o, NULL), DLOCK_EINVAL);
  ASSERT_GT((int64_t)strlen(dlock_last_error()), 0);
  dlock_client_t *c = NULL;
  int rc = dlock_client_open(NULL, &c);
  /* NULL options are refused; nothing must be created. */
  ASSERT_DLOCK_ERR(rc, DLOCK_EINVAL);
  ASSERT_NULL(c);
}

/* ---- last error -------------------------------------------------------- */

typedef struct le_rec {
  size_t before;
  size_t after;
  int rc;
} le_rec_t;

static void *le_thread(void *arg) {
  le_rec_t *r = arg;
  const char *e = dlock_last_error();
  r->before = e ? strlen(e) : (size_t)-1;
  dlock_t *l = NULL;
  r->rc = dlock_get(NULL, "y", &l);
  e = dlock_last_error();
  r->after = e ? strlen(e) : 0;
  return NULL;
}

TEST(err_last_error_per_thread) {
  pthread_t t;
  le_rec_t r = {0, 0, 0};
  /* A fresh thread starts with "" even if another thread has failed. */
  dlock_t *l = NULL;
  ASSERT_DLOCK_ERR(dlock_get(NULL, "x", &l), DLOCK_EINVAL);
  char mine[512];
  snprintf(mine, sizeof(mine), "%s", dlock_last_error());
  ASSERT_GT((int64_t)strlen(mine), 0);

  ASSERT_EQ(pthread_create(&t, NULL, le_thread, &r), 0);
  ASSERT_EQ(pthread_join(t, NULL), 0);
  ASSERT_EQ(r.before, 0);
  ASSERT_EQ(r.rc, DLOCK_EINVAL);
  ASSERT_GT((int64_t)r.after, 0);
  /* The other thread's failure did not change this thread's detail. */
  ASSERT_STR_EQ(dlock_last_error(), mine);
}
