/*
 * The fair lock (dlock_get_fair): FIFO hand-over across threads and
 * processes, trylock without a wait leaving no trace, waiters that give up
 * or die leaving the queue, reentrancy, and Redisson's layout:
 *
 *   hash   N                                  field "<client-id>:<owner>" ->
 * count list   redisson_lock_queue:{N}            waiting owner fields, head
 * first zset   redisson_lock_timeout:{N}          owner field -> Unix-ms
 * deadline chan   redisson_lock__channel:{N}:<field> the head waiter's wake-up
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lock_util.h"

/* ---- helpers ------------------------------------------------------------ */

static dlock_client_t *fair_client(const rp_server_t *s, int64_t wait_timeout,
                                   const char *client_id) {
  dlock_options_t o;
  lu_options(&o, s);
  if (wait_timeout > 0)
    o.fair_wait_timeout_ms = wait_timeout;
  o.client_id = client_id;
  return lu_client_opts(&o);
}

static dlock_t *fair_get(dlock_client_t *c, const char *name) {
  dlock_t *l = NULL;
  ASSERT_DLOCK_OK(dlock_get_fair(c, name, &l));
  ASSERT_NOT_NULL(l);
  ASSERT_EQ(dlock_kind(l), DLOCK_FAIR);
  return l;
}

static void queue_key(char *buf, size_t n, const char *name) {
  lu_keyname(buf, n, "redisson_lock_queue", name, strlen(name));
}

static void timeout_key(char *buf, size_t n, const char *name) {
  lu_keyname(buf, n, "redisson_lock_timeout", name, strlen(name));
}

/* "redisson_lock__channel:{N}:<field>" */
static void owner_channel(char *buf, size_t n, const char *name,
                          const char *field) {
  char ch[512];
  lu_channel(ch, sizeof(ch), name, strlen(name));
  int w = snprintf(buf, n, "%s:%s", ch, field);
  ASSERT(w > 0 && (size_t)w < n);
}

static int64_t llen(rp_server_t *s, const char *k) {
  return lu_reply_int(rp_cmd(s, "LLEN %s", k));
}

static int64_t zcard(rp_server_t *s, const char *k) {
  return lu_reply_int(rp_cmd(s, "ZCARD %s", k));
}

/* The ZSCORE of 'member' as an integer; -1 when it is not in the zset. */
static int64_t zscore(rp_server_t *s, const char *k, const char *member) {
  redisReply *r = rp_cmd(s, "ZSCORE %s %s", k, member);
  ASSERT_NOT_NULL(r);
  int64_t v = -1;
  if (r->type == REDIS_REPLY_STRING)
    v = (int64_t)strtod(r->str, NULL);
  else
    ASSERT_EQ(r->type, REDIS_REPLY_NIL);
  freeReplyObject(r);
  return v;
}

/* The queue position of 'field' (0 = head), -1 when absent. */
static int queue_pos(rp_server_t *s, const char *qk, const char *field) {
  redisReply *r = rp_cmd(s, "LRANGE %s 0 -1", qk);
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->type, REDIS_REPLY_ARRAY);
  int pos = -1;
  for (size_t i = 0; i < r->elements && pos < 0; i++)
    if (strcmp(r->element[i]->str, field) == 0)
      pos = (int)i;
  freeReplyObject(r);
  return pos;
}

/* The server's clock as Unix milliseconds (TIME). */
static int64_t server_unix_ms(rp_server_t *s) {
  redisReply *r = rp_cmd(s, "TIME");
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->type, REDIS_REPLY_ARRAY);
  ASSERT_EQ(r->elements, 2);
  int64_t ms = strtoll(r->element[0]->str, NULL, 10) * 1000 +
               strtoll(r->element[1]->str, NULL, 10) / 1000;
  freeReplyObject(r);
  return ms;
}

/* Keys other than fencing counters and unlock latches, printed. */
static int64_t keys_left(rp_server_t *s) {
  redisReply *r = rp_cmd(s, "KEYS *");
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->type, REDIS_REPLY_ARRAY);
  int64_t n = 0;
  for (size_t i = 0; i < r->elements; i++) {
    const char *k = r->element[i]->str;
    if (strncmp(k, "redisson_lock_token:", 20) == 0 ||
        strncmp(k, "redisson_unlock_latch:", 22) == 0)
      continue;
    printf("key left: %s\n", k);
    n++;
  }
  freeReplyObject(r);
  return n;
}

/* Polls until the queue has 'n' entries; fails the test after 'limit_ms'. */
static void wait_queue_len(rp_server_t *s, const char *qk, int64_t n,
                           int64_t limit_ms) {
  int64_t t0 = lu_now_ms();
  int64_t got = -1;
  while (lu_now_ms() - t0 < limit_ms) {
    got = llen(s, qk);
    if (got == n)
      return;
    lu_sleep_ms(2);
  }
  fprintf(stderr, "queue %s: length %" PRId64 ", expected %" PRId64 "\n", qk,
          got, n);
  ASSERT_EQ(got, n);
}

/* A thread waiting on the fair lock. It publishes its owner before asking
 * and keeps the lock for 'hold_ms' once it has it. */
typedef struct fair_waiter {
  dlock_t *l;
  int idx;
  int64_t wait_ms; /* DLOCK_WAIT_FOREVER: dlock_lock */
  int64_t hold_ms;
  _Atomic uint64_t owner;
  int rc;
  int64_t asked_ms, acquired_ms, done_ms;
  uint64_t token;  /* the fencing token of its hold */
  atomic_int held; /* set while it holds the lock */
  /* shared */
  atomic_int *seq;
  int *order;
  atomic_int *inside;
  atomic_int *overlaps;
} fair_waiter_t;

static void *fair_waiter_main(void *p) {
  fair_waiter_t *w = p;
  atomic_store(&w->owner, dlock_self());
  w->asked_ms = lu_now_ms();
  w->rc = w->wait_ms == DLOCK_WAIT_FOREVER
              ? dlock_lock(w->l, 10000)
              : dlock_trylock(w->l, w->wait_ms, 10000);
  w->acquired_ms = lu_now_ms();
  if (w->rc == 0) {
    w->token = dlock_token(w->l);
    atomic_store(&w->held, 1);
    if (w->inside && atomic_fetch_add(w->inside, 1) != 0)
      atomic_fetch_add(w->overlaps, 1);
    if (w->seq)
      w->order[atomic_fetch_add(w->seq, 1)] = w->idx;
    if (w->hold_ms > 0)
      lu_sleep_ms(w->hold_ms);
    if (w->inside)
      atomic_fetch_sub(w->inside, 1);
    atomic_store(&w->held, 0);
    w->rc = dlock_unlock(w->l);
  }
  w->done_ms = lu_now_ms();
  return NULL;
}

static uint64_t waiter_owner(fair_waiter_t *w) {
  uint64_t o;
  while ((o = atomic_load(&w->owner)) == 0)
    lu_sleep_ms(1);
  return o;
}

/* Reads pub/sub pushes ("pmessage", pattern, channel, payload) until none
 * comes for 'quiet_ms'; stores up to 'max' channel names. */
static int read_pmessages(redisContext *r, int64_t quiet_ms, char (*chans)[512],
                          int max) {
  struct timeval tv = {(time_t)(quiet_ms / 1000),
                       (suseconds_t)((quiet_ms % 1000) * 1000)};
  redisSetTimeout(r, tv);
  int n = 0;
  for (;;) {
    void *v = NULL;
    if (redisGetReply(r, &v) != REDIS_OK || v == NULL)
      break;
    redisReply *rep = v;
    if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 4 &&
        strcmp(rep->element[0]->str, "pmessage") == 0) {
      if (n < max)
        snprintf(chans[n], 512, "%.*s", (int)rep->element[2]->len,
                 rep->element[2]->str);
      n++;
    }
    freeReplyObject(rep);
  }
  return n;
}

/* ---- FIFO ---------------------------------------------------------------- */

TEST(fifo_order_threads) {
  enum { K = 8 };
  const char *name = "fair:fifo";
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = fair_client(s, 10000, NULL);
  dlock_t *l = fair_get(c, name);
  char qk[256], tk[256], field[256], ch[512];
  queue_key(qk, sizeof(qk), name);
  timeout_key(tk, sizeof(tk), name);

  /* The holder: this thread. */
  ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));
  ASSERT_EQ(
      lu_hget_num(s, name, lu_field(field, sizeof(field), c, dlock_self())), 1);
  ASSERT_EQ(lu_exists(s, qk), 0);

  atomic_int seq, inside, overlaps;
  atomic_init(&seq, 0);
  atomic_init(&inside, 0);
  atomic_init(&overlaps, 0);
  int order[K];
  fair_waiter_t w[K];
  pthread_t t[K];
  char fields[K][256];
  for (int i = 0; i < K; i++) {
    memset(&w[i], 0, sizeof(w[i]));
    w[i].l = l;
    w[i].idx = i;
    w[i].wait_ms = DLOCK_WAIT_FOREVER;
    w[i].hold_ms = 20;
    atomic_init(&w[i].owner, 0);
    w[i].seq = &seq;
    w[i].order = order;
    w[i].inside = &inside;
    w[i].overlaps = &overlaps;
    ASSERT_EQ(pthread_create(&t[i], NULL, fair_waiter_main, &w[i]), 0);
    /* Start the next one only once this one is queued: a defined order. */
    wait_queue_len(s, qk, i + 1, 3000);
    lu_field(fields[i], sizeof(fields[i]), c, waiter_owner(&w[i]));
  }

  /* The queue holds the waiters in the order they asked; each has a
   * deadline in the future. */
  redisReply *r = rp_cmd(s, "LRANGE %s 0 -1", qk);
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->elements, K);
  for (int i = 0; i < K; i++)
    ASSERT_STR_EQ(r->element[i]->str, fields[i]);
  freeReplyObject(r);
  ASSERT_EQ(zcard(s, tk), K);
  int64_t now = server_unix_ms(s);
  printf("deadlines relative to now (ms):");
  for (int i = 0; i < K; i++) {
    int64_t d = zscore(s, tk, fields[i]);
    printf(" %" PRId64, d - now);
    ASSERT_GT(d, now);
    /* Generous: every queued wait is far shorter than a day. */
    ASSERT_LT(d, now + 86400000);
  }
  printf("\n");

  /* Every waiter listens on its own channel; the head's is there. */
  char pat[512];
  lu_channel(pat, sizeof(pat), name, strlen(name));
  strcat(pat, ":*");
  r = rp_cmd(s, "PUBSUB CHANNELS %s", pat);
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->type, REDIS_REPLY_ARRAY);
  printf("per-owner channels subscribed: %zu of %d waiters\n", r->elements,
         (int)K);
  int head_seen = 0;
  for (size_t j = 0; j < r->elements; j++) {
    int known = 0;
    for (int i = 0; i < K; i++) {
      owner_channel(ch, sizeof(ch), name, fields[i]);
      if (strcmp(r->element[j]->str, ch) == 0) {
        known = 1;
        if (i == 0)
          head_seen = 1;
      }
    }
    if (!known)
      fprintf(stderr, "unexpected channel %s\n", r->element[j]->str);
    ASSERT(known);
  }
  freeReplyObject(r);
  ASSERT(head_seen);

  /* Watch every wake-up sent from here on. */
  redisContext *sub = lu_connect(s);
  ASSERT_NOT_NULL(sub);
  char allpat[512];
  lu_channel(allpat, sizeof(allpat), name, strlen(name));
  strcat(allpat, "*");
  redisReply *pr = redisCommand(sub, "PSUBSCRIBE %s", allpat);
  ASSERT_NOT_NULL(pr);
  freeReplyObject(pr);

  ASSERT_DLOCK_OK(dlock_unlock(l));
  for (int i = 0; i < K; i++)
    ASSERT_EQ(pthread_join(t[i], NULL), 0);
  for (int i = 0; i < K; i++)
    ASSERT_DLOCK_OK(w[i].rc);
  printf("acquisition order:");
  for (int i = 0; i < K; i++)
    printf(" %d", order[i]);
  printf("\n");
  ASSERT_EQ(atomic_load(&overlaps), 0);
  for (int i = 0; i < K; i++)
    ASSERT_EQ(order[i], i);

  /* Wake-ups went to single waiters, the first to the head. */
  char msgs[4 * K][512];
  int nmsg = read_pmessages(sub, 300, msgs, 4 * K);
  redisFree(sub);
  printf("wake-up messages: %d\n", nmsg);
  for (int j = 0; j < nmsg && j < 4 * K; j++)
    printf("  %s\n", msgs[j]);
  ASSERT_GE(nmsg, 1);
  owner_channel(ch, sizeof(ch), name, fields[0]);
  ASSERT_STR_EQ(msgs[0], ch);
  for (int j = 0; j < nmsg && j < 4 * K; j++) {
    int known = 0;
    for (int i = 0; i < K; i++) {
      owner_channel(ch, sizeof(ch), name, fields[i]);
      if (strcmp(msgs[j], ch) == 0)
        known = 1;
    }
    ASSERT(known);
  }

  ASSERT_EQ(lu_exists(s, name), 0);
  ASSERT_EQ(lu_exists(s, qk), 0);
  ASSERT_EQ(lu_exists(s, tk), 0);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/* FIFO across two clients of one process, owners given explicitly. */
TEST(fifo_order_two_clients) {
  enum { K = 6 };
  const char *name = "fair:fifo2";
  rp_server_t *s = lu_server(1);
  dlock_client_t *c[2] = {fair_client(s, 10000, NULL),
                          fair_client(s, 10000, NULL)};
  dlock_t *l[2] = {fair_get(c[0], name), fair_get(c[1], name)};
  char qk[256];
  queue_key(qk, sizeof(qk), name);
  ASSERT_DLOCK_OK(dlock_lock(l[0], 10000));

  atomic_int seq;
  atomic_init(&seq, 0);
  int order[K];
  fair_waiter_t w[K];
  pthread_t t[K];
  static const int which[K] = {0, 1, 1, 0, 1, 0};
  for (int i = 0; i < K; i++) {
    memset(&w[i], 0, sizeof(w[i]));
    w[i].l = l[which[i]];
    w[i].idx = i;
    w[i].wait_ms = 20000;
    atomic_init(&w[i].owner, 0);
    w[i].seq = &seq;
    w[i].order = order;
    ASSERT_EQ(pthread_create(&t[i], NULL, fair_waiter_main, &w[i]), 0);
    wait_queue_len(s, qk, i + 1, 3000);
  }
  ASSERT_DLOCK_OK(dlock_unlock(l[0]));
  for (int i = 0; i < K; i++)
    ASSERT_EQ(pthread_join(t[i], NULL), 0);
  for (int i = 0; i < K; i++)
    ASSERT_DLOCK_OK(w[i].rc);
  for (int i = 0; i < K; i++)
    ASSERT_EQ(order[i], i);
  ASSERT_EQ(lu_exists(s, qk), 0);
  dlock_free(l[0]);
  dlock_free(l[1]);
  dlock_client_close(c[0]);
  dlock_client_close(c[1]);
  rp_free(s);
}

/* ---- trylock without a wait ---------------------------------------------- */

TEST(trylock_zero_wait_does_not_enqueue) {
  const char *name = "fair:nowait";
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = fair_client(s, 10000, NULL);
  dlock_t *l = fair_get(c, name);
  char qk[256], tk[256], field[256];
  queue_key(qk, sizeof(qk), name);
  timeout_key(tk, sizeof(tk), name);

  /* Free: a zero-wait trylock takes it, without touching the queue. */
  uint64_t a = dlock_owner_new(), b = dlock_owner_new();
  ASSERT_DLOCK_OK(dlock_trylock_as(l, a, 0, 10000));
  ASSERT_EQ(lu_exists(s, qk), 0);
  ASSERT_EQ(lu_exists(s, tk), 0);

  /* Held: refused at once, no trace. */
  int64_t t0 = lu_now_ms();
  ASSERT_DLOCK_ERR(dlock_trylock_as(l, b, 0, 10000), DLOCK_ETIMEDOUT);
  printf("zero-wait refusal took %" PRId64 " ms\n", lu_now_ms() - t0);
  ASSERT_LT(lu_now_ms() - t0, 1000);
  ASSERT_EQ(lu_exists(s, qk), 0);
  ASSERT_EQ(lu_exists(s, tk), 0);
  ASSERT_EQ(dlock_is_held_as(l, b), 0);

  /* With a waiter queued, the queue stays as it is. */
  fair_waiter_t w;
  memset(&w, 0, sizeof(w));
  w.l = l;
  w.wait_ms = DLOCK_WAIT_FOREVER;
  atomic_init(&w.owner, 0);
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, fair_waiter_main, &w), 0);
  wait_queue_len(s, qk, 1, 3000);
  for (int i = 0; i < 5; i++)
    ASSERT_DLOCK_ERR(dlock_trylock_as(l, b, 0, 10000), DLOCK_ETIMEDOUT);
  ASSERT_EQ(llen(s, qk), 1);
  ASSERT_EQ(zcard(s, tk), 1);
  lu_field(field, sizeof(field), c, waiter_owner(&w));
  ASSERT_EQ(queue_pos(s, qk, field), 0);
  lu_field(field, sizeof(field), c, b);
  ASSERT_EQ(queue_pos(s, qk, field), -1);
  ASSERT_EQ(zscore(s, tk, field), -1);

  ASSERT_DLOCK_OK(dlock_unlock_as(l, a));
  ASSERT_EQ(pthread_join(t, NULL), 0);
  ASSERT_DLOCK_OK(w.rc);
  ASSERT_EQ(lu_exists(s, qk), 0);
  ASSERT_EQ(lu_exists(s, tk), 0);
  ASSERT_EQ(lu_exists(s, name), 0);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/* ---- waiters that give up ---------------------------------------------- */

TEST(timed_out_waiter_leaves_queue) {
  const char *name = "fair:giveup";
  rp_server_t *s = lu_server(0);
  /* The default wait timeout (5 minutes): a waiter left behind in the queue
   * would block the one after it far longer than this test runs. */
  dlock_client_t *c = fair_client(s, 0, NULL);
  dlock_t *l = fair_get(c, name);
  char qk[256], tk[256], fb[256], fc[256];
  queue_key(qk, sizeof(qk), name);
  timeout_key(tk, sizeof(tk), name);
  ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));

  /* Alone in the queue. */
  fair_waiter_t b;
  memset(&b, 0, sizeof(b));
  b.l = l;
  b.wait_ms = 300;
  atomic_init(&b.owner, 0);
  pthread_t tb;
  ASSERT_EQ(pthread_create(&tb, NULL, fair_waiter_main, &b), 0);
  ASSERT_EQ(pthread_join(tb, NULL), 0);
  ASSERT_DLOCK_ERR(b.rc, DLOCK_ETIMEDOUT);
  printf("lone waiter gave up after %" PRId64 " ms\n",
         b.acquired_ms - b.asked_ms);
  ASSERT_GE(b.acquired_ms - b.asked_ms, 250);
  ASSERT_LT(b.acquired_ms - b.asked_ms, 2000);
  lu_field(fb, sizeof(fb), c, atomic_load(&b.owner));
  ASSERT_EQ(queue_pos(s, qk, fb), -1);
  ASSERT_EQ(zscore(s, tk, fb), -1);
  ASSERT_EQ(lu_exists(s, qk), 0);

  /* At the head, with another waiter behind it. */
  memset(&b, 0, sizeof(b));
  b.l = l;
  b.wait_ms = 500;
  atomic_init(&b.owner, 0);
  ASSERT_EQ(pthread_create(&tb, NULL, fair_waiter_main, &b), 0);
  wait_queue_len(s, qk, 1, 3000);
  fair_waiter_t cw;
  memset(&cw, 0, sizeof(cw));
  cw.l = l;
  cw.wait_ms = DLOCK_WAIT_FOREVER;
  atomic_init(&cw.owner, 0);
  pthread_t tc;
  ASSERT_EQ(pthread_create(&tc, NULL, fair_waiter_main, &cw), 0);
  wait_queue_len(s, qk, 2, 3000);
  lu_field(fb, sizeof(fb), c, waiter_owner(&b));
  lu_field(fc, sizeof(fc), c, waiter_owner(&cw));
  ASSERT_EQ(queue_pos(s, qk, fb), 0);
  ASSERT_EQ(queue_pos(s, qk, fc), 1);
  ASSERT_EQ(pthread_join(tb, NULL), 0);
  ASSERT_DLOCK_ERR(b.rc, DLOCK_ETIMEDOUT);
  ASSERT_EQ(queue_pos(s, qk, fb), -1);
  ASSERT_EQ(zscore(s, tk, fb), -1);
  ASSERT_EQ(queue_pos(s, qk, fc), 0);
  ASSERT_EQ(llen(s, qk), 1);
  ASSERT_GT(zscore(s, tk, fc), 0);

  /* The one behind gets the lock promptly on release, not at the deadline
   * of the waiter that left. */
  int64_t t_rel = lu_now_ms();
  ASSERT_DLOCK_OK(dlock_unlock(l));
  ASSERT_EQ(pthread_join(tc, NULL), 0);
  ASSERT_DLOCK_OK(cw.rc);
  printf("next waiter acquired %" PRId64 " ms after the release\n",
         cw.acquired_ms - t_rel);
  ASSERT_LT(cw.acquired_ms - t_rel, 2000);
  ASSERT_EQ(lu_exists(s, qk), 0);
  ASSERT_EQ(lu_exists(s, tk), 0);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/* ---- handing the lock over ------------------------------------------- */

static void grant_key(char *buf, size_t n, const char *name) {
  lu_keyname(buf, n, "dlock_lock_grant", name, strlen(name));
}

/* Starts a waiter of 'l' in a thread that holds the lock 'hold_ms' once it
 * has it, and returns when it is queued (at position 'pos'). */
static void start_queued_waiter(rp_server_t *s, dlock_t *l, const char *qk,
                                int64_t hold_ms, int64_t pos, fair_waiter_t *w,
                                pthread_t *t) {
  memset(w, 0, sizeof(*w));
  w->l = l;
  w->wait_ms = DLOCK_WAIT_FOREVER;
  w->hold_ms = hold_ms;
  atomic_init(&w->owner, 0);
  atomic_init(&w->held, 0);
  ASSERT_EQ(pthread_create(t, NULL, fair_waiter_main, w), 0);
  wait_queue_len(s, qk, pos + 1, 3000);
}

static void wait_held(fair_waiter_t *w, int64_t limit_ms) {
  int64_t t0 = lu_now_ms();
  while (!atomic_load(&w->held) && lu_now_ms() - t0 < limit_ms)
    lu_sleep_ms(1);
  ASSERT(atomic_load(&w->held));
}

/* A release hands the lock straight to the dlock waiter at the head of the
 * queue, with the next token, and the waiter takes it up without another
 * command: one EVALSHA (the release) between the unlock and the waiter
 * holding the lock. */
TEST(release_hands_lock_to_head) {
  const char *name = "fair:handover";
  rp_server_t *s = lu_server(0);
  dlock_client_t *a = fair_client(s, 0, NULL), *b = fair_client(s, 0, NULL);
  dlock_t *la = fair_get(a, name), *lb = fair_get(b, name);
  char qk[256], gk[256], fb[256], tok[256];
  queue_key(qk, sizeof(qk), name);
  grant_key(gk, sizeof(gk), name);
  lu_token_key(tok, sizeof(tok), name, strlen(name));
  /* Fixed leases: no watchdog renewal runs a script meanwhile. */
  ASSERT_DLOCK_OK(dlock_lock(la, 10000));
  uint64_t t0 = dlock_token(la);
  fair_waiter_t w;
  pthread_t t;
  start_queued_waiter(s, lb, qk, 300, 0, &w, &t);
  lu_field(fb, sizeof(fb), b, waiter_owner(&w));
  ASSERT_EQ(lu_hget_num(s, gk, fb), 10000);
  /* Settled in its wait: subscribed, and done with the attempt that
   * follows the subscription. */
  char ch[512];
  owner_channel(ch, sizeof(ch), name, fb);
  for (int i = 0; i < 300 && lu_numsub(s, ch, strlen(ch)) == 0; i++)
    lu_sleep_ms(10);
  ASSERT_EQ(lu_numsub(s, ch, strlen(ch)), 1);
  lu_sleep_ms(100);

  int64_t calls = lu_cmd_calls(s, "evalsha");
  ASSERT_DLOCK_OK(dlock_unlock(la));
  /* Handed over by the release itself, atomically. */
  ASSERT_EQ(lu_hget_num(s, name, fb), 1);
  ASSERT_EQ(lu_exists(s, qk), 0);
  ASSERT_EQ(lu_exists(s, gk), 0);
  ASSERT_EQ(lu_get_num_n(s, tok, strlen(tok)), (int64_t)t0 + 1);
  wait_held(&w, 3000);
  ASSERT_EQ(lu_cmd_calls(s, "evalsha") - calls, 1);
  ASSERT_EQ(w.token, t0 + 1);
  ASSERT_EQ(pthread_join(t, NULL), 0);
  ASSERT_DLOCK_OK(w.rc);
  ASSERT_EQ(lu_exists(s, name), 0);
  lu_free_two(s, a, la, b, lb);
}

/* The waiter's pub/sub connection is cut just before the release, so the
 * message that hands it the lock is lost: once it is back, the waiter
 * finds the lock already its own and takes it up with the right token and
 * a hold count of one. */
TEST(missed_hand_over_message_is_claimed) {
  const char *name = "fair:handover:missed";
  rp_server_t *s = lu_server(0);
  dlock_client_t *a = fair_client(s, 0, NULL), *b = fair_client(s, 0, NULL);
  dlock_t *la = fair_get(a, name), *lb = fair_get(b, name);
  char qk[256], fb[256];
  queue_key(qk, sizeof(qk), name);
  ASSERT_DLOCK_OK(dlock_lock(la, 10000));
  uint64_t t0 = dlock_token(la);
  fair_waiter_t w;
  pthread_t t;
  start_queued_waiter(s, lb, qk, 300, 0, &w, &t);
  lu_field(fb, sizeof(fb), b, waiter_owner(&w));
  lu_ok(rp_cmd(s, "CLIENT KILL TYPE pubsub"));
  ASSERT_DLOCK_OK(dlock_unlock(la));
  ASSERT_EQ(lu_hget_num(s, name, fb), 1);
  wait_held(&w, 5000);
  ASSERT_EQ(w.token, t0 + 1);
  ASSERT_EQ(lu_hget_num(s, name, fb), 1);
  ASSERT_EQ(pthread_join(t, NULL), 0);
  ASSERT_DLOCK_OK(w.rc);
  /* One unlock released it: the count was one, not two. */
  ASSERT_EQ(lu_exists(s, name), 0);
  lu_free_two(s, a, la, b, lb);
}

/* A hand-over message can reach the owner late, after an attempt of its
 * own took the lock up, and then arrive while the same owner waits again.
 * Such a message, here published by hand with a token no higher than the
 * counter was when the waiter tried, must not make the waiter believe it
 * holds the lock: it keeps waiting, and gets the lock with a new token
 * only when the holder releases it. */
TEST(stale_hand_over_message_is_ignored) {
  const char *name = "fair:handover:stale";
  rp_server_t *s = lu_server(0);
  dlock_client_t *a = fair_client(s, 0, NULL), *b = fair_client(s, 0, NULL);
  dlock_t *la = fair_get(a, name), *lb = fair_get(b, name);
  char qk[256], fa[256], fb[256], tok[256], ch[512];
  queue_key(qk, sizeof(qk), name);
  lu_token_key(tok, sizeof(tok), name, strlen(name));
  ASSERT_DLOCK_OK(dlock_lock(la, 10000));
  uint64_t t0 = dlock_token(la);
  lu_field(fa, sizeof(fa), a, dlock_self());
  fair_waiter_t w;
  pthread_t t;
  start_queued_waiter(s, lb, qk, 500, 0, &w, &t);
  lu_field(fb, sizeof(fb), b, waiter_owner(&w));
  owner_channel(ch, sizeof(ch), name, fb);
  for (int i = 0; i < 300 && lu_numsub(s, ch, strlen(ch)) == 0; i++)
    lu_sleep_ms(10);
  ASSERT_EQ(lu_numsub(s, ch, strlen(ch)), 1);
  lu_sleep_ms(50);

  redisReply *r =
      rp_cmd(s, "PUBLISH %s grant:%llu", ch, (unsigned long long)t0);
  ASSERT_EQ(lu_reply_int(r), 1);
  lu_sleep_ms(300);
  ASSERT(!atomic_load(&w.held));
  ASSERT_EQ(lu_hget_num(s, name, fa), 1);
  ASSERT_EQ(lu_hget_num(s, name, fb), -1);
  ASSERT_EQ(queue_pos(s, qk, fb), 0);

  ASSERT_DLOCK_OK(dlock_unlock(la));
  ASSERT_EQ(pthread_join(t, NULL), 0);
  ASSERT_DLOCK_OK(w.rc);
  ASSERT_EQ(w.token, t0 + 1);
  ASSERT_EQ(lu_get_num_n(s, tok, strlen(tok)), (int64_t)t0 + 1);
  ASSERT_EQ(lu_exists(s, name), 0);
  lu_free_two(s, a, la, b, lb);
}

/* With a wait allowance shorter than the lease, the lock is handed over
 * with the allowance only (an owner that never takes it up must not block
 * the others for a whole lease), and the waiter restores its full lease
 * when it takes it up. */
TEST(short_allowance_hand_over_restores_lease) {
  const char *name = "fair:handover:short";
  rp_server_t *s = lu_server(0);
  dlock_client_t *a = fair_client(s, 1000, NULL),
                 *b = fair_client(s, 1000, NULL);
  dlock_t *la = fair_get(a, name), *lb = fair_get(b, name);
  char qk[256], gk[256], fb[256];
  queue_key(qk, sizeof(qk), name);
  grant_key(gk, sizeof(gk), name);
  ASSERT_DLOCK_OK(dlock_lock(la, 10000));
  fair_waiter_t w;
  pthread_t t;
  start_queued_waiter(s, lb, qk, 1500, 0, &w, &t);
  lu_field(fb, sizeof(fb), b, waiter_owner(&w));
  ASSERT_EQ(lu_hget_num(s, gk, fb), 1000);
  ASSERT_DLOCK_OK(dlock_unlock(la));
  wait_held(&w, 3000);
  int64_t pttl = lu_pttl(s, name);
  printf("lease after the hand-over was taken up: %" PRId64 " ms\n", pttl);
  ASSERT_GT(pttl, 5000);
  ASSERT_EQ(pthread_join(t, NULL), 0);
  ASSERT_DLOCK_OK(w.rc);
  ASSERT_EQ(lu_exists(s, name), 0);
  lu_free_two(s, a, la, b, lb);
}

/* ---- reentrancy and layout -------------------------------------------- */

TEST(reentrancy) {
  const char *name = "fair:re";
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = fair_client(s, 10000, NULL);
  dlock_t *l = fair_get(c, name);
  char field[256], tok[256], qk[256];
  lu_field(field, sizeof(field), c, dlock_self());
  lu_token_key(tok, sizeof(tok), name, strlen(name));
  queue_key(qk, sizeof(qk), name);

  ASSERT_DLOCK_OK(dlock_lock(l, 5000));
  uint64_t t1 = dlock_token(l);
  ASSERT_GT(t1, 0);
  ASSERT_EQ(lu_get_num_n(s, tok, strlen(tok)), (int64_t)t1);
  ASSERT_DLOCK_OK(dlock_trylock(l, 0, 5000));
  ASSERT_EQ(dlock_hold_count(l), 2);
  ASSERT_EQ(lu_hget_num(s, name, field), 2);
  ASSERT_EQ(dlock_token(l), t1); /* a reentrant acquisition keeps it */
  ASSERT_EQ(lu_get_num_n(s, tok, strlen(tok)), (int64_t)t1);

  /* Reentry succeeds at once even with others queued. */
  fair_waiter_t w;
  memset(&w, 0, sizeof(w));
  w.l = l;
  w.wait_ms = DLOCK_WAIT_FOREVER;
  atomic_init(&w.owner, 0);
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, fair_waiter_main, &w), 0);
  wait_queue_len(s, qk, 1, 3000);
  ASSERT_DLOCK_OK(dlock_trylock(l, 0, 5000));
  ASSERT_EQ(lu_hget_num(s, name, field), 3);
  ASSERT_EQ(llen(s, qk), 1);

  ASSERT_DLOCK_OK(dlock_unlock(l));
  ASSERT_DLOCK_OK(dlock_unlock(l));
  ASSERT_EQ(lu_hget_num(s, name, field), 1);
  ASSERT_EQ(dlock_is_held(l), 1);
  int64_t pttl = lu_pttl(s, name);
  ASSERT_GT(pttl, 3000); /* the lease is restored, not left to run out */
  ASSERT_LE(pttl, 5000);
  ASSERT_EQ(llen(s, qk), 1); /* the waiter still waits */
  ASSERT_DLOCK_OK(dlock_unlock(l));
  ASSERT_EQ(dlock_is_held(l), 0);
  ASSERT_EQ(pthread_join(t, NULL), 0);
  ASSERT_DLOCK_OK(w.rc);
  /* The waiter's hold was a new free->held transition. */
  ASSERT_EQ(lu_get_num_n(s, tok, strlen(tok)), (int64_t)t1 + 1);
  ASSERT_DLOCK_ERR(dlock_unlock(l), DLOCK_ENOTHELD);
  ASSERT_EQ(lu_exists(s, name), 0);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

static void check_layout(const char *name) {
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = fair_client(s, 7000, NULL);
  dlock_t *l = fair_get(c, name);
  size_t len = 0;
  ASSERT_STR_EQ(dlock_name(l, &len), name);
  ASSERT_EQ(len, strlen(name));
  char qk[256], tk[256], hf[256], wf[256];
  queue_key(qk, sizeof(qk), name);
  timeout_key(tk, sizeof(tk), name);
  printf("name %s: queue %s, timeouts %s\n", name, qk, tk);

  ASSERT_DLOCK_OK(dlock_lock(l, 4000));
  lu_field(hf, sizeof(hf), c, dlock_self());
  redisReply *r = rp_cmd(s, "TYPE %s", name);
  ASSERT_NOT_NULL(r);
  ASSERT_STR_EQ(r->str, "hash");
  freeReplyObject(r);
  ASSERT_EQ(lu_hlen(s, name), 1);
  ASSERT_EQ(lu_hget_num(s, name, hf), 1);
  int64_t pttl = lu_pttl(s, name);
  ASSERT_GT(pttl, 2000);
  ASSERT_LE(pttl, 4000);
  ASSERT_EQ(dlock_is_locked(l), 1);

  fair_waiter_t w;
  memset(&w, 0, sizeof(w));
  w.l = l;
  w.wait_ms = 20000;
  atomic_init(&w.owner, 0);
  pthread_t t;
  int64_t before = server_unix_ms(s);
  ASSERT_EQ(pthread_create(&t, NULL, fair_waiter_main, &w), 0);
  wait_queue_len(s, qk, 1, 3000);
  lu_field(wf, sizeof(wf), c, waiter_owner(&w));
  r = rp_cmd(s, "TYPE %s", qk);
  ASSERT_STR_EQ(r->str, "list");
  freeReplyObject(r);
  r = rp_cmd(s, "TYPE %s", tk);
  ASSERT_STR_EQ(r->str, "zset");
  freeReplyObject(r);
  r = rp_cmd(s, "LINDEX %s 0", qk);
  ASSERT_STR_EQ(r->str, wf);
  freeReplyObject(r);
  int64_t deadline = zscore(s, tk, wf);
  printf("deadline - enqueue time: %" PRId64 " ms (lock ttl %" PRId64
         ", wait timeout 7000)\n",
         deadline - before, pttl);
  ASSERT_GT(deadline, before);
  /* At least the fair wait timeout beyond the moment it queued, and not
   * absurdly far: lease + wait timeout + slack. */
  ASSERT_GE(deadline, before + 7000 - 500);
  ASSERT_LE(deadline, server_unix_ms(s) + 4000 + 7000 + 2000);

  /* dlock_inspect shows the queue. */
  dlock_info_t *info = NULL;
  ASSERT_DLOCK_OK(dlock_inspect(c, name, strlen(name), &info));
  ASSERT_EQ(info->locked, 1);
  ASSERT_EQ(info->nholders, 1);
  ASSERT_STR_EQ(info->holders[0].owner, hf);
  ASSERT_EQ(info->nwaiters, 1);
  ASSERT_STR_EQ(info->waiters[0].owner, wf);
  /* A queued waiter pushes its deadline forward each time it tries, so
   * the one shown may be a little later than the one read above. */
  ASSERT_GE(info->waiters[0].deadline_ms, deadline);
  ASSERT_LE(info->waiters[0].deadline_ms, deadline + 7000);
  dlock_info_free(info);

  ASSERT_DLOCK_OK(dlock_unlock(l));
  ASSERT_EQ(pthread_join(t, NULL), 0);
  ASSERT_DLOCK_OK(w.rc);
  /* Only the fencing counter (and unlock latches, which expire) remain. */
  ASSERT_EQ(keys_left(s), 0);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

TEST(layout_raw) { check_layout("fair:layout"); }

TEST(layout_name_with_brace) { check_layout("fair{tag}layout"); }

/* ---- exclusion and tokens across threads ------------------------------- */

typedef struct excl_arg {
  dlock_t *l;
  rp_server_t *s;
  int iter;
  atomic_int *inside;
  atomic_int *overlaps;
  _Atomic uint64_t *last_token;
  atomic_int *token_bad;
  int rc;
} excl_arg_t;

static void *excl_main(void *p) {
  excl_arg_t *a = p;
  for (int i = 0; i < a->iter; i++) {
    a->rc = dlock_lock(a->l, 10000);
    if (a->rc != 0)
      return NULL;
    if (atomic_fetch_add(a->inside, 1) != 0)
      atomic_fetch_add(a->overlaps, 1);
    uint64_t tok = dlock_token(a->l);
    if (tok <= atomic_load(a->last_token))
      atomic_fetch_add(a->token_bad, 1);
    atomic_store(a->last_token, tok);
    atomic_fetch_sub(a->inside, 1);
    a->rc = dlock_unlock(a->l);
    if (a->rc != 0)
      return NULL;
  }
  return NULL;
}

TEST(exclusion_threads_tokens) {
  enum { T = 6, ITER = 60 };
  const char *name = "fair:excl";
  rp_server_t *s = lu_server(1);
  dlock_client_t *c = fair_client(s, 10000, NULL);
  dlock_t *l = fair_get(c, name);
  atomic_int inside, overlaps, token_bad;
  _Atomic uint64_t last;
  atomic_init(&inside, 0);
  atomic_init(&overlaps, 0);
  atomic_init(&token_bad, 0);
  atomic_init(&last, 0);
  excl_arg_t a[T];
  pthread_t t[T];
  int64_t t0 = lu_now_ms();
  for (int i = 0; i < T; i++) {
    a[i] = (excl_arg_t){l, s, ITER, &inside, &overlaps, &last, &token_bad, 0};
    ASSERT_EQ(pthread_create(&t[i], NULL, excl_main, &a[i]), 0);
  }
  for (int i = 0; i < T; i++)
    ASSERT_EQ(pthread_join(t[i], NULL), 0);
  printf("%d threads x %d: %" PRId64 " ms\n", (int)T, (int)ITER,
         lu_now_ms() - t0);
  for (int i = 0; i < T; i++)
    ASSERT_DLOCK_OK(a[i].rc);
  ASSERT_EQ(atomic_load(&overlaps), 0);
  ASSERT_EQ(atomic_load(&token_bad), 0);
  char tok[256], qk[256], tk[256];
  lu_token_key(tok, sizeof(tok), name, strlen(name));
  queue_key(qk, sizeof(qk), name);
  timeout_key(tk, sizeof(tk), name);
  ASSERT_EQ(lu_get_num_n(s, tok, strlen(tok)), T * ITER);
  ASSERT_EQ(lu_exists(s, name), 0);
  ASSERT_EQ(lu_exists(s, qk), 0);
  ASSERT_EQ(lu_exists(s, tk), 0);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/* ---- dead waiters -------------------------------------------------------- */

enum { DEAD_WAIT_TIMEOUT = 1000 };

/* A child that queues on the lock and blocks there until it is killed. */
static _Noreturn void child_queue_forever(const rp_server_t *s,
                                          const char *name, int ready_fd) {
  dlock_options_t o;
  lu_options(&o, s);
  o.fair_wait_timeout_ms = DEAD_WAIT_TIMEOUT;
  dlock_client_t *c = NULL;
  dlock_t *l = NULL;
  if (dlock_client_open(&o, &c) != 0 || dlock_get_fair(c, name, &l) != 0)
    _exit(10);
  char id[128];
  snprintf(id, sizeof(id), "%s:%" PRIu64 "\n", dlock_client_id(c),
           dlock_self());
  if (write(ready_fd, id, strlen(id)) < 0)
    _exit(11);
  dlock_lock(l, 10000);
  _exit(12); /* it never gets the lock: it is killed first */
}

TEST(dead_waiter_dropped) {
  const char *name = "fair:dead";
  rp_server_t *s = lu_server(0);
  char qk[256], tk[256];
  queue_key(qk, sizeof(qk), name);
  timeout_key(tk, sizeof(tk), name);
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    /* Wait for the parent to hold the lock: it writes nothing, so poll. */
    for (int i = 0; i < 500; i++) {
      redisContext *r = lu_connect(s);
      if (r == NULL)
        _exit(9);
      redisReply *e = redisCommand(r, "EXISTS %s", name);
      int held = e && e->type == REDIS_REPLY_INTEGER && e->integer == 1;
      if (e)
        freeReplyObject(e);
      redisFree(r);
      if (held)
        child_queue_forever(s, name, fds[1]);
      lu_sleep_ms(10);
    }
    _exit(8);
  }
  close(fds[1]);
  dlock_client_t *c = fair_client(s, DEAD_WAIT_TIMEOUT, NULL);
  dlock_t *l = fair_get(c, name);
  ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));
  char dead[256];
  ssize_t n = read(fds[0], dead, sizeof(dead) - 1);
  ASSERT_GT(n, 1);
  dead[n - 1] = '\0';
  close(fds[0]);
  wait_queue_len(s, qk, 1, 3000);
  ASSERT_EQ(queue_pos(s, qk, dead), 0);

  /* A live waiter queues behind the doomed one. */
  fair_waiter_t w;
  memset(&w, 0, sizeof(w));
  w.l = l;
  w.wait_ms = DLOCK_WAIT_FOREVER;
  atomic_init(&w.owner, 0);
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, fair_waiter_main, &w), 0);
  wait_queue_len(s, qk, 2, 3000);

  ASSERT_EQ(kill(pid, SIGKILL), 0);
  ASSERT_EQ(waitpid(pid, NULL, 0), pid);
  int64_t t_rel = lu_now_ms();
  ASSERT_DLOCK_OK(dlock_unlock(l));
  ASSERT_EQ(pthread_join(t, NULL), 0);
  ASSERT_DLOCK_OK(w.rc);
  int64_t took = w.acquired_ms - t_rel;
  printf("live waiter behind a dead one acquired %" PRId64
         " ms after the release (wait timeout %d ms)\n",
         took, (int)DEAD_WAIT_TIMEOUT);
  ASSERT_LT(took, DEAD_WAIT_TIMEOUT * 5);
  ASSERT_EQ(queue_pos(s, qk, dead), -1);
  ASSERT_EQ(zscore(s, tk, dead), -1);
  ASSERT_EQ(lu_exists(s, qk), 0);
  ASSERT_EQ(lu_exists(s, tk), 0);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/* ---- many waiters across processes, some killed while queued ----------- */

enum {
  XP_MAX_PROCS = 8,
  XP_MAX_THREADS = 100,
  XP_WAIT_TIMEOUT = 1000, /* fair_wait_timeout_ms of every client */
};

static const char *const XP_NAME = "fair:many";
static const char *const XP_COUNTER = "fair:many:counter";
static const char *const XP_OK = "fair:many:ok";
static const char *const XP_TOKENS = "fair:many:tokens";

typedef struct xp_proc {
  dlock_t *l;
  redisContext *r;
  pthread_mutex_t mu;
  atomic_int fails;
} xp_proc_t;

static redisReply *xp_cmd(xp_proc_t *p, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  pthread_mutex_lock(&p->mu);
  redisReply *r = redisvCommand(p->r, fmt, ap);
  pthread_mutex_unlock(&p->mu);
  va_end(ap);
  return r;
}

static void *xp_thread(void *arg) {
  xp_proc_t *p = arg;
  int rc = dlock_lock(p->l, 10000);
  if (rc != 0) {
    fprintf(stderr, "child %d lock: %s %s\n", (int)getpid(), dlock_err_name(rc),
            dlock_last_error());
    atomic_fetch_add(&p->fails, 1);
    return NULL;
  }
  /* Read, then write back one more with the proof of acquisition, in one
   * transaction: the count and the acquisitions match unless two holders
   * overlapped (a lost update). */
  redisReply *g = xp_cmd(p, "GET %s", XP_COUNTER);
  long long v =
      g && g->type == REDIS_REPLY_STRING ? strtoll(g->str, NULL, 10) : 0;
  if (g == NULL)
    atomic_fetch_add(&p->fails, 1);
  if (g)
    freeReplyObject(g);
  pthread_mutex_lock(&p->mu);
  redisAppendCommand(p->r, "MULTI");
  redisAppendCommand(p->r, "SET %s %lld", XP_COUNTER, v + 1);
  redisAppendCommand(p->r, "INCR %s", XP_OK);
  redisAppendCommand(p->r, "RPUSH %s %llu", XP_TOKENS,
                     (unsigned long long)dlock_token(p->l));
  redisAppendCommand(p->r, "EXEC");
  for (int i = 0; i < 5; i++) {
    void *rep = NULL;
    if (redisGetReply(p->r, &rep) != REDIS_OK)
      atomic_fetch_add(&p->fails, 1);
    if (rep)
      freeReplyObject(rep);
  }
  pthread_mutex_unlock(&p->mu);
  rc = dlock_unlock(p->l);
  if (rc != 0) {
    fprintf(stderr, "child %d unlock: %s %s\n", (int)getpid(),
            dlock_err_name(rc), dlock_last_error());
    atomic_fetch_add(&p->fails, 1);
  }
  return NULL;
}

/* One process: its own client, 'threads' waiters, each acquiring once. */
static _Noreturn void xp_child(const rp_server_t *s, int idx, int threads,
                               int go_fd) {
  char go;
  if (read(go_fd, &go, 1) != 1)
    _exit(20);
  dlock_options_t o;
  lu_options(&o, s);
  o.fair_wait_timeout_ms = XP_WAIT_TIMEOUT;
  o.command_timeout_ms = 10000;
  char id[64];
  snprintf(id, sizeof(id), "xp%d-%d", idx, (int)getpid());
  o.client_id = id;
  dlock_client_t *c = NULL;
  xp_proc_t p;
  memset(&p, 0, sizeof(p));
  pthread_mutex_init(&p.mu, NULL);
  atomic_init(&p.fails, 0);
  if (dlock_client_open(&o, &c) != 0)
    _exit(21);
  if (dlock_get_fair(c, XP_NAME, &p.l) != 0)
    _exit(22);
  p.r = lu_connect(s);
  if (p.r == NULL)
    _exit(23);
  pthread_t t[XP_MAX_THREADS];
  for (int i = 0; i < threads; i++) {
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, 256 * 1024);
    if (pthread_create(&t[i], &a, xp_thread, &p) != 0)
      _exit(24);
    pthread_attr_destroy(&a);
  }
  for (int i = 0; i < threads; i++)
    pthread_join(t[i], NULL);
  int fails = atomic_load(&p.fails);
  redisFree(p.r);
  dlock_free(p.l);
  dlock_client_close(c);
  _exit(fails ? 30 : 0);
}

typedef struct xp_plan {
  int procs;
  int threads[XP_MAX_PROCS];
  int victim[XP_MAX_PROCS]; /* 1: SIGKILLed while all its threads queue */
  int64_t limit_ms;         /* for the survivors, after the release */
} xp_plan_t;

/* Queue entries per process, from the client id prefix "xp<i>-". */
static void xp_count_queue(rp_server_t *s, const char *qk,
                           int counts[XP_MAX_PROCS], int64_t *total) {
  memset(counts, 0, sizeof(int) * XP_MAX_PROCS);
  redisReply *r = rp_cmd(s, "LRANGE %s 0 -1", qk);
  ASSERT_NOT_NULL(r);
  *total = (int64_t)r->elements;
  for (size_t i = 0; i < r->elements; i++) {
    int idx = -1;
    if (sscanf(r->element[i]->str, "xp%d-", &idx) == 1 && idx >= 0 &&
        idx < XP_MAX_PROCS)
      counts[idx]++;
  }
  freeReplyObject(r);
}

static void xp_dump(rp_server_t *s, const char *qk, const char *tk, int procs) {
  int counts[XP_MAX_PROCS];
  int64_t total;
  xp_count_queue(s, qk, counts, &total);
  fprintf(stderr, "queue length %" PRId64 ":", total);
  for (int i = 0; i < procs; i++)
    fprintf(stderr, " p%d=%d", i, counts[i]);
  fprintf(stderr, "\n");
  int64_t now = server_unix_ms(s);
  redisReply *r = rp_cmd(s, "LRANGE %s 0 4", qk);
  for (size_t i = 0; r && i < r->elements; i++)
    fprintf(stderr, "  queue[%zu] %s deadline in %" PRId64 " ms\n", i,
            r->element[i]->str, zscore(s, tk, r->element[i]->str) - now);
  if (r)
    freeReplyObject(r);
  fprintf(stderr, "lock exists %" PRId64 ", pttl %" PRId64 "\n",
          lu_exists(s, XP_NAME), lu_pttl(s, XP_NAME));
}

static void run_across_processes(const xp_plan_t *plan) {
  int procs = plan->procs;
  ASSERT_LE(procs, XP_MAX_PROCS);
  int waiters = 0, dead = 0, live = 0;
  for (int i = 0; i < procs; i++) {
    waiters += plan->threads[i];
    if (plan->victim[i])
      dead += plan->threads[i];
    else
      live += plan->threads[i];
  }
  printf("%d waiters in %d processes, %d of them killed while queued; "
         "fair wait timeout %d ms\n",
         waiters, procs, dead, (int)XP_WAIT_TIMEOUT);
  rp_server_t *s = lu_server(0);
  char qk[256], tk[256];
  queue_key(qk, sizeof(qk), XP_NAME);
  timeout_key(tk, sizeof(tk), XP_NAME);

  /* Fork before this process opens a client; the children wait for "go". */
  pid_t pids[XP_MAX_PROCS];
  int go[XP_MAX_PROCS];
  for (int i = 0; i < procs; i++) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    pid_t p = fork();
    ASSERT_GE(p, 0);
    if (p == 0) {
      close(fds[1]);
      xp_child(s, i, plan->threads[i], fds[0]);
    }
    close(fds[0]);
    pids[i] = p;
    go[i] = fds[1];
  }
  dlock_client_t *c = fair_client(s, XP_WAIT_TIMEOUT, NULL);
  dlock_t *l = fair_get(c, XP_NAME);
  /* A lease longer than the test, not the tests' 600 ms watchdog: with 500
   * waiters starting in sanitized processes on a loaded machine, a renewal
   * late by more than 600 ms let the lock expire, and every waiter took it
   * in turn instead of queueing (what this test is about). */
  ASSERT_DLOCK_OK(dlock_lock(l, 120000));
  int64_t t0 = lu_now_ms();
  for (int i = 0; i < procs; i++) {
    ASSERT_EQ(write(go[i], "g", 1), 1);
    close(go[i]);
  }

  /* Every waiter queues behind the holder. */
  int counts[XP_MAX_PROCS];
  int64_t total = 0;
  int all_queued = 0;
  while (!all_queued && lu_now_ms() - t0 < 20000) {
    xp_count_queue(s, qk, counts, &total);
    all_queued = 1;
    for (int i = 0; i < procs; i++)
      if (counts[i] != plan->threads[i])
        all_queued = 0;
    if (!all_queued)
      lu_sleep_ms(20);
  }
  printf("queued after %" PRId64 " ms: %" PRId64 " entries:", lu_now_ms() - t0,
         total);
  for (int i = 0; i < procs; i++)
    printf(" p%d=%d", i, counts[i]);
  printf("\n");
  if (!all_queued) {
    printf("acquisitions meanwhile: %" PRId64 "\n",
           lu_get_num_n(s, XP_OK, strlen(XP_OK)));
    xp_dump(s, qk, tk, procs);
  }
  ASSERT(all_queued);
  for (int i = 0; i < procs; i++) {
    if (!plan->victim[i])
      continue;
    ASSERT_EQ(kill(pids[i], SIGKILL), 0);
    ASSERT_EQ(waitpid(pids[i], NULL, 0), pids[i]);
  }

  int64_t t_rel = lu_now_ms();
  ASSERT_DLOCK_OK(dlock_unlock(l));

  /* Every survivor finishes; nothing wedges. */
  int left = 0;
  int done[XP_MAX_PROCS] = {0};
  for (int i = 0; i < procs; i++)
    left += !plan->victim[i];
  int64_t last_report = t_rel;
  while (left > 0 && lu_now_ms() - t_rel < plan->limit_ms) {
    for (int i = 0; i < procs; i++) {
      if (done[i] || plan->victim[i])
        continue;
      int st = 0;
      pid_t w = waitpid(pids[i], &st, WNOHANG);
      ASSERT_GE(w, 0);
      if (w == pids[i]) {
        done[i] = 1;
        left--;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
          fprintf(stderr, "child %d: status %d\n", i, st);
        ASSERT(WIFEXITED(st));
        ASSERT_EQ(WEXITSTATUS(st), 0);
      }
    }
    if (lu_now_ms() - last_report >= 5000) {
      last_report = lu_now_ms();
      printf("after %" PRId64 " ms: %" PRId64 " acquisitions, queue %" PRId64
             "\n",
             last_report - t_rel, lu_get_num_n(s, XP_OK, strlen(XP_OK)),
             llen(s, qk));
    }
    if (left > 0)
      lu_sleep_ms(10);
  }
  int64_t took = lu_now_ms() - t_rel;
  int64_t ok = lu_get_num_n(s, XP_OK, strlen(XP_OK));
  printf("survivors: %" PRId64 " of %d acquisitions %" PRId64
         " ms after the release\n",
         ok, live, took);
  if (left > 0) {
    xp_dump(s, qk, tk, procs);
    for (int i = 0; i < procs; i++)
      if (!done[i] && !plan->victim[i])
        kill(pids[i], SIGKILL);
  }
  ASSERT_EQ(left, 0);
  ASSERT_EQ(ok, live);
  ASSERT_EQ(lu_get_num_n(s, XP_COUNTER, strlen(XP_COUNTER)), ok);

  /* Fencing tokens in the order of the critical sections. */
  redisReply *r = rp_cmd(s, "LRANGE %s 0 -1", XP_TOKENS);
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->elements, ok);
  for (size_t i = 1; i < r->elements; i++)
    ASSERT_GT(strtoll(r->element[i]->str, NULL, 10),
              strtoll(r->element[i - 1]->str, NULL, 10));
  freeReplyObject(r);

  /* Dead entries left at the tail go as soon as a newcomer asks. */
  int64_t t1 = lu_now_ms();
  ASSERT_DLOCK_OK(dlock_trylock(l, 20000, 5000));
  printf("newcomer acquired in %" PRId64 " ms; queue %" PRId64
         ", timeouts %" PRId64 "\n",
         lu_now_ms() - t1, llen(s, qk), zcard(s, tk));
  ASSERT_DLOCK_OK(dlock_unlock(l));
  ASSERT_EQ(llen(s, qk), 0);
  ASSERT_EQ(lu_exists(s, tk), 0);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/* 500 waiters in 5 processes, none killed. */
TEST(many_waiters_across_processes) {
  xp_plan_t plan = {5, {100, 100, 100, 100, 100}, {0}, 30000};
  run_across_processes(&plan);
}

/* A few waiters die while queued (one process of 4 threads): the rest go
 * on once the dead entries' deadlines pass. */
TEST(waiters_across_processes_few_killed) {
  xp_plan_t plan = {5, {50, 50, 4, 50, 50}, {0, 0, 1, 0, 0}, 30000};
  run_across_processes(&plan);
}

/*
 * The scenario users hit with Redisson (issues #2883, #3730): 500 waiters
 * across processes, two processes (200 waiters) killed while queued. Their
 * entries must go about one fair wait timeout after they died, not one
 * timeout per dead entry, and the 300 others must all get the lock.
 */
TEST(many_waiters_across_processes_some_killed) {
  xp_plan_t plan = {5, {100, 100, 100, 100, 100}, {0, 0, 0, 1, 1}, 40000};
  run_across_processes(&plan);
}
