/*
 * Tests of the test harness itself, against real redis-server processes:
 * if starting, pausing or restarting a server were wrong, every integration
 * test built on it would be wrong in ways hard to see.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness/redis_proc.h"
#include "harness/test.h"

static rp_server_t *start(const rp_options_t *o) {
  rp_server_t *s = NULL;
  ASSERT_EQ(rp_start(o, &s), 0);
  ASSERT_NOT_NULL(s);
  ASSERT_GT(rp_pid(s), 0);
  return s;
}

/* Asserts that a reply is the status or string 'want'. */
static void expect_str(redisReply *r, const char *want) {
  ASSERT_NOT_NULL(r);
  ASSERT(r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_STRING);
  ASSERT_STR_EQ(r->str, want);
  freeReplyObject(r);
}

static void expect_ping(rp_server_t *s) {
  expect_str(rp_cmd(s, "PING"), "PONG");
}

/* 1 when 'path' exists. */
static int exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

/* 1 when 'pid' is gone (or only a zombie no one reaped yet). */
static int process_gone(pid_t pid) {
  char path[64], buf[256];
  snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return kill(pid, 0) != 0 && errno == ESRCH;
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *paren = strrchr(buf, ')');
  return paren && paren[1] == ' ' && paren[2] == 'Z';
}

TEST(start_tcp) {
  rp_server_t *s = start(NULL);
  ASSERT_GT(rp_port(s), 0);
  ASSERT_NULL(rp_socket(s));
  char url[64];
  snprintf(url, sizeof(url), "redis://127.0.0.1:%d", rp_port(s));
  ASSERT_STR_EQ(rp_url(s), url);
  expect_ping(s);
  expect_str(rp_cmd(s, "SET %s %b", "k", "v\0w", (size_t)3), "OK");
  redisReply *r = rp_cmd(s, "GET k");
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->len, 3);
  ASSERT(memcmp(r->str, "v\0w", 3) == 0);
  freeReplyObject(r);
  rp_free(s);
}

TEST(start_unix) {
  rp_options_t o;
  rp_options_init(&o);
  o.unix_socket = 1;
  rp_server_t *s = start(&o);
  ASSERT_EQ(rp_port(s), 0);
  ASSERT_NOT_NULL(rp_socket(s));
  ASSERT(exists(rp_socket(s)));
  char url[400];
  snprintf(url, sizeof(url), "unix://%s", rp_socket(s));
  ASSERT_STR_EQ(rp_url(s), url);
  expect_ping(s);
  const char *argv[] = {"ECHO", "hello"};
  expect_str(rp_cmd_argv(s, 2, argv, NULL), "hello");
  rp_free(s);
}

TEST(two_servers_differ) {
  rp_server_t *a = start(NULL);
  rp_server_t *b = start(NULL);
  ASSERT_NE(rp_port(a), rp_port(b));
  expect_str(rp_cmd(a, "SET k a"), "OK");
  redisReply *r = rp_cmd(b, "EXISTS k");
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->integer, 0);
  freeReplyObject(r);
  rp_free(a);
  rp_free(b);
}

TEST(pause_times_out_resume_answers) {
  rp_server_t *s = start(NULL);
  expect_ping(s);
  ASSERT_EQ(rp_pause(s), 0);
  int64_t t0 = test_now_ms();
  redisReply *r = rp_cmd(s, "PING");
  int64_t took = test_now_ms() - t0;
  ASSERT_NULL(r);
  /* The harness's command timeout is 2 s. */
  ASSERT_GE(took, 1500);
  ASSERT_LT(took, 5000);
  ASSERT_EQ(rp_resume(s), 0);
  expect_ping(s);
  rp_free(s);
}

TEST(free_stops_a_paused_server) {
  rp_server_t *s = start(NULL);
  pid_t pid = rp_pid(s);
  ASSERT_EQ(rp_pause(s), 0);
  int64_t t0 = test_now_ms();
  rp_free(s);
  ASSERT_LT(test_now_ms() - t0, 4000);
  ASSERT(process_gone(pid));
}

TEST(restart_keeps_address) {
  rp_server_t *s = start(NULL);
  int port = rp_port(s);
  char url[128];
  snprintf(url, sizeof(url), "%s", rp_url(s));
  pid_t pid = rp_pid(s);
  expect_str(rp_cmd(s, "SET k v"), "OK");
  ASSERT_EQ(rp_restart(s), 0);
  ASSERT_EQ(rp_port(s), port);
  ASSERT_STR_EQ(rp_url(s), url);
  ASSERT_NE(rp_pid(s), pid);
  ASSERT(process_gone(pid));
  /* Without AOF nothing survives the restart. */
  redisReply *r = rp_cmd(s, "EXISTS k");
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->integer, 0);
  freeReplyObject(r);
  rp_free(s);
}

TEST(restart_unix_keeps_socket) {
  rp_options_t o;
  rp_options_init(&o);
  o.unix_socket = 1;
  rp_server_t *s = start(&o);
  char sock[300];
  snprintf(sock, sizeof(sock), "%s", rp_socket(s));
  ASSERT_EQ(rp_kill(s), 0);
  ASSERT_EQ(rp_pid(s), 0);
  ASSERT_NULL(rp_cmd(s, "PING"));
  ASSERT_EQ(rp_restart(s), 0);
  ASSERT_STR_EQ(rp_socket(s), sock);
  expect_ping(s);
  rp_free(s);
}

TEST(appendonly_survives_kill) {
  rp_options_t o;
  rp_options_init(&o);
  o.appendonly = 1;
  rp_server_t *s = start(&o);
  expect_str(rp_cmd(s, "SET k v"), "OK");
  /* appendfsync always: the write is on disk before the reply. */
  ASSERT_EQ(rp_kill(s), 0);
  ASSERT_EQ(rp_restart(s), 0);
  expect_str(rp_cmd(s, "GET k"), "v");
  rp_free(s);
}

TEST(requirepass) {
  rp_options_t o;
  rp_options_init(&o);
  o.requirepass = "s3cret@:/";
  rp_server_t *s = start(&o);
  char url[128];
  snprintf(url, sizeof(url), "redis://:s3cret%%40%%3A%%2F@127.0.0.1:%d",
           rp_port(s));
  ASSERT_STR_EQ(rp_url(s), url);
  /* The harness authenticates by itself... */
  expect_ping(s);
  /* ...while a connection without the password is refused. */
  struct timeval tv = {2, 0};
  redisContext *c = redisConnectWithTimeout("127.0.0.1", rp_port(s), tv);
  ASSERT_NOT_NULL(c);
  ASSERT_EQ(c->err, 0);
  redisReply *r = redisCommand(c, "GET k");
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->type, REDIS_REPLY_ERROR);
  ASSERT(strncmp(r->str, "NOAUTH", 6) == 0);
  freeReplyObject(r);
  redisFree(c);
  /* And it authenticates again after a restart. */
  ASSERT_EQ(rp_restart(s), 0);
  expect_ping(s);
  rp_free(s);
}

TEST(extra_conf) {
  rp_options_t o;
  rp_options_init(&o);
  o.extra_conf = "maxclients 77\nhz 20";
  rp_server_t *s = start(&o);
  redisReply *r = rp_cmd(s, "CONFIG GET maxclients");
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->type, REDIS_REPLY_ARRAY);
  ASSERT_EQ(r->elements, 2);
  ASSERT_STR_EQ(r->element[1]->str, "77");
  freeReplyObject(r);
  rp_free(s);
}

TEST(cmd_reconnects_after_client_kill) {
  rp_server_t *s = start(NULL);
  expect_ping(s);
  /* Kills every normal connection, the harness's own included. */
  redisReply *r = rp_cmd(s, "CLIENT KILL TYPE normal SKIPME no");
  freeReplyObject(r);
  expect_ping(s);
  rp_free(s);
}

TEST(free_removes_dir) {
  rp_server_t *s = start(NULL);
  char dir[300];
  snprintf(dir, sizeof(dir), "%s", rp_dir(s));
  ASSERT(exists(dir));
  pid_t pid = rp_pid(s);
  rp_free(s);
  ASSERT(!exists(dir));
  ASSERT(process_gone(pid));
  rp_free(NULL);
}

/*
 * A test that fails an assertion exits without reaching rp_free; the
 * harness's exit handler must still stop its servers. A forked child plays
 * that test.
 */
TEST(exit_stops_servers) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(fds[0]);
    rp_server_t *s = NULL;
    if (rp_start(NULL, &s) != 0)
      _exit(3);
    char line[400];
    int n =
        snprintf(line, sizeof(line), "%ld %s\n", (long)rp_pid(s), rp_dir(s));
    if (write(fds[1], line, (size_t)n) != n)
      _exit(4);
    exit(1); /* what a failed assertion does */
  }
  close(fds[1]);
  char line[400] = {0};
  ssize_t n = read(fds[0], line, sizeof(line) - 1);
  close(fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 1);
  ASSERT_GT(n, 0);
  long pid = 0;
  char dir[300] = {0};
  ASSERT_EQ(sscanf(line, "%ld %299s", &pid, dir), 2);
  ASSERT(process_gone((pid_t)pid));
  ASSERT(!exists(dir));
}

/* A forked child that exits must not stop its parent's servers. */
TEST(child_exit_leaves_parent_servers) {
  rp_server_t *s = start(NULL);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0)
    exit(0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  expect_ping(s);
  ASSERT(exists(rp_dir(s)));
  rp_free(s);
}

/*
 * The runner: a test that fails, and one that hangs past its timeout, run
 * by a second copy of this binary. Both only misbehave when the variable
 * below is set, so they pass when ctest runs them directly.
 */
#define MISBEHAVE "DLOCK_TEST_HARNESS_MISBEHAVE"

TEST(runner_failing) {
  if (getenv(MISBEHAVE) == NULL)
    return;
  ASSERT_EQ(1 + 1, 3);
}

TEST(runner_hanging) {
  if (getenv(MISBEHAVE) == NULL)
    return;
  rp_server_t *s = start(NULL);
  printf("server pid %ld\n", (long)rp_pid(s));
  fflush(stdout);
  for (;;)
    test_sleep_ms(1000);
}

/* Runs this binary with 'args' and the misbehaving tests enabled; returns
 * its exit status and its stdout in 'out'. */
static int run_self(const char *args, char *out, size_t outn) {
  /* The path read here, not /proc/PID/exe handed to the shell: under
   * valgrind the process's executable is valgrind itself, and only a
   * readlink from within the process gives this binary's path. */
  char self[256];
  ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  ASSERT(len > 0 && (size_t)len < sizeof(self) - 1);
  self[len] = '\0';
  char cmd[768];
  snprintf(cmd, sizeof(cmd),
           "env " MISBEHAVE "=1 DLOCK_TEST_TIMEOUT=1.5 '%s' %s", self, args);
  FILE *p = popen(cmd, "r");
  ASSERT_NOT_NULL(p);
  size_t n = fread(out, 1, outn - 1, p);
  out[n] = '\0';
  int status = pclose(p);
  ASSERT(WIFEXITED(status));
  return WEXITSTATUS(status);
}

TEST(runner_reports_failure_and_timeout) {
  char out[4096];
  ASSERT_EQ(run_self("runner_failing runner_hanging start_tcp 2>/dev/null", out,
                     sizeof(out)),
            1);
  if (strstr(out, "FAIL runner_failing: test_harness.c:") == NULL ||
      strstr(out, "ASSERT_EQ(1 + 1, 3) failed: 1 + 1 is 2, expected == 3") ==
          NULL ||
      strstr(out, "FAIL runner_hanging: timed out after 1.5 s") == NULL ||
      strstr(out, "ok start_tcp (") == NULL ||
      strstr(out, "\n1 passed, 2 failed\n") == NULL)
    TEST_FAIL("unexpected runner output:\n%s", out);
  /* The hung test's server went down with it. */
  const char *p = strstr(out, "server pid ");
  ASSERT_NOT_NULL(p);
  pid_t pid = (pid_t)atol(p + strlen("server pid "));
  ASSERT_GT(pid, 0);
  int64_t t0 = test_now_ms();
  while (!process_gone(pid) && test_now_ms() - t0 < 2000)
    test_sleep_ms(10);
  ASSERT(process_gone(pid));
}

TEST(runner_lists_and_rejects_unknown) {
  char out[4096];
  ASSERT_EQ(run_self("--list", out, sizeof(out)), 0);
  ASSERT_NOT_NULL(strstr(out, "start_tcp\nstart_unix\n"));
  ASSERT_EQ(run_self("no_such_test", out, sizeof(out)), 1);
  ASSERT_NOT_NULL(strstr(out, "FAIL no_such_test: no such test\n"));
  ASSERT_NOT_NULL(strstr(out, "0 passed, 1 failed\n"));
}
