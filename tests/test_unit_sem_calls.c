/*
 * Unit tests, without a server, of the semaphore, expirable-permit
 * semaphore and latch calls that src/lock/semaphore.c builds (the script,
 * keys and arguments each names) and of the outcomes it decodes from
 * replies.
 */
#include "../src/lock/sem_kinds.h"
#include "dlock.h"
#include "harness/test.h"

#include <string.h>

static int arg_is(const dlock__counter_call *a, int i, const char *want) {
  return a->lens[i] == strlen(want) &&
         memcmp(a->argv[i], want, a->lens[i]) == 0;
}

static redisReply integer(long long v) {
  redisReply r;
  memset(&r, 0, sizeof(r));
  r.type = REDIS_REPLY_INTEGER;
  r.integer = v;
  return r;
}

/* An array reply of 'n' integers, its elements in 'e' and 'p'. */
static redisReply array(size_t n, const long long *v, redisReply *e,
                        redisReply **p) {
  redisReply r;
  memset(&r, 0, sizeof(r));
  r.type = REDIS_REPLY_ARRAY;
  r.elements = n;
  r.element = p;
  for (size_t i = 0; i < n; i++) {
    e[i] = integer(v[i]);
    p[i] = &e[i];
  }
  return r;
}

static redisReply text(int type, const char *s) {
  redisReply r;
  memset(&r, 0, sizeof(r));
  r.type = type;
  r.str = (char *)s;
  r.len = strlen(s);
  return r;
}

TEST(sem_calls_name_script_keys_and_arguments) {
  dlock__counter_names n;
  ASSERT_DLOCK_OK(dlock__counter_names_make(DLOCK__SEM, "s1", 2, &n));
  ASSERT_STR_EQ(n.channel, "redisson_sc:{s1}");
  ASSERT_NULL(n.zset);
  dlock__counter_call a;

  dlock__sem_acquire_call(&n, 3, &a);
  ASSERT(a.call.script == &dlock__script_sem_acquire);
  ASSERT_EQ(a.call.nkeys, 1);
  ASSERT_EQ(a.call.nargs, 1);
  ASSERT(arg_is(&a, 0, "s1"));
  ASSERT(arg_is(&a, 1, "3"));

  dlock__sem_release_call(&n, 12, &a);
  ASSERT(a.call.script == &dlock__script_sem_release);
  ASSERT_EQ(a.call.nkeys, 2);
  ASSERT_EQ(a.call.nargs, 1);
  ASSERT(arg_is(&a, 0, "s1"));
  ASSERT(arg_is(&a, 1, "redisson_sc:{s1}"));
  ASSERT(arg_is(&a, 2, "12"));

  dlock__sem_add_call(&n, 5, 0, &a);
  ASSERT(a.call.script == &dlock__script_sem_add);
  ASSERT_EQ(a.call.nkeys, 2);
  ASSERT_EQ(a.call.nargs, 2);
  ASSERT(arg_is(&a, 2, "5"));
  ASSERT(arg_is(&a, 3, "0"));

  dlock__sem_set_call(&n, 0, &a);
  ASSERT(a.call.script == &dlock__script_sem_set);
  ASSERT(arg_is(&a, 2, "0"));

  dlock__sem_drain_call(&n, &a);
  ASSERT(a.call.script == &dlock__script_sem_drain);
  ASSERT_EQ(a.call.nkeys, 1);
  ASSERT_EQ(a.call.nargs, 0);
  ASSERT(arg_is(&a, 0, "s1"));

  dlock__counter_get_call(&n, &a);
  ASSERT_EQ(a.argc, 2);
  ASSERT(arg_is(&a, 0, "GET"));
  ASSERT(arg_is(&a, 1, "s1"));
  dlock__counter_names_free(&n);
}

TEST(psem_calls_carry_the_permit_id) {
  dlock__counter_names n;
  ASSERT_DLOCK_OK(dlock__counter_names_make(DLOCK__PSEM, "p", 1, &n));
  ASSERT_STR_EQ(n.zset, "{p}:timeout");
  ASSERT_STR_EQ(n.token_key, "dlock_permit_token:{p}");
  unsigned char id[DLOCK__PERMIT_ID_BYTES];
  for (int i = 0; i < DLOCK__PERMIT_ID_BYTES; i++)
    id[i] = (unsigned char)(0xa0 + i);
  dlock__counter_call a;

  dlock__psem_acquire_call(&n, 30000, id, &a);
  ASSERT(a.call.script == &dlock__script_psem_acquire);
  ASSERT_EQ(a.call.nkeys, 4);
  ASSERT_EQ(a.call.nargs, 2);
  ASSERT(arg_is(&a, 0, "p"));
  ASSERT(arg_is(&a, 1, "{p}:timeout"));
  ASSERT(arg_is(&a, 2, "redisson_sc:{p}"));
  ASSERT(arg_is(&a, 3, "dlock_permit_token:{p}"));
  ASSERT(arg_is(&a, 4, "30000"));
  ASSERT_EQ(a.lens[5], (size_t)DLOCK__PERMIT_ID_BYTES);
  ASSERT(memcmp(a.argv[5], id, sizeof(id)) == 0);

  dlock__psem_release_call(&n, id, &a);
  ASSERT(a.call.script == &dlock__script_psem_release);
  ASSERT_EQ(a.call.nkeys, 3);
  ASSERT_EQ(a.call.nargs, 2);
  ASSERT(memcmp(a.argv[3], id, sizeof(id)) == 0);
  ASSERT(arg_is(&a, 4, "a0a1a2a3a4a5a6a7a8a9aaabacadaeaf"));

  dlock__psem_count_call(&n, &a);
  ASSERT(a.call.script == &dlock__script_psem_count);
  ASSERT_EQ(a.call.nkeys, 3);
  ASSERT_EQ(a.call.nargs, 0);
  dlock__counter_names_free(&n);
}

TEST(latch_calls_use_redissons_channel) {
  dlock__counter_names n;
  ASSERT_DLOCK_OK(dlock__counter_names_make(DLOCK__LATCH, "l{x}", 4, &n));
  /* The braces go round the name whatever it holds. */
  ASSERT_STR_EQ(n.channel, "redisson_countdownlatch__channel__{l{x}}");
  dlock__counter_call a;
  dlock__latch_set_call(&n, 7, &a);
  ASSERT(a.call.script == &dlock__script_latch_set);
  ASSERT(arg_is(&a, 0, "l{x}"));
  ASSERT(arg_is(&a, 1, "redisson_countdownlatch__channel__{l{x}}"));
  ASSERT(arg_is(&a, 2, "7"));
  dlock__latch_count_down_call(&n, &a);
  ASSERT(a.call.script == &dlock__script_latch_count_down);
  ASSERT_EQ(a.call.nkeys, 2);
  ASSERT_EQ(a.call.nargs, 0);
  dlock__counter_names_free(&n);
}

TEST(sem_acquire_outcomes) {
  redisReply e[3], *p[3], r;
  int pass = -1;
  r = array(2, (const long long[]){1, 4}, e, p);
  ASSERT_EQ(dlock__sem_acquire_outcome(&r, &pass), 0);
  r = array(2, (const long long[]){0, 2}, e, p);
  ASSERT_EQ(dlock__sem_acquire_outcome(&r, &pass), 1);
  ASSERT_EQ(pass, 1); /* free permits, too few for this waiter */
  r = array(2, (const long long[]){0, 0}, e, p);
  ASSERT_EQ(dlock__sem_acquire_outcome(&r, &pass), 1);
  ASSERT_EQ(pass, 0);
  r = array(1, (const long long[]){1}, e, p);
  ASSERT_EQ(dlock__sem_acquire_outcome(&r, &pass), DLOCK_EPROTO);
  redisReply i = integer(1);
  ASSERT_EQ(dlock__sem_acquire_outcome(&i, &pass), DLOCK_EPROTO);
}

TEST(psem_acquire_and_count_outcomes) {
  redisReply e[3], *p[3], r;
  dlock__psem_taken t;
  r = array(3, (const long long[]){1, 42, 1700000000000LL}, e, p);
  ASSERT_EQ(dlock__psem_acquire_outcome(&r, &t), 0);
  ASSERT_EQ(t.token, 42u);
  ASSERT_EQ(t.expires_ms, 1700000000000LL);
  r = array(2, (const long long[]){0, 250}, e, p);
  ASSERT_EQ(dlock__psem_acquire_outcome(&r, &t), 1);
  ASSERT_EQ(t.sleep_ms, 250);
  /* Taken, but without the lease's end. */
  r = array(2, (const long long[]){1, 42}, e, p);
  ASSERT_EQ(dlock__psem_acquire_outcome(&r, &t), DLOCK_EPROTO);

  int64_t free_permits = -9, taken = -9;
  r = array(2, (const long long[]){-3, 5}, e, p);
  ASSERT_DLOCK_OK(dlock__psem_count_outcome(&r, &free_permits, &taken));
  ASSERT_EQ(free_permits, 0);
  ASSERT_EQ(taken, 5);
}

TEST(counter_reply_outcomes) {
  dlock__counter_names n;
  ASSERT_DLOCK_OK(dlock__counter_names_make(DLOCK__SEM, "s", 1, &n));
  int64_t v = -1;
  ASSERT_DLOCK_OK(dlock__sem_add_outcome(&n, 2, 5, &v));
  ASSERT_EQ(v, 5);
  ASSERT_DLOCK_ERR(dlock__sem_add_outcome(&n, 2, -1, &v), DLOCK_EINVAL);

  redisReply r = text(REDIS_REPLY_STRING, "17");
  ASSERT_DLOCK_OK(dlock__sem_available_outcome(&n, &r, &v));
  ASSERT_EQ(v, 17);
  r = text(REDIS_REPLY_STRING, "many");
  ASSERT_DLOCK_ERR(dlock__sem_available_outcome(&n, &r, &v), DLOCK_ENOTLOCK);
  r = text(REDIS_REPLY_ERROR, "WRONGTYPE Operation against a key");
  ASSERT_DLOCK_ERR(dlock__sem_available_outcome(&n, &r, &v), DLOCK_ESERVER);
  r = text(REDIS_REPLY_NIL, "");
  ASSERT_DLOCK_OK(dlock__sem_available_outcome(&n, &r, &v));
  ASSERT_EQ(v, 0);

  r = text(REDIS_REPLY_STRING, "-4");
  ASSERT_DLOCK_OK(dlock__latch_count_outcome(&n, &r, &v));
  ASSERT_EQ(v, 0);
  r = text(REDIS_REPLY_ERROR, "WRONGTYPE Operation against a key");
  ASSERT_DLOCK_ERR(dlock__latch_count_outcome(&n, &r, &v), DLOCK_ENOTLOCK);
  ASSERT_DLOCK_OK(dlock__latch_count_down_outcome(&n, 0));
  ASSERT_DLOCK_ERR(dlock__latch_count_down_outcome(&n, -1), DLOCK_EINVAL);

  const char *id = "00000000000000000000000000000001";
  ASSERT_DLOCK_OK(dlock__psem_release_outcome(&n, id, 1, 1, 0));
  ASSERT_DLOCK_ERR(dlock__psem_release_outcome(&n, id, 1, 1, 1), DLOCK_ELOST);
  ASSERT_DLOCK_ERR(dlock__psem_release_outcome(&n, id, 0, 0, 0), DLOCK_ELOST);
  ASSERT_DLOCK_ERR(dlock__psem_release_outcome(&n, id, -1, 1, 0), DLOCK_ELOST);
  ASSERT_DLOCK_ERR(dlock__psem_release_outcome(&n, id, -1, 0, 0),
                   DLOCK_ENOTHELD);
  dlock__counter_names_free(&n);
}

TEST(permit_ids_round_trip) {
  static dlock_client_t c;
  strcpy(c.id, "client-a");
  unsigned char id[DLOCK__PERMIT_ID_BYTES], raw[DLOCK__PERMIT_ID_BYTES];
  dlock__permit_id(&c, 0x0102030405060708ULL, id);
  char hex[2 * DLOCK__PERMIT_ID_BYTES + 1];
  dlock__permit_hex(id, sizeof(id), hex);
  ASSERT_EQ(strlen(hex), (size_t)32);
  ASSERT_STR_EQ(hex + 16, "0102030405060708");
  uint64_t owner = 0;
  int ours = 0;
  ASSERT_DLOCK_OK(dlock__permit_parse(&c, hex, raw, &owner, &ours));
  ASSERT_EQ(owner, 0x0102030405060708ULL);
  ASSERT_EQ(ours, 1);
  ASSERT(memcmp(raw, id, sizeof(id)) == 0);
  static dlock_client_t other;
  strcpy(other.id, "client-b");
  ASSERT_DLOCK_OK(dlock__permit_parse(&other, hex, raw, &owner, &ours));
  ASSERT_EQ(ours, 0);
  ASSERT_DLOCK_ERR(dlock__permit_parse(&c, "xyz", raw, &owner, &ours),
                   DLOCK_EINVAL);
  hex[3] = 'g';
  ASSERT_DLOCK_ERR(dlock__permit_parse(&c, hex, raw, &owner, &ours),
                   DLOCK_EINVAL);
}
