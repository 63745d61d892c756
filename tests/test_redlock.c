/*
 * RedLock (dlock_get_red) over five independent redis-servers, one client
 * each: a majority (3) is enough; with 3 nodes down it fails cleanly with
 * DLOCK_ENOQUORUM and leaves nothing behind; nodes are asked in parallel;
 * fencing tokens keep increasing when node counters diverge; exclusion
 * between contenders; the watchdog renews on a majority.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "lock_util.h"

enum { NODES = 5 };

typedef struct rfix {
  rp_server_t *s[NODES];
  int down[NODES]; /* 1 killed, 2 paused */
  dlock_client_t *c[NODES];
  dlock_t *h[NODES];
  dlock_t *red;
  const char *name;
  lu_lost_t lost[NODES];
} rfix_t;

/* Clients on the servers of 'f' (which must be started), handles, RedLock. */
static void rfix_clients(rfix_t *f, rp_server_t *const *servers,
                         int64_t cmd_timeout_ms) {
  for (int i = 0; i < NODES; i++) {
    dlock_options_t o;
    lu_options(&o, servers[i]);
    o.connect_timeout_ms = cmd_timeout_ms;
    o.command_timeout_ms = cmd_timeout_ms;
    lu_lost_init(&f->lost[i]);
    o.on_lost = lu_lost_cb;
    o.on_lost_data = &f->lost[i];
    f->c[i] = lu_client_opts(&o);
    f->h[i] = lu_get(f->c[i], f->name);
  }
  ASSERT_DLOCK_OK(dlock_get_red(f->h, NODES, &f->red));
  ASSERT_NOT_NULL(f->red);
  ASSERT_EQ(dlock_kind(f->red), DLOCK_RED);
}

static void rfix_init(rfix_t *f, const char *name, int64_t cmd_timeout_ms) {
  memset(f, 0, sizeof(*f));
  f->name = name;
  for (int i = 0; i < NODES; i++)
    f->s[i] = lu_server(i % 2);
  rfix_clients(f, f->s, cmd_timeout_ms);
}

static void rfix_close_clients(rfix_t *f) {
  dlock_free(f->red);
  f->red = NULL;
  for (int i = 0; i < NODES; i++) {
    dlock_free(f->h[i]);
    dlock_client_close(f->c[i]);
    f->h[i] = NULL;
    f->c[i] = NULL;
  }
}

static void rfix_free(rfix_t *f) {
  rfix_close_clients(f);
  for (int i = 0; i < NODES; i++) {
    if (f->down[i] == 2)
      rp_resume(f->s[i]);
    rp_free(f->s[i]);
  }
}

static void node_kill(rfix_t *f, int i) {
  ASSERT_EQ(rp_kill(f->s[i]), 0);
  f->down[i] = 1;
}

static void node_pause(rfix_t *f, int i) {
  ASSERT_EQ(rp_pause(f->s[i]), 0);
  f->down[i] = 2;
}

static void node_resume(rfix_t *f, int i) {
  ASSERT_EQ(rp_resume(f->s[i]), 0);
  f->down[i] = 0;
}

/* How many live nodes have the lock key. */
static int nodes_holding(rfix_t *f) {
  int n = 0;
  for (int i = 0; i < NODES; i++)
    if (!f->down[i])
      n += (int)lu_exists(f->s[i], f->name);
  return n;
}

/* Keys on a node other than fencing counters and unlock latches. */
static int64_t keys_left(rp_server_t *s) {
  redisReply *r = rp_cmd(s, "KEYS *");
  ASSERT_NOT_NULL(r);
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

/* Polls until 'n' live nodes hold the key; returns how many do. */
static int wait_holding(rfix_t *f, int n, int64_t limit_ms) {
  int64_t t0 = lu_now_ms();
  int got = nodes_holding(f);
  while (got != n && lu_now_ms() - t0 < limit_ms) {
    lu_sleep_ms(5);
    got = nodes_holding(f);
  }
  return got;
}

/* ---- healthy nodes ------------------------------------------------------- */

TEST(acquire_on_all_release_on_all) {
  rfix_t f;
  rfix_init(&f, "red:basic", 500);
  uint64_t me = dlock_self();
  ASSERT_EQ(dlock_is_locked(f.red), 0);
  int64_t t0 = lu_now_ms();
  ASSERT_DLOCK_OK(dlock_lock(f.red, 10000));
  printf("acquired in %" PRId64 " ms; %d nodes hold it at once\n",
         lu_now_ms() - t0, nodes_holding(&f));
  ASSERT_GE(nodes_holding(&f), NODES / 2 + 1);
  ASSERT_EQ(wait_holding(&f, NODES, 5000), NODES);
  for (int i = 0; i < NODES; i++) {
    char field[256];
    lu_field(field, sizeof(field), f.c[i], me);
    ASSERT_EQ(lu_hget_num(f.s[i], f.name, field), 1);
    ASSERT_EQ(lu_hlen(f.s[i], f.name), 1);
    int64_t p = lu_pttl(f.s[i], f.name);
    ASSERT_GT(p, 8000);
    ASSERT_LE(p, 10000);
  }
  ASSERT_EQ(dlock_is_held(f.red), 1);
  ASSERT_EQ(dlock_is_locked(f.red), 1);
  ASSERT_GT(dlock_token(f.red), 0);
  /* Another owner is refused and leaves nothing. */
  uint64_t other = dlock_owner_new();
  ASSERT_NE(dlock_trylock_as(f.red, other, 0, 10000), 0);
  for (int i = 0; i < NODES; i++)
    ASSERT_EQ(lu_hlen(f.s[i], f.name), 1);

  ASSERT_DLOCK_OK(dlock_unlock(f.red));
  printf("%d nodes hold it right after the unlock\n", nodes_holding(&f));
  ASSERT_EQ(wait_holding(&f, 0, 5000), 0);
  for (int i = 0; i < NODES; i++)
    ASSERT_EQ(keys_left(f.s[i]), 0);
  ASSERT_EQ(dlock_is_held(f.red), 0);
  ASSERT_DLOCK_ERR(dlock_unlock(f.red), DLOCK_ENOTHELD);
  rfix_free(&f);
}

/* Unlock latches (a retried release returns the first answer) are deleted
 * by the node's next script once the release was answered, as for a single
 * lock: 30 rounds leave a handful, not one per round on every node. */
TEST(latches_deleted_by_later_calls) {
  rfix_t f;
  rfix_init(&f, "red:latches", 500);
  for (int round = 0; round < 30; round++) {
    ASSERT_DLOCK_OK(dlock_lock(f.red, 10000));
    ASSERT_DLOCK_OK(dlock_unlock(f.red));
  }
  for (int i = 0; i < NODES; i++) {
    redisReply *r = rp_cmd(f.s[i], "KEYS redisson_unlock_latch:*");
    ASSERT_NOT_NULL(r);
    printf("node %d: %zu latches left after 30 rounds\n", i, r->elements);
    ASSERT_LE(r->elements, (size_t)2);
    freeReplyObject(r);
  }
  rfix_free(&f);
}

TEST(reentrancy) {
  rfix_t f;
  rfix_init(&f, "red:re", 500);
  ASSERT_DLOCK_OK(dlock_lock(f.red, 10000));
  uint64_t tok = dlock_token(f.red);
  ASSERT_DLOCK_OK(dlock_trylock(f.red, 0, 10000));
  ASSERT_EQ(dlock_hold_count(f.red), 2);
  ASSERT_EQ(dlock_token(f.red), tok);
  ASSERT_DLOCK_OK(dlock_unlock(f.red));
  ASSERT_EQ(dlock_is_held(f.red), 1);
  ASSERT_GE(nodes_holding(&f), NODES / 2 + 1);
  ASSERT_DLOCK_OK(dlock_unlock(f.red));
  ASSERT_EQ(wait_holding(&f, 0, 5000), 0);
  ASSERT_DLOCK_ERR(dlock_unlock(f.red), DLOCK_ENOTHELD);
  rfix_free(&f);
}

/* The owner's hold is gone from every node (deleted here; a lease that ran
 * out while the owner was stopped, in the field). Reentrant attempts fail,
 * the first of them finding the parts lost; the second must not undo those
 * lost parts as if it had taken them itself, which would drop their records
 * and let the owner's unlock answer DLOCK_ENOTHELD instead of reporting the
 * loss. */
TEST(failed_reentrant_attempts_keep_the_loss_for_unlock) {
  rfix_t f;
  rfix_init(&f, "red:re:lost", 500);
  ASSERT_DLOCK_OK(dlock_lock(f.red, 10000));
  for (int i = 0; i < NODES; i++)
    ASSERT_EQ(lu_reply_int(rp_cmd(f.s[i], "DEL %s", f.name)), 1);
  ASSERT_NE(dlock_trylock(f.red, 0, 10000), 0);
  ASSERT_NE(dlock_trylock(f.red, 0, 10000), 0);
  ASSERT_DLOCK_ERR(dlock_unlock(f.red), DLOCK_ELOST);
  ASSERT_DLOCK_ERR(dlock_unlock(f.red), DLOCK_ENOTHELD);
  ASSERT_EQ(nodes_holding(&f), 0);
  rfix_free(&f);
}

/* ---- nodes down ---------------------------------------------------------- */

TEST(two_killed_still_acquires) {
  rfix_t f;
  rfix_init(&f, "red:kill2", 300);
  node_kill(&f, 1);
  node_kill(&f, 4);
  int64_t t0 = lu_now_ms();
  ASSERT_DLOCK_OK(dlock_trylock(f.red, 0, 10000));
  printf("acquired with 2 of 5 dead in %" PRId64 " ms\n", lu_now_ms() - t0);
  ASSERT_LT(lu_now_ms() - t0, 3000);
  ASSERT_EQ(nodes_holding(&f), 3);
  ASSERT_EQ(dlock_is_held(f.red), 1);
  t0 = lu_now_ms();
  ASSERT_DLOCK_OK(dlock_unlock(f.red));
  printf("released in %" PRId64 " ms\n", lu_now_ms() - t0);
  ASSERT_EQ(nodes_holding(&f), 0);
  /* And again, with dlock_lock. */
  ASSERT_DLOCK_OK(dlock_lock(f.red, 10000));
  ASSERT_EQ(nodes_holding(&f), 3);
  ASSERT_DLOCK_OK(dlock_unlock(f.red));
  ASSERT_EQ(nodes_holding(&f), 0);
  rfix_free(&f);
}

TEST(three_killed_no_quorum_no_leftovers) {
  rfix_t f;
  rfix_init(&f, "red:kill3", 300);
  node_kill(&f, 0);
  node_kill(&f, 2);
  node_kill(&f, 3);
  int64_t t0 = lu_now_ms();
  ASSERT_DLOCK_ERR(dlock_trylock(f.red, 0, 10000), DLOCK_ENOQUORUM);
  int64_t took = lu_now_ms() - t0;
  printf("single attempt failed in %" PRId64 " ms\n", took);
  ASSERT_LT(took, 3000);
  /* The two survivors may have granted it: released again. */
  printf("survivors holding: %d\n", nodes_holding(&f));
  ASSERT_EQ(wait_holding(&f, 0, 5000), 0);
  ASSERT_EQ(keys_left(f.s[1]), 0);
  ASSERT_EQ(keys_left(f.s[4]), 0);
  ASSERT_EQ(dlock_is_held(f.red), 0);

  /* With a wait: it gives up within about the wait. */
  t0 = lu_now_ms();
  int rc = dlock_trylock(f.red, 1000, 10000);
  took = lu_now_ms() - t0;
  printf("attempt with a 1000 ms wait: %s after %" PRId64 " ms\n",
         dlock_err_name(rc), took);
  ASSERT(rc == DLOCK_ENOQUORUM || rc == DLOCK_ETIMEDOUT);
  ASSERT_LT(took, 4000);
  ASSERT_EQ(wait_holding(&f, 0, 5000), 0);
  ASSERT_EQ(keys_left(f.s[1]), 0);
  ASSERT_EQ(keys_left(f.s[4]), 0);
  ASSERT_DLOCK_ERR(dlock_unlock(f.red), DLOCK_ENOTHELD);
  rfix_free(&f);
}

TEST(two_paused_still_acquires) {
  enum { CMD_TIMEOUT = 300 };
  rfix_t f;
  rfix_init(&f, "red:pause2", CMD_TIMEOUT);
  node_pause(&f, 0);
  node_pause(&f, 3);
  int64_t t0 = lu_now_ms();
  ASSERT_DLOCK_OK(dlock_trylock(f.red, 0, 5000));
  int64_t took = lu_now_ms() - t0;
  printf("acquired with 2 of 5 paused in %" PRId64 " ms (command timeout %d)\n",
         took, (int)CMD_TIMEOUT);
  ASSERT_LT(took, 4 * CMD_TIMEOUT + 1000);
  ASSERT_EQ(nodes_holding(&f), 3);
  t0 = lu_now_ms();
  ASSERT_DLOCK_OK(dlock_unlock(f.red));
  printf("released in %" PRId64 " ms\n", lu_now_ms() - t0);
  ASSERT_LT(lu_now_ms() - t0, 4 * CMD_TIMEOUT + 1000);
  ASSERT_EQ(nodes_holding(&f), 0);
  node_resume(&f, 0);
  node_resume(&f, 3);
  /* Whatever the paused nodes see late expires with the lease. */
  lu_sleep_ms(200);
  printf("after resume: %d nodes hold it\n", nodes_holding(&f));
  ASSERT_EQ(wait_holding(&f, 0, 6000), 0);
  /* Back to normal. */
  ASSERT_DLOCK_OK(dlock_trylock(f.red, 2000, 5000));
  ASSERT_GE(nodes_holding(&f), 3);
  ASSERT_DLOCK_OK(dlock_unlock(f.red));
  rfix_free(&f);
}

TEST(three_paused_no_quorum) {
  enum { CMD_TIMEOUT = 300 };
  rfix_t f;
  rfix_init(&f, "red:pause3", CMD_TIMEOUT);
  node_pause(&f, 1);
  node_pause(&f, 2);
  node_pause(&f, 4);
  int64_t t0 = lu_now_ms();
  int rc = dlock_trylock(f.red, 0, 5000);
  int64_t took = lu_now_ms() - t0;
  printf("3 of 5 paused: %s after %" PRId64 " ms\n", dlock_err_name(rc), took);
  ASSERT(rc == DLOCK_ENOQUORUM || rc == DLOCK_ETIMEDOUT || rc == DLOCK_EIO);
  ASSERT_LT(took, 4 * CMD_TIMEOUT + 1000);
  ASSERT_EQ(wait_holding(&f, 0, 5000), 0);
  ASSERT_EQ(keys_left(f.s[0]), 0);
  ASSERT_EQ(keys_left(f.s[3]), 0);
  rfix_free(&f);
}

/* ---- parallel requests --------------------------------------------------- */

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

static int64_t now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Median microseconds of lock+unlock of 'l' over 'n' rounds. */
static int64_t median_cycle_us(dlock_t *l, int n) {
  int64_t *v = malloc(sizeof(int64_t) * (size_t)n);
  ASSERT_NOT_NULL(v);
  for (int i = 0; i < n; i++) {
    int64_t t0 = now_us();
    ASSERT_DLOCK_OK(dlock_lock(l, 10000));
    ASSERT_DLOCK_OK(dlock_unlock(l));
    v[i] = now_us() - t0;
  }
  qsort(v, (size_t)n, sizeof(int64_t), cmp_i64);
  int64_t m = v[n / 2];
  free(v);
  return m;
}

TEST(parallel_latency) {
  enum { ROUNDS = 200 };
  rfix_t f;
  rfix_init(&f, "red:lat", 2000);
  dlock_t *single = lu_get(f.c[0], "red:single");
  /* Warm up both (script loads, connections). */
  median_cycle_us(single, 10);
  median_cycle_us(f.red, 10);
  int64_t ms = median_cycle_us(single, ROUNDS);
  int64_t mr = median_cycle_us(f.red, ROUNDS);
  printf("median lock+unlock: single node %" PRId64 " us, RedLock over %d "
         "nodes %" PRId64 " us (%.2fx)\n",
         ms, (int)NODES, mr, (double)mr / (double)(ms ? ms : 1));
  /* Printed only: on a loaded machine thread hand-offs dominate. The
   * paused-node test below checks parallelism robustly. */
  dlock_free(single);
  rfix_free(&f);
}

/* Two paused nodes: parallel requests wait for their timeouts at the same
 * time (about one command timeout), sequential ones one after the other
 * (at least two). */
TEST(parallel_requests_with_paused_nodes) {
  enum { CMD_TIMEOUT = 1000 };
  rfix_t f;
  rfix_init(&f, "red:par", CMD_TIMEOUT);
  /* Warm up: connections and scripts in place on every node. */
  ASSERT_DLOCK_OK(dlock_lock(f.red, 10000));
  ASSERT_DLOCK_OK(dlock_unlock(f.red));
  node_pause(&f, 1);
  node_pause(&f, 2);
  int64_t t0 = lu_now_ms();
  ASSERT_DLOCK_OK(dlock_trylock(f.red, 0, 10000));
  int64_t acq = lu_now_ms() - t0;
  t0 = lu_now_ms();
  ASSERT_DLOCK_OK(dlock_unlock(f.red));
  int64_t rel = lu_now_ms() - t0;
  printf("with 2 paused nodes (command timeout %d ms): acquire %" PRId64
         " ms, release %" PRId64 " ms\n",
         (int)CMD_TIMEOUT, acq, rel);
  ASSERT_LT(acq, CMD_TIMEOUT * 18 / 10);
  ASSERT_LT(rel, CMD_TIMEOUT * 18 / 10);
  node_resume(&f, 1);
  node_resume(&f, 2);
  rfix_free(&f);
}

/* ---- fencing tokens ------------------------------------------------------ */

static int64_t node_token(rfix_t *f, int i) {
  char k[256];
  lu_token_key(k, sizeof(k), f->name, strlen(f->name));
  return lu_get_num_n(f->s[i], k, strlen(k));
}

TEST(fencing_tokens_increase) {
  rfix_t f;
  rfix_init(&f, "red:tok", 500);
  char tk[256];
  lu_token_key(tk, sizeof(tk), f.name, strlen(f.name));
  uint64_t a = dlock_owner_new(), b = dlock_owner_new();
  uint64_t prev = 0;
  for (int i = 0; i < 6; i++) {
    uint64_t o = i % 2 ? a : b;
    ASSERT_DLOCK_OK(dlock_lock_as(f.red, o, 10000));
    uint64_t t = dlock_token_as(f.red, o);
    ASSERT_GT(t, prev);
    prev = t;
    ASSERT_DLOCK_OK(dlock_unlock_as(f.red, o));
  }
  /* Counters diverge: node 2 jumps ahead by 100. */
  lu_ok(rp_cmd(f.s[2], "INCRBY %s 100", tk));
  printf("node counters:");
  for (int i = 0; i < NODES; i++)
    printf(" %" PRId64, node_token(&f, i));
  printf("\n");
  ASSERT_DLOCK_OK(dlock_lock_as(f.red, a, 10000));
  uint64_t t = dlock_token_as(f.red, a);
  printf("token after the jump: %" PRIu64 " (before %" PRIu64 ")\n", t, prev);
  ASSERT_GT(t, prev);
  ASSERT_GT(t, prev + 100); /* the largest of the nodes' tokens */
  /* Written back: every node that granted it has a counter >= t. */
  int at_least = 0;
  for (int i = 0; i < NODES; i++)
    at_least += node_token(&f, i) >= (int64_t)t;
  printf("nodes with counter >= token: %d\n", at_least);
  ASSERT_GE(at_least, NODES / 2 + 1);
  ASSERT_DLOCK_OK(dlock_unlock_as(f.red, a));
  prev = t;

  /* The node that jumped dies: later majorities still issue more. */
  node_kill(&f, 2);
  for (int i = 0; i < 3; i++) {
    uint64_t o = i % 2 ? a : b;
    ASSERT_DLOCK_OK(dlock_lock_as(f.red, o, 10000));
    t = dlock_token_as(f.red, o);
    ASSERT_GT(t, prev);
    prev = t;
    ASSERT_DLOCK_OK(dlock_unlock_as(f.red, o));
  }
  /* A second one dies too: 3 left, tokens still increase. */
  node_kill(&f, 0);
  ASSERT_DLOCK_OK(dlock_lock_as(f.red, b, 10000));
  ASSERT_GT(dlock_token_as(f.red, b), prev);
  ASSERT_DLOCK_OK(dlock_unlock_as(f.red, b));
  rfix_free(&f);
}

/* ---- exclusion ------------------------------------------------------------
 */

typedef struct rx_arg {
  dlock_t *red;
  rp_server_t *counter_srv;
  int iter;
  atomic_int *inside, *overlaps;
  _Atomic uint64_t *last_token;
  atomic_int *token_bad;
  int rc;
  int done;
} rx_arg_t;

static void *rx_main(void *p) {
  rx_arg_t *a = p;
  redisContext *r = lu_connect(a->counter_srv);
  if (r == NULL) {
    a->rc = DLOCK_EIO;
    return NULL;
  }
  for (int i = 0; i < a->iter; i++) {
    a->rc = dlock_lock(a->red, 10000);
    if (a->rc)
      break;
    if (atomic_fetch_add(a->inside, 1) != 0)
      atomic_fetch_add(a->overlaps, 1);
    uint64_t tok = dlock_token(a->red);
    if (tok <= atomic_load(a->last_token))
      atomic_fetch_add(a->token_bad, 1);
    atomic_store(a->last_token, tok);
    redisReply *g = redisCommand(r, "GET red:counter");
    long long v =
        g && g->type == REDIS_REPLY_STRING ? strtoll(g->str, NULL, 10) : 0;
    if (g)
      freeReplyObject(g);
    redisReply *s = redisCommand(r, "SET red:counter %lld", v + 1);
    if (s)
      freeReplyObject(s);
    atomic_fetch_sub(a->inside, 1);
    a->rc = dlock_unlock(a->red);
    if (a->rc)
      break;
    a->done++;
  }
  redisFree(r);
  return NULL;
}

TEST(exclusion_two_client_sets) {
  enum { ITER = 50 };
  rfix_t f1, f2;
  rfix_init(&f1, "red:excl", 1000);
  /* A second set of five clients on the same five servers. */
  memset(&f2, 0, sizeof(f2));
  f2.name = f1.name;
  rfix_clients(&f2, f1.s, 1000);
  atomic_int inside, overlaps, token_bad;
  _Atomic uint64_t last;
  atomic_init(&inside, 0);
  atomic_init(&overlaps, 0);
  atomic_init(&token_bad, 0);
  atomic_init(&last, 0);
  rx_arg_t a[3] = {
      {f1.red, f1.s[0], ITER, &inside, &overlaps, &last, &token_bad, 0, 0},
      {f2.red, f1.s[0], ITER, &inside, &overlaps, &last, &token_bad, 0, 0},
      /* A second thread on the first set: another owner, same clients. */
      {f1.red, f1.s[0], ITER, &inside, &overlaps, &last, &token_bad, 0, 0},
  };
  pthread_t t[3];
  int64_t t0 = lu_now_ms();
  for (int i = 0; i < 3; i++)
    ASSERT_EQ(pthread_create(&t[i], NULL, rx_main, &a[i]), 0);
  for (int i = 0; i < 3; i++)
    ASSERT_EQ(pthread_join(t[i], NULL), 0);
  printf("3 contenders x %d: %" PRId64 " ms\n", (int)ITER, lu_now_ms() - t0);
  for (int i = 0; i < 3; i++) {
    ASSERT_DLOCK_OK(a[i].rc);
    ASSERT_EQ(a[i].done, ITER);
  }
  ASSERT_EQ(atomic_load(&overlaps), 0);
  ASSERT_EQ(atomic_load(&token_bad), 0);
  ASSERT_EQ(lu_get_num_n(f1.s[0], "red:counter", 11), 3 * ITER);
  ASSERT_EQ(wait_holding(&f1, 0, 5000), 0);
  rfix_close_clients(&f2);
  rfix_free(&f1);
}

/* Script calls a node has run so far. */
static int64_t script_calls(rp_server_t *s) {
  return lu_cmd_calls(s, "evalsha") + lu_cmd_calls(s, "eval");
}

/* The waiter's owner, named so that the test's thread can let go. */
#define WAITER 0x5ea7edULL

typedef struct red_waiter {
  dlock_t *red;
  int rc;
  pthread_t th;
} red_waiter_t;

static void *red_waiter_main(void *p) {
  red_waiter_t *w = p;
  w->rc = dlock_trylock_as(w->red, WAITER, 30000, 60000);
  return NULL;
}

/* Another owner holds it on every node with a lease of a minute; a waiter
 * whose wait is half as long is let in by the holder's unlock, having been
 * refused on every node first (it asked them all each round). */
TEST(waiter_let_in_by_the_unlock_not_the_lease) {
  rfix_t f, g;
  rfix_init(&f, "red:unlock", 2000);
  memset(&g, 0, sizeof(g));
  g.name = f.name;
  rfix_clients(&g, f.s, 2000);
  ASSERT_DLOCK_OK(dlock_trylock(f.red, 0, 60000));
  ASSERT_EQ(nodes_holding(&f), NODES);
  int64_t before[NODES];
  for (int i = 0; i < NODES; i++)
    before[i] = script_calls(f.s[i]);
  red_waiter_t w = {g.red, 1, 0};
  ASSERT_EQ(pthread_create(&w.th, NULL, red_waiter_main, &w), 0);
  /* Refused everywhere at least twice (a round, its give-back of
   * nothing, and another round after its pause). */
  int64_t t0 = lu_now_ms();
  for (int i = 0; i < NODES; i++)
    while (script_calls(f.s[i]) < before[i] + 2 && lu_now_ms() - t0 < 20000)
      lu_sleep_ms(5);
  for (int i = 0; i < NODES; i++)
    ASSERT_GE(script_calls(f.s[i]), before[i] + 2);
  ASSERT_DLOCK_OK(dlock_unlock(f.red));
  ASSERT_EQ(pthread_join(w.th, NULL), 0);
  /* Granted within 30 s while the holder's lease had most of its minute
   * to run: the unlock let it in. The wake-up comes from the first node
   * the holder released, so the waiter's round can reach a node before
   * the holder's release does; a quorum is what a grant promises. */
  ASSERT_DLOCK_OK(w.rc);
  ASSERT_GE(nodes_holding(&f), NODES / 2 + 1);
  ASSERT_DLOCK_OK(dlock_unlock_as(g.red, WAITER));
  ASSERT_EQ(wait_holding(&f, 0, 5000), 0);
  rfix_close_clients(&g);
  rfix_free(&f);
}

/* ---- watchdog -------------------------------------------------------------
 */

TEST(watchdog_renews_on_all_nodes) {
  rfix_t f;
  rfix_init(&f, "red:wd", 500); /* watchdog_timeout_ms 600 */
  ASSERT_DLOCK_OK(dlock_lock(f.red, DLOCK_WATCHDOG));
  ASSERT_EQ(wait_holding(&f, NODES, 5000), NODES);
  for (int k = 0; k < 8; k++) { /* 2 s: more than three leases */
    lu_sleep_ms(250);
    for (int i = 0; i < NODES; i++) {
      int64_t p = lu_pttl(f.s[i], f.name);
      ASSERT_GT(p, 0);
      ASSERT_LE(p, 600);
    }
  }
  ASSERT_DLOCK_OK(dlock_unlock(f.red));
  ASSERT_EQ(wait_holding(&f, 0, 5000), 0);
  lu_sleep_ms(700);
  ASSERT_EQ(nodes_holding(&f), 0);
  for (int i = 0; i < NODES; i++)
    ASSERT_EQ(lu_lost_count(&f.lost[i]), 0);
  rfix_free(&f);
}

TEST(watchdog_two_killed_keeps_majority) {
  rfix_t f;
  rfix_init(&f, "red:wd2", 300);
  ASSERT_DLOCK_OK(dlock_lock(f.red, DLOCK_WATCHDOG));
  node_kill(&f, 0);
  node_kill(&f, 1);
  lu_sleep_ms(2000);
  ASSERT_EQ(nodes_holding(&f), 3);
  ASSERT_EQ(dlock_is_held(f.red), 1);
  ASSERT_DLOCK_OK(dlock_unlock(f.red));
  ASSERT_EQ(nodes_holding(&f), 0);
  rfix_free(&f);
}

TEST(watchdog_majority_lost_reported) {
  rfix_t f;
  rfix_init(&f, "red:wd3", 300);
  ASSERT_DLOCK_OK(dlock_lock(f.red, DLOCK_WATCHDOG));
  node_kill(&f, 0);
  node_kill(&f, 2);
  node_kill(&f, 4);
  lu_sleep_ms(1500); /* more than two leases */
  int lost = 0;
  for (int i = 0; i < NODES; i++)
    lost += lu_lost_count(&f.lost[i]);
  printf("lost callbacks: %d\n", lost);
  int64_t t0 = lu_now_ms();
  ASSERT_DLOCK_ERR(dlock_unlock(f.red), DLOCK_ELOST);
  printf("unlock took %" PRId64 " ms\n", lu_now_ms() - t0);
  /* Released on the survivors all the same. */
  ASSERT_EQ(wait_holding(&f, 0, 5000), 0);
  ASSERT_EQ(keys_left(f.s[1]), 0);
  ASSERT_EQ(keys_left(f.s[3]), 0);
  rfix_free(&f);
}

/* A lease shorter than the time a majority takes to answer: the attempt is
 * not valid, fails, and is released on every node. */
typedef struct resumer {
  rfix_t *f;
  int64_t after_ms;
} resumer_t;

static void *resumer_main(void *p) {
  resumer_t *r = p;
  lu_sleep_ms(r->after_ms);
  for (int i = 0; i < NODES; i++)
    if (r->f->down[i] == 2) {
      rp_resume(r->f->s[i]);
      r->f->down[i] = 0;
    }
  return NULL;
}

TEST(validity_must_be_positive) {
  enum { CMD_TIMEOUT = 1000 };
  rfix_t f;
  rfix_init(&f, "red:valid", CMD_TIMEOUT);
  ASSERT_DLOCK_OK(dlock_lock(f.red, 10000));
  ASSERT_DLOCK_OK(dlock_unlock(f.red));
  /* Three nodes answer only after ~300 ms; the lease is 150 ms. */
  node_pause(&f, 0);
  node_pause(&f, 1);
  node_pause(&f, 2);
  resumer_t r = {&f, 300};
  pthread_t th;
  ASSERT_EQ(pthread_create(&th, NULL, resumer_main, &r), 0);
  int64_t t0 = lu_now_ms();
  int rc = dlock_trylock(f.red, 0, 150);
  int64_t took = lu_now_ms() - t0;
  ASSERT_EQ(pthread_join(th, NULL), 0);
  int left = nodes_holding(&f);
  printf("lease 150, majority after ~300 ms: %s after %" PRId64
         " ms, %d nodes hold it on return\n",
         rc ? dlock_err_name(rc) : "OK", took, left);
  ASSERT_NE(rc, 0);
  ASSERT_EQ(dlock_is_held(f.red), 0);
  ASSERT_EQ(left, 0);
  /* The same with a long lease succeeds. */
  ASSERT_DLOCK_OK(dlock_trylock(f.red, 0, 10000));
  ASSERT_DLOCK_OK(dlock_unlock(f.red));
  rfix_free(&f);
}

/* Composites of composites and mismatched names are refused. */
TEST(bad_arguments) {
  rfix_t f;
  rfix_init(&f, "red:bad", 500);
  dlock_t *nested[2] = {f.h[0], f.red};
  dlock_t *out = NULL;
  ASSERT_DLOCK_ERR(dlock_get_red(nested, 2, &out), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_get_red(f.h, 0, &out), DLOCK_EINVAL);
  rfix_free(&f);
}
