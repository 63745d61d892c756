/*
 * TLS for the tests: a throwaway certificate authority and certificates it
 * signed, made with the openssl command in a temp dir at test time, and a
 * redis-server (see redis_proc.h) that also listens for TLS with them.
 *
 * The server keeps its plain port, on which the harness checks that it is
 * up and runs rp_cmd; the TLS port is the one under test. Both stay the
 * same across rp_restart.
 */
#ifndef DLOCK_TEST_TLS_SERVER_H
#define DLOCK_TEST_TLS_SERVER_H

#include "redis_proc.h"

typedef struct tls_files {
  char dir[256];
  char ca_crt[300]; /* the CA every server and client certificate has */
  char ca_dir[300]; /* a directory with ca_crt, hashed (openssl rehash) */
  /* For the server: CN localhost, subjectAltName localhost and 127.0.0.1
   * and ::1; usable as a client certificate too, as Redis does. */
  char server_crt[300];
  char server_key[300];
  char client_crt[300]; /* a client certificate signed by the CA */
  char client_key[300];
  char rogue_ca_crt[300];     /* another CA, which the server does not trust */
  char rogue_client_crt[300]; /* a client certificate the rogue CA signed */
  char rogue_client_key[300];
  char other_key[300]; /* a key that belongs to no certificate here */
} tls_files_t;

/* Makes the files (a fraction of a second). 0, or -1 with the openssl
 * command's output on stderr. */
int tls_files_make(tls_files_t **out);

/* Removes the temp dir (unless DLOCK_TEST_KEEP is set) and frees 'f'. NULL
 * is ignored. */
void tls_files_free(tls_files_t *f);

/*
 * Starts a redis-server with TLS on a free loopback port (IPv4 and, when
 * the host has it, IPv6), with the server certificate of 'f', trusting
 * 'f->ca_crt' for client certificates. 'auth_clients' is Redis's
 * tls-auth-clients: "no", "yes" (mutual TLS) or "optional". 'requirepass'
 * may be NULL. On 0, '*tls_port' is the TLS port.
 */
int tls_server_start(const tls_files_t *f, const char *auth_clients,
                     const char *requirepass, rp_server_t **out, int *tls_port);

/* The same from the caller's options ('base': persistence, password...),
 * whose extra_conf lines follow the TLS ones. */
int tls_server_start_with(const tls_files_t *f, const char *auth_clients,
                          const rp_options_t *base, rp_server_t **out,
                          int *tls_port);

/* 1 when ::1 can be bound on this host. */
int tls_have_ipv6(void);

#endif
