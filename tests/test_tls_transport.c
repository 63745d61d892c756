/*
 * The transports of src/net on their own, against real redis-servers: TCP
 * (IPv4, IPv6), unix sockets and TLS,
 * each carrying a PING formatted and parsed by hiredis; every TLS mistake a
 * user can make, each failing fast with its own message naming the
 * server; and the client's handling of the TLS options.
 */
#include "harness/redis_proc.h"
#include "harness/test.h"
#include "harness/tls_server.h"

#include "monotime.h"
#include "net/net.h"

#include <dlock.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>

/* Generous: only a hang, or a wait for the whole budget, must fail. */
#define BUDGET_MS 5000

static dlock__tls *tls_new(const dlock__tls_cfg *cfg) {
  dlock__tls *t = NULL;
  ASSERT_DLOCK_OK(dlock__tls_new(cfg, &t));
  ASSERT_NOT_NULL(t);
  return t;
}

/* A TLS configuration trusting the test CA. */
static dlock__tls *tls_trusting(const tls_files_t *f) {
  dlock__tls_cfg cfg = {.ca_file = f->ca_crt};
  return tls_new(&cfg);
}

static int net_connect(const char *host, int port, const dlock__tls *tls,
                       int64_t budget_ms, dlock__net **out) {
  dlock__endpoint ep;
  memset(&ep, 0, sizeof(ep));
  ep.host = (char *)host;
  ep.port = port;
  ep.tls = tls != NULL;
  return dlock__net_connect(&ep, tls, dlock__now_us() + budget_ms * 1000, out);
}

/* Sends one command and reads its reply through 'n', the way the
 * connection layer will: hiredis formats and parses, the transport moves
 * the bytes. Returns 0 with the reply in '*out', or the transport's code. */
static int round_trip(dlock__net *n, int argc, const char **argv,
                      const size_t *lens, redisReply **out) {
  *out = NULL;
  int64_t deadline = dlock__now_us() + (int64_t)BUDGET_MS * 1000;
  char *cmd;
  int len = redisFormatCommandArgv(&cmd, argc, argv, lens);
  ASSERT_GT(len, 0);
  size_t off = 0;
  int rc = 0;
  while (rc == 0 && off < (size_t)len) {
    size_t put = 0;
    rc = dlock__net_write(n, cmd + off, (size_t)len - off, &put);
    off += put;
    if (rc == DLOCK__NET_AGAIN)
      rc = dlock__net_wait(n, deadline);
    ASSERT_NE(rc, DLOCK__NET_AGAIN);
  }
  redisFreeCommand(cmd);
  redisReader *r = redisReaderCreate();
  void *reply = NULL;
  while (rc == 0 && reply == NULL) {
    char buf[16384];
    size_t got = 0;
    rc = dlock__net_read(n, buf, sizeof(buf), &got);
    if (rc == DLOCK__NET_AGAIN) {
      rc = dlock__net_wait(n, deadline);
      ASSERT_NE(rc, DLOCK__NET_AGAIN);
      continue;
    }
    if (rc == 0) {
      ASSERT_EQ(redisReaderFeed(r, buf, got), REDIS_OK);
      ASSERT_EQ(redisReaderGetReply(r, &reply), REDIS_OK);
    }
  }
  redisReaderFree(r);
  *out = reply;
  return rc;
}

static int ping(dlock__net *n) {
  const char *argv[] = {"PING"};
  redisReply *r;
  int rc = round_trip(n, 1, argv, NULL, &r);
  if (rc == 0) {
    ASSERT_EQ(r->type, REDIS_REPLY_STATUS);
    ASSERT_STR_EQ(r->str, "PONG");
    freeReplyObject(r);
  }
  return rc;
}

static void assert_contains(const char *text, const char *part) {
  if (strstr(text, part) == NULL)
    TEST_FAIL("\"%s\" lacks \"%s\"", text, part);
}

/* The error names the server it is about. */
static void assert_names(const char *text, int port) {
  char addr[64];
  snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
  assert_contains(text, addr);
}

/* ---- plain transports --------------------------------------------------- */

TEST(tcp_transport_ping_with_nodelay_keepalive_cloexec) {
  rp_server_t *s;
  ASSERT_EQ(rp_start(NULL, &s), 0);
  dlock__net *n;
  ASSERT_DLOCK_OK(net_connect("127.0.0.1", rp_port(s), NULL, BUDGET_MS, &n));
  ASSERT_EQ(dlock__net_is_tls(n), 0);
  ASSERT_DLOCK_OK(ping(n));
  int fd = dlock__net_fd(n), v = 0;
  socklen_t len = sizeof(v);
  ASSERT_EQ(getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &v, &len), 0);
  ASSERT_NE(v, 0);
  ASSERT_EQ(getsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &v, &len), 0);
  ASSERT_NE(v, 0);
  ASSERT_NE(fcntl(fd, F_GETFD) & FD_CLOEXEC, 0);
  ASSERT_NE(fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
  dlock__net_close(n);
  rp_free(s);
}

TEST(tcp_transport_ipv6) {
  if (!tls_have_ipv6()) {
    printf("no IPv6 loopback here: skipped\n");
    return;
  }
  rp_options_t o;
  rp_options_init(&o);
  o.extra_conf = "bind 127.0.0.1 ::1";
  rp_server_t *s;
  ASSERT_EQ(rp_start(&o, &s), 0);
  dlock__endpoint ep;
  memset(&ep, 0, sizeof(ep));
  ep.host = (char *)"::1";
  ep.port = rp_port(s);
  dlock__net *n;
  ASSERT_DLOCK_OK(
      dlock__net_connect(&ep, NULL, dlock__now_us() + BUDGET_MS * 1000, &n));
  char want[64];
  snprintf(want, sizeof(want), "[::1]:%d", rp_port(s));
  ASSERT_STR_EQ(dlock__net_addr(n), want);
  ASSERT_DLOCK_OK(ping(n));
  dlock__net_close(n);
  rp_free(s);
}

TEST(unix_transport_ping) {
  rp_server_t *s;
  rp_options_t o;
  rp_options_init(&o);
  o.unix_socket = 1;
  ASSERT_EQ(rp_start(&o, &s), 0);
  dlock__endpoint ep;
  memset(&ep, 0, sizeof(ep));
  ep.path = (char *)rp_socket(s);
  dlock__net *n;
  ASSERT_DLOCK_OK(
      dlock__net_connect(&ep, NULL, dlock__now_us() + BUDGET_MS * 1000, &n));
  ASSERT_DLOCK_OK(ping(n));
  ASSERT_NE(fcntl(dlock__net_fd(n), F_GETFD) & FD_CLOEXEC, 0);
  dlock__net_close(n);
  rp_free(s);
}

TEST(tcp_transport_refused_names_the_server) {
  rp_server_t *s;
  ASSERT_EQ(rp_start(NULL, &s), 0);
  int port = rp_port(s);
  rp_free(s);
  dlock__net *n = NULL;
  ASSERT_DLOCK_ERR(net_connect("127.0.0.1", port, NULL, BUDGET_MS, &n),
                   DLOCK_EIO);
  ASSERT_NULL(n);
  assert_names(dlock_last_error(), port);
  assert_contains(dlock_last_error(), "refused");
}

/* ---- TLS ---------------------------------------------------------------- */

typedef struct tls_env {
  tls_files_t *f;
  rp_server_t *s;
  int port; /* TLS */
} tls_env;

static void env_start(tls_env *e, const char *auth_clients) {
  ASSERT_EQ(tls_files_make(&e->f), 0);
  ASSERT_EQ(tls_server_start(e->f, auth_clients, NULL, &e->s, &e->port), 0);
}

static void env_free(tls_env *e) {
  rp_free(e->s);
  tls_files_free(e->f);
}

/* Connects with 'cfg' and pings; the code of whichever step failed. */
static int tls_ping(const tls_env *e, const char *host,
                    const dlock__tls_cfg *cfg) {
  dlock__tls *t = tls_new(cfg);
  dlock__net *n = NULL;
  int rc = net_connect(host, e->port, t, BUDGET_MS, &n);
  if (rc == 0) {
    ASSERT_EQ(dlock__net_is_tls(n), 1);
    rc = ping(n);
  }
  dlock__net_close(n);
  dlock__tls_free(t);
  return rc;
}

TEST(tls_transport_ping_with_ca_file_and_ca_dir) {
  tls_env e;
  env_start(&e, "no");
  dlock__tls_cfg cfg = {.ca_file = e.f->ca_crt};
  ASSERT_DLOCK_OK(tls_ping(&e, "127.0.0.1", &cfg));
  dlock__tls_cfg dir = {.ca_dir = e.f->ca_dir};
  ASSERT_DLOCK_OK(tls_ping(&e, "127.0.0.1", &dir));
  /* By name: SNI and a DNS name check. */
  ASSERT_DLOCK_OK(tls_ping(&e, "localhost", &cfg));
  if (tls_have_ipv6())
    ASSERT_DLOCK_OK(tls_ping(&e, "::1", &cfg));
  env_free(&e);
}

TEST(tls_transport_moves_a_large_value_both_ways) {
  /* Several TLS records each way, partial writes and reads that stop
   * with bytes still inside OpenSSL. */
  tls_env e;
  env_start(&e, "no");
  dlock__tls *t = tls_trusting(e.f);
  dlock__net *n;
  ASSERT_DLOCK_OK(net_connect("127.0.0.1", e.port, t, BUDGET_MS, &n));
  size_t big = 4 << 20;
  char *value = malloc(big);
  ASSERT_NOT_NULL(value);
  for (size_t i = 0; i < big; i++)
    value[i] = (char)('a' + i % 23);
  const char *set[] = {"SET", "big", value};
  size_t set_lens[] = {3, 3, big};
  redisReply *r;
  ASSERT_DLOCK_OK(round_trip(n, 3, set, set_lens, &r));
  ASSERT_EQ(r->type, REDIS_REPLY_STATUS);
  freeReplyObject(r);
  const char *get[] = {"GET", "big"};
  ASSERT_DLOCK_OK(round_trip(n, 2, get, NULL, &r));
  ASSERT_EQ(r->type, REDIS_REPLY_STRING);
  ASSERT_EQ(r->len, big);
  ASSERT_EQ(memcmp(r->str, value, big), 0);
  freeReplyObject(r);
  free(value);
  dlock__net_close(n);
  dlock__tls_free(t);
  env_free(&e);
}

TEST(tls_transport_server_name_is_checked) {
  tls_env e;
  env_start(&e, "no");
  /* An address, checked as a name the certificate has. */
  dlock__tls_cfg named = {.ca_file = e.f->ca_crt, .server_name = "localhost"};
  ASSERT_DLOCK_OK(tls_ping(&e, "127.0.0.1", &named));
  dlock__tls_cfg wrong = {.ca_file = e.f->ca_crt,
                          .server_name = "redis.example.com"};
  ASSERT_DLOCK_ERR(tls_ping(&e, "127.0.0.1", &wrong), DLOCK_EAUTH);
  assert_names(dlock_last_error(), e.port);
  assert_contains(dlock_last_error(), "host name mismatch");
  assert_contains(dlock_last_error(), "redis.example.com");
  /* An insecure client does not care. */
  wrong.insecure = 1;
  ASSERT_DLOCK_OK(tls_ping(&e, "127.0.0.1", &wrong));
  env_free(&e);
}

TEST(tls_transport_unknown_ca_is_refused) {
  tls_env e;
  env_start(&e, "no");
  /* The system's CAs (the default) do not know the test CA, nor does the
   * rogue one. */
  dlock__tls_cfg system = {0};
  ASSERT_DLOCK_ERR(tls_ping(&e, "127.0.0.1", &system), DLOCK_EAUTH);
  assert_names(dlock_last_error(), e.port);
  assert_contains(dlock_last_error(), "not trusted");
  assert_contains(dlock_last_error(), "unknown CA");
  dlock__tls_cfg rogue = {.ca_file = e.f->rogue_ca_crt};
  ASSERT_DLOCK_ERR(tls_ping(&e, "127.0.0.1", &rogue), DLOCK_EAUTH);
  assert_contains(dlock_last_error(), "not trusted");
  dlock__tls_cfg insecure = {.insecure = 1};
  ASSERT_DLOCK_OK(tls_ping(&e, "127.0.0.1", &insecure));
  env_free(&e);
}

TEST(tls_transport_mutual_tls) {
  tls_env e;
  env_start(&e, "yes");
  dlock__tls_cfg cfg = {.ca_file = e.f->ca_crt,
                        .cert_file = e.f->client_crt,
                        .key_file = e.f->client_key};
  ASSERT_DLOCK_OK(tls_ping(&e, "127.0.0.1", &cfg));
  /* Without a certificate: TLS 1.3 reports it on the first read. */
  dlock__tls_cfg none = {.ca_file = e.f->ca_crt};
  ASSERT_DLOCK_ERR(tls_ping(&e, "127.0.0.1", &none), DLOCK_EAUTH);
  assert_names(dlock_last_error(), e.port);
  assert_contains(dlock_last_error(), "requires a client certificate");
  /* With one the server's CA did not sign. */
  dlock__tls_cfg rogue = {.ca_file = e.f->ca_crt,
                          .cert_file = e.f->rogue_client_crt,
                          .key_file = e.f->rogue_client_key};
  ASSERT_DLOCK_ERR(tls_ping(&e, "127.0.0.1", &rogue), DLOCK_EAUTH);
  assert_names(dlock_last_error(), e.port);
  assert_contains(dlock_last_error(), "refused the client certificate");
  env_free(&e);
}

TEST(tls_transport_plain_server_on_a_tls_url_fails_in_time) {
  tls_env e;
  env_start(&e, "no");
  dlock__tls *t = tls_trusting(e.f);
  dlock__net *n = NULL;
  int64_t start = test_now_ms();
  /* The plain port of the same server. It either answers the hello with
   * an error in plain text, or waits for the end of a line that never
   * comes, until the deadline. */
  int rc = net_connect("127.0.0.1", rp_port(e.s), t, 1500, &n);
  int64_t took = test_now_ms() - start;
  ASSERT_NULL(n);
  if (rc != DLOCK_EPROTO && rc != DLOCK_EIO)
    TEST_FAIL("got %s: %s", dlock_err_name(rc), dlock_last_error());
  assert_names(dlock_last_error(), rp_port(e.s));
  assert_contains(dlock_last_error(), "plain");
  assert_contains(dlock_last_error(), "redis://");
  ASSERT_LT(took, 1500 + 3000);
  dlock__tls_free(t);
  env_free(&e);
}

TEST(tls_transport_tls_server_on_a_plain_url_fails_fast) {
  tls_env e;
  env_start(&e, "no");
  dlock__net *n = NULL;
  ASSERT_DLOCK_OK(net_connect("127.0.0.1", e.port, NULL, BUDGET_MS, &n));
  int64_t start = test_now_ms();
  int rc = ping(n);
  if (rc != DLOCK_EPROTO && rc != DLOCK_EIO)
    TEST_FAIL("got %s: %s", dlock_err_name(rc), dlock_last_error());
  assert_names(dlock_last_error(), e.port);
  assert_contains(dlock_last_error(), "rediss://");
  ASSERT_LT(test_now_ms() - start, BUDGET_MS);
  assert_contains(dlock__net_error(n), "rediss://");
  dlock__net_close(n);
  env_free(&e);
}

TEST(tls_transport_paused_server_times_out_in_the_handshake) {
  tls_env e;
  env_start(&e, "no");
  ASSERT_EQ(rp_pause(e.s), 0);
  dlock__tls *t = tls_trusting(e.f);
  dlock__net *n = NULL;
  int64_t start = test_now_ms();
  /* The kernel completes the TCP connect for a stopped process. */
  ASSERT_DLOCK_ERR(net_connect("127.0.0.1", e.port, t, 800, &n), DLOCK_EIO);
  ASSERT_LT(test_now_ms() - start, 800 + 3000);
  assert_names(dlock_last_error(), e.port);
  assert_contains(dlock_last_error(), "no answer to the handshake");
  ASSERT_EQ(rp_resume(e.s), 0);
  dlock__tls_free(t);
  env_free(&e);
}

TEST(tls_settings_that_cannot_load_name_the_file) {
  tls_env e;
  ASSERT_EQ(tls_files_make(&e.f), 0);
  dlock__tls *t = NULL;
  dlock__tls_cfg missing = {.ca_file = "/nonexistent/ca.pem"};
  ASSERT_DLOCK_ERR(dlock__tls_new(&missing, &t), DLOCK_EINVAL);
  assert_contains(dlock_last_error(), "/nonexistent/ca.pem");
  dlock__tls_cfg not_dir = {.ca_dir = e.f->ca_crt};
  ASSERT_DLOCK_ERR(dlock__tls_new(&not_dir, &t), DLOCK_EINVAL);
  assert_contains(dlock_last_error(), e.f->ca_crt);
  dlock__tls_cfg no_key = {.cert_file = e.f->client_crt};
  ASSERT_DLOCK_ERR(dlock__tls_new(&no_key, &t), DLOCK_EINVAL);
  assert_contains(dlock_last_error(), "private key");
  dlock__tls_cfg other_key = {.cert_file = e.f->client_crt,
                              .key_file = e.f->other_key};
  ASSERT_DLOCK_ERR(dlock__tls_new(&other_key, &t), DLOCK_EINVAL);
  assert_contains(dlock_last_error(), "is not the key of");
  dlock__tls_cfg not_cert = {.cert_file = e.f->client_key,
                             .key_file = e.f->client_key};
  ASSERT_DLOCK_ERR(dlock__tls_new(&not_cert, &t), DLOCK_EINVAL);
  assert_contains(dlock_last_error(), e.f->client_key);
  ASSERT_NULL(t);
  tls_files_free(e.f);
}

/* ---- the client's TLS options ------------------------------------------- */

TEST(client_tls_options_are_checked_at_open) {
  tls_env e;
  ASSERT_EQ(tls_files_make(&e.f), 0);
  dlock_options_t o;
  dlock_options_init(&o);
  ASSERT_NULL(o.tls_ca_file);
  ASSERT_EQ(o.tls_insecure, 0);
  dlock_client_t *c = NULL;
  /* TLS options with a plain URL: refused rather than ignored. */
  o.url = "redis://127.0.0.1:1";
  o.tls_ca_file = e.f->ca_crt;
  ASSERT_DLOCK_ERR(dlock_client_open(&o, &c), DLOCK_EINVAL);
  assert_contains(dlock_last_error(), "rediss://");
  /* A file that cannot be read is named at open. */
  o.url = "rediss://127.0.0.1:1";
  o.tls_ca_file = "/nonexistent/ca.pem";
  ASSERT_DLOCK_ERR(dlock_client_open(&o, &c), DLOCK_EINVAL);
  assert_contains(dlock_last_error(), "/nonexistent/ca.pem");
  ASSERT_NULL(c);
  tls_files_free(e.f);
}
