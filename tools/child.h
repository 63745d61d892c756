/*
 * Starting the command of "dlock run" so that it sees the process state
 * dlock itself was started with, plus DLOCK_NAME and DLOCK_TOKEN: the same
 * signal mask and dispositions (the library and dlock's own handlers must
 * not leak into it), the same stdin/stdout/stderr, and no other descriptor.
 */
#ifndef DLOCK_TOOLS_CHILD_H
#define DLOCK_TOOLS_CHILD_H

#include <signal.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct child_start_state {
  sigset_t mask;      /* the signal mask dlock was started with */
  sigset_t defaulted; /* signals whose disposition was SIG_DFL at start */
  sigset_t ignored;   /* signals that were SIG_IGN at start */
} child_start_state_t;

/* Records the signal state; call before any thread or handler exists. */
void child_start_state_capture(child_start_state_t *s);

/*
 * Starts argv[0] (searched in $PATH) with 'argv', the current environment
 * plus DLOCK_NAME=name and DLOCK_TOKEN=token, and the recorded signal
 * state. Returns 0 and the pid, or the errno of the failure (ENOENT when
 * the command does not exist).
 */
int child_start(const child_start_state_t *s, char *const argv[],
                const char *name, uint64_t token, pid_t *pid);

/* The exit status a shell would report for 'wait_status': the exit code,
 * or 128 + N for a command killed by signal N. */
int child_exit_status(int wait_status);

#endif
