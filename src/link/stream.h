/*
 * A RESP stream to one server: a transport (src/net) that carries the
 * bytes, hiredis's reader that parses the replies and a buffer of
 * formatted commands still to be written. It takes the place of a hiredis
 * redisContext, whose sockets have no TLS, for the command and pub/sub
 * connections; hiredis remains the protocol (formatting and parsing), and
 * dlock owns the socket.
 *
 * Every call is non-blocking but dlock__stream_open. A stream starts with
 * a handshake (connecting, TLS, then AUTH, SELECT and PING) that
 * dlock__stream_step drives as the socket becomes ready, so that whoever
 * owns the stream can wait for it together with other things (other
 * servers, a wake-up that cancels). A stream is used by one thread at a
 * time (its owner holds a mutex around every call); TLS makes that a must
 * even for a read and a write at once.
 */
#ifndef DLOCK_STREAM_H
#define DLOCK_STREAM_H

#include <hiredis/hiredis.h>
#include <hiredis/sds.h>
#include <stddef.h>
#include <stdint.h>

#include "net/net.h"
#include "url.h"

typedef struct dlock__stream {
  dlock__net *net;
  redisReader *reader;
  /* Formatted commands not written yet; the owner may swap it. While the
   * handshake runs they wait: nothing of the owner's reaches a server
   * before AUTH and SELECT have been answered. */
  sds obuf;
  struct dlock__handshake *hs; /* the handshake under way; NULL: ready */
} dlock__stream;

/*
 * Starts connecting to 'ep' ('tls' for a rediss:// endpoint, else NULL; it
 * must outlive the stream), with the handshake commands queued: the
 * connect (and the TLS handshake) may take 'connect_timeout_ms', the
 * commands after it one 'command_timeout_ms', however the server paces its
 * bytes. Resolving the host name is the one step that may block. On 0,
 * '*out' is a stream to drive with dlock__stream_step. Fails with
 * DLOCK_EIO, DLOCK_EINVAL or DLOCK_ENOMEM.
 */
int dlock__stream_start(const dlock__endpoint *ep, const dlock__tls *tls,
                        int64_t connect_timeout_ms, int64_t command_timeout_ms,
                        dlock__stream **out);

/* The same with the host's addresses resolved already (see
 * dlock__net_resolve; NULL: resolves them), which it takes in every case:
 * then nothing in it blocks. */
int dlock__stream_start_at(const dlock__endpoint *ep, const dlock__tls *tls,
                           struct addrinfo *addrs, int64_t connect_timeout_ms,
                           int64_t command_timeout_ms, dlock__stream **out);

/*
 * Drives the handshake: 0 once the stream is ready (and at once for a
 * ready stream), DLOCK__NET_AGAIN to wait until the socket is ready for
 * dlock__stream_events() or dlock__stream_deadline() passes (then call
 * again: past the deadline it fails), or a negative code: DLOCK_EIO
 * (unreachable, no answer in time), DLOCK_EAUTH (password or certificate
 * refused), DLOCK_EPROTO (not Redis, or TLS on one side only),
 * DLOCK_ENOMEM. After a failure the stream can only be freed.
 */
int dlock__stream_step(dlock__stream *s);

/* The error of a handshake not done after 'waited_us' (an opener's own
 * deadline, before the stream's): as the stream's timeout would say it,
 * naming the server and the step it waits for. DLOCK_EIO or DLOCK_EPROTO;
 * 0 for a ready stream. */
int dlock__stream_overdue(dlock__stream *s, int64_t waited_us);

/* What the handshake waits for, and until when (CLOCK_MONOTONIC us;
 * INT64_MAX once ready). */
short dlock__stream_events(const dlock__stream *s);
int64_t dlock__stream_deadline(const dlock__stream *s);

/* 1 once the handshake is done. */
int dlock__stream_ready(const dlock__stream *s);

/*
 * What ends a wait for a server early: when 'fd' (-1: none) becomes
 * readable it is drained and 'canceled(arg)' asked; 1 ends the wait with
 * DLOCK_ECANCELED.
 */
typedef struct dlock__cancel {
  int fd;
  int (*canceled)(void *arg);
  void *arg;
} dlock__cancel;

/*
 * dlock__stream_start and dlock__stream_step until ready, waiting on the
 * socket and on 'cancel_fd' (-1: none) at once. When 'cancel_fd' becomes
 * readable it is drained and 'canceled(arg)' asked: 1 ends the connect
 * with DLOCK_ECANCELED, at once, whatever the server does. On 0, '*out'
 * is a ready stream; the codes are dlock__stream_step's.
 */
int dlock__stream_open(const dlock__endpoint *ep, const dlock__tls *tls,
                       int64_t connect_timeout_ms, int64_t command_timeout_ms,
                       int cancel_fd, int (*canceled)(void *), void *arg,
                       dlock__stream **out);

/* dlock__stream_open that also gives up with DLOCK_EIO at 'deadline_us'
 * (CLOCK_MONOTONIC), whatever is left of the stream's own timeouts. */
int dlock__stream_open_until(const dlock__endpoint *ep, const dlock__tls *tls,
                             int64_t connect_timeout_ms,
                             int64_t command_timeout_ms, int64_t deadline_us,
                             int cancel_fd, int (*canceled)(void *), void *arg,
                             dlock__stream **out);

/*
 * Runs one command on an idle stream and waits for its whole reply until
 * 'deadline_us', as the handshake does: '*out' is the reply (error replies
 * included), the caller's. 'addr' names the server in messages. DLOCK_EIO
 * when no complete answer came in time, DLOCK_EPROTO for bytes that are
 * not RESP.
 */
int dlock__stream_command(dlock__stream *s, const char *addr,
                          int64_t deadline_us, int argc, const char **argv,
                          redisReply **out);

/* The same, ended early by 'cancel' (NULL: never). */
int dlock__stream_command_cancel(dlock__stream *s, const char *addr,
                                 int64_t deadline_us,
                                 const dlock__cancel *cancel, int argc,
                                 const char **argv, redisReply **out);

/* The socket, to poll; for POLLIN always (see dlock__stream_read). */
int dlock__stream_fd(const dlock__stream *s);

/* Appends a formatted command, or one given as argv ('lens' NULL: C
 * strings), to the output. 0 or DLOCK_ENOMEM. */
int dlock__stream_append(dlock__stream *s, const char *cmd, size_t len);
int dlock__stream_append_argv(dlock__stream *s, int argc, const char **argv,
                              const size_t *lens);

/*
 * Writes as much of 'buf' as the transport takes now. Returns the bytes
 * written (0 when it takes none: poll for POLLOUT), or a negative DLOCK_E*
 * code with the detail recorded. Never raises SIGPIPE.
 */
long dlock__stream_write(dlock__stream *s, const char *buf, size_t len);

/* Writes as much of the output buffer as the transport takes; '*done'
 * when it is empty. 0 or a negative code. */
int dlock__stream_flush(dlock__stream *s, int *done);

/*
 * Reads what the server sent into the reader: everything that can be read
 * without waiting, including bytes TLS holds decrypted, which poll() cannot
 * see. 0 (also when nothing came), or a negative code when the connection
 * is closed or broken, with the detail recorded.
 */
int dlock__stream_read(dlock__stream *s);

/*
 * The same in two halves around a wait that sleeps in recv() rather than
 * in poll() (see dlock__net_block_reads): dlock__stream_block_reads sets a
 * ready plain stream up for it (0, or -1: poll instead), and its owner
 * may then call dlock__stream_recv_wait without holding the stream's
 * guard, then dlock__stream_take with it, which feeds the reader what came
 * and reads whatever else has come without waiting. dlock__stream_take
 * returns 0 (also when the slice passed with nothing) or a negative code,
 * as dlock__stream_read.
 */
int dlock__stream_block_reads(dlock__stream *s, int64_t slice_ms);
long dlock__stream_recv_wait(const dlock__stream *s, char *buf, size_t cap,
                             int64_t spin_us, int *caught, int *err);
int dlock__stream_take(dlock__stream *s, long r, int err, const char *buf,
                       size_t cap);

/* The next complete reply in '*reply' (NULL when none yet), owned by the
 * caller. 0, or DLOCK_EPROTO when the bytes are not RESP. */
int dlock__stream_reply(dlock__stream *s, void **reply);

/* Reads what the server sent (dlock__stream_read) and hands each complete
 * reply to 'fn' with 'arg', freeing it after. 0 when every reply was
 * handed over; a negative code when the connection is closed or broken or
 * the bytes are not RESP; or the first nonzero 'fn' returned, the replies
 * after it left unread. */
int dlock__stream_read_each(dlock__stream *s,
                            int (*fn)(void *arg, const redisReply *reply),
                            void *arg);

/* The reader's description of a protocol error. */
const char *dlock__stream_proto_error(const dlock__stream *s);

/* Closes the stream (a TLS goodbye included) and frees it. NULL ignored. */
void dlock__stream_free(dlock__stream *s);

/* In a child of fork(): frees the stream and closes this process's copy of
 * the socket without sending anything, since the parent's connection goes
 * on. NULL ignored. */
void dlock__stream_abandon(dlock__stream *s);

#endif
