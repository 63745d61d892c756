/*
 * A server that accepts connections and never answers (the scripted fake
 * server, silent) holds nobody but the callers waiting for it: a call
 * waiting for its connection's handshake, and the pub/sub thread
 * reconnecting, both end at once when the client is shut down and closed,
 * far sooner than the connect and command timeouts.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <netdb.h>
#include <pthread.h>
#include <stdatomic.h>

#include "harness/fake_server.h"
#include "lock_util.h"
#include "monotime.h"
#include "net/net.h"

/* Connect and command timeouts far above every bound asserted here. */
enum { LONG_TIMEOUT_MS = 10000, PROMPT_MS = 1500 };

/* The connect timeout of an open against a silent server, and how much
 * later than it the open may end on a loaded machine (far below the
 * command timeout it used to wait for). */
enum { OPEN_CONNECT_MS = 1000, OPEN_SLACK_MS = 8000 };

typedef struct call_run {
  dlock_t *l;
  pthread_t thread;
  int rc;
  _Atomic int64_t done_ms; /* when the call returned; 0 before */
} call_run;

static void *call_main(void *arg) {
  call_run *r = arg;
  r->rc = dlock_trylock(r->l, 0, 5000);
  atomic_store(&r->done_ms, lu_now_ms());
  return NULL;
}

/* A client of the fake server, which answers while the client opens. */
static dlock_client_t *fake_client(fs_server_t *fs) {
  dlock_options_t o;
  dlock_options_init(&o);
  o.url = fs_url(fs);
  o.connect_timeout_ms = LONG_TIMEOUT_MS;
  o.command_timeout_ms = LONG_TIMEOUT_MS;
  return lu_client_opts(&o);
}

TEST(shutdown_ends_a_call_waiting_for_a_silent_handshake) {
  fs_server_t *fs = fs_start();
  dlock_client_t *c = fake_client(fs);
  dlock_t *l = lu_get(c, "link:silent");
  /* Opening took a PING on the command connection and one on pub/sub's. */
  int pings = fs_count(fs, "PING");
  /* From now on the server accepts and reads, and answers nothing; the
   * connections it had are gone, so both are opened again. */
  fs_set(fs, NULL, &(fs_action_t){.how = FS_SILENT});
  fs_close_all(fs);
  call_run r = {.l = l};
  ASSERT_EQ(pthread_create(&r.thread, NULL, call_main, &r), 0);
  /* Both reconnects are in their handshake, waiting for the PING. */
  ASSERT(fs_wait_count(fs, "PING", pings + 2, 20000));
  lu_sleep_ms(50);
  ASSERT_EQ(atomic_load(&r.done_ms), 0);

  int64_t t0 = lu_now_ms();
  dlock_client_shutdown(c);
  int64_t shutdown_ms = lu_now_ms() - t0;
  pthread_join(r.thread, NULL);
  int64_t call_ms = atomic_load(&r.done_ms) - t0;
  printf("shutdown %" PRId64 " ms; the call ended %" PRId64
         " ms after it with %s\n",
         shutdown_ms, call_ms, dlock_err_name(r.rc));
  ASSERT_LT(shutdown_ms, PROMPT_MS);
  ASSERT_LT(call_ms, PROMPT_MS);
  ASSERT(r.rc == DLOCK_ECANCELED || r.rc == DLOCK_EIO);

  dlock_free(l);
  t0 = lu_now_ms();
  dlock_client_close(c);
  int64_t close_ms = lu_now_ms() - t0;
  printf("close during the pub/sub thread's handshake: %" PRId64 " ms\n",
         close_ms);
  ASSERT_LT(close_ms, PROMPT_MS);
  fs_free(fs);
}

/* ---- opening against a server that does not answer --------------------- */

/* Opens a client of the silent fake server with a short connect timeout
 * and a command timeout far longer; returns how long the open took. */
static int64_t open_silent(fs_server_t *fs, int lazy, int *rc,
                           dlock_client_t **c) {
  dlock_options_t o;
  dlock_options_init(&o);
  o.url = fs_url(fs);
  o.connect_timeout_ms = OPEN_CONNECT_MS;
  o.command_timeout_ms = 40000;
  o.lazy_connect = lazy;
  int64_t t0 = lu_now_ms();
  *rc = dlock_client_open(&o, c);
  return lu_now_ms() - t0;
}

/*
 * The connect succeeds (the server accepts) and the handshake's PING is
 * never answered: the open ends at its connect timeout, with an error
 * naming the server, instead of waiting a command timeout for each
 * connection's handshake (40 s here; 3 s with the defaults). A lazy client
 * opens in the same time and keeps trying behind the scenes.
 */
TEST(open_against_a_silent_server_ends_at_its_connect_timeout) {
  fs_server_t *fs = fs_start();
  fs_set(fs, NULL, &(fs_action_t){.how = FS_SILENT});
  dlock_client_t *c = NULL;
  int rc;
  int64_t ms = open_silent(fs, 0, &rc, &c);
  printf("open: %s after %" PRId64 " ms (%s)\n", dlock_err_name(rc), ms,
         dlock_last_error());
  ASSERT_EQ(rc, DLOCK_EIO);
  ASSERT_NULL(c);
  ASSERT(strstr(dlock_last_error(), fs_url(fs) + strlen("redis://")) != NULL);
  ASSERT_GE(ms, OPEN_CONNECT_MS - 50);
  ASSERT_LT(ms, OPEN_CONNECT_MS + OPEN_SLACK_MS);

  ms = open_silent(fs, 1, &rc, &c);
  printf("lazy open: %s after %" PRId64 " ms\n", dlock_err_name(rc), ms);
  ASSERT_EQ(rc, 0);
  ASSERT_LT(ms, OPEN_CONNECT_MS + OPEN_SLACK_MS);
  int64_t t0 = lu_now_ms();
  dlock_client_shutdown(c);
  dlock_client_close(c);
  ASSERT_LT(lu_now_ms() - t0, PROMPT_MS);
  fs_free(fs);
}

/* ---- a slow host name lookup ------------------------------------------- */

/* A resolver that holds the threads that ask it to be slow until told to
 * go on (or 10 s have passed, so that a failing test ends). */
static _Thread_local int slow_here;
static atomic_int lookup_entered, lookup_go;

static int slow_getaddrinfo(const char *node, const char *service,
                            const struct addrinfo *hints,
                            struct addrinfo **res) {
  if (slow_here) {
    atomic_store(&lookup_entered, 1);
    for (int i = 0; i < 10000 && !atomic_load(&lookup_go); i++)
      lu_sleep_ms(1);
  }
  return getaddrinfo(node, service, hints, res);
}

static void *slow_call_main(void *arg) {
  slow_here = 1;
  return call_main(arg);
}

/*
 * A caller that reconnects resolves the host name without holding the
 * connection's mutex: shutting the client down while the lookup hangs
 * returns at once (it blocked on that mutex for the whole lookup before),
 * and the caller ends with DLOCK_ECANCELED once its lookup returns.
 */
TEST(shutdown_is_not_held_by_a_slow_host_name_lookup) {
  atomic_store(&lookup_entered, 0);
  atomic_store(&lookup_go, 0);
  /* Installed before the client's threads start and taken out after they
   * end: only the calling thread below ('slow_here') is slowed down. */
  dlock__net_getaddrinfo = slow_getaddrinfo;
  fs_server_t *fs = fs_start();
  dlock_client_t *c = fake_client(fs);
  dlock_t *l = lu_get(c, "link:dns");
  /* The connections go: the next call connects again, and resolves. */
  fs_close_all(fs);
  lu_sleep_ms(100);
  call_run r = {.l = l};
  ASSERT_EQ(pthread_create(&r.thread, NULL, slow_call_main, &r), 0);
  for (int i = 0; i < 20000 && !atomic_load(&lookup_entered); i++)
    lu_sleep_ms(1);
  ASSERT(atomic_load(&lookup_entered));
  lu_sleep_ms(50);

  int64_t t0 = lu_now_ms();
  dlock_client_shutdown(c);
  int64_t shutdown_ms = lu_now_ms() - t0;
  atomic_store(&lookup_go, 1);
  pthread_join(r.thread, NULL);
  printf("shutdown during a lookup: %" PRId64 " ms; the call: %s\n",
         shutdown_ms, dlock_err_name(r.rc));
  ASSERT_LT(shutdown_ms, PROMPT_MS);
  ASSERT_EQ(r.rc, DLOCK_ECANCELED);
  dlock_free(l);
  dlock_client_close(c);
  dlock__net_getaddrinfo = getaddrinfo;
  fs_free(fs);
}

/* ---- RedLock past a server that does not answer ------------------------ */

enum { REAL = 3, LEASE_MS = 2500 };

typedef struct red_fix {
  rp_server_t *s[REAL + 1]; /* s[odd] only for the paused case */
  dlock_client_t *c[REAL + 1];
  dlock_t *h[REAL + 1];
  int odd;          /* the node that does not answer */
  dlock_t *red;     /* over every node */
  dlock_t *healthy; /* over the real, answering, nodes only */
} red_fix;

static dlock_client_t *long_client(const char *url) {
  dlock_options_t o;
  dlock_options_init(&o);
  o.url = url;
  o.connect_timeout_ms = LONG_TIMEOUT_MS;
  o.command_timeout_ms = LONG_TIMEOUT_MS;
  return lu_client_opts(&o);
}

/* Node 'odd' is 'odd_url' (the fake server, or a fourth redis-server),
 * the others real redis-servers. The position matters: a node waited for
 * first, or last after the majority answered. */
static void red_fix_init(red_fix *f, const char *name, const char *odd_url,
                         int odd) {
  memset(f, 0, sizeof(*f));
  f->odd = odd;
  dlock_t *healthy[REAL];
  int k = 0;
  for (int i = 0; i <= REAL; i++) {
    if (i == odd) {
      f->c[i] = long_client(odd_url);
    } else {
      f->s[i] = lu_server(0);
      f->c[i] = long_client(rp_url(f->s[i]));
    }
    f->h[i] = lu_get(f->c[i], name);
    if (i != odd)
      healthy[k++] = f->h[i];
  }
  ASSERT_DLOCK_OK(dlock_get_red(f->h, REAL + 1, &f->red));
  ASSERT_DLOCK_OK(dlock_get_red(healthy, REAL, &f->healthy));
}

static void red_fix_free(red_fix *f) {
  dlock_free(f->red);
  dlock_free(f->healthy);
  for (int i = 0; i <= REAL; i++) {
    dlock_free(f->h[i]);
    dlock_client_close(f->c[i]);
    rp_free(f->s[i]);
  }
}

/* Median acquisition time of the healthy nodes' RedLock, in us. */
static int64_t healthy_acquire_us(red_fix *f) {
  enum { ROUNDS = 21 };
  int64_t v[ROUNDS];
  for (int i = 0; i < ROUNDS; i++) {
    int64_t t0 = dlock__now_us();
    ASSERT_DLOCK_OK(dlock_trylock(f->healthy, 0, LEASE_MS));
    v[i] = dlock__now_us() - t0;
    ASSERT_DLOCK_OK(dlock_unlock(f->healthy));
  }
  for (int i = 1; i < ROUNDS; i++)
    for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
      int64_t x = v[j];
      v[j] = v[j - 1];
      v[j - 1] = x;
    }
  return v[ROUNDS / 2];
}

/* The RedLock over every node, with one silent: acquired with the
 * majority, soon, and held on every real node; released as soon. */
static void acquire_past_the_odd_node(red_fix *f, const char *name,
                                      const char *what) {
  int64_t healthy_us = healthy_acquire_us(f);
  int64_t t0 = lu_now_ms();
  ASSERT_DLOCK_OK(dlock_trylock(f->red, 0, LEASE_MS));
  int64_t took = lu_now_ms() - t0;
  for (int i = 0; i <= REAL; i++)
    if (i != f->odd)
      ASSERT(lu_exists(f->s[i], name));
  t0 = lu_now_ms();
  ASSERT_DLOCK_OK(dlock_unlock(f->red));
  int64_t released = lu_now_ms() - t0;
  /* Once more: the silent node is not asked again until it answers. */
  t0 = lu_now_ms();
  ASSERT_DLOCK_OK(dlock_trylock(f->red, 0, LEASE_MS));
  int64_t again = lu_now_ms() - t0;
  ASSERT_DLOCK_OK(dlock_unlock(f->red));
  printf("%s: RedLock acquired in %" PRId64 " ms (all healthy: %" PRId64
         " us; timeouts %d ms), released in %" PRId64
         " ms, acquired again in %" PRId64 " ms\n",
         what, took, healthy_us, (int)LONG_TIMEOUT_MS, released, again);
  ASSERT_LT(took, 1000);
  ASSERT_LT(released, 1000);
  ASSERT_LT(again, 1000);
}

TEST(redlock_acquires_past_a_server_that_never_answers) {
  fs_server_t *fs = fs_start();
  red_fix f;
  red_fix_init(&f, "link:red-silent", fs_url(fs), 0);
  /* The fake server's connection goes and every new one waits for its
   * handshake forever. */
  fs_set(fs, NULL, &(fs_action_t){.how = FS_SILENT});
  fs_close_all(fs);
  acquire_past_the_odd_node(&f, "link:red-silent",
                            "a server that never answers, node 0");
  int64_t t0 = lu_now_ms();
  red_fix_free(&f);
  printf("clients closed in %" PRId64 " ms\n", lu_now_ms() - t0);
  ASSERT_LT(lu_now_ms() - t0, 5 * PROMPT_MS);
  fs_free(fs);
}

TEST(redlock_acquires_past_a_paused_server) {
  rp_server_t *odd = lu_server(0);
  red_fix f;
  red_fix_init(&f, "link:red-paused", rp_url(odd), REAL);
  f.s[REAL] = odd;
  /* Connected and warm (scripts loaded) everywhere, then the last node
   * stops. */
  ASSERT_DLOCK_OK(dlock_trylock(f.red, 0, LEASE_MS));
  ASSERT_DLOCK_OK(dlock_unlock(f.red));
  ASSERT_EQ(rp_pause(odd), 0);
  acquire_past_the_odd_node(&f, "link:red-paused",
                            "a paused server, the last node");
  ASSERT_EQ(rp_resume(odd), 0);
  red_fix_free(&f);
}
