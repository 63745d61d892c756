/*
 * The dlock command, driven as users drive it: the built binary started as
 * a process against real redis-servers, checked by its exit status, its
 * output, the environment and signals its command sees, and the keys it
 * leaves in Redis.
 *
 * The binary is DLOCK_CLI_PATH when the build defines it, else $DLOCK_CLI,
 * else "dlock" next to this test binary (both land in the build root).
 * Tests use --watchdog 600ms so renewals (every 200 ms) notice a lost lock
 * quickly, and short sleeps: the machine running them may have 2 cores.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "harness/redis_proc.h"
#include "harness/test.h"

/* ---- the binary and a scratch directory ------------------------------- */

static const char *cli_path(void) {
  const char *env = getenv("DLOCK_CLI");

  if (env != NULL && env[0] != '\0')
    return env;
#ifdef DLOCK_CLI_PATH
  return DLOCK_CLI_PATH;
#else
  static char path[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  ASSERT_GT(n, 0);
  path[n] = '\0';
  char *slash = strrchr(path, '/');
  ASSERT_NOT_NULL(slash);
  snprintf(slash + 1, sizeof path - (size_t)(slash + 1 - path), "dlock");
  return path;
#endif
}

/* What one test works with: a server, its URL, and a scratch directory for
 * the files commands write and the output they print. */
typedef struct cli_test {
  rp_server_t *server;
  char dir[64];
  int nruns;
} cli_test_t;

static void start_test(cli_test_t *t) {
  rp_options_t o;

  memset(t, 0, sizeof *t);
  rp_options_init(&o);
  ASSERT_EQ(rp_start(&o, &t->server), 0);
  snprintf(t->dir, sizeof t->dir, "/tmp/dlock-cli-XXXXXX");
  ASSERT_NOT_NULL(mkdtemp(t->dir));
}

static int remove_entry(const char *path, const struct stat *st, int flag,
                        struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

static void end_test(cli_test_t *t) {
  nftw(t->dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  rp_free(t->server);
}

/* "<dir>/<name>" in a static ring of buffers, for building commands. */
static const char *scratch(const cli_test_t *t, const char *name) {
  static char ring[8][256];
  static int next;
  char *buf = ring[next++ % 8];
  snprintf(buf, sizeof ring[0], "%s/%s", t->dir, name);
  return buf;
}

/* ---- files ------------------------------------------------------------ */

/* The whole file as a string ("" when missing); freed by the caller. */
static char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  char *buf = NULL;
  size_t len = 0;

  if (f == NULL)
    return strdup("");
  FILE *mem = open_memstream(&buf, &len);
  int c;
  while ((c = fgetc(f)) != EOF)
    fputc(c, mem);
  fclose(mem);
  fclose(f);
  return buf;
}

static int file_exists(const char *path) { return access(path, F_OK) == 0; }

/* Waits until 'path' exists and is not empty; 0, or -1 after 'ms'. */
static int wait_for_file(const char *path, int64_t ms) {
  int64_t deadline = test_now_ms() + ms;
  struct stat st;

  while (stat(path, &st) != 0 || st.st_size == 0) {
    if (test_now_ms() > deadline)
      return -1;
    test_sleep_ms(10);
  }
  return 0;
}

/* ---- running the binary ----------------------------------------------- */

/* $DLOCK_URL for the processes started next; NULL: not set. */
static const char *child_dlock_url;

/* More "NAME=VALUE" entries for the environment of the processes started
 * next (at most 4, NULL-terminated); the passwords dlock reads from the
 * environment are unset unless given here. */
static const char *child_env[5];

typedef struct cli_proc {
  pid_t pid;
  char out[256]; /* where its stdout went */
  char err[256]; /* where its stderr went */
} cli_proc_t;

/* Points fd 'target' at 'path' (opened with 'flags'), in the child. */
static void redirect(int target, const char *path, int flags) {
  int fd = open(path, flags, 0644);
  if (fd < 0 || dup2(fd, target) < 0)
    _exit(121);
  if (fd != target)
    close(fd);
}

/*
 * Starts the binary with the arguments of the NULL-terminated list 'args',
 * stdin from 'stdin_path' (or /dev/null), stdout and stderr into files of
 * the scratch directory, and no descriptor beyond the three: so whatever
 * else its command has open came from dlock or the library.
 */
static void spawn_cli(cli_test_t *t, cli_proc_t *p, const char *stdin_path,
                      const char *const *args) {
  const char *argv[64];
  int argc = 0;

  argv[argc++] = cli_path();
  for (; *args != NULL && argc < 63; args++)
    argv[argc++] = *args;
  argv[argc] = NULL;

  int n = t->nruns++;
  snprintf(p->out, sizeof p->out, "%s/out.%d", t->dir, n);
  snprintf(p->err, sizeof p->err, "%s/err.%d", t->dir, n);
  fflush(NULL);
  p->pid = fork();
  ASSERT(p->pid >= 0);
  if (p->pid == 0) {
    redirect(0, stdin_path ? stdin_path : "/dev/null", O_RDONLY);
    redirect(1, p->out, O_WRONLY | O_CREAT | O_TRUNC);
    redirect(2, p->err, O_WRONLY | O_CREAT | O_TRUNC);
    for (int fd = 3; fd < 1024; fd++)
      close(fd);
    if (child_dlock_url != NULL)
      setenv("DLOCK_URL", child_dlock_url, 1);
    else
      unsetenv("DLOCK_URL");
    unsetenv("DLOCK_NAME");
    unsetenv("DLOCK_TOKEN");
    unsetenv("DLOCK_PASSWORD");
    unsetenv("REDISCLI_AUTH");
    for (const char *const *e = child_env; *e != NULL; e++)
      putenv((char *)*e);
    execv(argv[0], (char *const *)argv);
    _exit(122);
  }
}

/* The exit status as a shell shows it: the code, or 128 + signal. */
static int wait_cli(cli_proc_t *p) {
  int status;

  while (waitpid(p->pid, &status, 0) < 0)
    ASSERT_EQ(errno, EINTR);
  if (WIFSIGNALED(status))
    return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

/* Builds the argument list "--url URL <args...>" from a va_list. */
static void collect_args(cli_test_t *t, const char **out, size_t cap,
                         int with_url, const char *first, va_list ap) {
  size_t n = 0;

  if (with_url) {
    out[n++] = "--url";
    out[n++] = rp_url(t->server);
  }
  for (const char *a = first; a != NULL && n < cap - 1;
       a = va_arg(ap, const char *))
    out[n++] = a;
  out[n] = NULL;
}

/* Starts "dlock --url URL <args...>" (NULL-terminated) in the background. */
static void start_cli(cli_test_t *t, cli_proc_t *p, const char *first, ...) {
  const char *args[64];
  va_list ap;

  va_start(ap, first);
  collect_args(t, args, 64, 1, first, ap);
  va_end(ap);
  spawn_cli(t, p, NULL, args);
}

/* Runs "dlock --url URL <args...>" to the end; returns its exit status and
 * leaves the process record (output files) in '*p'. */
static int run_cli(cli_test_t *t, cli_proc_t *p, const char *first, ...) {
  const char *args[64];
  va_list ap;

  va_start(ap, first);
  collect_args(t, args, 64, 1, first, ap);
  va_end(ap);
  spawn_cli(t, p, NULL, args);
  return wait_cli(p);
}

/* The same without the --url prefix, for checks of the command line. */
static int run_cli_bare(cli_test_t *t, cli_proc_t *p, const char *first, ...) {
  const char *args[64];
  va_list ap;

  va_start(ap, first);
  collect_args(t, args, 64, 0, first, ap);
  va_end(ap);
  spawn_cli(t, p, NULL, args);
  return wait_cli(p);
}

static void assert_file_contains(const char *path, const char *needle) {
  char *text = slurp(path);
  if (strstr(text, needle) == NULL)
    TEST_FAIL("%s does not contain \"%s\"; it holds:\n%s", path, needle, text);
  free(text);
}

static void assert_file_lacks(const char *path, const char *needle) {
  char *text = slurp(path);
  if (strstr(text, needle) != NULL)
    TEST_FAIL("%s contains \"%s\"; it holds:\n%s", path, needle, text);
  free(text);
}

/* ---- Redis ------------------------------------------------------------ */

static long long server_key_exists(rp_server_t *s, const char *key) {
  redisReply *r = rp_cmd(s, "EXISTS %s", key);
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->type, REDIS_REPLY_INTEGER);
  long long v = r->integer;
  freeReplyObject(r);
  return v;
}

static long long key_exists(cli_test_t *t, const char *key) {
  return server_key_exists(t->server, key);
}

static void server_delete_key(rp_server_t *s, const char *key) {
  redisReply *r = rp_cmd(s, "DEL %s", key);
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->integer, 1);
  freeReplyObject(r);
}

static void delete_key(cli_test_t *t, const char *key) {
  server_delete_key(t->server, key);
}

/* Waits until a holder has taken lock 'key'; fails the test after 5 s. */
static void wait_until_held(cli_test_t *t, const char *key) {
  int64_t deadline = test_now_ms() + 5000;
  while (!key_exists(t, key)) {
    if (test_now_ms() > deadline)
      TEST_FAIL("lock '%s' was never taken", key);
    test_sleep_ms(10);
  }
}

/* ---- a small JSON reader for "status --json" --------------------------- */

typedef enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ } json_type_t;

typedef struct json {
  json_type_t type;
  long long num; /* J_NUM (integers only: all dlock prints) and J_BOOL */
  char *str;     /* J_STR */
  size_t n;      /* J_ARR, J_OBJ: number of items */
  char **keys;   /* J_OBJ */
  struct json *items;
} json_t;

typedef struct json_reader {
  const char *p;
  const char *error;
} json_reader_t;

static int json_parse_value(json_reader_t *r, json_t *out);

static void json_skip_space(json_reader_t *r) {
  while (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r')
    r->p++;
}

static int json_fail(json_reader_t *r, const char *why) {
  if (r->error == NULL)
    r->error = why;
  return -1;
}

static int json_parse_string(json_reader_t *r, char **out) {
  size_t cap = 16, len = 0;
  char *s = malloc(cap);

  if (*r->p++ != '"')
    return json_fail(r, "expected a string");
  while (*r->p != '"') {
    char c = *r->p++;
    if (c == '\0' || (unsigned char)c < 0x20)
      return json_fail(r, "unterminated string or raw control character");
    if (c == '\\') {
      char e = *r->p++;
      const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
      const char *hit = e ? strchr(from, e) : NULL;
      if (e == 'u') {
        unsigned v;
        if (sscanf(r->p, "%4x", &v) != 1)
          return json_fail(r, "bad \\u escape");
        r->p += 4;
        c = v < 0x80 ? (char)v : '?';
      } else if (hit != NULL) {
        c = to[hit - from];
      } else {
        return json_fail(r, "bad escape");
      }
    }
    if (len + 2 > cap)
      s = realloc(s, cap *= 2);
    s[len++] = c;
  }
  r->p++;
  s[len] = '\0';
  *out = s;
  return 0;
}

static int json_parse_items(json_reader_t *r, json_t *out, int object) {
  char close = object ? '}' : ']';

  r->p++;
  json_skip_space(r);
  if (*r->p == close) {
    r->p++;
    return 0;
  }
  for (;;) {
    out->items = realloc(out->items, (out->n + 1) * sizeof *out->items);
    out->keys = realloc(out->keys, (out->n + 1) * sizeof *out->keys);
    out->keys[out->n] = NULL;
    json_skip_space(r);
    if (object) {
      if (json_parse_string(r, &out->keys[out->n]) != 0)
        return -1;
      json_skip_space(r);
      if (*r->p++ != ':')
        return json_fail(r, "expected ':'");
    }
    if (json_parse_value(r, &out->items[out->n]) != 0)
      return -1;
    out->n++;
    json_skip_space(r);
    if (*r->p == close) {
      r->p++;
      return 0;
    }
    if (*r->p++ != ',')
      return json_fail(r, "expected ',' between items");
  }
}

static int json_parse_value(json_reader_t *r, json_t *out) {
  memset(out, 0, sizeof *out);
  json_skip_space(r);
  if (*r->p == '{') {
    out->type = J_OBJ;
    return json_parse_items(r, out, 1);
  }
  if (*r->p == '[') {
    out->type = J_ARR;
    return json_parse_items(r, out, 0);
  }
  if (*r->p == '"') {
    out->type = J_STR;
    return json_parse_string(r, &out->str);
  }
  if (strncmp(r->p, "true", 4) == 0 || strncmp(r->p, "false", 5) == 0) {
    out->type = J_BOOL;
    out->num = *r->p == 't';
    r->p += out->num ? 4 : 5;
    return 0;
  }
  if (strncmp(r->p, "null", 4) == 0) {
    out->type = J_NULL;
    r->p += 4;
    return 0;
  }
  char *end;
  out->type = J_NUM;
  out->num = strtoll(r->p, &end, 10);
  if (end == r->p || *end == '.' || *end == 'e' || *end == 'E')
    return json_fail(r, "expected an integer, string, object or array");
  r->p = end;
  return 0;
}

static void json_free(json_t *v) {
  for (size_t i = 0; i < v->n; i++) {
    json_free(&v->items[i]);
    free(v->keys ? v->keys[i] : NULL);
  }
  free(v->items);
  free(v->keys);
  free(v->str);
}

/* Parses one complete JSON document; fails the test when it is not. */
static void json_parse(const char *text, json_t *out) {
  json_reader_t r = {text, NULL};

  if (json_parse_value(&r, out) == 0) {
    json_skip_space(&r);
    if (*r.p != '\0')
      json_fail(&r, "trailing characters");
  }
  if (r.error != NULL)
    TEST_FAIL("bad JSON (%s) at offset %d of: %s", r.error, (int)(r.p - text),
              text);
}

/* The member 'key' of object 'o', of type 'type'; fails when absent. */
static const json_t *json_get(const json_t *o, const char *key,
                              json_type_t type) {
  ASSERT_EQ(o->type, J_OBJ);
  for (size_t i = 0; i < o->n; i++) {
    if (strcmp(o->keys[i], key) == 0) {
      if (o->items[i].type != type)
        TEST_FAIL("JSON member \"%s\" has type %d, expected %d", key,
                  (int)o->items[i].type, (int)type);
      return &o->items[i];
    }
  }
  TEST_FAIL("JSON object has no member \"%s\"", key);
}

/* ---- help, version and usage ------------------------------------------ */

TEST(cli_help_and_version) {
  cli_test_t t;
  cli_proc_t p;
  static const char *const commands[] = {"run", "status", "unlock", "demo",
                                         "latch"};

  start_test(&t);
  ASSERT_EQ(run_cli_bare(&t, &p, "--version", NULL), 0);
  assert_file_contains(p.out, "dlock " DLOCK_VERSION_STRING);
  ASSERT_EQ(run_cli_bare(&t, &p, "--help", NULL), 0);
  for (size_t i = 0; i < 5; i++)
    assert_file_contains(p.out, commands[i]);
  assert_file_contains(p.out, "Exit status");
  /* The global options and the environment are told once, here, with the
   * password kept out of the URL (and so out of ps). */
  assert_file_contains(p.out, "Global options");
  assert_file_contains(p.out, "--url URL");
  assert_file_contains(p.out, "--watchdog DUR");
  assert_file_contains(p.out, "DLOCK_PASSWORD");
  assert_file_contains(p.out, "REDISCLI_AUTH");
  assert_file_lacks(p.out, "://:");
  assert_file_lacks(p.out, "bare number");
  for (size_t i = 0; i < 5; i++) {
    ASSERT_EQ(run_cli_bare(&t, &p, commands[i], "--help", NULL), 0);
    assert_file_contains(p.out, "usage: dlock ");
    assert_file_contains(p.out, "default");
    assert_file_contains(p.out, "Examples:");
    /* Each command's help points there instead of repeating it all. */
    assert_file_contains(p.out, "see 'dlock --help'");
    assert_file_lacks(p.out, "Global options (before or after");
    assert_file_lacks(p.out, "Environment:");
    assert_file_lacks(p.out, "://:");
  }
  ASSERT_EQ(run_cli_bare(&t, &p, "run", "-h", NULL), 0);
  assert_file_contains(p.out, "--wait DUR");
  assert_file_contains(p.out, "--grace DUR");
  assert_file_contains(p.out, "--lease DUR");
  assert_file_contains(p.out, "--quiet");
  assert_file_contains(p.out, "--conflict-exit-code N");
  assert_file_contains(p.out, "cron");
  end_test(&t);
}

/* Runs a command line that must be refused as bad usage (64), without
 * starting anything, and with the reason and a usage line on stderr. */
static void expect_usage_error(cli_test_t *t, const char *reason,
                               const char *first, ...) {
  const char *args[64];
  cli_proc_t p;
  va_list ap;

  va_start(ap, first);
  collect_args(t, args, 64, 1, first, ap);
  va_end(ap);
  spawn_cli(t, &p, NULL, args);
  ASSERT_EQ(wait_cli(&p), 64);
  assert_file_contains(p.err, reason);
  assert_file_contains(p.err, "usage: dlock");
}

TEST(cli_bad_usage_exits_64) {
  cli_test_t t;
  const char *ran = NULL;

  start_test(&t);
  ran = scratch(&t, "ran");
  expect_usage_error(&t, "missing command", NULL);
  expect_usage_error(&t, "unknown command 'lock'", "lock", "x", NULL);
  expect_usage_error(&t, "unknown option '--frobnicate'", "run", "--frobnicate",
                     "x", "true", NULL);
  expect_usage_error(&t, "unknown unit", "run", "--wait", "5x", "x", "touch",
                     ran, NULL);
  expect_usage_error(&t, "cannot be negative", "run", "--wait", "-1", "x",
                     "touch", ran, NULL);
  expect_usage_error(&t, "fractions", "run", "--grace=1.5s", "x", "touch", ran,
                     NULL);
  expect_usage_error(&t, "too long", "run", "--lease", "99999999999h", "x",
                     "touch", ran, NULL);
  expect_usage_error(&t, "too short", "run", "--lease", "0", "x", "touch", ran,
                     NULL);
  /* A number needs its unit (flock -w 5 is seconds, elsewhere it may be
   * milliseconds); only 0 goes without. */
  expect_usage_error(&t, "'5' needs a unit: 5s for seconds or 5ms", "run",
                     "--wait", "5", "x", "touch", ran, NULL);
  expect_usage_error(&t, "--watchdog: '30000' needs a unit", "--watchdog",
                     "30000", "status", "x", NULL);
  expect_usage_error(&t, "--grace: '1' needs a unit", "run", "--grace=1", "x",
                     "touch", ran, NULL);
  expect_usage_error(&t, "not a number from 0 to 255", "run", "-E", "256", "x",
                     "touch", ran, NULL);
  expect_usage_error(&t, "not a number from 0 to 255", "run",
                     "--conflict-exit-code=x", "x", "touch", ran, NULL);
  expect_usage_error(&t, "exclude each other", "unlock", "--force", "--fair",
                     "--read", "x", NULL);
  expect_usage_error(&t, "missing value", "run", "x", "--wait", NULL);
  expect_usage_error(&t, "more than once", "run", "--wait", "1s", "--wait",
                     "2s", "x", "touch", ran, NULL);
  expect_usage_error(&t, "more than once", "--watchdog", "1s", "status",
                     "--watchdog", "2s", "x", NULL);
  /* --url may be repeated (a RedLock), but not with the same server. */
  expect_usage_error(&t, "given twice", "--url", rp_url(t.server), "status",
                     "x", NULL);
  expect_usage_error(&t, "exclude each other", "run", "--fair", "--read", "x",
                     "touch", ran, NULL);
  expect_usage_error(&t, "exclude each other", "run", "--write", "x", "--read",
                     "touch", ran, NULL);
  expect_usage_error(&t, "RedLock is made of reentrant locks", "--url",
                     "redis://127.0.0.1:1", "run", "--fair", "x", "touch", ran,
                     NULL);
  expect_usage_error(&t, "RedLock is made of reentrant locks", "run", "--read",
                     "--url", "redis://127.0.0.1:1", "x", "touch", ran, NULL);
  expect_usage_error(&t, "single --url", "demo", "--url", "redis://127.0.0.1:1",
                     NULL);
  expect_usage_error(&t, "missing command to run", "run", "x", NULL);
  expect_usage_error(&t, "missing lock name", "run", NULL);
  expect_usage_error(&t, "lock name is empty", "run", "", "true", NULL);
  expect_usage_error(&t, "missing lock name", "status", "--json", NULL);
  expect_usage_error(&t, "without --force", "unlock", "x", NULL);
  expect_usage_error(&t, "takes no value", "status", "--json=1", "x", NULL);
  ASSERT(!file_exists(ran));
  end_test(&t);
}

TEST(cli_bad_url_exits_64_and_masks_password) {
  cli_test_t t;
  cli_proc_t p;

  start_test(&t);
  ASSERT_EQ(run_cli_bare(&t, &p, "--url", "http://:hunter22@h:1", "status", "x",
                         NULL),
            64);
  assert_file_contains(p.err, "--url");
  assert_file_contains(p.err, "***");
  assert_file_lacks(p.err, "hunter22");
  /* A long URL quoted in part says so with an ellipsis. */
  ASSERT_EQ(run_cli_bare(&t, &p, "--url",
                         "http://a-rather-long-host-name.example.com:6379/0",
                         "status", "x", NULL),
            64);
  assert_file_contains(p.err, "(got \"http://a-rather-long-host-name.example.c"
                              "...\")");
  end_test(&t);
}

/* ---- unreachable or refusing servers ---------------------------------- */

TEST(cli_unreachable_server_exits_69) {
  cli_test_t t;
  cli_proc_t p;
  char url[64];
  const char *ran;

  start_test(&t);
  ran = scratch(&t, "ran");
  snprintf(url, sizeof url, "redis://:hunter22@127.0.0.1:%d",
           rp_port(t.server));
  ASSERT_EQ(rp_stop(t.server), 0);
  ASSERT_EQ(run_cli_bare(&t, &p, "--url", url, "run", "x", "touch", ran, NULL),
            69);
  ASSERT(!file_exists(ran));
  assert_file_contains(p.err, "redis://:***@127.0.0.1:");
  assert_file_lacks(p.err, "hunter22");
  ASSERT_EQ(run_cli_bare(&t, &p, "--url", url, "status", "x", NULL), 69);
  ASSERT_EQ(run_cli_bare(&t, &p, "--url", url, "unlock", "--force", "x", NULL),
            69);
  end_test(&t);
}

TEST(cli_refused_password_exits_69) {
  cli_test_t t;
  cli_proc_t p;
  rp_options_t o;
  rp_server_t *secured = NULL;
  char url[128];

  start_test(&t);
  rp_options_init(&o);
  o.requirepass = "right-password";
  ASSERT_EQ(rp_start(&o, &secured), 0);
  snprintf(url, sizeof url, "redis://:wrong-password@127.0.0.1:%d",
           rp_port(secured));
  ASSERT_EQ(run_cli_bare(&t, &p, "--url", url, "run", "x", "true", NULL), 69);
  assert_file_lacks(p.err, "wrong-password");
  /* The right password works. */
  ASSERT_EQ(
      run_cli_bare(&t, &p, "--url", rp_url(secured), "run", "x", "true", NULL),
      0);
  rp_free(secured);
  end_test(&t);
}

/* ---- dlock run: exit statuses ------------------------------------------ */

TEST(cli_run_exits_with_the_command_status) {
  cli_test_t t;
  cli_proc_t p;

  start_test(&t);
  ASSERT_EQ(run_cli(&t, &p, "run", "job", "--", "true", NULL), 0);
  ASSERT_EQ(run_cli(&t, &p, "run", "job", "sh", "-c", "exit 3", NULL), 3);
  ASSERT_EQ(run_cli(&t, &p, "run", "job", "--", "sh", "-c", "kill -9 $$", NULL),
            128 + SIGKILL);
  ASSERT_EQ(run_cli(&t, &p, "run", "job", "--", "no-such-command-xyz", NULL),
            127);
  assert_file_contains(p.err, "no-such-command-xyz");
  ASSERT_EQ(run_cli(&t, &p, "run", "job", "--", "/dev/null", NULL), 126);
  /* Whatever happened, the lock is free afterwards. */
  ASSERT_EQ(key_exists(&t, "job"), 0);
  end_test(&t);
}

TEST(cli_run_passes_name_and_increasing_token) {
  cli_test_t t;
  cli_proc_t p;
  unsigned long long token[3];

  start_test(&t);
  for (int i = 0; i < 3; i++) {
    ASSERT_EQ(run_cli(&t, &p, "run", "fenced:{job}", "--", "sh", "-c",
                      "echo \"$DLOCK_NAME|$DLOCK_TOKEN\"", NULL),
              0);
    char *out = slurp(p.out);
    char name[64];
    ASSERT_EQ(sscanf(out, "%63[^|]|%llu", name, &token[i]), 2);
    ASSERT_STR_EQ(name, "fenced:{job}");
    ASSERT_GT(token[i], 0);
    if (i > 0)
      ASSERT_GT(token[i], token[i - 1]);
    free(out);
  }
  end_test(&t);
}

TEST(cli_run_passes_stdin_and_stdout_through) {
  cli_test_t t;
  cli_proc_t p;
  const char *input;
  const char *args[8];

  start_test(&t);
  input = scratch(&t, "input");
  FILE *f = fopen(input, "w");
  ASSERT_NOT_NULL(f);
  fputs("line one\nline two\n", f);
  fclose(f);
  args[0] = "--url";
  args[1] = rp_url(t.server);
  args[2] = "run";
  args[3] = "pipe";
  args[4] = "cat";
  args[5] = NULL;
  spawn_cli(&t, &p, input, args);
  ASSERT_EQ(wait_cli(&p), 0);
  char *out = slurp(p.out);
  ASSERT_STR_EQ(out, "line one\nline two\n");
  free(out);
  char *err = slurp(p.err);
  ASSERT_STR_EQ(err, "");
  free(err);
  end_test(&t);
}

/* The descriptors above 2 that process 'pid' has open, printed when
 * 'show'. One that is gone between the listing and its readlink was the
 * program's own (the dynamic loader reading a library), not inherited. */
static int extra_descriptors(int pid, int show) {
  char fd_dir[64];
  snprintf(fd_dir, sizeof fd_dir, "/proc/%d/fd", pid);
  DIR *d = opendir(fd_dir);
  if (d == NULL)
    return -1;
  int extra = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    if (e->d_name[0] == '.' || atoi(e->d_name) <= 2)
      continue;
    char link[400], what[PATH_MAX];
    snprintf(link, sizeof link, "%s/%s", fd_dir, e->d_name);
    ssize_t n = readlink(link, what, sizeof what - 1);
    if (n <= 0)
      continue;
    what[n] = '\0';
    if (show)
      printf("command has fd %s -> %s\n", e->d_name, what);
    extra++;
  }
  closedir(d);
  return extra;
}

/* The state letter of process 'pid' (R, S, D, Z...), or 0 when it is gone. */
static char process_state(int pid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *paren = strrchr(buf, ')');
  return paren != NULL && paren[1] == ' ' ? paren[2] : 0;
}

TEST(cli_run_command_inherits_no_extra_descriptors) {
  cli_test_t t;
  cli_proc_t p;
  const char *pidfile;
  char script[512], exe[64], target[PATH_MAX];

  start_test(&t);
  pidfile = scratch(&t, "pid");
  snprintf(script, sizeof script, "echo $$ > %s; exec sleep 3", pidfile);
  start_cli(&t, &p, "run", "fds", "sh", "-c", script, NULL);
  ASSERT_EQ(wait_for_file(pidfile, 5000), 0);
  char *pid_text = slurp(pidfile);
  int pid = atoi(pid_text);
  free(pid_text);
  ASSERT_GT(pid, 0);

  /* Wait for the exec and then for sleep to be asleep: while the dynamic
   * loader runs, the program has a library open for a moment, which is
   * its own descriptor and not one it inherited. */
  snprintf(exe, sizeof exe, "/proc/%d/exe", pid);
  for (int64_t end = test_now_ms() + 3000;; test_sleep_ms(10)) {
    ssize_t n = readlink(exe, target, sizeof target - 1);
    ASSERT_GT(n, 0);
    target[n] = '\0';
    if (strstr(target, "sleep") != NULL && process_state(pid) == 'S')
      break;
    ASSERT_LT(test_now_ms(), end);
  }
  /* An inherited descriptor stays for the program's life: one seen once
   * and gone 100 ms later was a passing one of its own. */
  int extra = extra_descriptors(pid, 1);
  if (extra != 0) {
    test_sleep_ms(100);
    extra = extra_descriptors(pid, 1);
  }
  ASSERT_EQ(extra, 0);
  kill(pid, SIGTERM);
  ASSERT_EQ(wait_cli(&p), 128 + SIGTERM);
  end_test(&t);
}

/* ---- dlock run: contention --------------------------------------------- */

/* Starts a holder of lock 'name' whose command sleeps 'sleep_s' seconds
 * and waits until it holds the lock. */
static void start_holder(cli_test_t *t, cli_proc_t *p, const char *name,
                         const char *sleep_s) {
  start_cli(t, p, "--watchdog", "600ms", "run", name, "--", "sleep", sleep_s,
            NULL);
  wait_until_held(t, name);
}

TEST(cli_run_not_acquired_exits_75_without_running) {
  cli_test_t t;
  cli_proc_t holder, p;
  const char *ran;

  start_test(&t);
  ran = scratch(&t, "ran");
  start_holder(&t, &holder, "busy", "3");

  ASSERT_EQ(run_cli(&t, &p, "run", "--wait", "0", "busy", "touch", ran, NULL),
            75);
  assert_file_contains(p.err, "'busy'");
  assert_file_contains(p.err, "not acquired");

  int64_t t0 = test_now_ms();
  ASSERT_EQ(run_cli(&t, &p, "run", "--wait", "300ms", "busy", "--", "touch",
                    ran, NULL),
            75);
  int64_t waited = test_now_ms() - t0;
  ASSERT_GE(waited, 300);
  ASSERT_LT(waited, 2000);
  assert_file_contains(p.err, "within 300ms");
  ASSERT(!file_exists(ran));

  kill(holder.pid, SIGTERM);
  ASSERT_EQ(wait_cli(&holder), 128 + SIGTERM);
  end_test(&t);
}

TEST(cli_run_waits_for_the_lock_to_be_released) {
  cli_test_t t;
  cli_proc_t holder, p;

  start_test(&t);
  start_cli(&t, &holder, "run", "queue", "sleep", "1", NULL);
  wait_until_held(&t, "queue");
  int64_t t0 = test_now_ms();
  ASSERT_EQ(run_cli(&t, &p, "run", "--wait", "5s", "queue", "true", NULL), 0);
  /* Woken by the release, not after a timeout or a poll interval. */
  ASSERT_LT(test_now_ms() - t0, 2500);
  ASSERT_EQ(wait_cli(&holder), 0);
  end_test(&t);
}

TEST(cli_two_runs_never_overlap) {
  cli_test_t t;
  cli_proc_t procs[4];
  const char *log;
  char script[512];

  start_test(&t);
  log = scratch(&t, "log");
  snprintf(script, sizeof script,
           "echo \"start $$\" >> %s; sleep 0.15; echo \"end $$\" >> %s", log,
           log);
  for (int i = 0; i < 4; i++)
    start_cli(&t, &procs[i], "run", "--wait", "20s", "shared", "sh", "-c",
              script, NULL);
  for (int i = 0; i < 4; i++)
    ASSERT_EQ(wait_cli(&procs[i]), 0);

  /* The log must read start A, end A, start B, end B, ...: no start
   * between another command's start and end. */
  char *text = slurp(log);
  char *save = NULL, *line = strtok_r(text, "\n", &save);
  int lines = 0;
  char open_pid[32] = "";
  for (; line != NULL; line = strtok_r(NULL, "\n", &save), lines++) {
    char word[16], pid[32];
    ASSERT_EQ(sscanf(line, "%15s %31s", word, pid), 2);
    if (lines % 2 == 0) {
      ASSERT_STR_EQ(word, "start");
      snprintf(open_pid, sizeof open_pid, "%s", pid);
    } else {
      ASSERT_STR_EQ(word, "end");
      ASSERT_STR_EQ(pid, open_pid);
    }
  }
  ASSERT_EQ(lines, 8);
  free(text);
  end_test(&t);
}

/* ---- dlock run: signals and lost locks --------------------------------- */

/* A command that records its pid, and on SIGTERM writes "TERM" to a file
 * and exits 7. "sleep & wait" keeps the shell able to run its trap at once. */
static void term_recording_script(cli_test_t *t, char *buf, size_t size) {
  snprintf(buf, size,
           "echo $$ > %s; trap 'echo TERM > %s; exit 7' TERM; "
           "sleep 30 & wait",
           scratch(t, "pid"), scratch(t, "term"));
}

TEST(cli_sigterm_is_forwarded_and_lock_released) {
  cli_test_t t;
  cli_proc_t p;
  char script[512];

  start_test(&t);
  term_recording_script(&t, script, sizeof script);
  start_cli(&t, &p, "run", "sig", "--", "sh", "-c", script, NULL);
  ASSERT_EQ(wait_for_file(scratch(&t, "pid"), 5000), 0);
  ASSERT_EQ(key_exists(&t, "sig"), 1);
  kill(p.pid, SIGTERM);
  ASSERT_EQ(wait_cli(&p), 7);
  assert_file_contains(scratch(&t, "term"), "TERM");
  ASSERT_EQ(key_exists(&t, "sig"), 0);
  end_test(&t);
}

TEST(cli_sigint_is_forwarded) {
  cli_test_t t;
  cli_proc_t p;
  char script[512];

  start_test(&t);
  snprintf(script, sizeof script,
           "echo $$ > %s; trap 'echo INT > %s; exit 9' INT; sleep 30 & wait",
           scratch(&t, "pid"), scratch(&t, "int"));
  start_cli(&t, &p, "run", "sig", "--", "sh", "-c", script, NULL);
  ASSERT_EQ(wait_for_file(scratch(&t, "pid"), 5000), 0);
  kill(p.pid, SIGINT);
  ASSERT_EQ(wait_cli(&p), 9);
  assert_file_contains(scratch(&t, "int"), "INT");
  ASSERT_EQ(key_exists(&t, "sig"), 0);
  end_test(&t);
}

/*
 * Ctrl-C at a terminal signals the whole foreground process group, so the
 * command gets SIGINT from the terminal itself; dlock must not pass on its
 * own copy, or the command would see two (many programs treat a second
 * Ctrl-C as "abort now"). dlock runs here as a session leader on a pty.
 */
TEST(cli_terminal_ctrl_c_reaches_the_command_once) {
  cli_test_t t;
  cli_proc_t p;
  char script[512];
  const char *ints;

  start_test(&t);
  ints = scratch(&t, "ints");
  snprintf(script, sizeof script,
           "trap 'echo INT >> %s' INT; echo $$ > %s; i=0; "
           "while [ $i -lt 8 ]; do sleep 0.1 & wait; i=$((i+1)); done; exit 5",
           ints, scratch(&t, "pid"));
  int master = posix_openpt(O_RDWR | O_NOCTTY);
  ASSERT(master >= 0);
  ASSERT_EQ(grantpt(master), 0);
  ASSERT_EQ(unlockpt(master), 0);
  char slave[128];
  ASSERT_EQ(ptsname_r(master, slave, sizeof slave), 0);

  snprintf(p.out, sizeof p.out, "%s/out.tty", t.dir);
  snprintf(p.err, sizeof p.err, "%s/err.tty", t.dir);
  fflush(NULL);
  p.pid = fork();
  ASSERT(p.pid >= 0);
  if (p.pid == 0) {
    /* A new session whose controlling terminal is the pty: opening it
     * makes dlock's process group the foreground one. */
    setsid();
    redirect(0, slave, O_RDWR);
    redirect(1, p.out, O_WRONLY | O_CREAT | O_TRUNC);
    redirect(2, p.err, O_WRONLY | O_CREAT | O_TRUNC);
    for (int fd = 3; fd < 1024; fd++)
      close(fd);
    execl(cli_path(), cli_path(), "--url", rp_url(t.server), "run", "tty", "sh",
          "-c", script, (char *)NULL);
    _exit(122);
  }
  ASSERT_EQ(wait_for_file(scratch(&t, "pid"), 5000), 0);
  test_sleep_ms(100);
  ASSERT_EQ(write(master, "\003", 1), 1);
  ASSERT_EQ(wait_cli(&p), 5);
  close(master);
  char *text = slurp(ints);
  ASSERT_STR_EQ(text, "INT\n");
  free(text);
  ASSERT_EQ(key_exists(&t, "tty"), 0);
  end_test(&t);
}

TEST(cli_signal_while_waiting_stops_without_running) {
  cli_test_t t;
  cli_proc_t holder, p;
  const char *ran;

  start_test(&t);
  ran = scratch(&t, "ran");
  start_holder(&t, &holder, "busy", "5");
  start_cli(&t, &p, "run", "busy", "touch", ran, NULL);
  test_sleep_ms(300);
  int64_t t0 = test_now_ms();
  kill(p.pid, SIGTERM);
  ASSERT_EQ(wait_cli(&p), 128 + SIGTERM);
  ASSERT_LT(test_now_ms() - t0, 2000);
  ASSERT(!file_exists(ran));
  assert_file_contains(p.err, "interrupted by SIGTERM");
  kill(holder.pid, SIGTERM);
  ASSERT_EQ(wait_cli(&holder), 128 + SIGTERM);
  end_test(&t);
}

TEST(cli_lost_lock_stops_the_command) {
  cli_test_t t;
  cli_proc_t p;
  char script[512];

  start_test(&t);
  term_recording_script(&t, script, sizeof script);
  start_cli(&t, &p, "--watchdog", "600ms", "run", "--grace", "3s", "lost", "--",
            "sh", "-c", script, NULL);
  ASSERT_EQ(wait_for_file(scratch(&t, "pid"), 5000), 0);
  int64_t t0 = test_now_ms();
  delete_key(&t, "lost");
  ASSERT_EQ(wait_cli(&p), 76);
  int64_t took = test_now_ms() - t0;
  printf("lock deleted -> dlock exited after %lld ms\n", (long long)took);
  /* A renewal every 200 ms notices the loss; SIGTERM ends the command. */
  ASSERT_LT(took, 1500);
  assert_file_contains(scratch(&t, "term"), "TERM");
  assert_file_contains(p.err, "lost");
  end_test(&t);
}

TEST(cli_unreachable_redis_past_the_lease_stops_the_command) {
  cli_test_t t;
  cli_proc_t p;
  char script[512];

  start_test(&t);
  term_recording_script(&t, script, sizeof script);
  start_cli(&t, &p, "--watchdog", "600ms", "run", "--grace", "3s", "paused",
            "--", "sh", "-c", script, NULL);
  ASSERT_EQ(wait_for_file(scratch(&t, "pid"), 5000), 0);
  int64_t t0 = test_now_ms();
  ASSERT_EQ(rp_pause(t.server), 0);
  ASSERT_EQ(wait_cli(&p), 76);
  int64_t took = test_now_ms() - t0;
  printf("redis paused -> dlock exited after %lld ms\n", (long long)took);
  ASSERT_EQ(rp_resume(t.server), 0);
  /* The key expires 600 ms after its last renewal at most; dlock must
   * notice soon after, not wait for Redis to come back. */
  ASSERT_LT(took, 1500);
  assert_file_contains(scratch(&t, "term"), "TERM");
  end_test(&t);
}

TEST(cli_lost_lock_sigkill_after_grace) {
  cli_test_t t;
  cli_proc_t p;
  char script[512];

  start_test(&t);
  snprintf(script, sizeof script, "echo $$ > %s; trap '' TERM; exec sleep 30",
           scratch(&t, "pid"));
  start_cli(&t, &p, "--watchdog", "600ms", "run", "--grace", "400ms",
            "stubborn", "sh", "-c", script, NULL);
  ASSERT_EQ(wait_for_file(scratch(&t, "pid"), 5000), 0);
  test_sleep_ms(100); /* let the shell reach the exec */
  int64_t t0 = test_now_ms();
  delete_key(&t, "stubborn");
  ASSERT_EQ(wait_cli(&p), 76);
  int64_t took = test_now_ms() - t0;
  ASSERT_GE(took, 400);
  ASSERT_LT(took, 2000);
  assert_file_contains(p.err, "SIGKILL");
  end_test(&t);
}

TEST(cli_fixed_lease_running_out_stops_the_command) {
  cli_test_t t;
  cli_proc_t p;

  start_test(&t);
  int64_t t0 = test_now_ms();
  ASSERT_EQ(run_cli(&t, &p, "run", "--lease", "400ms", "--grace", "1s",
                    "leased", "sleep", "30", NULL),
            76);
  int64_t took = test_now_ms() - t0;
  ASSERT_GE(took, 350);
  ASSERT_LT(took, 2000);
  assert_file_contains(p.err, "--lease ran out");
  end_test(&t);
}

/* ---- dlock status ------------------------------------------------------ */

static void check_held_report(const json_t *o, const char *name) {
  ASSERT_STR_EQ(json_get(o, "name", J_STR)->str, name);
  ASSERT_EQ(json_get(o, "locked", J_BOOL)->num, 1);
  ASSERT_EQ(json_get(o, "mode", J_NULL)->type, J_NULL);
  long long ttl = json_get(o, "ttl_ms", J_NUM)->num;
  ASSERT_GT(ttl, 0);
  ASSERT_LE(ttl, 600);
  ASSERT_GE(json_get(o, "token", J_NUM)->num, 1);
  const json_t *holders = json_get(o, "holders", J_ARR);
  ASSERT_EQ(holders->n, 1);
  const json_t *owner = json_get(&holders->items[0], "owner", J_STR);
  /* Redisson's owner layout: "<client-uuid>:<thread-or-owner-id>". */
  ASSERT_NOT_NULL(strchr(owner->str, ':'));
  ASSERT_EQ(json_get(&holders->items[0], "count", J_NUM)->num, 1);
  ASSERT_EQ(json_get(o, "waiters", J_ARR)->n, 0);
}

static void check_free_report(const json_t *o, const char *name) {
  ASSERT_STR_EQ(json_get(o, "name", J_STR)->str, name);
  ASSERT_EQ(json_get(o, "locked", J_BOOL)->num, 0);
  ASSERT_EQ(json_get(o, "ttl_ms", J_NUM)->num, 0);
  ASSERT_EQ(json_get(o, "holders", J_ARR)->n, 0);
  ASSERT_EQ(json_get(o, "waiters", J_ARR)->n, 0);
}

TEST(cli_status_json_describes_held_and_free_locks) {
  cli_test_t t;
  cli_proc_t holder, p;
  const char *odd = "odd \"name\"\twith\\escapes";

  start_test(&t);
  start_holder(&t, &holder, "report", "3");
  ASSERT_EQ(run_cli(&t, &p, "status", "--json", "report", "--", odd, NULL), 0);
  char *out = slurp(p.out);
  char *save = NULL;
  char *first = strtok_r(out, "\n", &save);
  char *second = strtok_r(NULL, "\n", &save);
  ASSERT_NOT_NULL(first);
  ASSERT_NOT_NULL(second);
  ASSERT_NULL(strtok_r(NULL, "\n", &save));
  json_t held, free_lock;
  json_parse(first, &held);
  json_parse(second, &free_lock);
  check_held_report(&held, "report");
  check_free_report(&free_lock, odd);
  json_free(&held);
  json_free(&free_lock);
  free(out);

  /* The table says the same for people. */
  ASSERT_EQ(run_cli(&t, &p, "status", "report", NULL), 0);
  assert_file_contains(p.out, "NAME");
  assert_file_contains(p.out, "held");
  assert_file_contains(p.out, "(x1)");

  kill(holder.pid, SIGTERM);
  ASSERT_EQ(wait_cli(&holder), 128 + SIGTERM);
  ASSERT_EQ(run_cli(&t, &p, "status", "--json", "report", NULL), 0);
  out = slurp(p.out);
  json_parse(out, &free_lock);
  check_free_report(&free_lock, "report");
  ASSERT_GE(json_get(&free_lock, "token", J_NUM)->num, 1);
  json_free(&free_lock);
  free(out);
  end_test(&t);
}

TEST(cli_uses_dlock_url_from_the_environment) {
  cli_test_t t;
  cli_proc_t holder, p;

  start_test(&t);
  start_holder(&t, &holder, "envurl", "2");
  child_dlock_url = rp_url(t.server);
  ASSERT_EQ(run_cli_bare(&t, &p, "status", "--json", "envurl", NULL), 0);
  child_dlock_url = NULL;
  assert_file_contains(p.out, "\"locked\":true");
  ASSERT_EQ(wait_cli(&holder), 0);
  end_test(&t);
}

/* ---- dlock unlock --force ---------------------------------------------- */

TEST(cli_unlock_force_removes_and_refuses_without_force) {
  cli_test_t t;
  cli_proc_t holder, p;

  start_test(&t);
  start_holder(&t, &holder, "stuck", "30");

  ASSERT_EQ(run_cli(&t, &p, "unlock", "stuck", NULL), 64);
  assert_file_contains(p.err, "without --force");
  ASSERT_EQ(key_exists(&t, "stuck"), 1);

  ASSERT_EQ(run_cli(&t, &p, "unlock", "--force", "stuck", NULL), 0);
  assert_file_contains(p.out, "removed lock 'stuck'");
  assert_file_contains(p.out, "(x1)");
  ASSERT_EQ(key_exists(&t, "stuck"), 0);

  /* The holder's watchdog notices and its command is stopped. */
  ASSERT_EQ(wait_cli(&holder), 76);

  ASSERT_EQ(run_cli(&t, &p, "unlock", "--force", "stuck", NULL), 0);
  assert_file_contains(p.out, "nothing removed");
  end_test(&t);
}

/* ---- dlock run: fair and read-write locks ------------------------------- */

/* A command that appends 'tag' to 'log', then waits until the file 'gate'
 * exists (at most 10 s), so the test decides when it lets go. */
static void gated_script(char *buf, size_t size, const char *log,
                         const char *tag, const char *gate) {
  snprintf(buf, size,
           "echo %s >> %s; i=0; while [ ! -e %s ] && [ $i -lt 200 ]; "
           "do sleep 0.05; i=$((i+1)); done",
           tag, log, gate);
}

/* "status --json NAME" parsed into '*out' (one lock, one server). */
static void status_json(cli_test_t *t, const char *name, json_t *out) {
  cli_proc_t p;

  ASSERT_EQ(run_cli(t, &p, "status", "--json", name, NULL), 0);
  char *text = slurp(p.out);
  json_parse(text, out);
  free(text);
}

/* Waits until lock 'name' has 'n' fair-lock waiters; fails after 5 s. */
static void wait_for_waiters(cli_test_t *t, const char *name, size_t n) {
  int64_t deadline = test_now_ms() + 5000;

  for (;;) {
    json_t o;
    status_json(t, name, &o);
    size_t have = json_get(&o, "waiters", J_ARR)->n;
    json_free(&o);
    if (have == n)
      return;
    if (test_now_ms() > deadline)
      TEST_FAIL("lock '%s' has %zu waiters, expected %zu", name, have, n);
    test_sleep_ms(20);
  }
}

static int64_t wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

TEST(cli_run_fair_serves_waiters_in_order_and_status_shows_them) {
  cli_test_t t;
  cli_proc_t holder, first, second, p;
  const char *log, *gate;
  char script[512];

  start_test(&t);
  log = scratch(&t, "log");
  gate = scratch(&t, "gate");
  gated_script(script, sizeof script, log, "holder", gate);
  start_cli(&t, &holder, "--watchdog", "600ms", "run", "--fair", "fq", "--",
            "sh", "-c", script, NULL);
  wait_until_held(&t, "fq");
  /* Queued one after the other, so their order is known. */
  start_cli(&t, &first, "run", "--fair", "fq", "--", "sh", "-c",
            "echo first >> \"$0\"", log, NULL);
  wait_for_waiters(&t, "fq", 1);
  start_cli(&t, &second, "run", "--fair", "fq", "--", "sh", "-c",
            "echo second >> \"$0\"", log, NULL);
  wait_for_waiters(&t, "fq", 2);

  json_t o;
  status_json(&t, "fq", &o);
  ASSERT_EQ(json_get(&o, "locked", J_BOOL)->num, 1);
  ASSERT_EQ(json_get(&o, "holders", J_ARR)->n, 1);
  const json_t *waiters = json_get(&o, "waiters", J_ARR);
  for (size_t i = 0; i < waiters->n; i++) {
    ASSERT_NOT_NULL(
        strchr(json_get(&waiters->items[i], "owner", J_STR)->str, ':'));
    /* A deadline in Unix ms, in the future: when the waiter is dropped. */
    ASSERT_GT(json_get(&waiters->items[i], "deadline_ms", J_NUM)->num,
              wall_ms());
  }
  json_free(&o);
  ASSERT_EQ(run_cli(&t, &p, "status", "fq", NULL), 0);
  assert_file_contains(p.out, "waiter 1: ");
  assert_file_contains(p.out, "waiter 2: ");
  assert_file_contains(p.out, "dropped in");

  FILE *f = fopen(gate, "w");
  ASSERT_NOT_NULL(f);
  fclose(f);
  ASSERT_EQ(wait_cli(&holder), 0);
  ASSERT_EQ(wait_cli(&first), 0);
  ASSERT_EQ(wait_cli(&second), 0);
  char *text = slurp(log);
  ASSERT_STR_EQ(text, "holder\nfirst\nsecond\n");
  free(text);
  status_json(&t, "fq", &o);
  ASSERT_EQ(json_get(&o, "locked", J_BOOL)->num, 0);
  ASSERT_EQ(json_get(&o, "waiters", J_ARR)->n, 0);
  json_free(&o);
  end_test(&t);
}

/* A waiter interrupted while queued must not hold up the queue: later
 * waiters get the lock when it is released, not minutes later. */
TEST(cli_run_fair_interrupted_waiter_leaves_the_queue) {
  cli_test_t t;
  cli_proc_t holder, waiter, p;
  const char *gate;
  char script[512];

  start_test(&t);
  gate = scratch(&t, "gate");
  gated_script(script, sizeof script, scratch(&t, "log"), "holder", gate);
  start_cli(&t, &holder, "run", "--fair", "fq", "--", "sh", "-c", script, NULL);
  wait_until_held(&t, "fq");
  start_cli(&t, &waiter, "run", "--fair", "fq", "--", "true", NULL);
  wait_for_waiters(&t, "fq", 1);
  kill(waiter.pid, SIGTERM);
  ASSERT_EQ(wait_cli(&waiter), 128 + SIGTERM);
  wait_for_waiters(&t, "fq", 0);

  FILE *f = fopen(gate, "w");
  ASSERT_NOT_NULL(f);
  fclose(f);
  ASSERT_EQ(wait_cli(&holder), 0);
  ASSERT_EQ(
      run_cli(&t, &p, "run", "--fair", "--wait", "2s", "fq", "true", NULL), 0);
  end_test(&t);
}

TEST(cli_run_read_locks_overlap) {
  cli_test_t t;
  cli_proc_t readers[2];
  char script[2][512];

  start_test(&t);
  /* Each reader marks that it is inside, then waits for the other to be
   * inside too: both succeed only if they hold the lock at once. */
  for (int i = 0; i < 2; i++) {
    char mine[16], other[16];
    snprintf(mine, sizeof mine, "in.%d", i);
    snprintf(other, sizeof other, "in.%d", 1 - i);
    snprintf(script[i], sizeof script[i],
             "touch %s; i=0; while [ ! -e %s ] && [ $i -lt 100 ]; do "
             "sleep 0.05; i=$((i+1)); done; [ -e %s ]",
             scratch(&t, mine), scratch(&t, other), scratch(&t, other));
  }
  for (int i = 0; i < 2; i++)
    start_cli(&t, &readers[i], "run", "--read", "--wait", "5s", "rw", "--",
              "sh", "-c", script[i], NULL);
  for (int i = 0; i < 2; i++)
    ASSERT_EQ(wait_cli(&readers[i]), 0);
  ASSERT_EQ(key_exists(&t, "rw"), 0);
  end_test(&t);
}

TEST(cli_run_write_excludes_read) {
  cli_test_t t;
  cli_proc_t holder, p;
  const char *gate, *ran;
  char script[512];
  json_t o;

  start_test(&t);
  ran = scratch(&t, "ran");
  gate = scratch(&t, "gate");
  gated_script(script, sizeof script, scratch(&t, "log"), "reader", gate);
  start_cli(&t, &holder, "run", "--read", "rw", "--", "sh", "-c", script, NULL);
  wait_until_held(&t, "rw");
  status_json(&t, "rw", &o);
  ASSERT_STR_EQ(json_get(&o, "mode", J_STR)->str, "read");
  json_free(&o);
  ASSERT_EQ(run_cli(&t, &p, "run", "--write", "--wait", "300ms", "rw", "touch",
                    ran, NULL),
            75);
  ASSERT(!file_exists(ran));

  FILE *f = fopen(gate, "w");
  ASSERT_NOT_NULL(f);
  fclose(f);
  ASSERT_EQ(wait_cli(&holder), 0);
  remove(gate);

  /* And the other way round: a writer keeps readers out. */
  gated_script(script, sizeof script, scratch(&t, "log"), "writer", gate);
  start_cli(&t, &holder, "run", "--write", "rw", "--", "sh", "-c", script,
            NULL);
  wait_until_held(&t, "rw");
  status_json(&t, "rw", &o);
  ASSERT_STR_EQ(json_get(&o, "mode", J_STR)->str, "write");
  json_free(&o);
  ASSERT_EQ(run_cli(&t, &p, "status", "rw", NULL), 0);
  assert_file_contains(p.out, "write");
  ASSERT_EQ(
      run_cli(&t, &p, "run", "--read", "--wait", "0", "rw", "touch", ran, NULL),
      75);
  ASSERT(!file_exists(ran));
  f = fopen(gate, "w");
  ASSERT_NOT_NULL(f);
  fclose(f);
  ASSERT_EQ(wait_cli(&holder), 0);
  ASSERT_EQ(run_cli(&t, &p, "run", "--read", "--wait", "2s", "rw", "touch", ran,
                    NULL),
            0);
  ASSERT(file_exists(ran));
  end_test(&t);
}

/* ---- RedLock over several servers --------------------------------------- */

#define NRED 3

/* Three servers for a RedLock: the test's own and two more, the last one
 * with a password, which must never be printed. */
typedef struct red_test {
  cli_test_t t;
  rp_server_t *servers[NRED];
} red_test_t;

static void start_red_test(red_test_t *r) {
  rp_options_t o;

  start_test(&r->t);
  r->servers[0] = r->t.server;
  rp_options_init(&o);
  ASSERT_EQ(rp_start(&o, &r->servers[1]), 0);
  o.requirepass = "red-secret";
  ASSERT_EQ(rp_start(&o, &r->servers[2]), 0);
}

static void end_red_test(red_test_t *r) {
  for (int i = 1; i < NRED; i++)
    rp_free(r->servers[i]);
  end_test(&r->t);
}

/* Starts "dlock --url S1 --url S2 --url S3 <args...>" in the background. */
static void start_red(red_test_t *r, cli_proc_t *p, const char *first, ...) {
  const char *args[64];
  size_t n = 0;
  va_list ap;

  for (int i = 0; i < NRED; i++) {
    args[n++] = "--url";
    args[n++] = rp_url(r->servers[i]);
  }
  va_start(ap, first);
  for (const char *a = first; a != NULL && n < 63; a = va_arg(ap, const char *))
    args[n++] = a;
  va_end(ap);
  args[n] = NULL;
  spawn_cli(&r->t, p, NULL, args);
}

/* Waits until the RedLock 'key' is held on every server still running. */
static void wait_until_held_on_all(red_test_t *r, const char *key) {
  int64_t deadline = test_now_ms() + 5000;

  for (int i = 0; i < NRED; i++) {
    if (rp_pid(r->servers[i]) == 0)
      continue;
    while (!server_key_exists(r->servers[i], key)) {
      if (test_now_ms() > deadline)
        TEST_FAIL("lock '%s' was never taken on server %d", key, i);
      test_sleep_ms(10);
    }
  }
}

TEST(cli_redlock_runs_with_all_servers_and_with_one_down) {
  red_test_t r;
  cli_proc_t p;
  unsigned long long token;

  start_red_test(&r);
  start_red(&r, &p, "run", "red", "--", "sh", "-c",
            "echo \"$DLOCK_TOKEN\"; exit 3", NULL);
  ASSERT_EQ(wait_cli(&p), 3);
  char *out = slurp(p.out);
  ASSERT_EQ(sscanf(out, "%llu", &token), 1);
  ASSERT_GT(token, 0);
  free(out);
  for (int i = 0; i < NRED; i++)
    ASSERT_EQ(server_key_exists(r.servers[i], "red"), 0);

  /* One of three down before the start: two still make a majority. */
  ASSERT_EQ(rp_kill(r.servers[0]), 0);
  start_red(&r, &p, "run", "red", "--", "sh", "-c", "echo \"$DLOCK_TOKEN\"",
            NULL);
  ASSERT_EQ(wait_cli(&p), 0);
  out = slurp(p.out);
  unsigned long long later;
  ASSERT_EQ(sscanf(out, "%llu", &later), 1);
  ASSERT_GT(later, token);
  free(out);
  assert_file_contains(p.err, "left out of the RedLock");
  assert_file_lacks(p.err, "red-secret");
  end_red_test(&r);
}

TEST(cli_redlock_with_a_majority_down_exits_69) {
  red_test_t r;
  cli_proc_t p;
  const char *ran;

  start_red_test(&r);
  ran = scratch(&r.t, "ran");
  ASSERT_EQ(rp_kill(r.servers[0]), 0);
  ASSERT_EQ(rp_kill(r.servers[2]), 0);
  start_red(&r, &p, "run", "red", "touch", ran, NULL);
  ASSERT_EQ(wait_cli(&p), 69);
  ASSERT(!file_exists(ran));
  assert_file_contains(p.err, "majority");
  assert_file_contains(p.err, "redis://:***@127.0.0.1:");
  assert_file_lacks(p.err, "red-secret");
  end_red_test(&r);
}

TEST(cli_redlock_lost_on_a_majority_stops_the_command) {
  red_test_t r;
  cli_proc_t p;
  char script[512];

  start_red_test(&r);
  term_recording_script(&r.t, script, sizeof script);
  start_red(&r, &p, "--watchdog", "600ms", "run", "--grace", "3s", "red", "--",
            "sh", "-c", script, NULL);
  ASSERT_EQ(wait_for_file(scratch(&r.t, "pid"), 5000), 0);
  wait_until_held_on_all(&r, "red");
  int64_t t0 = test_now_ms();
  server_delete_key(r.servers[0], "red");
  server_delete_key(r.servers[2], "red");
  ASSERT_EQ(wait_cli(&p), 76);
  ASSERT_LT(test_now_ms() - t0, 1500);
  assert_file_contains(scratch(&r.t, "term"), "TERM");
  assert_file_contains(p.err, "fewer than a majority");
  end_red_test(&r);
}

TEST(cli_redlock_lost_on_a_minority_goes_on) {
  red_test_t r;
  cli_proc_t p;
  char script[512];

  start_red_test(&r);
  snprintf(script, sizeof script,
           "echo $$ > %s; sleep 0.8; echo done > %s; exit 5",
           scratch(&r.t, "pid"), scratch(&r.t, "done"));
  start_red(&r, &p, "--watchdog", "600ms", "run", "red", "--", "sh", "-c",
            script, NULL);
  ASSERT_EQ(wait_for_file(scratch(&r.t, "pid"), 5000), 0);
  wait_until_held_on_all(&r, "red");
  server_delete_key(r.servers[1], "red");
  ASSERT_EQ(wait_cli(&p), 5);
  assert_file_contains(scratch(&r.t, "done"), "done");
  /* The loss was noticed (a renewal every 200 ms) and reported. */
  assert_file_contains(p.err, "the command goes on");
  for (int i = 0; i < NRED; i++)
    ASSERT_EQ(server_key_exists(r.servers[i], "red"), 0);
  end_red_test(&r);
}

TEST(cli_redlock_status_and_unlock_on_every_server) {
  red_test_t r;
  cli_proc_t holder, p;

  start_red_test(&r);
  start_red(&r, &holder, "--watchdog", "600ms", "run", "red", "--", "sleep",
            "10", NULL);
  wait_until_held_on_all(&r, "red");

  start_red(&r, &p, "status", "--json", "red", NULL);
  ASSERT_EQ(wait_cli(&p), 0);
  char *out = slurp(p.out), *save = NULL;
  int lines = 0;
  for (char *line = strtok_r(out, "\n", &save); line != NULL;
       line = strtok_r(NULL, "\n", &save), lines++) {
    json_t o;
    ASSERT_LT(lines, NRED);
    json_parse(line, &o);
    const char *node = json_get(&o, "node", J_STR)->str;
    char port[16];
    snprintf(port, sizeof port, ":%d", rp_port(r.servers[lines]));
    ASSERT_NOT_NULL(strstr(node, port));
    ASSERT_EQ(json_get(&o, "locked", J_BOOL)->num, 1);
    ASSERT_EQ(json_get(&o, "holders", J_ARR)->n, 1);
    json_free(&o);
  }
  ASSERT_EQ(lines, NRED);
  free(out);
  assert_file_contains(p.out, "redis://:***@127.0.0.1:");
  assert_file_lacks(p.out, "red-secret");

  start_red(&r, &p, "status", "red", NULL);
  ASSERT_EQ(wait_cli(&p), 0);
  assert_file_contains(p.out, "NODE");
  assert_file_contains(p.out, "held on 3 of the 3 servers (a majority)");

  start_red(&r, &p, "unlock", "--force", "red", NULL);
  ASSERT_EQ(wait_cli(&p), 0);
  out = slurp(p.out);
  int removed = 0;
  for (const char *s = out; (s = strstr(s, ": removed lock 'red'")); s++)
    removed++;
  ASSERT_EQ(removed, NRED);
  free(out);
  assert_file_lacks(p.out, "red-secret");
  for (int i = 0; i < NRED; i++)
    ASSERT_EQ(server_key_exists(r.servers[i], "red"), 0);
  ASSERT_EQ(wait_cli(&holder), 76);

  /* A server that is down is shown as such, and the exit status says so. */
  ASSERT_EQ(rp_kill(r.servers[1]), 0);
  start_red(&r, &p, "status", "--json", "red", NULL);
  ASSERT_EQ(wait_cli(&p), 69);
  assert_file_contains(p.out, "\"error\":");
  assert_file_contains(p.out, "\"locked\":false");
  end_red_test(&r);
}

/* ---- dlock demo --------------------------------------------------------- */

TEST(cli_demo_on_a_private_server) {
  cli_test_t t;
  cli_proc_t p;

  start_test(&t);
  ASSERT_EQ(run_cli_bare(&t, &p, "demo", "--workers", "12", "--processes", "3",
                         "--stock", "10", NULL),
            0);
  assert_file_contains(p.out, "Started a private redis-server");
  assert_file_contains(p.out, "every cake was sold exactly once");
  char *out = slurp(p.out);
  long long sold_locked, sold_unlocked;
  const char *row = strstr(out, "  sold ");
  ASSERT_NOT_NULL(row);
  ASSERT_EQ(sscanf(row, " sold %lld %lld", &sold_locked, &sold_unlocked), 2);
  ASSERT_EQ(sold_locked, 10);
  /* The private server and its directory are gone afterwards. */
  const char *dir = strstr(out, "unix://");
  ASSERT_NOT_NULL(dir);
  char path[256];
  ASSERT_EQ(sscanf(dir, "unix://%255[^ \n]", path), 1);
  *strrchr(path, '/') = '\0';
  ASSERT(!file_exists(path));
  free(out);
  end_test(&t);
}

TEST(cli_demo_on_a_given_server) {
  cli_test_t t;
  cli_proc_t p;

  start_test(&t);
  ASSERT_EQ(run_cli(&t, &p, "demo", "--workers", "8", "--processes", "2",
                    "--stock", "5", NULL),
            0);
  assert_file_contains(p.out, "Using the Redis server at");
  assert_file_contains(p.out, "every cake was sold exactly once");
  ASSERT_EQ(key_exists(&t, "MoonCakeStock"), 1);
  ASSERT_EQ(key_exists(&t, "MoonCake"), 0);
  ASSERT_EQ(run_cli(&t, &p, "demo", "--processes", "9", "--workers", "3", NULL),
            64);
  end_test(&t);
}

/* ---- dlock unlock --force: only locks ----------------------------------- */

/* Runs "unlock --force [kind] NAME", expecting the refusal (65) with the
 * reason, and the key left as it was. */
static void expect_unlock_refused(cli_test_t *t, const char *kind,
                                  const char *name, const char *why) {
  cli_proc_t p;
  int rc = kind ? run_cli(t, &p, "unlock", "--force", kind, name, NULL)
                : run_cli(t, &p, "unlock", "--force", name, NULL);
  ASSERT_EQ(rc, 65);
  char want[128];
  snprintf(want, sizeof want, "refusing to delete '%s'", name);
  assert_file_contains(p.err, want);
  assert_file_contains(p.err, why);
  assert_file_contains(p.err, "nothing deleted");
  assert_file_lacks(p.out, "removed");
  ASSERT_EQ(key_exists(t, name), 1);
}

TEST(cli_unlock_force_refuses_keys_that_are_not_locks) {
  cli_test_t t;
  cli_proc_t p;

  start_test(&t);
  /* Not locks at all: left alone whatever kind is named. */
  redisReply *r = rp_cmd(t.server, "SET counter 5");
  freeReplyObject(r);
  expect_unlock_refused(&t, NULL, "counter", "holds a string");
  expect_unlock_refused(&t, "--fair", "counter", "holds a string");
  expect_unlock_refused(&t, "--write", "counter", "holds a string");
  r = rp_cmd(t.server, "GET counter");
  ASSERT_NOT_NULL(r);
  ASSERT_STR_EQ(r->str, "5");
  freeReplyObject(r);
  freeReplyObject(rp_cmd(t.server, "HSET profile name bob"));
  expect_unlock_refused(&t, NULL, "profile", "hash that is not a lock");
  freeReplyObject(rp_cmd(t.server, "RPUSH queue a"));
  expect_unlock_refused(&t, NULL, "queue", "holds a list");

  /* Locks of another kind than the one named. */
  freeReplyObject(rp_cmd(t.server, "HSET rw mode read c1:7 1"));
  expect_unlock_refused(&t, "--fair", "rw", "read-write lock");
  freeReplyObject(rp_cmd(t.server, "HSET ex c1:7 2"));
  expect_unlock_refused(&t, "--read", "ex", "not a read-write lock");

  /* Each removed by its own kind, named or found. */
  ASSERT_EQ(run_cli(&t, &p, "unlock", "--force", "--write", "rw", NULL), 0);
  assert_file_contains(p.out, "removed lock 'rw'");
  ASSERT_EQ(run_cli(&t, &p, "unlock", "--force", "ex", NULL), 0);
  assert_file_contains(p.out, "removed lock 'ex' held by c1:7 (x2)");
  ASSERT_EQ(key_exists(&t, "rw"), 0);
  ASSERT_EQ(key_exists(&t, "ex"), 0);
  ASSERT_EQ(key_exists(&t, "counter"), 1);
  end_test(&t);
}

/* ---- dlock run: when dlock itself dies ---------------------------------- */

/* 1 when process 'pid' is gone or a zombie (its parent has not reaped it
 * yet): it runs no more. */
static int process_ended(pid_t pid) {
  char state = process_state((int)pid);
  return state == 0 || state == 'Z' || state == 'X';
}

/* The pid of the command a "run" started, once it has exec'd 'program'. */
static pid_t wait_for_command(cli_test_t *t, const char *program) {
  ASSERT_EQ(wait_for_file(scratch(t, "pid"), 5000), 0);
  char *text = slurp(scratch(t, "pid"));
  pid_t pid = (pid_t)atoi(text);
  free(text);
  ASSERT_GT(pid, 0);
  char exe[64], target[PATH_MAX];
  snprintf(exe, sizeof exe, "/proc/%d/exe", (int)pid);
  for (int64_t end = test_now_ms() + 5000;; test_sleep_ms(10)) {
    ssize_t n = readlink(exe, target, sizeof target - 1);
    ASSERT_GT(n, 0);
    target[n] = '\0';
    if (strstr(target, program) != NULL)
      return pid;
    ASSERT_LT(test_now_ms(), end);
  }
}

TEST(cli_run_command_dies_when_dlock_is_killed) {
  cli_test_t t;
  cli_proc_t p;
  char script[512];

  start_test(&t);
  snprintf(script, sizeof script, "echo $$ > %s; exec sleep 60",
           scratch(&t, "pid"));
  start_cli(&t, &p, "--watchdog", "2s", "run", "guarded", "--", "sh", "-c",
            script, NULL);
  pid_t command = wait_for_command(&t, "sleep");
  wait_until_held(&t, "guarded");

  /* SIGKILL leaves dlock no chance to stop its command; the kernel must. */
  ASSERT_EQ(kill(p.pid, SIGKILL), 0);
  ASSERT_EQ(wait_cli(&p), 128 + SIGKILL);
  int64_t deadline = test_now_ms() + 5000;
  while (!process_ended(command)) {
    if (test_now_ms() > deadline) {
      kill(command, SIGKILL);
      TEST_FAIL("the command (pid %d) outlived dlock by 5 s, running on "
                "without the lock",
                (int)command);
    }
    test_sleep_ms(10);
  }
  end_test(&t);
}

/* ---- dlock run: Redis's own words --------------------------------------- */

TEST(cli_run_reports_redis_error_text) {
  cli_test_t t;
  cli_proc_t p;
  rp_options_t o;
  rp_server_t *replica = NULL;
  char replicaof[64];
  const char *ran;

  start_test(&t);
  ran = scratch(&t, "ran");
  rp_options_init(&o);
  ASSERT_EQ(rp_start(&o, &replica), 0);
  snprintf(replicaof, sizeof replicaof, "%d", rp_port(t.server));
  redisReply *r = rp_cmd(replica, "REPLICAOF 127.0.0.1 %s", replicaof);
  ASSERT_NOT_NULL(r);
  freeReplyObject(r);
  /* The acquisition runs on another thread than the message is printed
   * on; the library's detail must come along. */
  ASSERT_EQ(run_cli_bare(&t, &p, "--url", rp_url(replica), "run", "x", "touch",
                         ran, NULL),
            69);
  assert_file_contains(p.err, "cannot acquire lock 'x'");
  assert_file_contains(p.err, "READONLY");
  ASSERT(!file_exists(ran));
  rp_free(replica);
  end_test(&t);
}

/* ---- dlock run under cron ------------------------------------------------ */

static void assert_file_empty(const char *path) {
  char *text = slurp(path);
  if (text[0] != '\0')
    TEST_FAIL("%s is not empty; it holds:\n%s", path, text);
  free(text);
}

TEST(cli_run_quiet_and_conflict_exit_code_for_cron) {
  cli_test_t t;
  cli_proc_t holder, p;
  const char *ran;
  char down[64];

  start_test(&t);
  ran = scratch(&t, "ran");
  start_holder(&t, &holder, "nightly", "5");

  /* The hosts that lose the race: nothing on stderr (no cron mail). */
  ASSERT_EQ(run_cli(&t, &p, "run", "--wait", "0", "--quiet", "nightly", "touch",
                    ran, NULL),
            75);
  assert_file_empty(p.err);
  assert_file_empty(p.out);
  /* ... and, like flock -E, the status of one's choice; 0 makes cron see
   * success. */
  ASSERT_EQ(run_cli(&t, &p, "run", "--wait", "0", "-q", "-E", "0", "nightly",
                    "--", "touch", ran, NULL),
            0);
  assert_file_empty(p.err);
  ASSERT_EQ(run_cli(&t, &p, "run", "--wait", "100ms", "--conflict-exit-code=3",
                    "nightly", "touch", ran, NULL),
            3);
  assert_file_contains(p.err, "not acquired within 100ms");
  ASSERT(!file_exists(ran));

  /* The command's own status is its own, and real trouble is still said. */
  ASSERT_EQ(run_cli(&t, &p, "run", "-q", "-E", "0", "free-one", "sh", "-c",
                    "exit 4", NULL),
            4);
  snprintf(down, sizeof down, "redis://127.0.0.1:%d", 1);
  ASSERT_EQ(run_cli_bare(&t, &p, "--url", down, "run", "-q", "-E", "0",
                         "nightly", "touch", ran, NULL),
            69);
  assert_file_contains(p.err, "cannot use redis://127.0.0.1:1");
  ASSERT(!file_exists(ran));

  kill(holder.pid, SIGTERM);
  ASSERT_EQ(wait_cli(&holder), 128 + SIGTERM);
  end_test(&t);
}

/* ---- the password from the environment ----------------------------------- */

TEST(cli_password_from_the_environment) {
  cli_test_t t;
  cli_proc_t p;
  rp_options_t o;
  rp_server_t *secured = NULL;
  char url[64], wrong_url[96], user_url[96];

  start_test(&t);
  rp_options_init(&o);
  o.requirepass = "env-Secret-pw";
  ASSERT_EQ(rp_start(&o, &secured), 0);
  snprintf(url, sizeof url, "redis://127.0.0.1:%d", rp_port(secured));

  /* No password anywhere: refused. */
  ASSERT_EQ(run_cli_bare(&t, &p, "--url", url, "run", "x", "true", NULL), 69);

  child_env[0] = "DLOCK_PASSWORD=env-Secret-pw";
  ASSERT_EQ(run_cli_bare(&t, &p, "--url", url, "run", "x", "true", NULL), 0);
  /* The user "default" may be named, with the password still aside. */
  snprintf(user_url, sizeof user_url, "redis://default@127.0.0.1:%d",
           rp_port(secured));
  ASSERT_EQ(run_cli_bare(&t, &p, "--url", user_url, "status", "x", NULL), 0);
  /* The demo's buyers, in processes of their own, reach the server too,
   * for their data as for their lock. */
  ASSERT_EQ(run_cli_bare(&t, &p, "--url", url, "demo", "--workers", "6",
                         "--processes", "2", "--stock", "4", NULL),
            0);
  assert_file_contains(p.out, "every cake was sold exactly once");

  /* redis-cli's variable, when DLOCK_PASSWORD is not set. */
  child_env[0] = "REDISCLI_AUTH=env-Secret-pw";
  ASSERT_EQ(run_cli_bare(&t, &p, "--url", url, "run", "x", "true", NULL), 0);

  /* A password in the URL wins over the environment. */
  snprintf(wrong_url, sizeof wrong_url, "redis://:wrong-pw@127.0.0.1:%d",
           rp_port(secured));
  ASSERT_EQ(run_cli_bare(&t, &p, "--url", wrong_url, "run", "x", "true", NULL),
            69);
  ASSERT_EQ(
      run_cli_bare(&t, &p, "--url", rp_url(secured), "run", "x", "true", NULL),
      0);

  /* A wrong one from the environment is refused, and never printed. */
  child_env[0] = "DLOCK_PASSWORD=Wrong-Env-pw";
  child_env[1] = "REDISCLI_AUTH=env-Secret-pw";
  ASSERT_EQ(run_cli_bare(&t, &p, "--url", url, "run", "x", "true", NULL), 69);
  assert_file_lacks(p.err, "Wrong-Env-pw");
  assert_file_lacks(p.err, "env-Secret-pw");
  child_env[0] = NULL;
  child_env[1] = NULL;
  rp_free(secured);
  end_test(&t);
}

/* ---- dlock status: the table and "no expiry" ------------------------------
 */

/* The terminal columns of the first 'len' bytes of 's', by the rules a
 * terminal follows for these test names: CJK characters take two columns,
 * combining accents none, anything else one per character. */
static size_t columns_of(const char *s, size_t len) {
  size_t columns = 0;
  for (size_t i = 0; i < len;) {
    unsigned char c = (unsigned char)s[i];
    unsigned cp = c;
    size_t n = 1;
    if (c >= 0xF0)
      n = 4, cp = c & 7u;
    else if (c >= 0xE0)
      n = 3, cp = c & 15u;
    else if (c >= 0xC0)
      n = 2, cp = c & 31u;
    for (size_t k = 1; k < n; k++)
      cp = (cp << 6) | ((unsigned char)s[i + k] & 63u);
    columns += (cp >= 0x3000 && cp <= 0x9FFF) ? 2
               : (cp >= 0x300 && cp <= 0x36F) ? 0
                                              : 1;
    i += n;
  }
  return columns;
}

TEST(cli_status_table_aligns_names_by_display_width) {
  cli_test_t t;
  cli_proc_t p;
  /* ASCII, Latin with two-byte letters, CJK (two columns each), and a
   * combining accent (no column). */
  static const char *const names[] = {"plain-name",
                                      "gr\xc3\xb6\xc3\x9f"
                                      "e",
                                      "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e",
                                      "cafe\xcc\x81"};

  start_test(&t);
  ASSERT_EQ(
      run_cli(&t, &p, "status", names[0], names[1], names[2], names[3], NULL),
      0);
  char *out = slurp(p.out), *save = NULL;
  size_t state_column = 0;
  int rows = 0;
  for (char *line = strtok_r(out, "\n", &save); line != NULL;
       line = strtok_r(NULL, "\n", &save), rows++) {
    /* The STATE column starts where the header says, in every row. */
    const char *state = strstr(line, rows == 0 ? "STATE" : "free");
    ASSERT_NOT_NULL(state);
    size_t column = columns_of(line, (size_t)(state - line));
    if (rows == 0)
      state_column = column;
    else if (column != state_column)
      TEST_FAIL("row %d starts its STATE at column %zu, the header at %zu:\n"
                "%s",
                rows, column, state_column, slurp(p.out));
  }
  ASSERT_EQ(rows, 5);
  free(out);
  end_test(&t);
}

TEST(cli_status_no_expiry_is_the_c_apis_value) {
  cli_test_t t;
  cli_proc_t p;
  json_t o;

  start_test(&t);
  /* A lock some other program took without a lease. */
  freeReplyObject(rp_cmd(t.server, "HSET forever c1:1 1"));
  status_json(&t, "forever", &o);
  ASSERT_EQ(json_get(&o, "locked", J_BOOL)->num, 1);
  ASSERT_EQ(json_get(&o, "ttl_ms", J_NUM)->num, DLOCK_NO_EXPIRY);
  json_free(&o);
  ASSERT_EQ(run_cli(&t, &p, "status", "forever", NULL), 0);
  assert_file_contains(p.out, "no-expiry");
  ASSERT_EQ(run_cli(&t, &p, "unlock", "--force", "forever", NULL), 0);
  ASSERT_EQ(key_exists(&t, "forever"), 0);
  end_test(&t);
}

/* ---- semaphores and latches -------------------------------------------- */

TEST(cli_run_permits_at_most_n_at_once) {
  enum { RUNS = 5, N = 2 };
  cli_test_t t;
  cli_proc_t procs[RUNS];
  char script[512];

  start_test(&t);
  const char *log = scratch(&t, "log");
  snprintf(script, sizeof script,
           "echo \"+ $$ $DLOCK_TOKEN\" >> %s; sleep 0.3; echo \"- $$\" >> %s",
           log, log);
  for (int i = 0; i < RUNS; i++)
    start_cli(&t, &procs[i], "run", "--permits", "2", "--wait", "30s", "pool",
              "sh", "-c", script, NULL);
  for (int i = 0; i < RUNS; i++)
    ASSERT_EQ(wait_cli(&procs[i]), 0);
  char *text = slurp(log);
  char *save = NULL, *line = strtok_r(text, "\n", &save);
  int now = 0, most = 0, lines = 0;
  for (; line != NULL; line = strtok_r(NULL, "\n", &save), lines++) {
    now += line[0] == '+' ? 1 : -1;
    if (now > most)
      most = now;
  }
  free(text);
  printf("%d runs with --permits %d: at most %d at once\n", RUNS, N, most);
  ASSERT_EQ(lines, 2 * RUNS);
  ASSERT_LE(most, N);
  ASSERT_EQ(most, N);
  /* Every permit is back. */
  redisReply *r = rp_cmd(t.server, "GET pool");
  ASSERT_NOT_NULL(r);
  ASSERT_STR_EQ(r->str, "2");
  freeReplyObject(r);
  end_test(&t);
}

TEST(cli_run_permits_lost_stops_the_command) {
  cli_test_t t;
  cli_proc_t p;
  char script[512];

  start_test(&t);
  term_recording_script(&t, script, sizeof script);
  start_cli(&t, &p, "--watchdog", "600ms", "run", "--permits", "1", "--grace",
            "3s", "plost", "--", "sh", "-c", script, NULL);
  ASSERT_EQ(wait_for_file(scratch(&t, "pid"), 5000), 0);
  delete_key(&t, "{plost}:timeout");
  ASSERT_EQ(wait_cli(&p), 76);
  assert_file_contains(scratch(&t, "term"), "TERM");
  assert_file_contains(p.err, "lost");
  end_test(&t);
}

TEST(cli_status_shows_permits_and_latch_count) {
  cli_test_t t;
  cli_proc_t holder, p;

  start_test(&t);
  start_cli(&t, &holder, "run", "--permits", "3", "st-pool", "sleep", "30",
            NULL);
  /* Until the holder's permit is taken. */
  for (int i = 0; i < 500; i++) {
    redisReply *r = rp_cmd(t.server, "ZCARD {st-pool}:timeout");
    long long n = r != NULL ? r->integer : 0;
    if (r != NULL)
      freeReplyObject(r);
    if (n == 1)
      break;
    usleep(10000);
  }
  ASSERT_EQ(run_cli(&t, &p, "status", "st-pool", NULL), 0);
  assert_file_contains(p.out, "2 free, 1 taken (3 permits in all)");
  assert_file_contains(p.out, "lease ends in");
  ASSERT_EQ(run_cli(&t, &p, "status", "--json", "st-pool", NULL), 0);
  assert_file_contains(p.out, "\"kind\":\"counter\",\"count\":2");
  assert_file_contains(p.out, "\"expires_ms\":");
  kill(holder.pid, SIGTERM);
  wait_cli(&holder);

  ASSERT_EQ(run_cli(&t, &p, "latch", "set", "st-latch", "4", NULL), 0);
  ASSERT_EQ(run_cli(&t, &p, "status", "st-latch", NULL), 0);
  assert_file_contains(p.out, "count 4");
  end_test(&t);
}

TEST(cli_latch_set_count_down_await) {
  cli_test_t t;
  cli_proc_t waiter, p;

  start_test(&t);
  ASSERT_EQ(run_cli(&t, &p, "latch", "set", "done", "2", NULL), 0);
  /* Set already: left as it is, exit 1. */
  ASSERT_EQ(run_cli(&t, &p, "latch", "set", "done", "9", NULL), 1);
  assert_file_contains(p.err, "has a count already (2)");
  ASSERT_EQ(run_cli(&t, &p, "latch", "await", "--wait", "0", "done", NULL), 75);
  start_cli(&t, &waiter, "latch", "await", "--wait", "20s", "done", NULL);
  ASSERT_EQ(run_cli(&t, &p, "latch", "count-down", "done", NULL), 0);
  assert_file_contains(p.out, "1");
  ASSERT_EQ(run_cli(&t, &p, "latch", "count", "done", NULL), 0);
  assert_file_contains(p.out, "1");
  int64_t t0 = test_now_ms();
  ASSERT_EQ(run_cli(&t, &p, "latch", "count-down", "done", NULL), 0);
  ASSERT_EQ(wait_cli(&waiter), 0);
  printf("await returned %lld ms after the last count-down\n",
         (long long)(test_now_ms() - t0));
  ASSERT_LT(test_now_ms() - t0, 3000);
  /* At zero: counting down again is refused (65), await returns at once. */
  ASSERT_EQ(run_cli(&t, &p, "latch", "count-down", "done", NULL), 65);
  ASSERT_EQ(run_cli(&t, &p, "latch", "await", "--wait", "0", "done", NULL), 0);
  ASSERT_EQ(run_cli(&t, &p, "latch", "set", "done", "0", NULL), 64);
  ASSERT_EQ(run_cli(&t, &p, "latch", "frobnicate", "done", NULL), 64);
  end_test(&t);
}

/* "dlock run --verbose" says on stderr how long it waited and held the
 * lock, and the token the command got; without it, nothing. */
TEST(cli_run_verbose_reports_wait_hold_and_token) {
  cli_test_t t;
  cli_proc_t p;

  start_test(&t);
  ASSERT_EQ(run_cli(&t, &p, "run", "--verbose", "verbose-job", "--", "sh", "-c",
                    "echo \"$DLOCK_TOKEN\"; sleep 0.2", NULL),
            0);
  char *out = slurp(p.out), *err = slurp(p.err);
  unsigned long long token = 0, said = 0;
  double waited = -1, held = -1;
  ASSERT_EQ(sscanf(out, "%llu", &token), 1);
  const char *a = strstr(err, "acquired after waiting ");
  const char *r = strstr(err, "released after holding it ");
  ASSERT_NOT_NULL(a);
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(sscanf(a, "acquired after waiting %lf s; fencing token %llu",
                   &waited, &said),
            2);
  ASSERT_EQ(sscanf(r, "released after holding it %lf s", &held), 1);
  ASSERT_EQ(said, token);
  ASSERT(waited >= 0);
  /* The command slept 0.2 s while it held the lock. */
  ASSERT(held >= 0.2);
  ASSERT(a < r);
  free(out);
  free(err);

  ASSERT_EQ(run_cli(&t, &p, "run", "verbose-job", "--", "true", NULL), 0);
  err = slurp(p.err);
  ASSERT_STR_EQ(err, "");
  free(err);
  end_test(&t);
}

/* "dlock status --watch" shows the lock again every interval, as it
 * changes: held by the holder at the first view, free at the last, the
 * holder having been stopped as soon as the first view was out. */
TEST(cli_status_watch_refreshes) {
  cli_test_t t;
  cli_proc_t holder, p;

  start_test(&t);
  start_holder(&t, &holder, "watched", "60");
  start_cli(&t, &p, "status", "--watch", "--interval", "2s", "--count", "3",
            "--json", "watched", NULL);
  char *out = NULL;
  int64_t until = test_now_ms() + 30000;
  while ((out == NULL || strchr(out, '\n') == NULL) && test_now_ms() < until) {
    free(out);
    test_sleep_ms(20);
    out = slurp(p.out);
  }
  ASSERT_NOT_NULL(strchr(out, '\n'));
  free(out);
  kill(holder.pid, SIGTERM);
  wait_cli(&holder);
  ASSERT_EQ(wait_cli(&p), 0);
  out = slurp(p.out);
  char *save = NULL;
  char *first = strtok_r(out, "\n", &save);
  char *second = strtok_r(NULL, "\n", &save);
  char *third = strtok_r(NULL, "\n", &save);
  ASSERT_NOT_NULL(first);
  ASSERT_NOT_NULL(second);
  ASSERT_NOT_NULL(third);
  ASSERT_NULL(strtok_r(NULL, "\n", &save));
  json_t v1, v3;
  json_parse(first, &v1);
  json_parse(third, &v3);
  check_held_report(&v1, "watched");
  check_free_report(&v3, "watched");
  json_free(&v1);
  json_free(&v3);
  free(out);

  /* A table names the interval above each view; --count needs --watch. */
  ASSERT_EQ(run_cli(&t, &p, "status", "--watch", "--interval", "100ms",
                    "--count", "2", "watched", NULL),
            0);
  out = slurp(p.out);
  const char *one = strstr(out, "every 0.1s");
  ASSERT_NOT_NULL(one);
  ASSERT_NOT_NULL(strstr(one + 1, "every 0.1s"));
  free(out);
  ASSERT_EQ(run_cli(&t, &p, "status", "--count", "2", "watched", NULL), 64);
  end_test(&t);
}
