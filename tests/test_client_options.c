/*
 * Client options that change how a client starts and stops: lazy
 * connection (for RedLock nodes that may be down at start) and shutdown
 * while a fair-lock waiter is queued.
 */
#include "harness/redis_proc.h"
#include "harness/test.h"
#include "lock_util.h"

#include <dlock.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static dlock_client_t *open_client(const char *url, int lazy) {
  dlock_options_t o;
  dlock_options_init(&o);
  o.url = url;
  o.lazy_connect = lazy;
  o.connect_timeout_ms = 300;
  o.command_timeout_ms = 300;
  o.watchdog_timeout_ms = 600;
  o.fair_wait_timeout_ms = 60000;
  dlock_client_t *c = NULL;
  int rc = dlock_client_open(&o, &c);
  return rc == 0 ? c : NULL;
}

TEST(lazy_client_opens_while_server_down_and_works_once_up) {
  rp_options_t ro;
  rp_options_init(&ro);
  rp_server_t *s;
  ASSERT_EQ(rp_start(&ro, &s), 0);
  char url[256];
  snprintf(url, sizeof(url), "%s", rp_url(s));
  ASSERT_EQ(rp_stop(s), 0);

  /* Without lazy_connect the open fails; with it, it succeeds and calls
   * fail with DLOCK_EIO until the server is back. */
  ASSERT_NULL(open_client(url, 0));
  dlock_client_t *c = open_client(url, 1);
  ASSERT_NOT_NULL(c);
  dlock_t *l;
  ASSERT_DLOCK_OK(dlock_get(c, "lazy", &l));
  ASSERT_DLOCK_ERR(dlock_trylock(l, 0, 5000), DLOCK_EIO);

  ASSERT_EQ(rp_restart(s), 0);
  int rc = DLOCK_EIO;
  for (int i = 0; i < 50 && rc == DLOCK_EIO; i++) {
    test_sleep_ms(50);
    rc = dlock_trylock(l, 0, 5000);
  }
  ASSERT_DLOCK_OK(rc);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

TEST(lazy_client_still_refuses_a_wrong_password) {
  rp_options_t ro;
  rp_options_init(&ro);
  ro.requirepass = "right";
  rp_server_t *s;
  ASSERT_EQ(rp_start(&ro, &s), 0);
  char url[256];
  snprintf(url, sizeof(url), "redis://:wrong@127.0.0.1:%d", rp_port(s));
  dlock_options_t o;
  dlock_options_init(&o);
  o.url = url;
  o.lazy_connect = 1;
  dlock_client_t *c = NULL;
  ASSERT_DLOCK_ERR(dlock_client_open(&o, &c), DLOCK_EAUTH);
  ASSERT_NULL(c);
  rp_free(s);
}

typedef struct waiter_arg {
  dlock_t *l;
  int rc;
} waiter_arg;

static void *fair_waiter(void *p) {
  waiter_arg *a = p;
  a->rc = dlock_lock(a->l, 5000);
  return NULL;
}

TEST(shutdown_of_a_queued_fair_waiter_leaves_the_queue) {
  rp_options_t ro;
  rp_options_init(&ro);
  rp_server_t *s;
  ASSERT_EQ(rp_start(&ro, &s), 0);
  dlock_client_t *holder = open_client(rp_url(s), 0);
  dlock_client_t *c = open_client(rp_url(s), 0);
  ASSERT_NOT_NULL(holder);
  ASSERT_NOT_NULL(c);
  dlock_t *h, *l;
  ASSERT_DLOCK_OK(dlock_get_fair(holder, "fq", &h));
  ASSERT_DLOCK_OK(dlock_get_fair(c, "fq", &l));
  ASSERT_DLOCK_OK(dlock_lock(h, 5000));

  waiter_arg a = {l, 1};
  pthread_t t;
  pthread_create(&t, NULL, fair_waiter, &a);
  int64_t len = 0;
  for (int i = 0; i < 100 && len == 0; i++) {
    test_sleep_ms(10);
    redisReply *r = rp_cmd(s, "LLEN redisson_lock_queue:{fq}");
    ASSERT_NOT_NULL(r);
    len = r->integer;
    freeReplyObject(r);
  }
  ASSERT_EQ(len, 1);

  dlock_client_shutdown(c);
  pthread_join(t, NULL);
  ASSERT_EQ(a.rc, DLOCK_ECANCELED);
  redisReply *r = rp_cmd(s, "LLEN redisson_lock_queue:{fq}");
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->integer, 0);
  freeReplyObject(r);
  r = rp_cmd(s, "ZCARD redisson_lock_timeout:{fq}");
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->integer, 0);
  freeReplyObject(r);
  /* Later calls are refused. */
  ASSERT_DLOCK_ERR(dlock_trylock(l, 0, 5000), DLOCK_ECANCELED);

  ASSERT_DLOCK_OK(dlock_unlock(h));
  dlock_free(l);
  dlock_free(h);
  dlock_client_close(c);
  dlock_client_close(holder);
  rp_free(s);
}

/* Internal view, to check the client forgets holds whose lease ran out. */
#include "client.h"
#include "watchdog.h"

/* The size of the hold table, read under the client's lock: the watchdog
 * thread changes it at any time. */
static int64_t hold_count(dlock_client_t *c) {
  pthread_mutex_lock(&c->mu);
  int64_t n = (int64_t)c->holds.count;
  pthread_mutex_unlock(&c->mu);
  return n;
}

TEST(expired_lease_records_are_forgotten) {
  rp_options_t ro;
  rp_options_init(&ro);
  rp_server_t *s;
  ASSERT_EQ(rp_start(&ro, &s), 0);
  dlock_client_t *c = open_client(rp_url(s), 0);
  ASSERT_NOT_NULL(c);
  /* A program that takes short leases and lets them run out. */
  for (int i = 0; i < 100; i++) {
    char name[32];
    snprintf(name, sizeof(name), "lease-%d", i);
    dlock_t *l;
    ASSERT_DLOCK_OK(dlock_get(c, name, &l));
    ASSERT_DLOCK_OK(dlock_trylock(l, 0, 50));
    dlock_free(l);
  }
  ASSERT_EQ(hold_count(c), 100);
  test_sleep_ms(1200); /* past lease + the one-second grace */
  dlock__watchdog_renew_now(c);
  ASSERT_EQ(hold_count(c), 0);
  dlock_client_close(c);
  rp_free(s);
}

/* spin_us: out of its range it is refused, naming it; within it, the
 * waits that look at the socket first take every reply as the ones that
 * sleep do (a lone caller's and many threads' at once). */
TEST(spin_us_checked_and_lone_callers_take_replies_while_looking) {
  rp_server_t *s = lu_server(0);
  dlock_options_t o;
  lu_options(&o, s);
  dlock_client_t *bad = NULL;
  o.spin_us = -1;
  ASSERT_DLOCK_ERR(dlock_client_open(&o, &bad), DLOCK_EINVAL);
  ASSERT(strstr(dlock_last_error(), "spin_us") != NULL);
  o.spin_us = DLOCK_SPIN_US_MAX + 1;
  ASSERT_DLOCK_ERR(dlock_client_open(&o, &bad), DLOCK_EINVAL);
  ASSERT_NULL(bad);
  o.spin_us = DLOCK_SPIN_US_MAX;
  dlock_client_t *c = lu_client_opts(&o);
  dlock_t *l = lu_get(c, "spin-us");
  for (int i = 0; i < 200; i++) {
    ASSERT_DLOCK_OK(dlock_trylock(l, 0, 30000));
    ASSERT_EQ(dlock_token(l) > 0, 1);
    ASSERT_DLOCK_OK(dlock_unlock(l));
  }
  ASSERT_EQ(lu_exists(s, "spin-us"), 0);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}
