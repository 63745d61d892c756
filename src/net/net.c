/*
 * The socket half of the transports: resolving, non-blocking connects over
 * TCP (each address of the host in turn) and unix sockets, plain reads and
 * writes, and the blocking waits over them. TLS is in tls.c.
 */
/* TCP_KEEPIDLE and friends are not POSIX. */
#define _GNU_SOURCE

#include "net/internal.h"

#include "alloc.h"
#include "monotime.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

/* TCP keepalive: the first probe after this many idle seconds, then three
 * more a third of it apart, so a server that vanished without a word
 * (its host lost power, a NAT forgot us) is noticed within half a minute
 * on a connection that is idle. As hiredis does. */
#define KEEPALIVE_S 15

int dlock__net_fail(dlock__net *n, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(n->err, sizeof(n->err), fmt, ap);
  va_end(ap);
  n->state = NET_FAILED;
  n->code = code;
  return dlock__fail_text(code, n->err);
}

/* The code of a transport that failed before, with its detail again. */
static int failed_again(dlock__net *n) {
  return dlock__fail_text(n->code != 0 ? n->code : DLOCK_EIO,
                          n->err[0] != '\0' ? n->err : "connection closed");
}

static void close_fd(dlock__net *n) {
  if (n->fd >= 0) {
    close(n->fd);
    n->fd = -1;
  }
}

/* Low latency and dead-peer detection. Failures are ignored: a system
 * without an option costs latency or detection time, not correctness. */
static void tune_tcp(int fd) {
  int one = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
#if defined(TCP_KEEPIDLE) && defined(TCP_KEEPINTVL) && defined(TCP_KEEPCNT)
  int idle = KEEPALIVE_S, intvl = KEEPALIVE_S / 3, cnt = 3;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
  (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
#endif
}

/* Starts connecting to the next address of the host that takes a socket;
 * fails when none is left. */
static int connect_next(dlock__net *n) {
  while (n->next != NULL) {
    struct addrinfo *a = n->next;
    n->next = a->ai_next;
    int fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                    a->ai_protocol);
    if (fd < 0) {
      n->connect_errno = errno;
      continue;
    }
    /* EINTR: the connect goes on in the background, as EINPROGRESS. */
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0 || errno == EINPROGRESS ||
        errno == EINTR) {
      n->fd = fd;
      n->events = POLLOUT;
      return 0;
    }
    n->connect_errno = errno;
    close(fd);
  }
  return dlock__net_fail(
      n, DLOCK_EIO, "connect(%s): %s", n->addr,
      strerror(n->connect_errno != 0 ? n->connect_errno : ECONNREFUSED));
}

static int connect_unix(dlock__net *n, const char *path) {
  struct sockaddr_un sa;
  memset(&sa, 0, sizeof(sa));
  sa.sun_family = AF_UNIX;
  if (strlen(path) >= sizeof(sa.sun_path))
    return dlock__net_fail(n, DLOCK_EINVAL, "unix socket path is too long");
  memcpy(sa.sun_path, path, strlen(path) + 1);
  n->is_unix = 1;
  n->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (n->fd < 0)
    return dlock__net_fail(n, DLOCK_EIO, "socket(%s): %s", n->addr,
                           strerror(errno));
  n->events = POLLOUT;
  if (connect(n->fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 ||
      errno == EINPROGRESS || errno == EINTR)
    return 0;
  /* A unix socket has no connect in progress: EAGAIN is a full backlog. */
  if (errno == EAGAIN)
    return dlock__net_fail(
        n, DLOCK_EIO, "connect(%s): the server's backlog is full", n->addr);
  return dlock__net_fail(n, DLOCK_EIO, "connect(%s): %s", n->addr,
                         strerror(errno));
}

int (*dlock__net_getaddrinfo)(const char *, const char *,
                              const struct addrinfo *,
                              struct addrinfo **) = getaddrinfo;

static int lookup(const dlock__endpoint *ep, struct addrinfo **out,
                  const char *addr) {
  char port[16];
  snprintf(port, sizeof(port), "%d", ep->port);
  struct addrinfo hints;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_protocol = IPPROTO_TCP;
  hints.ai_flags = AI_NUMERICSERV;
  *out = NULL;
  int g = dlock__net_getaddrinfo(ep->host, port, &hints, out);
  if (g == EAI_MEMORY)
    return dlock__fail(DLOCK_ENOMEM, "out of memory resolving %s", addr);
  if (g != 0)
    return dlock__fail(DLOCK_EIO, "resolve %s: %s", addr,
                       g == EAI_SYSTEM ? strerror(errno) : gai_strerror(g));
  return 0;
}

static int resolve(dlock__net *n, const dlock__endpoint *ep) {
  int rc = lookup(ep, &n->addrs, n->addr);
  if (rc != 0)
    return dlock__net_fail(n, rc, "%s", dlock_last_error());
  n->next = n->addrs;
  return 0;
}

int dlock__net_resolve(const dlock__endpoint *ep, struct addrinfo **out) {
  *out = NULL;
  if (ep->path != NULL)
    return 0;
  char addr[160];
  dlock__endpoint_describe(ep, addr, sizeof(addr));
  return lookup(ep, out, addr);
}

void dlock__net_addrs_free(struct addrinfo *addrs) {
  if (addrs != NULL)
    freeaddrinfo(addrs);
}

int dlock__net_start(const dlock__endpoint *ep, const dlock__tls *tls,
                     dlock__net **out) {
  return dlock__net_start_at(ep, tls, NULL, out);
}

int dlock__net_start_at(const dlock__endpoint *ep, const dlock__tls *tls,
                        struct addrinfo *addrs, dlock__net **out) {
  *out = NULL;
  if (ep->tls && tls == NULL) {
    dlock__net_addrs_free(addrs);
    return dlock__fail(DLOCK_EINVAL, "a TLS endpoint needs TLS settings");
  }
  if (ep->tls && ep->path != NULL) {
    dlock__net_addrs_free(addrs);
    return dlock__fail(DLOCK_EINVAL, "TLS over a unix socket is not offered");
  }
  dlock__net *n = dlock__calloc(1, sizeof(*n));
  if (n == NULL) {
    dlock__net_addrs_free(addrs);
    return dlock__fail(DLOCK_ENOMEM, "out of memory connecting");
  }
  n->fd = -1;
  n->state = NET_CONNECTING;
  dlock__endpoint_describe(ep, n->addr, sizeof(n->addr));
  int rc;
  if (ep->path != NULL) {
    dlock__net_addrs_free(addrs);
    rc = connect_unix(n, ep->path);
  } else if (addrs != NULL) {
    n->addrs = n->next = addrs;
    rc = 0;
  } else {
    rc = resolve(n, ep);
  }
  if (rc == 0 && ep->path == NULL)
    rc = connect_next(n);
  if (rc == 0 && ep->tls)
    rc = dlock__tls_attach(n, tls, ep->host);
  if (rc != 0) {
    dlock__net_close(n);
    return rc;
  }
  *out = n;
  return 0;
}

int dlock__net_step(dlock__net *n) {
  switch (n->state) {
  case NET_READY:
    return 0;
  case NET_FAILED:
    return failed_again(n);
  case NET_HANDSHAKE:
    return dlock__tls_handshake(n);
  default:
    break;
  }
  /* Connecting: done when the socket is writable, failed when it then
   * holds an error. Polled here rather than trusted to the caller, so a
   * step too early is harmless. */
  struct pollfd p = {.fd = n->fd, .events = POLLOUT, .revents = 0};
  int r = poll(&p, 1, 0);
  if (r == 0 || (r < 0 && errno == EINTR)) {
    n->events = POLLOUT;
    return DLOCK__NET_AGAIN;
  }
  if (r < 0)
    return dlock__net_fail(n, DLOCK_EIO, "poll(%s): %s", n->addr,
                           strerror(errno));
  int err = 0;
  socklen_t len = sizeof(err);
  if (getsockopt(n->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
    err = errno;
  if (err != 0) {
    n->connect_errno = err;
    close_fd(n);
    if (n->is_unix)
      return dlock__net_fail(n, DLOCK_EIO, "connect(%s): %s", n->addr,
                             strerror(err));
    /* The next address of the host, if any, in a fresh socket. */
    int rc = connect_next(n);
    return rc != 0 ? rc : DLOCK__NET_AGAIN;
  }
  if (!n->is_unix)
    tune_tcp(n->fd);
  if (n->addrs != NULL) {
    freeaddrinfo(n->addrs);
    n->addrs = n->next = NULL;
  }
  if (n->ssl == NULL) {
    n->state = NET_READY;
    return 0;
  }
  n->state = NET_HANDSHAKE;
  n->handshake_started_us = dlock__now_us();
  return dlock__tls_handshake(n);
}

int dlock__net_fd(const dlock__net *n) { return n->fd; }

short dlock__net_events(const dlock__net *n) { return n->events; }

const char *dlock__net_error(const dlock__net *n) { return n->err; }

const char *dlock__net_addr(const dlock__net *n) { return n->addr; }

int dlock__net_is_tls(const dlock__net *n) { return n->ssl != NULL; }

/* Counts what came, and remembers its first byte (see is_tls_record). */
static void count_received(dlock__net *n, const void *buf, long r) {
  if (r > 0) {
    if (n->received == 0)
      n->first_byte = *(const unsigned char *)buf;
    n->received += (uint64_t)r;
  }
}

/* MSG_DONTWAIT here and in dlock__net_send: a socket whose reads were made
 * blocking (dlock__net_block_reads) is otherwise used as a non-blocking
 * one, like every other. */
long dlock__net_recv(dlock__net *n, void *buf, size_t cap) {
  ssize_t r = recv(n->fd, buf, cap, MSG_DONTWAIT);
  count_received(n, buf, (long)r);
  return (long)r;
}

long dlock__net_send(dlock__net *n, const void *buf, size_t len) {
  /* MSG_NOSIGNAL: a server that went away must give EPIPE, not kill the
   * program with SIGPIPE. */
  return (long)send(n->fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* The first byte of a TLS record is its type: 20 to 24. No Redis reply
 * starts with one of these. */
static int is_tls_record(unsigned char b) { return b >= 0x14 && b <= 0x18; }

/* The server ended a plain stream ('err' 0: closed, else the errno). A
 * Redis TLS port resets a connection whose first bytes are not TLS, before
 * any answer, and nothing else that speaks Redis does that. */
static int plain_closed(dlock__net *n, int err) {
  if (n->received == 0 && !n->is_unix)
    return dlock__net_fail(n, DLOCK_EIO,
                           "%s %s the connection before answering (a TLS "
                           "port? it needs a rediss:// URL)",
                           n->addr, err != 0 ? "reset" : "closed");
  if (err == 0)
    return dlock__net_fail(n, DLOCK_EIO, "%s closed the connection", n->addr);
  return dlock__net_fail(n, DLOCK_EIO, "%s: %s", n->addr, strerror(err));
}

static int not_ready(dlock__net *n) {
  if (n->state == NET_FAILED)
    return failed_again(n);
  return dlock__fail(DLOCK_EIO, "%s: not connected yet", n->addr);
}

/* What a plain read makes of recv()'s result 'r' (with errno 'err'). */
static int take_plain(dlock__net *n, long r, int err, const void *buf,
                      size_t *got) {
  int first = n->received == 0;
  count_received(n, buf, r);
  if (r > 0) {
    if (first && is_tls_record(n->first_byte))
      return dlock__net_fail(n, DLOCK_EPROTO,
                             "%s answered in TLS: a TLS port needs a "
                             "rediss:// URL",
                             n->addr);
    *got = (size_t)r;
    return 0;
  }
  if (r < 0 && (err == EAGAIN || err == EWOULDBLOCK || err == EINTR)) {
    n->events = POLLIN;
    return DLOCK__NET_AGAIN;
  }
  return plain_closed(n, r == 0 ? 0 : err);
}

int dlock__net_read(dlock__net *n, void *buf, size_t cap, size_t *got) {
  *got = 0;
  if (n->state != NET_READY)
    return not_ready(n);
  if (n->ssl != NULL)
    return dlock__tls_read(n, buf, cap, got);
  ssize_t r = recv(n->fd, buf, cap, MSG_DONTWAIT);
  return take_plain(n, (long)r, r < 0 ? errno : 0, buf, got);
}

int dlock__net_block_reads(dlock__net *n, int64_t slice_ms) {
  if (n->blocking_reads != 0)
    return n->blocking_reads > 0 ? 0 : -1;
  n->blocking_reads = -1;
  /* TLS decrypts in whole records through its own reads, which must not
   * wait: only a plain stream reads straight from the socket. */
  if (n->state != NET_READY || n->ssl != NULL || slice_ms <= 0)
    return -1;
  struct timeval tv = {.tv_sec = (time_t)(slice_ms / 1000),
                       .tv_usec = (suseconds_t)(slice_ms % 1000) * 1000};
  if (setsockopt(n->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0)
    return -1;
  int flags = fcntl(n->fd, F_GETFL);
  if (flags < 0 || fcntl(n->fd, F_SETFL, flags & ~O_NONBLOCK) != 0)
    return -1;
  n->blocking_reads = 1;
  return 0;
}

/* Threads of this process looking at their sockets without sleeping: at
 * most one less than the processors online, so that one is always left to
 * whatever they wait for (Redis itself, on a small machine). */
static atomic_int spinners;

static int may_spin(void) {
  static atomic_int limit;
  int max = atomic_load_explicit(&limit, memory_order_relaxed);
  if (max == 0) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    max = cpus > 2 ? (int)cpus - 1 : 1;
    atomic_store_explicit(&limit, max, memory_order_relaxed);
  }
  if (atomic_fetch_add_explicit(&spinners, 1, memory_order_relaxed) < max)
    return 1;
  atomic_fetch_sub_explicit(&spinners, 1, memory_order_relaxed);
  return 0;
}

long dlock__net_recv_wait(const dlock__net *n, void *buf, size_t cap,
                          int64_t spin_us, int *caught, int *err) {
  assert(n->blocking_reads > 0);
  *caught = 0;
  if (spin_us > 0 && may_spin()) {
    /* A reply that comes within a few tens of us is taken without the
     * sleep and the wake-up, which cost a thread about as much again on
     * an idle machine (more on a virtual one). */
    int64_t end = dlock__now_us() + spin_us;
    ssize_t r;
    do
      r = recv(n->fd, buf, cap, MSG_DONTWAIT);
    while (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) &&
           dlock__now_us() < end);
    int e = errno;
    atomic_fetch_sub_explicit(&spinners, 1, memory_order_relaxed);
    if (r >= 0 || (e != EAGAIN && e != EWOULDBLOCK)) {
      *caught = 1;
      *err = r < 0 ? e : 0;
      return (long)r;
    }
  }
  ssize_t r = recv(n->fd, buf, cap, 0);
  *err = r < 0 ? errno : 0;
  return (long)r;
}

int dlock__net_take(dlock__net *n, long r, int err, const void *buf,
                    size_t *got) {
  *got = 0;
  if (n->state != NET_READY)
    return not_ready(n);
  return take_plain(n, r, err, buf, got);
}

int dlock__net_write(dlock__net *n, const void *buf, size_t len, size_t *put) {
  *put = 0;
  if (n->state != NET_READY)
    return not_ready(n);
  if (len == 0)
    return 0;
  if (n->ssl != NULL)
    return dlock__tls_write(n, buf, len, put);
  long w = dlock__net_send(n, buf, len);
  if (w >= 0) {
    *put = (size_t)w;
    return 0;
  }
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
    n->events = POLLOUT;
    return DLOCK__NET_AGAIN;
  }
  if (errno == EPIPE || errno == ECONNRESET)
    return plain_closed(n, errno);
  return dlock__net_fail(n, DLOCK_EIO, "write to %s: %s", n->addr,
                         strerror(errno));
}

int dlock__net_pending(const dlock__net *n) {
  return n->ssl != NULL && n->state == NET_READY && dlock__tls_pending(n);
}

static void net_free(dlock__net *n, int goodbye) {
  if (n == NULL)
    return;
  if (n->ssl != NULL)
    dlock__tls_detach(n, goodbye);
  close_fd(n);
  if (n->addrs != NULL)
    freeaddrinfo(n->addrs);
  dlock__free(n);
}

void dlock__net_close(dlock__net *n) { net_free(n, 1); }

void dlock__net_abandon(dlock__net *n) { net_free(n, 0); }

int dlock__net_wait(dlock__net *n, int64_t deadline_us) {
  for (;;) {
    struct pollfd p = {.fd = n->fd, .events = n->events, .revents = 0};
    int r = poll(&p, 1, dlock__ms_until(deadline_us));
    if (r > 0)
      return 0;
    if (r == 0 && dlock__now_us() >= deadline_us)
      return DLOCK__NET_AGAIN;
    if (r < 0 && errno != EINTR)
      return dlock__net_fail(n, DLOCK_EIO, "poll(%s): %s", n->addr,
                             strerror(errno));
  }
}

int dlock__net_timed_out(dlock__net *n, int64_t budget_us) {
  long long ms = (long long)(budget_us / 1000);
  if (n->state != NET_HANDSHAKE)
    return dlock__net_fail(
        n, DLOCK_EIO, "connect(%s): no answer within %lld ms", n->addr, ms);
  /* A plain Redis port reads a TLS hello as the start of an inline command
   * and waits for its end, which does not come. */
  return dlock__net_fail(n, DLOCK_EIO,
                         "TLS with %s: no answer to the handshake within %lld "
                         "ms (a plain port, not TLS? it needs a redis:// URL)",
                         n->addr, ms);
}

int dlock__net_connect(const dlock__endpoint *ep, const dlock__tls *tls,
                       int64_t deadline_us, dlock__net **out) {
  *out = NULL;
  int64_t budget_us = deadline_us - dlock__now_us();
  dlock__net *n;
  int rc = dlock__net_start(ep, tls, &n);
  if (rc != 0)
    return rc;
  while ((rc = dlock__net_step(n)) == DLOCK__NET_AGAIN) {
    rc = dlock__net_wait(n, deadline_us);
    if (rc == DLOCK__NET_AGAIN)
      rc = dlock__net_timed_out(n, budget_us);
    if (rc != 0)
      break;
  }
  if (rc != 0) {
    dlock__net_close(n);
    return rc;
  }
  *out = n;
  return 0;
}
