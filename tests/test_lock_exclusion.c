/*
 * Mutual exclusion under contention (threads and processes), wake-up
 * latency after an unlock, and the wait bound of trylock.
 *
 * The protected resource is a counter in Redis updated with GET then SET on
 * a separate raw connection: without the lock, concurrent increments are
 * lost, so an exact final count proves exclusion.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lock_util.h"

/* One read-modify-write of 'key' on a raw connection; 0 or -1. */
static int rmw_increment(redisContext *r, const char *key) {
  redisReply *g = redisCommand(r, "GET %s", key);
  if (g == NULL)
    return -1;
  long long v = g->type == REDIS_REPLY_STRING ? strtoll(g->str, NULL, 10) : 0;
  freeReplyObject(g);
  redisReply *s = redisCommand(r, "SET %s %lld", key, v + 1);
  if (s == NULL)
    return -1;
  int ok = s->type == REDIS_REPLY_STATUS;
  freeReplyObject(s);
  return ok ? 0 : -1;
}

/* ---- threads ----------------------------------------------------------- */

/* Workers inside the critical section right now, over all groups of a
 * test (each test runs in its own process). */
static atomic_int g_inside;
/* The fencing token of the last critical section entered. */
static _Atomic uint64_t g_last_token;

typedef struct excl_shared {
  rp_server_t *srv;
  dlock_t *shared_handle; /* NULL: each worker gets its own */
  dlock_client_t *client;
  const char *name;
  const char *counter;
  int iterations;
  atomic_int violations;
  atomic_int token_violations;
  atomic_int errors;
  atomic_int first_rc;
} excl_shared_t;

static void *excl_worker(void *p) {
  excl_shared_t *sh = p;
  redisContext *r = lu_connect(sh->srv);
  dlock_t *l = sh->shared_handle;
  if (l == NULL && dlock_get(sh->client, sh->name, &l) != 0)
    l = NULL;
  if (r == NULL || l == NULL) {
    atomic_fetch_add(&sh->errors, 1);
    if (r)
      redisFree(r);
    return NULL;
  }
  for (int i = 0; i < sh->iterations; i++) {
    /* Alternate the lease kinds and the verbs. */
    int rc = (i % 3 == 0)   ? dlock_lock(l, DLOCK_WATCHDOG)
             : (i % 3 == 1) ? dlock_lock(l, 10000)
                            : dlock_trylock(l, DLOCK_WAIT_FOREVER, 10000);
    if (rc != 0) {
      int zero = 0;
      atomic_compare_exchange_strong(&sh->first_rc, &zero, rc);
      atomic_fetch_add(&sh->errors, 1);
      break;
    }
    if (atomic_fetch_add(&g_inside, 1) != 0)
      atomic_fetch_add(&sh->violations, 1);
    /* Each holder's token is larger than every earlier holder's. */
    uint64_t tok = dlock_token(l);
    if (tok <= atomic_load(&g_last_token))
      atomic_fetch_add(&sh->token_violations, 1);
    atomic_store(&g_last_token, tok);
    if (rmw_increment(r, sh->counter) != 0)
      atomic_fetch_add(&sh->errors, 1);
    atomic_fetch_sub(&g_inside, 1);
    rc = dlock_unlock(l);
    if (rc != 0) {
      int zero = 0;
      atomic_compare_exchange_strong(&sh->first_rc, &zero, rc);
      atomic_fetch_add(&sh->errors, 1);
      break;
    }
  }
  if (l != sh->shared_handle)
    dlock_free(l);
  redisFree(r);
  return NULL;
}

static void run_thread_exclusion(int unix_socket, int share_handle) {
  enum { THREADS = 8, ITER = 200 };
  rp_server_t *s = lu_server(unix_socket);
  dlock_client_t *c = lu_client(s);
  excl_shared_t sh;
  memset(&sh, 0, sizeof(sh));
  sh.srv = s;
  sh.client = c;
  sh.name = "excl:threads";
  sh.counter = "excl:counter";
  sh.iterations = ITER;
  if (share_handle)
    sh.shared_handle = lu_get(c, sh.name);
  atomic_init(&sh.violations, 0);
  atomic_init(&sh.errors, 0);
  atomic_init(&sh.first_rc, 0);

  int64_t t0 = lu_now_ms();
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++)
    ASSERT_EQ(pthread_create(&t[i], NULL, excl_worker, &sh), 0);
  for (int i = 0; i < THREADS; i++)
    ASSERT_EQ(pthread_join(t[i], NULL), 0);
  printf("%d threads x %d iterations: %" PRId64 " ms\n", THREADS, ITER,
         lu_now_ms() - t0);
  if (atomic_load(&sh.first_rc) != 0)
    printf("first error: %s\n", dlock_err_name(atomic_load(&sh.first_rc)));
  ASSERT_EQ(atomic_load(&sh.first_rc), 0);
  ASSERT_EQ(atomic_load(&sh.errors), 0);
  ASSERT_EQ(atomic_load(&sh.violations), 0);
  ASSERT_EQ(atomic_load(&sh.token_violations), 0);
  ASSERT_EQ(lu_get_num_n(s, sh.counter, strlen(sh.counter)), THREADS * ITER);
  ASSERT_EQ(lu_exists(s, sh.name), 0);
  dlock_free(sh.shared_handle);
  dlock_client_close(c);
  rp_free(s);
}

TEST(excl_threads_own_handles) { run_thread_exclusion(1, 0); }

TEST(excl_threads_shared_handle) { run_thread_exclusion(0, 1); }

TEST(excl_threads_two_clients) {
  /* Half of the threads on each of two clients of one process. */
  enum { THREADS = 8, ITER = 100 };
  rp_server_t *s = lu_server(1);
  dlock_client_t *c1 = lu_client(s);
  dlock_client_t *c2 = lu_client(s);
  excl_shared_t sh[2];
  for (int k = 0; k < 2; k++) {
    memset(&sh[k], 0, sizeof(sh[k]));
    sh[k].srv = s;
    sh[k].client = k ? c2 : c1;
    sh[k].name = "excl:two";
    sh[k].counter = "excl:twocounter";
    sh[k].iterations = ITER;
  }
  /* The global "inside" count detects overlap across the two clients. */
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++)
    ASSERT_EQ(pthread_create(&t[i], NULL, excl_worker, &sh[i % 2]), 0);
  for (int i = 0; i < THREADS; i++)
    ASSERT_EQ(pthread_join(t[i], NULL), 0);
  for (int k = 0; k < 2; k++) {
    ASSERT_EQ(atomic_load(&sh[k].first_rc), 0);
    ASSERT_EQ(atomic_load(&sh[k].errors), 0);
    ASSERT_EQ(atomic_load(&sh[k].violations), 0);
    ASSERT_EQ(atomic_load(&sh[k].token_violations), 0);
  }
  ASSERT_EQ(lu_get_num_n(s, "excl:twocounter", 15), THREADS * ITER);
  dlock_client_close(c1);
  dlock_client_close(c2);
  rp_free(s);
}

/* ---- processes --------------------------------------------------------- */

/* Runs in a forked child: its own client, 'iter' locked increments.
 * Exit status 0 on success, else a small code telling what failed. */
static int child_increments(const rp_server_t *s, const char *name,
                            const char *counter, int iter) {
  dlock_options_t o;
  lu_options(&o, s);
  dlock_client_t *c = NULL;
  if (dlock_client_open(&o, &c) != 0)
    return 10;
  dlock_t *l = NULL;
  if (dlock_get(c, name, &l) != 0)
    return 11;
  redisContext *r = lu_connect(s);
  if (r == NULL)
    return 12;
  int code = 0;
  for (int i = 0; i < iter && code == 0; i++) {
    int rc = dlock_lock(l, i % 2 ? DLOCK_WATCHDOG : 10000);
    if (rc != 0) {
      fprintf(stderr, "child lock: %s %s\n", dlock_err_name(rc),
              dlock_last_error());
      code = 13;
      break;
    }
    if (rmw_increment(r, counter) != 0)
      code = 14;
    redisReply *pr = redisCommand(r, "RPUSH %s:tokens %llu", counter,
                                  (unsigned long long)dlock_token(l));
    if (pr == NULL || pr->type != REDIS_REPLY_INTEGER)
      code = 16;
    if (pr)
      freeReplyObject(pr);
    rc = dlock_unlock(l);
    if (rc != 0) {
      fprintf(stderr, "child unlock: %s %s\n", dlock_err_name(rc),
              dlock_last_error());
      code = 15;
    }
  }
  redisFree(r);
  dlock_free(l);
  dlock_client_close(c);
  return code;
}

TEST(excl_processes) {
  enum { PROCS = 4, ITER = 100 };
  rp_server_t *s = lu_server(0);
  /* Fork before this process opens any client: children start clean. */
  pid_t pids[PROCS];
  for (int i = 0; i < PROCS; i++) {
    pid_t p = fork();
    ASSERT_GE(p, 0);
    if (p == 0)
      _exit(child_increments(s, "excl:procs", "excl:pcounter", ITER));
    pids[i] = p;
  }
  int64_t t0 = lu_now_ms();
  for (int i = 0; i < PROCS; i++) {
    int st = 0;
    ASSERT_EQ(waitpid(pids[i], &st, 0), pids[i]);
    ASSERT(WIFEXITED(st));
    ASSERT_EQ(WEXITSTATUS(st), 0);
  }
  printf("%d processes x %d iterations: %" PRId64 " ms\n", PROCS, ITER,
         lu_now_ms() - t0);
  ASSERT_EQ(lu_get_num_n(s, "excl:pcounter", 13), PROCS * ITER);
  ASSERT_EQ(lu_exists(s, "excl:procs"), 0);
  /* Tokens, in the order the holders came, strictly increase. */
  redisReply *r = rp_cmd(s, "LRANGE excl:pcounter:tokens 0 -1");
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->elements, PROCS * ITER);
  for (size_t i = 1; i < r->elements; i++)
    ASSERT_GT(strtoll(r->element[i]->str, NULL, 10),
              strtoll(r->element[i - 1]->str, NULL, 10));
  freeReplyObject(r);
  rp_free(s);
}

TEST(excl_processes_and_threads) {
  /* Two child processes and threads of this one, on a unix socket. */
  enum { PROCS = 2, THREADS = 4, ITER = 40 };
  rp_server_t *s = lu_server(1);
  pid_t pids[PROCS];
  for (int i = 0; i < PROCS; i++) {
    pid_t p = fork();
    ASSERT_GE(p, 0);
    if (p == 0)
      _exit(child_increments(s, "excl:mixed", "excl:mcounter", ITER));
    pids[i] = p;
  }
  dlock_client_t *c = lu_client(s);
  excl_shared_t sh;
  memset(&sh, 0, sizeof(sh));
  sh.srv = s;
  sh.client = c;
  sh.name = "excl:mixed";
  sh.counter = "excl:mcounter";
  sh.iterations = ITER;
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++)
    ASSERT_EQ(pthread_create(&t[i], NULL, excl_worker, &sh), 0);
  for (int i = 0; i < THREADS; i++)
    ASSERT_EQ(pthread_join(t[i], NULL), 0);
  for (int i = 0; i < PROCS; i++) {
    int st = 0;
    ASSERT_EQ(waitpid(pids[i], &st, 0), pids[i]);
    ASSERT(WIFEXITED(st));
    ASSERT_EQ(WEXITSTATUS(st), 0);
  }
  ASSERT_EQ(atomic_load(&sh.errors), 0);
  ASSERT_EQ(atomic_load(&sh.violations), 0);
  ASSERT_EQ(atomic_load(&sh.token_violations), 0);
  ASSERT_EQ(lu_get_num_n(s, "excl:mcounter", 13), (PROCS + THREADS) * ITER);
  dlock_client_close(c);
  rp_free(s);
}

/* ---- wake-up latency --------------------------------------------------- */

typedef struct wake_arg {
  dlock_t *l;
  int rc;
  double acquired_ms;
} wake_arg_t;

static void *wake_waiter(void *p) {
  wake_arg_t *a = p;
  a->rc = dlock_lock(a->l, 30000);
  a->acquired_ms = lu_now_ms_f();
  if (a->rc == 0)
    dlock_unlock(a->l);
  return NULL;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Holder on 'hl', waiter thread on 'wl'; 'rounds' measurements. */
static void measure_wake(dlock_t *hl, dlock_t *wl, const char *what) {
  enum { ROUNDS = 5 };
  double lat[ROUNDS];
  for (int i = 0; i < ROUNDS; i++) {
    ASSERT_DLOCK_OK(dlock_lock(hl, 30000));
    wake_arg_t a = {wl, -100, 0};
    pthread_t t;
    ASSERT_EQ(pthread_create(&t, NULL, wake_waiter, &a), 0);
    lu_sleep_ms(150); /* the waiter tries, subscribes and sleeps */
    double t0 = lu_now_ms_f();
    ASSERT_DLOCK_OK(dlock_unlock(hl));
    ASSERT_EQ(pthread_join(t, NULL), 0);
    ASSERT_EQ(a.rc, 0);
    lat[i] = a.acquired_ms - t0;
  }
  qsort(lat, ROUNDS, sizeof(double), cmp_double);
  printf("%s: wake-up after unlock min %.2f median %.2f max %.2f ms\n", what,
         lat[0], lat[ROUNDS / 2], lat[ROUNDS - 1]);
  /* Typical is about 1 ms; a missed notification would show as 30 s. */
  ASSERT_LT(lat[ROUNDS / 2], 200.0);
  ASSERT_LT(lat[ROUNDS - 1], 1000.0);
}

TEST(excl_wake_latency_same_client) {
  rp_server_t *s = lu_server(1);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = lu_get(c, "excl:wake1");
  /* One handle, two threads: different owners. */
  measure_wake(l, l, "same client");
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

TEST(excl_wake_latency_two_clients) {
  rp_server_t *s = lu_server(0);
  dlock_client_t *c1 = lu_client(s);
  dlock_client_t *c2 = lu_client(s);
  dlock_t *l1 = lu_get(c1, "excl:wake2");
  dlock_t *l2 = lu_get(c2, "excl:wake2");
  measure_wake(l1, l2, "two clients");
  dlock_free(l1);
  dlock_free(l2);
  dlock_client_close(c1);
  dlock_client_close(c2);
  rp_free(s);
}

TEST(excl_wake_latency_across_processes) {
  enum { ROUNDS = 3 };
  rp_server_t *s = lu_server(1);
  int to_child[2], to_parent[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(to_parent), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    /* The child holds the lock, tells the parent when it unlocks. */
    close(to_child[1]);
    close(to_parent[0]);
    dlock_options_t o;
    lu_options(&o, s);
    dlock_client_t *c = NULL;
    dlock_t *l = NULL;
    if (dlock_client_open(&o, &c) != 0 || dlock_get(c, "excl:wakep", &l) != 0)
      _exit(20);
    for (int i = 0; i < ROUNDS; i++) {
      if (dlock_lock(l, 30000) != 0)
        _exit(21);
      char go = 0;
      double t0 = 0;
      if (write(to_parent[1], &t0, sizeof(t0)) != sizeof(t0))
        _exit(22);
      /* The parent starts waiting, then says so. */
      if (read(to_child[0], &go, 1) != 1)
        _exit(23);
      lu_sleep_ms(150);
      t0 = lu_now_ms_f();
      if (dlock_unlock(l) != 0)
        _exit(24);
      if (write(to_parent[1], &t0, sizeof(t0)) != sizeof(t0))
        _exit(25);
      /* Wait until the parent got it and let it go again. */
      if (read(to_child[0], &go, 1) != 1)
        _exit(26);
    }
    dlock_free(l);
    dlock_client_close(c);
    _exit(0);
  }
  close(to_child[0]);
  close(to_parent[1]);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = lu_get(c, "excl:wakep");
  double lat[ROUNDS];
  for (int i = 0; i < ROUNDS; i++) {
    double t0;
    ASSERT_EQ(read(to_parent[0], &t0, sizeof(t0)), (ssize_t)sizeof(t0));
    ASSERT_EQ(dlock_is_locked(l), 1);
    ASSERT_EQ(dlock_is_held(l), 0);
    ASSERT_EQ(write(to_child[1], "g", 1), 1);
    ASSERT_DLOCK_OK(dlock_trylock(l, 10000, 30000));
    double t1 = lu_now_ms_f();
    ASSERT_EQ(read(to_parent[0], &t0, sizeof(t0)), (ssize_t)sizeof(t0));
    lat[i] = t1 - t0;
    ASSERT_DLOCK_OK(dlock_unlock(l));
    ASSERT_EQ(write(to_child[1], "g", 1), 1);
  }
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  ASSERT(WIFEXITED(st));
  ASSERT_EQ(WEXITSTATUS(st), 0);
  qsort(lat, ROUNDS, sizeof(double), cmp_double);
  printf("across processes: wake-up after unlock min %.2f median %.2f max "
         "%.2f ms\n",
         lat[0], lat[ROUNDS / 2], lat[ROUNDS - 1]);
  ASSERT_LT(lat[ROUNDS / 2], 200.0);
  ASSERT_LT(lat[ROUNDS - 1], 1000.0);
  dlock_free(l);
  dlock_client_close(c);
  close(to_child[1]);
  close(to_parent[0]);
  rp_free(s);
}

/* Several waiters in one process: each unlock lets exactly the next one
 * in, and none is left behind (no lost wake-up). */
typedef struct chain_arg {
  dlock_t *l;
  atomic_int *inside;
  atomic_int *bad;
  int rc;
} chain_arg_t;

static void *chain_waiter(void *p) {
  chain_arg_t *a = p;
  a->rc = dlock_trylock(a->l, 10000, 30000);
  if (a->rc != 0)
    return NULL;
  if (atomic_fetch_add(a->inside, 1) != 0)
    atomic_fetch_add(a->bad, 1);
  lu_sleep_ms(20);
  atomic_fetch_sub(a->inside, 1);
  a->rc = dlock_unlock(a->l);
  return NULL;
}

TEST(excl_many_waiters_all_served) {
  enum { N = 10 };
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = lu_get(c, "excl:chain");
  ASSERT_DLOCK_OK(dlock_lock(l, 30000));
  atomic_int inside, bad;
  atomic_init(&inside, 0);
  atomic_init(&bad, 0);
  chain_arg_t a[N];
  pthread_t t[N];
  for (int i = 0; i < N; i++) {
    a[i].l = l;
    a[i].inside = &inside;
    a[i].bad = &bad;
    a[i].rc = -100;
    ASSERT_EQ(pthread_create(&t[i], NULL, chain_waiter, &a[i]), 0);
  }
  lu_sleep_ms(200);
  int64_t t0 = lu_now_ms();
  ASSERT_DLOCK_OK(dlock_unlock(l));
  for (int i = 0; i < N; i++)
    ASSERT_EQ(pthread_join(t[i], NULL), 0);
  int64_t took = lu_now_ms() - t0;
  printf("%d waiters served in %" PRId64 " ms (20 ms each inside)\n", N, took);
  for (int i = 0; i < N; i++)
    ASSERT_EQ(a[i].rc, 0);
  ASSERT_EQ(atomic_load(&bad), 0);
  /* 10 x 20 ms of work; hand-offs are prompt, not lease-bound (30 s). */
  ASSERT_LT(took, 5000);
  ASSERT_EQ(lu_exists(s, "excl:chain"), 0);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/* ---- trylock wait bound ------------------------------------------------ */

TEST(excl_trylock_wait_times_out) {
  rp_server_t *s = lu_server(1);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = lu_get(c, "excl:trywait");
  ASSERT_DLOCK_OK(dlock_lock_as(l, dlock_owner_new(), 20000));

  int64_t t0 = lu_now_ms();
  ASSERT_DLOCK_ERR(dlock_trylock(l, 500, 10000), DLOCK_ETIMEDOUT);
  int64_t took = lu_now_ms() - t0;
  printf("trylock(wait 500) gave up after %" PRId64 " ms\n", took);
  ASSERT_GE(took, 450);
  ASSERT_LT(took, 2000);

  t0 = lu_now_ms();
  ASSERT_DLOCK_ERR(dlock_trylock(l, 0, 10000), DLOCK_ETIMEDOUT);
  took = lu_now_ms() - t0;
  ASSERT_LT(took, 300);
  ASSERT_EQ(dlock_is_held(l), 0);
  ASSERT_EQ(lu_hlen(s, "excl:trywait"), 1);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

TEST(excl_trylock_wait_gets_lock_released_in_time) {
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = lu_get(c, "excl:tryok");
  /* Held for 300 ms by another owner with a lease; wait up to 3 s. */
  ASSERT_DLOCK_OK(dlock_lock_as(l, dlock_owner_new(), 300));
  int64_t t0 = lu_now_ms();
  ASSERT_DLOCK_OK(dlock_trylock(l, 3000, 10000));
  int64_t took = lu_now_ms() - t0;
  printf("trylock(wait 3000) acquired after %" PRId64 " ms\n", took);
  ASSERT_LT(took, 1500);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/* ---- how waiters wait -------------------------------------------------- */

typedef struct hold_arg {
  dlock_t *l;
  int64_t wait_ms;
  atomic_int *acquired;
  atomic_int *release; /* the holder unlocks once this is set */
  int rc;
} hold_arg_t;

static void *hold_waiter(void *p) {
  hold_arg_t *a = p;
  a->rc = dlock_trylock(a->l, a->wait_ms, 30000);
  if (a->rc != 0)
    return NULL;
  atomic_fetch_add(a->acquired, 1);
  while (!atomic_load(a->release))
    lu_sleep_ms(5);
  a->rc = dlock_unlock(a->l);
  return NULL;
}

TEST(excl_waiter_does_not_poll) {
  /* A waiter on a lock held for 30 s sleeps on the channel: over 1.5 s it
   * tries a handful of times, not every few milliseconds. */
  rp_server_t *s = lu_server(1);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = lu_get(c, "excl:nopoll");
  lu_ok(rp_cmd(s, "HSET excl:nopoll someuuid:1 1"));
  lu_ok(rp_cmd(s, "PEXPIRE excl:nopoll 30000"));
  int64_t before = lu_cmd_calls(s, "evalsha") + lu_cmd_calls(s, "eval");
  ASSERT_DLOCK_ERR(dlock_trylock(l, 1500, 10000), DLOCK_ETIMEDOUT);
  int64_t tries = lu_cmd_calls(s, "evalsha") + lu_cmd_calls(s, "eval") - before;
  printf("acquire scripts run during a 1.5 s wait: %" PRId64 "\n", tries);
  /* First try, one after subscribing, one at the deadline; a script
   * reload may add one. A 100 ms poll would be 15. */
  ASSERT_LE(tries, 5);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

TEST(excl_unlock_wakes_one_waiter_per_process) {
  /* Eight waiters of one client: one unlock lets exactly one in and does
   * not make all of them run their acquire script (no thundering herd). */
  enum { N = 8 };
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = lu_get(c, "excl:herd");
  ASSERT_DLOCK_OK(dlock_lock(l, 30000));
  atomic_int acquired, release;
  atomic_init(&acquired, 0);
  atomic_init(&release, 0);
  hold_arg_t a[N];
  pthread_t t[N];
  for (int i = 0; i < N; i++) {
    a[i] = (hold_arg_t){l, 20000, &acquired, &release, -100};
    ASSERT_EQ(pthread_create(&t[i], NULL, hold_waiter, &a[i]), 0);
  }
  lu_sleep_ms(300);
  int64_t e0 = lu_cmd_calls(s, "evalsha") + lu_cmd_calls(s, "eval");
  ASSERT_DLOCK_OK(dlock_unlock(l));
  lu_sleep_ms(300);
  int64_t scripts = lu_cmd_calls(s, "evalsha") + lu_cmd_calls(s, "eval") - e0;
  printf("scripts run after one unlock with %d waiters: %" PRId64 "\n", N,
         scripts);
  ASSERT_EQ(atomic_load(&acquired), 1);
  /* The unlock itself and one acquire; a little slack, far below 1 + N. */
  ASSERT_LE(scripts, 4);
  atomic_store(&release, 1);
  for (int i = 0; i < N; i++)
    ASSERT_EQ(pthread_join(t[i], NULL), 0);
  for (int i = 0; i < N; i++)
    ASSERT_EQ(a[i].rc, 0);
  ASSERT_EQ(atomic_load(&acquired), N);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

TEST(excl_subscriptions_shared_and_dropped) {
  /* Waiters of one client share one subscription per channel, and it is
   * dropped once nobody waits (Redisson's pub/sub exhaustion, #3577). */
  enum { N = 5 };
  rp_server_t *s = lu_server(1);
  dlock_client_t *c1 = lu_client(s);
  dlock_client_t *c2 = lu_client(s);
  dlock_t *l1 = lu_get(c1, "excl:subs");
  dlock_t *l2 = lu_get(c2, "excl:subs");
  char ch[128];
  size_t chn = lu_channel(ch, sizeof(ch), "excl:subs", 9);
  lu_ok(rp_cmd(s, "HSET excl:subs someuuid:1 1"));
  lu_ok(rp_cmd(s, "PEXPIRE excl:subs 30000"));
  atomic_int acquired, release;
  atomic_init(&acquired, 0);
  atomic_init(&release, 1); /* each unlocks at once */
  hold_arg_t a[N];
  pthread_t t[N];
  for (int i = 0; i < N; i++) {
    a[i] = (hold_arg_t){i < 3 ? l1 : l2, 10000, &acquired, &release, -100};
    ASSERT_EQ(pthread_create(&t[i], NULL, hold_waiter, &a[i]), 0);
  }
  lu_sleep_ms(300);
  int64_t subs = lu_numsub(s, ch, chn);
  printf("subscribers with %d waiters in 2 clients: %" PRId64 "\n", N, subs);
  ASSERT_EQ(subs, 2);
  /* Redisson-style release. */
  lu_ok(rp_cmd(s, "DEL excl:subs"));
  freeReplyObject(rp_cmd(s, "PUBLISH %s 0", ch));
  for (int i = 0; i < N; i++)
    ASSERT_EQ(pthread_join(t[i], NULL), 0);
  for (int i = 0; i < N; i++)
    ASSERT_EQ(a[i].rc, 0);
  int64_t t0 = lu_now_ms();
  while (lu_numsub(s, ch, chn) != 0 && lu_now_ms() - t0 < 2000)
    lu_sleep_ms(10);
  ASSERT_EQ(lu_numsub(s, ch, chn), 0);

  /* A waiter that times out drops its subscription too. */
  lu_ok(rp_cmd(s, "HSET excl:subs someuuid:1 1"));
  lu_ok(rp_cmd(s, "PEXPIRE excl:subs 30000"));
  ASSERT_DLOCK_ERR(dlock_trylock(l1, 300, 10000), DLOCK_ETIMEDOUT);
  t0 = lu_now_ms();
  while (lu_numsub(s, ch, chn) != 0 && lu_now_ms() - t0 < 2000)
    lu_sleep_ms(10);
  ASSERT_EQ(lu_numsub(s, ch, chn), 0);
  dlock_free(l1);
  dlock_free(l2);
  dlock_client_close(c1);
  dlock_client_close(c2);
  rp_free(s);
}

/* ---- churn ------------------------------------------------------------- */

typedef struct churn_arg {
  dlock_client_t *c;
  int idx;
  int errors;
  int first_rc;
} churn_arg_t;

static void *churn_thread(void *p) {
  churn_arg_t *a = p;
  char name[64];
  snprintf(name, sizeof(name), "excl:churn:%d", a->idx);
  dlock_t *l = NULL;
  if (dlock_get(a->c, name, &l) != 0) {
    a->errors++;
    return NULL;
  }
  for (int i = 0; i < 150; i++) {
    int rc = dlock_lock(l, (i % 4 == 3) ? 5000 : DLOCK_WATCHDOG);
    if (rc == 0 && i % 5 == 0)
      rc = dlock_lock(l, DLOCK_WATCHDOG);
    if (rc == 0 && i % 5 == 0)
      rc = dlock_unlock(l);
    /* Some holds last across a renewal round (every 200 ms). */
    if (rc == 0 && i % 50 == 0)
      lu_sleep_ms(250);
    if (rc == 0)
      rc = dlock_unlock(l);
    if (rc != 0) {
      if (a->errors++ == 0)
        a->first_rc = rc;
    }
  }
  dlock_free(l);
  return NULL;
}

TEST(excl_churn_no_spurious_loss) {
  /* Eight threads lock and unlock their own locks as fast as they can
   * while the watchdog renews: no error, no lost-lock report for a lock
   * that was released normally, nothing left behind. */
  enum { N = 8 };
  rp_server_t *s = lu_server(0);
  lu_lost_t rec;
  lu_lost_init(&rec);
  dlock_options_t o;
  lu_options(&o, s);
  o.on_lost = lu_lost_cb;
  o.on_lost_data = &rec;
  dlock_client_t *c = lu_client_opts(&o);
  churn_arg_t a[N];
  pthread_t t[N];
  for (int i = 0; i < N; i++) {
    a[i] = (churn_arg_t){c, i, 0, 0};
    ASSERT_EQ(pthread_create(&t[i], NULL, churn_thread, &a[i]), 0);
  }
  for (int i = 0; i < N; i++)
    ASSERT_EQ(pthread_join(t[i], NULL), 0);
  for (int i = 0; i < N; i++) {
    if (a[i].errors)
      printf("thread %d: %d errors, first %s\n", i, a[i].errors,
             dlock_err_name(a[i].first_rc));
    ASSERT_EQ(a[i].errors, 0);
  }
  lu_sleep_ms(300); /* one more renewal round */
  if (lu_lost_count(&rec))
    printf("spurious on_lost for \"%s\"\n", rec.name);
  ASSERT_EQ(lu_lost_count(&rec), 0);
  redisReply *r = rp_cmd(s, "KEYS excl:churn:*");
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->elements, 0);
  freeReplyObject(r);
  dlock_client_close(c);
  rp_free(s);
}
