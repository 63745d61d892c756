#define _POSIX_C_SOURCE 200809L
#include "demo_server.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dlock.h"

#define START_TIMEOUT_MS 5000
#define STOP_TIMEOUT_MS 5000

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static void path_in(const demo_server_t *s, const char *name, char *buf,
                    size_t size) {
  snprintf(buf, size, "%s/%s", s->dir, name);
}

/* In the child: a process group of its own, so a Ctrl-C at the terminal
 * leaves the server to the demo's own clean-up, and no descriptor but
 * /dev/null on 0-2 (the server logs to its file). */
static void exec_server(const demo_server_t *s) {
  char sock[128], log[128];
  int null_fd = open("/dev/null", O_RDWR);

  setpgid(0, 0);
  for (int fd = 0; fd < 3; fd++)
    dup2(null_fd, fd);
  for (int fd = 3; fd < 1024; fd++)
    close(fd);
  path_in(s, "redis.sock", sock, sizeof sock);
  path_in(s, "redis.log", log, sizeof log);
  execlp("redis-server", "redis-server", "--port", "0", "--unixsocket", sock,
         "--unixsocketperm", "700", "--save", "", "--appendonly", "no", "--dir",
         s->dir, "--logfile", log, (char *)NULL);
  _exit(127);
}

/* Whether the server takes a client yet: the library's own connection
 * (which checks with PING that Redis answers), opened and closed again. */
static int answers_ping(const demo_server_t *s) {
  dlock_options_t o;
  dlock_client_t *c = NULL;

  dlock_options_init(&o);
  o.url = s->url;
  o.connect_timeout_ms = 500;
  o.command_timeout_ms = 500;
  int ok = dlock_client_open(&o, &c) == 0;
  dlock_client_close(c);
  return ok;
}

/* Waits until the server answers; -1 when it exited or never answered. */
static int wait_until_ready(demo_server_t *s, char *why, size_t why_size) {
  for (long waited = 0; waited < START_TIMEOUT_MS; waited += 20) {
    int status;
    if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
      s->pid = 0;
      snprintf(why, why_size, "%s",
               WIFEXITED(status) && WEXITSTATUS(status) == 127
                   ? "redis-server not found; install it or give --url"
                   : "redis-server exited at start");
      return -1;
    }
    if (answers_ping(s))
      return 0;
    sleep_ms(20);
  }
  snprintf(why, why_size, "redis-server did not answer within %d ms",
           START_TIMEOUT_MS);
  return -1;
}

int demo_server_start(demo_server_t *s, char *why, size_t why_size) {
  memset(s, 0, sizeof *s);
  snprintf(s->dir, sizeof s->dir, "/tmp/dlock-demo.XXXXXX");
  if (mkdtemp(s->dir) == NULL) {
    snprintf(why, why_size, "cannot create a temp dir: %s", strerror(errno));
    s->dir[0] = '\0';
    return -1;
  }
  snprintf(s->url, sizeof s->url, "unix://%s/redis.sock", s->dir);
  fflush(NULL);
  s->pid = fork();
  if (s->pid == 0)
    exec_server(s);
  if (s->pid < 0) {
    snprintf(why, why_size, "fork: %s", strerror(errno));
    s->pid = 0;
    demo_server_stop(s);
    return -1;
  }
  if (wait_until_ready(s, why, why_size) != 0) {
    demo_server_stop(s);
    return -1;
  }
  return 0;
}

static void reap_or_kill(pid_t pid) {
  kill(pid, SIGTERM);
  for (long waited = 0; waited < STOP_TIMEOUT_MS; waited += 20) {
    if (waitpid(pid, NULL, WNOHANG) == pid)
      return;
    sleep_ms(20);
  }
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
}

void demo_server_stop(demo_server_t *s) {
  static const char *const files[] = {"redis.sock", "redis.log", "dump.rdb"};
  char path[128];

  if (s->pid > 0)
    reap_or_kill(s->pid);
  s->pid = 0;
  if (s->dir[0] == '\0')
    return;
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    path_in(s, files[i], path, sizeof path);
    unlink(path);
  }
  rmdir(s->dir);
  s->dir[0] = '\0';
}
