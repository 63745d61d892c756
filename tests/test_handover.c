/*
 * Hand-over inside one client: a reentrant lock released while threads of
 * the same client wait for it goes straight to the first of them, in one
 * script, without an unlock message; after a few in a row it is released
 * for every client's waiters.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "lock.h"
#include "lock_util.h"

typedef struct waiter {
  dlock_t *l;
  int64_t wait_ms;
  int64_t hold_ms;
  int rc;
  uint64_t token;
  atomic_int held;  /* set while it holds the lock */
  atomic_int ready; /* set just before it asks for the lock */
  atomic_int *inside, *overlaps;
  atomic_int *seq;
  int order; /* its place among the acquisitions (from 'seq') */
} waiter_t;

static void *waiter_main(void *p) {
  waiter_t *w = p;
  atomic_store(&w->ready, 1);
  w->rc = dlock_trylock(w->l, w->wait_ms, DLOCK_WATCHDOG);
  if (w->rc != 0)
    return NULL;
  w->token = dlock_token(w->l);
  if (w->seq)
    w->order = atomic_fetch_add(w->seq, 1);
  if (w->inside && atomic_fetch_add(w->inside, 1) != 0)
    atomic_fetch_add(w->overlaps, 1);
  atomic_store(&w->held, 1);
  if (w->hold_ms > 0)
    lu_sleep_ms(w->hold_ms);
  atomic_store(&w->held, 0);
  if (w->inside)
    atomic_fetch_sub(w->inside, 1);
  w->rc = dlock_unlock(w->l);
  return NULL;
}

/* Starts 'w' (its shared counters already set, or zeroed) and returns
 * once it is about to ask for the lock. */
static void start_waiter(waiter_t *w, dlock_t *l, int64_t wait_ms,
                         int64_t hold_ms, pthread_t *t) {
  w->l = l;
  w->wait_ms = wait_ms;
  w->hold_ms = hold_ms;
  atomic_init(&w->held, 0);
  atomic_init(&w->ready, 0);
  ASSERT_EQ(pthread_create(t, NULL, waiter_main, w), 0);
  while (!atomic_load(&w->ready))
    lu_sleep_ms(1);
}

/* Waits until the client is subscribed to the lock's channel and its
 * waiters have settled in their wait (their attempts done). */
static void settle(rp_server_t *s, const char *ch) {
  for (int i = 0; i < 300 && lu_numsub(s, ch, strlen(ch)) < 2; i++)
    lu_sleep_ms(10);
  /* The raw subscriber and the client. */
  ASSERT_EQ(lu_numsub(s, ch, strlen(ch)), 2);
  lu_sleep_ms(200);
}

static void wait_held(waiter_t *w, int64_t limit_ms) {
  int64_t t0 = lu_now_ms();
  while (!atomic_load(&w->held) && lu_now_ms() - t0 < limit_ms)
    lu_sleep_ms(1);
  ASSERT(atomic_load(&w->held));
}

/* The releasing thread's unlock leaves the lock held by the waiting thread
 * of its client, with the next token; nobody is told on the channel, and
 * the waiter needs no command of its own to take it up. */
TEST(handover_same_client) {
  const char *name = "ho:same";
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = lu_get(c, name);
  char ch[256], tok[256];
  lu_channel(ch, sizeof(ch), name, strlen(name));
  lu_token_key(tok, sizeof(tok), name, strlen(name));
  redisContext *sub = lu_subscribe(s, ch, strlen(ch));
  /* A fixed lease: no watchdog renewal runs a script meanwhile. */
  ASSERT_DLOCK_OK(dlock_lock(l, 10000));
  uint64_t t0 = dlock_token(l);

  waiter_t w;
  pthread_t t;
  memset(&w, 0, sizeof(w));
  start_waiter(&w, l, 10000, 300, &t);
  settle(s, ch);
  int64_t calls = lu_cmd_calls(s, "evalsha");
  ASSERT_DLOCK_OK(dlock_unlock(l));
  ASSERT_EQ(lu_hlen(s, name), 1);
  ASSERT_EQ(lu_get_num_n(s, tok, strlen(tok)), (int64_t)t0 + 1);
  wait_held(&w, 3000);
  ASSERT_EQ(w.token, t0 + 1);
  ASSERT_EQ(lu_cmd_calls(s, "evalsha") - calls, 1);
  /* Held with the waiter's own lease (the watchdog's, 600 ms in these
   * tests), not the 10 s of the holder. */
  int64_t pttl = lu_pttl(s, name);
  ASSERT_GT(pttl, 0);
  ASSERT_LE(pttl, 600);
  char msg[64];
  ASSERT_EQ(lu_sub_wait(sub, 100, msg, sizeof(msg), NULL, 0), 0);
  redisFree(sub);

  /* Its unlock, with nobody waiting, frees the lock as usual. */
  sub = lu_subscribe(s, ch, strlen(ch));
  ASSERT_EQ(pthread_join(t, NULL), 0);
  ASSERT_DLOCK_OK(w.rc);
  ASSERT_EQ(lu_exists(s, name), 0);
  ASSERT_EQ(lu_sub_wait(sub, 2000, msg, sizeof(msg), NULL, 0), 1);
  ASSERT_STR_EQ(msg, "0");
  redisFree(sub);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/* Five threads queued behind the holder: the first three releases hand
 * the lock over, the fourth lets every client's waiters try (the one
 * unlock message of the run), and the last, with nobody left, frees it.
 * Every thread gets the lock once, one at a time, with rising tokens. */
TEST(handover_run_is_capped) {
  enum { N = DLOCK__HANDOVER_RUN_MAX + 2 };
  const char *name = "ho:run";
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = lu_get(c, name);
  char ch[256];
  lu_channel(ch, sizeof(ch), name, strlen(name));
  redisContext *sub = lu_subscribe(s, ch, strlen(ch));
  ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));
  uint64_t t0 = dlock_token(l);
  atomic_int inside, overlaps, seq;
  atomic_init(&inside, 0);
  atomic_init(&overlaps, 0);
  atomic_init(&seq, 0);
  waiter_t w[N];
  pthread_t t[N];
  memset(w, 0, sizeof(w));
  for (int i = 0; i < N; i++) {
    w[i].inside = &inside;
    w[i].overlaps = &overlaps;
    w[i].seq = &seq;
    start_waiter(&w[i], l, 20000, 20, &t[i]);
    lu_sleep_ms(30); /* join in order */
  }
  settle(s, ch);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  uint64_t tokens[N];
  for (int i = 0; i < N; i++) {
    ASSERT_EQ(pthread_join(t[i], NULL), 0);
    ASSERT_DLOCK_OK(w[i].rc);
    tokens[w[i].order] = w[i].token;
  }
  ASSERT_EQ(atomic_load(&overlaps), 0);
  ASSERT_EQ(atomic_load(&seq), N);
  for (int i = 0; i < N; i++)
    ASSERT_EQ(tokens[i], t0 + 1 + (uint64_t)i);
  /* In join order: the client's waiters form a queue. */
  for (int i = 0; i < N; i++)
    ASSERT_EQ(w[i].order, i);
  int messages = 0;
  char msg[64];
  while (lu_sub_wait(sub, 300, msg, sizeof(msg), NULL, 0))
    messages++;
  printf("%d unlock messages for %d releases\n", messages, N + 1);
  ASSERT_EQ(messages, 2);
  ASSERT_EQ(lu_exists(s, name), 0);
  redisFree(sub);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/* DLOCK__HANDOVER_RUN_MAX + 2 waiters queued behind the holder in one client,
 * with no other client listening on the lock's channel; 'user' names an ACL
 * user to connect as (NULL: the default user). Every waiter gets the lock in
 * join order with consecutive tokens; returns the unlock messages published
 * from the first release on. */
static int64_t run_alone(const char *name, const char *user) {
  enum { N = DLOCK__HANDOVER_RUN_MAX + 2 };
  rp_server_t *s = lu_server(0);
  dlock_options_t o;
  lu_options(&o, s);
  char url[256];
  if (user != NULL) {
    lu_ok(
        rp_cmd(s, "ACL SETUSER %s on >%s-pw ~* &* +@all -pubsub", user, user));
    snprintf(url, sizeof(url), "redis://%s:%s-pw@127.0.0.1:%d", user, user,
             rp_port(s));
    o.url = url;
  }
  dlock_client_t *c = lu_client_opts(&o);
  dlock_t *l = lu_get(c, name);
  char ch[256];
  lu_channel(ch, sizeof(ch), name, strlen(name));
  ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));
  uint64_t t0 = dlock_token(l);
  atomic_int seq;
  atomic_init(&seq, 0);
  waiter_t w[N];
  pthread_t t[N];
  memset(w, 0, sizeof(w));
  for (int i = 0; i < N; i++) {
    w[i].seq = &seq;
    start_waiter(&w[i], l, 20000, 20, &t[i]);
    lu_sleep_ms(30); /* join in order */
  }
  for (int i = 0; i < 300 && lu_numsub(s, ch, strlen(ch)) < 1; i++)
    lu_sleep_ms(10);
  ASSERT_EQ(lu_numsub(s, ch, strlen(ch)), 1);
  lu_sleep_ms(200);
  int64_t published = lu_cmd_calls(s, "publish");
  ASSERT_DLOCK_OK(dlock_unlock(l));
  for (int i = 0; i < N; i++) {
    ASSERT_EQ(pthread_join(t[i], NULL), 0);
    ASSERT_DLOCK_OK(w[i].rc);
    ASSERT_EQ(w[i].order, i);
    ASSERT_EQ(w[i].token, t0 + 1 + (uint64_t)i);
  }
  published = lu_cmd_calls(s, "publish") - published;
  ASSERT_EQ(lu_exists(s, name), 0);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
  return published;
}

/* Alone on the lock's channel, the client still releases the lock for
 * everyone at the run cap (a second message): a client that polls without
 * listening cannot be seen on the channel, and would otherwise never find
 * the lock free (test_redisson_java measures its share). The lock still
 * goes to every waiter in order. */
TEST(handover_alone_still_releases_at_cap) {
  ASSERT_EQ(run_alone("ho:alone", NULL), 2);
}

/* A user Redis does not let run PUBSUB: the script cannot tell whether
 * another client listens, and releases the lock for everyone at the run
 * cap all the same (a second message); the lock still goes to every
 * waiter in order. */
TEST(handover_without_pubsub_permission_releases_at_cap) {
  ASSERT_EQ(run_alone("ho:alone:acl", "nopubsub"), 2);
}

/* With another client waiting, the release at the run cap is for every
 * client (an unlock message, the lock free), and both clients' waiters
 * get the lock, one at a time, with rising tokens. */
TEST(handover_cap_releases_when_another_client_waits) {
  enum { N = DLOCK__HANDOVER_RUN_MAX + 1 };
  const char *name = "ho:cap:other";
  rp_server_t *s = lu_server(0);
  dlock_client_t *a = lu_client(s), *b = lu_client(s);
  dlock_t *la = lu_get(a, name), *lb = lu_get(b, name);
  char ch[256];
  lu_channel(ch, sizeof(ch), name, strlen(name));
  ASSERT_DLOCK_OK(dlock_lock(la, DLOCK_WATCHDOG));
  uint64_t t0 = dlock_token(la);
  atomic_int inside, overlaps, seq;
  atomic_init(&inside, 0);
  atomic_init(&overlaps, 0);
  atomic_init(&seq, 0);
  waiter_t w[N + 1];
  pthread_t t[N + 1];
  memset(w, 0, sizeof(w));
  for (int i = 0; i <= N; i++) {
    w[i].inside = &inside;
    w[i].overlaps = &overlaps;
    w[i].seq = &seq;
    /* The last waiter is client b's. */
    start_waiter(&w[i], i < N ? la : lb, 20000, 20, &t[i]);
    lu_sleep_ms(30);
  }
  for (int i = 0; i < 300 && lu_numsub(s, ch, strlen(ch)) < 2; i++)
    lu_sleep_ms(10);
  ASSERT_EQ(lu_numsub(s, ch, strlen(ch)), 2);
  lu_sleep_ms(200);
  int64_t published = lu_cmd_calls(s, "publish");
  ASSERT_DLOCK_OK(dlock_unlock(la));
  uint64_t tokens[N + 1];
  for (int i = 0; i <= N; i++) {
    ASSERT_EQ(pthread_join(t[i], NULL), 0);
    ASSERT_DLOCK_OK(w[i].rc);
    tokens[w[i].order] = w[i].token;
  }
  printf("client b's waiter came %d of %d\n", w[N].order + 1, N + 1);
  ASSERT_EQ(atomic_load(&overlaps), 0);
  /* DLOCK__HANDOVER_RUN_MAX hand-overs in a row inside client a... */
  for (int i = 0; i < DLOCK__HANDOVER_RUN_MAX; i++) {
    ASSERT_EQ(w[i].order, i);
    ASSERT_EQ(w[i].token, t0 + 1 + (uint64_t)i);
  }
  for (int i = 1; i <= N; i++)
    ASSERT_GT(tokens[i], tokens[i - 1]);
  /* ... then the lock is released for everyone (one message), and the
   * last two releases find no waiter of their own client (two more). */
  ASSERT_EQ(lu_cmd_calls(s, "publish") - published, 3);
  ASSERT_EQ(lu_exists(s, name), 0);
  lu_free_two(s, a, la, b, lb);
}

/* A waiter that gave up is not handed anything: the release after it
 * frees the lock. */
TEST(handover_skips_waiter_that_left) {
  const char *name = "ho:left";
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = lu_get(c, name);
  ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));
  waiter_t w;
  pthread_t t;
  memset(&w, 0, sizeof(w));
  start_waiter(&w, l, 200, 0, &t);
  ASSERT_EQ(pthread_join(t, NULL), 0);
  ASSERT_DLOCK_ERR(w.rc, DLOCK_ETIMEDOUT);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  ASSERT_EQ(lu_exists(s, name), 0);
  ASSERT_EQ(dlock_hold_count(l), 0);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/* Threads of two clients on one lock: hand-overs inside each client and
 * releases between them keep the exclusion and the tokens rising. */
TEST(handover_two_clients_exclusion) {
  enum { PER = 4, ROUNDS = 25 };
  const char *name = "ho:two";
  rp_server_t *s = lu_server(0);
  dlock_client_t *c[2] = {lu_client(s), lu_client(s)};
  dlock_t *l[2] = {lu_get(c[0], name), lu_get(c[1], name)};
  atomic_int inside, overlaps, seq;
  atomic_init(&inside, 0);
  atomic_init(&overlaps, 0);
  atomic_init(&seq, 0);
  waiter_t w[2 * PER * ROUNDS];
  uint64_t last = 0;
  for (int r = 0; r < ROUNDS; r++) {
    pthread_t t[2 * PER];
    for (int i = 0; i < 2 * PER; i++) {
      waiter_t *x = &w[r * 2 * PER + i];
      memset(x, 0, sizeof(*x));
      x->l = l[i % 2];
      x->wait_ms = 20000;
      x->hold_ms = 1;
      x->inside = &inside;
      x->overlaps = &overlaps;
      x->seq = &seq;
      atomic_init(&x->held, 0);
      atomic_init(&x->ready, 0);
      ASSERT_EQ(pthread_create(&t[i], NULL, waiter_main, x), 0);
    }
    uint64_t round_tokens[2 * PER];
    for (int i = 0; i < 2 * PER; i++) {
      ASSERT_EQ(pthread_join(t[i], NULL), 0);
      ASSERT_DLOCK_OK(w[r * 2 * PER + i].rc);
      round_tokens[i] = w[r * 2 * PER + i].token;
    }
    /* Distinct tokens, all above the last round's. */
    for (int i = 0; i < 2 * PER; i++) {
      ASSERT_GT(round_tokens[i], last);
      for (int j = 0; j < i; j++)
        ASSERT_NE(round_tokens[i], round_tokens[j]);
    }
    for (int i = 0; i < 2 * PER; i++)
      if (round_tokens[i] > last)
        last = round_tokens[i];
  }
  ASSERT_EQ(atomic_load(&overlaps), 0);
  ASSERT_EQ(lu_exists(s, name), 0);
  dlock_free(l[0]);
  dlock_free(l[1]);
  dlock_client_close(c[0]);
  dlock_client_close(c[1]);
  rp_free(s);
}
