/*
 * dlock on a libuv loop: an async client's descriptors become uv_poll_t
 * handles and its timer a uv_timer_t. Header-only; link with libuv.
 *
 *   dlock_client_t *c;
 *   dlock_client_open_async(&opts, &c);
 *   dlock_libuv_attach(c, uv_default_loop());
 *   dlock_lock_async(lock, owner, 30000, on_locked, data);
 *   uv_run(uv_default_loop(), UV_RUN_DEFAULT);
 *
 * The handles are closed, and the adapter's memory freed, once the client
 * is closed (dlock_client_close) and the loop has run their close
 * callbacks.
 */
#ifndef DLOCK_ADAPTERS_LIBUV_H
#define DLOCK_ADAPTERS_LIBUV_H

#include <stdlib.h>
#include <uv.h>

#include "../../dlock.h"

/* The client watches two descriptors at most (its command and pub/sub
 * connections); a spare one covers a socket being replaced. */
#define DLOCK_LIBUV_SOCKETS 4

typedef struct dlock_libuv {
  uv_loop_t *loop;
  dlock_client_t *c;
  uv_timer_t timer;
  struct dlock_libuv_socket {
    struct dlock_libuv *owner;
    uv_poll_t *poll; /* NULL: slot free */
    int fd;
  } sockets[DLOCK_LIBUV_SOCKETS];
  int handles; /* handles not closed yet, the timer included */
  int ended;   /* the client is closed */
} dlock_libuv;

static void dlock_libuv__release(dlock_libuv *a) {
  if (--a->handles == 0 && a->ended)
    free(a);
}

static void dlock_libuv__timer_closed(uv_handle_t *h) {
  dlock_libuv__release((dlock_libuv *)h->data);
}

/* A poll handle's data is its slot, whose owner is the adapter. */
static void dlock_libuv__poll_closed(uv_handle_t *h) {
  dlock_libuv *a = ((struct dlock_libuv_socket *)h->data)->owner;
  free(h);
  dlock_libuv__release(a);
}

static void dlock_libuv__on_poll(uv_poll_t *p, int status, int events) {
  struct dlock_libuv_socket *s = (struct dlock_libuv_socket *)p->data;
  /* An error on the descriptor is for the client to read and report. */
  int what = status < 0 ? DLOCK_POLL_IN | DLOCK_POLL_OUT
                        : ((events & UV_READABLE) ? DLOCK_POLL_IN : 0) |
                              ((events & UV_WRITABLE) ? DLOCK_POLL_OUT : 0);
  dlock_loop_action(s->owner->c, s->fd, what);
}

static void dlock_libuv__on_timeout(uv_timer_t *t) {
  dlock_libuv *a = (dlock_libuv *)t->data;
  dlock_loop_action(a->c, DLOCK_SOCKET_TIMEOUT, 0);
}

static struct dlock_libuv_socket *dlock_libuv__find(dlock_libuv *a, int fd) {
  for (int i = 0; i < DLOCK_LIBUV_SOCKETS; i++)
    if (a->sockets[i].poll != NULL && a->sockets[i].fd == fd)
      return &a->sockets[i];
  return NULL;
}

static void dlock_libuv__on_socket(dlock_client_t *c, int fd, int what,
                                   void *data) {
  dlock_libuv *a = (dlock_libuv *)data;
  (void)c;
  if (fd < 0) {
    /* The client is closed: every handle goes, then the adapter. */
    a->ended = 1;
    for (int i = 0; i < DLOCK_LIBUV_SOCKETS; i++) {
      if (a->sockets[i].poll != NULL) {
        uv_poll_stop(a->sockets[i].poll);
        uv_close((uv_handle_t *)a->sockets[i].poll, dlock_libuv__poll_closed);
        a->sockets[i].poll = NULL;
      }
    }
    uv_timer_stop(&a->timer);
    uv_close((uv_handle_t *)&a->timer, dlock_libuv__timer_closed);
    return;
  }
  struct dlock_libuv_socket *s = dlock_libuv__find(a, fd);
  if (what & DLOCK_POLL_REMOVE) {
    if (s != NULL) {
      uv_poll_stop(s->poll);
      uv_close((uv_handle_t *)s->poll, dlock_libuv__poll_closed);
      s->poll = NULL;
    }
    return;
  }
  if (s == NULL) {
    for (int i = 0; i < DLOCK_LIBUV_SOCKETS && s == NULL; i++)
      if (a->sockets[i].poll == NULL)
        s = &a->sockets[i];
    if (s == NULL)
      return;
    uv_poll_t *p = (uv_poll_t *)malloc(sizeof(*p));
    if (p == NULL || uv_poll_init_socket(a->loop, p, fd) != 0) {
      free(p);
      return;
    }
    p->data = s;
    s->owner = a;
    s->fd = fd;
    s->poll = p;
    a->handles++;
  }
  int events = ((what & DLOCK_POLL_IN) ? UV_READABLE : 0) |
               ((what & DLOCK_POLL_OUT) ? UV_WRITABLE : 0);
  uv_poll_start(s->poll, events, dlock_libuv__on_poll);
}

static void dlock_libuv__on_timer(dlock_client_t *c, int64_t timeout_ms,
                                  void *data) {
  dlock_libuv *a = (dlock_libuv *)data;
  (void)c;
  if (timeout_ms < 0)
    uv_timer_stop(&a->timer);
  else
    uv_timer_start(&a->timer, dlock_libuv__on_timeout, (uint64_t)timeout_ms, 0);
}

/* Attaches async client 'c' to 'loop'. 0, or a DLOCK_E* code. */
static inline int dlock_libuv_attach(dlock_client_t *c, uv_loop_t *loop) {
  dlock_libuv *a = (dlock_libuv *)calloc(1, sizeof(*a));
  if (a == NULL)
    return DLOCK_ENOMEM;
  a->loop = loop;
  a->c = c;
  uv_timer_init(loop, &a->timer);
  a->timer.data = a;
  a->handles = 1;
  int rc =
      dlock_loop_attach(c, dlock_libuv__on_socket, dlock_libuv__on_timer, a);
  if (rc != 0) {
    a->ended = 1;
    uv_close((uv_handle_t *)&a->timer, dlock_libuv__timer_closed);
  }
  return rc;
}

#endif
