/*
 * Unit tests of the key slots (src/proto/slot.c) against the values the
 * Redis Cluster specification gives and CLUSTER KEYSLOT answers, and of
 * the hash-tag rules; and of the redis-cluster:// URL parser.
 */
#include "../src/proto/slot.h"
#include "../src/proto/url.h"
#include "dlock.h"
#include "harness/test.h"

TEST(slot_crc16_check_value) {
  /* The check value of CRC16/XMODEM, quoted by the specification. */
  ASSERT_EQ(dlock__crc16("123456789", 9), 0x31C3);
  ASSERT_EQ(dlock__crc16("", 0), 0);
}

static int slot(const char *k) { return dlock__key_slot(k, strlen(k)); }

TEST(slot_known_keys) {
  /* CLUSTER KEYSLOT of Redis 7.0. */
  ASSERT_EQ(slot("foo"), 12182);
  ASSERT_EQ(slot("bar"), 5061);
  ASSERT_EQ(slot("hello"), 866);
  ASSERT_EQ(slot("somekey"), 11058);
}

TEST(slot_hash_tags) {
  /* Only what is between the first '{' and the first '}' after it. */
  ASSERT_EQ(slot("{user1000}.following"), slot("user1000"));
  ASSERT_EQ(slot("{user1000}.followers"), slot("user1000"));
  ASSERT_EQ(slot("foo{bar}{zap}"), slot("bar"));
  ASSERT_EQ(slot("foo{{bar}}zap"), slot("{bar"));
  /* An empty tag hashes the whole key. */
  ASSERT_EQ(slot("foo{}{bar}"), dlock__crc16("foo{}{bar}", 10) & 16383);
  ASSERT_EQ(slot("{}foo"), dlock__crc16("{}foo", 5) & 16383);
  /* No closing brace: the whole key. */
  ASSERT_EQ(slot("foo{bar"), dlock__crc16("foo{bar", 7) & 16383);
  /* Redisson's keys of one lock share the lock's slot. */
  ASSERT_EQ(slot("redisson_lock__channel:{orders}"), slot("orders"));
  ASSERT_EQ(slot("redisson_lock_token:{orders}"), slot("orders"));
  ASSERT_EQ(slot("redisson_unlock_latch:{orders}:42"), slot("orders"));
}

TEST(url_cluster_seeds) {
  dlock__cluster_url u;
  ASSERT_EQ(
      dlock__url_parse_cluster(
          "redis-cluster://app:s%40cret@10.0.0.1:7000,10.0.0.2,[::1]:7002", &u),
      0);
  ASSERT_EQ(u.n, 3);
  ASSERT_STR_EQ(u.seeds[0].host, "10.0.0.1");
  ASSERT_EQ(u.seeds[0].port, 7000);
  ASSERT_STR_EQ(u.seeds[1].host, "10.0.0.2");
  ASSERT_EQ(u.seeds[1].port, 6379);
  ASSERT_STR_EQ(u.seeds[2].host, "::1");
  ASSERT_EQ(u.seeds[2].port, 7002);
  ASSERT_STR_EQ(u.data.user, "app");
  ASSERT_STR_EQ(u.data.pass, "s@cret");
  ASSERT_EQ(u.data.tls, 0);
  dlock__cluster_url_free(&u);
  ASSERT_EQ(dlock__url_parse_cluster("rediss-cluster://h:1/", &u), 0);
  ASSERT_EQ(u.data.tls, 1);
  ASSERT_EQ(u.seeds[0].tls, 1);
  ASSERT_EQ(u.sharded_off, 0);
  dlock__cluster_url_free(&u);
  /* How unlock messages travel: sharded where the cluster has it (auto,
   * the default) or classic whatever it has (off). */
  ASSERT_EQ(dlock__url_parse_cluster(
                "redis-cluster://:pw@h:1,g:2?sharded_pubsub=off", &u),
            0);
  ASSERT_EQ(u.n, 2);
  ASSERT_STR_EQ(u.seeds[1].host, "g");
  ASSERT_EQ(u.seeds[1].port, 2);
  ASSERT_STR_EQ(u.data.pass, "pw");
  ASSERT_EQ(u.sharded_off, 1);
  dlock__cluster_url_free(&u);
  ASSERT_EQ(
      dlock__url_parse_cluster("redis-cluster://h:1/?sharded_pubsub=auto", &u),
      0);
  ASSERT_EQ(u.n, 1);
  ASSERT_EQ(u.seeds[0].port, 1);
  ASSERT_EQ(u.sharded_off, 0);
  dlock__cluster_url_free(&u);
}

TEST(url_cluster_refused) {
  dlock__cluster_url u;
  const char *bad[] = {"redis-cluster://",
                       "redis-cluster://h:1/2",
                       "redis-cluster://h:1?db=2",
                       "redis-cluster://h:1,,h:2",
                       "redis-cluster://h:99999",
                       "redis-cluster://user@h:1",
                       "redis-cluster://h:1?sharded_pubsub=on",
                       "redis-cluster://h:1?sharded_pubsub=",
                       "redis-cluster://h:1?sharded_pubsub=off&db=0",
                       "redis-cluster://h:1/2?sharded_pubsub=off"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
    ASSERT_EQ(dlock__url_parse_cluster(bad[i], &u), DLOCK_EINVAL);
    ASSERT_EQ(u.n, 0);
  }
  /* A cluster URL is not one server's. */
  dlock__endpoint e;
  ASSERT_EQ(dlock__url_parse("redis-cluster://h:1", &e), DLOCK_EINVAL);
  /* The password never shows in the detail. */
  ASSERT_EQ(dlock__url_parse_cluster("redis-cluster://:hunter2@h:99999", &u),
            DLOCK_EINVAL);
  ASSERT(strstr(dlock_last_error(), "hunter2") == NULL);
}
