/*
 * Semaphores, expirable-permit semaphores and count-down latches against
 * real redis-servers: Redisson's layout read back with raw commands, never
 * more than N holders across processes, a killed holder's permit back
 * within its lease, waiters woken by messages and not by polling, bad
 * input refused without a change, and a driver of Redisson's own layout
 * (scripts written here from Redisson's semantics) sharing the objects
 * with dlock.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lock_util.h"
#include "sem_kinds.h"

/* ---- helpers ------------------------------------------------------------ */

static dlock_sem_t *sem_get(dlock_client_t *c, const char *name) {
  dlock_sem_t *s = NULL;
  ASSERT_DLOCK_OK(dlock_sem_get(c, name, &s));
  ASSERT_NOT_NULL(s);
  return s;
}

static dlock_psem_t *psem_get(dlock_client_t *c, const char *name) {
  dlock_psem_t *s = NULL;
  ASSERT_DLOCK_OK(dlock_psem_get(c, name, &s));
  ASSERT_NOT_NULL(s);
  return s;
}

static dlock_latch_t *latch_get(dlock_client_t *c, const char *name) {
  dlock_latch_t *l = NULL;
  ASSERT_DLOCK_OK(dlock_latch_get(c, name, &l));
  ASSERT_NOT_NULL(l);
  return l;
}

/* The string value of key 'k' as a number; -1 when the key is absent. */
static int64_t get_num(rp_server_t *s, const char *k) {
  redisReply *r = rp_cmd(s, "GET %s", k);
  ASSERT_NOT_NULL(r);
  int64_t n = r->type == REDIS_REPLY_NIL ? -1 : strtoll(r->str, NULL, 10);
  freeReplyObject(r);
  return n;
}

static int64_t zcard(rp_server_t *s, const char *k) {
  redisReply *r = rp_cmd(s, "ZCARD %s", k);
  ASSERT_NOT_NULL(r);
  int64_t n = r->integer;
  freeReplyObject(r);
  return n;
}

static int64_t server_ms(rp_server_t *s) {
  redisReply *r = rp_cmd(s, "TIME");
  ASSERT_NOT_NULL(r);
  int64_t ms = strtoll(r->element[0]->str, NULL, 10) * 1000 +
               strtoll(r->element[1]->str, NULL, 10) / 1000;
  freeReplyObject(r);
  return ms;
}

static void hex_to_bytes(const char *hex, unsigned char *out, size_t n) {
  for (size_t i = 0; i < n; i++) {
    unsigned v = 0;
    sscanf(hex + 2 * i, "%2x", &v);
    out[i] = (unsigned char)v;
  }
}

/* ---- layout ------------------------------------------------------------- */

TEST(sem_layout_is_redissons) {
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  dlock_sem_t *sem = sem_get(c, "lay:sem");
  redisContext *sub = lu_subscribe(s, "redisson_sc:{lay:sem}", 21);
  char msg[64];

  ASSERT_EQ(dlock_sem_try_set_permits(sem, 3), 1);
  ASSERT_EQ(get_num(s, "lay:sem"), 3);
  ASSERT(lu_sub_wait(sub, 2000, msg, sizeof msg, NULL, 0));
  ASSERT_STR_EQ(msg, "3");
  /* Set already: left alone. */
  ASSERT_EQ(dlock_sem_try_set_permits(sem, 7), 0);
  ASSERT_EQ(get_num(s, "lay:sem"), 3);

  ASSERT_DLOCK_OK(dlock_sem_acquire(sem, 2, 0));
  ASSERT_EQ(get_num(s, "lay:sem"), 1);
  ASSERT_EQ(dlock_sem_held(sem), 2);
  ASSERT_DLOCK_OK(dlock_sem_release(sem, 1));
  ASSERT_EQ(get_num(s, "lay:sem"), 2);
  /* A release announces the free permits, as Redisson's does. */
  ASSERT(lu_sub_wait(sub, 2000, msg, sizeof msg, NULL, 0));
  ASSERT_STR_EQ(msg, "2");
  int64_t n = -1;
  ASSERT_DLOCK_OK(dlock_sem_available(sem, &n));
  ASSERT_EQ(n, 2);
  ASSERT_DLOCK_OK(dlock_sem_drain(sem, &n));
  ASSERT_EQ(n, 2);
  ASSERT_EQ(get_num(s, "lay:sem"), 0);
  ASSERT_EQ(dlock_sem_held(sem), 3);
  ASSERT_DLOCK_OK(dlock_sem_release(sem, 3));
  ASSERT_DLOCK_OK(dlock_sem_add_permits(sem, 2, &n));
  ASSERT_EQ(n, 5);
  redisFree(sub);
  dlock_sem_free(sem);

  /* A name with its own hash tag gets no braces, as in Redisson. */
  sem = sem_get(c, "{tag}lay");
  sub = lu_subscribe(s, "redisson_sc:{tag}lay", 20);
  ASSERT_EQ(dlock_sem_try_set_permits(sem, 1), 1);
  ASSERT(lu_sub_wait(sub, 2000, msg, sizeof msg, NULL, 0));
  ASSERT_STR_EQ(msg, "1");
  ASSERT_EQ(get_num(s, "{tag}lay"), 1);
  redisFree(sub);
  dlock_sem_free(sem);
  dlock_client_close(c);
  rp_free(s);
}

TEST(psem_layout_is_redissons) {
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  dlock_psem_t *p = psem_get(c, "lay:ps");
  ASSERT_EQ(dlock_psem_try_set_permits(p, 2), 1);
  dlock_permit_t a, b;
  int64_t before = server_ms(s);
  ASSERT_DLOCK_OK(dlock_psem_acquire(p, 0, 20000, &a));
  ASSERT_DLOCK_OK(dlock_psem_acquire(p, 0, DLOCK_WATCHDOG, &b));
  ASSERT_EQ(strlen(a.id), 32);
  ASSERT(strcmp(a.id, b.id) != 0);
  ASSERT_GT(b.token, a.token);
  ASSERT_EQ(get_num(s, "lay:ps"), 0);
  ASSERT_EQ(zcard(s, "{lay:ps}:timeout"), 2);
  /* The member is the 16 bytes the id spells; the score the Unix ms at
   * which its lease ends. */
  unsigned char raw[16];
  hex_to_bytes(a.id, raw, 16);
  redisReply *r = rp_cmd(s, "ZSCORE {lay:ps}:timeout %b", raw, (size_t)16);
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->type, REDIS_REPLY_STRING);
  int64_t ends = strtoll(r->str, NULL, 10);
  freeReplyObject(r);
  ASSERT_GE(ends, before + 20000 - 50);
  ASSERT_LE(ends, server_ms(s) + 20000 + 50);
  ASSERT_EQ(get_num(s, "dlock_permit_token:{lay:ps}"), (int64_t)b.token);

  int64_t free_n = -1, taken = -1;
  ASSERT_DLOCK_OK(dlock_psem_count(p, &free_n, &taken));
  ASSERT_EQ(free_n, 0);
  ASSERT_EQ(taken, 2);
  dlock_counter_info_t *info = NULL;
  ASSERT_DLOCK_OK(dlock_inspect_counter(c, "lay:ps", 6, &info));
  ASSERT_EQ(info->exists, 1);
  ASSERT_EQ(info->expirable, 1);
  ASSERT_EQ(info->npermits, 2);
  ASSERT(strcmp(info->permits[0].id, a.id) == 0 ||
         strcmp(info->permits[1].id, a.id) == 0);
  dlock_counter_info_free(info);

  ASSERT_DLOCK_OK(dlock_psem_release(p, a.id));
  ASSERT_DLOCK_OK(dlock_psem_release(p, b.id));
  ASSERT_EQ(get_num(s, "lay:ps"), 2);
  ASSERT_EQ(zcard(s, "{lay:ps}:timeout"), 0);
  dlock_psem_free(p);
  dlock_client_close(c);
  rp_free(s);
}

TEST(latch_layout_is_redissons) {
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  dlock_latch_t *l = latch_get(c, "lay:latch");
  const char *chan = "redisson_countdownlatch__channel__{lay:latch}";
  redisContext *sub = lu_subscribe(s, chan, strlen(chan));
  char msg[64];
  ASSERT_EQ(dlock_latch_try_set_count(l, 2), 1);
  ASSERT_EQ(get_num(s, "lay:latch"), 2);
  ASSERT(lu_sub_wait(sub, 2000, msg, sizeof msg, NULL, 0));
  ASSERT_STR_EQ(msg, "1");
  ASSERT_EQ(dlock_latch_try_set_count(l, 5), 0);
  int64_t left = -1;
  ASSERT_DLOCK_OK(dlock_latch_count_down(l, &left));
  ASSERT_EQ(left, 1);
  ASSERT_DLOCK_OK(dlock_latch_count_down(l, &left));
  ASSERT_EQ(left, 0);
  /* At zero the key goes and "0" is published. */
  ASSERT_EQ(lu_exists(s, "lay:latch"), 0);
  ASSERT(lu_sub_wait(sub, 2000, msg, sizeof msg, NULL, 0));
  ASSERT_STR_EQ(msg, "0");
  redisFree(sub);
  dlock_latch_free(l);

  /* The channel keeps its braces even for a name with a hash tag. */
  l = latch_get(c, "{t}x");
  chan = "redisson_countdownlatch__channel__{{t}x}";
  sub = lu_subscribe(s, chan, strlen(chan));
  ASSERT_EQ(dlock_latch_try_set_count(l, 1), 1);
  ASSERT(lu_sub_wait(sub, 2000, msg, sizeof msg, NULL, 0));
  ASSERT_STR_EQ(msg, "1");
  redisFree(sub);
  dlock_latch_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/* ---- bad input ---------------------------------------------------------- */

TEST(bad_input_changes_nothing) {
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  dlock_sem_t *sem = sem_get(c, "bad:sem");
  ASSERT_EQ(dlock_sem_try_set_permits(sem, 2), 1);
  ASSERT_DLOCK_ERR(dlock_sem_try_set_permits(sem, -1), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_sem_acquire(sem, 0, 0), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_sem_acquire(sem, -3, 0), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_sem_acquire(sem, DLOCK_PERMITS_MAX + 1, 0),
                   DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_sem_acquire(sem, 1, -5), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_sem_release(sem, 0), DLOCK_EINVAL);
  /* Never acquired through this client: refused, the count untouched. */
  ASSERT_DLOCK_ERR(dlock_sem_release(sem, 1), DLOCK_ENOTHELD);
  ASSERT_NOT_NULL(strstr(dlock_last_error(), "acquired 0"));
  ASSERT_DLOCK_OK(dlock_sem_acquire(sem, 1, 0));
  ASSERT_DLOCK_ERR(dlock_sem_release(sem, 2), DLOCK_ENOTHELD);
  ASSERT_EQ(get_num(s, "bad:sem"), 1);
  ASSERT_EQ(dlock_sem_held(sem), 1);
  /* More permits taken away than are free. */
  ASSERT_DLOCK_ERR(dlock_sem_add_permits(sem, -2, NULL), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_sem_add_permits(sem, 0, NULL), DLOCK_EINVAL);
  ASSERT_EQ(get_num(s, "bad:sem"), 1);
  ASSERT_DLOCK_OK(dlock_sem_release(sem, 1));
  ASSERT_EQ(get_num(s, "bad:sem"), 2);

  /* Expirable permits. */
  dlock_psem_t *p = psem_get(c, "bad:ps");
  ASSERT_EQ(dlock_psem_try_set_permits(p, 1), 1);
  dlock_permit_t pm;
  ASSERT_DLOCK_ERR(dlock_psem_acquire(p, 0, 0, &pm), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_psem_acquire(p, 0, -7, &pm), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_psem_acquire(p, 0, DLOCK_DURATION_MAX_MS + 1, &pm),
                   DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_psem_release(p, "nothex"), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_psem_release(p, "0123456789abcdef0123456789abcdeg"),
                   DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_psem_release(p, "0123456789abcdef0123456789abcdef"),
                   DLOCK_ENOTHELD);
  ASSERT_EQ(get_num(s, "bad:ps"), 1);
  ASSERT_DLOCK_OK(dlock_psem_acquire(p, 0, 10000, &pm));
  ASSERT_DLOCK_OK(dlock_psem_release(p, pm.id));
  /* Released twice: the second is refused and gives nothing back. */
  ASSERT_DLOCK_ERR(dlock_psem_release(p, pm.id), DLOCK_ENOTHELD);
  ASSERT_EQ(get_num(s, "bad:ps"), 1);

  /* Latches never go below zero. */
  dlock_latch_t *l = latch_get(c, "bad:latch");
  ASSERT_DLOCK_ERR(dlock_latch_try_set_count(l, 0), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_latch_try_set_count(l, -1), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_latch_count_down(l, NULL), DLOCK_EINVAL);
  ASSERT_EQ(lu_exists(s, "bad:latch"), 0);
  ASSERT_EQ(dlock_latch_try_set_count(l, 1), 1);
  ASSERT_DLOCK_OK(dlock_latch_count_down(l, NULL));
  ASSERT_DLOCK_ERR(dlock_latch_count_down(l, NULL), DLOCK_EINVAL);
  ASSERT_EQ(lu_exists(s, "bad:latch"), 0);
  ASSERT_DLOCK_ERR(dlock_latch_await(l, -2), DLOCK_EINVAL);

  /* Someone else's data under the name: refused, untouched. */
  lu_ok(rp_cmd(s, "HSET bad:hash f 1"));
  dlock_sem_t *h = sem_get(c, "bad:hash");
  ASSERT_DLOCK_ERR(dlock_sem_acquire(h, 1, 0), DLOCK_ENOTLOCK);
  ASSERT_DLOCK_ERR(dlock_sem_try_set_permits(h, 1), DLOCK_ENOTLOCK);
  dlock_counter_info_t *info = (dlock_counter_info_t *)1;
  ASSERT_DLOCK_ERR(dlock_inspect_counter(c, "bad:hash", 8, &info),
                   DLOCK_ENOTLOCK);
  ASSERT_NULL(info);
  lu_ok(rp_cmd(s, "SET bad:str hello"));
  dlock_latch_t *ls = latch_get(c, "bad:str");
  ASSERT_DLOCK_ERR(dlock_latch_count_down(ls, NULL), DLOCK_ENOTLOCK);
  redisReply *r = rp_cmd(s, "GET bad:str");
  ASSERT_STR_EQ(r->str, "hello");
  freeReplyObject(r);
  ASSERT_EQ(lu_hlen(s, "bad:hash"), 1);

  dlock_sem_free(h);
  ASSERT_DLOCK_ERR(dlock_sem_get(c, "", &h), DLOCK_EINVAL);
  ASSERT_NULL(h);
  dlock_latch_free(ls);
  dlock_latch_free(l);
  dlock_psem_free(p);
  dlock_sem_free(sem);
  dlock_client_close(c);
  rp_free(s);
}

/* ---- at most N holders across processes --------------------------------- */

/* One holder's turn in the shared log: "+" when it starts, "-" before it
 * ends, each a single write(2) to a file opened with O_APPEND, so the
 * lines of all processes interleave in the order they happened. */
static void log_line(int fd, char what, int who) {
  char line[32];
  int n = snprintf(line, sizeof line, "%c %d\n", what, who);
  ASSERT_EQ(write(fd, line, (size_t)n), n);
}

/* One holder: 'iter' turns of acquire, a logged hold, release. */
typedef struct holder {
  pthread_t thread;
  dlock_sem_t *sem;
  dlock_psem_t *psem;
  int fd, who, iter, code;
} holder_t;

static void *holder_main(void *arg) {
  holder_t *h = arg;
  for (int i = 0; i < h->iter && h->code == 0; i++) {
    dlock_permit_t pm;
    int rc = h->psem != NULL
                 ? dlock_psem_acquire(h->psem, DLOCK_WAIT_FOREVER,
                                      i % 2 ? DLOCK_WATCHDOG : 10000, &pm)
                 : dlock_sem_acquire(h->sem, 1, DLOCK_WAIT_FOREVER);
    if (rc != 0) {
      fprintf(stderr, "acquire: %s %s\n", dlock_err_name(rc),
              dlock_last_error());
      h->code = 13;
      break;
    }
    log_line(h->fd, '+', h->who);
    lu_sleep_ms(1 + i % 3);
    log_line(h->fd, '-', h->who);
    rc = h->psem != NULL ? dlock_psem_release(h->psem, pm.id)
                         : dlock_sem_release(h->sem, 1);
    if (rc != 0) {
      fprintf(stderr, "release: %s %s\n", dlock_err_name(rc),
              dlock_last_error());
      h->code = 14;
    }
  }
  return NULL;
}

/* A process of 'threads' holders sharing one client: the exit code is 0
 * when every turn went well and the client holds nothing at the end. */
static int holders_child(const rp_server_t *s, const char *name, int expirable,
                         const char *log, int who, int iter, int threads) {
  dlock_options_t o;
  lu_options(&o, s);
  dlock_client_t *c = NULL;
  if (dlock_client_open(&o, &c) != 0)
    return 10;
  dlock_sem_t *sem = NULL;
  dlock_psem_t *p = NULL;
  if (expirable ? dlock_psem_get(c, name, &p) : dlock_sem_get(c, name, &sem))
    return 11;
  int fd = open(log, O_WRONLY | O_APPEND);
  if (fd < 0)
    return 12;
  holder_t h[4];
  if (threads < 1 || threads > 4)
    return 15;
  for (int i = 0; i < threads; i++) {
    h[i] = (holder_t){
        .sem = sem, .psem = p, .fd = fd, .who = who * 10 + i, .iter = iter};
    if (pthread_create(&h[i].thread, NULL, holder_main, &h[i]) != 0)
      return 15;
  }
  int code = 0;
  for (int i = 0; i < threads; i++) {
    pthread_join(h[i].thread, NULL);
    if (h[i].code != 0)
      code = h[i].code;
  }
  if (code == 0 && !expirable && dlock_sem_held(sem) != 0)
    code = 16;
  close(fd);
  dlock_psem_free(p);
  dlock_sem_free(sem);
  dlock_client_close(c);
  return code;
}

/* Reads the log and returns the most holders at once it shows. */
static int most_at_once(const char *log, int *lines) {
  FILE *f = fopen(log, "r");
  ASSERT_NOT_NULL(f);
  char what;
  int who, now = 0, most = 0;
  *lines = 0;
  while (fscanf(f, " %c %d", &what, &who) == 2) {
    now += what == '+' ? 1 : -1;
    ASSERT_GE(now, 0);
    if (now > most)
      most = now;
    (*lines)++;
  }
  fclose(f);
  return most;
}

/* 'procs' processes of 'threads' holders each, 'iter' turns per holder, on
 * a semaphore of 'n' permits: never more than 'n' hold at once, and every
 * permit is free again at the end. */
static void run_holders(const char *name, int expirable, int procs, int threads,
                        int iter, int n) {
  rp_server_t *s = lu_server(0);
  char dir[] = "/tmp/dlock-sem-XXXXXX";
  ASSERT_NOT_NULL(mkdtemp(dir));
  char log[64];
  snprintf(log, sizeof log, "%s/log", dir);
  int fd = open(log, O_CREAT | O_WRONLY | O_TRUNC, 0600);
  ASSERT_GE(fd, 0);
  close(fd);
  lu_ok(rp_cmd(s, "SET %s %d", name, n));
  pid_t pids[8];
  ASSERT_LE(procs, 8);
  for (int i = 0; i < procs; i++) {
    pid_t p = fork();
    ASSERT_GE(p, 0);
    if (p == 0)
      _exit(holders_child(s, name, expirable, log, i, iter, threads));
    pids[i] = p;
  }
  for (int i = 0; i < procs; i++) {
    int st = 0;
    ASSERT_EQ(waitpid(pids[i], &st, 0), pids[i]);
    ASSERT(WIFEXITED(st));
    ASSERT_EQ(WEXITSTATUS(st), 0);
  }
  int lines = 0, most = most_at_once(log, &lines);
  printf("%d processes x %d threads x %d turns, N = %d: at most %d holders at "
         "once\n",
         procs, threads, iter, n, most);
  ASSERT_EQ(lines, 2 * procs * threads * iter);
  ASSERT_LE(most, n);
  /* Contended enough that the permits were all in use at some point. */
  ASSERT_GE(most, 2);
  ASSERT_EQ(get_num(s, name), n);
  if (expirable) {
    char timeout[128];
    snprintf(timeout, sizeof timeout, "{%s}:timeout", name);
    ASSERT_EQ(zcard(s, timeout), 0);
  }
  unlink(log);
  rmdir(dir);
  rp_free(s);
}

TEST(sem_never_more_than_n_holders_across_processes) {
  run_holders("sem:n", 0, 6, 1, 40, 3);
}

TEST(psem_never_more_than_n_holders_across_processes) {
  run_holders("sem:n", 1, 6, 1, 40, 3);
}

/* Three threads in each of four processes on 2 permits: releases hand
 * permits to threads of the same client and to other processes. */
TEST(sem_never_more_than_n_holders_threads_across_processes) {
  run_holders("sem:t", 0, 4, 3, 30, 2);
}

/* ---- a killed holder ---------------------------------------------------- */

TEST(psem_killed_holders_permit_comes_back_within_its_lease) {
  rp_server_t *s = lu_server(0);
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  lu_ok(rp_cmd(s, "SET sem:kill 1"));
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    /* Holds the only permit, renewed (lease 600 ms), until killed. */
    dlock_options_t o;
    lu_options(&o, s);
    dlock_client_t *c = NULL;
    dlock_psem_t *p = NULL;
    dlock_permit_t pm;
    if (dlock_client_open(&o, &c) != 0 || dlock_psem_get(c, "sem:kill", &p) ||
        dlock_psem_acquire(p, 0, DLOCK_WATCHDOG, &pm) != 0)
      _exit(1);
    char b = 1;
    if (write(ready[1], &b, 1) != 1)
      _exit(2);
    for (;;)
      pause();
  }
  char b;
  ASSERT_EQ(read(ready[0], &b, 1), 1);
  dlock_client_t *c = lu_client(s);
  dlock_psem_t *p = psem_get(c, "sem:kill");
  dlock_permit_t pm;
  /* Renewed while the holder lives: still taken well past one lease. */
  ASSERT_DLOCK_ERR(dlock_psem_acquire(p, 1500, 5000, &pm), DLOCK_ETIMEDOUT);
  int64_t killed = lu_now_ms();
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  int st;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  ASSERT_DLOCK_OK(dlock_psem_acquire(p, 10000, 5000, &pm));
  int64_t took = lu_now_ms() - killed;
  printf("permit back %lld ms after its holder was killed (lease 600 ms)\n",
         (long long)took);
  /* Within the lease (600 ms) plus scheduling slack on a loaded machine;
   * never before the renewal stopped. */
  ASSERT_LE(took, 600 + 2000);
  ASSERT_DLOCK_OK(dlock_psem_release(p, pm.id));
  close(ready[0]);
  close(ready[1]);
  dlock_psem_free(p);
  dlock_client_close(c);
  rp_free(s);
}

/* ---- lost permits ------------------------------------------------------- */

TEST(psem_lost_permit_reported) {
  rp_server_t *s = lu_server(0);
  lu_lost_t lost;
  lu_lost_init(&lost);
  dlock_options_t o;
  lu_options(&o, s);
  o.on_lost = lu_lost_cb;
  o.on_lost_data = &lost;
  dlock_client_t *c = lu_client_opts(&o);
  dlock_psem_t *p = psem_get(c, "sem:lost");
  ASSERT_EQ(dlock_psem_try_set_permits(p, 1), 1);
  dlock_permit_t pm;
  ASSERT_DLOCK_OK(dlock_psem_acquire(p, 0, DLOCK_WATCHDOG, &pm));
  /* Renewed: still there after several leases. */
  lu_sleep_ms(1500);
  ASSERT_EQ(zcard(s, "{sem:lost}:timeout"), 1);
  ASSERT_EQ(lu_lost_count(&lost), 0);
  /* Someone deletes the permits: the next renewal finds it gone. */
  lu_ok(rp_cmd(s, "DEL {sem:lost}:timeout"));
  ASSERT_GE(lu_lost_wait(&lost, 5000), 1);
  ASSERT_STR_EQ(lost.name, "sem:lost");
  ASSERT_EQ(lost.owner, pm.owner);
  ASSERT_DLOCK_ERR(dlock_psem_release(p, pm.id), DLOCK_ELOST);
  dlock_psem_free(p);
  dlock_client_close(c);
  rp_free(s);
}

TEST(psem_fixed_lease_expires_and_release_says_lost) {
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  dlock_psem_t *p = psem_get(c, "sem:fixed");
  ASSERT_EQ(dlock_psem_try_set_permits(p, 1), 1);
  dlock_permit_t a, b;
  ASSERT_DLOCK_OK(dlock_psem_acquire(p, 0, 200, &a));
  /* A waiter sleeps until the lease ends (no message comes), then gets it. */
  int64_t t0 = lu_now_ms();
  ASSERT_DLOCK_OK(dlock_psem_acquire(p, 5000, 10000, &b));
  ASSERT_LE(lu_now_ms() - t0, 3000);
  ASSERT_GT(b.token, a.token);
  ASSERT_DLOCK_ERR(dlock_psem_release(p, a.id), DLOCK_ELOST);
  ASSERT_DLOCK_OK(dlock_psem_release(p, b.id));
  ASSERT_EQ(get_num(s, "sem:fixed"), 1);
  dlock_psem_free(p);
  dlock_client_close(c);
  rp_free(s);
}

/* ---- waking without polling --------------------------------------------- */

typedef struct sem_waiter {
  pthread_t thread;
  dlock_sem_t *sem;
  dlock_latch_t *latch;
  int64_t permits;
  int rc;
  atomic_llong done_ms;
} sem_waiter_t;

static void *sem_waiter_main(void *arg) {
  sem_waiter_t *w = arg;
  w->rc = w->latch != NULL ? dlock_latch_await(w->latch, 20000)
                           : dlock_sem_acquire(w->sem, w->permits, 20000);
  atomic_store(&w->done_ms, lu_now_ms());
  return NULL;
}

static int64_t scripts_run(rp_server_t *s) {
  return lu_cmd_calls(s, "evalsha") + lu_cmd_calls(s, "eval");
}

TEST(sem_waiters_woken_by_release_without_polling) {
  enum { W = 4 };
  rp_server_t *s = lu_server(0);
  dlock_client_t *c1 = lu_client(s), *c2 = lu_client(s);
  dlock_sem_t *holder = sem_get(c1, "sem:wake");
  dlock_sem_t *other = sem_get(c2, "sem:wake");
  ASSERT_EQ(dlock_sem_try_set_permits(holder, W), 1);
  ASSERT_DLOCK_OK(dlock_sem_acquire(holder, W, 0));
  /* Waiters in two clients, one permit each. */
  sem_waiter_t w[W];
  for (int i = 0; i < W; i++) {
    memset(&w[i], 0, sizeof w[i]);
    w[i].sem = i % 2 ? other : holder;
    w[i].permits = 1;
    ASSERT_EQ(pthread_create(&w[i].thread, NULL, sem_waiter_main, &w[i]), 0);
  }
  lu_sleep_ms(300);
  int64_t before = scripts_run(s);
  lu_sleep_ms(1500);
  int64_t idle = scripts_run(s) - before;
  printf("acquire scripts run by %d waiters in 1.5 s of waiting: %lld\n", W,
         (long long)idle);
  /* Asleep on the channel: a 100 ms poll would be 60. */
  ASSERT_LE(idle, 2);
  for (int k = 0; k < W; k++) {
    int64_t released = lu_now_ms();
    ASSERT_DLOCK_OK(dlock_sem_release(holder, 1));
    /* Exactly one more waiter gets through per permit released. */
    int got = 0;
    int64_t latest = 0;
    for (int tries = 0; tries < 400 && got < k + 1; tries++) {
      got = 0;
      for (int i = 0; i < W; i++)
        got += atomic_load(&w[i].done_ms) != 0;
      if (got < k + 1)
        lu_sleep_ms(5);
    }
    ASSERT_EQ(got, k + 1);
    for (int i = 0; i < W; i++)
      if (atomic_load(&w[i].done_ms) > latest)
        latest = atomic_load(&w[i].done_ms);
    printf("release %d: a waiter got the permit %lld ms later\n", k,
           (long long)(latest - released));
    ASSERT_LE(latest - released, 1000);
  }
  for (int i = 0; i < W; i++) {
    pthread_join(w[i].thread, NULL);
    ASSERT_DLOCK_OK(w[i].rc);
  }
  ASSERT_EQ(get_num(s, "sem:wake"), 0);
  ASSERT_EQ(dlock_sem_held(holder) + dlock_sem_held(other), W);
  dlock_sem_free(holder);
  dlock_sem_free(other);
  dlock_client_close(c1);
  dlock_client_close(c2);
  rp_free(s);
}

/* ---- hand-overs inside a client ------------------------------------------ */

/* Waits until 'n' waiters of client 'c' sleep on the semaphore's
 * channel: a waiter still in an attempt is not handed permits. */
static void wait_parked(dlock_client_t *c, const char *name, int n) {
  char chan[128];
  size_t len = lu_keyname(chan, sizeof chan, "redisson_sc", name, strlen(name));
  for (int i = 0; i < 4000 && dlock__pubsub_parked(c->ps, chan, len) < n; i++)
    lu_sleep_ms(5);
  ASSERT_GE(dlock__pubsub_parked(c->ps, chan, len), n);
}

TEST(sem_release_hands_permits_to_a_waiter_of_the_same_client) {
  /* A thread releasing a permit that another thread of its client waits
   * for hands it over: no script runs, Redis's count never moves, and the
   * waiter holds it. */
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  dlock_sem_t *sem = sem_get(c, "sem:hand");
  ASSERT_EQ(dlock_sem_try_set_permits(sem, 1), 1);
  ASSERT_DLOCK_OK(dlock_sem_acquire(sem, 1, 0));
  sem_waiter_t w;
  memset(&w, 0, sizeof w);
  w.sem = sem;
  w.permits = 1;
  ASSERT_EQ(pthread_create(&w.thread, NULL, sem_waiter_main, &w), 0);
  wait_parked(c, "sem:hand", 1);
  int64_t before = scripts_run(s);
  ASSERT_DLOCK_OK(dlock_sem_release(sem, 1));
  pthread_join(w.thread, NULL);
  ASSERT_DLOCK_OK(w.rc);
  int64_t ran = scripts_run(s) - before;
  printf("scripts run by the release and the waiter's acquisition: %lld\n",
         (long long)ran);
  ASSERT_EQ(ran, 0);
  ASSERT_EQ(get_num(s, "sem:hand"), 0);
  ASSERT_EQ(dlock_sem_held(sem), 1);
  ASSERT_DLOCK_OK(dlock_sem_release(sem, 1));
  ASSERT_EQ(get_num(s, "sem:hand"), 1);
  dlock_sem_free(sem);
  dlock_client_close(c);
  rp_free(s);
}

typedef struct sem_looper {
  pthread_t thread;
  dlock_sem_t *sem;
  atomic_int *stop;
  int rc;
  long turns;
} sem_looper_t;

static void *sem_looper_main(void *arg) {
  sem_looper_t *l = arg;
  while (!atomic_load(l->stop) && l->rc == 0) {
    l->rc = dlock_sem_acquire(l->sem, 1, 30000);
    if (l->rc != 0)
      break;
    l->turns++;
    /* Held long enough for the others to be asleep at the release. */
    lu_sleep_ms(1);
    l->rc = dlock_sem_release(l->sem, 1);
  }
  return NULL;
}

TEST(sem_handover_runs_give_other_clients_a_turn) {
  /* Four threads of one client pass a single permit around, nearly every
   * release a hand-over to one of the others. A waiter of another client still
   * gets the permit again and again: a run of hand-overs ends with a
   * release for everyone, and the first client then holds back. */
  rp_server_t *s = lu_server(0);
  dlock_client_t *c1 = lu_client(s), *c2 = lu_client(s);
  dlock_sem_t *a = sem_get(c1, "sem:run"), *b = sem_get(c2, "sem:run");
  ASSERT_EQ(dlock_sem_try_set_permits(a, 1), 1);
  atomic_int stop = 0;
  enum { L = 4 };
  sem_looper_t l[L];
  for (int i = 0; i < L; i++) {
    memset(&l[i], 0, sizeof l[i]);
    l[i].sem = a;
    l[i].stop = &stop;
    ASSERT_EQ(pthread_create(&l[i].thread, NULL, sem_looper_main, &l[i]), 0);
  }
  int got = 0;
  for (int k = 0; k < 5; k++) {
    ASSERT_DLOCK_OK(dlock_sem_acquire(b, 1, 20000));
    got++;
    lu_sleep_ms(2);
    ASSERT_DLOCK_OK(dlock_sem_release(b, 1));
    lu_sleep_ms(20);
  }
  atomic_store(&stop, 1);
  long turns = 0;
  for (int i = 0; i < L; i++) {
    pthread_join(l[i].thread, NULL);
    ASSERT_DLOCK_OK(l[i].rc);
    turns += l[i].turns;
  }
  printf("the other client's waiter got the permit %d times; the %d "
         "threads %ld times\n",
         got, L, turns);
  ASSERT_EQ(got, 5);
  ASSERT_GT(turns, 0);
  ASSERT_EQ(get_num(s, "sem:run"), 1);
  ASSERT_EQ(dlock_sem_held(a) + dlock_sem_held(b), 0);
  dlock_sem_free(a);
  dlock_sem_free(b);
  dlock_client_close(c1);
  dlock_client_close(c2);
  rp_free(s);
}

TEST(sem_woken_waiter_that_needs_more_passes_the_wake_up_on) {
  /* Two waiters of one client: one wants 3 permits, one wants 1. One
   * permit released wakes one waiter; when that is the one that needs 3,
   * it hands the wake-up to the other, which must not sleep on. */
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  dlock_sem_t *sem = sem_get(c, "sem:pass");
  ASSERT_EQ(dlock_sem_try_set_permits(sem, 3), 1);
  ASSERT_DLOCK_OK(dlock_sem_acquire(sem, 3, 0));
  sem_waiter_t big, small;
  memset(&big, 0, sizeof big);
  memset(&small, 0, sizeof small);
  big.sem = small.sem = sem;
  big.permits = 3;
  small.permits = 1;
  ASSERT_EQ(pthread_create(&big.thread, NULL, sem_waiter_main, &big), 0);
  lu_sleep_ms(200);
  ASSERT_EQ(pthread_create(&small.thread, NULL, sem_waiter_main, &small), 0);
  lu_sleep_ms(300);
  int64_t released = lu_now_ms();
  ASSERT_DLOCK_OK(dlock_sem_release(sem, 1));
  pthread_join(small.thread, NULL);
  ASSERT_DLOCK_OK(small.rc);
  int64_t after = atomic_load(&small.done_ms) - released;
  printf("the waiter for 1 permit got it %lld ms after the release\n",
         (long long)after);
  ASSERT_LE(after, 1000);
  ASSERT_DLOCK_OK(dlock_sem_release(sem, 3));
  pthread_join(big.thread, NULL);
  ASSERT_DLOCK_OK(big.rc);
  ASSERT_DLOCK_OK(dlock_sem_release(sem, 3));
  ASSERT_EQ(get_num(s, "sem:pass"), 3);
  dlock_sem_free(sem);
  dlock_client_close(c);
  rp_free(s);
}

TEST(latch_await_wakes_every_waiter_at_zero) {
  enum { W = 6 };
  rp_server_t *s = lu_server(0);
  dlock_client_t *c1 = lu_client(s), *c2 = lu_client(s);
  dlock_latch_t *l1 = latch_get(c1, "latch:all"),
                *l2 = latch_get(c2, "latch:all");
  ASSERT_EQ(dlock_latch_try_set_count(l1, 3), 1);
  ASSERT_DLOCK_ERR(dlock_latch_await(l1, 0), DLOCK_ETIMEDOUT);
  sem_waiter_t w[W];
  for (int i = 0; i < W; i++) {
    memset(&w[i], 0, sizeof w[i]);
    w[i].latch = i % 2 ? l2 : l1;
    ASSERT_EQ(pthread_create(&w[i].thread, NULL, sem_waiter_main, &w[i]), 0);
  }
  lu_sleep_ms(300);
  int64_t before = lu_cmd_calls(s, "get");
  ASSERT_DLOCK_OK(dlock_latch_count_down(l2, NULL));
  ASSERT_DLOCK_OK(dlock_latch_count_down(l1, NULL));
  lu_sleep_ms(1000);
  /* Counting down to 1 wakes nobody: nobody looks at the count (the two
   * GETs are the count-down scripts' own). */
  ASSERT_LE(lu_cmd_calls(s, "get") - before, 2);
  for (int i = 0; i < W; i++)
    ASSERT_EQ(atomic_load(&w[i].done_ms), 0);
  int64_t zero = lu_now_ms();
  ASSERT_DLOCK_OK(dlock_latch_count_down(l2, NULL));
  int64_t latest = 0;
  for (int i = 0; i < W; i++) {
    pthread_join(w[i].thread, NULL);
    ASSERT_DLOCK_OK(w[i].rc);
    if (atomic_load(&w[i].done_ms) > latest)
      latest = atomic_load(&w[i].done_ms);
  }
  printf("all %d waiters woken %lld ms after the count reached zero\n", W,
         (long long)(latest - zero));
  ASSERT_LE(latest - zero, 1000);
  ASSERT_DLOCK_OK(dlock_latch_await(l1, 0));
  int64_t n = -1;
  ASSERT_DLOCK_OK(dlock_latch_count(l1, &n));
  ASSERT_EQ(n, 0);
  dlock_latch_free(l1);
  dlock_latch_free(l2);
  dlock_client_close(c1);
  dlock_client_close(c2);
  rp_free(s);
}

/* ---- a driver of Redisson's layout -------------------------------------- */

/*
 * Scripts that do what Redisson's RSemaphore, RPermitExpirableSemaphore
 * and RCountDownLatch do, written here from their documented semantics and
 * run with raw EVAL: a stand-in for a Java service on the same objects.
 */
static const char redisson_sem_try_acquire[] =
    "local v = redis.call('get', KEYS[1]) "
    "if v ~= false and tonumber(v) >= tonumber(ARGV[1]) then "
    "  redis.call('decrby', KEYS[1], ARGV[1]) return 1 end "
    "return 0";
static const char redisson_sem_release[] =
    "local v = redis.call('incrby', KEYS[1], ARGV[1]) "
    "redis.call('publish', KEYS[2], v)";
/* KEYS: counter, timeouts, channel; ARGV: permits, lease end (Unix ms),
 * now (Unix ms), the "no lease" mark, then the raw ids. */
static const char redisson_psem_try_acquire[] =
    "local gone = redis.call('zrangebyscore', KEYS[2], 0, ARGV[3], 'limit', "
    "0, ARGV[1]) "
    "if #gone > 0 then redis.call('zrem', KEYS[2], unpack(gone)) "
    "  local v = redis.call('incrby', KEYS[1], #gone) "
    "  if v > 0 then redis.call('publish', KEYS[3], v) end end "
    "local v = redis.call('get', KEYS[1]) "
    "if v ~= false and tonumber(v) >= tonumber(ARGV[1]) then "
    "  redis.call('decrby', KEYS[1], ARGV[1]) "
    "  for i = 5, #ARGV do redis.call('zadd', KEYS[2], ARGV[2], ARGV[i]) end "
    "  return 'OK' end "
    "return nil";
/* KEYS: counter, channel, timeouts; ARGV: raw id, now. */
static const char redisson_psem_release[] =
    "local e = redis.call('zscore', KEYS[3], ARGV[1]) "
    "if redis.call('zrem', KEYS[3], ARGV[1]) ~= 1 then return 0 end "
    "local v = redis.call('incrby', KEYS[1], 1) "
    "redis.call('publish', KEYS[2], v) "
    "if tonumber(e) <= tonumber(ARGV[2]) then return 0 end return 1";
static const char redisson_latch_count_down[] =
    "local v = redis.call('decr', KEYS[1]) "
    "if v <= 0 then redis.call('del', KEYS[1]) end "
    "if v == 0 then redis.call('publish', KEYS[2], '0') end";

typedef struct later_release {
  rp_server_t *s;
  int64_t after_ms;
  int done;
} later_release_t;

static void *redisson_releases_later(void *arg) {
  later_release_t *a = arg;
  lu_sleep_ms(a->after_ms);
  redisContext *r = lu_connect(a->s);
  redisReply *rep =
      redisCommand(r, "EVAL %s 2 compat:sem redisson_sc:{compat:sem} 1",
                   redisson_sem_release);
  a->done = rep != NULL && rep->type != REDIS_REPLY_ERROR;
  if (rep)
    freeReplyObject(rep);
  redisFree(r);
  return NULL;
}

TEST(redisson_layout_driver_shares_the_objects) {
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);

  /* Semaphore: the driver takes the last permit; a dlock waiter sleeps
   * until the driver's release message, then gets it. */
  dlock_sem_t *sem = sem_get(c, "compat:sem");
  ASSERT_EQ(dlock_sem_try_set_permits(sem, 2), 1);
  ASSERT_DLOCK_OK(dlock_sem_acquire(sem, 1, 0));
  redisReply *r = rp_cmd(s, "EVAL %s 1 compat:sem 1", redisson_sem_try_acquire);
  ASSERT_EQ(lu_reply_int(r), 1);
  r = rp_cmd(s, "EVAL %s 1 compat:sem 1", redisson_sem_try_acquire);
  ASSERT_EQ(lu_reply_int(r), 0);
  later_release_t lr = {s, 300, 0};
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, redisson_releases_later, &lr), 0);
  int64_t t0 = lu_now_ms();
  ASSERT_DLOCK_OK(dlock_sem_acquire(sem, 1, 10000));
  int64_t took = lu_now_ms() - t0;
  pthread_join(t, NULL);
  ASSERT(lr.done);
  printf("dlock waiter woken by the driver's release after %lld ms\n",
         (long long)took);
  ASSERT_LE(took, 300 + 1000);
  /* dlock's releases are the driver's permits again. */
  ASSERT_DLOCK_OK(dlock_sem_release(sem, 2));
  r = rp_cmd(s, "EVAL %s 1 compat:sem 2", redisson_sem_try_acquire);
  ASSERT_EQ(lu_reply_int(r), 1);
  dlock_sem_free(sem);

  /* Expirable permits: both sides' permits count against one total, and
   * each side releases the other's by id. */
  dlock_psem_t *p = psem_get(c, "compat:ps");
  ASSERT_EQ(dlock_psem_try_set_permits(p, 2), 1);
  dlock_permit_t mine;
  ASSERT_DLOCK_OK(dlock_psem_acquire(p, 0, DLOCK_WATCHDOG, &mine));
  static const char their_hex[] = "00112233445566778899aabbccddeeff";
  unsigned char theirs[16], mine_raw[16];
  hex_to_bytes(their_hex, theirs, 16);
  hex_to_bytes(mine.id, mine_raw, 16);
  int64_t now = server_ms(s);
  r = rp_cmd(s,
             "EVAL %s 3 compat:ps {compat:ps}:timeout redisson_sc:{compat:ps} "
             "1 %lld %lld 922337203685477 %b",
             redisson_psem_try_acquire, (long long)(now + 30000),
             (long long)now, theirs, (size_t)16);
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->type, REDIS_REPLY_STRING);
  ASSERT_STR_EQ(r->str, "OK");
  freeReplyObject(r);
  /* Full: dlock's try fails, and the driver's permit is listed. */
  dlock_permit_t none;
  ASSERT_DLOCK_ERR(dlock_psem_acquire(p, 0, 10000, &none), DLOCK_ETIMEDOUT);
  dlock_counter_info_t *info = NULL;
  ASSERT_DLOCK_OK(dlock_inspect_counter(c, "compat:ps", 9, &info));
  ASSERT_EQ(info->npermits, 2);
  int seen = 0;
  for (size_t i = 0; i < info->npermits; i++)
    seen += strcmp(info->permits[i].id, their_hex) == 0;
  ASSERT_EQ(seen, 1);
  dlock_counter_info_free(info);
  /* The driver releases dlock's permit by its id: dlock's release then
   * finds it gone. */
  r = rp_cmd(s,
             "EVAL %s 3 compat:ps redisson_sc:{compat:ps} {compat:ps}:timeout "
             "%b %lld",
             redisson_psem_release, mine_raw, (size_t)16,
             (long long)server_ms(s));
  ASSERT_EQ(lu_reply_int(r), 1);
  ASSERT_DLOCK_ERR(dlock_psem_release(p, mine.id), DLOCK_ELOST);
  /* dlock releases the driver's permit by its id. */
  ASSERT_DLOCK_OK(dlock_psem_release(p, their_hex));
  ASSERT_EQ(get_num(s, "compat:ps"), 2);
  ASSERT_EQ(zcard(s, "{compat:ps}:timeout"), 0);
  dlock_psem_free(p);

  /* Latch: the driver counts down to zero; dlock's waiter wakes. */
  dlock_latch_t *l = latch_get(c, "compat:latch");
  ASSERT_EQ(dlock_latch_try_set_count(l, 1), 1);
  lu_ok(rp_cmd(s,
               "EVAL %s 2 compat:latch "
               "redisson_countdownlatch__channel__{compat:latch}",
               redisson_latch_count_down));
  ASSERT_DLOCK_OK(dlock_latch_await(l, 2000));
  dlock_latch_free(l);
  dlock_client_close(c);
  rp_free(s);
}

/*
 * Threads of one client taking and releasing 2 permits in turn, so that
 * releases hand permits to waiting threads all the time: no permit may be
 * lost. A wake-up that a leaving waiter hands on to the next (one it did
 * not take) once cleared the next waiter's hand-over before that waiter
 * had read it, and the permit handed over was then counted by the client
 * for ever and missing in Redis.
 */
enum { HO_THREADS = 4, HO_ROUNDS = 3000 };

typedef struct ho_worker {
  dlock_sem_t *s;
  int failures;
} ho_worker;

static void *ho_main(void *arg) {
  ho_worker *w = arg;
  for (int i = 0; i < HO_ROUNDS; i++) {
    if (dlock_sem_acquire(w->s, 1, 30000) != 0 ||
        dlock_sem_release(w->s, 1) != 0)
      w->failures++;
  }
  return NULL;
}

TEST(sem_handovers_inside_a_client_lose_no_permit) {
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  dlock_sem_t *sem = sem_get(c, "sem:ho-loss");
  ASSERT_EQ(dlock_sem_try_set_permits(sem, 2), 1);
  ho_worker w[HO_THREADS];
  pthread_t th[HO_THREADS];
  for (int i = 0; i < HO_THREADS; i++) {
    w[i] = (ho_worker){sem, 0};
    ASSERT_EQ(pthread_create(&th[i], NULL, ho_main, &w[i]), 0);
  }
  for (int i = 0; i < HO_THREADS; i++) {
    pthread_join(th[i], NULL);
    ASSERT_EQ(w[i].failures, 0);
  }
  ASSERT_EQ(dlock_sem_held(sem), 0);
  int64_t avail = -1;
  ASSERT_DLOCK_OK(dlock_sem_available(sem, &avail));
  ASSERT_EQ(avail, 2);
  dlock_sem_free(sem);
  dlock_client_close(c);
  rp_free(s);
}
