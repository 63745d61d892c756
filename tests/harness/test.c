/*
 * The test runner behind test.h: main(), the fork-per-test loop, timeouts
 * and failure reports.
 *
 * Each test runs in a forked child so that a crash, a hang or a failed
 * assertion ends that test only, and the next one starts from a clean
 * process. The child writes the reason of a failure into a pipe, so the
 * runner's one-line verdict can say what went wrong while the details the
 * child printed stay in the output above it.
 */
/* For nftw(). */
#define _XOPEN_SOURCE 700

#include "test.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_TIMEOUT_S 60.0

typedef struct test_entry {
  const char *name;
  test_fn fn;
  const char *file;
  int line;
} test_entry;

static test_entry *tests;
static size_t ntests, cap;

/* In the child: where test__fail writes its reason; -1 in the runner. */
static int reason_fd = -1;
static const char *current_name;

/* The running child, for the runner's signal handler. pid_t is an int on
 * every system this runs on, which sig_atomic_t holds. */
static volatile sig_atomic_t current_child;

int64_t test_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void test_sleep_ms(int64_t ms) {
  if (ms <= 0)
    return;
  struct timespec ts;
  ts.tv_sec = (time_t)(ms / 1000);
  ts.tv_nsec = (long)(ms % 1000) * 1000000;
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

const char *test_current_name(void) { return current_name; }

void test__register(const char *name, test_fn fn, const char *file, int line) {
  if (ntests == cap) {
    size_t ncap = cap ? cap * 2 : 64;
    test_entry *n = realloc(tests, ncap * sizeof(*n));
    if (n == NULL) {
      fprintf(stderr, "test: out of memory registering %s\n", name);
      exit(2);
    }
    tests = n;
    cap = ncap;
  }
  tests[ntests].name = name;
  tests[ntests].fn = fn;
  tests[ntests].file = file;
  tests[ntests].line = line;
  ntests++;
}

static const char *base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

_Noreturn void test__fail(const char *file, int line, const char *fmt, ...) {
  char msg[4096];
  int n = snprintf(msg, sizeof(msg), "%s:%d: ", base_name(file), line);
  if (n < 0 || (size_t)n >= sizeof(msg))
    n = 0;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg + n, sizeof(msg) - (size_t)n, fmt, ap);
  va_end(ap);
  fprintf(stderr, "%s\n", msg);
  fflush(stderr);
  if (reason_fd >= 0) {
    /* One write below PIPE_BUF is atomic: two threads failing at once
     * cannot interleave their reasons. */
    size_t len = strlen(msg);
    if (len > 512)
      len = 512;
    ssize_t w = write(reason_fd, msg, len);
    (void)w;
  }
  exit(1);
}

/* Tests run in the order they appear in the file, whatever order the
 * constructors that registered them ran in. */
static int by_position(const void *pa, const void *pb) {
  const test_entry *a = pa, *b = pb;
  int c = strcmp(a->file, b->file);
  return c ? c : (a->line > b->line) - (a->line < b->line);
}

static const test_entry *find(const char *name) {
  for (size_t i = 0; i < ntests; i++) {
    if (strcmp(tests[i].name, name) == 0)
      return &tests[i];
  }
  return NULL;
}

/* The runner stopped by ^C or a kill must not leave the running test (and
 * its servers) behind in their own process group. */
static void on_signal(int sig) {
  pid_t child = (pid_t)current_child;
  if (child > 0)
    kill(-child, SIGKILL);
  signal(sig, SIG_DFL);
  raise(sig);
}

static int rm_entry(const char *path, const struct stat *st, int flag,
                    struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(path) == 0 || errno == ENOENT ? 0 : -1;
}

static int keep_files(void) {
  const char *keep = getenv("DLOCK_TEST_KEEP");
  return keep && *keep && strcmp(keep, "0") != 0;
}

/*
 * Each test gets a temp dir of its own as $TMPDIR, removed once the test and
 * every process it started are gone. A test killed at its timeout, or by a
 * signal, cannot clean up after itself; this catches what it left (the
 * harness's redis-server dirs among them).
 */
static int make_test_tmpdir(char *dir, size_t n) {
  const char *base = getenv("TMPDIR");
  /* Unix socket paths under it must fit in 108 bytes. */
  if (base == NULL || *base == '\0' || strlen(base) > 40)
    base = "/tmp";
  int len = snprintf(dir, n, "%s/dlock-run-XXXXXX", base);
  if (len < 0 || (size_t)len >= n || mkdtemp(dir) == NULL) {
    dir[0] = '\0';
    return -1;
  }
  return 0;
}

static void child_main(const test_entry *t, int fd, const char *tmpdir) {
  /* In a group of its own, so that the runner can kill the test together
   * with every process it started. */
  setpgid(0, 0);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  signal(SIGHUP, SIG_DFL);
  if (tmpdir[0] != '\0')
    setenv("TMPDIR", tmpdir, 1);
  reason_fd = fd;
  current_name = t->name;
  t->fn();
  fflush(NULL);
  exit(0);
}

/* Runs one test; 1 when it passed. */
static int run_one(const test_entry *t, double timeout_s) {
  int fds[2];
  if (pipe(fds) != 0) {
    printf("FAIL %s: pipe: %s\n", t->name, strerror(errno));
    return 0;
  }
  /* Close-on-exec, so that a redis-server started by the test does not keep
   * the pipe open; non-blocking, so that reading an empty pipe returns. */
  fcntl(fds[0], F_SETFD, FD_CLOEXEC);
  fcntl(fds[1], F_SETFD, FD_CLOEXEC);
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  char tmpdir[128];
  make_test_tmpdir(tmpdir, sizeof(tmpdir));
  fflush(NULL);

  int64_t t0 = test_now_ms();
  pid_t pid = fork();
  if (pid < 0) {
    printf("FAIL %s: fork: %s\n", t->name, strerror(errno));
    close(fds[0]);
    close(fds[1]);
    if (tmpdir[0] != '\0')
      rmdir(tmpdir);
    return 0;
  }
  if (pid == 0) {
    close(fds[0]);
    child_main(t, fds[1], tmpdir);
  }
  /* Also set here, so that a kill of the group cannot come before the
   * child has made it. */
  setpgid(pid, pid);
  current_child = pid;
  close(fds[1]);

  int64_t limit_ms = (int64_t)(timeout_s * 1000.0);
  int timed_out = 0;
  for (;;) {
    siginfo_t si;
    memset(&si, 0, sizeof(si));
    /* WNOWAIT: the child stays a zombie, so its pid (the group id) cannot
     * be reused before the group is killed below. */
    int r = waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT);
    if (r == 0 && si.si_pid == pid)
      break;
    if (r != 0 && errno != EINTR)
      break;
    if (test_now_ms() - t0 >= limit_ms) {
      timed_out = 1;
      break;
    }
    test_sleep_ms(2);
  }
  /* On a timeout this ends the test; otherwise it ends whatever the test
   * left running. */
  kill(-pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  current_child = 0;
  int64_t ms = test_now_ms() - t0;
  if (tmpdir[0] != '\0') {
    if (keep_files())
      fprintf(stderr, "test: kept %s\n", tmpdir);
    else
      nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  }

  char reason[600];
  ssize_t n = read(fds[0], reason, sizeof(reason) - 1);
  close(fds[0]);
  reason[n > 0 ? n : 0] = '\0';

  if (!timed_out && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    printf("ok %s (%" PRId64 " ms)\n", t->name, ms);
    return 1;
  }
  if (timed_out)
    printf("FAIL %s: timed out after %g s\n", t->name, timeout_s);
  else if (WIFSIGNALED(status))
    printf("FAIL %s: killed by signal %d (%s)%s%s\n", t->name, WTERMSIG(status),
           strsignal(WTERMSIG(status)), n > 0 ? ": " : "", reason);
  else if (n > 0)
    printf("FAIL %s: %s\n", t->name, reason);
  else
    printf("FAIL %s: exit status %d (see the output above)\n", t->name,
           WEXITSTATUS(status));
  return 0;
}

static void usage(const char *argv0) {
  fprintf(stderr,
          "usage: %s [--list] [TEST...]\n"
          "Runs the named tests (all without names), each in a child process\n"
          "with a timeout of $DLOCK_TEST_TIMEOUT seconds (default %g).\n",
          argv0, DEFAULT_TIMEOUT_S);
}

int main(int argc, char **argv) {
  /* Line by line, so the verdicts and the children's output interleave in
   * order when ctest reads them through a pipe. */
  setvbuf(stdout, NULL, _IOLBF, 0);
  qsort(tests, ntests, sizeof(*tests), by_position);

  if (argc == 2 && strcmp(argv[1], "--list") == 0) {
    for (size_t i = 0; i < ntests; i++)
      printf("%s\n", tests[i].name);
    return 0;
  }
  for (int i = 1; i < argc; i++) {
    if (argv[i][0] == '-') {
      usage(argv[0]);
      return 2;
    }
  }

  double timeout_s = DEFAULT_TIMEOUT_S;
  const char *env = getenv("DLOCK_TEST_TIMEOUT");
  if (env && *env) {
    char *end = NULL;
    double v = strtod(env, &end);
    if (end != env && *end == '\0' && v > 0)
      timeout_s = v;
  }

  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);

  int passed = 0, failed = 0;
  if (argc == 1) {
    for (size_t i = 0; i < ntests; i++) {
      if (run_one(&tests[i], timeout_s))
        passed++;
      else
        failed++;
    }
  } else {
    for (int i = 1; i < argc; i++) {
      const test_entry *t = find(argv[i]);
      if (t == NULL) {
        printf("FAIL %s: no such test\n", argv[i]);
        failed++;
      } else if (run_one(t, timeout_s)) {
        passed++;
      } else {
        failed++;
      }
    }
  }
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
