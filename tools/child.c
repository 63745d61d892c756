/* pipe2 and O_CLOEXEC for the exec report; the rest is POSIX. */
#define _GNU_SOURCE
#include "child.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "exit_codes.h"

extern char **environ;

/* The highest signal number to look at; NSIG is not in POSIX. */
#ifdef NSIG
#define SIGNAL_LIMIT NSIG
#else
#define SIGNAL_LIMIT 65
#endif

void child_start_state_capture(child_start_state_t *s) {
  sigemptyset(&s->defaulted);
  sigemptyset(&s->ignored);
  sigprocmask(SIG_SETMASK, NULL, &s->mask);
  for (int signo = 1; signo < SIGNAL_LIMIT; signo++) {
    struct sigaction sa;
    if (sigaction(signo, NULL, &sa) != 0)
      continue; /* not a signal number on this system */
    if (sa.sa_handler == SIG_IGN)
      sigaddset(&s->ignored, signo);
    else if (sa.sa_handler == SIG_DFL)
      sigaddset(&s->defaulted, signo);
  }
  /* These two cannot be caught or reset; keep them out of the set. */
  sigdelset(&s->defaulted, SIGKILL);
  sigdelset(&s->defaulted, SIGSTOP);
}

static int starts_with(const char *s, const char *prefix) {
  return strncmp(s, prefix, strlen(prefix)) == 0;
}

/*
 * Builds the command's environment: the current one without any inherited
 * DLOCK_NAME/DLOCK_TOKEN (a nested "dlock run" must show the inner lock),
 * plus the two new entries. Built before spawning so that nothing but
 * exec runs in the child of a multi-threaded process.
 */
static char **build_environment(const char *name, uint64_t token,
                                char **name_entry, char **token_entry) {
  size_t n = 0, k = 0;
  while (environ[n] != NULL)
    n++;

  char **env = calloc(n + 3, sizeof *env);
  size_t name_size = strlen("DLOCK_NAME=") + strlen(name) + 1;
  *name_entry = malloc(name_size);
  *token_entry = malloc(sizeof "DLOCK_TOKEN=" + 20);
  if (env == NULL || *name_entry == NULL || *token_entry == NULL) {
    free(env);
    free(*name_entry);
    free(*token_entry);
    return NULL;
  }
  snprintf(*name_entry, name_size, "DLOCK_NAME=%s", name);
  snprintf(*token_entry, sizeof "DLOCK_TOKEN=" + 20, "DLOCK_TOKEN=%" PRIu64,
           token);
  for (size_t i = 0; i < n; i++)
    if (!starts_with(environ[i], "DLOCK_NAME=") &&
        !starts_with(environ[i], "DLOCK_TOKEN="))
      env[k++] = environ[i];
  env[k++] = *name_entry;
  env[k++] = *token_entry;
  env[k] = NULL;
  return env;
}

/*
 * The paths to try for 'file', as execvp would: 'file' itself when it
 * holds a '/', else each $PATH entry (an empty one is the current
 * directory) joined with it. Built before fork, since the child of a
 * multi-threaded process may only make async-signal-safe calls. A
 * NULL-terminated array in one allocation; NULL when out of memory.
 */
static char **search_paths(const char *file) {
  const char *path = getenv("PATH");
  size_t n = 1, flen = strlen(file);

  if (strchr(file, '/') != NULL)
    path = NULL;
  else if (path == NULL)
    path = "/bin:/usr/bin"; /* the default of glibc's execvp */
  if (path != NULL)
    for (const char *p = path; *p; p++)
      n += *p == ':';
  size_t bytes = (n + 1) * sizeof(char *) +
                 (path ? strlen(path) + n * (flen + 2) : flen + 1);
  char **list = malloc(bytes);
  if (list == NULL)
    return NULL;
  char *o = (char *)(list + n + 1);
  if (path == NULL) {
    list[0] = strcpy(o, file);
    list[1] = NULL;
    return list;
  }
  size_t k = 0;
  for (const char *p = path;; p++) {
    const char *end = strchr(p, ':');
    size_t dlen = end ? (size_t)(end - p) : strlen(p);
    list[k++] = o;
    if (dlen == 0) {
      memcpy(o, file, flen + 1);
    } else {
      memcpy(o, p, dlen);
      o[dlen] = '/';
      memcpy(o + dlen + 1, file, flen + 1);
    }
    o += (dlen ? dlen + 1 : 0) + flen + 1;
    if (end == NULL)
      break;
    p = end;
  }
  list[k] = NULL;
  return list;
}

/*
 * The child between fork and exec: async-signal-safe calls only. It sets
 * the signal dispositions and mask dlock was started with and, on Linux,
 * asks for SIGKILL when dlock dies, so that a dlock killed outright (kill
 * -9, the OOM killer) does not leave the command running without the lock,
 * which expires by itself within the watchdog time. Should dlock have died
 * already, before the request took effect, the command is not started at
 * all. An exec failure is reported through 'report' (close-on-exec: a
 * successful exec closes it empty).
 */
static void run_child(const child_start_state_t *s, char *const *paths,
                      char *const argv[], char **env, pid_t parent,
                      int report) {
  for (int signo = 1; signo < SIGNAL_LIMIT; signo++) {
    if (sigismember(&s->defaulted, signo) == 1) {
      struct sigaction sa;
      memset(&sa, 0, sizeof sa);
      sa.sa_handler = SIG_DFL;
      sigemptyset(&sa.sa_mask);
      sigaction(signo, &sa, NULL);
    }
  }
#ifdef __linux__
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
    _exit(EXIT_INTERNAL);
#else
  (void)parent;
#endif
  sigprocmask(SIG_SETMASK, &s->mask, NULL);

  /* execvp's search: a missing file or directory moves on to the next
   * entry; a file that exists but cannot run is remembered (EACCES wins
   * over ENOENT, as in the shell), any other error stops the search. */
  int err = ENOENT, seen_eacces = 0;
  for (char *const *p = paths; *p != NULL; p++) {
    execve(*p, argv, env);
    err = errno;
    if (err == EACCES)
      seen_eacces = 1;
    else if (err != ENOENT && err != ENOTDIR && err != ELOOP &&
             err != ENAMETOOLONG)
      break;
  }
  if (seen_eacces && (err == ENOENT || err == ENOTDIR))
    err = EACCES;
  ssize_t ignored = write(report, &err, sizeof err);
  (void)ignored;
  _exit(EXIT_NOT_FOUND);
}

int child_start(const child_start_state_t *s, char *const argv[],
                const char *name, uint64_t token, pid_t *pid) {
  char *name_entry = NULL, *token_entry = NULL;
  char **env = build_environment(name, token, &name_entry, &token_entry);
  char **paths = search_paths(argv[0]);
  int report[2] = {-1, -1};
  sigset_t all, before;
  int rc = 0;

  if (env == NULL || paths == NULL)
    rc = ENOMEM;
  else if (pipe2(report, O_CLOEXEC) != 0)
    rc = errno;
  if (rc == 0) {
    /* No handler of dlock's may run in the child before it resets them:
     * they write to dlock's event pipe, which the child shares. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &before);
    pid_t parent = getpid();
    pid_t child = fork();
    if (child == 0)
      run_child(s, paths, argv, env, parent, report[1]);
    rc = child < 0 ? errno : 0;
    pthread_sigmask(SIG_SETMASK, &before, NULL);
    close(report[1]);
    if (rc == 0) {
      /* Empty at the exec; the errno when the exec failed. */
      int err = 0;
      ssize_t n;
      do
        n = read(report[0], &err, sizeof err);
      while (n < 0 && errno == EINTR);
      if (n == (ssize_t)sizeof err) {
        while (waitpid(child, NULL, 0) < 0 && errno == EINTR) {
        }
        rc = err;
      } else {
        *pid = child;
      }
    }
    close(report[0]);
  }
  free(paths);
  free(env);
  free(name_entry);
  free(token_entry);
  return rc;
}

int child_exit_status(int wait_status) {
  if (WIFEXITED(wait_status))
    return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status))
    return EXIT_SIGNAL_BASE + WTERMSIG(wait_status);
  return EXIT_INTERNAL;
}
