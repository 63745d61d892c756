/*
 * The misbehaving TCP proxy (see tcp_proxy.h). One thread polls the
 * listening socket, a wake-up pipe and both ends of every connection; it
 * reads whatever arrives into a buffer per direction and sends it on at the
 * pace the test chose.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "tcp_proxy.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "test.h"

/* Past this much unsent data in one direction the proxy stops reading that
 * side, so that a held or trickled stream pushes back like a slow link. */
#define BUF_MAX (1 << 20)

typedef struct dir {
  char *buf;
  size_t len, cap;
  int64_t next_us; /* trickling: when the next byte may go */
} dir;

typedef struct pair {
  struct pair *next;
  int fd[2];  /* 0: the client's side, 1: the server's */
  dir out[2]; /* out[i]: bytes read from fd[i], to send to fd[1 - i] */
  int dead;
} pair;

struct tp_proxy {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t thread;
  int lfd, wake[2];
  int port, target;
  char url[64];
  int stopping;
  int64_t every_us[2]; /* per direction: [0] to the server, [1] back */
  int hold;
  unsigned close_req, close_done;
  int accepted;
  pair *pairs;
};

static int64_t now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void poke(tp_proxy_t *px) {
  char b = 1;
  ssize_t n = write(px->wake[1], &b, 1);
  (void)n; /* a full pipe already wakes the thread */
}

static void free_pair(pair *p) {
  close(p->fd[0]);
  close(p->fd[1]);
  free(p->out[0].buf);
  free(p->out[1].buf);
  free(p);
}

static void accept_pair(tp_proxy_t *px) {
  int cfd = accept4(px->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (cfd < 0)
    return;
  int ufd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_port = htons((uint16_t)px->target),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (ufd < 0 || connect(ufd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
    if (ufd >= 0)
      close(ufd);
    close(cfd);
    return;
  }
  fcntl(ufd, F_SETFL, fcntl(ufd, F_GETFL) | O_NONBLOCK);
  int one = 1;
  setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(ufd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  pair *p = calloc(1, sizeof(*p));
  if (p == NULL)
    TEST_FAIL("proxy: out of memory");
  p->fd[0] = cfd;
  p->fd[1] = ufd;
  p->next = px->pairs;
  px->pairs = p;
  px->accepted++;
}

/* Reads from side 'i' into out[i]; -1 when that side is gone. */
static int pull(pair *p, int i) {
  dir *d = &p->out[i];
  if (d->cap - d->len < 16384) {
    size_t cap = d->cap ? d->cap * 2 : 65536;
    char *grown = realloc(d->buf, cap);
    if (grown == NULL)
      TEST_FAIL("proxy: out of memory");
    d->buf = grown;
    d->cap = cap;
  }
  ssize_t n = recv(p->fd[i], d->buf + d->len, d->cap - d->len, MSG_DONTWAIT);
  if (n == 0)
    return -1;
  if (n < 0)
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
  d->len += (size_t)n;
  return 0;
}

/* Sends what out[i] may send now to the other side; -1 when it is gone.
 * Sets '*next' to when a trickled byte is due and '*full' when the other
 * side does not take more. */
static int push(tp_proxy_t *px, pair *p, int i, int64_t now, int64_t *next,
                int *full) {
  dir *d = &p->out[i];
  *full = 0;
  if (d->len == 0 || px->hold)
    return 0;
  size_t want = d->len;
  int64_t every_us = px->every_us[i];
  if (every_us > 0) {
    if (now < d->next_us) {
      if (d->next_us < *next)
        *next = d->next_us;
      return 0;
    }
    want = 1;
  }
  ssize_t n = send(p->fd[1 - i], d->buf, want, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      *full = 1;
      return 0;
    }
    return -1;
  }
  memmove(d->buf, d->buf + n, d->len - (size_t)n);
  d->len -= (size_t)n;
  if (every_us > 0) {
    d->next_us = now + every_us;
    if (d->len > 0 && d->next_us < *next)
      *next = d->next_us;
  }
  return 0;
}

static void *proxy_main(void *arg) {
  tp_proxy_t *px = arg;
  pthread_mutex_lock(&px->mu);
  while (!px->stopping) {
    int closing = px->close_done != px->close_req;
    int64_t now = now_us(), next = INT64_MAX;
    size_t npairs = 0;
    int *full = NULL;
    for (pair **pp = &px->pairs; *pp != NULL;) {
      pair *p = *pp;
      if (closing || p->dead) {
        *pp = p->next;
        free_pair(p);
        continue;
      }
      npairs++;
      pp = &p->next;
    }
    if (closing) {
      px->close_done = px->close_req;
      pthread_cond_broadcast(&px->cv);
    }
    struct pollfd *pf = calloc(2 * npairs + 2, sizeof(*pf));
    pair **ps = calloc(npairs + 1, sizeof(*ps));
    full = calloc(2 * npairs + 1, sizeof(*full));
    if (pf == NULL || ps == NULL || full == NULL)
      TEST_FAIL("proxy: out of memory");
    pf[0] = (struct pollfd){.fd = px->lfd, .events = POLLIN};
    pf[1] = (struct pollfd){.fd = px->wake[0], .events = POLLIN};
    size_t k = 0;
    for (pair *p = px->pairs; p != NULL; p = p->next, k++) {
      ps[k] = p;
      for (int i = 0; i < 2; i++)
        if (push(px, p, i, now, &next, &full[2 * k + i]) != 0)
          p->dead = 1;
    }
    for (k = 0; k < npairs; k++) {
      for (int i = 0; i < 2; i++) {
        /* Side i is read while its buffer has room; written (POLLOUT)
         * while the other side's bytes for it do not fit. */
        short ev = ps[k]->out[i].len < BUF_MAX ? POLLIN : 0;
        if (full[2 * k + (1 - i)])
          ev |= POLLOUT;
        pf[2 + 2 * k + i] = (struct pollfd){.fd = ps[k]->fd[i], .events = ev};
      }
    }
    int timeout = -1;
    if (next != INT64_MAX) {
      int64_t ms = (next - now + 999) / 1000;
      timeout = ms < 0 ? 0 : ms > 60000 ? 60000 : (int)ms;
    }
    pthread_mutex_unlock(&px->mu);
    int n = poll(pf, 2 * npairs + 2, timeout);
    pthread_mutex_lock(&px->mu);
    if (n > 0) {
      if (pf[1].revents & POLLIN) {
        char drain[64];
        while (read(px->wake[0], drain, sizeof(drain)) > 0) {
        }
      }
      if (pf[0].revents & POLLIN)
        accept_pair(px);
      for (k = 0; k < npairs; k++)
        for (int i = 0; i < 2; i++)
          if ((pf[2 + 2 * k + i].revents & (POLLIN | POLLHUP | POLLERR)) &&
              pull(ps[k], i) != 0)
            ps[k]->dead = 1;
    }
    free(pf);
    free(ps);
    free(full);
  }
  while (px->pairs != NULL) {
    pair *p = px->pairs;
    px->pairs = p->next;
    free_pair(p);
  }
  pthread_mutex_unlock(&px->mu);
  return NULL;
}

tp_proxy_t *tp_start(int target_port) {
  tp_proxy_t *px = calloc(1, sizeof(*px));
  if (px == NULL)
    TEST_FAIL("proxy: out of memory");
  px->target = target_port;
  pthread_mutex_init(&px->mu, NULL);
  pthread_cond_init(&px->cv, NULL);
  if (pipe2(px->wake, O_NONBLOCK | O_CLOEXEC) != 0)
    TEST_FAIL("proxy: pipe: %s", strerror(errno));
  px->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (px->lfd < 0)
    TEST_FAIL("proxy: socket: %s", strerror(errno));
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t sl = sizeof(sa);
  if (bind(px->lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
      listen(px->lfd, 64) != 0 ||
      getsockname(px->lfd, (struct sockaddr *)&sa, &sl) != 0)
    TEST_FAIL("proxy: bind/listen: %s", strerror(errno));
  px->port = ntohs(sa.sin_port);
  snprintf(px->url, sizeof(px->url), "redis://127.0.0.1:%d", px->port);
  if (pthread_create(&px->thread, NULL, proxy_main, px) != 0)
    TEST_FAIL("proxy: pthread_create failed");
  return px;
}

void tp_free(tp_proxy_t *px) {
  if (px == NULL)
    return;
  pthread_mutex_lock(&px->mu);
  px->stopping = 1;
  poke(px);
  pthread_mutex_unlock(&px->mu);
  pthread_join(px->thread, NULL);
  close(px->lfd);
  close(px->wake[0]);
  close(px->wake[1]);
  pthread_cond_destroy(&px->cv);
  pthread_mutex_destroy(&px->mu);
  free(px);
}

int tp_port(const tp_proxy_t *px) { return px->port; }

const char *tp_url(const tp_proxy_t *px) { return px->url; }

void tp_trickle(tp_proxy_t *px, int64_t every_ms) {
  tp_trickle_each(px, every_ms, every_ms);
}

void tp_trickle_each(tp_proxy_t *px, int64_t to_server_ms,
                     int64_t to_client_ms) {
  pthread_mutex_lock(&px->mu);
  px->every_us[0] = to_server_ms > 0 ? to_server_ms * 1000 : 0;
  px->every_us[1] = to_client_ms > 0 ? to_client_ms * 1000 : 0;
  poke(px);
  pthread_mutex_unlock(&px->mu);
}

void tp_hold(tp_proxy_t *px, int on) {
  pthread_mutex_lock(&px->mu);
  px->hold = on;
  poke(px);
  pthread_mutex_unlock(&px->mu);
}

void tp_close_all(tp_proxy_t *px) {
  pthread_mutex_lock(&px->mu);
  unsigned want = ++px->close_req;
  poke(px);
  while ((int)(px->close_done - want) < 0)
    pthread_cond_wait(&px->cv, &px->mu);
  pthread_mutex_unlock(&px->mu);
}

int tp_accepted(tp_proxy_t *px) {
  pthread_mutex_lock(&px->mu);
  int n = px->accepted;
  pthread_mutex_unlock(&px->mu);
  return n;
}

int tp_count_to_server(tp_proxy_t *px, const char *needle) {
  size_t nl = strlen(needle);
  int n = 0;
  pthread_mutex_lock(&px->mu);
  for (pair *p = px->pairs; p != NULL; p = p->next) {
    const dir *d = &p->out[0];
    for (size_t i = 0; nl > 0 && i + nl <= d->len; i++)
      if (memcmp(d->buf + i, needle, nl) == 0)
        n++;
  }
  pthread_mutex_unlock(&px->mu);
  return n;
}
