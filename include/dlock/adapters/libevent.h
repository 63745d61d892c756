/*
 * dlock on a libevent loop: an async client's descriptors become events
 * of 'base' and its timer a timer event. Header-only; link with libevent.
 *
 *   dlock_client_t *c;
 *   dlock_client_open_async(&opts, &c);
 *   dlock_libevent_attach(c, base);
 *   dlock_lock_async(lock, owner, 30000, on_locked, data);
 *   event_base_dispatch(base);
 *
 * The events are freed, and the adapter's memory, when the client is
 * closed (dlock_client_close).
 */
#ifndef DLOCK_ADAPTERS_LIBEVENT_H
#define DLOCK_ADAPTERS_LIBEVENT_H

#include <event2/event.h>
#include <stdlib.h>

#include "../../dlock.h"

#define DLOCK_LIBEVENT_SOCKETS 4

typedef struct dlock_libevent {
  struct event_base *base;
  dlock_client_t *c;
  struct event *timer;
  struct dlock_libevent_socket {
    struct event *ev; /* NULL: slot free */
    int fd;
    int what;
  } sockets[DLOCK_LIBEVENT_SOCKETS];
} dlock_libevent;

static void dlock_libevent__on_event(evutil_socket_t fd, short events,
                                     void *arg) {
  dlock_libevent *a = (dlock_libevent *)arg;
  dlock_loop_action(a->c, (int)fd,
                    ((events & EV_READ) ? DLOCK_POLL_IN : 0) |
                        ((events & EV_WRITE) ? DLOCK_POLL_OUT : 0));
}

static void dlock_libevent__on_timeout(evutil_socket_t fd, short events,
                                       void *arg) {
  dlock_libevent *a = (dlock_libevent *)arg;
  (void)fd;
  (void)events;
  dlock_loop_action(a->c, DLOCK_SOCKET_TIMEOUT, 0);
}

static void dlock_libevent__drop(struct dlock_libevent_socket *s) {
  if (s->ev != NULL)
    event_free(s->ev);
  s->ev = NULL;
}

static void dlock_libevent__on_socket(dlock_client_t *c, int fd, int what,
                                      void *data) {
  dlock_libevent *a = (dlock_libevent *)data;
  (void)c;
  if (fd < 0) {
    /* The client is closed: everything goes. */
    for (int i = 0; i < DLOCK_LIBEVENT_SOCKETS; i++)
      dlock_libevent__drop(&a->sockets[i]);
    event_free(a->timer);
    free(a);
    return;
  }
  struct dlock_libevent_socket *s = NULL, *free_slot = NULL;
  for (int i = 0; i < DLOCK_LIBEVENT_SOCKETS; i++) {
    if (a->sockets[i].ev != NULL && a->sockets[i].fd == fd)
      s = &a->sockets[i];
    else if (a->sockets[i].ev == NULL && free_slot == NULL)
      free_slot = &a->sockets[i];
  }
  if (what & DLOCK_POLL_REMOVE) {
    if (s != NULL)
      dlock_libevent__drop(s);
    return;
  }
  /* What an event waits for is fixed when it is made: a change makes a
   * new one. */
  if (s != NULL)
    dlock_libevent__drop(s);
  else
    s = free_slot;
  if (s == NULL)
    return;
  short events = (short)(EV_PERSIST | ((what & DLOCK_POLL_IN) ? EV_READ : 0) |
                         ((what & DLOCK_POLL_OUT) ? EV_WRITE : 0));
  s->ev = event_new(a->base, fd, events, dlock_libevent__on_event, a);
  s->fd = fd;
  s->what = what;
  if (s->ev != NULL)
    event_add(s->ev, NULL);
}

static void dlock_libevent__on_timer(dlock_client_t *c, int64_t timeout_ms,
                                     void *data) {
  dlock_libevent *a = (dlock_libevent *)data;
  (void)c;
  if (timeout_ms < 0) {
    evtimer_del(a->timer);
    return;
  }
  struct timeval tv;
  tv.tv_sec = (long)(timeout_ms / 1000);
  tv.tv_usec = (long)(timeout_ms % 1000) * 1000;
  evtimer_add(a->timer, &tv);
}

/* Attaches async client 'c' to 'base'. 0, or a DLOCK_E* code. */
static inline int dlock_libevent_attach(dlock_client_t *c,
                                        struct event_base *base) {
  dlock_libevent *a = (dlock_libevent *)calloc(1, sizeof(*a));
  if (a == NULL)
    return DLOCK_ENOMEM;
  a->base = base;
  a->c = c;
  a->timer = evtimer_new(base, dlock_libevent__on_timeout, a);
  if (a->timer == NULL) {
    free(a);
    return DLOCK_ENOMEM;
  }
  int rc = dlock_loop_attach(c, dlock_libevent__on_socket,
                             dlock_libevent__on_timer, a);
  if (rc != 0) {
    event_free(a->timer);
    free(a);
  }
  return rc;
}

#endif
