/*
 * The client over TLS (rediss://), end to end against TLS redis-servers
 * with certificates made at test time: every lock kind, its pub/sub
 * wake-ups and watchdog, a RedLock over three TLS servers, mutual TLS,
 * reconnection after the server restarts, and the errors a misconfigured
 * client gets at open. The harness's own commands (rp_cmd) use each
 * server's plain port, to look at what the client wrote.
 */
#include "harness/redis_proc.h"
#include "harness/test.h"
#include "harness/tls_server.h"
#include "lock_util.h"

#include <dlock.h>
#include <pthread.h>
#include <string.h>

typedef struct tls_env {
  tls_files_t *f;
  rp_server_t *s;
  int port;
  char url[128];
} tls_env;

static void env_start(tls_env *e, tls_files_t *f, const char *auth_clients) {
  memset(e, 0, sizeof(*e));
  e->f = f;
  ASSERT_EQ(tls_server_start(f, auth_clients, NULL, &e->s, &e->port), 0);
  snprintf(e->url, sizeof(e->url), "rediss://127.0.0.1:%d", e->port);
}

/* Options for a client of 'e' that trusts the test CA. */
static void tls_options(dlock_options_t *o, const tls_env *e) {
  dlock_options_init(o);
  o->url = e->url;
  o->connect_timeout_ms = 2000;
  o->command_timeout_ms = 2000;
  o->watchdog_timeout_ms = 600;
  o->tls_ca_file = e->f->ca_crt;
}

static dlock_client_t *tls_client(const tls_env *e) {
  dlock_options_t o;
  tls_options(&o, e);
  return lu_client_opts(&o);
}

static void assert_contains(const char *text, const char *part) {
  if (strstr(text, part) == NULL)
    TEST_FAIL("\"%s\" lacks \"%s\"", text, part);
}

typedef struct waiter {
  dlock_t *l;
  int64_t wait_ms;
  int rc;
  int64_t took_ms;
} waiter;

static void *wait_for_lock(void *arg) {
  waiter *w = arg;
  int64_t start = lu_now_ms();
  w->rc = dlock_trylock(w->l, w->wait_ms, 30000);
  w->took_ms = lu_now_ms() - start;
  if (w->rc == 0)
    dlock_unlock(w->l);
  return NULL;
}

/*
 * 'held' (of one client) is held; 'other' (another client's handle on the
 * same lock) waits for it, and must get it once 'held' is released, long
 * before its wait ends: the release's message reached it over its TLS
 * pub/sub connection (a watchdog lock would otherwise never expire).
 */
static void release_wakes_waiter(dlock_t *held, dlock_t *other) {
  waiter w = {other, 8000, -1, 0};
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, wait_for_lock, &w), 0);
  lu_sleep_ms(300);
  ASSERT_DLOCK_OK(dlock_unlock(held));
  pthread_join(t, NULL);
  ASSERT_DLOCK_OK(w.rc);
  ASSERT_LT(w.took_ms, 8000);
}

static void check_kind(dlock_t *a, dlock_t *b) {
  ASSERT_DLOCK_OK(dlock_lock(a, DLOCK_WATCHDOG));
  ASSERT_DLOCK_ERR(dlock_trylock(b, 0, 5000), DLOCK_ETIMEDOUT);
  int held = 0;
  ASSERT_DLOCK_OK(dlock_query_held(a, &held));
  ASSERT_EQ(held, 1);
  release_wakes_waiter(a, b);
}

TEST(tls_every_lock_kind) {
  tls_files_t *f;
  ASSERT_EQ(tls_files_make(&f), 0);
  tls_env e;
  env_start(&e, f, "no");
  dlock_client_t *ca = tls_client(&e), *cb = tls_client(&e);

  for (int kind = DLOCK_REENTRANT; kind <= DLOCK_SPIN; kind++) {
    char name[32];
    snprintf(name, sizeof(name), "tls:kind%d", kind);
    dlock_t *a, *b;
    ASSERT_DLOCK_OK(dlock_get_kind(ca, kind, name, strlen(name), &a));
    ASSERT_DLOCK_OK(dlock_get_kind(cb, kind, name, strlen(name), &b));
    check_kind(a, b);
    dlock_free(a);
    dlock_free(b);
  }
  /* Read-write: a writer excludes readers, and its release wakes them. */
  dlock_t *ra, *wa, *rb, *wb;
  ASSERT_DLOCK_OK(dlock_get_rw(ca, "tls:rw", &ra, &wa));
  ASSERT_DLOCK_OK(dlock_get_rw(cb, "tls:rw", &rb, &wb));
  check_kind(wa, rb);
  ASSERT_DLOCK_OK(dlock_lock(ra, 5000));
  ASSERT_DLOCK_OK(dlock_trylock(rb, 0, 5000));
  ASSERT_DLOCK_ERR(dlock_trylock(wb, 0, 5000), DLOCK_ETIMEDOUT);
  ASSERT_DLOCK_OK(dlock_unlock(rb));
  ASSERT_DLOCK_OK(dlock_unlock(ra));
  /* A MultiLock over a reentrant and the write lock. */
  dlock_t *x, *parts[2], *m;
  ASSERT_DLOCK_OK(dlock_get(ca, "tls:multi", &x));
  parts[0] = x;
  parts[1] = wa;
  ASSERT_DLOCK_OK(dlock_get_multi(parts, 2, &m));
  ASSERT_DLOCK_OK(dlock_lock(m, 5000));
  ASSERT_DLOCK_ERR(dlock_trylock(wb, 0, 5000), DLOCK_ETIMEDOUT);
  ASSERT_EQ(lu_exists(e.s, "tls:multi"), 1);
  ASSERT_DLOCK_OK(dlock_unlock(m));
  ASSERT_EQ(lu_exists(e.s, "tls:multi"), 0);
  dlock_free(m);
  dlock_free(x);
  dlock_free(ra);
  dlock_free(wa);
  dlock_free(rb);
  dlock_free(wb);

  /* The watchdog renews over TLS: held three leases long, still held. */
  dlock_t *wd = lu_get(ca, "tls:watchdog");
  ASSERT_DLOCK_OK(dlock_lock(wd, DLOCK_WATCHDOG));
  lu_sleep_ms(1800);
  ASSERT_GT(lu_pttl(e.s, "tls:watchdog"), 0);
  ASSERT_DLOCK_OK(dlock_unlock(wd));
  dlock_free(wd);

  /* Plain commands and inspection share the connection. */
  const char *ping[] = {"PING"};
  dlock_reply_t *r;
  ASSERT_DLOCK_OK(dlock_client_command(ca, 1, ping, NULL, &r));
  ASSERT_STR_EQ(r->str, "PONG");
  dlock_reply_free(r);

  dlock_client_close(ca);
  dlock_client_close(cb);
  rp_free(e.s);
  tls_files_free(f);
}

TEST(tls_redlock_over_three_servers) {
  tls_files_t *f;
  ASSERT_EQ(tls_files_make(&f), 0);
  tls_env e[3];
  dlock_client_t *c[3];
  dlock_t *l[3];
  for (int i = 0; i < 3; i++) {
    env_start(&e[i], f, "no");
    c[i] = tls_client(&e[i]);
    l[i] = lu_get(c[i], "tls:red");
  }
  dlock_t *red;
  ASSERT_DLOCK_OK(dlock_get_red(l, 3, &red));
  ASSERT_DLOCK_OK(dlock_lock(red, 10000));
  for (int i = 0; i < 3; i++)
    ASSERT_EQ(lu_exists(e[i].s, "tls:red"), 1);
  ASSERT_DLOCK_OK(dlock_unlock(red));
  for (int i = 0; i < 3; i++)
    ASSERT_EQ(lu_exists(e[i].s, "tls:red"), 0);
  dlock_free(red);
  for (int i = 0; i < 3; i++) {
    dlock_free(l[i]);
    dlock_client_close(c[i]);
    rp_free(e[i].s);
  }
  tls_files_free(f);
}

TEST(tls_mutual) {
  tls_files_t *f;
  ASSERT_EQ(tls_files_make(&f), 0);
  tls_env e;
  env_start(&e, f, "yes");
  dlock_options_t o;
  tls_options(&o, &e);
  o.tls_cert_file = f->client_crt;
  o.tls_key_file = f->client_key;
  dlock_client_t *a = lu_client_opts(&o), *b = lu_client_opts(&o);
  dlock_t *la = lu_get(a, "tls:mutual"), *lb = lu_get(b, "tls:mutual");
  check_kind(la, lb);
  dlock_free(la);
  dlock_free(lb);
  dlock_client_close(a);
  dlock_client_close(b);

  /* Without a certificate, or with one from another CA: refused at open,
   * even for a lazy client, which waits only for servers that are down. */
  dlock_client_t *c = NULL;
  for (int lazy = 0; lazy <= 1; lazy++) {
    tls_options(&o, &e);
    o.lazy_connect = lazy;
    ASSERT_DLOCK_ERR(dlock_client_open(&o, &c), DLOCK_EAUTH);
    assert_contains(dlock_last_error(), "requires a client certificate");
    assert_contains(dlock_last_error(), e.url + strlen("rediss://"));
    o.tls_cert_file = f->rogue_client_crt;
    o.tls_key_file = f->rogue_client_key;
    ASSERT_DLOCK_ERR(dlock_client_open(&o, &c), DLOCK_EAUTH);
    assert_contains(dlock_last_error(), "refused the client certificate");
  }
  ASSERT_NULL(c);
  rp_free(e.s);
  tls_files_free(f);
}

TEST(tls_reconnect_after_the_server_restarts) {
  tls_files_t *f;
  ASSERT_EQ(tls_files_make(&f), 0);
  tls_env e;
  env_start(&e, f, "no");
  dlock_client_t *a = tls_client(&e), *b = tls_client(&e);
  dlock_t *la = lu_get(a, "tls:restart"), *lb = lu_get(b, "tls:restart");
  ASSERT_DLOCK_OK(dlock_trylock(la, 0, 5000));
  ASSERT_DLOCK_OK(dlock_unlock(la));

  ASSERT_EQ(rp_restart(e.s), 0);
  /* Both connections of both clients come back over TLS: commands, and
   * the pub/sub message that wakes a waiter. */
  int rc = DLOCK_EIO;
  for (int i = 0; i < 100 && rc == DLOCK_EIO; i++) {
    rc = dlock_trylock(la, 0, 30000);
    if (rc == DLOCK_EIO)
      lu_sleep_ms(50);
  }
  ASSERT_DLOCK_OK(rc);
  ASSERT_EQ(lu_exists(e.s, "tls:restart"), 1);
  release_wakes_waiter(la, lb);
  dlock_free(la);
  dlock_free(lb);
  dlock_client_close(a);
  dlock_client_close(b);
  rp_free(e.s);
  tls_files_free(f);
}

TEST(tls_open_errors_name_the_server_and_do_not_hang) {
  tls_files_t *f;
  ASSERT_EQ(tls_files_make(&f), 0);
  tls_env e;
  env_start(&e, f, "no");
  dlock_options_t o;
  dlock_client_t *c = NULL;
  char where[64];
  snprintf(where, sizeof(where), "127.0.0.1:%d", e.port);

  /* The system's CAs do not know the test CA. */
  tls_options(&o, &e);
  o.tls_ca_file = NULL;
  ASSERT_DLOCK_ERR(dlock_client_open(&o, &c), DLOCK_EAUTH);
  assert_contains(dlock_last_error(), "not trusted");
  assert_contains(dlock_last_error(), where);
  /* A name the certificate does not have. */
  tls_options(&o, &e);
  o.tls_server_name = "redis.example.com";
  ASSERT_DLOCK_ERR(dlock_client_open(&o, &c), DLOCK_EAUTH);
  assert_contains(dlock_last_error(), "host name mismatch");
  /* ... which tls_insecure lets through. */
  o.tls_insecure = 1;
  o.tls_ca_file = NULL;
  c = lu_client_opts(&o);
  dlock_client_close(c);
  c = NULL;

  /* rediss:// to the plain port: no hang, a hint. */
  char url[128];
  snprintf(url, sizeof(url), "rediss://127.0.0.1:%d", rp_port(e.s));
  tls_options(&o, &e);
  o.url = url;
  o.connect_timeout_ms = 1000;
  int64_t start = lu_now_ms();
  int rc = dlock_client_open(&o, &c);
  if (rc != DLOCK_EIO && rc != DLOCK_EPROTO)
    TEST_FAIL("got %s: %s", dlock_err_name(rc), dlock_last_error());
  assert_contains(dlock_last_error(), "plain");
  ASSERT_LT(lu_now_ms() - start, 1000 + 4000);

  /* redis:// to the TLS port. */
  snprintf(url, sizeof(url), "redis://127.0.0.1:%d", e.port);
  dlock_options_init(&o);
  o.url = url;
  o.connect_timeout_ms = 1000;
  o.command_timeout_ms = 1000;
  start = lu_now_ms();
  rc = dlock_client_open(&o, &c);
  if (rc != DLOCK_EIO && rc != DLOCK_EPROTO)
    TEST_FAIL("got %s: %s", dlock_err_name(rc), dlock_last_error());
  assert_contains(dlock_last_error(), "rediss://");
  assert_contains(dlock_last_error(), where);
  ASSERT_LT(lu_now_ms() - start, 1000 + 4000);
  ASSERT_NULL(c);
  rp_free(e.s);
  tls_files_free(f);
}

typedef struct worker {
  dlock_client_t *c;
  int id;
  int *counter; /* guarded by the lock "tls:shared" */
  int rc;
} worker;

static void *work(void *arg) {
  worker *w = arg;
  char name[32];
  snprintf(name, sizeof(name), "tls:own%d", w->id);
  dlock_t *own, *shared;
  w->rc = dlock_get(w->c, name, &own);
  if (w->rc == 0)
    w->rc = dlock_get(w->c, "tls:shared", &shared);
  for (int i = 0; i < 150 && w->rc == 0; i++) {
    w->rc = dlock_lock(own, 10000);
    if (w->rc == 0)
      w->rc = dlock_unlock(own);
    if (w->rc == 0)
      w->rc = dlock_trylock(shared, 20000, 10000);
    if (w->rc == 0) {
      int v = *w->counter;
      *w->counter = v + 1;
      w->rc = dlock_unlock(shared);
    }
  }
  dlock_free(own);
  dlock_free(shared);
  return NULL;
}

TEST(tls_many_threads_share_one_connection) {
  /* Callers pipeline on one TLS connection: one writes while another reads
   * the replies for everybody, and OpenSSL must never see both at once. */
  tls_files_t *f;
  ASSERT_EQ(tls_files_make(&f), 0);
  tls_env e;
  env_start(&e, f, "no");
  dlock_client_t *a = tls_client(&e), *b = tls_client(&e);
  int counter = 0;
  enum { N = 6 };
  worker w[N];
  pthread_t t[N];
  for (int i = 0; i < N; i++) {
    w[i] = (worker){i % 2 ? b : a, i, &counter, -1};
    ASSERT_EQ(pthread_create(&t[i], NULL, work, &w[i]), 0);
  }
  for (int i = 0; i < N; i++) {
    pthread_join(t[i], NULL);
    ASSERT_DLOCK_OK(w[i].rc);
  }
  ASSERT_EQ(counter, N * 150);
  dlock_client_close(a);
  dlock_client_close(b);
  rp_free(e.s);
  tls_files_free(f);
}
