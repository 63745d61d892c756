/*
 * The TLS half of the transports, over OpenSSL: the configuration a client
 * loads once (trusted CAs, client certificate, server name), and per
 * connection a handshake driven by readiness, reads and writes, and an
 * error that says which of the usual mistakes was made.
 *
 * OpenSSL does its socket I/O through a BIO of ours, so every send uses
 * MSG_NOSIGNAL (OpenSSL's own socket BIO would raise SIGPIPE on a closed
 * connection), and so the first bytes the server sent are on record: they
 * tell a plain Redis port, which answers a TLS hello in plain text, from a
 * broken TLS server.
 */
#include "net/internal.h"

#include "alloc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

struct dlock__tls {
  SSL_CTX *ctx;
  char *server_name; /* NULL: each connection's host */
  int insecure;
  int has_cert;
};

/* ---- the BIO ------------------------------------------------------------ */

static BIO_METHOD *bio_method;
static pthread_once_t bio_once = PTHREAD_ONCE_INIT;

static int bio_write(BIO *b, const char *buf, int len) {
  dlock__net *n = BIO_get_data(b);
  BIO_clear_retry_flags(b);
  long w = dlock__net_send(n, buf, (size_t)len);
  if (w >= 0)
    return (int)w;
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
    BIO_set_retry_write(b);
  else
    n->sock_errno = errno;
  return -1;
}

static int bio_read(BIO *b, char *buf, int len) {
  dlock__net *n = BIO_get_data(b);
  BIO_clear_retry_flags(b);
  long r = dlock__net_recv(n, buf, (size_t)len);
  if (r > 0)
    return (int)r;
  if (r == 0) {
    n->peer_eof = 1;
    return 0;
  }
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
    BIO_set_retry_read(b);
  else
    n->sock_errno = errno;
  return -1;
}

static long bio_ctrl(BIO *b, int cmd, long num, void *ptr) {
  (void)b;
  (void)num;
  (void)ptr;
  /* Writes go straight to the socket: there is never anything to flush. */
  return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

static int bio_create(BIO *b) {
  BIO_set_init(b, 1);
  return 1;
}

/* The socket is the transport's, closed by it. */
static int bio_destroy(BIO *b) { return b != NULL; }

/* Made once and kept for the life of the process. */
static void make_bio_method(void) {
  BIO_METHOD *m =
      BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "dlock socket");
  if (m != NULL &&
      (!BIO_meth_set_write(m, bio_write) || !BIO_meth_set_read(m, bio_read) ||
       !BIO_meth_set_ctrl(m, bio_ctrl) || !BIO_meth_set_create(m, bio_create) ||
       !BIO_meth_set_destroy(m, bio_destroy))) {
    BIO_meth_free(m);
    m = NULL;
  }
  bio_method = m;
}

/* ---- configuration ------------------------------------------------------ */

/* OpenSSL's reason for the last failure, and an empty error queue after:
 * a later call on this thread must not find our leftovers. */
static const char *ssl_reason(char *buf, size_t n) {
  unsigned long e = ERR_peek_last_error();
  const char *r = e != 0 ? ERR_reason_error_string(e) : NULL;
  if (r != NULL)
    snprintf(buf, n, "%s", r);
  else if (e != 0)
    ERR_error_string_n(e, buf, n);
  else
    snprintf(buf, n, "%s", errno != 0 ? strerror(errno) : "unknown error");
  ERR_clear_error();
  return buf;
}

/* An encrypted key would make OpenSSL ask for its passphrase on the
 * terminal, from inside a library call: refuse it instead. */
static int no_passphrase(char *buf, int size, int rwflag, void *data) {
  (void)buf;
  (void)size;
  (void)rwflag;
  (void)data;
  return 0;
}

static int tls_cfg_fail(dlock__tls *t, int code, const char *fmt, ...)
    DLOCK__PRINTF(3, 4);
static int tls_cfg_fail(dlock__tls *t, int code, const char *fmt, ...) {
  char detail[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof(detail), fmt, ap);
  va_end(ap);
  dlock__tls_free(t);
  return dlock__fail_text(code, detail);
}

/* OpenSSL says "system lib" for a file it cannot open: say why. */
static int check_readable(const char *option, const char *path) {
  if (path == NULL)
    return 0;
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return dlock__fail(DLOCK_EINVAL, "%s %s: %s", option, path,
                       strerror(errno));
  fclose(f);
  return 0;
}

static int is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int dlock__tls_new(const dlock__tls_cfg *cfg, dlock__tls **out) {
  *out = NULL;
  if ((cfg->cert_file == NULL) != (cfg->key_file == NULL))
    return dlock__fail(DLOCK_EINVAL,
                       "tls_cert_file and tls_key_file go together: a client "
                       "certificate needs its private key");
  if (cfg->server_name != NULL &&
      (cfg->server_name[0] == '\0' || strlen(cfg->server_name) > 253))
    return dlock__fail(DLOCK_EINVAL, "tls_server_name must be 1..253 bytes");
  int rc = check_readable("tls_ca_file", cfg->ca_file);
  if (rc == 0)
    rc = check_readable("tls_cert_file", cfg->cert_file);
  if (rc == 0)
    rc = check_readable("tls_key_file", cfg->key_file);
  if (rc != 0)
    return rc;
  if (cfg->ca_dir != NULL && !is_dir(cfg->ca_dir))
    return dlock__fail(DLOCK_EINVAL, "tls_ca_dir %s: %s", cfg->ca_dir,
                       errno != 0 ? strerror(errno) : "not a directory");
  dlock__tls *t = dlock__calloc(1, sizeof(*t));
  if (t == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory loading TLS settings");
  t->insecure = cfg->insecure;
  t->has_cert = cfg->cert_file != NULL;
  if (cfg->server_name != NULL &&
      (t->server_name = dlock__strdup(cfg->server_name)) == NULL)
    return tls_cfg_fail(t, DLOCK_ENOMEM, "out of memory loading TLS settings");
  char why[256];
  ERR_clear_error();
  t->ctx = SSL_CTX_new(TLS_client_method());
  if (t->ctx == NULL)
    return tls_cfg_fail(t, DLOCK_ENOMEM, "SSL_CTX_new: %s",
                        ssl_reason(why, sizeof(why)));
  /* Nothing older than TLS 1.2, which is what Redis offers too. */
  SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
  /* Writes behave like send(): part of the buffer may go, and the rest is
   * offered again later from wherever the caller's buffer then is. */
  SSL_CTX_set_mode(t->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
                               SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  SSL_CTX_set_default_passwd_cb(t->ctx, no_passphrase);
  SSL_CTX_set_verify(t->ctx, t->insecure ? SSL_VERIFY_NONE : SSL_VERIFY_PEER,
                     NULL);
  if (cfg->ca_file != NULL || cfg->ca_dir != NULL) {
    if (!SSL_CTX_load_verify_locations(t->ctx, cfg->ca_file, cfg->ca_dir))
      return tls_cfg_fail(t, DLOCK_EINVAL,
                          "%s %s: cannot load CA certificates: %s",
                          cfg->ca_file != NULL ? "tls_ca_file" : "tls_ca_dir",
                          cfg->ca_file != NULL ? cfg->ca_file : cfg->ca_dir,
                          ssl_reason(why, sizeof(why)));
  } else if (!t->insecure && !SSL_CTX_set_default_verify_paths(t->ctx)) {
    return tls_cfg_fail(t, DLOCK_EINVAL,
                        "cannot load the system's CA certificates: %s",
                        ssl_reason(why, sizeof(why)));
  }
  if (cfg->cert_file != NULL) {
    if (!SSL_CTX_use_certificate_chain_file(t->ctx, cfg->cert_file))
      return tls_cfg_fail(t, DLOCK_EINVAL,
                          "tls_cert_file %s: cannot load the certificate: %s",
                          cfg->cert_file, ssl_reason(why, sizeof(why)));
    int loaded =
        SSL_CTX_use_PrivateKey_file(t->ctx, cfg->key_file, SSL_FILETYPE_PEM);
    unsigned long e = ERR_peek_last_error();
    /* OpenSSL checks the pair as it loads the key. */
    if (!loaded && ERR_GET_LIB(e) == ERR_LIB_X509 &&
        ERR_GET_REASON(e) == X509_R_KEY_VALUES_MISMATCH)
      loaded = -1;
    if (loaded == 0)
      return tls_cfg_fail(t, DLOCK_EINVAL,
                          "tls_key_file %s: cannot load the private key "
                          "(PEM, not encrypted): %s",
                          cfg->key_file, ssl_reason(why, sizeof(why)));
    if (loaded < 0 || !SSL_CTX_check_private_key(t->ctx))
      return tls_cfg_fail(t, DLOCK_EINVAL,
                          "tls_key_file %s is not the key of tls_cert_file %s",
                          cfg->key_file, cfg->cert_file);
  }
  ERR_clear_error();
  *out = t;
  return 0;
}

void dlock__tls_free(dlock__tls *t) {
  if (t == NULL)
    return;
  /* Connections hold their own reference to the SSL_CTX. */
  SSL_CTX_free(t->ctx);
  dlock__free(t->server_name);
  dlock__free(t);
}

/* ---- one connection ----------------------------------------------------- */

static int is_ip_address(const char *s) {
  unsigned char buf[sizeof(struct in6_addr)];
  return inet_pton(AF_INET, s, buf) == 1 || inet_pton(AF_INET6, s, buf) == 1;
}

int dlock__tls_attach(dlock__net *n, const dlock__tls *t, const char *host) {
  pthread_once(&bio_once, make_bio_method);
  if (bio_method == NULL)
    return dlock__net_fail(n, DLOCK_ENOMEM, "out of memory starting TLS");
  const char *name = t->server_name != NULL ? t->server_name : host;
  snprintf(n->tls_name, sizeof(n->tls_name), "%s", name);
  ERR_clear_error();
  SSL *ssl = SSL_new(t->ctx);
  BIO *bio = BIO_new(bio_method);
  if (ssl == NULL || bio == NULL) {
    SSL_free(ssl);
    BIO_free(bio);
    ERR_clear_error();
    return dlock__net_fail(n, DLOCK_ENOMEM, "out of memory starting TLS");
  }
  BIO_set_data(bio, n);
  SSL_set_bio(ssl, bio, bio);
  n->ssl = ssl;
  /* SNI carries host names only, never addresses (RFC 6066). */
  int ip = is_ip_address(name);
  int ok = ip || SSL_set_tlsext_host_name(ssl, name);
  if (ok && !t->insecure) {
    if (ip) {
      ok = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name);
    } else {
      SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
      ok = SSL_set1_host(ssl, name);
    }
  }
  if (!ok) {
    char why[256];
    return dlock__net_fail(n, DLOCK_EINVAL, "TLS server name \"%s\": %s", name,
                           ssl_reason(why, sizeof(why)));
  }
  SSL_set_connect_state(ssl);
  return 0;
}

/* Alerts with which a server says no to the client's certificate. */
static int refuses_client_cert(int reason) {
  switch (reason) {
  case SSL_R_SSLV3_ALERT_BAD_CERTIFICATE:
  case SSL_R_SSLV3_ALERT_UNSUPPORTED_CERTIFICATE:
  case SSL_R_SSLV3_ALERT_CERTIFICATE_REVOKED:
  case SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED:
  case SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN:
  case SSL_R_TLSV1_ALERT_UNKNOWN_CA:
  case SSL_R_TLSV1_ALERT_ACCESS_DENIED:
  case SSL_R_TLSV1_ALERT_DECRYPT_ERROR:
    return 1;
  default:
    return 0;
  }
}

static int ssl_reason_code(void) {
  unsigned long e = ERR_peek_error();
  return e != 0 && ERR_GET_LIB(e) == ERR_LIB_SSL ? ERR_GET_REASON(e) : 0;
}

/*
 * A server that refuses the client's certificate sends its alert and
 * closes. With TLS 1.3 the client may be writing its first command by
 * then, and the write fails with a reset while the alert waits, unread, in
 * the socket. Read it, so the error says why the server hung up.
 */
static int alert_behind_reset(dlock__net *n) {
  if (n->sock_errno != ECONNRESET && n->sock_errno != EPIPE)
    return 0;
  char scratch[512];
  size_t got;
  ERR_clear_error();
  if (SSL_read_ex(n->ssl, scratch, sizeof(scratch), &got) == 1)
    return 0;
  int reason = ssl_reason_code();
  if (reason == SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED ||
      refuses_client_cert(reason))
    return reason;
  return 0;
}

/* Turns a failed SSL call into one of the errors users can act on. */
static int tls_failed(dlock__net *n, int ssl_error, const char *during) {
  SSL *ssl = n->ssl;
  int reason = ssl_reason_code();
  char why[256];
  ssl_reason(why, sizeof(why));
  int alert = alert_behind_reset(n);
  if (alert != 0) {
    reason = alert;
    ssl_reason(why, sizeof(why));
  }
  ERR_clear_error();
  long verify = SSL_get_verify_result(ssl);
  n->tls_fatal = 1;
  /* A plain Redis port answers the hello with an error reply. */
  if (n->received > 0 && !(n->first_byte >= 0x14 && n->first_byte <= 0x18))
    return dlock__net_fail(n, DLOCK_EPROTO,
                           "TLS with %s: the server answered in plain text, "
                           "not TLS (a plain port needs a redis:// URL)",
                           n->addr);
  if (reason == SSL_R_CERTIFICATE_VERIFY_FAILED && verify != X509_V_OK) {
    if (verify == X509_V_ERR_HOSTNAME_MISMATCH ||
        verify == X509_V_ERR_IP_ADDRESS_MISMATCH)
      return dlock__net_fail(
          n, DLOCK_EAUTH,
          "TLS with %s: the server's certificate is not for \"%s\" (host "
          "name mismatch): connect by a name the certificate has, or set "
          "the TLS server name to one",
          n->addr, n->tls_name);
    return dlock__net_fail(n, DLOCK_EAUTH,
                           "TLS with %s: the server's certificate is not "
                           "trusted: %s (an unknown CA? give its certificate "
                           "as the TLS CA file or directory)",
                           n->addr, X509_verify_cert_error_string(verify));
  }
  if (reason == SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED)
    return dlock__net_fail(n, DLOCK_EAUTH,
                           "TLS with %s: the server requires a client "
                           "certificate (a TLS certificate and key file)",
                           n->addr);
  if (refuses_client_cert(reason))
    return dlock__net_fail(n, DLOCK_EAUTH,
                           "TLS with %s: the server refused the client "
                           "certificate (%s)",
                           n->addr, why);
  if (ssl_error == SSL_ERROR_ZERO_RETURN || n->peer_eof ||
      reason == SSL_R_UNEXPECTED_EOF_WHILE_READING)
    return dlock__net_fail(n, DLOCK_EIO,
                           "TLS with %s: the server closed the "
                           "connection during the %s",
                           n->addr, during);
  if (n->sock_errno != 0)
    return dlock__net_fail(n, DLOCK_EIO, "TLS with %s: %s during the %s",
                           n->addr, strerror(n->sock_errno), during);
  return dlock__net_fail(n, DLOCK_EIO, "TLS with %s: %s failed: %s", n->addr,
                         during, why);
}

/* After an SSL call returned 'r': AGAIN with the readiness it needs, or
 * the error. */
static int tls_result(dlock__net *n, int r, const char *during) {
  int e = SSL_get_error(n->ssl, r);
  if (e == SSL_ERROR_WANT_READ) {
    n->events = POLLIN;
    return DLOCK__NET_AGAIN;
  }
  if (e == SSL_ERROR_WANT_WRITE) {
    n->events = POLLOUT;
    return DLOCK__NET_AGAIN;
  }
  if (e == SSL_ERROR_ZERO_RETURN) {
    ERR_clear_error();
    return dlock__net_fail(n, DLOCK_EIO, "%s closed the TLS connection",
                           n->addr);
  }
  return tls_failed(n, e, during);
}

int dlock__tls_handshake(dlock__net *n) {
  ERR_clear_error();
  n->sock_errno = 0;
  int r = SSL_connect(n->ssl);
  if (r == 1) {
    n->state = NET_READY;
    return 0;
  }
  return tls_result(n, r, "handshake");
}

int dlock__tls_read(dlock__net *n, void *buf, size_t cap, size_t *got) {
  ERR_clear_error();
  n->sock_errno = 0;
  if (SSL_read_ex(n->ssl, buf, cap, got) == 1)
    return 0;
  *got = 0;
  return tls_result(n, 0, "read");
}

int dlock__tls_write(dlock__net *n, const void *buf, size_t len, size_t *put) {
  ERR_clear_error();
  n->sock_errno = 0;
  if (SSL_write_ex(n->ssl, buf, len, put) == 1)
    return 0;
  *put = 0;
  return tls_result(n, 0, "write");
}

int dlock__tls_pending(const dlock__net *n) { return SSL_has_pending(n->ssl); }

void dlock__tls_detach(dlock__net *n, int goodbye) {
  SSL *ssl = n->ssl;
  /* A goodbye (close_notify) when the stream is sound, without waiting
   * for the server's: the socket closes next anyway. */
  if (goodbye && n->state == NET_READY && !n->tls_fatal) {
    ERR_clear_error();
    (void)SSL_shutdown(ssl);
  }
  ERR_clear_error();
  SSL_free(ssl);
  n->ssl = NULL;
}
