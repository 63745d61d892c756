/*
 * Unit tests of how replica sync counts the replicas of a Sentinel
 * deployment (dlock__sentinel_count_replicas, src/topo/sentinel.c), from
 * SENTINEL REPLICAS replies built by hand.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdlib.h>
#include <string.h>

#include "../src/topo/sentinel.h"
#include "dlock.h"
#include "harness/test.h"

static redisReply *str(const char *s) {
  redisReply *r = calloc(1, sizeof(*r));
  r->type = REDIS_REPLY_STRING;
  r->str = strdup(s);
  r->len = strlen(s);
  return r;
}

/* One replica's entry: a flat array of names and values. */
static redisReply *replica(const char *flags, const char *role) {
  redisReply *r = calloc(1, sizeof(*r));
  r->type = REDIS_REPLY_ARRAY;
  r->elements = 6;
  r->element = calloc(6, sizeof(*r->element));
  r->element[0] = str("name");
  r->element[1] = str("127.0.0.1:6380");
  r->element[2] = str("flags");
  r->element[3] = str(flags);
  r->element[4] = str("role-reported");
  r->element[5] = str(role);
  return r;
}

static redisReply *replicas(size_t n, redisReply **entries) {
  redisReply *r = calloc(1, sizeof(*r));
  r->type = REDIS_REPLY_ARRAY;
  r->elements = n;
  r->element = calloc(n + 1, sizeof(*r->element));
  memcpy(r->element, entries, n * sizeof(*entries));
  return r;
}

TEST(sentinel_counts_replicas_not_down) {
  redisReply *e[] = {
      replica("slave", "slave"), replica("s_down,slave,disconnected", "slave"),
      replica("o_down,slave", "slave"), replica("slave", "slave")};
  redisReply *r = replicas(4, e);
  ASSERT_EQ(dlock__sentinel_count_replicas(r), 2);
  freeReplyObject(r);
}

/*
 * Right after +switch-master the Sentinel lists the new master's replicas
 * afresh, "disconnected" until it reaches them. They count: a client still
 * on the old master (its switch not done yet) would otherwise wait for no
 * replica and write there unsynced, and the old master's writes are lost
 * when it is demoted (the chaos scenario sentinel-failover saw tokens go
 * back by a few hundred when they did not).
 */
TEST(sentinel_counts_a_replica_it_has_no_link_to_yet) {
  redisReply *e[] = {replica("slave,disconnected", "slave"),
                     replica("slave,disconnected", "slave")};
  redisReply *r = replicas(2, e);
  ASSERT_EQ(dlock__sentinel_count_replicas(r), 2);
  freeReplyObject(r);
}

/* After +switch-master the old master is listed as a replica of the new
 * one before it has been told: it reports "master" and is not counted. */
TEST(sentinel_does_not_count_a_demoted_master_not_yet_told) {
  redisReply *e[] = {replica("slave", "master"), replica("slave", "slave")};
  redisReply *r = replicas(2, e);
  ASSERT_EQ(dlock__sentinel_count_replicas(r), 1);
  freeReplyObject(r);
}

/*
 * During a failover, the Sentinel leading it flags the replica it promotes
 * "promoted", which soon reports "master". It still counts: the other
 * replica, which alone still follows the old master, will follow the new
 * one and lose whatever the old master wrote meanwhile, so a WAIT that it
 * alone acknowledges must not read as synced (the chaos scenario
 * sentinel-failover saw fencing tokens go back when it did).
 */
TEST(sentinel_counts_the_replica_being_promoted) {
  redisReply *e[] = {replica("slave,promoted", "master"),
                     replica("slave", "slave")};
  redisReply *r = replicas(2, e);
  ASSERT_EQ(dlock__sentinel_count_replicas(r), 2);
  freeReplyObject(r);
  redisReply *e2[] = {replica("slave,promoted,disconnected", "slave"),
                      replica("slave", "slave")};
  r = replicas(2, e2);
  ASSERT_EQ(dlock__sentinel_count_replicas(r), 2);
  freeReplyObject(r);
}

/* One replica's entry with the master it was last seen replicating from
 * ("?" when the Sentinel never saw it as a replica). */
static redisReply *replica_of(const char *flags, const char *role,
                              const char *master_host) {
  redisReply *r = replica(flags, role);
  r->element = realloc(r->element, 8 * sizeof(*r->element));
  r->element[6] = str("master-host");
  r->element[7] = str(master_host);
  r->elements = 8;
  return r;
}

/*
 * A Sentinel that does not lead the failover sees the replica being
 * promoted say "master" before it hears of the new master: that replica was
 * seen replicating (master-host known), so it still counts, and a write on
 * the old master that the other replica alone acknowledges is not synced.
 * The old master listed under the new one, never seen as a replica since
 * the switch (master-host "?"), still does not count.
 */
TEST(sentinel_counts_a_replica_turned_master_under_its_master) {
  redisReply *e[] = {replica_of("slave", "master", "127.0.0.1"),
                     replica_of("slave", "slave", "127.0.0.1")};
  redisReply *r = replicas(2, e);
  ASSERT_EQ(dlock__sentinel_count_replicas(r), 2);
  freeReplyObject(r);
  redisReply *e2[] = {replica_of("slave", "master", "?"),
                      replica_of("slave", "slave", "127.0.0.1")};
  r = replicas(2, e2);
  ASSERT_EQ(dlock__sentinel_count_replicas(r), 1);
  freeReplyObject(r);
}

TEST(sentinel_count_of_a_bad_reply_is_zero) {
  redisReply *r = str("not an array");
  ASSERT_EQ(dlock__sentinel_count_replicas(r), 0);
  freeReplyObject(r);
}
