/*
 * Unit tests, without a server, of the single-lock kinds (src/lock/): the
 * script calls each builds (the script, keys and arguments, and what the
 * call owns) and the decoding of the hand-over reply. A kind needs nothing
 * of its client but the client's id and options, so the client here is a
 * bare struct with those set.
 */
#include "alloc.h"
#include "dlock.h"
#include "harness/test.h"
#include "lock.h"

#include <string.h>

static dlock_client_t client;
static dlock_t handle;
static char name[] = "L", rw_channel[] = "redisson_rwlock:{L}",
            channel[] = "redisson_lock__channel:{L}",
            token_key[] = "redisson_lock_token:{L}",
            latch[] = "redisson_unlock_latch:{L}:cid:1";

/* A handle of 'kind' on "L" whose client has the id "cid". */
static dlock_t *make(const dlock__kind *kind) {
  memset(&client, 0, sizeof(client));
  strcpy(client.id, "cid");
  client.opt.watchdog_timeout_ms = 30000;
  client.opt.fair_wait_timeout_ms = 5000;
  memset(&handle, 0, sizeof(handle));
  handle.c = &client;
  handle.kind = kind;
  handle.name = name;
  handle.len = 1;
  int rw = kind->id == DLOCK_READ || kind->id == DLOCK_WRITE;
  handle.channel = rw ? rw_channel : channel;
  handle.channel_len = strlen(handle.channel);
  handle.token_key = token_key;
  handle.token_key_len = strlen(handle.token_key);
  return &handle;
}

static int arg_is(const dlock__call *c, int i, const char *want) {
  return c->eval.lens[i] == strlen(want) &&
         memcmp(c->eval.argv[i], want, c->eval.lens[i]) == 0;
}

/* A release begun for owner 7 believed to hold 'count'. */
static dlock__release release_of(const char *count) {
  dlock__release r;
  memset(&r, 0, sizeof(r));
  strcpy(r.lease, "30000");
  strcpy(r.latch_ttl, "9000");
  strcpy(r.count, count);
  r.latch = latch;
  r.latch_len = strlen(r.latch);
  return r;
}

TEST(kinds_reentrant_calls) {
  dlock_t *l = make(&dlock__kind_reentrant);
  dlock__call c;
  dlock__call_init(&c);
  dlock__ask ask = {7, DLOCK_WATCHDOG, 2, 1};
  ASSERT_EQ(l->kind->acquire_call(l, &ask, &c), 0);
  ASSERT(c.eval.script == &dlock__script_acquire);
  ASSERT_EQ(c.eval.nkeys, 2);
  ASSERT_EQ(c.eval.nargs, 3);
  ASSERT(arg_is(&c, 0, "L"));
  ASSERT(arg_is(&c, 1, "redisson_lock_token:{L}"));
  ASSERT(arg_is(&c, 2, "30000")); /* the watchdog's timeout */
  ASSERT(arg_is(&c, 3, "cid:7"));
  ASSERT(arg_is(&c, 4, "2"));
  dlock__call_free(&c);

  ask.lease_ms = 1500;
  ASSERT_EQ(l->kind->acquire_call(l, &ask, &c), 0);
  ASSERT(arg_is(&c, 2, "1500"));

  dlock__release r = release_of("1");
  ASSERT_EQ(l->kind->release_call(l, 7, &r, &c), 0);
  ASSERT(c.eval.script == &dlock__script_release);
  ASSERT_EQ(c.eval.nkeys, 3);
  ASSERT_EQ(c.eval.nargs, 5);
  ASSERT(arg_is(&c, 1, "redisson_lock__channel:{L}"));
  ASSERT(arg_is(&c, 2, "redisson_unlock_latch:{L}:cid:1"));
  ASSERT(arg_is(&c, 3, "0")); /* the unlock message */
  ASSERT(arg_is(&c, 5, "cid:7"));
  ASSERT(arg_is(&c, 7, "1"));

  ASSERT_EQ(l->kind->force_call(l, &c), 0);
  ASSERT(c.eval.script == &dlock__script_force_release);
  ASSERT(arg_is(&c, 2, "0"));
  ASSERT(arg_is(&c, 3, "exclusive"));

  ASSERT_EQ(l->kind->handed(l, DLOCK_WATCHDOG), DLOCK__HANDED_RECORD);
  ASSERT(l->kind->leave_call == NULL);
  /* The spin lock shares the scripts and takes no hand-overs. */
  ASSERT(dlock__kind_spin.acquire_call == l->kind->acquire_call);
  ASSERT(dlock__kind_spin.handed == NULL);
}

TEST(kinds_fair_calls_own_their_keys) {
  dlock_t *l = make(&dlock__kind_fair);
  dlock__call c;
  dlock__call_init(&c);
  dlock__ask ask = {7, 2000, 0, 0};
  ASSERT_EQ(l->kind->acquire_call(l, &ask, &c), 0);
  ASSERT(c.eval.script == &dlock__script_fair_acquire);
  ASSERT_EQ(c.eval.nkeys, 6);
  ASSERT_EQ(c.eval.nargs, 5);
  ASSERT(arg_is(&c, 1, "redisson_lock_queue:{L}"));
  ASSERT(arg_is(&c, 2, "redisson_lock_timeout:{L}"));
  ASSERT(arg_is(&c, 5, "dlock_lock_grant:{L}"));
  ASSERT(arg_is(&c, 6, "2000"));
  ASSERT(arg_is(&c, 8, "5000")); /* the wait allowance */
  ASSERT(arg_is(&c, 10, "0"));   /* a single try does not queue */
  ASSERT_NOT_NULL(c.owned[0]);
  dlock__call_free(&c);
  ASSERT_NULL(c.owned[0]);
  dlock__call_free(&c); /* twice is harmless */

  ASSERT_EQ(l->kind->leave_call(l, 7, 0, &c), 0);
  ASSERT(c.eval.script == &dlock__script_fair_leave);
  ASSERT_EQ(c.eval.nkeys, 5);
  ASSERT(arg_is(&c, 5, "cid:7"));
  ASSERT(arg_is(&c, 6, "0"));
  dlock__call_free(&c);

  dlock__release r = release_of("2");
  ASSERT_EQ(l->kind->release_call(l, 7, &r, &c), 0);
  ASSERT(c.eval.script == &dlock__script_fair_release);
  ASSERT_EQ(c.eval.nkeys, 7);
  ASSERT_EQ(c.eval.nargs, 6);
  ASSERT(arg_is(&c, 11, "2"));
  dlock__call_free(&c);

  /* A hand-over's lease is cut to the wait allowance: a longer lease is
   * taken up with an attempt of the waiter's own. */
  ASSERT_EQ(l->kind->handed(l, 5000), DLOCK__HANDED_RECORD);
  ASSERT_EQ(l->kind->handed(l, 5001), DLOCK__HANDED_RETAKE);
  ASSERT_EQ(l->kind->handed(l, DLOCK_WATCHDOG), DLOCK__HANDED_RETAKE);

  char *turn;
  size_t len;
  ASSERT_EQ(l->kind->wait_channel(l, 7, &turn, &len), 0);
  ASSERT_STR_EQ(turn, "redisson_lock__channel:{L}:cid:7");
  ASSERT_EQ(len, strlen(turn));
  dlock__free(turn);
}

TEST(kinds_read_write_calls) {
  dlock_t *l = make(&dlock__kind_read);
  dlock__call c;
  dlock__call_init(&c);
  dlock__ask ask = {7, 1000, 1, 1};
  ASSERT_EQ(l->kind->acquire_call(l, &ask, &c), 0);
  ASSERT(c.eval.script == &dlock__script_read_acquire);
  ASSERT_EQ(c.eval.nkeys, 3);
  ASSERT(arg_is(&c, 1, "{L}:cid:7:rwlock_timeout"));
  ASSERT(arg_is(&c, 4, "cid:7"));
  ASSERT(arg_is(&c, 5, "cid:7:write"));
  ASSERT(arg_is(&c, 6, "1"));
  dlock__call_free(&c);

  dlock__release r = release_of("1");
  ASSERT_EQ(l->kind->release_call(l, 7, &r, &c), 0);
  ASSERT(c.eval.script == &dlock__script_read_release);
  ASSERT(arg_is(&c, 3, "{L}")); /* "{name}:" without its colon */
  dlock__call_free(&c);

  ASSERT_EQ(l->kind->force_call(l, &c), 0);
  ASSERT(arg_is(&c, 2, "1")); /* every waiter may try */
  ASSERT(arg_is(&c, 3, "rw"));

  l = make(&dlock__kind_write);
  char field[DLOCK__FIELD_MAX];
  ASSERT_EQ(l->kind->field(l, 7, field), strlen("cid:7:write"));
  ASSERT_STR_EQ(field, "cid:7:write");
  ASSERT_EQ(l->kind->acquire_call(l, &ask, &c), 0);
  ASSERT(c.eval.script == &dlock__script_write_acquire);
  ASSERT(arg_is(&c, 3, "cid:7:write"));
  ASSERT_EQ(l->kind->release_call(l, 7, &r, &c), 0);
  ASSERT(c.eval.script == &dlock__script_write_release);
  ASSERT(arg_is(&c, 3, "1")); /* a writer's release lets every waiter try */
  ASSERT(l->kind->handed == NULL);
}

static redisReply pair(long long a, long long b, redisReply e[2],
                       redisReply *p[2]) {
  memset(e, 0, 2 * sizeof(*e));
  e[0].type = e[1].type = REDIS_REPLY_INTEGER;
  e[0].integer = a;
  e[1].integer = b;
  p[0] = &e[0];
  p[1] = &e[1];
  redisReply r;
  memset(&r, 0, sizeof(r));
  r.type = REDIS_REPLY_ARRAY;
  r.elements = 2;
  r.element = p;
  return r;
}

TEST(kinds_handover_call_and_reply) {
  dlock_t *l = make(&dlock__kind_reentrant);
  dlock__call c;
  dlock__call_init(&c);
  dlock__release r = release_of("1");
  ASSERT_EQ(dlock__handover_call(l, 7, &r, 9, DLOCK_WATCHDOG, 1, &c), 0);
  ASSERT(c.eval.script == &dlock__script_handover);
  ASSERT(arg_is(&c, 4, "cid:7"));
  ASSERT(arg_is(&c, 5, "cid:9"));
  ASSERT(arg_is(&c, 6, "30000"));
  ASSERT(arg_is(&c, 8, "1")); /* at the cap: released for everyone */

  redisReply e[2], *p[2], reply;
  int64_t left;
  uint64_t token;
  int outcome;
  reply = pair(0, 41, e, p);
  ASSERT_EQ(dlock__decode_handover(&reply, &left, &token, &outcome), 0);
  ASSERT_EQ(outcome, DLOCK__RESOLVE_HANDED);
  ASSERT_EQ(token, 41u);
  ASSERT_EQ(left, 0);
  reply = pair(-1, 0, e, p);
  ASSERT_EQ(dlock__decode_handover(&reply, &left, &token, &outcome), 0);
  ASSERT_EQ(outcome, DLOCK__RESOLVE_FAILED);
  ASSERT_EQ(left, -1);
  reply = pair(1, 0, e, p);
  ASSERT_EQ(dlock__decode_handover(&reply, &left, &token, &outcome), 0);
  ASSERT_EQ(outcome, DLOCK__RESOLVE_YIELDED);
  reply = pair(3, 0, e, p);
  ASSERT_EQ(dlock__decode_handover(&reply, &left, &token, &outcome), 0);
  ASSERT_EQ(outcome, DLOCK__RESOLVE_RELEASED);
  reply = pair(7, 0, e, p);
  ASSERT_DLOCK_ERR(dlock__decode_handover(&reply, &left, &token, &outcome),
                   DLOCK_EPROTO);
  reply = pair(0, -2, e, p);
  ASSERT_DLOCK_ERR(dlock__decode_handover(&reply, &left, &token, &outcome),
                   DLOCK_EPROTO);
}
