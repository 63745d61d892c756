/*
 * Server addresses: parsing "redis://", "rediss://" (TLS) and "unix://"
 * URLs into an endpoint, and describing an endpoint without its password.
 */
#ifndef DLOCK_URL_H
#define DLOCK_URL_H

#include <stddef.h>

typedef struct dlock__endpoint {
  char *host; /* TCP host name or address; NULL for a unix socket */
  int port;   /* TCP port */
  char *path; /* unix socket path; NULL for TCP */
  char *user; /* ACL user name or NULL */
  char *pass; /* password or NULL */
  int db;     /* database number, 0 by default */
  int tls;    /* 1 for rediss://: TLS over TCP */
} dlock__endpoint;

/*
 * Parses 'url' into '*out' (which owns its strings afterwards). Accepts
 * redis://[user[:pass]@]host[:port][/db] (host may be [v6]), the same
 * with rediss:// for TLS, and
 * unix://[user[:pass]@]/path[?db=N]; user and pass may be %-encoded.
 * Returns 0 or DLOCK_EINVAL with a detail that never shows the password.
 */
int dlock__url_parse(const char *url, dlock__endpoint *out);

/* Frees the strings of 'e' and zeroes it; safe on a zeroed endpoint. */
void dlock__endpoint_free(dlock__endpoint *e);

/* Writes "host:port" or the socket path into 'buf'; never the password. */
void dlock__endpoint_describe(const dlock__endpoint *e, char *buf, size_t n);

#endif
