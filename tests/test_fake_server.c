/*
 * The misbehaving servers of the harness (fake_server.h, tcp_proxy.h)
 * checked with a raw hiredis client, so that the tests built on them can
 * trust what they are told: the fake server answers like Redis, records
 * what it got, and delays, trickles, stays silent or hangs up when asked;
 * the proxy forwards to a real redis-server and trickles or holds.
 */
#include <hiredis/hiredis.h>

#include "harness/fake_server.h"
#include "harness/tcp_proxy.h"
#include "lock_util.h"

static redisContext *raw(int port, int64_t timeout_ms) {
  struct timeval tv = {(time_t)(timeout_ms / 1000),
                       (suseconds_t)(timeout_ms % 1000) * 1000};
  redisContext *r = redisConnectWithTimeout("127.0.0.1", port, tv);
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->err, 0);
  redisSetTimeout(r, tv);
  return r;
}

TEST(fake_plain_answers_and_log) {
  fs_server_t *fs = fs_start();
  redisContext *r = raw(fs_port(fs), 2000);
  redisReply *rep = redisCommand(r, "PING");
  ASSERT_NOT_NULL(rep);
  ASSERT_STR_EQ(rep->str, "PONG");
  freeReplyObject(rep);
  rep = redisCommand(r, "ECHO %s", "hello");
  ASSERT_NOT_NULL(rep);
  ASSERT_EQ(rep->type, REDIS_REPLY_STRING);
  ASSERT_STR_EQ(rep->str, "hello");
  freeReplyObject(rep);
  rep = redisCommand(r, "SUBSCRIBE a bb");
  ASSERT_NOT_NULL(rep);
  ASSERT_EQ(rep->type, REDIS_REPLY_ARRAY);
  ASSERT_STR_EQ(rep->element[1]->str, "a");
  freeReplyObject(rep);
  ASSERT_EQ(redisGetReply(r, (void **)&rep), REDIS_OK);
  ASSERT_STR_EQ(rep->element[1]->str, "bb");
  ASSERT_EQ(rep->element[2]->integer, 2);
  freeReplyObject(rep);
  fs_password(fs, "secret");
  rep = redisCommand(r, "AUTH wrong");
  ASSERT_EQ(rep->type, REDIS_REPLY_ERROR);
  freeReplyObject(rep);
  rep = redisCommand(r, "AUTH secret");
  ASSERT_EQ(rep->type, REDIS_REPLY_STATUS);
  freeReplyObject(rep);
  ASSERT_EQ(fs_count(fs, "PING"), 1);
  ASSERT_EQ(fs_count(fs, "AUTH"), 2);
  ASSERT_EQ(fs_count(fs, NULL), 5);
  ASSERT_STR_EQ(fs_command(fs, 1), "ECHO hello");
  ASSERT_NULL(fs_command(fs, 5));
  ASSERT_EQ(fs_accepted(fs), 1);
  ASSERT_EQ(fs_open_connections(fs), 1);
  redisFree(r);
  fs_free(fs);
}

TEST(fake_rules_delay_trickle_silent_close) {
  fs_server_t *fs = fs_start();
  redisContext *r = raw(fs_port(fs), 3000);
  /* A canned reply once, after a delay; then the plain answer again. */
  fs_set(fs, "echo",
         &(fs_action_t){.reply = "$2\r\nhi\r\n", .delay_ms = 200, .times = 1});
  int64_t t0 = lu_now_ms();
  redisReply *rep = redisCommand(r, "ECHO x");
  ASSERT_NOT_NULL(rep);
  ASSERT_STR_EQ(rep->str, "hi");
  ASSERT_GE(lu_now_ms() - t0, 190);
  freeReplyObject(rep);
  rep = redisCommand(r, "ECHO x");
  ASSERT_STR_EQ(rep->str, "x");
  freeReplyObject(rep);

  /* "+PONG\r\n" one byte per 50 ms: at least 6 pauses. */
  fs_set(fs, NULL, &(fs_action_t){.how = FS_TRICKLE, .every_ms = 50});
  t0 = lu_now_ms();
  rep = redisCommand(r, "PING");
  ASSERT_NOT_NULL(rep);
  ASSERT_STR_EQ(rep->str, "PONG");
  ASSERT_GE(lu_now_ms() - t0, 290);
  freeReplyObject(rep);

  /* Silent: the command arrives, the answer never does. */
  fs_clear(fs);
  fs_set(fs, "PING", &(fs_action_t){.how = FS_SILENT});
  redisSetTimeout(r, (struct timeval){0, 300000});
  rep = redisCommand(r, "PING");
  ASSERT_NULL(rep);
  ASSERT_EQ(fs_count(fs, "PING"), 2);
  redisFree(r);

  /* Closed half-way through the reply. */
  fs_clear(fs);
  fs_set(fs, "ECHO", &(fs_action_t){.how = FS_CLOSE_MID});
  r = raw(fs_port(fs), 2000);
  rep = redisCommand(r, "ECHO %s", "a longer argument");
  ASSERT_NULL(rep);
  ASSERT_EQ(r->err, REDIS_ERR_EOF);
  redisFree(r);

  /* Bytes nobody asked for come after the queued replies. */
  fs_clear(fs);
  r = raw(fs_port(fs), 2000);
  rep = redisCommand(r, "PING");
  freeReplyObject(rep);
  fs_send_all(fs, "+SURPRISE\r\n");
  ASSERT_EQ(redisGetReply(r, (void **)&rep), REDIS_OK);
  ASSERT_STR_EQ(rep->str, "SURPRISE");
  freeReplyObject(rep);
  fs_close_all(fs);
  ASSERT_EQ(fs_open_connections(fs), 0);
  ASSERT_NE(redisGetReply(r, (void **)&rep), REDIS_OK);
  redisFree(r);
  fs_free(fs);
}

TEST(proxy_forwards_trickles_and_holds) {
  rp_server_t *s = lu_server(0);
  tp_proxy_t *px = tp_start(rp_port(s));
  redisContext *r = raw(tp_port(px), 3000);
  redisReply *rep = redisCommand(r, "SET k v");
  ASSERT_NOT_NULL(rep);
  freeReplyObject(rep);
  rep = redisCommand(r, "GET k");
  ASSERT_STR_EQ(rep->str, "v");
  freeReplyObject(rep);

  /* The 20-byte command and the 7-byte reply go one byte per 20 ms. */
  tp_trickle(px, 20);
  int64_t t0 = lu_now_ms();
  rep = redisCommand(r, "GET k");
  ASSERT_NOT_NULL(rep);
  ASSERT_STR_EQ(rep->str, "v");
  ASSERT_GE(lu_now_ms() - t0, 20 * (19 + 6) - 10);
  freeReplyObject(rep);

  tp_trickle(px, 0);
  tp_hold(px, 1);
  redisSetTimeout(r, (struct timeval){0, 300000});
  rep = redisCommand(r, "GET k");
  ASSERT_NULL(rep);
  redisFree(r);
  tp_hold(px, 0);

  r = raw(tp_port(px), 2000);
  rep = redisCommand(r, "GET k");
  ASSERT_STR_EQ(rep->str, "v");
  freeReplyObject(rep);
  tp_close_all(px);
  ASSERT_NULL(redisCommand(r, "GET k"));
  redisFree(r);
  ASSERT_EQ(tp_accepted(px), 2);
  tp_free(px);
  rp_free(s);
}
