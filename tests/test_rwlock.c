/*
 * The read-write lock (dlock_get_rw): shared readers, an exclusive writer,
 * downgrade but no upgrade, reentrancy, per-hold read leases, wake-ups and
 * the watchdog, checked against Redisson's layout:
 *
 *   hash N: "mode" = "read"/"write", reader "<client-id>:<owner>" -> count,
 *           writer "<client-id>:<owner>:write" -> count
 *   per read hold: {N}:<client-id>:<owner>:rwlock_timeout:<n> with its lease
 *   channel redisson_rwlock:{N}: "0" one may go, "1" all waiters retry
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

/* ---- helpers ------------------------------------------------------------ */

typedef struct rw {
  dlock_t *r, *w;
} rw_t;

static rw_t rw_get(dlock_client_t *c, const char *name) {
  rw_t h = {NULL, NULL};
  ASSERT_DLOCK_OK(dlock_get_rw(c, name, &h.r, &h.w));
  ASSERT_NOT_NULL(h.r);
  ASSERT_NOT_NULL(h.w);
  ASSERT_EQ(dlock_kind(h.r), DLOCK_READ);
  ASSERT_EQ(dlock_kind(h.w), DLOCK_WRITE);
  return h;
}

static void rw_free(rw_t *h) {
  dlock_free(h->r);
  dlock_free(h->w);
}

static const char *wfield(char *buf, size_t n, dlock_client_t *c,
                          uint64_t owner) {
  snprintf(buf, n, "%s:%" PRIu64 ":write", dlock_client_id(c), owner);
  return buf;
}

/* "{N}:<client-id>:<owner>:rwlock_timeout:<n>" ("N:..." when N has '{'). */
static const char *rw_timeout_key(char *buf, size_t n, const char *name,
                                  dlock_client_t *c, uint64_t owner, int hold) {
  if (strchr(name, '{'))
    snprintf(buf, n, "%s:%s:%" PRIu64 ":rwlock_timeout:%d", name,
             dlock_client_id(c), owner, hold);
  else
    snprintf(buf, n, "{%s}:%s:%" PRIu64 ":rwlock_timeout:%d", name,
             dlock_client_id(c), owner, hold);
  return buf;
}

static void rw_channel(char *buf, size_t n, const char *name) {
  lu_keyname(buf, n, "redisson_rwlock", name, strlen(name));
}

/* HGET of a string field; "" when missing. */
static void hget_str(rp_server_t *s, const char *k, const char *f, char *out,
                     size_t n) {
  redisReply *r = rp_cmd(s, "HGET %s %s", k, f);
  ASSERT_NOT_NULL(r);
  snprintf(out, n, "%s", r->type == REDIS_REPLY_STRING ? r->str : "");
  freeReplyObject(r);
}

static void assert_mode(rp_server_t *s, const char *name, const char *mode) {
  char m[32];
  hget_str(s, name, "mode", m, sizeof(m));
  ASSERT_STR_EQ(m, mode);
}

/* Keys other than fencing counters and unlock latches, printed. */
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

/* A thread that takes one handle and records when. */
typedef struct taker {
  dlock_t *l;
  int64_t wait_ms; /* DLOCK_WAIT_FOREVER: dlock_lock */
  int64_t lease_ms;
  int unlock; /* release right after acquiring */
  _Atomic uint64_t owner;
  int rc;
  int64_t asked_ms, acquired_ms;
} taker_t;

static void *taker_main(void *p) {
  taker_t *t = p;
  atomic_store(&t->owner, dlock_self());
  t->asked_ms = lu_now_ms();
  t->rc = t->wait_ms == DLOCK_WAIT_FOREVER
              ? dlock_lock(t->l, t->lease_ms)
              : dlock_trylock(t->l, t->wait_ms, t->lease_ms);
  t->acquired_ms = lu_now_ms();
  if (t->rc == 0 && t->unlock)
    t->rc = dlock_unlock(t->l);
  return NULL;
}

static void taker_init(taker_t *t, dlock_t *l, int64_t wait_ms,
                       int64_t lease_ms, int unlock) {
  memset(t, 0, sizeof(*t));
  t->l = l;
  t->wait_ms = wait_ms;
  t->lease_ms = lease_ms;
  t->unlock = unlock;
  atomic_init(&t->owner, 0);
}

static uint64_t taker_owner(taker_t *t) {
  uint64_t o;
  while ((o = atomic_load(&t->owner)) == 0)
    lu_sleep_ms(1);
  return o;
}

/* ---- sharing and exclusion ---------------------------------------------- */

TEST(many_readers) {
  const char *name = "rw:readers";
  rp_server_t *s = lu_server(0);
  dlock_client_t *c1 = lu_client(s), *c2 = lu_client(s);
  rw_t a = rw_get(c1, name), b = rw_get(c2, name);
  uint64_t me = dlock_self();
  char f1[256], f2[256], k[512];

  ASSERT_DLOCK_OK(dlock_lock(a.r, 10000));
  ASSERT_DLOCK_OK(dlock_trylock(b.r, 0, 10000));
  /* A third reader, another owner of the first client. */
  uint64_t o3 = dlock_owner_new();
  ASSERT_DLOCK_OK(dlock_trylock_as(a.r, o3, 0, 10000));

  redisReply *r = rp_cmd(s, "TYPE %s", name);
  ASSERT_STR_EQ(r->str, "hash");
  freeReplyObject(r);
  assert_mode(s, name, "read");
  ASSERT_EQ(lu_hlen(s, name), 4); /* mode + three readers */
  ASSERT_EQ(lu_hget_num(s, name, lu_field(f1, sizeof(f1), c1, me)), 1);
  ASSERT_EQ(lu_hget_num(s, name, lu_field(f2, sizeof(f2), c2, me)), 1);
  ASSERT_EQ(lu_hget_num(s, name, lu_field(f1, sizeof(f1), c1, o3)), 1);
  ASSERT_EQ(lu_exists(s, rw_timeout_key(k, sizeof(k), name, c1, me, 1)), 1);
  ASSERT_EQ(lu_exists(s, rw_timeout_key(k, sizeof(k), name, c2, me, 1)), 1);
  ASSERT_EQ(lu_exists(s, rw_timeout_key(k, sizeof(k), name, c1, o3, 1)), 1);
  ASSERT_EQ(dlock_is_held(a.r), 1);
  ASSERT_EQ(dlock_is_held(b.r), 1);
  ASSERT_EQ(dlock_is_locked(a.w), 1);
  ASSERT_EQ(dlock_is_held(a.w), 0);

  dlock_info_t *info = NULL;
  ASSERT_DLOCK_OK(dlock_inspect(c1, name, strlen(name), &info));
  ASSERT_STR_EQ(info->mode, "read");
  ASSERT_EQ(info->nholders, 3);
  dlock_info_free(info);

  ASSERT_DLOCK_OK(dlock_unlock(a.r));
  ASSERT_DLOCK_OK(dlock_unlock_as(a.r, o3));
  assert_mode(s, name, "read");
  ASSERT_EQ(lu_hlen(s, name), 2);
  ASSERT_DLOCK_OK(dlock_unlock(b.r));
  ASSERT_EQ(lu_exists(s, name), 0);
  ASSERT_EQ(keys_left(s), 0);
  ASSERT_DLOCK_ERR(dlock_unlock(a.r), DLOCK_ENOTHELD);
  rw_free(&a);
  rw_free(&b);
  dlock_client_close(c1);
  dlock_client_close(c2);
  rp_free(s);
}

TEST(writer_excluded_by_readers) {
  const char *name = "rw:wex";
  rp_server_t *s = lu_server(1);
  dlock_client_t *c1 = lu_client(s), *c2 = lu_client(s);
  rw_t a = rw_get(c1, name), b = rw_get(c2, name);
  ASSERT_DLOCK_OK(dlock_lock(a.r, 10000));
  /* Another client, and another owner of the same client. */
  ASSERT_DLOCK_ERR(dlock_trylock(b.w, 0, 10000), DLOCK_ETIMEDOUT);
  ASSERT_DLOCK_ERR(dlock_trylock_as(a.w, dlock_owner_new(), 0, 10000),
                   DLOCK_ETIMEDOUT);
  int64_t t0 = lu_now_ms();
  ASSERT_DLOCK_ERR(dlock_trylock(b.w, 300, 10000), DLOCK_ETIMEDOUT);
  int64_t took = lu_now_ms() - t0;
  printf("writer gave up after %" PRId64 " ms\n", took);
  ASSERT_GE(took, 250);
  ASSERT_LT(took, 2000);
  assert_mode(s, name, "read");
  ASSERT_EQ(lu_hlen(s, name), 2);
  ASSERT_DLOCK_OK(dlock_unlock(a.r));
  ASSERT_EQ(lu_exists(s, name), 0);
  /* Now free: the writer gets it. */
  ASSERT_DLOCK_OK(dlock_trylock(b.w, 0, 10000));
  ASSERT_DLOCK_OK(dlock_unlock(b.w));
  rw_free(&a);
  rw_free(&b);
  dlock_client_close(c1);
  dlock_client_close(c2);
  rp_free(s);
}

TEST(readers_excluded_by_writer) {
  const char *name = "rw:rex";
  rp_server_t *s = lu_server(0);
  dlock_client_t *c1 = lu_client(s), *c2 = lu_client(s);
  rw_t a = rw_get(c1, name), b = rw_get(c2, name);
  char f[256];
  ASSERT_DLOCK_OK(dlock_lock(a.w, 10000));
  assert_mode(s, name, "write");
  ASSERT_EQ(lu_hlen(s, name), 2);
  ASSERT_EQ(lu_hget_num(s, name, wfield(f, sizeof(f), c1, dlock_self())), 1);
  int64_t pttl = lu_pttl(s, name);
  ASSERT_GT(pttl, 8000);
  ASSERT_LE(pttl, 10000);

  ASSERT_DLOCK_ERR(dlock_trylock(b.r, 0, 10000), DLOCK_ETIMEDOUT);
  ASSERT_DLOCK_ERR(dlock_trylock_as(a.r, dlock_owner_new(), 0, 10000),
                   DLOCK_ETIMEDOUT);
  ASSERT_DLOCK_ERR(dlock_trylock(b.w, 0, 10000), DLOCK_ETIMEDOUT);
  int64_t t0 = lu_now_ms();
  ASSERT_DLOCK_ERR(dlock_trylock(b.r, 300, 10000), DLOCK_ETIMEDOUT);
  printf("reader gave up after %" PRId64 " ms\n", lu_now_ms() - t0);
  ASSERT_GE(lu_now_ms() - t0, 250);
  ASSERT_EQ(lu_hlen(s, name), 2);
  ASSERT_EQ(dlock_is_held(b.r), 0);
  ASSERT_EQ(dlock_is_locked(b.r), 1);

  ASSERT_DLOCK_OK(dlock_unlock(a.w));
  ASSERT_EQ(lu_exists(s, name), 0);
  ASSERT_DLOCK_OK(dlock_trylock(b.r, 0, 10000));
  ASSERT_DLOCK_OK(dlock_unlock(b.r));
  rw_free(&a);
  rw_free(&b);
  dlock_client_close(c1);
  dlock_client_close(c2);
  rp_free(s);
}

/* ---- downgrade, no upgrade --------------------------------------------- */

TEST(writer_downgrades) {
  const char *name = "rw:down";
  rp_server_t *s = lu_server(0);
  dlock_client_t *c1 = lu_client(s), *c2 = lu_client(s);
  rw_t a = rw_get(c1, name), b = rw_get(c2, name);
  uint64_t me = dlock_self();
  char rf[256], wf[256], k[512];
  lu_field(rf, sizeof(rf), c1, me);
  wfield(wf, sizeof(wf), c1, me);

  ASSERT_DLOCK_OK(dlock_lock(a.w, 10000));
  /* The writer takes the read lock at once. */
  ASSERT_DLOCK_OK(dlock_trylock(a.r, 0, 10000));
  assert_mode(s, name, "write");
  ASSERT_EQ(lu_hget_num(s, name, wf), 1);
  ASSERT_EQ(lu_hget_num(s, name, rf), 1);
  ASSERT_EQ(lu_exists(s, rw_timeout_key(k, sizeof(k), name, c1, me, 1)), 1);
  /* Still exclusive for everyone else. */
  ASSERT_DLOCK_ERR(dlock_trylock(b.r, 0, 10000), DLOCK_ETIMEDOUT);

  ASSERT_DLOCK_OK(dlock_unlock(a.w));
  assert_mode(s, name, "read");
  ASSERT_EQ(lu_hexists_n(s, name, strlen(name), wf), 0);
  ASSERT_EQ(lu_hget_num(s, name, rf), 1);
  ASSERT_GT(lu_pttl(s, name), 0);
  ASSERT_EQ(dlock_is_held(a.w), 0);
  ASSERT_EQ(dlock_is_held(a.r), 1);
  /* Other readers may now come in, writers may not. */
  ASSERT_DLOCK_OK(dlock_trylock(b.r, 0, 10000));
  ASSERT_DLOCK_ERR(dlock_trylock(b.w, 0, 10000), DLOCK_ETIMEDOUT);
  ASSERT_DLOCK_OK(dlock_unlock(b.r));
  ASSERT_DLOCK_OK(dlock_unlock(a.r));
  ASSERT_EQ(lu_exists(s, name), 0);
  ASSERT_EQ(keys_left(s), 0);
  rw_free(&a);
  rw_free(&b);
  dlock_client_close(c1);
  dlock_client_close(c2);
  rp_free(s);
}

TEST(reader_asking_for_write_waits) {
  const char *name = "rw:noup";
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  rw_t a = rw_get(c, name);
  char rf[256], wf[256];
  lu_field(rf, sizeof(rf), c, dlock_self());
  wfield(wf, sizeof(wf), c, dlock_self());
  ASSERT_DLOCK_OK(dlock_lock(a.r, 10000));
  ASSERT_DLOCK_ERR(dlock_trylock(a.w, 0, 10000), DLOCK_ETIMEDOUT);
  int64_t t0 = lu_now_ms();
  /* The only reader, and still no upgrade. */
  ASSERT_DLOCK_ERR(dlock_trylock(a.w, 300, 10000), DLOCK_ETIMEDOUT);
  int64_t took = lu_now_ms() - t0;
  printf("upgrade attempt gave up after %" PRId64 " ms\n", took);
  ASSERT_GE(took, 250);
  ASSERT_LT(took, 2000);
  assert_mode(s, name, "read");
  ASSERT_EQ(lu_hget_num(s, name, rf), 1);
  ASSERT_EQ(lu_hexists_n(s, name, strlen(name), wf), 0);
  ASSERT_EQ(dlock_hold_count(a.r), 1);
  ASSERT_EQ(dlock_is_held(a.w), 0);
  ASSERT_DLOCK_OK(dlock_unlock(a.r));
  /* Released, the same owner gets the write lock. */
  ASSERT_DLOCK_OK(dlock_trylock(a.w, 0, 10000));
  ASSERT_DLOCK_OK(dlock_unlock(a.w));
  ASSERT_EQ(lu_exists(s, name), 0);
  rw_free(&a);
  dlock_client_close(c);
  rp_free(s);
}

/* ---- reentrancy ---------------------------------------------------------- */

TEST(reentrancy_read_and_write) {
  const char *name = "rw:re";
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  rw_t a = rw_get(c, name);
  uint64_t me = dlock_self();
  char rf[256], wf[256], k1[512], k2[512], k3[512], tok[256];
  lu_field(rf, sizeof(rf), c, me);
  wfield(wf, sizeof(wf), c, me);
  rw_timeout_key(k1, sizeof(k1), name, c, me, 1);
  rw_timeout_key(k2, sizeof(k2), name, c, me, 2);
  rw_timeout_key(k3, sizeof(k3), name, c, me, 3);
  lu_token_key(tok, sizeof(tok), name, strlen(name));

  /* Read: every hold has its own timeout key. */
  ASSERT_DLOCK_OK(dlock_lock(a.r, 10000));
  ASSERT_DLOCK_OK(dlock_lock(a.r, 10000));
  ASSERT_DLOCK_OK(dlock_trylock(a.r, 0, 10000));
  ASSERT_EQ(dlock_hold_count(a.r), 3);
  ASSERT_EQ(lu_hget_num(s, name, rf), 3);
  ASSERT_EQ(lu_exists(s, k1), 1);
  ASSERT_EQ(lu_exists(s, k2), 1);
  ASSERT_EQ(lu_exists(s, k3), 1);
  ASSERT_DLOCK_OK(dlock_unlock(a.r));
  ASSERT_EQ(lu_hget_num(s, name, rf), 2);
  ASSERT_EQ(lu_exists(s, k3), 0); /* the newest hold's key goes */
  ASSERT_EQ(lu_exists(s, k1), 1);
  ASSERT_DLOCK_OK(dlock_unlock(a.r));
  ASSERT_DLOCK_OK(dlock_unlock(a.r));
  ASSERT_EQ(lu_exists(s, name), 0);
  ASSERT_EQ(lu_exists(s, k1), 0);
  ASSERT_DLOCK_ERR(dlock_unlock(a.r), DLOCK_ENOTHELD);

  /* Write: the count goes up, the token stays. */
  ASSERT_DLOCK_OK(dlock_lock(a.w, 10000));
  uint64_t t1 = dlock_token(a.w);
  ASSERT_GT(t1, 0);
  ASSERT_EQ(lu_get_num_n(s, tok, strlen(tok)), (int64_t)t1);
  ASSERT_DLOCK_OK(dlock_trylock(a.w, 0, 10000));
  ASSERT_EQ(dlock_hold_count(a.w), 2);
  ASSERT_EQ(lu_hget_num(s, name, wf), 2);
  ASSERT_EQ(dlock_token(a.w), t1);
  ASSERT_EQ(lu_get_num_n(s, tok, strlen(tok)), (int64_t)t1);
  ASSERT_DLOCK_OK(dlock_unlock(a.w));
  ASSERT_EQ(lu_hget_num(s, name, wf), 1);
  assert_mode(s, name, "write");
  ASSERT_GT(lu_pttl(s, name), 8000);
  ASSERT_DLOCK_OK(dlock_unlock(a.w));
  ASSERT_EQ(lu_exists(s, name), 0);
  ASSERT_DLOCK_ERR(dlock_unlock(a.w), DLOCK_ENOTHELD);
  /* A new write hold gets a larger token. */
  ASSERT_DLOCK_OK(dlock_lock(a.w, 10000));
  ASSERT_GT(dlock_token(a.w), t1);
  ASSERT_DLOCK_OK(dlock_unlock(a.w));
  ASSERT_EQ(keys_left(s), 0);
  rw_free(&a);
  dlock_client_close(c);
  rp_free(s);
}

/* ---- per-hold leases ----------------------------------------------------- */

/* Two read holds with leases 'first' then 'second' ms (two owners, or one
 * owner twice): the lock lives as long as the longer one. */
static void run_read_leases(int64_t first, int64_t second, int same_owner) {
  const char *name = "rw:leases";
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  rw_t a = rw_get(c, name);
  uint64_t o1 = dlock_owner_new(), o2 = same_owner ? o1 : dlock_owner_new();
  char k1[512], k2[512];
  rw_timeout_key(k1, sizeof(k1), name, c, o1, 1);
  rw_timeout_key(k2, sizeof(k2), name, c, o2, same_owner ? 2 : 1);
  int64_t longer = first > second ? first : second;
  int64_t shorter = first > second ? second : first;

  int64_t t0 = lu_now_ms();
  ASSERT_DLOCK_OK(dlock_lock_as(a.r, o1, first));
  ASSERT_DLOCK_OK(dlock_lock_as(a.r, o2, second));
  int64_t p1 = lu_pttl(s, k1), p2 = lu_pttl(s, k2), ph = lu_pttl(s, name);
  printf("pttl: hold 1 %" PRId64 ", hold 2 %" PRId64 ", hash %" PRId64 "\n", p1,
         p2, ph);
  ASSERT_GT(p1, first - 500);
  ASSERT_LE(p1, first);
  ASSERT_GT(p2, second - 500);
  ASSERT_LE(p2, second);
  ASSERT_GT(ph, longer - 500);
  ASSERT_LE(ph, longer);

  /* Past the shorter lease: the hash lives on, that hold's key is gone. */
  lu_sleep_ms(shorter * 2 - (lu_now_ms() - t0));
  ASSERT_EQ(lu_exists(s, name), 1);
  ASSERT_EQ(lu_exists(s, first < second ? k1 : k2), 0);
  ASSERT_EQ(lu_exists(s, first < second ? k2 : k1), 1);
  /* Past the longer one: all gone. */
  lu_sleep_ms(longer + 300 - (lu_now_ms() - t0));
  ASSERT_EQ(lu_exists(s, name), 0);
  ASSERT_EQ(keys_left(s), 0);
  rw_free(&a);
  dlock_client_close(c);
  rp_free(s);
}

TEST(read_leases_short_then_long) { run_read_leases(300, 1500, 0); }

TEST(read_leases_long_then_short) { run_read_leases(1500, 300, 0); }

TEST(read_leases_same_owner) { run_read_leases(300, 1500, 1); }

TEST(read_unlock_recomputes_expiry) {
  const char *name = "rw:recompute";
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  rw_t a = rw_get(c, name);
  uint64_t shorto = dlock_owner_new(), longo = dlock_owner_new();
  ASSERT_DLOCK_OK(dlock_lock_as(a.r, shorto, 400));
  ASSERT_DLOCK_OK(dlock_lock_as(a.r, longo, 5000));
  ASSERT_GT(lu_pttl(s, name), 4000);
  /* The long hold ends: the lock now lives as long as the short one. */
  ASSERT_DLOCK_OK(dlock_unlock_as(a.r, longo));
  int64_t ph = lu_pttl(s, name);
  printf("hash pttl after the long hold's release: %" PRId64 "\n", ph);
  ASSERT_GT(ph, 0);
  ASSERT_LE(ph, 400);
  int64_t gone = lu_wait_gone(s, name, 2000);
  printf("gone %" PRId64 " ms later\n", gone);
  ASSERT_GE(gone, 0);
  ASSERT_EQ(keys_left(s), 0);
  /* That hold ran out: its owner is told so. */
  ASSERT_DLOCK_ERR(dlock_unlock_as(a.r, shorto), DLOCK_ELOST);
  rw_free(&a);
  dlock_client_close(c);
  rp_free(s);
}

TEST(expired_holds_report_lost) {
  const char *name = "rw:expire";
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  rw_t a = rw_get(c, name);
  ASSERT_DLOCK_OK(dlock_lock(a.r, 300));
  ASSERT_GE(lu_wait_gone(s, name, 2000), 0);
  ASSERT_EQ(dlock_is_held(a.r), 0);
  ASSERT_DLOCK_ERR(dlock_unlock(a.r), DLOCK_ELOST);
  ASSERT_DLOCK_OK(dlock_lock(a.w, 300));
  ASSERT_GE(lu_wait_gone(s, name, 2000), 0);
  ASSERT_EQ(dlock_is_held(a.w), 0);
  ASSERT_DLOCK_ERR(dlock_unlock(a.w), DLOCK_ELOST);
  /* And it is free for anyone. */
  ASSERT_DLOCK_OK(dlock_trylock_as(a.w, dlock_owner_new(), 0, 1000));
  rw_free(&a);
  dlock_client_close(c);
  rp_free(s);
}

/* ---- wake-ups ------------------------------------------------------------ */

TEST(write_release_wakes_all_readers) {
  enum { R = 3 };
  const char *name = "rw:wakeall";
  rp_server_t *s = lu_server(0);
  dlock_client_t *c1 = lu_client(s), *c2 = lu_client(s);
  rw_t a = rw_get(c1, name), b = rw_get(c2, name);
  char ch[512], msg[32], f[256];
  rw_channel(ch, sizeof(ch), name);

  ASSERT_DLOCK_OK(dlock_lock(a.w, 10000));
  taker_t t[R];
  pthread_t th[R];
  for (int i = 0; i < R; i++) {
    taker_init(&t[i], i == 2 ? b.r : a.r, DLOCK_WAIT_FOREVER, 10000, 0);
    ASSERT_EQ(pthread_create(&th[i], NULL, taker_main, &t[i]), 0);
  }
  /* Wait until both clients listen on the channel. */
  int64_t t0 = lu_now_ms();
  while (lu_numsub(s, ch, strlen(ch)) < 2 && lu_now_ms() - t0 < 3000)
    lu_sleep_ms(5);
  printf("subscribers on %s: %" PRId64 "\n", ch, lu_numsub(s, ch, strlen(ch)));
  ASSERT_GE(lu_numsub(s, ch, strlen(ch)), 2);
  lu_sleep_ms(150);
  for (int i = 0; i < R; i++)
    ASSERT_EQ(dlock_is_held_as(t[i].l, taker_owner(&t[i])), 0);
  redisContext *sub = lu_subscribe(s, ch, strlen(ch));

  int64_t t_rel = lu_now_ms();
  ASSERT_DLOCK_OK(dlock_unlock(a.w));
  for (int i = 0; i < R; i++)
    ASSERT_EQ(pthread_join(th[i], NULL), 0);
  int64_t worst = 0;
  for (int i = 0; i < R; i++) {
    ASSERT_DLOCK_OK(t[i].rc);
    int64_t d = t[i].acquired_ms - t_rel;
    printf("reader %d acquired %" PRId64 " ms after the write release\n", i, d);
    if (d > worst)
      worst = d;
  }
  /* Without the "wake all" message they would sleep out the writer's
   * 10 s lease. */
  ASSERT_LT(worst, 500);
  ASSERT(lu_sub_wait(sub, 1000, msg, sizeof(msg), NULL, 0));
  ASSERT_STR_EQ(msg, "1");
  redisFree(sub);

  /* All three read at once. */
  assert_mode(s, name, "read");
  ASSERT_EQ(lu_hlen(s, name), 1 + R);
  for (int i = 0; i < R; i++)
    ASSERT_EQ(lu_hget_num(
                  s, name,
                  lu_field(f, sizeof(f), i == 2 ? c2 : c1, taker_owner(&t[i]))),
              1);
  /* The last reader out announces "0". */
  sub = lu_subscribe(s, ch, strlen(ch));
  for (int i = 0; i < R; i++)
    ASSERT_DLOCK_OK(dlock_unlock_as(t[i].l, taker_owner(&t[i])));
  ASSERT_EQ(lu_exists(s, name), 0);
  ASSERT(lu_sub_wait(sub, 1000, msg, sizeof(msg), NULL, 0));
  ASSERT_STR_EQ(msg, "0");
  redisFree(sub);
  rw_free(&a);
  rw_free(&b);
  dlock_client_close(c1);
  dlock_client_close(c2);
  rp_free(s);
}

TEST(writer_waits_for_last_reader) {
  const char *name = "rw:wwait";
  rp_server_t *s = lu_server(1);
  dlock_client_t *c1 = lu_client(s), *c2 = lu_client(s);
  rw_t a = rw_get(c1, name), b = rw_get(c2, name);
  uint64_t r1 = dlock_owner_new(), r2 = dlock_owner_new();
  ASSERT_DLOCK_OK(dlock_lock_as(a.r, r1, 10000));
  ASSERT_DLOCK_OK(dlock_lock_as(a.r, r2, 10000));
  taker_t w;
  taker_init(&w, b.w, DLOCK_WAIT_FOREVER, 10000, 0);
  pthread_t th;
  ASSERT_EQ(pthread_create(&th, NULL, taker_main, &w), 0);
  lu_sleep_ms(200);
  ASSERT_EQ(dlock_is_held_as(b.w, taker_owner(&w)), 0);
  ASSERT_DLOCK_OK(dlock_unlock_as(a.r, r1));
  lu_sleep_ms(200);
  ASSERT_EQ(dlock_is_held_as(b.w, taker_owner(&w)), 0);
  assert_mode(s, name, "read");
  int64_t t_rel = lu_now_ms();
  ASSERT_DLOCK_OK(dlock_unlock_as(a.r, r2));
  ASSERT_EQ(pthread_join(th, NULL), 0);
  ASSERT_DLOCK_OK(w.rc);
  printf("writer acquired %" PRId64 " ms after the last read release\n",
         w.acquired_ms - t_rel);
  ASSERT_LT(w.acquired_ms - t_rel, 500);
  assert_mode(s, name, "write");
  ASSERT_DLOCK_OK(dlock_unlock_as(b.w, w.owner));
  ASSERT_EQ(lu_exists(s, name), 0);
  rw_free(&a);
  rw_free(&b);
  dlock_client_close(c1);
  dlock_client_close(c2);
  rp_free(s);
}

/* Readers and writers in threads: a writer is alone, readers overlap only
 * with readers. */
typedef struct mix_arg {
  rw_t h;
  int writer;
  int iter;
  atomic_int *readers, *writers, *bad;
  int rc;
} mix_arg_t;

static void *mix_main(void *p) {
  mix_arg_t *m = p;
  for (int i = 0; i < m->iter; i++) {
    dlock_t *l = m->writer ? m->h.w : m->h.r;
    m->rc = dlock_lock(l, 10000);
    if (m->rc)
      return NULL;
    if (m->writer) {
      if (atomic_fetch_add(m->writers, 1) != 0 || atomic_load(m->readers))
        atomic_fetch_add(m->bad, 1);
      lu_sleep_ms(1);
      atomic_fetch_sub(m->writers, 1);
    } else {
      atomic_fetch_add(m->readers, 1);
      if (atomic_load(m->writers))
        atomic_fetch_add(m->bad, 1);
      lu_sleep_ms(1);
      atomic_fetch_sub(m->readers, 1);
    }
    m->rc = dlock_unlock(l);
    if (m->rc)
      return NULL;
  }
  return NULL;
}

TEST(mixed_readers_writers_exclusion) {
  enum { T = 6, ITER = 40 };
  const char *name = "rw:mix";
  rp_server_t *s = lu_server(1);
  dlock_client_t *c1 = lu_client(s), *c2 = lu_client(s);
  rw_t a = rw_get(c1, name), b = rw_get(c2, name);
  atomic_int readers, writers, bad;
  atomic_init(&readers, 0);
  atomic_init(&writers, 0);
  atomic_init(&bad, 0);
  mix_arg_t m[T];
  pthread_t th[T];
  int64_t t0 = lu_now_ms();
  for (int i = 0; i < T; i++) {
    m[i] = (mix_arg_t){i % 2 ? a : b, i < 2, ITER, &readers, &writers, &bad, 0};
    ASSERT_EQ(pthread_create(&th[i], NULL, mix_main, &m[i]), 0);
  }
  for (int i = 0; i < T; i++)
    ASSERT_EQ(pthread_join(th[i], NULL), 0);
  printf("%d threads x %d: %" PRId64 " ms\n", (int)T, (int)ITER,
         lu_now_ms() - t0);
  for (int i = 0; i < T; i++)
    ASSERT_DLOCK_OK(m[i].rc);
  ASSERT_EQ(atomic_load(&bad), 0);
  ASSERT_EQ(lu_exists(s, name), 0);
  ASSERT_EQ(keys_left(s), 0);
  rw_free(&a);
  rw_free(&b);
  dlock_client_close(c1);
  dlock_client_close(c2);
  rp_free(s);
}

/* ---- watchdog ------------------------------------------------------------ */

TEST(watchdog_keeps_read_and_write) {
  rp_server_t *s = lu_server(0);
  lu_lost_t lost;
  lu_lost_init(&lost);
  dlock_options_t o;
  lu_options(&o, s); /* watchdog 600 ms */
  o.on_lost = lu_lost_cb;
  o.on_lost_data = &lost;
  dlock_client_t *c = lu_client_opts(&o);
  rw_t a = rw_get(c, "rw:wd:a"), b = rw_get(c, "rw:wd:b");
  char k[512];
  rw_timeout_key(k, sizeof(k), "rw:wd:a", c, dlock_self(), 1);
  ASSERT_DLOCK_OK(dlock_lock(a.r, DLOCK_WATCHDOG));
  ASSERT_DLOCK_OK(dlock_lock(b.w, DLOCK_WATCHDOG));
  int64_t pr = lu_pttl(s, "rw:wd:a"), pw = lu_pttl(s, "rw:wd:b");
  printf("initial pttl: read %" PRId64 ", write %" PRId64 "\n", pr, pw);
  ASSERT_GT(pr, 0);
  ASSERT_LE(pr, 600);
  ASSERT_GT(pw, 0);
  ASSERT_LE(pw, 600);
  for (int i = 0; i < 8; i++) { /* 2 s: more than three leases */
    lu_sleep_ms(250);
    ASSERT_GT(lu_pttl(s, "rw:wd:a"), 0);
    ASSERT_GT(lu_pttl(s, "rw:wd:b"), 0);
    /* The read hold's own timeout key is renewed too. */
    ASSERT_GT(lu_pttl(s, k), 0);
  }
  assert_mode(s, "rw:wd:a", "read");
  assert_mode(s, "rw:wd:b", "write");
  ASSERT_EQ(lu_lost_count(&lost), 0);
  ASSERT_DLOCK_OK(dlock_unlock(a.r));
  ASSERT_DLOCK_OK(dlock_unlock(b.w));
  ASSERT_EQ(lu_exists(s, "rw:wd:a"), 0);
  ASSERT_EQ(lu_exists(s, "rw:wd:b"), 0);
  ASSERT_EQ(keys_left(s), 0);
  /* Nothing renews a released lock. */
  lu_sleep_ms(700);
  ASSERT_EQ(lu_exists(s, "rw:wd:a"), 0);
  ASSERT_EQ(lu_exists(s, "rw:wd:b"), 0);
  rw_free(&a);
  rw_free(&b);
  dlock_client_close(c);
  rp_free(s);
}

/* ---- layout with a hash tag in the name --------------------------------- */

TEST(layout_name_with_brace) {
  const char *name = "rw{tag}x";
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  rw_t a = rw_get(c, name);
  char k[512], ch[512], msg[32];
  rw_channel(ch, sizeof(ch), name);
  ASSERT_STR_EQ(ch, "redisson_rwlock:rw{tag}x");
  ASSERT_DLOCK_OK(dlock_lock(a.r, 10000));
  rw_timeout_key(k, sizeof(k), name, c, dlock_self(), 1);
  printf("timeout key: %s\n", k);
  ASSERT_EQ(lu_exists(s, k), 1);
  ASSERT_GT(lu_pttl(s, k), 8000);
  redisContext *sub = lu_subscribe(s, ch, strlen(ch));
  ASSERT_DLOCK_OK(dlock_unlock(a.r));
  ASSERT(lu_sub_wait(sub, 1000, msg, sizeof(msg), NULL, 0));
  ASSERT_STR_EQ(msg, "0");
  redisFree(sub);
  sub = lu_subscribe(s, ch, strlen(ch));
  ASSERT_DLOCK_OK(dlock_lock(a.w, 10000));
  ASSERT_DLOCK_OK(dlock_unlock(a.w));
  ASSERT(lu_sub_wait(sub, 1000, msg, sizeof(msg), NULL, 0));
  ASSERT_STR_EQ(msg, "1");
  redisFree(sub);
  ASSERT_EQ(keys_left(s), 0);
  /* The token counter of the write lock. */
  ASSERT_EQ(lu_exists(s, "redisson_lock_token:rw{tag}x"), 1);
  rw_free(&a);
  dlock_client_close(c);
  rp_free(s);
}

/* dlock_get_kind makes the same handles. */
TEST(get_kind_read_write) {
  const char *name = "rw:kind";
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  dlock_t *r = NULL, *w = NULL;
  ASSERT_DLOCK_OK(dlock_get_kind(c, DLOCK_READ, name, strlen(name), &r));
  ASSERT_DLOCK_OK(dlock_get_kind(c, DLOCK_WRITE, name, strlen(name), &w));
  ASSERT_EQ(dlock_kind(r), DLOCK_READ);
  ASSERT_EQ(dlock_kind(w), DLOCK_WRITE);
  ASSERT_DLOCK_OK(dlock_lock(r, 5000));
  assert_mode(s, name, "read");
  ASSERT_DLOCK_ERR(dlock_trylock_as(w, dlock_owner_new(), 0, 5000),
                   DLOCK_ETIMEDOUT);
  ASSERT_DLOCK_OK(dlock_unlock(r));
  dlock_free(r);
  dlock_free(w);
  dlock_client_close(c);
  rp_free(s);
}
