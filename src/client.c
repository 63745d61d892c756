/*
 * Opening and closing clients, and the small services they give the lock
 * code: owner fields and plain commands.
 */
#include "client.h"
#include "alloc.h"

#include "error.h"
#include "net/net.h"
#include "watchdog.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#define DEFAULT_URL "redis://127.0.0.1:6379"

/*
 * dlock_options_t grows at its end. 'struct_size' tells the library how much
 * of it the caller's header had: the smallest struct there can be ends with
 * that field, and one filled by hand (struct_size 0) is read as the layout
 * of 0.2, the first to have the field. OPTIONS_SIZE_0_2 must never change:
 * fields added later lie beyond it. Sizes beyond any plausible growth mean
 * a struct nobody initialized, whose size field holds stack garbage.
 */
#define OPTIONS_MIN_SIZE                                                       \
  (offsetof(dlock_options_t, struct_size) + sizeof(size_t))
#define OPTIONS_SIZE_0_2 (offsetof(dlock_options_t, tls_insecure) + sizeof(int))
#define OPTIONS_MAX_SIZE 65536

void dlock_options_init_size(dlock_options_t *o, size_t size) {
  if (o == NULL)
    return;
  dlock_options_t d;
  memset(&d, 0, sizeof(d));
  d.url = DEFAULT_URL;
  d.connect_timeout_ms = 2000;
  d.command_timeout_ms = 3000;
  d.watchdog_timeout_ms = 30000;
  d.unlock_retries = 2;
  d.fair_wait_timeout_ms = 300000;
  d.struct_size = size;
  /* Only the caller's bytes are written: a program built against an older
   * header has a smaller struct. Fields of a newer header that this
   * library does not know are zeroed, which is how open recognizes them
   * as unset. */
  memset(o, 0, size);
  memcpy(o, &d, size < sizeof(d) ? size : sizeof(d));
}

/* Copies the caller's options, of whatever version, into a struct of this
 * library's layout with defaults for what the caller's did not have. */
static int read_options(const dlock_options_t *o, dlock_options_t *out) {
  size_t size = o->struct_size == 0 ? OPTIONS_SIZE_0_2 : o->struct_size;
  if (size < OPTIONS_MIN_SIZE || size > OPTIONS_MAX_SIZE)
    return dlock__fail(DLOCK_EINVAL,
                       "options have struct_size %zu: initialize them with "
                       "dlock_options_init()",
                       o->struct_size);
  dlock_options_init_size(out, sizeof(*out));
  if (size > sizeof(*out)) {
    /* A program built against a newer dlock.h: the fields this library
     * does not know must be unset, else it would silently ignore them. */
    const unsigned char *tail = (const unsigned char *)o + sizeof(*out);
    for (size_t i = 0; i < size - sizeof(*out); i++)
      if (tail[i] != 0)
        return dlock__fail(
            DLOCK_EINVAL,
            "options set a field at byte %zu that dlock %s does not know "
            "(it knows %zu bytes): the program was built against a newer "
            "dlock.h than the library it runs with",
            sizeof(*out) + i, DLOCK_VERSION_STRING, sizeof(*out));
    size = sizeof(*out);
  }
  memcpy(out, o, size);
  out->struct_size = sizeof(*out);
  return 0;
}

/* A random (version 4) UUID, like Redisson's client ids. */
static int make_uuid(char out[37]) {
  unsigned char b[16];
  size_t got = 0;
  while (got < sizeof(b)) {
    ssize_t n = getrandom(b + got, sizeof(b) - got, 0);
    if (n < 0 && errno != EINTR)
      return dlock__fail(DLOCK_EIO, "getrandom: %s", strerror(errno));
    if (n > 0)
      got += (size_t)n;
  }
  b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
  b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
  snprintf(
      out, 37,
      "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
      b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11],
      b[12], b[13], b[14], b[15]);
  return 0;
}

static int check_options(const dlock_options_t *o) {
  if (o->connect_timeout_ms <= 0 || o->command_timeout_ms <= 0)
    return dlock__fail(DLOCK_EINVAL,
                       "connect_timeout_ms and command_timeout_ms must be > 0");
  if (o->watchdog_timeout_ms < 3)
    return dlock__fail(DLOCK_EINVAL, "watchdog_timeout_ms must be >= 3");
  if (o->unlock_retries < 0)
    return dlock__fail(DLOCK_EINVAL, "unlock_retries must be >= 0");
  if (o->fair_wait_timeout_ms <= 0)
    return dlock__fail(DLOCK_EINVAL, "fair_wait_timeout_ms must be > 0");
  if (o->client_id != NULL &&
      (o->client_id[0] == '\0' || strlen(o->client_id) > DLOCK__CLIENT_ID_MAX))
    return dlock__fail(DLOCK_EINVAL, "client_id must be 1..%d bytes",
                       DLOCK__CLIENT_ID_MAX);
  return 0;
}

/* Whether any TLS option is set. */
static int wants_tls(const dlock_options_t *o) {
  return o->tls_ca_file != NULL || o->tls_ca_dir != NULL ||
         o->tls_cert_file != NULL || o->tls_key_file != NULL ||
         o->tls_server_name != NULL || o->tls_insecure != 0;
}

/* Checks the TLS options against the URL, and loads them (reading the CA
 * and certificate files) so that a missing or wrong file is reported by
 * the open, naming it, rather than by every connection attempt. */
static int check_tls(const dlock_options_t *o, const dlock__endpoint *ep) {
  if (!ep->tls) {
    if (wants_tls(o))
      return dlock__fail(DLOCK_EINVAL,
                         "TLS options given for a URL without TLS: use a "
                         "rediss:// URL");
    return 0;
  }
  dlock__tls_cfg cfg = {o->tls_ca_file,     o->tls_ca_dir,
                        o->tls_cert_file,   o->tls_key_file,
                        o->tls_server_name, o->tls_insecure != 0};
  dlock__tls *tls = NULL;
  int rc = dlock__tls_new(&cfg, &tls);
  dlock__tls_free(tls);
  if (rc != 0)
    return rc;
  /* The command and pub/sub connections still run over hiredis's own
   * sockets, which have no TLS; the transports in src/net have it, and
   * take over those connections next. */
  return dlock__fail(DLOCK_EINVAL,
                     "rediss:// URLs are not supported by the client's "
                     "connections yet");
}

static void destroy(dlock_client_t *c) {
  dlock__watchdog_stop(c->wd);
  dlock__pubsub_stop(c->ps);
  dlock__conn_free(c->conn);
  dlock__holds_clear(&c->holds);
  dlock__endpoint_free(&c->ep);
  pthread_mutex_destroy(&c->mu);
  dlock__free(c->url);
  dlock__free(c);
}

int dlock_client_open(const dlock_options_t *o, dlock_client_t **out) {
  if (o == NULL || out == NULL)
    return dlock__fail(DLOCK_EINVAL, "options and out must not be NULL");
  *out = NULL;
  dlock_options_t opt;
  int rc = read_options(o, &opt);
  if (rc != 0)
    return rc;
  o = &opt;
  rc = check_options(o);
  if (rc != 0)
    return rc;
  dlock_client_t *c = dlock__calloc(1, sizeof(*c));
  if (c == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory opening a client");
  pthread_mutex_init(&c->mu, NULL);
  dlock__holds_init(&c->holds);
  c->opt = *o;
  const char *url = o->url ? o->url : DEFAULT_URL;
  if ((c->url = dlock__strdup(url)) == NULL)
    rc = dlock__fail(DLOCK_ENOMEM, "out of memory opening a client");
  c->opt.url = c->url;
  if (rc == 0)
    rc = dlock__url_parse(url, &c->ep);
  if (rc == 0)
    rc = check_tls(o, &c->ep);
  if (rc == 0 && o->client_id != NULL)
    snprintf(c->id, sizeof(c->id), "%s", o->client_id);
  else if (rc == 0)
    rc = make_uuid(c->id);
  dlock__conn_cfg cfg = {&c->ep, o->connect_timeout_ms, o->command_timeout_ms};
  if (rc == 0)
    rc = dlock__conn_new(&cfg, &c->conn);
  if (rc == 0) {
    rc = dlock__conn_open(c->conn);
    /* A lazy client starts while its server is unreachable (a RedLock node
     * that is down); wrong passwords and non-Redis servers still fail. */
    if (rc == DLOCK_EIO && o->lazy_connect)
      rc = 0;
  }
  if (rc == 0)
    rc = dlock__pubsub_start(&c->ep, o->connect_timeout_ms,
                             o->command_timeout_ms, o->lazy_connect, &c->ps);
  if (rc == 0)
    rc = dlock__watchdog_start(c, &c->wd);
  if (rc != 0) {
    destroy(c);
    return rc;
  }
  *out = c;
  return 0;
}

void dlock_client_shutdown(dlock_client_t *c) {
  if (c == NULL)
    return;
  atomic_store(&c->canceled, 1);
  dlock__conn_cancel(c->conn);
  dlock__pubsub_cancel(c->ps);
}

void dlock_client_close(dlock_client_t *c) {
  if (c == NULL)
    return;
  destroy(c);
}

const char *dlock_client_id(const dlock_client_t *c) {
  return c != NULL ? c->id : "";
}

size_t dlock__owner_field(const dlock_client_t *c, uint64_t owner,
                          char buf[DLOCK__FIELD_MAX]) {
  int n = snprintf(buf, DLOCK__FIELD_MAX, "%s:%" PRIu64, c->id, owner);
  return (size_t)n;
}

int dlock__check_canceled(dlock_client_t *c) {
  if (atomic_load(&c->canceled))
    return dlock__fail(DLOCK_ECANCELED, "client is shutting down");
  return 0;
}

int dlock__command(dlock_client_t *c, int argc, const char **argv,
                   const size_t *lens, redisReply **out) {
  char *cmd;
  int len = redisFormatCommandArgv(&cmd, argc, argv, lens);
  if (len < 0)
    return dlock__fail(DLOCK_ENOMEM, "out of memory formatting %s", argv[0]);
  size_t slen = (size_t)len;
  int rc = dlock__conn_call(c->conn, 1, &cmd, &slen, out, 0);
  redisFreeCommand(cmd);
  if (rc == 0 && (*out)->type == REDIS_REPLY_ERROR) {
    rc = dlock__fail_reply((*out)->str, (*out)->len);
    freeReplyObject(*out);
    *out = NULL;
  }
  return rc;
}
