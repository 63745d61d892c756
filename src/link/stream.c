/*
 * RESP streams over the transports, and the handshake every connection
 * starts with (see stream.h).
 */
#include "link/stream.h"

#include "alloc.h"
#include "error.h"
#include "monotime.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>

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
  int len = redisFormatCommandArgv(&cmd, argc, argv, lens);
  if (len < 0)
    return dlock__fail(DLOCK_ENOMEM, "out of memory formatting %s", argv[0]);
  int rc = dlock__stream_append(s, cmd, (size_t)len);
  redisFreeCommand(cmd);
  return rc;
}

long dlock__stream_write(dlock__stream *s, const char *buf, size_t len) {
  size_t put = 0;
  int rc = dlock__net_write(s->net, buf, len, &put);
  if (rc == 0)
    return (long)put;
  return rc == DLOCK__NET_AGAIN ? 0 : rc;
}

int dlock__stream_flush(dlock__stream *s, int *done) {
  while (sdslen(s->obuf) > 0) {
    long n = dlock__stream_write(s, s->obuf, sdslen(s->obuf));
    if (n < 0)
      return (int)n;
    if (n == 0)
      break;
    sdsrange(s->obuf, n, -1);
  }
  *done = sdslen(s->obuf) == 0;
  return 0;
}

int dlock__stream_read(dlock__stream *s) {
  char buf[READ_CHUNK];
  for (;;) {
    size_t got = 0;
    int rc = dlock__net_read(s->net, buf, sizeof(buf), &got);
    if (rc == DLOCK__NET_AGAIN)
      return 0;
    if (rc != 0)
      return rc;
    if (redisReaderFeed(s->reader, buf, got) != REDIS_OK)
      return dlock__fail(DLOCK_ENOMEM, "out of memory reading a reply");
    /* A short read emptied the socket, as one read() did for hiredis; only
     * bytes that TLS holds, invisible to poll(), are worth another. */
    if (got < sizeof(buf) && !dlock__net_pending(s->net))
      return 0;
  }
}

int dlock__stream_reply(dlock__stream *s, void **reply) {
  *reply = NULL;
  if (redisReaderGetReply(s->reader, reply) != REDIS_OK)
    return dlock__fail(DLOCK_EPROTO, "protocol error: %s",
                       dlock__stream_proto_error(s));
  return 0;
}

const char *dlock__stream_proto_error(const dlock__stream *s) {
  return s->reader->err ? s->reader->errstr : "";
}

static void stream_free(dlock__stream *s, int goodbye) {
  if (s == NULL)
    return;
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

/*
 * Waits until the socket is ready for 'events' or 'deadline_us' passes. The
 * handshake polls rather than relying on a socket timeout: a socket timeout
 * bounds each read, and a server that sends one byte at a time restarts it
 * with every byte. 1 when ready, 0 at the deadline, -1 on error (errno).
 */
static int wait_fd(int fd, short events, int64_t deadline_us) {
  for (;;) {
    struct pollfd p = {.fd = fd, .events = events, .revents = 0};
    int n = poll(&p, 1, dlock__ms_until(deadline_us));
    if (n > 0)
      return 1;
    if (n == 0 && dlock__now_us() >= deadline_us)
      return 0;
    if (n < 0 && errno != EINTR)
      return -1;
  }
}

/* Sends one command and reads its whole reply by 'deadline_us', into
 * '*out' (the caller's; an error reply too). 'budget_ms' is the time it
 * had, for the message. */
static int roundtrip(dlock__stream *s, const char *addr, int64_t deadline_us,
                     int64_t budget_ms, int argc, const char **argv,
                     redisReply **out) {
  void *reply = NULL;
  int done = 0;
  *out = NULL;
  int rc = dlock__stream_append_argv(s, argc, argv, NULL);
  while (rc == 0) {
    rc = dlock__stream_flush(s, &done);
    if (rc != 0 || done)
      break;
    int w = wait_fd(dlock__stream_fd(s), POLLOUT, deadline_us);
    if (w <= 0)
      goto no_answer;
  }
  while (rc == 0) {
    if (dlock__stream_reply(s, &reply) != 0)
      return dlock__fail(DLOCK_EPROTO, "%s %s: not a Redis server? (%s)",
                         argv[0], addr, dlock__stream_proto_error(s));
    if (reply != NULL)
      break;
    int w = wait_fd(dlock__stream_fd(s), POLLIN, deadline_us);
    if (w <= 0)
      goto no_answer;
    rc = dlock__stream_read(s);
  }
  if (rc == 0)
    *out = reply;
  return rc;
no_answer:
  return dlock__fail(DLOCK_EIO, "%s %s: no complete answer within %lld ms",
                     argv[0], addr, (long long)budget_ms);
}

int dlock__stream_command(dlock__stream *s, const char *addr,
                          int64_t deadline_us, int argc, const char **argv,
                          redisReply **out) {
  int64_t budget_ms = (deadline_us - dlock__now_us() + 999) / 1000;
  return roundtrip(s, addr, deadline_us, budget_ms, argc, argv, out);
}

/* Runs one handshake command, all of it (sending and the whole reply) by
 * 'deadline_us', and checks that it did not fail. 'budget_ms' is the time
 * the handshake had, for the message. */
static int handshake(dlock__stream *s, const char *addr, int64_t deadline_us,
                     int64_t budget_ms, int argc, const char **argv,
                     const char *expect) {
  redisReply *r;
  int rc = roundtrip(s, addr, deadline_us, budget_ms, argc, argv, &r);
  if (rc != 0)
    return rc;
  if (r->type == REDIS_REPLY_ERROR) {
    rc = dlock__fail_reply(r->str, r->len);
    /* Some servers say "ERR" to AUTH when no password is configured; to the
     * user that is still a refused password. */
    if (strcmp(argv[0], "AUTH") == 0)
      rc = dlock__fail(DLOCK_EAUTH, "AUTH refused by %s: %.200s", addr, r->str);
  } else if (expect != NULL &&
             (r->type != REDIS_REPLY_STATUS || strcmp(r->str, expect) != 0)) {
    rc = dlock__fail(DLOCK_EPROTO, "%s %s: unexpected reply, not Redis?",
                     argv[0], addr);
  }
  freeReplyObject(r);
  return rc;
}

static int authenticate(dlock__stream *s, const dlock__endpoint *ep,
                        const char *addr, int64_t deadline_us,
                        int64_t budget_ms) {
  const char *argv[3] = {"AUTH", ep->user, ep->pass};
  if (ep->pass == NULL && ep->user == NULL)
    return 0;
  if (ep->user != NULL)
    return handshake(s, addr, deadline_us, budget_ms, 3, argv, NULL);
  argv[1] = ep->pass;
  return handshake(s, addr, deadline_us, budget_ms, 2, argv, NULL);
}

int dlock__stream_open(const dlock__endpoint *ep, const dlock__tls *tls,
                       int64_t connect_timeout_ms, int64_t command_timeout_ms,
                       int64_t deadline_us, dlock__stream **out) {
  *out = NULL;
  char addr[160];
  dlock__endpoint_describe(ep, addr, sizeof(addr));
  dlock__stream *s = dlock__calloc(1, sizeof(*s));
  if (s == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory connecting to %s", addr);
  s->reader = redisReaderCreate();
  s->obuf = sdsempty();
  if (s->reader == NULL || s->obuf == NULL) {
    dlock__stream_free(s);
    return dlock__fail(DLOCK_ENOMEM, "out of memory connecting to %s", addr);
  }
  int64_t connect_by = dlock__deadline_ms(connect_timeout_ms);
  if (connect_by > deadline_us)
    connect_by = deadline_us;
  int rc = dlock__net_connect(ep, tls, connect_by, &s->net);
  /* The whole handshake (AUTH, SELECT, PING) shares one deadline: a
   * command timeout from now, or the caller's own deadline if sooner. */
  int64_t now = dlock__now_us();
  int64_t hs_deadline = dlock__deadline_ms(command_timeout_ms);
  if (hs_deadline > deadline_us)
    hs_deadline = deadline_us;
  int64_t budget_ms = (hs_deadline - now + 999) / 1000;
  if (rc == 0)
    rc = authenticate(s, ep, addr, hs_deadline, budget_ms);
  if (rc == 0 && ep->db != 0) {
    char db[16];
    snprintf(db, sizeof(db), "%d", ep->db);
    const char *argv[2] = {"SELECT", db};
    rc = handshake(s, addr, hs_deadline, budget_ms, 2, argv, "OK");
  }
  if (rc == 0) {
    const char *argv[1] = {"PING"};
    rc = handshake(s, addr, hs_deadline, budget_ms, 1, argv, "PONG");
  }
  if (rc != 0) {
    /* The stream never carried anything the server must see end. */
    dlock__stream_abandon(s);
    return rc;
  }
  *out = s;
  return 0;
}
