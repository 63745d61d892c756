/*
 * Redis Cluster: 3 masters and 3 replicas on loopback
 * (harness/cluster_group.h) behind a redis-cluster:// URL. Key slots as the
 * servers compute them; every lock kind on names spread over all masters,
 * each lock's keys on the master of its slot; exclusion across processes;
 * wake-up after a release; fair-lock FIFO order on a master other than
 * slot 0's; a held and awaited lock whose slot is migrated
 * (TRYAGAIN, ASK, then MOVED, for real); and CLUSTER FAILOVER under a held
 * lock with a waiter.
 *
 * Each test starts its own cluster (a few seconds), so there are few
 * tests, each checking much. Waits are bounded generously.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cluster_util.h"
#include "redisson_sim.h"

static dlock_client_t *cluster_client(cg_group_t *g, int64_t watchdog_ms) {
  dlock_options_t o;
  dlock_options_init(&o);
  o.url = cg_url(g);
  o.connect_timeout_ms = 2000;
  o.command_timeout_ms = 5000;
  o.watchdog_timeout_ms = watchdog_ms;
  return lu_client_opts(&o);
}

TEST(cluster_every_kind) {
  cg_group_t *g = cluster();
  /* Slots as the servers compute them, hash tags included. */
  const char *odd[] = {
      "a{b}c",    "{}x",           "x{", "{a}{b}", "redisson_lock__channel:{k}",
      "\xff\x01", "lock:orders:42"};
  for (size_t i = 0; i < sizeof(odd) / sizeof(*odd); i++)
    ASSERT_EQ(dlock__key_slot(odd[i], strlen(odd[i])), cg_keyslot(g, odd[i]));
  for (int i = 0; i < 200; i++) {
    char k[32];
    snprintf(k, sizeof(k), "k%d", i * 7919);
    ASSERT_EQ(dlock__key_slot(k, strlen(k)), cg_keyslot(g, k));
  }

  dlock_client_t *c = cluster_client(g, 30000);
  dlock_client_t *c2 = cluster_client(g, 30000);
  char names[6][32];
  int owner[6];
  int n = spread_names(g, "kind", 2, names, owner);
  for (int i = 0; i < n; i++) {
    /* Reentrant: held twice, its hash on the master of its slot, a token
     * from the same slot's counter; refused to another client. */
    dlock_t *l = lu_get(c, names[i]), *other = lu_get(c2, names[i]);
    ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));
    uint64_t t1 = dlock_token(l);
    ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));
    ASSERT_EQ(dlock_hold_count(l), 2);
    ASSERT_EQ(lu_exists(cg_node(g, owner[i]), names[i]), 1);
    ASSERT_EQ(dlock_trylock(other, 0, 5000), DLOCK_ETIMEDOUT);
    ASSERT_GT(t1, 0);
    char tk[64];
    snprintf(tk, sizeof(tk), "redisson_lock_token:{%s}", names[i]);
    ASSERT_EQ(lu_exists(cg_node(g, owner[i]), tk), 1);
    dlock_info_t *info = NULL;
    ASSERT_DLOCK_OK(dlock_inspect(c2, names[i], strlen(names[i]), &info));
    ASSERT_EQ(info->locked, 1);
    ASSERT_EQ(info->nholders, 1);
    dlock_info_free(info);
    ASSERT_DLOCK_OK(dlock_unlock(l));
    ASSERT_DLOCK_OK(dlock_unlock(l));
    ASSERT_EQ(lu_exists(cg_node(g, owner[i]), names[i]), 0);
    ASSERT_DLOCK_OK(dlock_trylock(other, 0, 5000));
    ASSERT_DLOCK_OK(dlock_unlock(other));
    dlock_free(l);
    dlock_free(other);

    /* Fair, spin, read-write under other names in the same slot. */
    char fair[48], spin[48], rw[48];
    snprintf(fair, sizeof(fair), "{%s}:fair", names[i]);
    snprintf(spin, sizeof(spin), "{%s}:spin", names[i]);
    snprintf(rw, sizeof(rw), "{%s}:rw", names[i]);
    dlock_t *f = NULL, *s = NULL, *r = NULL, *w = NULL, *r2 = NULL, *w2 = NULL;
    ASSERT_DLOCK_OK(dlock_get_fair(c, fair, &f));
    ASSERT_DLOCK_OK(dlock_get_spin(c, spin, &s));
    ASSERT_DLOCK_OK(dlock_get_rw(c, rw, &r, &w));
    ASSERT_DLOCK_OK(dlock_get_rw(c2, rw, &r2, &w2));
    ASSERT_DLOCK_OK(dlock_lock(f, DLOCK_WATCHDOG));
    ASSERT_DLOCK_OK(dlock_lock(s, 10000));
    ASSERT_DLOCK_OK(dlock_lock(r, DLOCK_WATCHDOG));
    ASSERT_DLOCK_OK(dlock_lock(r2, 10000));
    ASSERT_EQ(dlock_trylock(w2, 0, 10000), DLOCK_ETIMEDOUT);
    ASSERT_DLOCK_OK(dlock_unlock(r));
    ASSERT_DLOCK_OK(dlock_unlock(r2));
    ASSERT_DLOCK_OK(dlock_lock(w, DLOCK_WATCHDOG));
    ASSERT_DLOCK_OK(dlock_unlock(w));
    ASSERT_DLOCK_OK(dlock_unlock(s));
    ASSERT_DLOCK_OK(dlock_unlock(f));
    ASSERT_EQ(lu_dbsize(cg_node(g, owner[i])) >= 0, 1);
    dlock_free(f);
    dlock_free(s);
    dlock_free(r);
    dlock_free(w);
    dlock_free(r2);
    dlock_free(w2);
  }

  /* A MultiLock over names on every master, and the watchdog renewing
   * them all (lease 1.5 s, held 4 s) in rounds grouped by slot. */
  dlock_client_t *cw = cluster_client(g, 1500);
  dlock_t *parts[6], *parts2[6], *m = NULL, *m2 = NULL;
  for (int i = 0; i < n; i++) {
    parts[i] = lu_get(cw, names[i]);
    parts2[i] = lu_get(c2, names[i]);
  }
  ASSERT_DLOCK_OK(dlock_get_multi(parts, (size_t)n, &m));
  ASSERT_DLOCK_OK(dlock_get_multi(parts2, (size_t)n, &m2));
  ASSERT_DLOCK_OK(dlock_lock(m, DLOCK_WATCHDOG));
  ASSERT_EQ(dlock_trylock(m2, 0, 5000), DLOCK_ETIMEDOUT);
  lu_sleep_ms(4000);
  for (int i = 0; i < n; i++) {
    ASSERT_EQ(lu_exists(cg_node(g, owner[i]), names[i]), 1);
    ASSERT_GT(lu_pttl(cg_node(g, owner[i]), names[i]), 0);
  }
  ASSERT_DLOCK_OK(dlock_unlock(m));
  ASSERT_DLOCK_OK(dlock_trylock(m2, 0, 5000));
  ASSERT_DLOCK_OK(dlock_unlock(m2));
  dlock_free(m);
  dlock_free(m2);
  for (int i = 0; i < n; i++) {
    dlock_free(parts[i]);
    dlock_free(parts2[i]);
  }
  dlock_client_close(cw);
  dlock_client_close(c2);
  dlock_client_close(c);
  cg_free(g);
}

/* ---- exclusion across processes, wake-up ------------------------------ */

/* In a child: 'rounds' read-modify-writes of a counter file under lock
 * 'name', each lock on the cluster. Exit status 0 when all went well. */
static int child_rounds(const char *url, const char *name, const char *path,
                        int rounds) {
  dlock_options_t o;
  dlock_options_init(&o);
  o.url = url;
  o.command_timeout_ms = 5000;
  dlock_client_t *c = NULL;
  dlock_t *l = NULL;
  if (dlock_client_open(&o, &c) != 0 || dlock_get(c, name, &l) != 0)
    return 2;
  for (int i = 0; i < rounds; i++) {
    if (dlock_lock(l, 30000) != 0)
      return 3;
    int fd = open(path, O_RDWR);
    char buf[32] = {0};
    if (fd < 0 || pread(fd, buf, sizeof(buf) - 1, 0) < 0)
      return 4;
    int v = atoi(buf);
    snprintf(buf, sizeof(buf), "%d\n", v + 1);
    if (pwrite(fd, buf, strlen(buf), 0) < 0)
      return 4;
    close(fd);
    if (dlock_unlock(l) != 0)
      return 5;
  }
  dlock_free(l);
  dlock_client_close(c);
  return 0;
}

/* A waiter in a thread of its own, for an owner that the test's main
 * thread then releases as. */
typedef struct waiter_arg {
  dlock_t *l;
  int rc;
  int64_t got_ms;
  uint64_t owner;
} waiter_arg;

static void *waiter(void *p) {
  waiter_arg *a = p;
  a->rc = dlock_trylock_as(a->l, a->owner, 60000, 30000);
  a->got_ms = lu_now_ms();
  return NULL;
}

TEST(cluster_exclusion_and_wakeup) {
  cg_group_t *g = cluster();
  char names[3][32];
  int owner[3];
  spread_names(g, "excl", 1, names, owner);
  char dir[] = "/tmp/dlock-cluster-XXXXXX";
  ASSERT_NOT_NULL(mkdtemp(dir));
  const int procs = 3, rounds = 30;
  pid_t pids[9];
  char paths[3][64];
  for (int k = 0; k < 3; k++) {
    snprintf(paths[k], sizeof(paths[k]), "%s/c%d", dir, k);
    int fd = open(paths[k], O_CREAT | O_WRONLY, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(write(fd, "0\n", 2), 2);
    close(fd);
  }
  for (int p = 0; p < procs * 3; p++) {
    pids[p] = fork();
    ASSERT_GE(pids[p], 0);
    if (pids[p] == 0)
      _exit(child_rounds(cg_url(g), names[p % 3], paths[p % 3], rounds));
  }
  for (int p = 0; p < procs * 3; p++) {
    int st;
    ASSERT_EQ(waitpid(pids[p], &st, 0), pids[p]);
    ASSERT(WIFEXITED(st));
    ASSERT_EQ(WEXITSTATUS(st), 0);
  }
  for (int k = 0; k < 3; k++) {
    char buf[32] = {0};
    int fd = open(paths[k], O_RDONLY);
    ASSERT_GE(fd, 0);
    ASSERT_GT(read(fd, buf, sizeof(buf) - 1), 0);
    close(fd);
    ASSERT_EQ(atoi(buf), procs * rounds);
    unlink(paths[k]);
  }
  rmdir(dir);

  /* A waiter on each master is woken by the release, long before the
   * 30 s lease would have let it in. */
  dlock_client_t *a = cluster_client(g, 30000), *b = cluster_client(g, 30000);
  for (int k = 0; k < 3; k++) {
    dlock_t *h = lu_get(a, names[k]);
    waiter_arg w = {lu_get(b, names[k]), 1, 0, dlock_owner_new()};
    ASSERT_DLOCK_OK(dlock_lock(h, 30000));
    pthread_t t;
    ASSERT_EQ(pthread_create(&t, NULL, waiter, &w), 0);
    lu_sleep_ms(300);
    int64_t released = lu_now_ms();
    ASSERT_DLOCK_OK(dlock_unlock(h));
    pthread_join(t, NULL);
    ASSERT_DLOCK_OK(w.rc);
    printf("%s: woken %" PRId64 " ms after the release\n", names[k],
           w.got_ms - released);
    ASSERT_LT(w.got_ms - released, 10000);
    ASSERT_DLOCK_OK(dlock_unlock_as(w.l, w.owner));
    dlock_free(h);
    dlock_free(w.l);
  }
  dlock_client_close(a);
  dlock_client_close(b);
  cg_free(g);
}

/* ---- fair lock FIFO ------------------------------------------------------ */

typedef struct fifo_waiter {
  dlock_client_t *c;
  dlock_t *l;
  uint64_t owner;
  int idx, rc;
  atomic_int *seq, *inside, *overlaps;
  int *order;
} fifo_waiter;

/* Waits for the fair lock, notes its place in the order of grants, holds
 * it a little (any other holder meanwhile is an overlap) and lets go. */
static void *fifo_waiter_main(void *p) {
  fifo_waiter *w = p;
  w->rc = dlock_trylock_as(w->l, w->owner, 60000, 30000);
  if (w->rc != 0)
    return NULL;
  if (atomic_fetch_add(w->inside, 1) != 0)
    atomic_fetch_add(w->overlaps, 1);
  w->order[atomic_fetch_add(w->seq, 1)] = w->idx;
  lu_sleep_ms(20);
  atomic_fetch_sub(w->inside, 1);
  w->rc = dlock_unlock_as(w->l, w->owner);
  return NULL;
}

/*
 * A fair lock on a cluster keeps its waiters in FIFO order. The lock's
 * slot is on a master other than the first (slot 0's), so its queue lives
 * on a node a client must be sent to. Waiters, each with its own client,
 * join the queue one at a time (each only once the previous one is seen
 * in the queue list on that master), and after the holder's release
 * acquire in exactly that order, one at a time.
 */
TEST(cluster_fair_fifo_order) {
  enum { K = 5 };
  cg_group_t *g = cluster();
  int first = cg_master_of_slot(g, 0, 0), owner = -1;
  ASSERT_GE(first, 0);
  char name[32];
  for (int i = 0; i < 10000 && owner < 0; i++) {
    snprintf(name, sizeof(name), "fifo%d", i);
    int m = cg_master_of_slot(g, 0, dlock__key_slot(name, strlen(name)));
    if (m >= 0 && m != first && m != 0)
      owner = m;
  }
  ASSERT_GE(owner, 0);
  rp_server_t *s = cg_node(g, owner);
  char qk[64];
  lu_keyname(qk, sizeof(qk), "redisson_lock_queue", name, strlen(name));
  printf("fair lock %s on node %d (slot 0 on node %d)\n", name, owner, first);

  dlock_client_t *hc = cluster_client(g, 30000);
  dlock_t *h = NULL;
  ASSERT_DLOCK_OK(dlock_get_fair(hc, name, &h));
  ASSERT_DLOCK_OK(dlock_lock(h, DLOCK_WATCHDOG));
  ASSERT_EQ(lu_exists(s, name), 1);

  atomic_int seq, inside, overlaps;
  atomic_init(&seq, 0);
  atomic_init(&inside, 0);
  atomic_init(&overlaps, 0);
  int order[K];
  fifo_waiter w[K];
  pthread_t t[K];
  char fields[K][128];
  for (int i = 0; i < K; i++) {
    memset(&w[i], 0, sizeof(w[i]));
    w[i].c = cluster_client(g, 30000);
    ASSERT_DLOCK_OK(dlock_get_fair(w[i].c, name, &w[i].l));
    w[i].owner = dlock_owner_new();
    w[i].idx = i;
    w[i].rc = 1;
    w[i].seq = &seq;
    w[i].inside = &inside;
    w[i].overlaps = &overlaps;
    w[i].order = order;
    lu_field(fields[i], sizeof(fields[i]), w[i].c, w[i].owner);
    ASSERT_EQ(pthread_create(&t[i], NULL, fifo_waiter_main, &w[i]), 0);
    /* The next one starts only once this one is queued: a known order.
     * Generous, for a loaded machine. */
    int64_t t0 = lu_now_ms(), len = -1;
    while (lu_now_ms() - t0 < 30000 &&
           (len = lu_reply_int(rp_cmd(s, "LLEN %s", qk))) != i + 1)
      lu_sleep_ms(5);
    ASSERT_EQ(len, i + 1);
  }
  /* The queue, on the slot's master, lists them in the order they asked. */
  redisReply *r = rp_cmd(s, "LRANGE %s 0 -1", qk);
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->type, REDIS_REPLY_ARRAY);
  ASSERT_EQ(r->elements, K);
  for (int i = 0; i < K; i++)
    ASSERT_STR_EQ(r->element[i]->str, fields[i]);
  freeReplyObject(r);
  ASSERT_EQ(atomic_load(&seq), 0);

  ASSERT_DLOCK_OK(dlock_unlock(h));
  for (int i = 0; i < K; i++) {
    pthread_join(t[i], NULL);
    ASSERT_DLOCK_OK(w[i].rc);
  }
  ASSERT_EQ(atomic_load(&seq), K);
  printf("grant order:");
  for (int i = 0; i < K; i++)
    printf(" %d", order[i]);
  printf("\n");
  for (int i = 0; i < K; i++)
    ASSERT_EQ(order[i], i);
  ASSERT_EQ(atomic_load(&overlaps), 0);
  ASSERT_EQ(lu_exists(s, qk), 0);
  ASSERT_EQ(lu_exists(s, name), 0);

  for (int i = 0; i < K; i++) {
    dlock_free(w[i].l);
    dlock_client_close(w[i].c);
  }
  dlock_free(h);
  dlock_client_close(hc);
  cg_free(g);
}

/* ---- slot migration ----------------------------------------------------- */

typedef struct unlock_arg {
  dlock_t *l;
  int rc;
  uint64_t owner;
} unlock_arg;

static void *unlocker(void *p) {
  unlock_arg *a = p;
  a->rc = dlock_unlock_as(a->l, a->owner);
  return NULL;
}

TEST(cluster_slot_migrated_while_held) {
  cg_group_t *g = cluster();
  char names[3][32];
  int owner[3];
  spread_names(g, "mig", 1, names, owner);
  const char *name = names[0];
  int slot = dlock__key_slot(name, strlen(name));
  int from = owner[0], to = owner[1];
  dlock_client_t *a = cluster_client(g, 30000), *b = cluster_client(g, 30000);
  dlock_t *h = lu_get(a, name);
  waiter_arg w = {lu_get(b, name), 1, 0, dlock_owner_new()};
  ASSERT_DLOCK_OK(dlock_lock(h, 30000));
  uint64_t token = dlock_token(h);
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, waiter, &w), 0);
  lu_sleep_ms(200);

  /* The slot's keys move to another master while the lock is held and
   * waited on. */
  ASSERT_EQ(cg_migrate_begin(g, slot, from, to), 0);
  ASSERT_EQ(cg_migrate_keys(g, slot, from, to), 0);
  redisReply *r = rp_cmd(cg_node(g, to), "CLUSTER COUNTKEYSINSLOT %d", slot);
  ASSERT_GT(lu_reply_int(r), 0);
  r = rp_cmd(cg_node(g, from), "CLUSTER COUNTKEYSINSLOT %d", slot);
  ASSERT_EQ(lu_reply_int(r), 0);
  /* Mid-migration: the old master answers ASK for the moved key, which a
   * query follows with ASKING. */
  dlock_info_t *info = NULL;
  ASSERT_DLOCK_OK(dlock_inspect(b, name, strlen(name), &info));
  ASSERT_EQ(info->locked, 1);
  dlock_info_free(info);
  ASSERT_EQ(w.rc, 1); /* still waiting */
  /* An unlock now meets TRYAGAIN (a script on several keys of a slot in
   * migration) and is retried until the migration ends, then MOVED. */
  unlock_arg u = {h, 1, dlock_self()};
  pthread_t tu;
  ASSERT_EQ(pthread_create(&tu, NULL, unlocker, &u), 0);
  lu_sleep_ms(300);
  ASSERT_EQ(cg_migrate_end(g, slot, to), 0);
  int64_t ended = lu_now_ms();
  pthread_join(tu, NULL);
  ASSERT_DLOCK_OK(u.rc);
  pthread_join(t, NULL);
  ASSERT_DLOCK_OK(w.rc);
  /* Woken by the release, which follows the migration at once, not by
   * the 30 s lease running out: a waiter whose subscription moved with
   * the slot tries again once subscribed on the new master, as the
   * release may have come in between. */
  printf("waiter got it %" PRId64 " ms after the migration ended\n",
         w.got_ms - ended);
  ASSERT_LT(w.got_ms - ended, 15000);
  /* The waiter holds it on the new master, with a later token. */
  ASSERT_EQ(lu_exists(cg_node(g, to), name), 1);
  ASSERT_GT(dlock_token_as(w.l, w.owner), token);
  ASSERT_EQ(dlock_trylock(h, 0, 30000), DLOCK_ETIMEDOUT);
  ASSERT_DLOCK_OK(dlock_unlock_as(w.l, w.owner));
  ASSERT_DLOCK_OK(dlock_trylock(h, 0, 30000));
  ASSERT_DLOCK_OK(dlock_unlock(h));
  dlock_free(h);
  dlock_free(w.l);
  dlock_client_close(a);
  dlock_client_close(b);
  cg_free(g);
}

/* ---- failover ----------------------------------------------------------- */

TEST(cluster_failover_while_held) {
  cg_group_t *g = cluster();
  char names[3][32];
  int owner[3];
  spread_names(g, "fo", 1, names, owner);
  const char *name = names[0];
  int old = owner[0];
  int replica = cg_replica_of(g, old);
  ASSERT_GE(replica, 0);
  /* Lease 10 s, renewed every 3.3 s: longer than a manual failover takes
   * (from 20 ms to 5 s here: the old master pauses writes meanwhile, and
   * a lease shorter than that can run out on the new master). */
  dlock_client_t *a = cluster_client(g, 10000), *b = cluster_client(g, 30000);
  dlock_t *h = lu_get(a, name);
  waiter_arg w = {lu_get(b, name), 1, 0, dlock_owner_new()};
  ASSERT_DLOCK_OK(dlock_lock(h, DLOCK_WATCHDOG));
  uint64_t token = dlock_token(h);
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, waiter, &w), 0);
  lu_sleep_ms(300);
  int64_t t0 = lu_now_ms();
  ASSERT_EQ(cg_failover(g, replica, 30000), 0);
  printf("failover done in %" PRId64 " ms\n", lu_now_ms() - t0);
  ASSERT_EQ(cg_master_of_slot(g, replica, dlock__key_slot(name, strlen(name))),
            replica);
  /* Two renewal periods later the lock is there with a lease renewed on
   * the new master (the watchdog followed the MOVED): at least 10 - 3.3 s
   * left, where without a renewal since the failover less than 10 - 7 s
   * would be. */
  lu_sleep_ms(7000);
  ASSERT_EQ(lu_exists(cg_node(g, replica), name), 1);
  ASSERT_GT(lu_pttl(cg_node(g, replica), name), 4500);
  if (w.rc != 1)
    printf("waiter got it %" PRId64 " ms after the failover began\n",
           w.got_ms - t0);
  ASSERT_EQ(w.rc, 1);
  ASSERT_DLOCK_OK(dlock_unlock(h));
  pthread_join(t, NULL);
  ASSERT_DLOCK_OK(w.rc);
  ASSERT_GT(dlock_token_as(w.l, w.owner), token);
  ASSERT_DLOCK_OK(dlock_unlock_as(w.l, w.owner));
  dlock_free(h);
  dlock_free(w.l);
  dlock_client_close(a);
  dlock_client_close(b);
  cg_free(g);
}

/* SIGKILL of the master that holds a lock and whose node the pub/sub
 * connection of both clients is on (the first seed): the lock, written
 * with replica sync, survives on the promoted replica, the holder's
 * watchdog goes on there, and the waiter's subscription moves to another
 * node, so that the release wakes it. */
TEST(cluster_master_killed_while_held) {
  cg_group_t *g = cluster();
  ASSERT_EQ(cg_master_of_slot(g, 0, 0) >= 0, 1);
  int masters[6], nm = cg_masters(g, masters), seed_is_master = 0;
  for (int k = 0; k < nm; k++)
    seed_is_master |= masters[k] == 0;
  ASSERT(seed_is_master);
  char name[32];
  for (int i = 0;; i++) {
    snprintf(name, sizeof(name), "kill%d", i);
    if (cg_master_of_slot(g, 0, dlock__key_slot(name, strlen(name))) == 0)
      break;
  }
  int slot = dlock__key_slot(name, strlen(name));
  dlock_client_t *a = cluster_client(g, 20000), *b = cluster_client(g, 30000);
  dlock_t *h = lu_get(a, name);
  waiter_arg w = {lu_get(b, name), 1, 0, dlock_owner_new()};
  ASSERT_DLOCK_OK(dlock_lock(h, DLOCK_WATCHDOG));
  uint64_t token = dlock_token(h);
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, waiter, &w), 0);
  lu_sleep_ms(300);
  int rep0 = cg_replica_of(g, 0);
  ASSERT_GE(rep0, 0);
  redisReply *cr = rp_cmd(cg_node(g, rep0), "CLUSTER COUNTKEYSINSLOT %d", slot);
  printf("replica %d has %lld keys in the slot before the kill\n", rep0,
         cr != NULL ? cr->integer : -1LL);
  if (cr != NULL)
    freeReplyObject(cr);
  int64_t t0 = lu_now_ms();
  ASSERT_EQ(rp_kill(cg_node(g, 0)), 0);
  int promoted = -1;
  while (lu_now_ms() - t0 < 30000) {
    int m = cg_master_of_slot(g, 1, slot);
    if (m > 0 && cg_wait_agree(g, slot, 1000) == 0) {
      promoted = m;
      break;
    }
    lu_sleep_ms(100);
  }
  ASSERT_GT(promoted, 0);
  printf("replica %d promoted %" PRId64 " ms after the kill\n", promoted,
         lu_now_ms() - t0);
  ASSERT_EQ(lu_exists(cg_node(g, promoted), name), 1);
  ASSERT_EQ(w.rc, 1);
  int64_t released = lu_now_ms();
  ASSERT_DLOCK_OK(dlock_unlock(h));
  printf("unlock done %" PRId64 " ms after the kill\n", lu_now_ms() - t0);
  pthread_join(t, NULL);
  ASSERT_DLOCK_OK(w.rc);
  printf("waiter woken %" PRId64 " ms after the release\n",
         w.got_ms - released);
  /* Well before the 20 s lease it saw would have let it in. */
  ASSERT_LT(w.got_ms - released, 10000);
  ASSERT_GT(dlock_token_as(w.l, w.owner), token);
  ASSERT_DLOCK_OK(dlock_unlock_as(w.l, w.owner));
  dlock_free(h);
  dlock_free(w.l);
  dlock_client_close(a);
  dlock_client_close(b);
  cg_free(g);
}

/*
 * Replica sync counts each shard by its own replicas. A master that does
 * not serve slot 0 is killed: its promoted replica has no replica of its
 * own, while slot 0's master still has one. Counting every shard by slot
 * 0's master had each write there wait for a replica that does not exist,
 * and fail with DLOCK_ENOSYNC for as long as the old master stayed down.
 */
TEST(cluster_replica_sync_counts_each_shard) {
  cg_group_t *g = cluster();
  int m0 = cg_master_of_slot(g, 0, 0);
  ASSERT_GE(m0, 0);
  int masters[6], nm = cg_masters(g, masters), victim = -1;
  for (int k = 0; k < nm && victim < 0; k++)
    if (masters[k] != m0 && masters[k] != 0)
      victim = masters[k];
  ASSERT_GE(victim, 0);
  char name[32];
  for (int i = 0;; i++) {
    snprintf(name, sizeof(name), "shard%d", i);
    if (cg_master_of_slot(g, 0, dlock__key_slot(name, strlen(name))) == victim)
      break;
  }
  int slot = dlock__key_slot(name, strlen(name));
  dlock_client_t *a = cluster_client(g, 30000);
  dlock_t *h = lu_get(a, name);
  ASSERT_DLOCK_OK(dlock_lock(h, 10000));
  ASSERT_DLOCK_OK(dlock_unlock(h));
  int64_t t0 = lu_now_ms();
  ASSERT_EQ(rp_kill(cg_node(g, victim)), 0);
  int promoted = -1;
  while (lu_now_ms() - t0 < 30000) {
    int m = cg_master_of_slot(g, 0, slot);
    if (m >= 0 && m != victim && cg_wait_agree(g, slot, 1000) == 0) {
      promoted = m;
      break;
    }
    lu_sleep_ms(100);
  }
  ASSERT_GE(promoted, 0);
  printf("replica %d promoted %" PRId64 " ms after the kill\n", promoted,
         lu_now_ms() - t0);
  int64_t t1 = lu_now_ms();
  int rc = dlock_trylock(h, 20000, 10000);
  printf("trylock on the promoted master: %d after %" PRId64 " ms (%s)\n", rc,
         lu_now_ms() - t1, rc == 0 ? "" : dlock_last_error());
  ASSERT_DLOCK_OK(rc);
  ASSERT_EQ(lu_exists(cg_node(g, promoted), name), 1);
  /* Slot 0's shard still waits for its replica. */
  char other[32];
  for (int i = 0;; i++) {
    snprintf(other, sizeof(other), "zero%d", i);
    if (cg_master_of_slot(g, m0, dlock__key_slot(other, strlen(other))) == m0)
      break;
  }
  dlock_t *o = lu_get(a, other);
  ASSERT_DLOCK_OK(dlock_lock(o, 10000));
  ASSERT_DLOCK_OK(dlock_unlock(o));
  ASSERT_DLOCK_OK(dlock_unlock(h));
  dlock_free(o);
  dlock_free(h);
  dlock_client_close(a);
  cg_free(g);
}

/* ---- sharded pub/sub ----------------------------------------------------
 */

/* The channels of node 'i' matching '*<part>*': classic (PUBSUB CHANNELS)
 * or sharded (PUBSUB SHARDCHANNELS). */
static int channels_on(cg_group_t *g, int i, int sharded, const char *part) {
  redisReply *r = rp_cmd(cg_node(g, i), "PUBSUB %s *%s*",
                         sharded ? "SHARDCHANNELS" : "CHANNELS", part);
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->type, REDIS_REPLY_ARRAY);
  int n = (int)r->elements;
  freeReplyObject(r);
  return n;
}

/* Waits (up to 20 s) until node 'i' has a sharded subscription matching
 * 'part', and checks that no node has a classic one. */
static void await_shard_sub(cg_group_t *g, int i, const char *part) {
  int64_t until = lu_now_ms() + 20000;
  while (channels_on(g, i, 1, part) == 0 && lu_now_ms() < until)
    lu_sleep_ms(20);
  ASSERT_GT(channels_on(g, i, 1, part), 0);
  for (int k = 0; k < cg_nnodes(g); k++)
    if (rp_pid(cg_node(g, k)) > 0)
      ASSERT_EQ(channels_on(g, k, 0, part), 0);
}

typedef struct sem_waiter_arg {
  dlock_sem_t *s;
  int rc;
  int64_t got_ms;
} sem_waiter_arg;

static void *sem_waiter(void *p) {
  sem_waiter_arg *a = p;
  a->rc = dlock_sem_acquire(a->s, 1, 60000);
  a->got_ms = lu_now_ms();
  return NULL;
}

/* Joins a waiter thread and checks that it was woken by its release
 * ('released', ms), well before the 30 s lease or the 60 s wait. */
static void woken(pthread_t t, const int *rc, const int64_t *got_ms,
                  int64_t released, const char *what) {
  pthread_join(t, NULL);
  ASSERT_DLOCK_OK(*rc);
  printf("%s: woken %" PRId64 " ms after the release\n", what,
         *got_ms - released);
  ASSERT_LT(*got_ms - released, 10000);
}

typedef struct multi_call {
  dlock_t *m;
  uint64_t owner;
  atomic_int done;
  int rc;
} multi_call_t;

static void *multi_call_main(void *p) {
  multi_call_t *a = p;
  a->rc = dlock_trylock_as(a->m, a->owner, 0, 60000);
  atomic_store(&a->done, 1);
  return NULL;
}

/*
 * A MultiLock over two names on each of the 3 masters takes its parts on
 * every master at once. The master of the first two names holds its
 * clients' writes (CLIENT PAUSE WRITE: its cluster bus goes on, so no
 * failover starts); meanwhile the parts on the two other masters are
 * granted already, which parts taken one after the other, the held-up
 * ones first, could not be. Once it lets writes through, the MultiLock
 * holds all six. Then: exclusion against another client (leaving nothing
 * of its own behind), reentrancy, the release of every part, and a part
 * whose slot moved (MOVED) released and taken through the routing.
 */
TEST(cluster_multilock_parts_in_parallel) {
  cg_group_t *g = cluster();
  char names[6][32];
  int owner[6];
  int n = spread_names(g, "cmp", 2, names, owner);
  /* The held-up master's names first. */
  int slow = owner[0];
  char order[6][32];
  int node[6], k = 0;
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < n; i++)
      if ((owner[i] == slow) == (pass == 0)) {
        memcpy(order[k], names[i], sizeof(names[i]));
        node[k++] = owner[i];
      }
  dlock_options_t o;
  dlock_options_init(&o);
  o.url = cg_url(g);
  o.connect_timeout_ms = 2000;
  o.command_timeout_ms = 60000;
  /* Without replica sync: its counts are read again each second by a
   * write of the ordinary path, one part after the other, which a slow
   * machine could make this attempt's (test_sentinel and test_replication
   * cover the WAIT sent with the parts). */
  o.replica_sync = 0;
  dlock_client_t *c = lu_client_opts(&o), *c2 = cluster_client(g, 30000);
  dlock_t *h[6], *h2[6], *m = NULL, *m2 = NULL;
  for (int i = 0; i < n; i++) {
    h[i] = lu_get(c, order[i]);
    h2[i] = lu_get(c2, order[i]);
  }
  ASSERT_DLOCK_OK(dlock_get_multi(h, (size_t)n, &m));
  ASSERT_DLOCK_OK(dlock_get_multi(h2, (size_t)n, &m2));
  /* Connections made and scripts loaded on every master. */
  ASSERT_DLOCK_OK(dlock_trylock(m, 0, 60000));
  ASSERT_DLOCK_OK(dlock_unlock(m));

  rp_server_t *held = cg_node(g, slow);
  lu_ok(rp_cmd(held, "CLIENT PAUSE 60000 WRITE"));
  uint64_t me = dlock_owner_new();
  multi_call_t a;
  a.m = m;
  a.owner = me;
  a.rc = 0;
  atomic_init(&a.done, 0);
  pthread_t th;
  ASSERT_EQ(pthread_create(&th, NULL, multi_call_main, &a), 0);
  int granted = 0;
  for (int64_t t0 = lu_now_ms(); lu_now_ms() - t0 < 20000; lu_sleep_ms(5)) {
    granted = 0;
    for (int i = 0; i < n; i++)
      if (node[i] != slow)
        granted += (int)lu_exists(cg_node(g, node[i]), order[i]);
    if (granted == 4)
      break;
  }
  ASSERT_EQ(granted, 4);
  /* The held-up master has not run its part, and the call still waits. */
  ASSERT_EQ(lu_exists(held, order[0]), 0);
  ASSERT_EQ(atomic_load(&a.done), 0);
  lu_ok(rp_cmd(held, "CLIENT UNPAUSE"));
  ASSERT_EQ(pthread_join(th, NULL), 0);
  ASSERT_DLOCK_OK(a.rc);
  char field[256];
  lu_field(field, sizeof(field), c, me);
  for (int i = 0; i < n; i++)
    ASSERT_EQ(lu_hget_num(cg_node(g, node[i]), order[i], field), 1);

  /* Another client is refused and leaves nothing of its own. */
  ASSERT_DLOCK_ERR(dlock_trylock(m2, 0, 30000), DLOCK_ETIMEDOUT);
  for (int i = 0; i < n; i++)
    ASSERT_EQ(lu_hlen(cg_node(g, node[i]), order[i]), 1);
  /* Reentrant, on every master. */
  ASSERT_DLOCK_OK(dlock_trylock_as(m, me, 0, 60000));
  for (int i = 0; i < n; i++)
    ASSERT_EQ(lu_hget_num(cg_node(g, node[i]), order[i], field), 2);
  ASSERT_DLOCK_OK(dlock_unlock_as(m, me));
  ASSERT_DLOCK_OK(dlock_unlock_as(m, me));
  for (int i = 0; i < n; i++)
    ASSERT_EQ(lu_exists(cg_node(g, node[i]), order[i]), 0);
  ASSERT_DLOCK_OK(dlock_trylock(m2, 0, 30000));
  ASSERT_DLOCK_OK(dlock_unlock(m2));

  /* The last part's slot moves to the held-up master while the MultiLock
   * is held (a migration's three steps: while the keys move, a lock
   * script on a slot in migration waits for its end, whatever sends it).
   * The release sent where the slot was meets MOVED, and so does the other
   * client's acquisition later: those parts are sent again through the
   * routing, which follows the redirection. */
  int last = n - 1, from = node[last], to = slow;
  int slot = dlock__key_slot(order[last], strlen(order[last]));
  ASSERT_DLOCK_OK(dlock_trylock_as(m, me, 0, 60000));
  ASSERT_EQ(cg_migrate_begin(g, slot, from, to), 0);
  ASSERT_EQ(cg_migrate_keys(g, slot, from, to), 0);
  ASSERT_EQ(cg_migrate_end(g, slot, to), 0);
  ASSERT_EQ(lu_hget_num(cg_node(g, to), order[last], field), 1);
  ASSERT_DLOCK_OK(dlock_unlock_as(m, me));
  node[last] = to;
  for (int i = 0; i < n; i++)
    ASSERT_EQ(lu_exists(cg_node(g, node[i]), order[i]), 0);
  uint64_t other = dlock_owner_new();
  char field2[256];
  lu_field(field2, sizeof(field2), c2, other);
  ASSERT_DLOCK_OK(dlock_trylock_as(m2, other, 0, 30000));
  for (int i = 0; i < n; i++)
    ASSERT_EQ(lu_hget_num(cg_node(g, node[i]), order[i], field2), 1);
  ASSERT_DLOCK_OK(dlock_unlock_as(m2, other));
  for (int i = 0; i < n; i++)
    ASSERT_EQ(lu_exists(cg_node(g, node[i]), order[i]), 0);
  dlock_free(m);
  dlock_free(m2);
  for (int i = 0; i < n; i++) {
    dlock_free(h[i]);
    dlock_free(h2[i]);
  }
  dlock_client_close(c);
  dlock_client_close(c2);
  cg_free(g);
}

/* A waiter of every kind (plain, fair, read-write, semaphore) on each
 * name of 'names' (one per master, 'owner' its node): 'b' waits for what
 * 'a' holds, 'await' returns once the waiter listens for the release
 * (where it should), and the release wakes it, well before the 30 s
 * lease. */
static void wake_every_kind(cg_group_t *g, dlock_client_t *a, dlock_client_t *b,
                            char names[][32], const int *owner,
                            void (*await)(cg_group_t *, int, const char *)) {
  for (int k = 0; k < 3; k++) {
    const char *name = names[k];
    char what[160];
    /* Plain. */
    dlock_t *h = lu_get(a, name);
    waiter_arg w = {lu_get(b, name), 1, 0, dlock_owner_new()};
    ASSERT_DLOCK_OK(dlock_lock(h, 30000));
    pthread_t t;
    ASSERT_EQ(pthread_create(&t, NULL, waiter, &w), 0);
    await(g, owner[k], name);
    int64_t released = lu_now_ms();
    ASSERT_DLOCK_OK(dlock_unlock(h));
    snprintf(what, sizeof(what), "%s plain", name);
    woken(t, &w.rc, &w.got_ms, released, what);
    ASSERT_DLOCK_OK(dlock_unlock_as(w.l, w.owner));
    dlock_free(h);
    dlock_free(w.l);

    /* Fair. */
    char fair[128];
    snprintf(fair, sizeof(fair), "{%s}:fair", name);
    dlock_t *f = NULL;
    ASSERT_DLOCK_OK(dlock_get_fair(a, fair, &f));
    waiter_arg fw = {NULL, 1, 0, dlock_owner_new()};
    ASSERT_DLOCK_OK(dlock_get_fair(b, fair, &fw.l));
    ASSERT_DLOCK_OK(dlock_lock(f, 30000));
    ASSERT_EQ(pthread_create(&t, NULL, waiter, &fw), 0);
    await(g, owner[k], fair);
    released = lu_now_ms();
    ASSERT_DLOCK_OK(dlock_unlock(f));
    snprintf(what, sizeof(what), "%s fair", name);
    woken(t, &fw.rc, &fw.got_ms, released, what);
    ASSERT_DLOCK_OK(dlock_unlock_as(fw.l, fw.owner));
    dlock_free(f);
    dlock_free(fw.l);

    /* Read-write: a reader waits for the writer. */
    char rw[128];
    snprintf(rw, sizeof(rw), "{%s}:rw", name);
    dlock_t *r = NULL, *wr = NULL, *r2 = NULL, *w2 = NULL;
    ASSERT_DLOCK_OK(dlock_get_rw(a, rw, &r, &wr));
    ASSERT_DLOCK_OK(dlock_get_rw(b, rw, &r2, &w2));
    waiter_arg rwait = {r2, 1, 0, dlock_owner_new()};
    ASSERT_DLOCK_OK(dlock_lock(wr, 30000));
    ASSERT_EQ(pthread_create(&t, NULL, waiter, &rwait), 0);
    await(g, owner[k], rw);
    released = lu_now_ms();
    ASSERT_DLOCK_OK(dlock_unlock(wr));
    snprintf(what, sizeof(what), "%s read-write", name);
    woken(t, &rwait.rc, &rwait.got_ms, released, what);
    ASSERT_DLOCK_OK(dlock_unlock_as(r2, rwait.owner));
    dlock_free(r);
    dlock_free(wr);
    dlock_free(r2);
    dlock_free(w2);

    /* Semaphore: one permit, taken; a waiter for it. */
    char semname[128];
    snprintf(semname, sizeof(semname), "{%s}:sem", name);
    dlock_sem_t *s = NULL;
    sem_waiter_arg sw = {NULL, 1, 0};
    ASSERT_DLOCK_OK(dlock_sem_get(a, semname, &s));
    ASSERT_DLOCK_OK(dlock_sem_get(b, semname, &sw.s));
    ASSERT_EQ(dlock_sem_try_set_permits(s, 1), 1);
    ASSERT_DLOCK_OK(dlock_sem_acquire(s, 1, 0));
    ASSERT_EQ(pthread_create(&t, NULL, sem_waiter, &sw), 0);
    await(g, owner[k], semname);
    released = lu_now_ms();
    ASSERT_DLOCK_OK(dlock_sem_release(s, 1));
    snprintf(what, sizeof(what), "%s semaphore", name);
    woken(t, &sw.rc, &sw.got_ms, released, what);
    ASSERT_DLOCK_OK(dlock_sem_release(sw.s, 1));
    dlock_sem_free(s);
    dlock_sem_free(sw.s);
  }
}

/* A raw connection to node 'node' that subscribes to the lock's channel
 * with 'subscribe' (SUBSCRIBE or SSUBSCRIBE) hears dlock's unlock of 'h'
 * (lock 'name') as 'kind' (message or smessage) with the payload 0. */
static void raw_hears_unlock(cg_group_t *g, int node, dlock_t *h,
                             const char *name, const char *subscribe,
                             const char *kind) {
  char chan[128];
  lu_channel(chan, sizeof(chan), name, strlen(name));
  redisContext *raw = lu_connect(cg_node(g, node));
  ASSERT_NOT_NULL(raw);
  redisReply *rr = redisCommand(raw, "%s %s", subscribe, chan);
  ASSERT_NOT_NULL(rr);
  ASSERT_EQ(rr->type, REDIS_REPLY_ARRAY);
  freeReplyObject(rr);
  struct timeval tv = {10, 0};
  redisSetTimeout(raw, tv);
  ASSERT_DLOCK_OK(dlock_lock(h, 30000));
  ASSERT_DLOCK_OK(dlock_unlock(h));
  void *msg = NULL;
  ASSERT_EQ(redisGetReply(raw, &msg), REDIS_OK);
  rr = msg;
  ASSERT_EQ(rr->type, REDIS_REPLY_ARRAY);
  ASSERT_EQ(rr->elements, 3);
  ASSERT_STR_EQ(rr->element[0]->str, kind);
  ASSERT_STR_EQ(rr->element[1]->str, chan);
  ASSERT_STR_EQ(rr->element[2]->str, "0");
  freeReplyObject(rr);
  redisFree(raw);
}

/* A Redisson-layout peer on node 'node' ('sharded': publishing with
 * SPUBLISH) and a dlock waiter of client 'b' on 'name': the peer's
 * release wakes the waiter long before the 30 s lease runs out ('await'
 * returns once the waiter listens), and the peer sees dlock's hold, then
 * its end. */
static void peer_and_waiter_wake_each_other(
    cg_group_t *g, int node, int sharded, dlock_client_t *b, const char *name,
    void (*await)(cg_group_t *, int, const char *)) {
  rs_client_t *peer = rs_client_new(cg_node(g, node), "java-peer");
  peer->sharded = sharded;
  ASSERT_EQ(rs_lock_try(peer, name, 1, 30000), -1);
  waiter_arg pw = {lu_get(b, name), 1, 0, dlock_owner_new()};
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, waiter, &pw), 0);
  await(g, node, name);
  int64_t released = lu_now_ms();
  ASSERT_EQ(rs_unlock(peer, name, 1, 30000), 1);
  woken(t, &pw.rc, &pw.got_ms, released, "released by the Redisson peer");
  ASSERT_GT(rs_lock_try(peer, name, 1, 30000), 0);
  ASSERT_DLOCK_OK(dlock_unlock_as(pw.l, pw.owner));
  ASSERT_EQ(rs_lock_try(peer, name, 1, 30000), -1);
  ASSERT_EQ(rs_unlock(peer, name, 1, 30000), 1);
  rs_client_free(peer);
  dlock_free(pw.l);
}

/*
 * On a Redis 7 cluster dlock does what Redisson does there: its scripts
 * publish with SPUBLISH and its waiters subscribe with SSUBSCRIBE on the
 * master of the channel's slot (and never with SUBSCRIBE). A waiter of
 * every kind (plain, fair, read-write, semaphore) on every master is
 * woken by the release; a raw SSUBSCRIBE on the slot's master (what a
 * Redisson waiter does) hears dlock's unlock message; a Redisson-layout
 * peer that publishes with SPUBLISH wakes a dlock waiter; and a waiter
 * whose slot moves to another master while it waits (Redis drops the
 * sharded subscription) follows it and is woken by the release there.
 */
TEST(cluster_sharded_pubsub) {
  cg_group_t *g = cluster();
  char names[3][32];
  int owner[3];
  spread_names(g, "shard", 1, names, owner);
  dlock_client_t *a = cluster_client(g, 30000), *b = cluster_client(g, 30000);

  wake_every_kind(g, a, b, names, owner, await_shard_sub);

  /* What a Redisson waiter hears: SSUBSCRIBE on the slot's master, and
   * dlock's release announced there with SPUBLISH. */
  const char *name = names[0];
  dlock_t *h = lu_get(a, name);
  raw_hears_unlock(g, owner[0], h, name, "SSUBSCRIBE", "smessage");

  /* A Redisson-layout peer on a cluster publishes with SPUBLISH: it and a
   * dlock waiter wake each other. */
  peer_and_waiter_wake_each_other(g, owner[0], 1, b, name, await_shard_sub);

  /* The slot of an awaited lock moves to another master: Redis drops the
   * waiter's sharded subscription, the waiter subscribes again on the new
   * master, and the release there wakes it. */
  int slot = dlock__key_slot(name, strlen(name));
  int from = owner[0], to = owner[1];
  waiter_arg mw = {lu_get(b, name), 1, 0, dlock_owner_new()};
  ASSERT_DLOCK_OK(dlock_lock(h, 30000));
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, waiter, &mw), 0);
  await_shard_sub(g, from, name);
  ASSERT_EQ(cg_migrate_begin(g, slot, from, to), 0);
  ASSERT_EQ(cg_migrate_keys(g, slot, from, to), 0);
  ASSERT_EQ(cg_migrate_end(g, slot, to), 0);
  await_shard_sub(g, to, name);
  ASSERT_EQ(channels_on(g, from, 1, name), 0);
  ASSERT_EQ(mw.rc, 1); /* still waiting */
  int64_t released = lu_now_ms();
  ASSERT_DLOCK_OK(dlock_unlock(h));
  woken(t, &mw.rc, &mw.got_ms, released, "after the slot moved");
  ASSERT_EQ(lu_exists(cg_node(g, to), name), 1);
  ASSERT_DLOCK_OK(dlock_unlock_as(mw.l, mw.owner));
  dlock_free(mw.l);
  dlock_free(h);
  dlock_client_close(a);
  dlock_client_close(b);
  cg_free(g);
}

/* Waits (up to 20 s) until some node has a classic subscription matching
 * 'part' (a classic PUBLISH on a cluster reaches every node, so a waiter
 * may listen on any), and checks that no node has a sharded one. 'i' is
 * the master of the name's slot, named in the failure. */
static void await_classic_sub(cg_group_t *g, int i, const char *part) {
  int64_t until = lu_now_ms() + 20000;
  for (;;) {
    int found = 0;
    for (int k = 0; k < cg_nnodes(g); k++)
      if (rp_pid(cg_node(g, k)) > 0)
        found += channels_on(g, k, 0, part);
    if (found > 0)
      break;
    if (lu_now_ms() > until)
      TEST_FAIL("no node has a classic subscription matching %s in 20 s "
                "(sharded ones on the slot's master: %d)",
                part, channels_on(g, i, 1, part));
    lu_sleep_ms(20);
  }
  for (int k = 0; k < cg_nnodes(g); k++)
    if (rp_pid(cg_node(g, k)) > 0)
      ASSERT_EQ(channels_on(g, k, 1, part), 0);
}

/*
 * Classic pub/sub on a cluster, for the clients of 'url' (the cluster's,
 * with a query or not): their scripts publish with PUBLISH, which the
 * cluster carries to every node, and their waiters subscribe with
 * SUBSCRIBE. A waiter of every kind on every master is woken by the
 * release; a raw SUBSCRIBE on a node that does not own the lock's slot
 * (what a Redisson client in the same mode does) hears dlock's unlock
 * message; and a Redisson-layout peer that publishes with PUBLISH wakes a
 * dlock waiter.
 */
static void classic_pubsub(cg_group_t *g, const char *url) {
  dlock_options_t o;
  dlock_options_init(&o);
  o.url = url;
  o.connect_timeout_ms = 2000;
  o.command_timeout_ms = 5000;
  o.watchdog_timeout_ms = 30000;
  char names[3][32];
  int owner[3];
  spread_names(g, "classic", 1, names, owner);
  dlock_client_t *a = lu_client_opts(&o), *b = lu_client_opts(&o);

  wake_every_kind(g, a, b, names, owner, await_classic_sub);

  /* What a Redisson waiter in classic mode hears: SUBSCRIBE on any node,
   * here one that does not serve the lock's slot. */
  const char *name = names[0];
  int other = owner[0] == 0 ? 1 : 0;
  ASSERT_NE(cg_master_of_slot(g, 0, dlock__key_slot(name, strlen(name))),
            other);
  dlock_t *h = lu_get(a, name);
  raw_hears_unlock(g, other, h, name, "SUBSCRIBE", "message");

  /* A Redisson-layout peer in classic mode: its PUBLISH wakes a dlock
   * waiter long before the 30 s lease runs out, and it sees dlock's hold
   * and its end. */
  peer_and_waiter_wake_each_other(g, owner[0], 0, b, name, await_classic_sub);
  dlock_free(h);
  dlock_client_close(a);
  dlock_client_close(b);
}

/* Where the cluster refuses SPUBLISH, dlock finds out at open (the
 * SPUBLISH of its probe is refused) and falls back to classic pub/sub.
 * (Redisson, which asks PUBSUB SHARDNUMSUB only, would pick sharded pub/sub
 * here, and its releases would fail.) */
TEST(cluster_classic_pubsub) {
  cg_group_t *g = NULL;
  int64_t t0 = lu_now_ms();
  ASSERT_EQ(cg_start_conf(CG_NO_SHARDED_PUBSUB, &g), 0);
  printf("cluster without sharded pub/sub up in %" PRId64 " ms: %s\n",
         lu_now_ms() - t0, cg_url(g));
  /* The nodes do refuse it. */
  for (int k = 0; k < cg_nnodes(g); k++) {
    redisReply *r = rp_cmd(cg_node(g, k), "SPUBLISH x y");
    ASSERT_NOT_NULL(r);
    ASSERT_EQ(r->type, REDIS_REPLY_ERROR);
    freeReplyObject(r);
  }
  classic_pubsub(g, cg_url(g));
  cg_free(g);
}

/* Where the cluster runs SPUBLISH but denies PUBSUB SHARDNUMSUB (an ACL
 * rule here), Redisson, whose start-up probe is that command, uses classic
 * pub/sub; so does dlock, which asks it too. */
TEST(cluster_classic_pubsub_shardnumsub_denied) {
  cg_group_t *g = NULL;
  ASSERT_EQ(cg_start_conf("user default on nopass ~* &* +@all "
                          "-pubsub|shardnumsub",
                          &g),
            0);
  for (int k = 0; k < cg_nnodes(g); k++) {
    redisReply *r = rp_cmd(cg_node(g, k), "PUBSUB SHARDNUMSUB 0");
    ASSERT_NOT_NULL(r);
    ASSERT_EQ(r->type, REDIS_REPLY_ERROR);
    freeReplyObject(r);
  }
  classic_pubsub(g, cg_url(g));
  cg_free(g);
}

/* The node a client's classic subscriber listens on is killed (with the
 * seeds being masters, a master: its replica is then promoted) while a
 * waiter of that client waits on a name another master serves. The
 * subscriber moves to another node and subscribes again, and the release
 * wakes the waiter long before the holder's 60 s lease. */
TEST(cluster_classic_pubsub_node_killed) {
  cg_group_t *g = NULL;
  ASSERT_EQ(cg_start_conf(CG_NO_SHARDED_PUBSUB, &g), 0);
  char names[3][32];
  int owner[3];
  spread_names(g, "ckill", 1, names, owner);
  dlock_client_t *a = cluster_client(g, 30000), *b = cluster_client(g, 30000);

  /* Which node b's subscriber is on: a first waiter shows it. */
  dlock_t *h = lu_get(a, names[0]);
  waiter_arg w = {lu_get(b, names[0]), 1, 0, dlock_owner_new()};
  ASSERT_DLOCK_OK(dlock_lock(h, 60000));
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, waiter, &w), 0);
  await_classic_sub(g, owner[0], names[0]);
  int sub = -1;
  for (int k = 0; k < cg_nnodes(g) && sub < 0; k++)
    if (channels_on(g, k, 0, names[0]) > 0)
      sub = k;
  ASSERT_GE(sub, 0);
  int64_t released = lu_now_ms();
  ASSERT_DLOCK_OK(dlock_unlock(h));
  woken(t, &w.rc, &w.got_ms, released, "before the kill");
  ASSERT_DLOCK_OK(dlock_unlock_as(w.l, w.owner));
  dlock_free(h);
  dlock_free(w.l);

  int k = owner[0] != sub ? 0 : 1;
  ASSERT_NE(owner[k], sub);
  h = lu_get(a, names[k]);
  waiter_arg kw = {lu_get(b, names[k]), 1, 0, dlock_owner_new()};
  ASSERT_DLOCK_OK(dlock_lock(h, 60000));
  ASSERT_EQ(pthread_create(&t, NULL, waiter, &kw), 0);
  await_classic_sub(g, owner[k], names[k]);
  ASSERT_GT(channels_on(g, sub, 0, names[k]), 0);
  int64_t t0 = lu_now_ms();
  ASSERT_EQ(rp_kill(cg_node(g, sub)), 0);
  /* await_classic_sub looks at live nodes only. */
  await_classic_sub(g, owner[k], names[k]);
  printf("node %d killed; the waiter listens again on another node after "
         "%" PRId64 " ms\n",
         sub, lu_now_ms() - t0);
  ASSERT_EQ(kw.rc, 1); /* still waiting */
  released = lu_now_ms();
  /* The cluster may be failing over the killed master: the release rides
   * that out within its outage wait. */
  ASSERT_DLOCK_OK(dlock_unlock(h));
  printf("unlock done %" PRId64 " ms after the kill\n", lu_now_ms() - t0);
  pthread_join(t, NULL);
  ASSERT_DLOCK_OK(kw.rc);
  printf("waiter woken %" PRId64 " ms after the release began\n",
         kw.got_ms - released);
  ASSERT_LT(kw.got_ms - released, 20000);
  ASSERT_DLOCK_OK(dlock_unlock_as(kw.l, kw.owner));
  dlock_free(h);
  dlock_free(kw.l);
  dlock_client_close(a);
  dlock_client_close(b);
  cg_free(g);
}

/* On a Redis 7 cluster, a URL with sharded_pubsub=off keeps dlock on
 * classic pub/sub (as Redisson's shardedSubscriptionMode OFF), for peers
 * that speak nothing else. */
TEST(cluster_sharded_pubsub_off) {
  cg_group_t *g = cluster();
  char url[256];
  snprintf(url, sizeof(url), "%s?sharded_pubsub=off", cg_url(g));
  classic_pubsub(g, url);
  cg_free(g);
}

/* ---- the dlock command --------------------------------------------------
 */

#ifdef DLOCK_CLI_PATH
/* Runs "dlock --url URL args..." with its output in 'out'; exit status. */
static int run_dlock(const char *url, const char *out,
                     const char *const *args) {
  const char *argv[16];
  int n = 0;
  argv[n++] = DLOCK_CLI_PATH;
  argv[n++] = "--url";
  argv[n++] = url;
  for (int i = 0; args[i] != NULL && n < 15; i++)
    argv[n++] = args[i];
  argv[n] = NULL;
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  int st;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int file_has(const char *path, const char *needle) {
  char buf[8192] = {0};
  int fd = open(path, O_RDONLY);
  if (fd < 0)
    return 0;
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  return n > 0 && strstr(buf, needle) != NULL;
}

TEST(cluster_cli) {
  cg_group_t *g = cluster();
  char names[3][32];
  int owner[3];
  spread_names(g, "cli", 1, names, owner);
  char out[] = "/tmp/dlock-cluster-cli-XXXXXX";
  int fd = mkstemp(out);
  ASSERT_GE(fd, 0);
  close(fd);
  /* run: the command runs under the lock, on the master of its slot. */
  for (int k = 0; k < 3; k++) {
    char check[128];
    snprintf(check, sizeof(check), "echo ran-%s", names[k]);
    const char *args[] = {"run", names[k], "--", "sh", "-c", check, NULL};
    ASSERT_EQ(run_dlock(cg_url(g), out, args), 0);
    char want[64];
    snprintf(want, sizeof(want), "ran-%s", names[k]);
    ASSERT(file_has(out, want));
    ASSERT_EQ(lu_exists(cg_node(g, owner[k]), names[k]), 0);
  }
  /* status and unlock --force on a lock held by a library client. */
  dlock_client_t *c = cluster_client(g, 30000);
  dlock_t *l = lu_get(c, names[2]);
  ASSERT_DLOCK_OK(dlock_lock(l, 60000));
  const char *status[] = {"status", names[2], NULL};
  ASSERT_EQ(run_dlock(cg_url(g), out, status), 0);
  ASSERT(file_has(out, dlock_client_id(c)));
  const char *force[] = {"unlock", "--force", names[2], NULL};
  ASSERT_EQ(run_dlock(cg_url(g), out, force), 0);
  ASSERT_EQ(lu_exists(cg_node(g, owner[2]), names[2]), 0);
  int rc = dlock_unlock(l);
  ASSERT(rc == DLOCK_ENOTHELD || rc == DLOCK_ELOST);
  dlock_free(l);
  dlock_client_close(c);
  unlink(out);
  cg_free(g);
}
#endif

typedef struct try_call {
  dlock_t *l;
  int rc;
  int64_t done_ms;
  char err[256];
} try_call_t;

static void *try_call_main(void *p) {
  try_call_t *t = p;
  t->rc = dlock_trylock(t->l, 0, 30000);
  t->done_ms = lu_now_ms();
  snprintf(t->err, sizeof(t->err), "%s", t->rc < 0 ? dlock_last_error() : "");
  return NULL;
}

/*
 * TRYAGAIN is retried until the caller's deadline, however many times it
 * comes. While a slot migrates with the lock's key still on its source and
 * its fencing counter already moved, the acquisition script (which names
 * both) meets TRYAGAIN on the source for as long as that lasts; here 2 s,
 * after which the migration ends and the attempt finds the lock held.
 * Before, TRYAGAIN counted as a redirection and the call failed with
 * DLOCK_EIO after 16 of them, about a second in.
 */
TEST(cluster_tryagain_retried_until_the_deadline) {
  cg_group_t *g = cluster();
  const char *name = "tryagain";
  char token[64];
  snprintf(token, sizeof(token), "redisson_lock_token:{%s}", name);
  int slot = dlock__key_slot(name, strlen(name));
  int from = cg_master_of_slot(g, 0, slot), to = -1;
  int masters[6], nm = cg_masters(g, masters);
  for (int k = 0; k < nm && to < 0; k++)
    if (masters[k] != from)
      to = masters[k];
  ASSERT_GE(from, 0);
  ASSERT_GE(to, 0);
  dlock_client_t *a = cluster_client(g, 30000), *b = cluster_client(g, 30000);
  dlock_t *ha = lu_get(a, name), *hb = lu_get(b, name);
  ASSERT_DLOCK_OK(dlock_lock(ha, 30000));
  ASSERT_EQ(lu_exists(cg_node(g, from), token), 1);
  /* The counter goes ahead of the lock's key. */
  ASSERT_EQ(cg_migrate_begin(g, slot, from, to), 0);
  char port[16];
  snprintf(port, sizeof(port), "%d", rp_port(cg_node(g, to)));
  redisReply *r =
      rp_cmd(cg_node(g, from), "MIGRATE 127.0.0.1 %s %s 0 5000", port, token);
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->type, REDIS_REPLY_STATUS);
  freeReplyObject(r);
  try_call_t t = {hb, 0, 0, ""};
  pthread_t th;
  int64_t t0 = lu_now_ms();
  ASSERT_EQ(pthread_create(&th, NULL, try_call_main, &t), 0);
  lu_sleep_ms(2000);
  int64_t ended = lu_now_ms();
  ASSERT_EQ(cg_migrate_keys(g, slot, from, to), 0);
  ASSERT_EQ(cg_migrate_end(g, slot, to), 0);
  pthread_join(th, NULL);
  printf("attempt: %s %s after %" PRId64 " ms (migration ended at %" PRId64
         " ms)\n",
         t.rc < 0 ? dlock_err_name(t.rc) : "granted", t.err, t.done_ms - t0,
         ended - t0);
  /* Held by 'a': refused as busy, answered after the migration ended. */
  ASSERT_EQ(t.rc, DLOCK_ETIMEDOUT);
  ASSERT(strstr(t.err, "held by another owner") != NULL);
  ASSERT_GE(t.done_ms, ended);
  ASSERT_DLOCK_OK(dlock_unlock(ha));
  dlock_free(ha);
  dlock_free(hb);
  dlock_client_close(a);
  dlock_client_close(b);
  cg_free(g);
}

/*
 * A RedLock whose nodes include a cluster: one node is the cluster (its
 * client on the redis-cluster:// URL, the lock on the master of the
 * name's slot), two are single servers. The RedLock is granted on all
 * three, keeps out a second RedLock over the same nodes, raises its
 * fencing token on every node that granted it (the cluster's counter
 * included, through its routing), and leaves nothing behind.
 */
TEST(cluster_as_a_redlock_node) {
  cg_group_t *g = cluster();
  rp_server_t *s1 = lu_server(0), *s2 = lu_server(0);
  const char *name = "red-on-cluster";
  int slot = dlock__key_slot(name, strlen(name));
  int m = cg_master_of_slot(g, 0, slot);
  ASSERT_GE(m, 0);
  dlock_client_t *cc[2] = {cluster_client(g, 30000), cluster_client(g, 30000)};
  dlock_client_t *sc1[2] = {lu_client(s1), lu_client(s1)};
  dlock_client_t *sc2[2] = {lu_client(s2), lu_client(s2)};
  dlock_t *parts[2][3], *red[2];
  for (int k = 0; k < 2; k++) {
    parts[k][0] = lu_get(cc[k], name);
    parts[k][1] = lu_get(sc1[k], name);
    parts[k][2] = lu_get(sc2[k], name);
    ASSERT_DLOCK_OK(dlock_get_red(parts[k], 3, &red[k]));
  }
  ASSERT_DLOCK_OK(dlock_lock(red[0], 30000));
  ASSERT_EQ(lu_exists(cg_node(g, m), name), 1);
  ASSERT_EQ(lu_exists(s1, name), 1);
  ASSERT_EQ(lu_exists(s2, name), 1);
  uint64_t token = dlock_token(red[0]);
  ASSERT_GT(token, 0);
  /* The cluster's counter was raised to the RedLock's token too. */
  char token_key[64];
  snprintf(token_key, sizeof(token_key), "redisson_lock_token:{%s}", name);
  ASSERT_GE(lu_get_num_n(cg_node(g, m), token_key, strlen(token_key)),
            (int64_t)token);
  /* Another RedLock over the same nodes is kept out. */
  ASSERT_DLOCK_ERR(dlock_trylock(red[1], 0, 30000), DLOCK_ETIMEDOUT);
  ASSERT_DLOCK_OK(dlock_unlock(red[0]));
  ASSERT_EQ(lu_exists(cg_node(g, m), name), 0);
  ASSERT_EQ(lu_exists(s1, name), 0);
  ASSERT_EQ(lu_exists(s2, name), 0);
  /* Now the other one gets it, with a larger token. */
  ASSERT_DLOCK_OK(dlock_trylock(red[1], 0, 30000));
  ASSERT_GT(dlock_token(red[1]), token);
  ASSERT_DLOCK_OK(dlock_unlock(red[1]));
  for (int k = 0; k < 2; k++) {
    dlock_free(red[k]);
    for (int i = 0; i < 3; i++)
      dlock_free(parts[k][i]);
    dlock_client_close(cc[k]);
    dlock_client_close(sc1[k]);
    dlock_client_close(sc2[k]);
  }
  rp_free(s1);
  rp_free(s2);
  cg_free(g);
}
