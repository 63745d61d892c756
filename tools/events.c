#define _POSIX_C_SOURCE 200809L
#include "events.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

const int events_forwarded_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
const size_t events_nforwarded_signals =
    sizeof events_forwarded_signals / sizeof events_forwarded_signals[0];

static int pipe_fds[2] = {-1, -1};

const char *signal_name(int signo) {
  static char other[32];

  switch (signo) {
  case SIGINT:
    return "SIGINT";
  case SIGTERM:
    return "SIGTERM";
  case SIGHUP:
    return "SIGHUP";
  case SIGQUIT:
    return "SIGQUIT";
  default:
    snprintf(other, sizeof other, "signal %d", signo);
    return other;
  }
}

int event_signal(unsigned char event) {
  return event < EVENT_ACQUIRE_DONE ? (event & ~EVENT_FROM_TERMINAL) : 0;
}

int event_from_terminal(unsigned char event) {
  return event < EVENT_ACQUIRE_DONE && (event & EVENT_FROM_TERMINAL) != 0;
}

static int set_fd_flags(int fd) {
  int fl = fcntl(fd, F_GETFL);
  int fdfl = fcntl(fd, F_GETFD);

  if (fl < 0 || fdfl < 0)
    return -1;
  if (fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
    return -1;
  return fcntl(fd, F_SETFD, fdfl | FD_CLOEXEC);
}

int events_open(void) {
  if (pipe(pipe_fds) != 0)
    return -1;
  if (set_fd_flags(pipe_fds[0]) != 0 || set_fd_flags(pipe_fds[1]) != 0) {
    events_close();
    return -1;
  }
  return 0;
}

void events_close(void) {
  for (int i = 0; i < 2; i++) {
    if (pipe_fds[i] >= 0)
      close(pipe_fds[i]);
    pipe_fds[i] = -1;
  }
}

void events_post(unsigned char event) {
  int saved = errno;
  /* A full pipe means the loop already has plenty to wake up for; the
   * byte is dropped rather than blocking a signal handler. */
  ssize_t n = write(pipe_fds[1], &event, 1);
  (void)n;
  errno = saved;
}

/*
 * Tells a signal typed at the terminal (Ctrl-C) from one sent with kill:
 * the terminal signals the whole foreground process group, so the command
 * already has it, and passing it on again would make it arrive twice (many
 * programs treat a second Ctrl-C as "abort now").
 */
static int sent_by_terminal(const siginfo_t *info) {
#ifdef SI_KERNEL
  return info != NULL && info->si_code == SI_KERNEL;
#else
  (void)info;
  return 0;
#endif
}

static void on_signal(int signo, siginfo_t *info, void *context) {
  (void)context;
  unsigned char event = (unsigned char)signo;
  if (signo != SIGCHLD && sent_by_terminal(info))
    event |= EVENT_FROM_TERMINAL;
  events_post(event);
}

static int catch_signal(int signo) {
  struct sigaction sa;

  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  if (signo == SIGCHLD)
    sa.sa_flags |= SA_NOCLDSTOP;
  sigemptyset(&sa.sa_mask);
  return sigaction(signo, &sa, NULL);
}

int events_catch_signals(const sigset_t *leave_alone) {
  for (size_t i = 0; i < events_nforwarded_signals; i++) {
    int signo = events_forwarded_signals[i];
    if (!sigismember(leave_alone, signo) && catch_signal(signo) != 0)
      return -1;
  }
  return catch_signal(SIGCHLD);
}

size_t events_wait(int timeout_ms, unsigned char *out, size_t cap) {
  struct pollfd pfd = {pipe_fds[0], POLLIN, 0};
  int ready = poll(&pfd, 1, timeout_ms);

  if (ready <= 0)
    return 0; /* timeout, or EINTR: the caller loops and recomputes */
  ssize_t n = read(pipe_fds[0], out, cap);
  return n > 0 ? (size_t)n : 0;
}
