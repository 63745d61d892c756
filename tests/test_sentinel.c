/*
 * Replicated Redis: a master, two replicas and three Sentinels on loopback
 * (harness/sentinel_group.h). Discovery through a redis-sentinel:// URL
 * (the next Sentinel when one is down, a stale one not believed), locks
 * held and waited on across SENTINEL FAILOVER and a SIGKILL of the master,
 * a trylock started during a failover, replica sync (no double grant with
 * it; a double grant without it), and the dlock command across a failover.
 *
 * Failovers take seconds (a master is judged down after 1 s here), so each
 * test runs few of them; every wait is bounded generously, never tightly.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness/fake_server.h"
#include "harness/sentinel_group.h"
#include "lock_util.h"

/* A failover, from the master's death to a new master the Sentinels name,
 * takes 2-4 s with down-after-milliseconds 1000; bounds are far above. */
#define FAILOVER_LIMIT_MS 30000

static sg_group_t *group(void) {
  sg_group_t *g = NULL;
  int64_t t0 = lu_now_ms();
  ASSERT_EQ(sg_start(NULL, &g), 0);
  printf("group up in %" PRId64 " ms: %s\n", lu_now_ms() - t0, sg_url(g));
  return g;
}

/* A client of the group. The watchdog lease (10 s) is longer than a
 * failover, so that a held lock survives one. */
static void sentinel_options(dlock_options_t *o, const char *url, int sync,
                             lu_lost_t *lost) {
  dlock_options_init(o);
  o->url = url;
  o->connect_timeout_ms = 1000;
  o->command_timeout_ms = 2000;
  o->watchdog_timeout_ms = 10000;
  o->replica_sync = sync;
  if (lost != NULL) {
    o->on_lost = lu_lost_cb;
    o->on_lost_data = lost;
  }
}

static dlock_client_t *sentinel_client(sg_group_t *g, int sync,
                                       lu_lost_t *lost) {
  dlock_options_t o;
  sentinel_options(&o, sg_url(g), sync, lost);
  return lu_client_opts(&o);
}

/* 1 when node 'i' has key 'key'. */
static int node_has(sg_group_t *g, int i, const char *key) {
  redisReply *r = rp_cmd(sg_node(g, i), "EXISTS %s", key);
  int yes = r != NULL && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
  freeReplyObject(r);
  return yes;
}

/* 1 when node 'i' says ROLE master. */
static int is_master_node(sg_group_t *g, int i) {
  redisReply *r = rp_cmd(sg_node(g, i), "ROLE");
  int yes = r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
            r->element[0]->type == REDIS_REPLY_STRING &&
            strcmp(r->element[0]->str, "master") == 0;
  freeReplyObject(r);
  return yes;
}

/* Asks until the client talks to Redis again (a query does not ride an
 * outage out); returns what it says. */
static int held_now(dlock_t *l, int64_t limit_ms) {
  int64_t until = lu_now_ms() + limit_ms;
  int rc;
  while ((rc = dlock_is_held(l)) < 0 && lu_now_ms() < until)
    lu_sleep_ms(50);
  return rc;
}

TEST(sentinel_discovers_the_master) {
  sg_group_t *g = group();
  /* The first Sentinel of the URL is down: the next one is asked. */
  ASSERT_EQ(rp_stop(sg_sentinel(g, 0)), 0);
  dlock_client_t *c = sentinel_client(g, 1, NULL);
  dlock_t *l = lu_get(c, "sent:a");
  ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));
  /* On the master, and, with replica sync, on both replicas by the time
   * the call returned. */
  for (int i = 0; i < sg_nnodes(g); i++)
    ASSERT_EQ(node_has(g, i, "sent:a"), 1);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  ASSERT_EQ(node_has(g, 0, "sent:a"), 0);
  dlock_free(l);
  dlock_client_close(c);
  sg_free(g);
}

/*
 * Through Sentinel with replica sync, a MultiLock of eight parts sends the
 * eight scripts and one WAIT after them in one pipeline, once the scripts
 * are loaded, also when the master's count of replicas is due to be read
 * again (its INFO rides after the WAIT: the pause before the third round);
 * and every part is on both replicas when it returns.
 */
TEST(sentinel_multilock_one_wait_per_attempt) {
  enum { PARTS = 8 };
  sg_group_t *g = group();
  dlock_client_t *c = sentinel_client(g, 1, NULL);
  dlock_t *h[PARTS], *m = NULL;
  char names[PARTS][16];
  for (int i = 0; i < PARTS; i++) {
    snprintf(names[i], sizeof(names[i]), "sent:m%d", i);
    h[i] = lu_get(c, names[i]);
  }
  ASSERT_DLOCK_OK(dlock_get_multi(h, PARTS, &m));
  int mi = sg_master_index(g);
  ASSERT_GE(mi, 0);
  rp_server_t *master = sg_node(g, mi);
  for (int round = 0; round < 4; round++) {
    if (round == 2)
      lu_sleep_ms(1100);
    int64_t waits = lu_cmd_calls(master, "wait");
    ASSERT_DLOCK_OK(dlock_lock(m, 30000));
    int64_t took = lu_cmd_calls(master, "wait") - waits;
    printf("round %d: %" PRId64 " WAITs for %d parts\n", round, took,
           (int)PARTS);
    /* The first round loads the scripts, one part after the other. */
    if (round > 0)
      ASSERT_EQ(took, 1);
    for (int i = 0; i < sg_nnodes(g); i++)
      for (int k = 0; k < PARTS; k++)
        ASSERT_EQ(node_has(g, i, names[k]), 1);
    ASSERT_DLOCK_OK(dlock_unlock(m));
    for (int k = 0; k < PARTS; k++)
      ASSERT_EQ(node_has(g, mi, names[k]), 0);
  }
  dlock_free(m);
  for (int i = 0; i < PARTS; i++)
    dlock_free(h[i]);
  dlock_client_close(c);
  sg_free(g);
}

/*
 * A Sentinel that names a replica as the master (stale, or lying: a fake
 * here, first in the URL) is not believed: ROLE on the address says
 * "slave", and the next Sentinel is asked. Without the ROLE check the
 * client would connect to the replica and every write would fail.
 */
TEST(sentinel_stale_sentinel_is_not_believed) {
  sg_group_t *g = group();
  fs_server_t *fake = fs_start();
  char reply[128];
  char port[16];
  snprintf(port, sizeof(port), "%d", rp_port(sg_node(g, 1)));
  snprintf(reply, sizeof(reply), "*2\r\n$9\r\n127.0.0.1\r\n$%zu\r\n%s\r\n",
           strlen(port), port);
  fs_set(fake, "SENTINEL", &(fs_action_t){.reply = reply});
  /* The fake first, then the real Sentinels. */
  const char *real = strstr(sg_url(g), "//") + 2;
  char url[512];
  snprintf(url, sizeof(url), "redis-sentinel://127.0.0.1:%d,%s", fs_port(fake),
           real);
  dlock_options_t o;
  sentinel_options(&o, url, 1, NULL);
  dlock_client_t *c = lu_client_opts(&o);
  ASSERT_GE(fs_count(fake, "SENTINEL"), 1);
  dlock_t *l = lu_get(c, "sent:stale");
  ASSERT_DLOCK_OK(dlock_trylock(l, 0, 30000));
  ASSERT_EQ(node_has(g, 0, "sent:stale"), 1);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  dlock_free(l);
  dlock_client_close(c);
  fs_free(fake);
  sg_free(g);
}

/* A thread that waits for a lock, and when it got it, how long after
 * the start. */
typedef struct waiter {
  dlock_t *l;
  uint64_t owner; /* the owner it waits as */
  int64_t wait_ms;
  int rc;
  int64_t got_ms; /* lu_now_ms() when the call returned */
  char detail[256];
} waiter_t;

static void *wait_thread(void *p) {
  waiter_t *w = p;
  w->rc = dlock_trylock_as(w->l, w->owner, w->wait_ms, DLOCK_WATCHDOG);
  w->got_ms = lu_now_ms();
  snprintf(w->detail, sizeof(w->detail), "%s", dlock_last_error());
  return NULL;
}

/*
 * SENTINEL FAILOVER while one client holds a lock (watchdog) and another
 * waits for it. With replica sync the hold was on the replicas before its
 * call returned, so the new master has it: the holder keeps it (no loss
 * reported, its unlock succeeds) and the waiter gets it only after that
 * unlock, from the new master.
 */
TEST(sentinel_manual_failover_keeps_held_and_waited_locks) {
  sg_group_t *g = group();
  lu_lost_t lost;
  lu_lost_init(&lost);
  dlock_client_t *a = sentinel_client(g, 1, &lost);
  dlock_client_t *b = sentinel_client(g, 1, NULL);
  dlock_t *la = lu_get(a, "sent:held"), *lb = lu_get(b, "sent:held");
  ASSERT_DLOCK_OK(dlock_lock(la, DLOCK_WATCHDOG));
  uint64_t token = dlock_token(la);

  waiter_t w = {lb, dlock_owner_new(), 60000, -100, 0, ""};
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, wait_thread, &w), 0);
  lu_sleep_ms(200);

  int64_t t0 = lu_now_ms();
  int m = sg_failover(g, FAILOVER_LIMIT_MS);
  printf("SENTINEL FAILOVER: node %d is master after %" PRId64 " ms\n", m,
         lu_now_ms() - t0);
  ASSERT_GT(m, 0);
  ASSERT_EQ(node_has(g, m, "sent:held"), 1);
  /* Through two renewal periods on the new master. */
  lu_sleep_ms(7000);
  ASSERT_EQ(held_now(la, 10000), 1);
  ASSERT_EQ(lu_lost_count(&lost), 0);
  ASSERT_EQ(w.rc, -100); /* still waiting */
  ASSERT_DLOCK_OK(dlock_unlock(la));
  ASSERT_EQ(pthread_join(t, NULL), 0);
  printf("waiter: %s%s%s\n", dlock_err_name(w.rc), w.rc ? ": " : "",
         w.rc ? w.detail : "");
  ASSERT_DLOCK_OK(w.rc);
  ASSERT_GT(dlock_token_as(lb, w.owner), token);
  ASSERT_EQ(node_has(g, m, "sent:held"), 1);
  ASSERT_DLOCK_OK(dlock_unlock_as(lb, w.owner));
  ASSERT_EQ(lu_lost_count(&lost), 0);
  lu_free_two(NULL, a, la, b, lb);
  sg_free(g);
}

/*
 * SIGKILL of the master while a lock is held and another is free: a
 * trylock with a 10 s wait, started right after the kill, rides the
 * failover out and takes the free lock from the new master. The time from
 * the kill to that acquisition is compared with the Sentinels' own
 * failover time (kill to a new master they name and that says so). The
 * held lock survives (replica sync) and is renewed on the new master.
 */
TEST(sentinel_master_killed_trylock_rides_the_failover) {
  sg_group_t *g = group();
  lu_lost_t lost;
  lu_lost_init(&lost);
  dlock_client_t *a = sentinel_client(g, 1, &lost);
  dlock_client_t *b = sentinel_client(g, 1, NULL);
  dlock_t *held = lu_get(a, "sent:kept"), *free_lock = lu_get(b, "sent:free");
  ASSERT_DLOCK_OK(dlock_lock(held, DLOCK_WATCHDOG));

  int old = sg_master_index(g);
  int64_t t0 = lu_now_ms();
  ASSERT_EQ(rp_kill(sg_node(g, old)), 0);
  waiter_t w = {free_lock, dlock_owner_new(), 10000, -100, 0, ""};
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, wait_thread, &w), 0);
  int m = sg_wait_new_master(g, old, FAILOVER_LIMIT_MS);
  int64_t failover_ms = lu_now_ms() - t0;
  ASSERT_EQ(pthread_join(t, NULL), 0);
  printf("master killed; Sentinels' failover: %" PRId64 " ms; trylock(10 s) "
         "started at the kill: %s after %" PRId64 " ms%s%s\n",
         failover_ms, dlock_err_name(w.rc), w.got_ms - t0, w.rc ? ": " : "",
         w.rc ? w.detail : "");
  ASSERT_GE(m, 0);
  ASSERT_DLOCK_OK(w.rc);
  /* On the master the Sentinels name now: usually the first one promoted,
   * but a failover whose promotion does not complete in time is started
   * again and may promote the other replica. */
  int now_m = sg_wait_new_master(g, old, FAILOVER_LIMIT_MS);
  printf("first new master %d, master now %d\n", m, now_m);
  ASSERT_GE(now_m, 0);
  if (node_has(g, now_m, "sent:free") != 1) {
    /* Where the lock is, if anywhere, for whoever reads the failure. */
    for (int i = 0; i < sg_nnodes(g); i++)
      if (i != old)
        printf("node %d: has the lock %d, master %d\n", i,
               node_has(g, i, "sent:free"), is_master_node(g, i));
  }
  ASSERT_EQ(node_has(g, now_m, "sent:free"), 1);

  /* The held lock came through: renewed on the new master, not lost. */
  lu_sleep_ms(4000);
  ASSERT_EQ(held_now(held, 10000), 1);
  ASSERT_EQ(lu_lost_count(&lost), 0);
  ASSERT_DLOCK_OK(dlock_unlock(held));
  ASSERT_DLOCK_OK(dlock_unlock_as(free_lock, w.owner));
  lu_free_two(NULL, a, held, b, free_lock);
  sg_free(g);
}

/*
 * A client opened right after the master's SIGKILL, before the Sentinels
 * promote a replica: they still name the dead master, whose port refuses.
 * That is an outage the open rides out (outage_wait_ms), as a call with a
 * wait does, not a URL that never worked: the client comes up once the
 * Sentinels name a master that answers, and its trylock takes the lock
 * there. (The open used to fail at once with DLOCK_EIO, "no master ...
 * found through 3 Sentinel(s): ... Connection refused".)
 */
TEST(sentinel_client_opened_during_a_failover_rides_it) {
  sg_group_t *g = group();
  int old = sg_master_index(g);
  ASSERT_EQ(rp_kill(sg_node(g, old)), 0);
  dlock_options_t o;
  sentinel_options(&o, sg_url(g), 1, NULL);
  o.outage_wait_ms = FAILOVER_LIMIT_MS;
  dlock_client_t *c = NULL;
  int64_t t0 = lu_now_ms();
  int rc = dlock_client_open(&o, &c);
  printf("open at the kill: %s after %" PRId64 " ms%s%s\n", dlock_err_name(rc),
         lu_now_ms() - t0, rc ? ": " : "", rc ? dlock_last_error() : "");
  ASSERT_DLOCK_OK(rc);
  dlock_t *l = lu_get(c, "sent:opened");
  ASSERT_DLOCK_OK(dlock_trylock(l, FAILOVER_LIMIT_MS, 10000));
  int m = sg_wait_new_master(g, old, FAILOVER_LIMIT_MS);
  ASSERT_GE(m, 0);
  ASSERT_EQ(node_has(g, m, "sent:opened"), 1);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  dlock_free(l);
  dlock_client_close(c);
  sg_free(g);
}

/*
 * Double grants across failovers. A holds a lock; the master's links to
 * its replicas are cut (CLIENT KILL TYPE replica: they come back within a
 * second) just before the acquisition, and the master is killed right
 * after it returns, so that the acquisition reaches the replicas only if
 * the client waited for them. B then tries the lock on the new master. A
 * double grant is B getting the lock while A was told it holds it.
 *
 * With replica sync, A is told it holds the lock only once the replicas
 * acknowledged it (they are back in time, in the first round), and gets
 * DLOCK_ENOSYNC, the lock given back, when they did not (in the second
 * round they are paused through the acquisition): never a double grant. Without
 * it, the acquisition returns at once, the failover loses it and B gets the
 * lock A holds.
 */
typedef struct round_result {
  int a_rc, b_rc;
  int kept; /* the new master had A's lock */
} round_result;

/* SIGSTOPs every node of 'g' but 'old'. */
static void pause_others(sg_group_t *g, int old) {
  for (int i = 0; i < sg_nnodes(g); i++)
    if (i != old)
      ASSERT_EQ(rp_pause(sg_node(g, i)), 0);
}

static void failover_round(sg_group_t *g, int round, int sync,
                           int64_t sync_timeout_ms, int pause_replicas,
                           round_result *out) {
  char name[32];
  snprintf(name, sizeof(name), "sent:dbl:%d", round);
  dlock_options_t o;
  sentinel_options(&o, sg_url(g), sync, NULL);
  o.replica_sync_timeout_ms = sync_timeout_ms;
  dlock_client_t *a = lu_client_opts(&o);
  dlock_client_t *b = lu_client_opts(&o);
  dlock_t *la = lu_get(a, name), *lb = lu_get(b, name);
  /* A write first, so that the acquisition below is not the client's
   * first (which asks the Sentinels for the replicas). */
  ASSERT_DLOCK_OK(dlock_trylock(la, 0, 60000));
  ASSERT_DLOCK_OK(dlock_unlock(la));

  int old = sg_master_index(g);
  ASSERT_GE(old, 0);
  /* Without sync the replicas are paused before their links are cut, so
   * that none reconnects in time to be sent A's lock; with sync, after, so
   * that the master still counts them and waits for them. */
  if (pause_replicas && !sync)
    pause_others(g, old);
  redisReply *r = rp_cmd(sg_node(g, old), "CLIENT KILL TYPE replica");
  ASSERT_NOT_NULL(r);
  freeReplyObject(r);
  if (pause_replicas && sync)
    pause_others(g, old);
  out->a_rc = dlock_trylock(la, 0, 60000);
  /* Without sync the master dies before the paused replicas go on: with
   * their links cut before A's acquisition, none of them can have A's
   * lock, however slowly this runs (valgrind). */
  if (pause_replicas && !sync)
    ASSERT_EQ(rp_kill(sg_node(g, old)), 0);
  if (pause_replicas) {
    for (int i = 0; i < sg_nnodes(g); i++)
      if (i != old)
        ASSERT_EQ(rp_resume(sg_node(g, i)), 0);
  }
  if (!pause_replicas || sync)
    ASSERT_EQ(rp_kill(sg_node(g, old)), 0);
  int m = sg_wait_new_master(g, old, FAILOVER_LIMIT_MS);
  ASSERT_GE(m, 0);
  out->kept = node_has(g, m, name);
  out->b_rc = dlock_trylock(lb, 3000, 60000);
  printf("round %d (sync %s, %lld ms): A %s, new master %s, B %s%s\n", round,
         sync ? "on" : "off", (long long)sync_timeout_ms,
         dlock_err_name(out->a_rc),
         out->kept ? "has the lock" : "lacks the lock",
         dlock_err_name(out->b_rc),
         out->a_rc == 0 && out->b_rc == 0 ? ": DOUBLE GRANT" : "");
  ASSERT(out->a_rc == 0 || out->a_rc == DLOCK_ENOSYNC);
  dlock_free(la);
  dlock_free(lb);
  dlock_client_close(a);
  dlock_client_close(b);
  /* The old master back, as a replica of the new one, for the next
   * round. */
  ASSERT_EQ(sg_restart_as_replica(g, old), 0);
  ASSERT_EQ(sg_wait_replicas(g, 2, FAILOVER_LIMIT_MS), 0);
}

TEST(sentinel_replica_sync_prevents_double_grants) {
  sg_group_t *g = group();
  int doubles = 0, rounds = 2;
  for (int i = 0; i < rounds; i++) {
    round_result r;
    failover_round(g, i, 1, i == 0 ? 1000 : 300, i == 1, &r);
    if (i == 1)
      ASSERT_EQ(r.a_rc, DLOCK_ENOSYNC);
    doubles += r.a_rc == 0 && r.b_rc == 0;
    /* What A was told is what the new master has. */
    ASSERT_EQ(r.kept, r.a_rc == 0);
  }
  printf("replica sync on: %d double grant(s) in %d failovers\n", doubles,
         rounds);
  ASSERT_EQ(doubles, 0);
  sg_free(g);
}

TEST(sentinel_without_replica_sync_a_failover_double_grants) {
  sg_group_t *g = group();
  /* The replicas are paused through the acquisition and the master's
   * death, so the promoted one cannot have the lock. (Left to chance, a
   * replica that reconnected between the acquisition and the kill got it
   * after all, which a slow run under valgrind made likely.) */
  int doubles = 0, rounds = 0;
  for (; rounds < 3 && doubles == 0; rounds++) {
    round_result r;
    failover_round(g, rounds, 0, 1000, 1, &r);
    ASSERT_EQ(r.a_rc, 0);
    /* Whenever the failover lost A's hold, B got the lock. */
    if (!r.kept)
      ASSERT_EQ(r.b_rc, 0);
    doubles += r.b_rc == 0;
  }
  printf("replica sync off: %d double grant(s) in %d failover(s)\n", doubles,
         rounds);
  ASSERT_EQ(doubles, 1);
  sg_free(g);
}

/* ---- the dlock command ---------------------------------------------------
 */

#ifdef DLOCK_CLI_PATH
/* Starts "dlock --url URL --watchdog 6s run NAME -- sh -c SCRIPT" with its
 * output in 'out'. */
static pid_t start_run(const char *url, const char *name, const char *script,
                       const char *out) {
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    execl(DLOCK_CLI_PATH, "dlock", "--url", url, "--watchdog", "6s", "run",
          name, "--", "sh", "-c", script, (char *)NULL);
    _exit(127);
  }
  return pid;
}

static int wait_exit(pid_t pid, int64_t limit_ms) {
  int64_t until = lu_now_ms() + limit_ms;
  int status;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (lu_now_ms() > until) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    lu_sleep_ms(50);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void print_file(const char *path) {
  FILE *f = fopen(path, "r");
  char line[512];
  while (f != NULL && fgets(line, sizeof(line), f) != NULL)
    printf("  | %s", line);
  if (f != NULL)
    fclose(f);
}

/*
 * "dlock run" across failovers: through SENTINEL FAILOVER the lock
 * survives and the command runs to its end (exit 0); when the failover
 * loses the lock (here deleted from the new master, as a failover without
 * the replicas' copy would), the command is stopped and dlock exits 76.
 */
TEST(sentinel_cli_run_across_a_failover) {
  sg_group_t *g = group();
  char dir[] = "/tmp/dlock-sentinel-cli-XXXXXX";
  ASSERT_NOT_NULL(mkdtemp(dir));
  char out[300], done[300], script[700];
  snprintf(out, sizeof(out), "%s/out", dir);
  snprintf(done, sizeof(done), "%s/done", dir);

  /* Survives: the command sleeps through the failover and finishes. */
  snprintf(script, sizeof(script), "sleep 12; touch %s", done);
  pid_t pid = start_run(sg_url(g), "sent:run", script, out);
  int64_t until = lu_now_ms() + 20000;
  while (!node_has(g, sg_master_index(g), "sent:run") && lu_now_ms() < until)
    lu_sleep_ms(50);
  int m = sg_failover(g, FAILOVER_LIMIT_MS);
  ASSERT_GT(m, 0);
  int status = wait_exit(pid, 60000);
  printf("dlock run through SENTINEL FAILOVER: exit %d\n", status);
  print_file(out);
  ASSERT_EQ(status, 0);
  ASSERT_EQ(access(done, F_OK), 0);
  ASSERT_EQ(node_has(g, m, "sent:run"), 0);

  /* Lost: the new master does not have the lock. */
  unlink(done);
  pid = start_run(sg_url(g), "sent:run2", script, out);
  until = lu_now_ms() + 20000;
  while (!node_has(g, sg_master_index(g), "sent:run2") && lu_now_ms() < until)
    lu_sleep_ms(50);
  int old = sg_master_index(g);
  ASSERT_EQ(rp_kill(sg_node(g, old)), 0);
  m = sg_wait_new_master(g, old, FAILOVER_LIMIT_MS);
  ASSERT_GE(m, 0);
  lu_ok(rp_cmd(sg_node(g, m), "DEL sent:run2"));
  status = wait_exit(pid, 60000);
  printf("dlock run whose lock the failover lost: exit %d\n", status);
  print_file(out);
  ASSERT_EQ(status, 76);
  ASSERT(access(done, F_OK) != 0);

  unlink(out);
  rmdir(dir);
  sg_free(g);
}

/*
 * "dlock run --wait" started right after the master's SIGKILL rides the
 * failover within its wait, the open included: it runs the command once a
 * replica is promoted (it used to exit 69 at once, the open finding no
 * master through the Sentinels).
 */
TEST(sentinel_cli_run_started_at_a_master_kill) {
  sg_group_t *g = group();
  char out[] = "/tmp/dlock-sentinel-kill-XXXXXX";
  int fd = mkstemp(out);
  ASSERT_GE(fd, 0);
  close(fd);
  int old = sg_master_index(g);
  ASSERT_EQ(rp_kill(sg_node(g, old)), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int o = open(out, O_WRONLY | O_TRUNC);
    if (o >= 0) {
      dup2(o, 1);
      dup2(o, 2);
      close(o);
    }
    execl(DLOCK_CLI_PATH, "dlock", "--url", sg_url(g), "run", "--wait", "30s",
          "sent:killrun", "--", "true", (char *)NULL);
    _exit(127);
  }
  int status = wait_exit(pid, 2 * FAILOVER_LIMIT_MS);
  printf("dlock run --wait 30s at the master's kill: exit %d\n", status);
  print_file(out);
  ASSERT_EQ(status, 0);
  unlink(out);
  sg_free(g);
}
#endif

/* A SENTINEL REPLICAS entry, in RESP. */
static void replica_entry(char *buf, size_t n, int port, const char *role,
                          const char *master_host) {
  char name[32];
  snprintf(name, sizeof(name), "127.0.0.1:%d", port);
  snprintf(buf, n,
           "*8\r\n$4\r\nname\r\n$%zu\r\n%s\r\n$5\r\nflags\r\n$5\r\nslave\r\n"
           "$13\r\nrole-reported\r\n$%zu\r\n%s\r\n$11\r\nmaster-host\r\n"
           "$%zu\r\n%s\r\n",
           strlen(name), name, strlen(role), role, strlen(master_host),
           master_host);
}

/* A GET-MASTER-ADDR-BY-NAME answer naming 127.0.0.1:'port'. */
static void master_addr(char *buf, size_t n, int port) {
  char p[16];
  snprintf(p, sizeof(p), "%d", port);
  snprintf(buf, n, "*2\r\n$9\r\n127.0.0.1\r\n$%zu\r\n%s\r\n", strlen(p), p);
}

static rp_server_t *replica_of(rp_server_t *master) {
  char conf[64];
  snprintf(conf, sizeof(conf), "replicaof 127.0.0.1 %d\n", rp_port(master));
  rp_options_t o;
  rp_options_init(&o);
  o.extra_conf = conf;
  return lu_server_opts(&o);
}

/* Waits until 'master' has 'n' replicas that acknowledged its stream. */
static void wait_synced(rp_server_t *master, int n) {
  int64_t until = lu_now_ms() + 30000;
  for (;;) {
    redisReply *r = rp_cmd(master, "WAIT %d 1000", n);
    int ok = r != NULL && r->type == REDIS_REPLY_INTEGER && r->integer >= n;
    freeReplyObject(r);
    if (ok)
      return;
    ASSERT_LT(lu_now_ms(), until);
  }
}

/*
 * The replica count is taken only from a Sentinel that names the master the
 * client writes to. Here a Sentinel (a fake one, to hold the state still)
 * has moved on to a new master while the client, not told yet, still
 * writes to the old one, which keeps a replica that acknowledges its
 * writes (during a real SENTINEL FAILOVER, it is about to follow the new
 * master and drop them). Before, the client read the new master's count (1)
 * and took a lock on the old master, acknowledged by that replica: a write
 * the failover loses (the chaos scenario sentinel-failover saw fencing
 * tokens go back). Now the Sentinel's answer sends the client to the new
 * master, where the lock is taken.
 */
TEST(sentinel_count_only_from_a_sentinel_naming_this_master) {
  rp_server_t *old_master = lu_server(0), *old_replica = replica_of(old_master);
  rp_server_t *new_master = lu_server(0), *new_replica = replica_of(new_master);
  wait_synced(old_master, 1);
  wait_synced(new_master, 1);
  fs_server_t *fs = fs_start();
  char addr[128], entries[1024], e1[400], e2[400];
  master_addr(addr, sizeof(addr), rp_port(old_master));
  fs_set(fs, "SENTINEL GET-MASTER-ADDR-BY-NAME", &(fs_action_t){.reply = addr});
  replica_entry(e1, sizeof(e1), rp_port(old_replica), "slave", "127.0.0.1");
  snprintf(entries, sizeof(entries), "*1\r\n%s", e1);
  fs_set(fs, "SENTINEL REPLICAS", &(fs_action_t){.reply = entries});

  char url[128];
  snprintf(url, sizeof(url), "redis-sentinel://127.0.0.1:%d/mymaster",
           fs_port(fs));
  dlock_options_t o;
  sentinel_options(&o, url, 1, NULL);
  /* Long enough for a replica of a loaded machine; the stopped one below
   * makes its write fall short after it. */
  o.replica_sync_timeout_ms = 3000;
  o.command_timeout_ms = 5000;
  dlock_client_t *c = lu_client_opts(&o);
  dlock_t *a = lu_get(c, "count-a"), *b = lu_get(c, "count-b");
  ASSERT_EQ(dlock_trylock(a, 10000, 30000), 0);
  ASSERT_EQ(lu_exists(old_master, "count-a"), 1);
  ASSERT_EQ(dlock_unlock(a), 0);

  /* A write that falls short (the replica stopped) makes the client read
   * the count again before its next write. */
  ASSERT_EQ(rp_pause(old_replica), 0);
  ASSERT_EQ(dlock_trylock(a, 0, 30000), DLOCK_ENOSYNC);
  ASSERT_EQ(rp_resume(old_replica), 0);
  wait_synced(old_master, 1);

  /* The Sentinel names the new master now, with its replica and the old
   * master (never seen as a replica of it) listed. */
  master_addr(addr, sizeof(addr), rp_port(new_master));
  fs_set(fs, "SENTINEL GET-MASTER-ADDR-BY-NAME", &(fs_action_t){.reply = addr});
  replica_entry(e1, sizeof(e1), rp_port(new_replica), "slave", "127.0.0.1");
  replica_entry(e2, sizeof(e2), rp_port(old_master), "master", "?");
  snprintf(entries, sizeof(entries), "*2\r\n%s%s", e1, e2);
  fs_set(fs, "SENTINEL REPLICAS", &(fs_action_t){.reply = entries});

  ASSERT_EQ(dlock_trylock(b, 20000, 30000), 0);
  printf("lock on the old master %lld, on the new one %lld\n",
         (long long)lu_exists(old_master, "count-b"),
         (long long)lu_exists(new_master, "count-b"));
  ASSERT_EQ(lu_exists(old_master, "count-b"), 0);
  ASSERT_EQ(lu_exists(new_master, "count-b"), 1);
  ASSERT_EQ(dlock_unlock(b), 0);

  dlock_free(a);
  dlock_free(b);
  dlock_client_close(c);
  fs_free(fs);
  rp_free(old_replica);
  rp_free(old_master);
  rp_free(new_replica);
  rp_free(new_master);
}

typedef struct timed_call {
  dlock_t *l;
  int rc;
  int64_t done_ms;
  char err[512];
} timed_call_t;

static void *do_timed_call(void *arg) {
  timed_call_t *k = arg;
  k->rc = dlock_is_held(k->l);
  k->done_ms = lu_now_ms();
  snprintf(k->err, sizeof(k->err), "%s", dlock_last_error());
  return NULL;
}

/* A client of a Sentinel group that is one fake Sentinel listed six
 * times, naming master 'm', with 1 s commands: a lookup through Sentinels
 * that all fall silent takes about 6 s. Its fake server goes to '*fs'. */
static dlock_client_t *six_sentinels_client(rp_server_t *m, fs_server_t **fs) {
  *fs = fs_start();
  char addr[128];
  master_addr(addr, sizeof(addr), rp_port(m));
  fs_set(*fs, "SENTINEL GET-MASTER-ADDR-BY-NAME",
         &(fs_action_t){.reply = addr});
  fs_set(*fs, "SENTINEL REPLICAS", &(fs_action_t){.reply = "*0\r\n"});
  char url[256];
  int p = fs_port(*fs);
  snprintf(url, sizeof(url),
           "redis-sentinel://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d,"
           "127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/mymaster",
           p, p, p, p, p, p);
  dlock_options_t o;
  /* Without replica sync, the only SENTINEL commands are the lookup's. */
  sentinel_options(&o, url, 0, NULL);
  o.connect_timeout_ms = 5000;
  o.command_timeout_ms = 1000;
  o.outage_wait_ms = 0;
  return lu_client_opts(&o);
}

/*
 * The master is looked up through the Sentinels outside the connection's
 * mutex: while one caller waits for silent Sentinels (here one fake
 * Sentinel, listed six times, that stops answering, after the master
 * died), another caller of the same client gives up at its own deadline
 * (the command timeout, 1 s) rather than wait behind the lookup (about
 * 6 s). Before, it returned only after the lookup had ended.
 */
TEST(sentinel_lookup_does_not_hold_other_callers) {
  rp_server_t *m = lu_server(0);
  fs_server_t *fs;
  dlock_client_t *c = six_sentinels_client(m, &fs);
  dlock_t *a = lu_get(c, "lookup-a"), *b = lu_get(c, "lookup-b");
  ASSERT_EQ(dlock_trylock(a, 0, 30000), 0);
  ASSERT_EQ(dlock_unlock(a), 0);

  /* The Sentinel falls silent and the master dies: the next call looks the
   * master up, and waits for each Sentinel in turn. */
  fs_set(fs, "SENTINEL", &(fs_action_t){.how = FS_SILENT});
  ASSERT_EQ(rp_kill(m), 0);
  /* Noticed closed at the next use, which looks the master up. */
  lu_sleep_ms(200);
  timed_call_t ka = {a, 0, 0, ""}, kb = {b, 0, 0, ""};
  pthread_t ta, tb;
  int64_t t0 = lu_now_ms();
  ASSERT_EQ(pthread_create(&ta, NULL, do_timed_call, &ka), 0);
  /* B comes while A asks the Sentinels (six of them, 1 s each). */
  lu_sleep_ms(1200);
  int64_t tb0 = lu_now_ms();
  ASSERT_EQ(pthread_create(&tb, NULL, do_timed_call, &kb), 0);
  ASSERT_EQ(pthread_join(tb, NULL), 0);
  ASSERT_EQ(pthread_join(ta, NULL), 0);
  printf("A: %s\nB: %s\n", ka.err, kb.err);
  printf("lookup by A: %s after %" PRId64 " ms; B (1 s deadline): %s after "
         "%" PRId64 " ms\n",
         dlock_err_name(ka.rc), ka.done_ms - t0, dlock_err_name(kb.rc),
         kb.done_ms - tb0);
  ASSERT_EQ(ka.rc, DLOCK_EIO);
  /* B waited for A's lookup, and gave up at its own deadline, long before
   * the lookup's six silent Sentinels were through. Before, it waited
   * behind the mutex until the lookup had ended, and then failed with the
   * lookup's error. */
  ASSERT_EQ(kb.rc, DLOCK_EIO);
  ASSERT(strstr(kb.err, "being looked up") != NULL);
  ASSERT_LT(kb.done_ms - tb0, 3000);

  dlock_free(a);
  dlock_free(b);
  dlock_client_close(c);
  fs_free(fs);
  rp_free(m);
}

TEST(sentinel_lookup_ends_when_the_client_shuts_down) {
  /* Six silent Sentinels make a lookup last about 6 s (1 s command
   * timeout each). Shutting the client down while it runs ends it at
   * once: the caller gets DLOCK_ECANCELED and closing waits for nothing.
   * Before, the lookup went on through every Sentinel first. */
  rp_server_t *m = lu_server(0);
  fs_server_t *fs;
  dlock_client_t *c = six_sentinels_client(m, &fs);
  dlock_t *a = lu_get(c, "lookup-shutdown");
  ASSERT_EQ(dlock_trylock(a, 0, 30000), 0);
  ASSERT_EQ(dlock_unlock(a), 0);
  fs_set(fs, "SENTINEL", &(fs_action_t){.how = FS_SILENT});
  ASSERT_EQ(rp_kill(m), 0);
  lu_sleep_ms(200);
  timed_call_t ka = {a, 0, 0, ""};
  pthread_t ta;
  ASSERT_EQ(pthread_create(&ta, NULL, do_timed_call, &ka), 0);
  /* Inside the lookup: the first Sentinel has the question. */
  int before = fs_count(fs, "SENTINEL");
  ASSERT(fs_wait_count(fs, "SENTINEL", before + 1, 5000));
  lu_sleep_ms(300);
  int64_t t0 = lu_now_ms();
  dlock_client_shutdown(c);
  ASSERT_EQ(pthread_join(ta, NULL), 0);
  int64_t ended = lu_now_ms() - t0;
  dlock_free(a);
  dlock_client_close(c);
  int64_t closed = lu_now_ms() - t0;
  printf("A: %s (%s) %" PRId64 " ms after the shutdown; closed after %" PRId64
         " ms\n",
         dlock_err_name(ka.rc), ka.err, ended, closed);
  ASSERT_EQ(ka.rc, DLOCK_ECANCELED);
  /* The lookup had five Sentinels and over 4 s to go. */
  ASSERT_LT(closed, 2500);
  fs_free(fs);
  rp_free(m);
}

/*
 * TLS all the way: a master, a replica and three Sentinels that speak TLS
 * to each other (tls-replication yes), reached through a
 * rediss-sentinel:// URL of the Sentinels' TLS ports with the test CA.
 * The Sentinels then name the master's TLS port, so discovery, the ROLE
 * check, replica sync (SENTINEL REPLICAS), the +switch-master watcher and
 * the lock traffic all go over TLS. A lock is taken and released, then
 * SENTINEL FAILOVER moves the master and a lock is taken on the new one.
 * The same ports through a plain redis-sentinel:// URL do not work.
 */
TEST(sentinel_tls_lock_and_failover) {
  tls_files_t *f = NULL;
  ASSERT_EQ(tls_files_make(&f), 0);
  sg_options_t so;
  sg_options_init(&so);
  so.replicas = 1;
  so.tls = f;
  sg_group_t *g = NULL;
  ASSERT_EQ(sg_start(&so, &g), 0);
  printf("TLS group: %s\n", sg_url(g));
  ASSERT_EQ(strncmp(sg_url(g), "rediss-sentinel://", 18), 0);

  dlock_options_t o;
  sentinel_options(&o, sg_url(g), 1, NULL);
  o.tls_ca_file = f->ca_crt;
  dlock_client_t *c = lu_client_opts(&o);
  dlock_t *l = lu_get(c, "sent:tls");
  ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));
  /* Replica sync counted the replica and waited for it. */
  ASSERT_EQ(node_has(g, 0, "sent:tls"), 1);
  ASSERT_EQ(node_has(g, 1, "sent:tls"), 1);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  ASSERT_EQ(node_has(g, 0, "sent:tls"), 0);

  int64_t t0 = lu_now_ms();
  int m = sg_failover(g, FAILOVER_LIMIT_MS);
  printf("SENTINEL FAILOVER over TLS: node %d is master after %" PRId64 " ms\n",
         m, lu_now_ms() - t0);
  ASSERT_EQ(m, 1);
  ASSERT_DLOCK_OK(dlock_trylock(l, 30000, 30000));
  ASSERT_EQ(node_has(g, 1, "sent:tls"), 1);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  dlock_free(l);
  dlock_client_close(c);

#ifdef DLOCK_CLI_PATH
  /* The command passes its TLS options on for a rediss-sentinel:// URL. */
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    execl(DLOCK_CLI_PATH, "dlock", "--url", sg_url(g), "--cacert", f->ca_crt,
          "run", "sent:tlscli", "--", "true", (char *)NULL);
    _exit(127);
  }
  ASSERT_EQ(wait_exit(pid, 60000), 0);
#endif

  /* Plain connections to the TLS ports: no Sentinel answers. */
  char plain[512];
  snprintf(plain, sizeof(plain), "redis-sentinel://%s",
           sg_url(g) + strlen("rediss-sentinel://"));
  dlock_options_init(&o);
  o.url = plain;
  o.connect_timeout_ms = 1000;
  o.command_timeout_ms = 1000;
  dlock_client_t *bad = NULL;
  ASSERT_EQ(dlock_client_open(&o, &bad), DLOCK_EIO);
  ASSERT_NULL(bad);
  sg_free(g);
  tls_files_free(f);
}

/*
 * The data nodes' password and database, from the URL, reach the master
 * found through the Sentinels. (The discovery was once handed an emptied
 * copy of them: every connection to a password-protected master failed
 * with NOAUTH, and db=N was ignored.)
 */
TEST(sentinel_data_nodes_password_and_db) {
  sg_options_t so;
  sg_options_init(&so);
  so.replicas = 1;
  so.requirepass = "s3cret";
  sg_group_t *g = NULL;
  ASSERT_EQ(sg_start(&so, &g), 0);
  char url[512];
  snprintf(url, sizeof(url), "%s?db=3", sg_url(g));
  dlock_options_t o;
  sentinel_options(&o, url, 1, NULL);
  dlock_client_t *c = lu_client_opts(&o);
  dlock_t *l = lu_get(c, "sent:db");
  ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));
  redisReply *r = rp_cmd(sg_node(g, 0), "EVAL %s 1 sent:db",
                         "redis.call('select', 3) "
                         "return redis.call('exists', KEYS[1])");
  ASSERT(r != NULL && r->type == REDIS_REPLY_INTEGER && r->integer == 1);
  freeReplyObject(r);
  ASSERT_EQ(node_has(g, 0, "sent:db"), 0); /* not in db 0 */
  ASSERT_DLOCK_OK(dlock_unlock(l));
  dlock_free(l);
  dlock_client_close(c);
  sg_free(g);
}
