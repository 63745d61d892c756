/*
 * Throwaway redis-server processes for the tests; see redis_proc.h.
 *
 * Everything here is written for a test that may fail at any point: a server
 * is on the live list from the moment it runs, so an assertion that exits
 * the test still stops it, and every wait has a bound.
 */
/* For close_range(2) through syscall(), PR_SET_PDEATHSIG and nftw(). */
#define _GNU_SOURCE

#include "redis_proc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

/* How long a server may take to answer PING after it was started. */
#define START_TIMEOUT_MS 10000
/* How long rp_stop waits for SIGTERM before it uses SIGKILL. */
#define STOP_TIMEOUT_MS 5000
/* Socket timeout of rp_cmd's connection: a paused server fails fast. */
#define CMD_TIMEOUT_MS 2000
/* A picked port can be taken before redis-server binds it; try again. */
#define START_ATTEMPTS 10

struct rp_server {
  rp_server_t *next; /* on the live list while not freed */
  pid_t owner;       /* the process that started it; only it cleans up */
  pid_t pid;         /* 0 while not running */
  int paused;
  int unix_socket;
  int sentinel;
  int port;
  char *requirepass;
  char dir[256];
  char sock[300];
  char conf[300];
  char log[300];
  char out[300];
  char *url;
  redisContext *ctx; /* rp_cmd's connection, NULL until needed */
};

static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static rp_server_t *live;
static int cleanup_registered;

/* ---- small helpers ------------------------------------------------------ */

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int64_t ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static struct timeval tv_ms(int64_t ms) {
  struct timeval tv;
  tv.tv_sec = (time_t)(ms / 1000);
  tv.tv_usec = (suseconds_t)((ms % 1000) * 1000);
  return tv;
}

/* A malloc'ed printf; aborts on allocation failure since a test cannot go
 * on without its server anyway. */
static char *xprintf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *p = malloc((size_t)n + 1);
  if (p == NULL) {
    fprintf(stderr, "redis_proc: out of memory\n");
    abort();
  }
  va_start(ap, fmt);
  vsnprintf(p, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return p;
}

/* Percent-encodes everything but RFC 3986 unreserved characters, so any
 * password fits in the userinfo part of a URL. */
static char *url_escape(const char *s) {
  static const char hex[] = "0123456789ABCDEF";
  char *out = malloc(strlen(s) * 3 + 1);
  if (out == NULL)
    abort();
  char *o = out;
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
        (*p >= '0' && *p <= '9') || *p == '-' || *p == '.' || *p == '_' ||
        *p == '~') {
      *o++ = (char)*p;
    } else {
      *o++ = '%';
      *o++ = hex[*p >> 4];
      *o++ = hex[*p & 15];
    }
  }
  *o = '\0';
  return out;
}

/* Writes 's' as a redis.conf quoted string: Redis's config parser accepts
 * \" and \\ inside double quotes, which covers any path or password. */
static void put_quoted(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\')
      fputc('\\', f);
    fputc(*s, f);
  }
  fputc('"', f);
}

static const char *redis_server_path(void) {
  static char found[4096];
  const char *env = getenv("DLOCK_REDIS_SERVER");
  if (env && *env)
    return env;
  const char *path = getenv("PATH");
  while (path && *path) {
    const char *end = strchr(path, ':');
    size_t n = end ? (size_t)(end - path) : strlen(path);
    if (n > 0 && n + sizeof("/redis-server") < sizeof(found)) {
      memcpy(found, path, n);
      memcpy(found + n, "/redis-server", sizeof("/redis-server"));
      if (access(found, X_OK) == 0)
        return found;
    }
    path = end ? end + 1 : NULL;
  }
  return "/usr/bin/redis-server";
}

/* Prints the last lines of a log file, so a server that would not start
 * says why in the test's output. */
static void print_tail(const char *path) {
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return;
  char buf[2048];
  long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : 0;
  long from = size > (long)sizeof(buf) - 1 ? size - (long)sizeof(buf) + 1 : 0;
  fseek(f, from, SEEK_SET);
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  buf[n] = '\0';
  fclose(f);
  if (n > 0)
    fprintf(stderr, "---- %s (tail) ----\n%s%s----\n", path, buf,
            buf[n - 1] == '\n' ? "" : "\n");
}

/* Whether 'path' contains 'needle' after byte 'from'. */
static int file_contains(const char *path, long from, const char *needle) {
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return 0;
  int found = 0;
  char line[1024];
  if (fseek(f, from, SEEK_SET) == 0) {
    while (!found && fgets(line, sizeof(line), f))
      found = strstr(line, needle) != NULL;
  }
  fclose(f);
  return found;
}

static long file_size(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (long)st.st_size : 0;
}

static int rm_entry(const char *path, const struct stat *st, int flag,
                    struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(path) == 0 || errno == ENOENT ? 0 : -1;
}

static void rm_tree(const char *dir) {
  if (dir[0] == '\0')
    return;
  const char *keep = getenv("DLOCK_TEST_KEEP");
  if (keep && *keep && strcmp(keep, "0") != 0) {
    fprintf(stderr, "redis_proc: kept %s\n", dir);
    return;
  }
  /* Depth first and without following links, like rm -rf. */
  nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/*
 * SIGPIPE is blocked around the harness's own socket writes: a write to a
 * server that was just killed must fail with EPIPE, not end the test. The
 * signal is blocked rather than ignored so that the library under test gets
 * no help from the harness in handling it.
 */
typedef struct {
  sigset_t old;
  int was_pending;
} pipe_guard;

static void pipe_block(pipe_guard *g) {
  sigset_t set, pending;
  sigemptyset(&set);
  sigaddset(&set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &set, &g->old);
  sigpending(&pending);
  g->was_pending = sigismember(&pending, SIGPIPE);
}

static void pipe_unblock(pipe_guard *g) {
  sigset_t set, pending;
  sigemptyset(&set);
  sigaddset(&set, SIGPIPE);
  sigpending(&pending);
  if (!g->was_pending && sigismember(&pending, SIGPIPE)) {
    struct timespec zero = {0, 0};
    sigtimedwait(&set, NULL, &zero);
  }
  pthread_sigmask(SIG_SETMASK, &g->old, NULL);
}

/* ---- the live list ------------------------------------------------------ */

/*
 * Runs at exit in any process that started a server: a test whose assertion
 * failed exits without reaching its rp_free calls. Servers are killed
 * outright (their data is of no use any more) and their dirs removed, but
 * not freed: other threads of the exiting test may still hold them.
 */
static void cleanup_at_exit(void) {
  pid_t me = getpid();
  /* Never block exit on a lock a dying thread may hold. */
  int locked = 0;
  for (int i = 0; i < 100 && !locked; i++) {
    locked = pthread_mutex_trylock(&live_mu) == 0;
    if (!locked)
      sleep_ms(1);
  }
  for (rp_server_t *s = live; s; s = s->next) {
    if (s->owner != me)
      continue;
    if (s->pid > 0) {
      kill(s->pid, SIGKILL);
      while (waitpid(s->pid, NULL, 0) < 0 && errno == EINTR) {
      }
      s->pid = 0;
    }
    rm_tree(s->dir);
    s->dir[0] = '\0';
  }
  if (locked)
    pthread_mutex_unlock(&live_mu);
}

static void live_add(rp_server_t *s) {
  pthread_mutex_lock(&live_mu);
  if (!cleanup_registered) {
    cleanup_registered = 1;
    atexit(cleanup_at_exit);
  }
  s->next = live;
  live = s;
  pthread_mutex_unlock(&live_mu);
}

static void live_remove(rp_server_t *s) {
  pthread_mutex_lock(&live_mu);
  for (rp_server_t **p = &live; *p; p = &(*p)->next) {
    if (*p == s) {
      *p = s->next;
      break;
    }
  }
  pthread_mutex_unlock(&live_mu);
}

/* ---- starting ----------------------------------------------------------- */

/* A loopback port that is free right now: bind port 0 and read back what
 * the kernel chose. Someone may take it before redis-server binds it; the
 * caller then tries another. */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    return -1;
  struct sockaddr_in a;
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = -1;
  if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
      getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

static int port_free(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    return 0;
  struct sockaddr_in a;
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons((uint16_t)port);
  int ok = bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
  close(fd);
  return ok;
}

/* A port for a cluster node: at most 55535 (its bus listens 10000 above),
 * with both free right now. Picked at random in 20000..55535, below the
 * kernel's ephemeral range where other tests' ports come from. */
static int free_cluster_port(void) {
  static unsigned seed;
  if (seed == 0)
    seed = (unsigned)getpid() ^ (unsigned)time(NULL);
  for (int i = 0; i < 1000; i++) {
    int port = 20000 + (int)(rand_r(&seed) % 35536);
    if (port_free(port) && port_free(port + 10000))
      return port;
  }
  return -1;
}

static int write_conf(const rp_server_t *s, const rp_options_t *o) {
  FILE *f = fopen(s->conf, "w");
  if (f == NULL) {
    fprintf(stderr, "redis_proc: %s: %s\n", s->conf, strerror(errno));
    return -1;
  }
  fprintf(f, "# A throwaway server for one test.\n");
  fprintf(f, "daemonize no\n");
  fprintf(f, "bind 127.0.0.1\n");
  if (s->unix_socket) {
    fprintf(f, "port 0\nunixsocket ");
    put_quoted(f, s->sock);
    fprintf(f, "\nunixsocketperm 700\n");
  } else {
    fprintf(f, "port %d\n", s->port);
  }
  fprintf(f, "dir ");
  put_quoted(f, s->dir);
  fprintf(f, "\nlogfile ");
  put_quoted(f, s->log);
  fprintf(f, "\nsave \"\"\n");
  fprintf(f, "appendonly %s\n", o->appendonly ? "yes" : "no");
  fprintf(f, "appendfsync always\n");
  if (s->requirepass) {
    fprintf(f, "requirepass ");
    put_quoted(f, s->requirepass);
    fprintf(f, "\n");
  } else {
    fprintf(f, "protected-mode no\n");
  }
  if (o->cluster)
    fprintf(f, "cluster-enabled yes\ncluster-config-file nodes.conf\n"
               "cluster-node-timeout 2000\n"
               "cluster-require-full-coverage no\n"
               "shutdown-timeout 0\n"
               "repl-diskless-sync-delay 0\n");
  if (o->extra_conf)
    fprintf(f, "%s\n", o->extra_conf);
  return fclose(f) == 0 ? 0 : -1;
}

/* Closes every descriptor from 3 up in the forked child, so the server
 * holds none of the test's sockets open (a test that closes a connection
 * must see it closed). Only async-signal-safe calls: the test may have
 * threads. */
static void close_from_3(void) {
#ifdef SYS_close_range
  if (syscall(SYS_close_range, 3U, ~0U, 0U) == 0)
    return;
#endif
  long max = sysconf(_SC_OPEN_MAX);
  if (max < 0 || max > 65536)
    max = 65536;
  for (int fd = 3; fd < max; fd++)
    close(fd);
}

static int spawn(rp_server_t *s) {
  static char arg0[] = "redis-server";
  static char sentinel_flag[] = "--sentinel";
  char *argv[] = {arg0, s->conf, s->sentinel ? sentinel_flag : NULL, NULL};
  const char *bin = redis_server_path();
  int out = open(s->out, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (out < 0 || devnull < 0) {
    fprintf(stderr, "redis_proc: open: %s\n", strerror(errno));
    if (out >= 0)
      close(out);
    if (devnull >= 0)
      close(devnull);
    return -1;
  }
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
#ifdef __linux__
    /* The server dies with the test even when the test is killed. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
      _exit(127);
#else
    (void)parent;
#endif
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    dup2(devnull, 0);
    dup2(out, 1);
    dup2(out, 2);
    close_from_3();
    execv(bin, argv);
    static const char msg[] = "redis_proc: cannot exec redis-server\n";
    ssize_t w = write(2, msg, sizeof(msg) - 1);
    (void)w;
    /* _exit, not exit: the child must not run the test's atexit handlers. */
    _exit(127);
  }
  close(out);
  close(devnull);
  if (pid < 0) {
    fprintf(stderr, "redis_proc: fork: %s\n", strerror(errno));
    return -1;
  }
  s->pid = pid;
  s->paused = 0;
  return 0;
}

/* A connected (and authenticated) context, or NULL. */
static redisContext *connect_ctx(rp_server_t *s, int64_t timeout_ms) {
  redisContext *c =
      s->unix_socket
          ? redisConnectUnixWithTimeout(s->sock, tv_ms(timeout_ms))
          : redisConnectWithTimeout("127.0.0.1", s->port, tv_ms(timeout_ms));
  if (c == NULL)
    return NULL;
  if (c->err) {
    redisFree(c);
    return NULL;
  }
  /* Servers forked later must not inherit this connection. */
  fcntl(c->fd, F_SETFD, FD_CLOEXEC);
  redisSetTimeout(c, tv_ms(timeout_ms));
  if (s->requirepass) {
    redisReply *r = redisCommand(c, "AUTH %s", s->requirepass);
    int ok = r && r->type == REDIS_REPLY_STATUS;
    freeReplyObject(r);
    if (!ok) {
      redisFree(c);
      return NULL;
    }
  }
  return c;
}

/* 1 when 'c' reaches a ready server that is our process: with TCP, a
 * server of another test that got the same port could answer instead. */
static int is_ours_and_ready(rp_server_t *s, redisContext *c) {
  redisReply *r = redisCommand(c, "INFO server");
  int ok = 0;
  if (r && r->type == REDIS_REPLY_STRING) {
    const char *p = strstr(r->str, "process_id:");
    ok = p && atol(p + strlen("process_id:")) == (long)s->pid;
  }
  freeReplyObject(r);
  if (!ok)
    return 0;
  r = redisCommand(c, "PING");
  ok = r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0;
  freeReplyObject(r);
  return ok;
}

/* Waits until the just spawned server answers, or fails early when it
 * exits. '*in_use' tells that it exited because its port was taken. */
static int wait_ready(rp_server_t *s, long log_from, long out_from,
                      int *in_use) {
  *in_use = 0;
  int64_t deadline = now_ms() + START_TIMEOUT_MS;
  pipe_guard g;
  pipe_block(&g);
  int rc = -1;
  for (;;) {
    int status;
    pid_t w = waitpid(s->pid, &status, WNOHANG);
    if (w == s->pid || (w < 0 && errno == ECHILD)) {
      s->pid = 0;
      *in_use = file_contains(s->log, log_from, "in use") ||
                file_contains(s->out, out_from, "in use");
      if (!*in_use) {
        fprintf(stderr, "redis_proc: redis-server exited at start\n");
        print_tail(s->out);
        print_tail(s->log);
      }
      break;
    }
    redisContext *c = connect_ctx(s, 500);
    if (c) {
      int ok = is_ours_and_ready(s, c);
      redisFree(c);
      if (ok) {
        rc = 0;
        break;
      }
    }
    if (now_ms() > deadline) {
      fprintf(stderr, "redis_proc: redis-server did not answer in %d ms\n",
              START_TIMEOUT_MS);
      print_tail(s->out);
      print_tail(s->log);
      kill(s->pid, SIGKILL);
      while (waitpid(s->pid, NULL, 0) < 0 && errno == EINTR) {
      }
      s->pid = 0;
      break;
    }
    sleep_ms(10);
  }
  pipe_unblock(&g);
  return rc;
}

static int start_process(rp_server_t *s, int *in_use) {
  long log_from = file_size(s->log), out_from = file_size(s->out);
  if (spawn(s) != 0)
    return -1;
  return wait_ready(s, log_from, out_from, in_use);
}

static void make_url(rp_server_t *s) {
  char *pass = s->requirepass ? url_escape(s->requirepass) : NULL;
  free(s->url);
  if (s->unix_socket)
    s->url = xprintf("unix://%s%s%s%s", pass ? ":" : "", pass ? pass : "",
                     pass ? "@" : "", s->sock);
  else
    s->url = xprintf("redis://%s%s%s127.0.0.1:%d", pass ? ":" : "",
                     pass ? pass : "", pass ? "@" : "", s->port);
  free(pass);
}

/* Makes the temp dir. A unix socket path must fit in sun_path (108 bytes),
 * so a long $TMPDIR is passed over for /tmp. */
static int make_dir(rp_server_t *s) {
  const char *base = getenv("TMPDIR");
  if (base == NULL || *base == '\0' || strlen(base) > 60)
    base = "/tmp";
  int n = snprintf(s->dir, sizeof(s->dir), "%s/dlock-test-XXXXXX", base);
  if (n < 0 || (size_t)n >= sizeof(s->dir) || mkdtemp(s->dir) == NULL) {
    fprintf(stderr, "redis_proc: mkdtemp in %s: %s\n", base, strerror(errno));
    s->dir[0] = '\0';
    return -1;
  }
  snprintf(s->sock, sizeof(s->sock), "%s/redis.sock", s->dir);
  snprintf(s->conf, sizeof(s->conf), "%s/redis.conf", s->dir);
  snprintf(s->log, sizeof(s->log), "%s/redis.log", s->dir);
  snprintf(s->out, sizeof(s->out), "%s/redis.out", s->dir);
  return 0;
}

void rp_options_init(rp_options_t *o) { memset(o, 0, sizeof(*o)); }

int rp_start(const rp_options_t *o, rp_server_t **out) {
  rp_options_t defaults;
  if (o == NULL) {
    rp_options_init(&defaults);
    o = &defaults;
  }
  *out = NULL;
  rp_server_t *s = calloc(1, sizeof(*s));
  if (s == NULL)
    return -1;
  s->owner = getpid();
  s->unix_socket = o->unix_socket;
  s->sentinel = o->sentinel;
  if (o->requirepass)
    s->requirepass = xprintf("%s", o->requirepass);
  if (make_dir(s) != 0) {
    free(s->requirepass);
    free(s);
    return -1;
  }
  /* On the list before the process exists, so no exit path misses it. */
  live_add(s);
  for (int attempt = 0; attempt < START_ATTEMPTS; attempt++) {
    if (!s->unix_socket &&
        (s->port = o->cluster ? free_cluster_port() : free_port()) <= 0) {
      fprintf(stderr, "redis_proc: no free port: %s\n", strerror(errno));
      break;
    }
    make_url(s);
    if (write_conf(s, o) != 0)
      break;
    int in_use = 0;
    if (start_process(s, &in_use) == 0) {
      *out = s;
      return 0;
    }
    if (!in_use)
      break;
  }
  rp_free(s);
  return -1;
}

/* ---- accessors ---------------------------------------------------------- */

const char *rp_url(const rp_server_t *s) { return s->url; }
int rp_port(const rp_server_t *s) { return s->unix_socket ? 0 : s->port; }
const char *rp_socket(const rp_server_t *s) {
  return s->unix_socket ? s->sock : NULL;
}
pid_t rp_pid(const rp_server_t *s) { return s->pid; }
const char *rp_dir(const rp_server_t *s) { return s->dir; }

/* ---- signals ------------------------------------------------------------ */

static void drop_ctx(rp_server_t *s) {
  if (s->ctx) {
    redisFree(s->ctx);
    s->ctx = NULL;
  }
}

int rp_pause(rp_server_t *s) {
  if (s->pid <= 0 || kill(s->pid, SIGSTOP) != 0)
    return -1;
  /* Wait for the stop itself, so the caller's next step surely meets a
   * stopped server. WNOWAIT leaves an exit to be reaped by rp_stop. */
  siginfo_t si;
  memset(&si, 0, sizeof(si));
  while (waitid(P_PID, (id_t)s->pid, &si, WSTOPPED | WEXITED | WNOWAIT) != 0) {
    if (errno != EINTR)
      return -1;
  }
  if (si.si_code != CLD_STOPPED)
    return -1;
  s->paused = 1;
  return 0;
}

int rp_resume(rp_server_t *s) {
  if (s->pid <= 0 || kill(s->pid, SIGCONT) != 0)
    return -1;
  if (!s->paused)
    return 0;
  s->paused = 0;
  siginfo_t si;
  memset(&si, 0, sizeof(si));
  while (waitid(P_PID, (id_t)s->pid, &si, WCONTINUED | WEXITED | WNOWAIT) !=
         0) {
    if (errno != EINTR)
      return -1;
  }
  return si.si_code == CLD_CONTINUED ? 0 : -1;
}

/* Reaps the server, waiting at most 'ms' (< 0: for ever). 1 when reaped. */
static int reap(rp_server_t *s, int64_t ms) {
  int64_t deadline = now_ms() + ms;
  for (;;) {
    pid_t w = waitpid(s->pid, NULL, ms < 0 ? 0 : WNOHANG);
    if (w == s->pid || (w < 0 && errno == ECHILD)) {
      s->pid = 0;
      s->paused = 0;
      return 1;
    }
    if (w < 0 && errno == EINTR)
      continue;
    if (ms >= 0 && now_ms() >= deadline)
      return 0;
    sleep_ms(5);
  }
}

int rp_kill(rp_server_t *s) {
  drop_ctx(s);
  if (s->pid <= 0)
    return -1;
  kill(s->pid, SIGKILL);
  reap(s, -1);
  return 0;
}

int rp_stop(rp_server_t *s) {
  drop_ctx(s);
  if (s->pid <= 0)
    return 0;
  kill(s->pid, SIGTERM);
  /* A paused server handles SIGTERM only once it runs again. */
  kill(s->pid, SIGCONT);
  if (reap(s, STOP_TIMEOUT_MS))
    return 0;
  fprintf(stderr, "redis_proc: pid %ld ignored SIGTERM, killing it\n",
          (long)s->pid);
  kill(s->pid, SIGKILL);
  reap(s, -1);
  return 0;
}

int rp_restart(rp_server_t *s) {
  rp_stop(s);
  /* The address must stay the same, so a taken port is waited for rather
   * than replaced. */
  for (int attempt = 0; attempt < START_ATTEMPTS; attempt++) {
    int in_use = 0;
    if (start_process(s, &in_use) == 0)
      return 0;
    if (!in_use)
      return -1;
    sleep_ms(100);
  }
  fprintf(stderr, "redis_proc: port %d stayed in use\n", s->port);
  return -1;
}

void rp_free(rp_server_t *s) {
  if (s == NULL)
    return;
  live_remove(s);
  rp_stop(s);
  rm_tree(s->dir);
  free(s->requirepass);
  free(s->url);
  free(s);
}

/* ---- commands ----------------------------------------------------------- */

static int timed_out(const redisContext *c) {
  return c->err == REDIS_ERR_IO &&
         (strstr(c->errstr, "temporarily") || strstr(c->errstr, "timed out"));
}

/* Sends one formatted command. A cached connection that turns out to be
 * closed (the server was restarted behind the harness's back, or the test
 * ran CLIENT KILL) is opened again once; a timeout is not retried, since the
 * command may have run and the caller asked for a bounded wait. */
static redisReply *run(rp_server_t *s, const char *cmd, size_t len) {
  redisReply *reply = NULL;
  pipe_guard g;
  pipe_block(&g);
  for (int attempt = 0; attempt < 2; attempt++) {
    int cached = s->ctx != NULL;
    if (s->ctx == NULL)
      s->ctx = connect_ctx(s, CMD_TIMEOUT_MS);
    if (s->ctx == NULL)
      break;
    void *r = NULL;
    if (redisAppendFormattedCommand(s->ctx, cmd, len) == REDIS_OK &&
        redisGetReply(s->ctx, &r) == REDIS_OK) {
      reply = r;
      break;
    }
    int retry = cached && !timed_out(s->ctx);
    drop_ctx(s);
    if (!retry)
      break;
  }
  pipe_unblock(&g);
  return reply;
}

redisReply *rp_cmd(rp_server_t *s, const char *fmt, ...) {
  char *cmd = NULL;
  va_list ap;
  va_start(ap, fmt);
  int len = redisvFormatCommand(&cmd, fmt, ap);
  va_end(ap);
  if (len < 0)
    return NULL;
  redisReply *r = run(s, cmd, (size_t)len);
  redisFreeCommand(cmd);
  return r;
}

redisReply *rp_cmd_argv(rp_server_t *s, int argc, const char **argv,
                        const size_t *argvlen) {
  char *cmd = NULL;
  int len = redisFormatCommandArgv(&cmd, argc, argv, argvlen);
  if (len < 0)
    return NULL;
  redisReply *r = run(s, cmd, (size_t)len);
  redisFreeCommand(cmd);
  return r;
}
