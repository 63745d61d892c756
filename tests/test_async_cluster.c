/*
 * An async client on a Redis Cluster of 3 masters and 3 replicas
 * (harness/cluster_group.h), driven by a plain epoll loop (loop_util.h)
 * that watches a descriptor per node: locks on names spread over every
 * master, each lock's keys on the master of its slot and all in flight at
 * once; a plain command routed by its key; a waiter woken by the unlock
 * message on sharded pub/sub (subscribed on the node of its channel's
 * slot, the holder's lease far longer than the test); a slot migrated
 * while its lock is held and waited on (ASK, TRYAGAIN, then MOVED,
 * followed by the loop); CLUSTER FAILOVER, and a master killed, under a
 * holder renewed by the loop's watchdog and a waiter; and a cluster
 * without sharded pub/sub, where waiters listen with SUBSCRIBE.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "cluster_util.h"
#include "loop_util.h"

static void cluster_options(dlock_options_t *o, cg_group_t *g,
                            int64_t watchdog_ms) {
  dlock_options_init(o);
  o->url = cg_url(g);
  o->connect_timeout_ms = 2000;
  o->command_timeout_ms = 5000;
  o->watchdog_timeout_ms = watchdog_ms;
}

/* An async client on the cluster, attached to a fresh loop 't'. */
static dlock_client_t *async_cluster(cg_group_t *g, tl_loop *t,
                                     int64_t watchdog_ms) {
  dlock_options_t o;
  cluster_options(&o, g, watchdog_ms);
  dlock_client_t *c = tl_client_opts(&o);
  tl_init(t, c);
  return c;
}

static dlock_client_t *blocking_cluster(cg_group_t *g) {
  dlock_options_t o;
  cluster_options(&o, g, 30000);
  return lu_client_opts(&o);
}

/* The subscribers node 'i' has on sharded channel 'chan'. */
static int64_t shardnumsub(cg_group_t *g, int i, const char *chan) {
  redisReply *r = rp_cmd(cg_node(g, i), "PUBSUB SHARDNUMSUB %s", chan);
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->type, REDIS_REPLY_ARRAY);
  int64_t n = r->element[1]->integer;
  freeReplyObject(r);
  return n;
}

/* A plain command's end: its status, and its integer reply (else -1). */
typedef struct cmd_done {
  int calls, status;
  int64_t integer;
} cmd_done;

static void reply_done(dlock_client_t *c, int status, dlock_reply_t *reply,
                       void *data) {
  cmd_done *d = data;
  (void)c;
  d->integer =
      reply != NULL && reply->type == DLOCK_REPLY_INTEGER ? reply->integer : -1;
  dlock_reply_free(reply);
  d->calls++;
  d->status = status;
}

TEST(async_cluster_routes_each_key_and_wakes_by_sharded_message) {
  cg_group_t *g = cluster();
  tl_loop t;
  dlock_client_t *ac = async_cluster(g, &t, 30000);
  dlock_client_t *bc = blocking_cluster(g);
  char names[6][32];
  int owner[6];
  spread_names(g, "acl", 2, names, owner);

  /* Six locks on three masters, all in flight at once. */
  dlock_t *l[6];
  tl_done d[6] = {{0}};
  uint64_t me = dlock_owner_new();
  for (int i = 0; i < 6; i++) {
    l[i] = lu_get(ac, names[i]);
    ASSERT_DLOCK_OK(dlock_lock_async(l[i], me, 60000, tl_done_cb, &d[i]));
  }
  for (int i = 0; i < 6; i++) {
    tl_run_until(&t, &d[i].calls, 30000);
    ASSERT_DLOCK_OK(d[i].status);
    ASSERT_GT(dlock_token_as(l[i], me), 0);
  }
  /* Each on its own slot's master (which would answer MOVED for a key
   * it does not serve). */
  for (int i = 0; i < 6; i++)
    ASSERT_EQ(lu_exists(cg_node(g, owner[i]), names[i]), 1);
  /* The blocking client finds them taken. */
  dlock_t *b0 = lu_get(bc, names[0]);
  ASSERT_EQ(dlock_trylock(b0, 0, 1000), DLOCK_ETIMEDOUT);
  for (int i = 0; i < 6; i++) {
    tl_done u = {0};
    ASSERT_DLOCK_OK(dlock_unlock_async(l[i], me, tl_done_cb, &u));
    tl_run_until(&t, &u.calls, 30000);
    ASSERT_DLOCK_OK(u.status);
    ASSERT_EQ(lu_exists(cg_node(g, owner[i]), names[i]), 0);
  }

  /* A plain command goes to the master of its key's slot. */
  const char *set[] = {"SET", names[4], "v"};
  cmd_done sd = {0};
  ASSERT_DLOCK_OK(
      dlock_client_command_async(ac, 3, set, NULL, reply_done, &sd));
  tl_run_until(&t, &sd.calls, 30000);
  ASSERT_DLOCK_OK(sd.status);
  ASSERT_EQ(lu_exists(cg_node(g, owner[4]), names[4]), 1);

  /* A waiter woken by the unlock message on sharded pub/sub: the holder's
   * lease (10 minutes) is far longer than the wait allowed. Its channel
   * is subscribed on the master of its slot. */
  int k = 2; /* a name on another master than the first */
  while (k < 6 && owner[k] == owner[0])
    k++;
  ASSERT_LT(k, 6);
  dlock_t *bk = lu_get(bc, names[k]);
  ASSERT_DLOCK_OK(dlock_lock(bk, 600000));
  uint64_t token = dlock_token(bk);
  tl_done w = {0};
  ASSERT_DLOCK_OK(dlock_lock_async(l[k], me, 60000, tl_done_cb, &w));
  char chan[128];
  snprintf(chan, sizeof(chan), "redisson_lock__channel:{%s}", names[k]);
  int64_t end = lu_now_ms() + 30000;
  while (shardnumsub(g, owner[k], chan) < 1) {
    ASSERT_LT(lu_now_ms(), end);
    tl_turn(&t, 20);
  }
  tl_run_for(&t, 200);
  ASSERT_EQ(w.calls, 0);
  ASSERT_DLOCK_OK(dlock_unlock(bk));
  tl_run_until(&t, &w.calls, 30000);
  ASSERT_DLOCK_OK(w.status);
  ASSERT_GT(dlock_token_as(l[k], me), token);
  tl_done u = {0};
  ASSERT_DLOCK_OK(dlock_unlock_async(l[k], me, tl_done_cb, &u));
  tl_run_until(&t, &u.calls, 30000);
  ASSERT_DLOCK_OK(u.status);

  for (int i = 0; i < 6; i++)
    dlock_free(l[i]);
  dlock_free(b0);
  dlock_free(bk);
  dlock_client_close(ac);
  ASSERT_EQ(t.sockets, 0);
  dlock_client_close(bc);
  tl_close(&t);
  cg_free(g);
}

/* The cluster's slot migration, run beside the loop. */
typedef struct mover {
  cg_group_t *g;
  int slot, from, to;
  atomic_int step; /* 1: keys moved (ASK from the old master); 2: done */
  atomic_int go_end;
  int rc;
} mover;

static void *migrate(void *p) {
  mover *m = p;
  m->rc = cg_migrate_begin(m->g, m->slot, m->from, m->to);
  if (m->rc == 0)
    m->rc = cg_migrate_keys(m->g, m->slot, m->from, m->to);
  atomic_store(&m->step, 1);
  while (m->rc == 0 && !atomic_load(&m->go_end))
    lu_sleep_ms(10);
  if (m->rc == 0)
    m->rc = cg_migrate_end(m->g, m->slot, m->to);
  atomic_store(&m->step, 2);
  return NULL;
}

static void turn_until_step(tl_loop *t, mover *m, int step) {
  int64_t end = lu_now_ms() + 60000;
  while (atomic_load(&m->step) < step) {
    ASSERT_LT(lu_now_ms(), end);
    tl_turn(t, 20);
  }
}

TEST(async_cluster_follows_a_slot_migration) {
  cg_group_t *g = cluster();
  tl_loop t;
  dlock_client_t *ac = async_cluster(g, &t, 30000);
  char names[3][32];
  int owner[3];
  spread_names(g, "amig", 1, names, owner);
  const char *name = names[0];
  mover m = {g, dlock__key_slot(name, strlen(name)), owner[0], owner[1], 0, 0,
             0};
  dlock_t *l = lu_get(ac, name);
  uint64_t holder = dlock_owner_new(), waiter = dlock_owner_new();
  tl_done h = {0}, w = {0};
  ASSERT_DLOCK_OK(dlock_lock_async(l, holder, 60000, tl_done_cb, &h));
  tl_run_until(&t, &h.calls, 30000);
  ASSERT_DLOCK_OK(h.status);
  uint64_t token = dlock_token_as(l, holder);
  ASSERT_DLOCK_OK(dlock_lock_async(l, waiter, 60000, tl_done_cb, &w));
  tl_run_for(&t, 300);
  ASSERT_EQ(w.calls, 0);

  pthread_t mt;
  ASSERT_EQ(pthread_create(&mt, NULL, migrate, &m), 0);
  turn_until_step(&t, &m, 1);
  ASSERT_EQ(m.rc, 0);
  /* Mid-migration the key is on the new master only: a read of it goes
   * there through the old master's ASK. */
  redisReply *r =
      rp_cmd(cg_node(g, m.to), "CLUSTER COUNTKEYSINSLOT %d", m.slot);
  ASSERT_GT(lu_reply_int(r), 0);
  r = rp_cmd(cg_node(g, m.from), "CLUSTER COUNTKEYSINSLOT %d", m.slot);
  ASSERT_EQ(lu_reply_int(r), 0);
  const char *pttl[] = {"PTTL", name};
  cmd_done q = {0};
  ASSERT_DLOCK_OK(
      dlock_client_command_async(ac, 2, pttl, NULL, reply_done, &q));
  tl_run_until(&t, &q.calls, 30000);
  ASSERT_DLOCK_OK(q.status);
  ASSERT_GT(q.integer, 0); /* the lock's remaining lease, found */
  ASSERT_EQ(w.calls, 0);
  /* The unlock meets TRYAGAIN (a script on keys of a slot in migration)
   * until the migration ends, then MOVED; the loop keeps turning. */
  tl_done u = {0};
  ASSERT_DLOCK_OK(dlock_unlock_async(l, holder, tl_done_cb, &u));
  tl_run_for(&t, 300);
  atomic_store(&m.go_end, 1);
  turn_until_step(&t, &m, 2);
  pthread_join(mt, NULL);
  ASSERT_EQ(m.rc, 0);
  int64_t ended = lu_now_ms();
  printf("migration ended; unlock answered: %d\n", u.calls);
  tl_run_until(&t, &u.calls, 30000);
  ASSERT_DLOCK_OK(u.status);
  printf("unlock done %" PRId64 " ms after the migration ended\n",
         lu_now_ms() - ended);
  /* The waiter gets it on the new master, with a later token. */
  tl_run_until(&t, &w.calls, 45000);
  ASSERT_DLOCK_OK(w.status);
  printf("waiter got it %" PRId64 " ms after the migration ended\n",
         lu_now_ms() - ended);
  ASSERT_GT(dlock_token_as(l, waiter), token);
  ASSERT_EQ(lu_exists(cg_node(g, m.to), name), 1);
  tl_done u2 = {0};
  ASSERT_DLOCK_OK(dlock_unlock_async(l, waiter, tl_done_cb, &u2));
  tl_run_until(&t, &u2.calls, 30000);
  ASSERT_DLOCK_OK(u2.status);
  ASSERT_EQ(lu_exists(cg_node(g, m.to), name), 0);
  dlock_free(l);
  dlock_client_close(ac);
  tl_close(&t);
  cg_free(g);
}

/* 'holder' takes 'l' with the watchdog, and 'waiter' waits for it ('w'):
 * the holder's token. */
static uint64_t hold_and_wait(tl_loop *t, dlock_t *l, uint64_t holder,
                              uint64_t waiter, tl_done *w) {
  tl_done h = {0};
  ASSERT_DLOCK_OK(dlock_lock_async(l, holder, DLOCK_WATCHDOG, tl_done_cb, &h));
  tl_run_until(t, &h.calls, 30000);
  ASSERT_DLOCK_OK(h.status);
  ASSERT_DLOCK_OK(dlock_lock_async(l, waiter, 60000, tl_done_cb, w));
  tl_run_for(t, 300);
  ASSERT_EQ(w->calls, 0);
  return dlock_token_as(l, holder);
}

/* After the master changed: the holder's unlock reaches the new master,
 * 'node', and the waiter gets the lock there with a later token than
 * 'token', and gives it back ('t0': when the change began). */
static void hand_over(cg_group_t *g, tl_loop *t, dlock_t *l, uint64_t holder,
                      uint64_t waiter, tl_done *w, uint64_t token, int node,
                      int64_t t0) {
  size_t len = 0;
  const char *name = dlock_name(l, &len);
  ASSERT_EQ(w->calls, 0);
  tl_done u = {0}, u2 = {0};
  ASSERT_DLOCK_OK(dlock_unlock_async(l, holder, tl_done_cb, &u));
  tl_run_until(t, &u.calls, 30000);
  ASSERT_DLOCK_OK(u.status);
  printf("unlock done %" PRId64 " ms after the change began\n", u.at_ms - t0);
  tl_run_until(t, &w->calls, 45000);
  ASSERT_DLOCK_OK(w->status);
  printf("waiter got it %" PRId64 " ms after the unlock\n", w->at_ms - u.at_ms);
  ASSERT_GT(dlock_token_as(l, waiter), token);
  ASSERT_EQ(lu_exists_n(cg_node(g, node), name, len), 1);
  ASSERT_DLOCK_OK(dlock_unlock_async(l, waiter, tl_done_cb, &u2));
  tl_run_until(t, &u2.calls, 30000);
  ASSERT_DLOCK_OK(u2.status);
  ASSERT_EQ(lu_exists_n(cg_node(g, node), name, len), 0);
}

/* CLUSTER FAILOVER, run beside the loop. */
typedef struct failer {
  cg_group_t *g;
  int replica;
  atomic_int done;
  int rc;
} failer;

static void *fail_over(void *p) {
  failer *f = p;
  f->rc = cg_failover(f->g, f->replica, 30000);
  atomic_store(&f->done, 1);
  return NULL;
}

TEST(async_cluster_failover_under_a_holder_and_a_waiter) {
  cg_group_t *g = cluster();
  tl_loop t;
  /* Leases of 10 s renewed every 3.3 s by the loop: longer than a manual
   * failover takes. */
  dlock_client_t *ac = async_cluster(g, &t, 10000);
  char names[3][32];
  int owner[3];
  spread_names(g, "afo", 1, names, owner);
  const char *name = names[0];
  failer f = {g, cg_replica_of(g, owner[0]), 0, 0};
  ASSERT_GE(f.replica, 0);
  dlock_t *l = lu_get(ac, name);
  uint64_t holder = dlock_owner_new(), waiter = dlock_owner_new();
  tl_done w = {0};
  uint64_t token = hold_and_wait(&t, l, holder, waiter, &w);

  pthread_t ft;
  int64_t t0 = lu_now_ms();
  ASSERT_EQ(pthread_create(&ft, NULL, fail_over, &f), 0);
  int64_t end = lu_now_ms() + 60000;
  while (!atomic_load(&f.done)) {
    ASSERT_LT(lu_now_ms(), end);
    tl_turn(&t, 20);
  }
  pthread_join(ft, NULL);
  ASSERT_EQ(f.rc, 0);
  printf("failover done in %" PRId64 " ms\n", lu_now_ms() - t0);
  ASSERT_EQ(
      cg_master_of_slot(g, f.replica, dlock__key_slot(name, strlen(name))),
      f.replica);
  /* Two renewal periods later the lock is on the new master with a lease
   * renewed there (the watchdog's renewal followed the MOVED): more than
   * 10 - 3.3 s left, where without a renewal since the failover less than
   * 10 - 7 s would be. */
  tl_run_for(&t, 7000);
  ASSERT_EQ(lu_exists(cg_node(g, f.replica), name), 1);
  ASSERT_GT(lu_pttl(cg_node(g, f.replica), name), 4500);
  hand_over(g, &t, l, holder, waiter, &w, token, f.replica, t0);
  dlock_free(l);
  dlock_client_close(ac);
  tl_close(&t);
  cg_free(g);
}

/* Writes into 'name' the first of 'prefix'0, 'prefix'1, ... whose slot
 * node 0 serves; returns the slot. */
static int name_on_node0(cg_group_t *g, const char *prefix, char *name,
                         size_t size) {
  for (int i = 0;; i++) {
    snprintf(name, size, "%s%d", prefix, i);
    int slot = dlock__key_slot(name, strlen(name));
    if (cg_master_of_slot(g, 0, slot) == 0)
      return slot;
  }
}

TEST(async_cluster_master_killed_under_a_holder_and_a_waiter) {
  cg_group_t *g = cluster();
  tl_loop t;
  dlock_client_t *ac = async_cluster(g, &t, 20000);
  /* A name on node 0, the first seed, whose connection every node-less
   * request would use. */
  char name[32];
  int slot = name_on_node0(g, "akill", name, sizeof(name));
  dlock_t *l = lu_get(ac, name);
  uint64_t holder = dlock_owner_new(), waiter = dlock_owner_new();
  tl_done w = {0};
  uint64_t token = hold_and_wait(&t, l, holder, waiter, &w);

  int64_t t0 = lu_now_ms();
  ASSERT_EQ(rp_kill(cg_node(g, 0)), 0);
  int promoted = -1;
  while (promoted < 0) {
    ASSERT_LT(lu_now_ms() - t0, 30000);
    tl_turn(&t, 100);
    int m = cg_master_of_slot(g, 1, slot);
    if (m > 0 && cg_wait_agree(g, slot, 1000) == 0)
      promoted = m;
  }
  printf("replica %d promoted %" PRId64 " ms after the kill\n", promoted,
         lu_now_ms() - t0);
  ASSERT_EQ(lu_exists(cg_node(g, promoted), name), 1);
  hand_over(g, &t, l, holder, waiter, &w, token, promoted, t0);
  dlock_free(l);
  dlock_client_close(ac);
  tl_close(&t);
  cg_free(g);
}

/*
 * Requests made while the master of their slot is dead wait for it to
 * reconnect, or for the map to name its replica: those made a few ms
 * apart must reach the new master in the order they were made, as on a
 * live link (an owner's next attempt must not overtake the undo of its
 * last one, say). Batches of them go every 100 ms from the kill until one
 * gets through whole; in each batch, those that ran (the others failed
 * to connect, and did not) are in its list in the order made.
 */
TEST(async_cluster_requests_held_for_a_dead_master_keep_their_order) {
  cg_group_t *g = cluster();
  tl_loop t;
  dlock_options_t o;
  cluster_options(&o, g, 30000);
  o.command_timeout_ms = 20000; /* longer than the failover */
  dlock_client_t *ac = tl_client_opts(&o);
  tl_init(&t, ac);
  char tag[32];
  int slot = name_on_node0(g, "aord", tag, sizeof(tag));
  /* The link to the master is up and the map read. */
  const char *get[] = {"GET", tag};
  cmd_done first = {0};
  ASSERT_DLOCK_OK(
      dlock_client_command_async(ac, 2, get, NULL, reply_done, &first));
  tl_run_until(&t, &first.calls, 30000);
  ASSERT_DLOCK_OK(first.status);

  enum { N = 5, BATCHES = 400 };
  static cmd_done d[BATCHES][N];
  static char key[BATCHES][48];
  const char *value[N] = {"0", "1", "2", "3", "4"};
  memset(d, 0, sizeof(d));
  int replica = cg_replica_of(g, 0);
  ASSERT_GT(replica, 0);
  int64_t t0 = lu_now_ms();
  ASSERT_EQ(rp_kill(cg_node(g, 0)), 0);
  int batches = 0, whole = 0;
  while (!whole) {
    ASSERT_LT(batches, BATCHES);
    int b = batches++;
    snprintf(key[b], sizeof(key[b]), "{%s}:%d", tag, b);
    for (int i = 0; i < N; i++) {
      const char *push[] = {"RPUSH", key[b], value[i]};
      int rc =
          dlock_client_command_async(ac, 3, push, NULL, reply_done, &d[b][i]);
      if (rc != 0) {
        /* Refused at once, sent nowhere (a reconnect's back-off). */
        ASSERT_EQ(rc, DLOCK_EIO);
        d[b][i].calls = 1;
        d[b][i].status = rc;
      }
      tl_run_for(&t, 7); /* apart by less than a retry's 20 ms */
    }
    tl_run_for(&t, 65);
    /* The batches before this one that are over: one whole ends it. */
    for (int k = 0; k < b && !whole; k++) {
      int ok = 0, over = 0;
      for (int i = 0; i < N; i++) {
        over += d[k][i].calls;
        ok += d[k][i].calls == 1 && d[k][i].status == 0;
      }
      whole = over == N && ok == N;
    }
  }
  for (int b = 0; b < batches; b++)
    for (int i = 0; i < N; i++)
      tl_run_until(&t, &d[b][i].calls, 60000);
  printf("%d batches over %" PRId64 " ms from the kill\n", batches,
         lu_now_ms() - t0);
  int promoted = cg_master_of_slot(g, replica, slot);
  ASSERT_EQ(promoted, replica);
  int ran_total = 0;
  for (int b = 0; b < batches; b++) {
    redisReply *r = rp_cmd(cg_node(g, promoted), "LRANGE %s 0 -1", key[b]);
    ASSERT_NOT_NULL(r);
    ASSERT_EQ(r->type, REDIS_REPLY_ARRAY);
    size_t at = 0;
    for (int i = 0; i < N; i++) {
      ASSERT_EQ(d[b][i].calls, 1);
      if (d[b][i].status != 0) {
        ASSERT_EQ(d[b][i].status, DLOCK_EIO);
        continue;
      }
      ASSERT_LT(at, r->elements);
      ASSERT_STR_EQ(r->element[at]->str, value[i]);
      at++;
    }
    ASSERT_EQ(at, r->elements);
    ran_total += (int)at;
    freeReplyObject(r);
  }
  printf("%d of %d requests ran, each batch's in order\n", ran_total,
         batches * N);
  dlock_client_close(ac);
  tl_close(&t);
  cg_free(g);
}

TEST(async_cluster_without_sharded_pubsub_wakes_by_classic_message) {
  cg_group_t *g = NULL;
  ASSERT_EQ(cg_start_conf(CG_NO_SHARDED_PUBSUB, &g), 0);
  tl_loop t;
  dlock_client_t *ac = async_cluster(g, &t, 30000);
  dlock_client_t *bc = blocking_cluster(g);
  char names[3][32];
  int owner[3];
  spread_names(g, "acls", 1, names, owner);
  /* On a master other than the first seed, where the waiter listens. */
  int k = owner[0] != 0 ? 0 : owner[1] != 0 ? 1 : 2;
  dlock_t *l = lu_get(ac, names[k]), *b = lu_get(bc, names[k]);
  ASSERT_DLOCK_OK(dlock_lock(b, 600000));
  uint64_t me = dlock_owner_new(), token = dlock_token(b);
  tl_done w = {0};
  ASSERT_DLOCK_OK(dlock_lock_async(l, me, 60000, tl_done_cb, &w));
  /* Subscribed with SUBSCRIBE on the first seed: a PUBLISH there reaches
   * every node's subscribers. */
  char chan[128];
  snprintf(chan, sizeof(chan), "redisson_lock__channel:{%s}", names[k]);
  int64_t end = lu_now_ms() + 30000;
  while (lu_numsub(cg_node(g, 0), chan, strlen(chan)) < 1) {
    ASSERT_LT(lu_now_ms(), end);
    tl_turn(&t, 20);
  }
  ASSERT_EQ(w.calls, 0);
  ASSERT_DLOCK_OK(dlock_unlock(b));
  tl_run_until(&t, &w.calls, 30000);
  ASSERT_DLOCK_OK(w.status);
  ASSERT_GT(dlock_token_as(l, me), token);
  /* Its unlock publishes with PUBLISH (SPUBLISH is unknown there). */
  tl_done u = {0};
  ASSERT_DLOCK_OK(dlock_unlock_async(l, me, tl_done_cb, &u));
  tl_run_until(&t, &u.calls, 30000);
  ASSERT_DLOCK_OK(u.status);
  ASSERT_EQ(lu_exists(cg_node(g, owner[k]), names[k]), 0);
  dlock_free(l);
  dlock_free(b);
  dlock_client_close(ac);
  dlock_client_close(bc);
  tl_close(&t);
  cg_free(g);
}
