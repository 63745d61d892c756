/*
 * RESP streams over the transports, and the handshake every connection
 * starts with (see stream.h).
 */
#include "link/stream.h"

#include "alloc.h"
#include "error.h"
#include "monotime.h"
#include "proto/format.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* As much as one TLS record holds: one read takes a whole record. */
#define READ_CHUNK 16384

int dlock__stream_fd(const dlock__stream *s) { return dlock__net_fd(s->net); }

int dlock__stream_append(dlock__stream *s, const char *cmd, size_t len) {
  sds grown = sdscatlen(s->obuf, cmd, len);
  if (grown == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory queueing a command");
  s->obuf = grown;
  return 0;
}

int dlock__stream_append_argv(dlock__stream *s, int argc, const char **argv,
                              const size_t *lens) {
  char *cmd;
  int len = dlock__format_argv(&cmd, argc, argv, lens);
  if (len < 0)
    return dlock__fail(DLOCK_ENOMEM, "out of memory formatting %s", argv[0]);
  int rc = dlock__stream_append(s, cmd, (size_t)len);
  dlock__format_free(cmd);
  return rc;
}

long dlock__stream_write(dlock__stream *s, const char *buf, size_t len) {
  size_t put = 0;
  int rc = dlock__net_write(s->net, buf, len, &put);
  if (rc == 0)
    return (long)put;
  return rc == DLOCK__NET_AGAIN ? 0 : rc;
}

/* Writes 'buf' until it is empty or the socket takes no more, dropping
 * what went out from its front: 0, or a negative code. */
static int write_buf(dlock__stream *s, sds buf) {
  while (sdslen(buf) > 0) {
    long n = dlock__stream_write(s, buf, sdslen(buf));
    if (n < 0)
      return (int)n;
    if (n == 0)
      break;
    sdsrange(buf, n, -1);
  }
  return 0;
}

int dlock__stream_flush(dlock__stream *s, int *done) {
  int rc = write_buf(s, s->obuf);
  if (rc != 0)
    return rc;
  *done = sdslen(s->obuf) == 0;
  return 0;
}

/* Gives the reader what a read brought: 'rc' is the read's result, 'got'
 * its bytes in 'buf'. 1 when they were fed, 0 when nothing came, or a
 * negative code. */
static int feed(dlock__stream *s, int rc, const char *buf, size_t got) {
  if (rc == DLOCK__NET_AGAIN)
    return 0;
  if (rc != 0)
    return rc;
  if (redisReaderFeed(s->reader, buf, got) != REDIS_OK)
    return dlock__fail(DLOCK_ENOMEM, "out of memory reading a reply");
  return 1;
}

int dlock__stream_read(dlock__stream *s) {
  char buf[READ_CHUNK];
  for (;;) {
    size_t got = 0;
    int rc = dlock__net_read(s->net, buf, sizeof(buf), &got);
    if ((rc = feed(s, rc, buf, got)) <= 0)
      return rc;
    /* A short read emptied the socket, as one read() did for hiredis; only
     * bytes that TLS holds, invisible to poll(), are worth another. */
    if (got < sizeof(buf) && !dlock__net_pending(s->net))
      return 0;
  }
}

int dlock__stream_block_reads(dlock__stream *s, int64_t slice_ms) {
  return s->hs == NULL ? dlock__net_block_reads(s->net, slice_ms) : -1;
}

long dlock__stream_recv_wait(const dlock__stream *s, char *buf, size_t cap,
                             int64_t spin_us, int *caught, int *err) {
  return dlock__net_recv_wait(s->net, buf, cap, spin_us, caught, err);
}

int dlock__stream_take(dlock__stream *s, long r, int err, const char *buf,
                       size_t cap) {
  size_t got = 0;
  int rc = dlock__net_take(s->net, r, err, buf, &got);
  if ((rc = feed(s, rc, buf, got)) <= 0)
    return rc;
  /* A full buffer may have left more behind; a short one emptied the
   * socket, as in dlock__stream_read. */
  return got == cap ? dlock__stream_read(s) : 0;
}

int dlock__stream_reply(dlock__stream *s, void **reply) {
  *reply = NULL;
  if (redisReaderGetReply(s->reader, reply) != REDIS_OK)
    return dlock__fail(DLOCK_EPROTO, "protocol error: %s",
                       dlock__stream_proto_error(s));
  return 0;
}

int dlock__stream_read_each(dlock__stream *s,
                            int (*fn)(void *arg, const redisReply *reply),
                            void *arg) {
  int rc = dlock__stream_read(s);
  while (rc == 0) {
    void *reply = NULL;
    rc = dlock__stream_reply(s, &reply);
    if (rc != 0 || reply == NULL)
      break;
    rc = fn(arg, reply);
    freeReplyObject(reply);
  }
  return rc;
}

const char *dlock__stream_proto_error(const dlock__stream *s) {
  return s->reader->err ? s->reader->errstr : "";
}

static void hs_free(struct dlock__handshake *hs);

static void stream_free(dlock__stream *s, int goodbye) {
  if (s == NULL)
    return;
  hs_free(s->hs);
  if (goodbye)
    dlock__net_close(s->net);
  else
    dlock__net_abandon(s->net);
  if (s->reader != NULL)
    redisReaderFree(s->reader);
  sdsfree(s->obuf);
  dlock__free(s);
}

void dlock__stream_free(dlock__stream *s) { stream_free(s, 1); }

void dlock__stream_abandon(dlock__stream *s) { stream_free(s, 0); }

/* ---- the handshake ------------------------------------------------------- */

/* At most AUTH, SELECT and PING. */
#define HS_MAX 3

/*
 * A handshake under way: the transport connecting (phase 0), then the
 * commands every connection starts with, sent in one go and answered in
 * order (phase 1). Sending them together costs one round trip; a refused
 * AUTH is still the reply that is reported, since it is the first.
 */
struct dlock__handshake {
  char addr[160];
  int phase;
  int64_t command_timeout_ms;
  int64_t deadline_us; /* of the phase */
  int64_t budget_us;   /* what the phase had, for the message */
  sds out;             /* handshake commands not written yet */
  int n, next;         /* commands, and the next to be answered */
  const char *name[HS_MAX];
  const char *expect[HS_MAX]; /* the status reply wanted, or NULL: any */
};

static void hs_free(struct dlock__handshake *hs) {
  if (hs == NULL)
    return;
  sdsfree(hs->out);
  dlock__free(hs);
}

static int hs_add(struct dlock__handshake *hs, int argc, const char **argv,
                  const char *expect) {
  char *cmd;
  int len = dlock__format_argv(&cmd, argc, argv, NULL);
  if (len < 0)
    return dlock__fail(DLOCK_ENOMEM, "out of memory formatting %s", argv[0]);
  sds grown = sdscatlen(hs->out, cmd, (size_t)len);
  dlock__format_free(cmd);
  if (grown == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory formatting %s", argv[0]);
  hs->out = grown;
  hs->name[hs->n] = argv[0];
  hs->expect[hs->n] = expect;
  hs->n++;
  return 0;
}

/* Checks the answer to handshake command 'i'. */
static int hs_check(struct dlock__handshake *hs, int i, redisReply *r) {
  int rc = 0;
  if (r->type == REDIS_REPLY_ERROR) {
    rc = dlock__fail_reply(r->str, r->len);
    /* Some servers say "ERR" to AUTH when no password is configured; to the
     * user that is still a refused password. */
    if (strcmp(hs->name[i], "AUTH") == 0)
      rc = dlock__fail(DLOCK_EAUTH, "AUTH refused by %s: %.200s", hs->addr,
                       r->str);
  } else if (hs->expect[i] != NULL && (r->type != REDIS_REPLY_STATUS ||
                                       strcmp(r->str, hs->expect[i]) != 0)) {
    rc = dlock__fail(DLOCK_EPROTO, "%s %s: unexpected reply, not Redis?",
                     hs->name[i], hs->addr);
  }
  return rc;
}

int dlock__stream_start(const dlock__endpoint *ep, const dlock__tls *tls,
                        int64_t connect_timeout_ms, int64_t command_timeout_ms,
                        dlock__stream **out) {
  return dlock__stream_start_at(ep, tls, NULL, connect_timeout_ms,
                                command_timeout_ms, out);
}

int dlock__stream_start_at(const dlock__endpoint *ep, const dlock__tls *tls,
                           struct addrinfo *addrs, int64_t connect_timeout_ms,
                           int64_t command_timeout_ms, dlock__stream **out) {
  *out = NULL;
  dlock__stream *s = dlock__calloc(1, sizeof(*s));
  struct dlock__handshake *hs = dlock__calloc(1, sizeof(*hs));
  char addr[160];
  dlock__endpoint_describe(ep, addr, sizeof(addr));
  if (s == NULL || hs == NULL) {
    dlock__net_addrs_free(addrs);
    dlock__free(s);
    dlock__free(hs);
    return dlock__fail(DLOCK_ENOMEM, "out of memory connecting to %s", addr);
  }
  s->hs = hs;
  memcpy(hs->addr, addr, sizeof(addr));
  hs->command_timeout_ms = command_timeout_ms;
  hs->budget_us = connect_timeout_ms * 1000;
  hs->deadline_us = dlock__deadline_ms(connect_timeout_ms);
  s->reader = redisReaderCreate();
  s->obuf = sdsempty();
  hs->out = sdsempty();
  int rc = 0;
  if (s->reader == NULL || s->obuf == NULL || hs->out == NULL)
    rc = dlock__fail(DLOCK_ENOMEM, "out of memory connecting to %s", addr);
  if (rc == 0 && ep->user != NULL) {
    const char *argv[3] = {"AUTH", ep->user, ep->pass ? ep->pass : ""};
    rc = hs_add(hs, 3, argv, NULL);
  } else if (rc == 0 && ep->pass != NULL) {
    const char *argv[2] = {"AUTH", ep->pass};
    rc = hs_add(hs, 2, argv, NULL);
  }
  if (rc == 0 && ep->db != 0) {
    char db[16];
    snprintf(db, sizeof(db), "%d", ep->db);
    const char *argv[2] = {"SELECT", db};
    rc = hs_add(hs, 2, argv, "OK");
  }
  if (rc == 0) {
    const char *argv[1] = {"PING"};
    rc = hs_add(hs, 1, argv, "PONG");
  }
  if (rc == 0)
    rc = dlock__net_start_at(ep, tls, addrs, &s->net);
  else
    dlock__net_addrs_free(addrs);
  if (rc != 0) {
    dlock__stream_abandon(s);
    return rc;
  }
  *out = s;
  return 0;
}

/* The handshake's answer did not come by the phase's deadline. */
static int hs_timed_out(dlock__stream *s) {
  struct dlock__handshake *hs = s->hs;
  if (hs->phase == 0)
    return dlock__net_timed_out(s->net, hs->budget_us);
  return dlock__fail(DLOCK_EIO, "%s %s: no complete answer within %lld ms",
                     hs->name[hs->next], hs->addr,
                     (long long)((hs->budget_us + 999) / 1000));
}

int dlock__stream_overdue(dlock__stream *s, int64_t waited_us) {
  struct dlock__handshake *hs = s->hs;
  if (hs == NULL)
    return 0;
  if (hs->phase == 0)
    return dlock__net_timed_out(s->net, waited_us);
  return dlock__fail(DLOCK_EIO, "%s %s: no complete answer within %lld ms",
                     hs->name[hs->next], hs->addr,
                     (long long)((waited_us + 999) / 1000));
}

int dlock__stream_step(dlock__stream *s) {
  struct dlock__handshake *hs = s->hs;
  if (hs == NULL)
    return 0;
  int rc;
  if (hs->phase == 0) {
    rc = dlock__net_step(s->net);
    if (rc == DLOCK__NET_AGAIN)
      return dlock__now_us() >= hs->deadline_us ? hs_timed_out(s) : rc;
    if (rc != 0)
      return rc;
    /* The commands share one deadline, however the server paces its bytes
     * (a socket timeout would restart with every byte). */
    hs->phase = 1;
    hs->budget_us = hs->command_timeout_ms * 1000;
    hs->deadline_us = dlock__deadline_ms(hs->command_timeout_ms);
  }
  rc = write_buf(s, hs->out);
  if (rc != 0)
    return rc;
  rc = dlock__stream_read(s);
  if (rc != 0)
    return rc;
  while (hs->next < hs->n) {
    void *reply = NULL;
    if (dlock__stream_reply(s, &reply) != 0)
      return dlock__fail(DLOCK_EPROTO, "%s %s: not a Redis server? (%s)",
                         hs->name[hs->next], hs->addr,
                         dlock__stream_proto_error(s));
    if (reply == NULL)
      break;
    rc = hs_check(hs, hs->next, reply);
    freeReplyObject(reply);
    if (rc != 0)
      return rc;
    hs->next++;
  }
  if (hs->next < hs->n)
    return dlock__now_us() >= hs->deadline_us ? hs_timed_out(s)
                                              : DLOCK__NET_AGAIN;
  hs_free(hs);
  s->hs = NULL;
  return 0;
}

short dlock__stream_events(const dlock__stream *s) {
  if (s->hs == NULL || s->hs->phase == 0)
    return dlock__net_events(s->net);
  return (short)(POLLIN | (sdslen(s->hs->out) > 0 ? POLLOUT : 0));
}

int64_t dlock__stream_deadline(const dlock__stream *s) {
  return s->hs != NULL ? s->hs->deadline_us : INT64_MAX;
}

int dlock__stream_ready(const dlock__stream *s) { return s->hs == NULL; }

int dlock__stream_open_until(const dlock__endpoint *ep, const dlock__tls *tls,
                             int64_t connect_timeout_ms,
                             int64_t command_timeout_ms, int64_t deadline_us,
                             int cancel_fd, int (*canceled)(void *), void *arg,
                             dlock__stream **out) {
  dlock__stream *s;
  int rc =
      dlock__stream_start(ep, tls, connect_timeout_ms, command_timeout_ms, &s);
  while (rc == 0 && (rc = dlock__stream_step(s)) == DLOCK__NET_AGAIN) {
    rc = 0;
    int64_t until = dlock__stream_deadline(s);
    if (deadline_us < until)
      until = deadline_us;
    if (dlock__now_us() >= deadline_us) {
      char addr[160];
      dlock__endpoint_describe(ep, addr, sizeof(addr));
      rc = dlock__fail(DLOCK_EIO, "connect %s: not ready in the time left",
                       addr);
      break;
    }
    struct pollfd p[2] = {
        {.fd = dlock__stream_fd(s), .events = dlock__stream_events(s)},
        {.fd = cancel_fd, .events = POLLIN}};
    int n = poll(p, 2, dlock__ms_until(until));
    if (n < 0 && errno != EINTR)
      rc = dlock__fail(DLOCK_EIO, "poll: %s", strerror(errno));
    else if (n > 0 && (p[1].revents & POLLIN)) {
      char buf[64];
      while (read(cancel_fd, buf, sizeof(buf)) > 0) {
      }
      if (canceled != NULL && canceled(arg))
        rc = dlock__fail(DLOCK_ECANCELED, "client is shutting down");
    }
  }
  if (rc != 0) {
    /* The stream never carried anything the server must see end. */
    dlock__stream_abandon(s);
    return rc;
  }
  *out = s;
  return 0;
}

int dlock__stream_open(const dlock__endpoint *ep, const dlock__tls *tls,
                       int64_t connect_timeout_ms, int64_t command_timeout_ms,
                       int cancel_fd, int (*canceled)(void *), void *arg,
                       dlock__stream **out) {
  return dlock__stream_open_until(ep, tls, connect_timeout_ms,
                                  command_timeout_ms, INT64_MAX, cancel_fd,
                                  canceled, arg, out);
}

/* ---- one command at a time ---------------------------------------------- */

/*
 * Waits until the socket is ready for 'events' or 'deadline_us' passes, or
 * 'cancel' (NULL: none) says stop. It polls rather than relying on a
 * socket timeout: a socket timeout bounds each read, and a server that
 * sends one byte at a time restarts it with every byte. 1 when ready, 0 at
 * the deadline, -1 on error (errno), -2 when canceled.
 */
static int wait_fd(int fd, short events, int64_t deadline_us,
                   const dlock__cancel *cancel) {
  int cfd = cancel != NULL ? cancel->fd : -1;
  for (;;) {
    struct pollfd p[2] = {{.fd = fd, .events = events, .revents = 0},
                          {.fd = cfd, .events = POLLIN, .revents = 0}};
    int n = poll(p, cfd >= 0 ? 2 : 1, dlock__ms_until(deadline_us));
    if (n > 0 && cfd >= 0 && (p[1].revents & POLLIN)) {
      char buf[64];
      while (read(cfd, buf, sizeof(buf)) > 0) {
      }
      if (cancel->canceled != NULL && cancel->canceled(cancel->arg))
        return -2;
    }
    if (n > 0 && p[0].revents != 0)
      return 1;
    if (n == 0 && dlock__now_us() >= deadline_us)
      return 0;
    if (n < 0 && errno != EINTR)
      return -1;
  }
}

/* wait_fd on the socket of 's' for the command 'cmd' to 'addr', which had
 * 'budget_ms': 0 when ready, else why the command failed. */
static int wait_ready(dlock__stream *s, short events, int64_t deadline_us,
                      const dlock__cancel *cancel, const char *cmd,
                      const char *addr, int64_t budget_ms) {
  int w = wait_fd(dlock__stream_fd(s), events, deadline_us, cancel);
  if (w == -2)
    return dlock__fail(DLOCK_ECANCELED, "client is shutting down");
  if (w <= 0)
    return dlock__fail(DLOCK_EIO, "%s %s: no complete answer within %lld ms",
                       cmd, addr, (long long)budget_ms);
  return 0;
}

/* Sends one command and reads its whole reply by 'deadline_us', into
 * '*out' (the caller's; an error reply too). 'budget_ms' is the time it
 * had, for the message. */
static int roundtrip(dlock__stream *s, const char *addr, int64_t deadline_us,
                     int64_t budget_ms, const dlock__cancel *cancel, int argc,
                     const char **argv, redisReply **out) {
  void *reply = NULL;
  int done = 0;
  *out = NULL;
  int rc = dlock__stream_append_argv(s, argc, argv, NULL);
  while (rc == 0) {
    rc = dlock__stream_flush(s, &done);
    if (rc != 0 || done)
      break;
    rc = wait_ready(s, POLLOUT, deadline_us, cancel, argv[0], addr, budget_ms);
  }
  while (rc == 0) {
    if (dlock__stream_reply(s, &reply) != 0)
      return dlock__fail(DLOCK_EPROTO, "%s %s: not a Redis server? (%s)",
                         argv[0], addr, dlock__stream_proto_error(s));
    if (reply != NULL)
      break;
    rc = wait_ready(s, POLLIN, deadline_us, cancel, argv[0], addr, budget_ms);
    if (rc == 0)
      rc = dlock__stream_read(s);
  }
  if (rc == 0)
    *out = reply;
  return rc;
}

int dlock__stream_command_cancel(dlock__stream *s, const char *addr,
                                 int64_t deadline_us,
                                 const dlock__cancel *cancel, int argc,
                                 const char **argv, redisReply **out) {
  int64_t budget_ms = (deadline_us - dlock__now_us() + 999) / 1000;
  return roundtrip(s, addr, deadline_us, budget_ms, cancel, argc, argv, out);
}

int dlock__stream_command(dlock__stream *s, const char *addr,
                          int64_t deadline_us, int argc, const char **argv,
                          redisReply **out) {
  return dlock__stream_command_cancel(s, addr, deadline_us, NULL, argc, argv,
                                      out);
}
