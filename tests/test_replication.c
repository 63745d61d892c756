/*
 * Replica sync on a master with a replica (a plain redis:// URL), and
 * calls that ride an outage out (a server killed and restarted) instead of
 * failing at the first error. The Sentinel deployments are in
 * test_sentinel.c.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>

#include "lock_util.h"

/* ---- replica sync ------------------------------------------------------- */

/* A master and one replica in sync. */
static void pair(rp_server_t **m, rp_server_t **r) {
  lu_replicated(m, r, 1, 0);
}

static dlock_client_t *client_of(rp_server_t *m, int sync, int replicas,
                                 int64_t timeout_ms) {
  dlock_options_t o;
  lu_options(&o, m);
  o.watchdog_timeout_ms = 3000;
  o.replica_sync = sync;
  o.replica_sync_replicas = replicas;
  o.replica_sync_timeout_ms = timeout_ms;
  return lu_client_opts(&o);
}

/*
 * With replica sync (the default), an acquisition returns only once the
 * replica has it. With the replica stopped, the acquisition is refused
 * with DLOCK_ENOSYNC after the sync timeout and given back on the master,
 * so that nobody holds a lock a failover could lose.
 */
TEST(replica_sync_acquisition_waits_for_the_replica) {
  rp_server_t *m, *r;
  pair(&m, &r);
  dlock_client_t *c = client_of(m, 1, 0, 500);
  dlock_t *l = lu_get(c, "rs:a");
  ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));
  ASSERT_EQ(lu_exists(r, "rs:a"), 1);
  ASSERT_DLOCK_OK(dlock_unlock(l));

  ASSERT_EQ(rp_pause(r), 0);
  int64_t t0 = lu_now_ms();
  int rc = dlock_trylock(l, 0, 30000);
  int64_t took = lu_now_ms() - t0;
  printf("replica stopped: %s after %" PRId64 " ms: %s\n", dlock_err_name(rc),
         took, dlock_last_error());
  ASSERT_EQ(rc, DLOCK_ENOSYNC);
  ASSERT(strstr(dlock_last_error(), "0 of 1 replicas") != NULL);
  ASSERT_GE(took, 450);
  ASSERT_EQ(dlock_is_held(l), 0);
  /* Given back on the master (the release that did it waited too). */
  ASSERT_EQ(lu_exists(m, "rs:a"), 0);
  ASSERT_EQ(rp_resume(r), 0);

  /* Back in step: granted again. */
  int64_t until = lu_now_ms() + 10000;
  while ((rc = dlock_trylock(l, 0, 30000)) == DLOCK_ENOSYNC &&
         lu_now_ms() < until)
    lu_sleep_ms(50);
  ASSERT_DLOCK_OK(rc);
  ASSERT_EQ(lu_exists(r, "rs:a"), 1);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  dlock_free(l);
  dlock_client_close(c);
  rp_free(r);
  rp_free(m);
}

/*
 * A sync timeout longer than the command timeout: the WAIT pipelined after
 * the write is answered only when its own timeout ends, and the silence
 * until then is not taken for a dead connection. With the replica stopped
 * the acquisition fails with DLOCK_ENOSYNC after the sync timeout (the
 * connection was called dead after the command timeout before, DLOCK_EIO),
 * and is given back.
 */
TEST(replica_sync_timeout_longer_than_command_timeout) {
  rp_server_t *m, *r;
  pair(&m, &r);
  dlock_options_t o;
  lu_options(&o, m);
  o.watchdog_timeout_ms = 30000;
  o.command_timeout_ms = 1000;
  o.replica_sync_timeout_ms = 3000;
  dlock_client_t *c = lu_client_opts(&o);
  dlock_t *l = lu_get(c, "rs:long");
  ASSERT_DLOCK_OK(dlock_trylock(l, 0, 30000)); /* reads the replicas */
  ASSERT_DLOCK_OK(dlock_unlock(l));
  ASSERT_EQ(rp_pause(r), 0);
  int64_t t0 = lu_now_ms();
  int rc = dlock_trylock(l, 0, 30000);
  int64_t took = lu_now_ms() - t0;
  printf("sync timeout 3 s, command timeout 1 s, replica stopped: %s after "
         "%" PRId64 " ms: %s\n",
         dlock_err_name(rc), took, dlock_last_error());
  ASSERT_EQ(rc, DLOCK_ENOSYNC);
  ASSERT_GE(took, 2900);
  ASSERT_EQ(dlock_is_held(l), 0);
  ASSERT_EQ(lu_exists(m, "rs:long"), 0);
  ASSERT_EQ(rp_resume(r), 0);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(r);
  rp_free(m);
}

/*
 * A RedLock over three masters, the first with a replica: its parts are
 * sent to the nodes at once, and with replica sync each carries its WAIT
 * as a single lock's write does. While the replica is in step, the first
 * node's part is on the replica when the lock is held. With the replica
 * stopped, that node's part is not acknowledged: it is given back there
 * (at once, or once it answers when the quorum came first) and the lock
 * is held on the two other nodes only (a quorum of 2 of 3). Without the
 * WAIT (before), the first node kept its part, unreplicated, for its
 * whole lease.
 */
TEST(replica_sync_redlock_parts_wait_for_replicas) {
  rp_server_t *m, *r;
  pair(&m, &r);
  rp_server_t *other[2] = {lu_server(0), lu_server(0)};
  dlock_client_t *c[3];
  dlock_t *parts[3];
  for (int i = 0; i < 3; i++) {
    dlock_options_t o;
    lu_options(&o, i == 0 ? m : other[i - 1]);
    o.watchdog_timeout_ms = 30000;
    o.replica_sync_timeout_ms = 500;
    c[i] = lu_client_opts(&o);
    parts[i] = lu_get(c[i], "rs:red");
  }
  dlock_t *red = NULL;
  ASSERT_DLOCK_OK(dlock_get_red(parts, 3, &red));
  ASSERT_DLOCK_OK(dlock_trylock(red, 0, 30000));
  ASSERT_EQ(lu_exists(m, "rs:red"), 1);
  ASSERT_EQ(lu_exists(r, "rs:red"), 1);
  ASSERT_DLOCK_OK(dlock_unlock(red));

  ASSERT_EQ(rp_pause(r), 0);
  int rc = dlock_trylock(red, 0, 30000);
  printf("RedLock, node 0's replica stopped: %s\n", dlock_err_name(rc));
  ASSERT_DLOCK_OK(rc);
  /* The other nodes made a quorum first, so node 0 may have been left to
   * answer in the background (settle.c): its part goes then. */
  int64_t until = lu_now_ms() + 15000;
  while (lu_exists(m, "rs:red") == 1 && lu_now_ms() < until)
    lu_sleep_ms(50);
  ASSERT_EQ(lu_exists(m, "rs:red"), 0);
  ASSERT_EQ(lu_exists(other[0], "rs:red"), 1);
  ASSERT_EQ(lu_exists(other[1], "rs:red"), 1);
  ASSERT_DLOCK_OK(dlock_unlock(red));
  ASSERT_EQ(rp_resume(r), 0);
  dlock_free(red);
  for (int i = 0; i < 3; i++) {
    dlock_free(parts[i]);
    dlock_client_close(c[i]);
  }
  rp_free(other[0]);
  rp_free(other[1]);
  rp_free(r);
  rp_free(m);
}

/*
 * A MultiLock of eight parts on a master with a replica: one attempt sends
 * the eight scripts and a single WAIT after them, in one pipeline, as does
 * the release. With the replica stopped the attempt fails with
 * DLOCK_ENOSYNC and leaves no part behind, its eight grants given back
 * together (one more WAIT), not one after the other.
 */
TEST(replica_sync_multilock_one_wait_per_attempt) {
  enum { PARTS = 8 };
  rp_server_t *m, *r;
  pair(&m, &r);
  /* A fixed count: no INFO read now and then changes what is counted; a
   * sync timeout that a loaded machine's replica keeps well within. */
  dlock_client_t *c = client_of(m, 1, 1, 3000);
  dlock_t *h[PARTS], *ml = NULL;
  char names[PARTS][16];
  for (int i = 0; i < PARTS; i++) {
    snprintf(names[i], sizeof(names[i]), "rs:m%d", i);
    h[i] = lu_get(c, names[i]);
  }
  ASSERT_DLOCK_OK(dlock_get_multi(h, PARTS, &ml));
  /* The scripts are loaded by the first use (EVAL after NOSCRIPT). */
  ASSERT_DLOCK_OK(dlock_trylock(ml, 0, 30000));
  ASSERT_DLOCK_OK(dlock_unlock(ml));

  int64_t waits = lu_cmd_calls(m, "wait"), evals = lu_cmd_calls(m, "evalsha");
  ASSERT_DLOCK_OK(dlock_trylock(ml, 0, 30000));
  ASSERT_EQ(lu_cmd_calls(m, "wait") - waits, 1);
  ASSERT_EQ(lu_cmd_calls(m, "evalsha") - evals, PARTS);
  for (int i = 0; i < PARTS; i++)
    ASSERT_EQ(lu_exists(r, names[i]), 1);
  waits = lu_cmd_calls(m, "wait");
  ASSERT_DLOCK_OK(dlock_unlock(ml));
  ASSERT_EQ(lu_cmd_calls(m, "wait") - waits, 1);
  for (int i = 0; i < PARTS; i++)
    ASSERT_EQ(lu_exists(m, names[i]), 0);

  ASSERT_EQ(rp_pause(r), 0);
  waits = lu_cmd_calls(m, "wait");
  int64_t t0 = lu_now_ms();
  int rc = dlock_trylock(ml, 0, 30000);
  printf("replica stopped: %s after %" PRId64 " ms: %s\n", dlock_err_name(rc),
         lu_now_ms() - t0, dlock_last_error());
  ASSERT_EQ(rc, DLOCK_ENOSYNC);
  ASSERT_EQ(lu_cmd_calls(m, "wait") - waits, 2);
  for (int i = 0; i < PARTS; i++) {
    ASSERT_EQ(lu_exists(m, names[i]), 0);
    ASSERT_EQ(dlock_is_held(h[i]), 0);
  }
  ASSERT_EQ(dlock_is_held(ml), 0);
  ASSERT_EQ(rp_resume(r), 0);
  int64_t until = lu_now_ms() + 10000;
  while ((rc = dlock_trylock(ml, 0, 30000)) == DLOCK_ENOSYNC &&
         lu_now_ms() < until)
    lu_sleep_ms(50);
  ASSERT_DLOCK_OK(rc);
  ASSERT_DLOCK_OK(dlock_unlock(ml));

  /* The count read from the master's INFO (replica_sync_replicas 0): once
   * it is due to be read again, the INFO rides after the WAIT, and the
   * parts still go at once. The test's own INFO commandstats counts
   * itself in the second reading. */
  dlock_client_t *c2 = client_of(m, 1, 0, 3000);
  dlock_t *h2[PARTS], *ml2 = NULL;
  for (int i = 0; i < PARTS; i++)
    h2[i] = lu_get(c2, names[i]);
  ASSERT_DLOCK_OK(dlock_get_multi(h2, PARTS, &ml2));
  ASSERT_DLOCK_OK(dlock_trylock(ml2, 0, 30000));
  ASSERT_DLOCK_OK(dlock_unlock(ml2));
  lu_sleep_ms(1100);
  waits = lu_cmd_calls(m, "wait");
  int64_t infos = lu_cmd_calls(m, "info");
  ASSERT_DLOCK_OK(dlock_trylock(ml2, 0, 30000));
  ASSERT_EQ(lu_cmd_calls(m, "info") - infos, 2);
  ASSERT_EQ(lu_cmd_calls(m, "wait") - waits, 1);
  for (int i = 0; i < PARTS; i++)
    ASSERT_EQ(lu_exists(r, names[i]), 1);
  ASSERT_DLOCK_OK(dlock_unlock(ml2));
  dlock_free(ml2);
  for (int i = 0; i < PARTS; i++)
    dlock_free(h2[i]);
  dlock_client_close(c2);

  dlock_free(ml);
  for (int i = 0; i < PARTS; i++)
    dlock_free(h[i]);
  dlock_client_close(c);
  rp_free(r);
  rp_free(m);
}

/* Resumes a paused server after a while (a server is restarted from the
 * main thread only: see redis_proc.h on PR_SET_PDEATHSIG). */
typedef struct later {
  rp_server_t *s;
  int64_t after_ms;
} later_t;

static void *do_later(void *p) {
  later_t *l = p;
  lu_sleep_ms(l->after_ms);
  rp_resume(l->s);
  return NULL;
}

/* A call made in a thread of its own while the main thread restarts the
 * server. */
typedef struct call {
  dlock_t *l;
  int unlock; /* 1: dlock_unlock_as, else dlock_trylock_as */
  uint64_t owner;
  int64_t wait_ms;
  int rc;
  int64_t done_ms;
} call_t;

static void *do_call(void *p) {
  call_t *c = p;
  c->rc = c->unlock ? dlock_unlock_as(c->l, c->owner)
                    : dlock_trylock_as(c->l, c->owner, c->wait_ms, 30000);
  c->done_ms = lu_now_ms();
  return NULL;
}

/* A trylock with a wait rides a replica's pause out as it rides an
 * outage: it gets the lock once the replica acknowledges again. */
TEST(replica_sync_trylock_with_wait_retries) {
  rp_server_t *m, *r;
  pair(&m, &r);
  dlock_client_t *c = client_of(m, 1, 0, 300);
  dlock_t *l = lu_get(c, "rs:wait");
  ASSERT_DLOCK_OK(dlock_trylock(l, 0, 30000)); /* reads the replicas */
  ASSERT_DLOCK_OK(dlock_unlock(l));
  ASSERT_EQ(rp_pause(r), 0);
  later_t back = {r, 1000};
  pthread_t t;
  int64_t t0 = lu_now_ms();
  ASSERT_EQ(pthread_create(&t, NULL, do_later, &back), 0);
  int rc = dlock_trylock(l, 10000, 30000);
  int64_t took = lu_now_ms() - t0;
  ASSERT_EQ(pthread_join(t, NULL), 0);
  printf("trylock(10 s) with the replica stopped for 1 s: %s after %" PRId64
         " ms\n",
         dlock_err_name(rc), took);
  ASSERT_DLOCK_OK(rc);
  ASSERT_GE(took, 900);
  ASSERT_EQ(lu_exists(r, "rs:wait"), 1);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  dlock_free(l);
  dlock_client_close(c);
  rp_free(r);
  rp_free(m);
}

/* replica_sync_replicas asks for exactly that many: two of a master that
 * has one are never there. replica_sync = 0 waits for none. */
TEST(replica_sync_options) {
  rp_server_t *m, *r;
  pair(&m, &r);
  dlock_client_t *two = client_of(m, 1, 2, 200);
  dlock_t *l = lu_get(two, "rs:opt");
  ASSERT_EQ(dlock_trylock(l, 0, 30000), DLOCK_ENOSYNC);
  ASSERT(strstr(dlock_last_error(), "of 2 replicas") != NULL);
  ASSERT_EQ(lu_exists(m, "rs:opt"), 0);
  dlock_free(l);
  dlock_client_close(two);

  dlock_client_t *off = client_of(m, 0, 0, 1000);
  l = lu_get(off, "rs:opt");
  ASSERT_EQ(rp_pause(r), 0);
  int64_t t0 = lu_now_ms();
  ASSERT_DLOCK_OK(dlock_trylock(l, 0, 30000));
  ASSERT_DLOCK_OK(dlock_unlock(l));
  int64_t took = lu_now_ms() - t0;
  ASSERT_EQ(rp_resume(r), 0);
  printf("sync off, replica stopped: lock and unlock in %" PRId64 " ms\n",
         took);
  ASSERT_LT(took, 900); /* no WAIT: not its 1000 ms timeout */
  dlock_free(l);
  dlock_client_close(off);

  dlock_options_t o;
  lu_options(&o, m);
  o.replica_sync_replicas = -1;
  dlock_client_t *bad = NULL;
  ASSERT_EQ(dlock_client_open(&o, &bad), DLOCK_EINVAL);
  o.replica_sync_replicas = DLOCK_REPLICAS_MAX + 1;
  ASSERT_EQ(dlock_client_open(&o, &bad), DLOCK_EINVAL);
  o.replica_sync_replicas = 0;
  o.replica_sync_timeout_ms = 0;
  ASSERT_EQ(dlock_client_open(&o, &bad), DLOCK_EINVAL);
  o.replica_sync_timeout_ms = 1000;
  o.outage_wait_ms = -1;
  ASSERT_EQ(dlock_client_open(&o, &bad), DLOCK_EINVAL);
  o.outage_wait_ms = 30000;
  o.replica_sync_mode = 2;
  ASSERT_EQ(dlock_client_open(&o, &bad), DLOCK_EINVAL);
  ASSERT(strstr(dlock_last_error(), "replica_sync_mode") != NULL);
  o.replica_sync_mode = DLOCK_SYNC_ANY;
  o.spin_backoff = -1;
  ASSERT_EQ(dlock_client_open(&o, &bad), DLOCK_EINVAL);
  ASSERT(strstr(dlock_last_error(), "spin_backoff") != NULL);
  ASSERT_NULL(bad);
  rp_free(r);
  rp_free(m);
}

static dlock_client_t *client_mode(rp_server_t *m, int mode,
                                   int64_t timeout_ms) {
  dlock_options_t o;
  lu_options(&o, m);
  o.watchdog_timeout_ms = 30000;
  o.replica_sync_timeout_ms = timeout_ms;
  o.replica_sync_mode = mode;
  return lu_client_opts(&o);
}

/*
 * Redisson's rule (DLOCK_SYNC_ANY): with one of two replicas stopped, an
 * acquisition that dlock's own rule refuses (1 of 2) is granted, as one
 * replica has it; with both stopped it is refused and given back. On a
 * master without AOF the wait is a WAIT, never a WAITAOF.
 */
TEST(replica_sync_any_one_replica_is_enough) {
  rp_server_t *m, *r[2];
  lu_replicated(&m, r, 2, 0);
  dlock_client_t *any = client_mode(m, DLOCK_SYNC_ANY, 300);
  dlock_client_t *all = client_mode(m, DLOCK_SYNC_ALL, 300);
  dlock_t *la = lu_get(any, "rs:any"), *ll = lu_get(all, "rs:any");
  int64_t waits = lu_cmd_calls(m, "wait");
  ASSERT_DLOCK_OK(dlock_trylock(la, 0, 30000));
  /* One of them at least had it when the call returned. */
  ASSERT_GE(lu_exists(r[0], "rs:any") + lu_exists(r[1], "rs:any"), 1);
  ASSERT_DLOCK_OK(dlock_unlock(la));
  ASSERT_GE(lu_cmd_calls(m, "wait") - waits, 2);
  ASSERT_EQ(lu_cmd_calls(m, "waitaof"), 0);

  ASSERT_EQ(rp_pause(r[1]), 0);
  ASSERT_EQ(dlock_trylock(ll, 0, 30000), DLOCK_ENOSYNC);
  printf("one of two stopped, DLOCK_SYNC_ALL: %s\n", dlock_last_error());
  ASSERT(strstr(dlock_last_error(), "1 of 2 replicas") != NULL);
  ASSERT_EQ(lu_exists(m, "rs:any"), 0);
  ASSERT_DLOCK_OK(dlock_trylock(la, 0, 30000));
  ASSERT_EQ(dlock_is_held(la), 1);
  ASSERT_EQ(lu_exists(r[0], "rs:any"), 1);
  ASSERT_DLOCK_OK(dlock_unlock(la));
  ASSERT_EQ(lu_exists(m, "rs:any"), 0);
  /* A MultiLock's parts, sent in one pipeline with one WAIT, are judged
   * by the same rule. Both replicas are waited for (a fixed count: a
   * replica stopped for over 2 s is no longer counted in step). */
  dlock_options_t o;
  lu_options(&o, m);
  o.replica_sync_timeout_ms = 300;
  o.replica_sync_replicas = 2;
  o.replica_sync_mode = DLOCK_SYNC_ANY;
  dlock_client_t *any2 = lu_client_opts(&o);
  o.replica_sync_mode = DLOCK_SYNC_ALL;
  dlock_client_t *all2 = lu_client_opts(&o);
  dlock_t *pa[2] = {lu_get(any2, "rs:any:p1"), lu_get(any2, "rs:any:p2")};
  dlock_t *pl[2] = {lu_get(all2, "rs:any:p1"), lu_get(all2, "rs:any:p2")};
  dlock_t *ma = NULL, *ml = NULL;
  ASSERT_DLOCK_OK(dlock_get_multi(pa, 2, &ma));
  ASSERT_DLOCK_OK(dlock_get_multi(pl, 2, &ml));
  ASSERT_EQ(dlock_trylock(ml, 0, 30000), DLOCK_ENOSYNC);
  ASSERT_EQ(lu_exists(m, "rs:any:p1") + lu_exists(m, "rs:any:p2"), 0);
  ASSERT_DLOCK_OK(dlock_trylock(ma, 0, 30000));
  ASSERT_EQ(lu_exists(r[0], "rs:any:p1") + lu_exists(r[0], "rs:any:p2"), 2);
  ASSERT_DLOCK_OK(dlock_unlock(ma));
  ASSERT_EQ(lu_exists(m, "rs:any:p1") + lu_exists(m, "rs:any:p2"), 0);
  dlock_free(ma);
  dlock_free(ml);
  for (int i = 0; i < 2; i++) {
    dlock_free(pa[i]);
    dlock_free(pl[i]);
  }
  dlock_client_close(any2);
  dlock_client_close(all2);

  ASSERT_EQ(rp_pause(r[0]), 0);
  int rc = dlock_trylock(la, 0, 30000);
  printf("both stopped, DLOCK_SYNC_ANY: %s: %s\n", dlock_err_name(rc),
         dlock_last_error());
  ASSERT_EQ(rc, DLOCK_ENOSYNC);
  ASSERT(strstr(dlock_last_error(), "only 0 of") != NULL);
  ASSERT_EQ(dlock_is_held(la), 0);
  ASSERT_EQ(lu_exists(m, "rs:any"), 0);
  ASSERT_EQ(rp_resume(r[0]), 0);
  ASSERT_EQ(rp_resume(r[1]), 0);
  dlock_free(la);
  dlock_free(ll);
  dlock_client_close(any);
  dlock_client_close(all);
  rp_free(r[0]);
  rp_free(r[1]);
  rp_free(m);
}

/*
 * A master with AOF on (replicas too): Redisson's rule waits with WAITAOF
 * where the server has it (Redis 7.2 and later, Valkey), and falls back to
 * WAIT where it does not; dlock's rule keeps WAIT. Either way a write that
 * no replica acknowledged is refused.
 */
TEST(replica_sync_any_waitaof_when_aof_is_on) {
  rp_server_t *m, *r[1];
  lu_replicated(&m, r, 1, 1);
  redisReply *ci = rp_cmd(m, "COMMAND INFO WAITAOF");
  ASSERT_NOT_NULL(ci);
  int has_waitaof = ci->type == REDIS_REPLY_ARRAY && ci->elements == 1 &&
                    ci->element[0]->type == REDIS_REPLY_ARRAY;
  freeReplyObject(ci);
  printf("the server %s WAITAOF\n", has_waitaof ? "has" : "lacks");
  /* A replica may tell its master of an fsync only with its next
   * once-a-second acknowledgement: the sync timeout must be longer. */
  dlock_client_t *any = client_mode(m, DLOCK_SYNC_ANY, 2500);
  dlock_client_t *all = client_mode(m, DLOCK_SYNC_ALL, 2500);
  dlock_t *la = lu_get(any, "rs:aof"), *ll = lu_get(all, "rs:aof");

  int64_t waits = lu_cmd_calls(m, "wait");
  int64_t aofs = lu_cmd_calls(m, "waitaof");
  ASSERT_DLOCK_OK(dlock_trylock(la, 0, 30000));
  ASSERT_EQ(lu_exists(r[0], "rs:aof"), 1);
  ASSERT_DLOCK_OK(dlock_unlock(la));
  int64_t dw = lu_cmd_calls(m, "wait") - waits;
  int64_t da = lu_cmd_calls(m, "waitaof") - aofs;
  printf("DLOCK_SYNC_ANY, lock and unlock: %" PRId64 " WAIT, %" PRId64
         " WAITAOF\n",
         dw, da);
  ASSERT_GE(has_waitaof ? da : dw, 2);
  ASSERT_EQ(has_waitaof ? dw : da, 0);

  waits = lu_cmd_calls(m, "wait");
  aofs = lu_cmd_calls(m, "waitaof");
  ASSERT_DLOCK_OK(dlock_trylock(ll, 0, 30000));
  ASSERT_DLOCK_OK(dlock_unlock(ll));
  ASSERT_GE(lu_cmd_calls(m, "wait") - waits, 2);
  ASSERT_EQ(lu_cmd_calls(m, "waitaof") - aofs, 0);

  ASSERT_EQ(rp_pause(r[0]), 0);
  int rc = dlock_trylock(la, 0, 30000);
  printf("replica stopped, DLOCK_SYNC_ANY: %s: %s\n", dlock_err_name(rc),
         dlock_last_error());
  ASSERT_EQ(rc, DLOCK_ENOSYNC);
  ASSERT_EQ(lu_exists(m, "rs:aof"), 0);
  ASSERT_EQ(rp_resume(r[0]), 0);
  dlock_free(la);
  dlock_free(ll);
  dlock_client_close(any);
  dlock_client_close(all);
  rp_free(r[0]);
  rp_free(m);
}

/*
 * A renewal that the replica does not acknowledge renews the lease on the
 * master only, where a failover could lose it: it confirms nothing, and
 * when the lease runs out without a synced renewal the hold is reported
 * lost (on_lost, then DLOCK_ELOST), though the master still has it.
 */
TEST(replica_sync_unsynced_renewals_do_not_keep_a_lock) {
  rp_server_t *m, *r;
  pair(&m, &r);
  lu_lost_t lost;
  lu_lost_init(&lost);
  dlock_options_t o;
  lu_options(&o, m);
  o.watchdog_timeout_ms = 1500;
  o.command_timeout_ms = 1000;
  o.replica_sync_timeout_ms = 200;
  o.on_lost = lu_lost_cb;
  o.on_lost_data = &lost;
  dlock_client_t *c = lu_client_opts(&o);
  dlock_t *l = lu_get(c, "rs:renew");
  ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));
  /* Renewed, in sync, through three leases. */
  lu_sleep_ms(4500);
  ASSERT_EQ(lu_lost_count(&lost), 0);
  ASSERT_EQ(rp_pause(r), 0);
  int n = lu_lost_wait(&lost, 5000);
  ASSERT_EQ(rp_resume(r), 0);
  ASSERT_EQ(n, 1);
  ASSERT_EQ(lu_exists(m, "rs:renew"), 1); /* renewed on the master only */
  ASSERT_DLOCK_ERR(dlock_unlock(l), DLOCK_ELOST);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(r);
  rp_free(m);
}

/* ---- riding an outage out ------------------------------------------------
 */

/* A trylock with a wait, made while the server is down, waits for it to
 * come back within its wait and gets the lock (it used to fail with
 * DLOCK_EIO at the first refused connection). */
TEST(outage_trylock_rides_a_restart) {
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = lu_get(c, "out:try");
  ASSERT_DLOCK_OK(dlock_trylock(l, 0, 30000));
  ASSERT_DLOCK_OK(dlock_unlock(l));
  ASSERT_EQ(rp_kill(s), 0);
  call_t call = {l, 0, dlock_owner_new(), 10000, -100, 0};
  pthread_t t;
  int64_t t0 = lu_now_ms();
  ASSERT_EQ(pthread_create(&t, NULL, do_call, &call), 0);
  lu_sleep_ms(1500);
  ASSERT_EQ(rp_restart(s), 0);
  ASSERT_EQ(pthread_join(t, NULL), 0);
  int64_t took = call.done_ms - t0;
  printf("trylock(10 s) through a 1.5 s outage: %s after %" PRId64 " ms\n",
         dlock_err_name(call.rc), took);
  ASSERT_DLOCK_OK(call.rc);
  ASSERT_GE(took, 1400);
  ASSERT_EQ(lu_exists(s, "out:try"), 1);
  ASSERT_DLOCK_OK(dlock_unlock_as(l, call.owner));

  /* A wait shorter than the outage fails when the wait is over. */
  ASSERT_EQ(rp_kill(s), 0);
  t0 = lu_now_ms();
  int rc = dlock_trylock(l, 700, 30000);
  took = lu_now_ms() - t0;
  printf("trylock(0.7 s) while down: %s after %" PRId64 " ms: %s\n",
         dlock_err_name(rc), took, dlock_last_error());
  ASSERT_EQ(rc, DLOCK_EIO);
  ASSERT_GE(took, 600);
  ASSERT_LT(took, 5000);
  ASSERT(strstr(dlock_last_error(), "tried") != NULL);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/* An unlock made while the server is down is sent again until it comes
 * back (with AOF, the lock came back with it), within outage_wait_ms. */
TEST(outage_unlock_rides_a_restart) {
  rp_options_t ro;
  rp_options_init(&ro);
  ro.appendonly = 1;
  rp_server_t *s = lu_server_opts(&ro);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = lu_get(c, "out:unlock");
  call_t call = {l, 1, dlock_owner_new(), 0, -100, 0};
  ASSERT_DLOCK_OK(dlock_lock_as(l, call.owner, 60000));
  ASSERT_EQ(rp_kill(s), 0);
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, do_call, &call), 0);
  lu_sleep_ms(1500);
  ASSERT_EQ(rp_restart(s), 0);
  ASSERT_EQ(pthread_join(t, NULL), 0);
  printf("unlock through a 1.5 s outage: %s\n", dlock_err_name(call.rc));
  ASSERT_DLOCK_OK(call.rc);
  ASSERT_EQ(lu_exists(s, "out:unlock"), 0);
  int rc;

  /* A lock whose wait has no end gives up after outage_wait_ms. */
  dlock_options_t o;
  lu_options(&o, s);
  o.outage_wait_ms = 800;
  dlock_client_t *short_wait = lu_client_opts(&o);
  dlock_t *l2 = lu_get(short_wait, "out:unlock");
  ASSERT_EQ(rp_kill(s), 0);
  int64_t t0 = lu_now_ms();
  rc = dlock_lock(l2, 30000);
  int64_t took = lu_now_ms() - t0;
  printf("lock while down, outage_wait_ms 800: %s after %" PRId64 " ms\n",
         dlock_err_name(rc), took);
  ASSERT_EQ(rc, DLOCK_EIO);
  ASSERT_GE(took, 700);
  ASSERT_LT(took, 5000);
  dlock_free(l2);
  dlock_client_close(short_wait);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/* A semaphore or latch wait made in a thread of its own while the main
 * thread restarts the server. */
typedef struct obj_call {
  dlock_psem_t *psem;
  dlock_latch_t *latch;
  dlock_permit_t permit;
  int rc;
  int64_t done_ms;
} obj_call_t;

static void *do_obj_call(void *arg) {
  obj_call_t *k = arg;
  k->rc = k->psem != NULL
              ? dlock_psem_acquire(k->psem, 15000, 30000, &k->permit)
              : dlock_latch_await(k->latch, 15000);
  k->done_ms = lu_now_ms();
  return NULL;
}

/*
 * An expirable permit's wait and a latch's wait started while the server is
 * down ride the outage as a lock's does and succeed once it is back (the
 * objects survive the restart in the AOF). Before, both failed at once
 * with DLOCK_EIO.
 */
TEST(outage_permit_and_latch_waits_ride_a_restart) {
  rp_options_t ro;
  rp_options_init(&ro);
  ro.appendonly = 1;
  rp_server_t *s = lu_server_opts(&ro);
  dlock_client_t *c = lu_client(s);
  dlock_psem_t *ps;
  dlock_latch_t *la;
  ASSERT_DLOCK_OK(dlock_psem_get(c, "out:psem", &ps));
  ASSERT_DLOCK_OK(dlock_latch_get(c, "out:latch", &la));
  ASSERT_EQ(dlock_psem_try_set_permits(ps, 1), 1);
  ASSERT_EQ(dlock_latch_try_set_count(la, 1), 1);

  for (int which = 0; which < 2; which++) {
    obj_call_t k;
    memset(&k, 0, sizeof(k));
    if (which == 0)
      k.psem = ps;
    else
      k.latch = la;
    ASSERT_EQ(rp_kill(s), 0);
    pthread_t t;
    int64_t t0 = lu_now_ms();
    ASSERT_EQ(pthread_create(&t, NULL, do_obj_call, &k), 0);
    lu_sleep_ms(1500);
    ASSERT_EQ(rp_restart(s), 0);
    if (which == 1) {
      /* The latch opens once the count is down (the call may need the
       * connection made again first). */
      int rc;
      int64_t until = lu_now_ms() + 10000;
      while ((rc = dlock_latch_count_down(la, NULL)) != 0 &&
             lu_now_ms() < until)
        lu_sleep_ms(50);
      ASSERT_DLOCK_OK(rc);
    }
    ASSERT_EQ(pthread_join(t, NULL), 0);
    printf("%s(15 s) through a 1.5 s outage: %s after %" PRId64 " ms\n",
           which == 0 ? "psem_acquire" : "latch_await", dlock_err_name(k.rc),
           k.done_ms - t0);
    ASSERT_DLOCK_OK(k.rc);
    ASSERT_GE(k.done_ms - t0, 1400);
    if (which == 0)
      ASSERT_DLOCK_OK(dlock_psem_release(ps, k.permit.id));
  }
  dlock_psem_free(ps);
  dlock_latch_free(la);
  dlock_client_close(c);
  rp_free(s);
}

typedef struct comp_call {
  dlock_t *l;
  uint64_t owner;
  int rc;
  int64_t done_ms;
} comp_call_t;

static void *do_comp_call(void *arg) {
  comp_call_t *k = arg;
  k->rc = dlock_trylock_as(k->l, k->owner, 15000, 30000);
  k->done_ms = lu_now_ms();
  return NULL;
}

/*
 * A MultiLock whose part's server is down, and a RedLock with a majority
 * of its nodes down, when the acquisition starts: with a wait, both ride
 * the outage as a single lock does and succeed once the servers are back.
 * Before, the MultiLock failed at once with DLOCK_EIO and the RedLock with
 * DLOCK_ENOQUORUM.
 */
TEST(outage_multi_and_red_locks_ride_a_restart) {
  rp_server_t *s[3];
  dlock_client_t *c[3];
  dlock_t *parts[3];
  for (int i = 0; i < 3; i++) {
    s[i] = lu_server(0);
    c[i] = lu_client(s[i]);
    parts[i] = lu_get(c[i], "out:comp");
  }
  for (int red = 0; red < 2; red++) {
    dlock_t *l = NULL;
    ASSERT_DLOCK_OK(red ? dlock_get_red(parts, 3, &l)
                        : dlock_get_multi(parts, 2, &l));
    int down = red ? 2 : 1;
    for (int i = 0; i < down; i++)
      ASSERT_EQ(rp_kill(s[2 - i - (red ? 0 : 1)]), 0);
    comp_call_t k = {l, dlock_owner_new(), 0, 0};
    pthread_t t;
    int64_t t0 = lu_now_ms();
    ASSERT_EQ(pthread_create(&t, NULL, do_comp_call, &k), 0);
    lu_sleep_ms(1500);
    for (int i = 0; i < down; i++)
      ASSERT_EQ(rp_restart(s[2 - i - (red ? 0 : 1)]), 0);
    ASSERT_EQ(pthread_join(t, NULL), 0);
    printf("%s trylock(15 s) through a 1.5 s outage: %s after %" PRId64 " ms\n",
           red ? "RedLock" : "MultiLock", dlock_err_name(k.rc), k.done_ms - t0);
    ASSERT_DLOCK_OK(k.rc);
    ASSERT_GE(k.done_ms - t0, 1400);
    ASSERT_DLOCK_OK(dlock_unlock_as(l, k.owner));
    dlock_free(l);
  }
  for (int i = 0; i < 3; i++) {
    dlock_free(parts[i]);
    dlock_client_close(c[i]);
    rp_free(s[i]);
  }
}
