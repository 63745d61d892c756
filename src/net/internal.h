/*
 * What the socket half (net.c) and the TLS half (tls.c) of a transport
 * share. Nothing outside src/net includes this.
 */
#ifndef DLOCK_NET_INTERNAL_H
#define DLOCK_NET_INTERNAL_H

#include "net/net.h"

#include <netdb.h>

#include "error.h"

enum {
  NET_CONNECTING, /* TCP or unix connect in progress */
  NET_HANDSHAKE,  /* TLS handshake in progress */
  NET_READY,
  NET_FAILED /* after any error: only dlock__net_close */
};

struct dlock__net {
  int fd;
  int state;
  int code;     /* the error's DLOCK_E* code once NET_FAILED */
  short events; /* what the last DLOCK__NET_AGAIN waits for */
  int is_unix;
  struct addrinfo *addrs; /* the host's addresses; 'next' is tried next */
  struct addrinfo *next;
  int connect_errno; /* why the last address failed */
  char addr[160];
  char err[320];

  /* What came from the server so far, to tell a TLS server on a plain
   * URL, or a plain server on a TLS one, from other failures. */
  uint64_t received;
  unsigned char first_byte;

  /* dlock__net_block_reads: 1 done, -1 refused (TLS), 0 not asked. */
  int blocking_reads;

  /* TLS: an SSL *, and what its socket calls saw last. */
  void *ssl;
  char tls_name[256]; /* the name sent (SNI) and checked */
  int sock_errno;     /* errno of the last failed send or recv, else 0 */
  int peer_eof;       /* recv saw the end of the stream */
  int tls_fatal;      /* a fatal TLS error: no goodbye */
  int64_t handshake_started_us;
};

/* Records 'code' with a detail in 'n' and for this thread, marks 'n'
 * failed and returns 'code'. */
int dlock__net_fail(dlock__net *n, int code, const char *fmt, ...)
    DLOCK__PRINTF(3, 4);

/* The TLS half. attach makes the SSL object (at start), handshake drives
 * it, read and write move data, pending tells of bytes held inside, detach
 * (with a goodbye or without) frees it. */
int dlock__tls_attach(dlock__net *n, const dlock__tls *t, const char *host);
int dlock__tls_handshake(dlock__net *n);
int dlock__tls_read(dlock__net *n, void *buf, size_t cap, size_t *got);
int dlock__tls_write(dlock__net *n, const void *buf, size_t len, size_t *put);
void dlock__tls_detach(dlock__net *n, int goodbye);
int dlock__tls_pending(const dlock__net *n);

/* The socket calls the TLS half reads and writes through: they record
 * what the server sent first, and never raise SIGPIPE. */
long dlock__net_recv(dlock__net *n, void *buf, size_t cap);
long dlock__net_send(dlock__net *n, const void *buf, size_t len);

#endif
