#define _POSIX_C_SOURCE 200809L
#include "child.h"

#include <errno.h>
#include <inttypes.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

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

int child_start(const child_start_state_t *s, char *const argv[],
                const char *name, uint64_t token, pid_t *pid) {
  char *name_entry = NULL, *token_entry = NULL;
  char **env = build_environment(name, token, &name_entry, &token_entry);
  posix_spawnattr_t attr;
  int rc;

  if (env == NULL)
    return ENOMEM;
  rc = posix_spawnattr_init(&attr);
  if (rc == 0) {
    /* Signals at SIG_DFL when dlock started go back to SIG_DFL, whatever
     * dlock or the library did to them since (handlers are reset by exec
     * anyway; an ignored SIGPIPE would not be). Signals ignored at start
     * stay ignored, as nohup intends. */
    posix_spawnattr_setsigmask(&attr, &s->mask);
    posix_spawnattr_setsigdefault(&attr, &s->defaulted);
    posix_spawnattr_setflags(&attr,
                             POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    rc = posix_spawnp(pid, argv[0], NULL, &attr, argv, env);
    posix_spawnattr_destroy(&attr);
  }
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
