/*
 * The thread that drives a client's Sentinel watcher: it waits for what
 * the watcher's last step asked for (its connection's descriptor, or a
 * time) and steps it again, until the client closes. The watcher itself
 * (topo/sentinel.c) only says what it waits for, so that an event loop
 * can drive it the same way.
 */
#define _GNU_SOURCE
#include "watcher.h"

#include "alloc.h"
#include "error.h"
#include "monotime.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

struct dlock__watcher {
  dlock__sentinel *s;
  pthread_t thread;
  atomic_int stopping;
  int wake[2]; /* written to stop it */
};

static void *watcher_main(void *arg) {
  dlock__watcher *w = arg;
  dlock__watch_io next = {-1, 0, 0};
  short revents = 0;
  int due = 1;
  while (!atomic_load(&w->stopping)) {
    if (due)
      dlock__sentinel_watch_step(w->s, revents, &next);
    struct pollfd p[2] = {{.fd = w->wake[0], .events = POLLIN, .revents = 0},
                          {.fd = next.fd, .events = next.events, .revents = 0}};
    int n = poll(p, next.fd >= 0 ? 2 : 1, dlock__ms_until(next.until_us));
    if (n < 0 && errno != EINTR)
      break;
    revents = n > 0 && next.fd >= 0 ? p[1].revents : 0;
    /* Woken early (by the pipe, to stop, or a signal): not a step yet. */
    due = revents != 0 || dlock__now_us() >= next.until_us;
  }
  dlock__sentinel_watch_end(w->s);
  return NULL;
}

int dlock__watcher_start(dlock__sentinel *s, dlock__watcher **out) {
  *out = NULL;
  dlock__watcher *w = dlock__calloc(1, sizeof(*w));
  if (w == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory watching the Sentinels");
  w->s = s;
  if (pipe2(w->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    int e = errno;
    dlock__free(w);
    return dlock__fail(DLOCK_EIO, "pipe2: %s", strerror(e));
  }
  if (pthread_create(&w->thread, NULL, watcher_main, w) != 0) {
    close(w->wake[0]);
    close(w->wake[1]);
    dlock__free(w);
    return dlock__fail(DLOCK_ENOMEM, "pthread_create failed");
  }
  *out = w;
  return 0;
}

void dlock__watcher_stop(dlock__watcher *w) {
  if (w == NULL)
    return;
  atomic_store(&w->stopping, 1);
  ssize_t n = write(w->wake[1], "x", 1);
  (void)n;
  pthread_join(w->thread, NULL);
  close(w->wake[0]);
  close(w->wake[1]);
  dlock__free(w);
}
