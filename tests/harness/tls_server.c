/*
 * Certificates and TLS servers for the tests; see tls_server.h.
 */
#define _GNU_SOURCE

#include "tls_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* Runs a shell command in 'dir', its output into dir/openssl.log; on
 * failure the log is printed. */
static int run(const char *dir, const char *cmd) {
  char line[4096];
  snprintf(line, sizeof(line), "cd '%s' && { %s ; } >>openssl.log 2>&1", dir,
           cmd);
  int st = system(line);
  if (st == 0)
    return 0;
  fprintf(stderr, "tls_server: failed (%d): %s\n", st, cmd);
  snprintf(line, sizeof(line), "cat '%s/openssl.log' >&2", dir);
  if (system(line) != 0)
    fprintf(stderr, "tls_server: no log\n");
  return -1;
}

#define EC "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"

static int make_ca(const char *dir, const char *name, const char *cn) {
  char cmd[1024];
  snprintf(cmd, sizeof(cmd),
           "openssl req -x509 " EC " -keyout %s.key -out %s.crt -days 3 "
           "-subj '/CN=%s' -addext basicConstraints=critical,CA:TRUE "
           "-addext keyUsage=critical,keyCertSign,cRLSign",
           name, name, cn);
  return run(dir, cmd);
}

/* A key and a certificate for it that 'ca' signed, with 'ext' as its
 * extensions. */
static int make_leaf(const char *dir, const char *name, const char *cn,
                     const char *ca, const char *ext) {
  char cmd[2048];
  snprintf(cmd, sizeof(cmd),
           "printf '%s' > %s.ext && "
           "openssl req " EC " -keyout %s.key -out %s.csr -subj '/CN=%s' && "
           "openssl x509 -req -in %s.csr -CA %s.crt -CAkey %s.key "
           "-CAcreateserial -out %s.crt -days 3 -extfile %s.ext",
           ext, name, name, name, cn, name, ca, ca, name, name);
  return run(dir, cmd);
}

int tls_files_make(tls_files_t **out) {
  *out = NULL;
  tls_files_t *f = calloc(1, sizeof(*f));
  if (f == NULL)
    return -1;
  snprintf(f->dir, sizeof(f->dir), "/tmp/dlock-tls-XXXXXX");
  if (mkdtemp(f->dir) == NULL) {
    fprintf(stderr, "tls_server: mkdtemp: %s\n", strerror(errno));
    free(f);
    return -1;
  }
#define PATH(field, file)                                                      \
  snprintf(f->field, sizeof(f->field), "%s/%s", f->dir, file)
  PATH(ca_crt, "ca.crt");
  PATH(ca_dir, "cadir");
  PATH(server_crt, "server.crt");
  PATH(server_key, "server.key");
  PATH(client_crt, "client.crt");
  PATH(client_key, "client.key");
  PATH(rogue_ca_crt, "rogue.crt");
  PATH(rogue_client_crt, "rogue_client.crt");
  PATH(rogue_client_key, "rogue_client.key");
  PATH(other_key, "other.key");
#undef PATH
  int rc = make_ca(f->dir, "ca", "dlock test CA");
  if (rc == 0)
    rc = make_leaf(f->dir, "server", "localhost", "ca",
                   "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1\\n"
                   "extendedKeyUsage=serverAuth,clientAuth\\n");
  if (rc == 0)
    rc = make_leaf(f->dir, "client", "dlock test client", "ca",
                   "extendedKeyUsage=clientAuth\\n");
  if (rc == 0)
    rc = make_ca(f->dir, "rogue", "another CA");
  if (rc == 0)
    rc = make_leaf(f->dir, "rogue_client", "dlock test client", "rogue",
                   "extendedKeyUsage=clientAuth\\n");
  if (rc == 0)
    rc = run(f->dir, "openssl genpkey -algorithm EC -pkeyopt "
                     "ec_paramgen_curve:prime256v1 -out other.key");
  if (rc == 0)
    rc = run(f->dir, "mkdir cadir && cp ca.crt cadir/ && openssl rehash cadir");
  if (rc != 0) {
    tls_files_free(f);
    return -1;
  }
  *out = f;
  return 0;
}

void tls_files_free(tls_files_t *f) {
  if (f == NULL)
    return;
  const char *keep = getenv("DLOCK_TEST_KEEP");
  if (keep && *keep && strcmp(keep, "0") != 0) {
    fprintf(stderr, "tls_server: kept %s\n", f->dir);
  } else if (f->dir[0] != '\0') {
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
    if (system(cmd) != 0)
      fprintf(stderr, "tls_server: could not remove %s\n", f->dir);
  }
  free(f);
}

/* A loopback port free right now (see redis_proc.c). */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    return -1;
  struct sockaddr_in a;
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = -1;
  if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
      getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

int tls_have_ipv6(void) {
  int fd = socket(AF_INET6, SOCK_STREAM, 0);
  if (fd < 0)
    return 0;
  struct sockaddr_in6 a;
  memset(&a, 0, sizeof(a));
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_loopback;
  int ok = bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
  close(fd);
  return ok;
}

int tls_server_start(const tls_files_t *f, const char *auth_clients,
                     const char *requirepass, rp_server_t **out,
                     int *tls_port) {
  rp_options_t o;
  rp_options_init(&o);
  o.requirepass = requirepass;
  return tls_server_start_with(f, auth_clients, &o, out, tls_port);
}

int tls_server_start_with(const tls_files_t *f, const char *auth_clients,
                          const rp_options_t *base, rp_server_t **out,
                          int *tls_port) {
  *out = NULL;
  /* The TLS port is picked here and may be taken before the server binds
   * it, so a start that fails is tried again with another. */
  for (int attempt = 0; attempt < 5; attempt++) {
    int port = free_port();
    if (port <= 0)
      return -1;
    char conf[6144];
    snprintf(conf, sizeof(conf),
             "bind 127.0.0.1%s\n"
             "tls-port %d\n"
             "tls-cert-file \"%s\"\n"
             "tls-key-file \"%s\"\n"
             "tls-ca-cert-file \"%s\"\n"
             "tls-auth-clients %s\n%s",
             tls_have_ipv6() ? " ::1" : "", port, f->server_crt, f->server_key,
             f->ca_crt, auth_clients,
             base->extra_conf != NULL ? base->extra_conf : "");
    rp_options_t o = *base;
    o.extra_conf = conf;
    if (rp_start(&o, out) == 0) {
      *tls_port = port;
      return 0;
    }
  }
  return -1;
}
