/*
 * Transports: a byte stream to one server over TCP (IPv4 or IPv6), a unix
 * socket, or TLS over TCP, behind one small interface. dlock owns the
 * socket; what travels on it (RESP, formatted and parsed by hiredis) is the
 * caller's business.
 *
 * Every call is non-blocking. Connecting is a state machine that
 * dlock__net_step() drives: it returns 0 once the stream is ready for
 * reads and writes, DLOCK__NET_AGAIN when it must wait until the socket
 * dlock__net_fd() is ready for dlock__net_events() (POLLIN or POLLOUT), or
 * a negative DLOCK_E* code. Reads and writes follow the same rule. Nothing
 * here sleeps or polls except dlock__net_wait() and dlock__net_connect(),
 * the blocking conveniences built on the rest, which stop at a deadline.
 *
 * TLS: a read or a write may need the other readiness (a TLS record must
 * be read before more can be written, or the reverse); dlock__net_events()
 * says which after each DLOCK__NET_AGAIN. A TLS stream may also hold bytes
 * already decrypted that poll() cannot see: read until DLOCK__NET_AGAIN
 * before polling for more.
 *
 * Errors name the server ("TLS with 127.0.0.1:6380: ..."). The detail is
 * recorded for the calling thread (dlock_last_error()) and kept in the
 * transport (dlock__net_error()), so that a thread other than the one that
 * drove it can report it. After an error the transport can only be closed.
 *
 * A transport is used by one thread at a time.
 */
#ifndef DLOCK_NET_H
#define DLOCK_NET_H

#include <stddef.h>
#include <stdint.h>

#include "url.h"

struct addrinfo;

/* "Wait for dlock__net_events() on dlock__net_fd(), then call again." */
#define DLOCK__NET_AGAIN 1

typedef struct dlock__net dlock__net;

/*
 * TLS settings, as dlock_options_t has them. The strings are read (the
 * files loaded) by dlock__tls_new and not kept.
 */
typedef struct dlock__tls_cfg {
  const char *ca_file;     /* PEM CA certificates; NULL: see ca_dir */
  const char *ca_dir;      /* hashed CA directory; both NULL: system's */
  const char *cert_file;   /* client certificate chain (PEM) or NULL */
  const char *key_file;    /* its private key (PEM); with cert_file */
  const char *server_name; /* SNI and verified name; NULL: the host */
  int insecure;            /* 1: verify neither chain nor host name */
} dlock__tls_cfg;

/* A loaded TLS configuration (OpenSSL's SSL_CTX and the server name),
 * shared by any number of transports and threads. */
typedef struct dlock__tls dlock__tls;

/*
 * Loads 'cfg' into a new '*out'. Fails with DLOCK_EINVAL naming the file
 * that cannot be read or the certificate and key that do not match, or
 * DLOCK_ENOMEM.
 */
int dlock__tls_new(const dlock__tls_cfg *cfg, dlock__tls **out);

/* Frees 't'. Transports made with it keep what they need. NULL is
 * ignored. */
void dlock__tls_free(dlock__tls *t);

/*
 * Starts connecting to 'ep' (TLS when ep->tls, with 'tls', which must then
 * be given; it must outlive the transport): resolves the host name (which
 * is the one step that may block, on DNS) and starts a non-blocking
 * connect on a close-on-exec socket. On 0, '*out' is the transport, to be
 * driven with dlock__net_step(). Fails with DLOCK_EIO (no address, no
 * socket), DLOCK_EINVAL or DLOCK_ENOMEM.
 */
int dlock__net_start(const dlock__endpoint *ep, const dlock__tls *tls,
                     dlock__net **out);

/*
 * Resolving apart, so that a caller can do it without holding a lock
 * others need: dlock__net_resolve looks up a TCP endpoint's host (NULL for
 * a unix socket), blocking on DNS; dlock__net_start_at starts as
 * dlock__net_start does with those addresses (NULL: resolves itself),
 * taking them in every case. DLOCK_EIO or DLOCK_ENOMEM.
 */
int dlock__net_resolve(const dlock__endpoint *ep, struct addrinfo **out);
int dlock__net_start_at(const dlock__endpoint *ep, const dlock__tls *tls,
                        struct addrinfo *addrs, dlock__net **out);
void dlock__net_addrs_free(struct addrinfo *addrs);

/* getaddrinfo, replaceable by tests (a resolver that takes its time). */
extern int (*dlock__net_getaddrinfo)(const char *, const char *,
                                     const struct addrinfo *,
                                     struct addrinfo **);

/*
 * Drives the connection: TCP connect (trying each address of the host in
 * turn), then the TLS handshake. 0 when ready, DLOCK__NET_AGAIN, or:
 *   DLOCK_EIO    the server cannot be reached, or hung up
 *   DLOCK_EAUTH  a certificate was refused, either way: the server's is
 *                not signed by a trusted CA or not for the host name, or
 *                the server refused the client's (or wanted one)
 *   DLOCK_EPROTO the server does not speak TLS (a plain port)
 * A TLS 1.3 server refuses a client certificate only after the client's
 * side of the handshake is done: that refusal comes from the first read.
 */
int dlock__net_step(dlock__net *n);

/* The socket, and what to poll it for after DLOCK__NET_AGAIN. */
int dlock__net_fd(const dlock__net *n);
short dlock__net_events(const dlock__net *n);

/*
 * Reads up to 'cap' bytes into 'buf'; on 0, '*got' > 0 bytes came.
 * DLOCK__NET_AGAIN, or DLOCK_EIO (the server closed the connection, or an
 * error), DLOCK_EAUTH (a TLS server refused the client certificate) or
 * DLOCK_EPROTO (TLS from a server reached with a plain URL, or the
 * reverse).
 */
int dlock__net_read(dlock__net *n, void *buf, size_t cap, size_t *got);

/*
 * Blocking reads, for a thread that has nothing to do but wait for the
 * server's next bytes: a recv() that sleeps until they come costs one
 * system call where poll() and then recv() cost two, a round trip's worth
 * of CPU for a lone caller. dlock__net_block_reads makes the socket of a
 * ready plain stream blocking, with reads that give up after 'slice_ms'
 * (SO_RCVTIMEO); every other read and write on it still never waits.
 * 0, or -1 when the stream cannot (TLS, not ready, a failed setsockopt or
 * fcntl: poll() then). Asked again, it answers as the first time.
 *
 * dlock__net_recv_wait is that recv(), after first looking without
 * waiting for up to 'spin_us' (0: not at all; see spin_us in dlock.h),
 * '*caught' set when what it returns came during that look: up to 'cap'
 * bytes, recv()'s result,
 * and its errno in '*err'. It touches nothing of 'n' but the socket, so
 * another thread may hold whatever guards 'n' meanwhile, as long as the
 * socket stays open; shutting it down ends the wait. Then
 * dlock__net_take, with that guard held again, makes of the result what
 * dlock__net_read makes of its own: 0 with '*got' > 0 bytes in 'buf',
 * DLOCK__NET_AGAIN when the slice passed first, or an error.
 */
int dlock__net_block_reads(dlock__net *n, int64_t slice_ms);
long dlock__net_recv_wait(const dlock__net *n, void *buf, size_t cap,
                          int64_t spin_us, int *caught, int *err);
int dlock__net_take(dlock__net *n, long r, int err, const void *buf,
                    size_t *got);

/*
 * Writes up to 'len' bytes of 'buf'; on 0, '*put' > 0 of them went. Never
 * raises SIGPIPE. After DLOCK__NET_AGAIN, call it again with the same bytes
 * (they may have moved in memory). Codes as dlock__net_read.
 */
int dlock__net_write(dlock__net *n, const void *buf, size_t len, size_t *put);

/* The detail of the transport's error, "" when none. */
const char *dlock__net_error(const dlock__net *n);

/* "host:port", "[v6]:port" or the socket path: how errors name it. */
const char *dlock__net_addr(const dlock__net *n);

/* 1 when the stream is TLS. */
int dlock__net_is_tls(const dlock__net *n);

/* 1 when a read would return bytes without waiting: TLS holds them,
 * received and not yet returned, where poll() cannot see them. */
int dlock__net_pending(const dlock__net *n);

/*
 * Closes the connection (saying goodbye to a TLS peer, without waiting for
 * its answer) and frees 'n'. NULL is ignored.
 */
void dlock__net_close(dlock__net *n);

/* In a child of fork(): frees 'n' and closes this process's copy of the
 * socket without sending anything (the parent's connection goes on, and a
 * TLS goodbye would end it). NULL is ignored. */
void dlock__net_abandon(dlock__net *n);

/*
 * Waits until the socket is ready for dlock__net_events() or until
 * 'deadline_us' (CLOCK_MONOTONIC). 0 when ready, DLOCK__NET_AGAIN when the
 * deadline passed, DLOCK_EIO when poll() failed.
 */
int dlock__net_wait(dlock__net *n, int64_t deadline_us);

/*
 * Fails a connect that ran out of time with DLOCK_EIO, saying what it was
 * waiting for (and, for a TLS handshake, that the port may be a plain one);
 * 'budget_us' is the time it had, for the message.
 */
int dlock__net_timed_out(dlock__net *n, int64_t budget_us);

/*
 * dlock__net_start and dlock__net_step until ready or 'deadline_us'. On 0,
 * '*out' is a ready transport. A deadline that passes is DLOCK_EIO saying
 * which step had no answer (and, for a TLS handshake, that the port may be
 * a plain one).
 */
int dlock__net_connect(const dlock__endpoint *ep, const dlock__tls *tls,
                       int64_t deadline_us, dlock__net **out);

#endif
