/*
 * A plain epoll loop for the async client's tests: what a program without
 * libuv or libevent writes to drive dlock_client_open_async() (the
 * README's example is the same loop).
 */
#ifndef DLOCK_TESTS_LOOP_UTIL_H
#define DLOCK_TESTS_LOOP_UTIL_H

#include <errno.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "lock_util.h"

typedef struct tl_loop {
  int ep;
  int64_t timer_at; /* lu_now_ms() when the client's timer runs out; -1 */
  dlock_client_t *c;
  int sockets; /* descriptors being watched */
} tl_loop;

static inline void tl_on_socket(dlock_client_t *c, int fd, int what,
                                void *data) {
  tl_loop *t = data;
  (void)c;
  if (what & DLOCK_POLL_REMOVE) {
    if (epoll_ctl(t->ep, EPOLL_CTL_DEL, fd, NULL) == 0)
      t->sockets--;
    return;
  }
  struct epoll_event ev = {0};
  ev.events = ((what & DLOCK_POLL_IN) ? EPOLLIN : 0) |
              ((what & DLOCK_POLL_OUT) ? EPOLLOUT : 0);
  ev.data.fd = fd;
  if (epoll_ctl(t->ep, EPOLL_CTL_MOD, fd, &ev) != 0 && errno == ENOENT &&
      epoll_ctl(t->ep, EPOLL_CTL_ADD, fd, &ev) == 0)
    t->sockets++;
}

static inline void tl_on_timer(dlock_client_t *c, int64_t timeout_ms,
                               void *data) {
  tl_loop *t = data;
  (void)c;
  t->timer_at = timeout_ms < 0 ? -1 : lu_now_ms() + timeout_ms;
}

static inline void tl_init(tl_loop *t, dlock_client_t *c) {
  t->ep = epoll_create1(EPOLL_CLOEXEC);
  ASSERT_GE(t->ep, 0);
  t->timer_at = -1;
  t->c = c;
  t->sockets = 0;
  ASSERT_DLOCK_OK(dlock_loop_attach(c, tl_on_socket, tl_on_timer, t));
}

/* One turn: waits at most 'max_ms' for a descriptor or the timer. */
static inline void tl_turn(tl_loop *t, int64_t max_ms) {
  int64_t wait = max_ms;
  if (t->timer_at >= 0) {
    int64_t left = t->timer_at - lu_now_ms();
    wait = left < 0 ? 0 : left < wait ? left : wait;
  }
  struct epoll_event evs[8];
  int n = epoll_wait(t->ep, evs, 8, (int)wait);
  for (int i = 0; i < n; i++) {
    int what =
        ((evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) ? DLOCK_POLL_IN
                                                           : 0) |
        ((evs[i].events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) ? DLOCK_POLL_OUT
                                                            : 0);
    ASSERT_DLOCK_OK(dlock_loop_action(t->c, evs[i].data.fd, what));
  }
  if (t->timer_at >= 0 && lu_now_ms() >= t->timer_at) {
    t->timer_at = -1;
    ASSERT_DLOCK_OK(dlock_loop_action(t->c, DLOCK_SOCKET_TIMEOUT, 0));
  }
}

/* Turns until '*flag' is set, failing the test after 'limit_ms'. */
static inline void tl_run_until(tl_loop *t, const int *flag, int64_t limit_ms) {
  int64_t end = lu_now_ms() + limit_ms;
  while (!*flag) {
    ASSERT_LT(lu_now_ms(), end);
    tl_turn(t, 50);
  }
}

/* Turns for 'ms'. */
static inline void tl_run_for(tl_loop *t, int64_t ms) {
  int64_t end = lu_now_ms() + ms;
  while (lu_now_ms() < end)
    tl_turn(t, end - lu_now_ms());
}

static inline void tl_close(tl_loop *t) { close(t->ep); }

static inline dlock_client_t *tl_client_opts(const dlock_options_t *o) {
  dlock_client_t *c = NULL;
  ASSERT_DLOCK_OK(dlock_client_open_async(o, &c));
  ASSERT_NOT_NULL(c);
  return c;
}

/* An async client on 's' with the tests' options, attached to a fresh
 * loop 't'. */
static inline dlock_client_t *tl_async_client(rp_server_t *s, tl_loop *t) {
  dlock_options_t o;
  lu_options(&o, s);
  dlock_client_t *c = tl_client_opts(&o);
  tl_init(t, c);
  return c;
}

/* The result of one operation, with a failure's detail. */
typedef struct tl_done {
  int calls;
  int status;
  int64_t at_ms;
  char detail[512];
} tl_done;

static inline void tl_done_cb(dlock_t *l, uint64_t owner, int status,
                              void *data) {
  tl_done *d = data;
  (void)l;
  (void)owner;
  d->calls++;
  d->status = status;
  d->at_ms = lu_now_ms();
  snprintf(d->detail, sizeof(d->detail), "%s",
           status != 0 ? dlock_last_error() : "");
}

#endif
