/*
 * Bad input gets a clear error and leaves nothing behind: NULL and invalid
 * arguments, binary and hostile names, bad URLs, endpoints that are not
 * Redis (or not there), refused passwords and permissions, Redis error
 * replies (READONLY).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lock_util.h"

static void assert_detail(void) {
  const char *e = dlock_last_error();
  ASSERT_NOT_NULL(e);
  ASSERT_GT((int64_t)strlen(e), 0);
}

/* ---- NULL and invalid arguments ---------------------------------------- */

TEST(bad_null_arguments) {
  rp_server_t *s = lu_server(1);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = NULL;
  ASSERT_DLOCK_ERR(dlock_get(c, NULL, &l), DLOCK_EINVAL);
  assert_detail();
  ASSERT_NULL(l);
  ASSERT_DLOCK_ERR(dlock_get(c, "x", NULL), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_get(NULL, "x", &l), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_getn(c, NULL, 5, &l), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_getn(c, "x", 1, NULL), DLOCK_EINVAL);
  ASSERT_NULL(l);

  dlock_info_t *info = NULL;
  ASSERT_DLOCK_ERR(dlock_inspect(c, NULL, 3, &info), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_inspect(c, "x", 0, &info), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_inspect(c, "x", 1, NULL), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_inspect(NULL, "x", 1, &info), DLOCK_EINVAL);
  ASSERT_NULL(info);

  ASSERT_DLOCK_ERR(dlock_lock(NULL, 1000), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_trylock(NULL, 0, 1000), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_unlock(NULL), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_force_unlock(NULL), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_is_locked(NULL), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_is_held(NULL), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_hold_count(NULL), DLOCK_EINVAL);
  ASSERT_EQ(dlock_ttl(NULL), DLOCK_EINVAL);
  ASSERT_EQ(dlock_token(NULL), 0);
  ASSERT_EQ(lu_dbsize(s), 0);
  dlock_client_close(c);
  rp_free(s);
}

TEST(bad_empty_and_oversized_names) {
  rp_server_t *s = lu_server(0);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = NULL;
  ASSERT_DLOCK_ERR(dlock_get(c, "", &l), DLOCK_EINVAL);
  assert_detail();
  ASSERT_DLOCK_ERR(dlock_getn(c, "abc", 0, &l), DLOCK_EINVAL);

  /* One byte over the limit, and a few megabytes. */
  size_t big = (size_t)4 << 20;
  char *name = malloc(big + 1);
  ASSERT_NOT_NULL(name);
  memset(name, 'n', big);
  name[big] = '\0';
  ASSERT_DLOCK_ERR(dlock_getn(c, name, (size_t)DLOCK_NAME_MAX + 1, &l),
                   DLOCK_EINVAL);
  assert_detail();
  ASSERT_DLOCK_ERR(dlock_getn(c, name, big, &l), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_get(c, name, &l), DLOCK_EINVAL);
  dlock_info_t *info = NULL;
  ASSERT_DLOCK_ERR(dlock_inspect(c, name, big, &info), DLOCK_EINVAL);
  ASSERT_NULL(l);
  ASSERT_EQ(lu_dbsize(s), 0);

  /* Exactly the limit works end to end. */
  ASSERT_DLOCK_OK(dlock_getn(c, name, DLOCK_NAME_MAX, &l));
  ASSERT_DLOCK_OK(dlock_lock(l, 5000));
  ASSERT_EQ(lu_exists_n(s, name, DLOCK_NAME_MAX), 1);
  ASSERT_EQ(lu_exists_n(s, name, DLOCK_NAME_MAX - 1), 0);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  ASSERT_EQ(lu_exists_n(s, name, DLOCK_NAME_MAX), 0);
  dlock_free(l);
  free(name);
  dlock_client_close(c);
  rp_free(s);
}

TEST(bad_invalid_lease_and_wait) {
  rp_server_t *s = lu_server(1);
  dlock_client_t *c = lu_client(s);
  dlock_t *l = lu_get(c, "bad:lease");
  uint64_t o = dlock_owner_new();
  static const int64_t leases[] = {0, -2, -5, INT64_MIN};
  for (size_t i = 0; i < sizeof(leases) / sizeof(leases[0]); i++) {
    ASSERT_DLOCK_ERR(dlock_lock(l, leases[i]), DLOCK_EINVAL);
    assert_detail();
    ASSERT_DLOCK_ERR(dlock_trylock(l, 0, leases[i]), DLOCK_EINVAL);
    ASSERT_DLOCK_ERR(dlock_lock_as(l, o, leases[i]), DLOCK_EINVAL);
    ASSERT_DLOCK_ERR(dlock_trylock_as(l, o, 100, leases[i]), DLOCK_EINVAL);
  }
  ASSERT_DLOCK_ERR(dlock_trylock(l, -5, 1000), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_trylock(l, INT64_MIN, 1000), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_trylock_as(l, o, -2, 1000), DLOCK_EINVAL);
  ASSERT_EQ(dlock_is_held(l), 0);
  ASSERT_EQ(lu_dbsize(s), 0);
  /* Valid values still work on the same handle. */
  ASSERT_DLOCK_OK(dlock_trylock(l, DLOCK_WAIT_FOREVER, 1000));
  ASSERT_DLOCK_OK(dlock_unlock(l));
  ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));
  ASSERT_DLOCK_OK(dlock_unlock(l));
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

TEST(bad_invalid_options) {
  rp_server_t *s = lu_server(0);
  struct {
    const char *what;
    int64_t connect, command, watchdog, fair;
    int retries;
  } cases[] = {
      {"connect_timeout_ms -5", -5, 2000, 600, 300000, 2},
      {"command_timeout_ms -5", 2000, -5, 600, 300000, 2},
      {"watchdog_timeout_ms 0", 2000, 2000, 0, 300000, 2},
      {"watchdog_timeout_ms -5", 2000, 2000, -5, 300000, 2},
      {"unlock_retries -1", 2000, 2000, 600, 300000, -1},
      {"fair_wait_timeout_ms -5", 2000, 2000, 600, -5, 2},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    dlock_options_t o;
    lu_options(&o, s);
    o.connect_timeout_ms = cases[i].connect;
    o.command_timeout_ms = cases[i].command;
    o.watchdog_timeout_ms = cases[i].watchdog;
    o.fair_wait_timeout_ms = cases[i].fair;
    o.unlock_retries = cases[i].retries;
    dlock_client_t *c = NULL;
    int rc = dlock_client_open(&o, &c);
    printf("%s: %s \"%s\"\n", cases[i].what, dlock_err_name(rc),
           dlock_last_error());
    ASSERT_DLOCK_ERR(rc, DLOCK_EINVAL);
    assert_detail();
    ASSERT_NULL(c);
  }
  /* The defaults themselves are accepted. */
  dlock_options_t o;
  dlock_options_init(&o);
  o.url = rp_url(s);
  dlock_client_t *c = lu_client_opts(&o);
  dlock_client_close(c);
  ASSERT_EQ(lu_dbsize(s), 0);
  rp_free(s);
}

/* ---- names with binary bytes and hostile text --------------------------- */

static void check_name_roundtrip(rp_server_t *s, dlock_client_t *c,
                                 dlock_client_t *other, const char *name,
                                 size_t len) {
  dlock_t *l = NULL, *m = NULL;
  ASSERT_DLOCK_OK(dlock_getn(c, name, len, &l));
  ASSERT_DLOCK_OK(dlock_getn(other, name, len, &m));
  size_t got = 0;
  const char *n = dlock_name(l, &got);
  ASSERT_EQ(got, len);
  ASSERT(memcmp(n, name, len) == 0);
  ASSERT_EQ(n[len], '\0');

  char f[256];
  lu_field(f, sizeof(f), c, dlock_self());
  ASSERT_DLOCK_OK(dlock_lock(l, 5000));
  ASSERT_EQ(lu_hexists_n(s, name, len, f), 1);
  ASSERT_GT(lu_pttl_n(s, name, len), 0);
  char tk[512];
  size_t tkn = lu_token_key(tk, sizeof(tk), name, len);
  ASSERT_EQ(lu_get_num_n(s, tk, tkn), (int64_t)dlock_token(l));
  /* The other client sees it held under exactly these bytes. */
  ASSERT_EQ(dlock_is_locked(m), 1);
  ASSERT_DLOCK_ERR(dlock_trylock(m, 0, 5000), DLOCK_ETIMEDOUT);

  dlock_info_t *info = NULL;
  ASSERT_DLOCK_OK(dlock_inspect(c, name, len, &info));
  ASSERT_EQ(info->locked, 1);
  ASSERT_EQ(info->nholders, 1);
  ASSERT_STR_EQ(info->holders[0].owner, f);
  dlock_info_free(info);

  char ch[512];
  size_t chn = lu_channel(ch, sizeof(ch), name, len);
  redisContext *sub = lu_subscribe(s, ch, chn);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  char msg[32];
  ASSERT_EQ(lu_sub_wait(sub, 2000, msg, sizeof(msg), NULL, 0), 1);
  ASSERT_STR_EQ(msg, "0");
  redisFree(sub);
  ASSERT_EQ(lu_exists_n(s, name, len), 0);
  ASSERT_DLOCK_OK(dlock_trylock(m, 0, 5000));
  ASSERT_DLOCK_OK(dlock_unlock(m));
  dlock_free(l);
  dlock_free(m);
}

/* Every key on the server is the sentinel or a lock's token or latch. */
static void assert_only_bookkeeping_keys(rp_server_t *s) {
  redisReply *r = rp_cmd(s, "KEYS *");
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->type, REDIS_REPLY_ARRAY);
  for (size_t i = 0; i < r->elements; i++) {
    const char *k = r->element[i]->str;
    size_t kl = r->element[i]->len;
    int ok = (kl == 8 && memcmp(k, "sentinel", 8) == 0) ||
             strncmp(k, "redisson_lock_token:", 20) == 0 ||
             strncmp(k, "redisson_unlock_latch:", 22) == 0;
    if (!ok)
      fprintf(stderr, "unexpected key left: %.*s\n", (int)kl, k);
    ASSERT(ok);
  }
  freeReplyObject(r);
  r = rp_cmd(s, "GET sentinel");
  ASSERT_NOT_NULL(r);
  ASSERT_STR_EQ(r->str, "keep");
  freeReplyObject(r);
}

TEST(bad_binary_names) {
  rp_server_t *s = lu_server(1);
  lu_ok(rp_cmd(s, "SET sentinel keep"));
  dlock_client_t *c = lu_client(s);
  dlock_client_t *c2 = lu_client(s);
  static const char n1[] = "bin\0ary\xff\x01\r\n end";
  check_name_roundtrip(s, c, c2, n1, sizeof(n1) - 1);
  /* The prefix before the NUL is another lock, untouched. */
  ASSERT_EQ(lu_exists(s, "bin"), 0);
  static const char n2[] = "\0";
  check_name_roundtrip(s, c, c2, n2, 1);
  static const char n3[] = "\0{tag}\0";
  check_name_roundtrip(s, c, c2, n3, sizeof(n3) - 1);
  char all[256];
  for (int i = 0; i < 256; i++)
    all[i] = (char)i;
  check_name_roundtrip(s, c, c2, all, sizeof(all));
  /* Two names differing only after a NUL are two locks. */
  dlock_t *a = NULL, *b = NULL;
  ASSERT_DLOCK_OK(dlock_getn(c, "k\0a", 3, &a));
  ASSERT_DLOCK_OK(dlock_getn(c2, "k\0b", 3, &b));
  ASSERT_DLOCK_OK(dlock_lock(a, 5000));
  ASSERT_DLOCK_OK(dlock_trylock(b, 0, 5000));
  ASSERT_DLOCK_OK(dlock_unlock(a));
  ASSERT_DLOCK_OK(dlock_unlock(b));
  dlock_free(a);
  dlock_free(b);
  assert_only_bookkeeping_keys(s);
  dlock_client_close(c);
  dlock_client_close(c2);
  rp_free(s);
}

TEST(bad_hostile_names) {
  rp_server_t *s = lu_server(0);
  lu_ok(rp_cmd(s, "SET sentinel keep"));
  dlock_client_t *c = lu_client(s);
  dlock_client_t *c2 = lu_client(s);
  static const char *names[] = {
      "\"",
      "'",
      "'); redis.call('flushall') --",
      "\"); redis.call('flushall') --",
      "]]; redis.call('flushall'); --[[",
      "{",
      "}",
      "{}",
      "}{",
      "a{b}c",
      "%s%s%n%x",
      "*",
      "?",
      "[a-z]",
      "\\",
      " ",
      "\r\n*1\r\n$8\r\nFLUSHALL\r\n",
      "redisson_lock__channel:{x}",
      "sentinel:",
      "KEYS[1]",
      "ARGV[1]",
      "\xc3\xa9t\xc3\xa9 \xe9\x8e\x96",
  };
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    check_name_roundtrip(s, c, c2, names[i], strlen(names[i]));
  assert_only_bookkeeping_keys(s);
  dlock_client_close(c);
  dlock_client_close(c2);
  rp_free(s);
}

/* ---- URLs and endpoints ------------------------------------------------ */

static int open_url(const char *url, int64_t connect_ms, int64_t command_ms,
                    dlock_client_t **out) {
  dlock_options_t o;
  dlock_options_init(&o);
  o.url = url;
  o.connect_timeout_ms = connect_ms;
  o.command_timeout_ms = command_ms;
  *out = NULL;
  return dlock_client_open(&o, out);
}

TEST(bad_urls) {
  static const char *bad[] = {
      "",
      "http://x",
      "redis://host:notaport",
      "redis://:99999",
      "redis://127.0.0.1:99999",
      "redis://127.0.0.1:0",
      "redis://127.0.0.1:6379/notadb",
      "unix://",
      "unix://relative.sock",
      "unix:///tmp/x.sock?db=zz",
      "127.0.0.1:6379",
      "redis:///",
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    dlock_client_t *c = NULL;
    int64_t t0 = lu_now_ms();
    int rc = open_url(bad[i], 2000, 2000, &c);
    printf("\"%s\": %s \"%s\"\n", bad[i], dlock_err_name(rc),
           dlock_last_error());
    ASSERT_DLOCK_ERR(rc, DLOCK_EINVAL);
    assert_detail();
    ASSERT_NULL(c);
    ASSERT_LT(lu_now_ms() - t0, 500); /* refused before any connect */
  }
}

TEST(bad_url_password_not_in_detail) {
  dlock_client_t *c = NULL;
  ASSERT_DLOCK_ERR(
      open_url("redis://u:hunter2@127.0.0.1:notaport", 500, 500, &c),
      DLOCK_EINVAL);
  ASSERT_NULL(strstr(dlock_last_error(), "hunter2"));
}

/* A free port: bound, then closed, so nothing listens there. */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  ASSERT_EQ(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
  socklen_t al = sizeof(a);
  ASSERT_EQ(getsockname(fd, (struct sockaddr *)&a, &al), 0);
  close(fd);
  return ntohs(a.sin_port);
}

TEST(bad_port_without_redis) {
  char url[64];
  int port = free_port();
  snprintf(url, sizeof(url), "redis://127.0.0.1:%d", port);
  dlock_client_t *c = NULL;
  int64_t t0 = lu_now_ms();
  int rc = open_url(url, 2000, 2000, &c);
  int64_t took = lu_now_ms() - t0;
  printf("%s: %s \"%s\" in %" PRId64 " ms\n", url, dlock_err_name(rc),
         dlock_last_error(), took);
  ASSERT_DLOCK_ERR(rc, DLOCK_EIO);
  ASSERT_NULL(c);
  ASSERT(strstr(dlock_last_error(), "efused") != NULL);
  ASSERT_LT(took, 1000);

  /* A unix socket path where nothing listens. */
  rc = open_url("unix:///nonexistent-dir-dlock/redis.sock", 2000, 2000, &c);
  printf("missing socket: %s \"%s\"\n", dlock_err_name(rc), dlock_last_error());
  ASSERT_DLOCK_ERR(rc, DLOCK_EIO);
  assert_detail();
  ASSERT_NULL(c);
}

/* A fake server on a loopback port, run by a thread. */
enum fake_mode { FAKE_HTTP, FAKE_GARBAGE, FAKE_SILENT };

typedef struct fake {
  int fd;
  int port;
  enum fake_mode mode;
  atomic_int stop;
  atomic_int accepted;
  pthread_t thread;
  int conns[64];
  int nconns;
} fake_t;

static void *fake_run(void *p) {
  fake_t *f = p;
  while (!atomic_load(&f->stop)) {
    struct pollfd pfd = {f->fd, POLLIN, 0};
    if (poll(&pfd, 1, 50) <= 0)
      continue;
    int cfd = accept(f->fd, NULL, NULL);
    if (cfd < 0)
      continue;
    atomic_fetch_add(&f->accepted, 1);
    if (f->mode == FAKE_HTTP) {
      static const char resp[] = "HTTP/1.1 400 Bad Request\r\n\r\n";
      /* Let the client send its first command, then answer like a web
       * server and hang up. */
      struct pollfd cp = {cfd, POLLIN, 0};
      poll(&cp, 1, 500);
      char buf[512];
      if (read(cfd, buf, sizeof(buf)) < 0) {
      }
      if (write(cfd, resp, sizeof(resp) - 1) < 0) {
      }
      close(cfd);
    } else if (f->mode == FAKE_GARBAGE) {
      static const char junk[] = "\x01\x02\x7fgarbage that is not RESP\r\n";
      if (write(cfd, junk, sizeof(junk) - 1) < 0) {
      }
      if (f->nconns < 64)
        f->conns[f->nconns++] = cfd;
      else
        close(cfd);
    } else {
      if (f->nconns < 64)
        f->conns[f->nconns++] = cfd;
      else
        close(cfd);
    }
  }
  return NULL;
}

static void fake_start(fake_t *f, enum fake_mode mode) {
  memset(f, 0, sizeof(*f));
  f->mode = mode;
  atomic_init(&f->stop, 0);
  atomic_init(&f->accepted, 0);
  f->fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(f->fd, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(f->fd, (struct sockaddr *)&a, sizeof(a)), 0);
  ASSERT_EQ(listen(f->fd, 16), 0);
  socklen_t al = sizeof(a);
  ASSERT_EQ(getsockname(f->fd, (struct sockaddr *)&a, &al), 0);
  f->port = ntohs(a.sin_port);
  ASSERT_EQ(pthread_create(&f->thread, NULL, fake_run, f), 0);
}

static void fake_stop(fake_t *f) {
  atomic_store(&f->stop, 1);
  pthread_join(f->thread, NULL);
  for (int i = 0; i < f->nconns; i++)
    close(f->conns[i]);
  close(f->fd);
}

static void check_not_redis(enum fake_mode mode, const char *what) {
  fake_t f;
  fake_start(&f, mode);
  char url[64];
  snprintf(url, sizeof(url), "redis://127.0.0.1:%d", f.port);
  dlock_client_t *c = NULL;
  int64_t t0 = lu_now_ms();
  int rc = open_url(url, 1000, 1000, &c);
  int64_t took = lu_now_ms() - t0;
  printf("%s: %s \"%s\" in %" PRId64 " ms\n", what, dlock_err_name(rc),
         dlock_last_error(), took);
  ASSERT(rc == DLOCK_EPROTO || rc == DLOCK_EIO);
  if (mode == FAKE_GARBAGE)
    ASSERT_DLOCK_ERR(rc, DLOCK_EPROTO);
  assert_detail();
  ASSERT_NULL(c);
  ASSERT_GE(atomic_load(&f.accepted), 1);
  ASSERT_LT(took, 4000);
  fake_stop(&f);
}

TEST(bad_http_server) { check_not_redis(FAKE_HTTP, "HTTP server"); }

TEST(bad_garbage_server) { check_not_redis(FAKE_GARBAGE, "garbage server"); }

TEST(bad_silent_server) {
  fake_t f;
  fake_start(&f, FAKE_SILENT);
  char url[64];
  snprintf(url, sizeof(url), "redis://127.0.0.1:%d", f.port);
  dlock_client_t *c = NULL;
  int64_t t0 = lu_now_ms();
  int rc = open_url(url, 500, 500, &c);
  int64_t took = lu_now_ms() - t0;
  printf("silent server: %s \"%s\" in %" PRId64 " ms\n", dlock_err_name(rc),
         dlock_last_error(), took);
  ASSERT_DLOCK_ERR(rc, DLOCK_EIO);
  assert_detail();
  ASSERT_NULL(c);
  /* Bounded by the connect and command timeouts (500 + 500), not more. */
  ASSERT_LT(took, 3000);
  fake_stop(&f);
}

/* ---- authentication and permissions ------------------------------------ */

static void check_refused(const char *url) {
  dlock_client_t *c = NULL;
  int rc = open_url(url, 2000, 2000, &c);
  printf("%s: %s \"%s\"\n", url, dlock_err_name(rc), dlock_last_error());
  if (rc == 0) {
    /* Accepted at open: the first command must be refused then. */
    dlock_t *l = lu_get(c, "bad:auth");
    rc = dlock_trylock(l, 0, 5000);
    printf("  first lock: %s \"%s\"\n", dlock_err_name(rc), dlock_last_error());
    dlock_free(l);
    dlock_client_close(c);
  } else {
    ASSERT_NULL(c);
  }
  ASSERT_DLOCK_ERR(rc, DLOCK_EAUTH);
  assert_detail();
}

TEST(bad_wrong_password) {
  rp_options_t ro;
  rp_options_init(&ro);
  ro.requirepass = "s3cret";
  rp_server_t *s = lu_server_opts(&ro);
  char url[256];
  snprintf(url, sizeof(url), "redis://:hunter2x@127.0.0.1:%d", rp_port(s));
  dlock_client_t *c = NULL;
  int rc = open_url(url, 2000, 2000, &c);
  printf("wrong password: %s \"%s\"\n", dlock_err_name(rc), dlock_last_error());
  ASSERT_DLOCK_ERR(rc, DLOCK_EAUTH);
  ASSERT_NULL(c);
  assert_detail();
  ASSERT_NULL(strstr(dlock_last_error(), "hunter2x"));

  /* No password at all. */
  snprintf(url, sizeof(url), "redis://127.0.0.1:%d", rp_port(s));
  check_refused(url);
  ASSERT_EQ(lu_dbsize(s), 0);

  /* The right one (rp_url carries it) works. */
  dlock_client_t *ok = lu_client(s);
  dlock_t *l = lu_get(ok, "bad:auth");
  ASSERT_DLOCK_OK(dlock_lock(l, 5000));
  ASSERT_EQ(lu_exists(s, "bad:auth"), 1);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  dlock_free(l);
  dlock_client_close(ok);
  ASSERT_EQ(lu_exists(s, "bad:auth"), 0);
  rp_free(s);
}

TEST(bad_wrong_password_unix) {
  rp_options_t ro;
  rp_options_init(&ro);
  ro.unix_socket = 1;
  ro.requirepass = "s3cret";
  rp_server_t *s = lu_server_opts(&ro);
  char url[512];
  snprintf(url, sizeof(url), "unix://:wrong@%s", rp_socket(s));
  dlock_client_t *c = NULL;
  ASSERT_DLOCK_ERR(open_url(url, 2000, 2000, &c), DLOCK_EAUTH);
  ASSERT_NULL(c);
  dlock_client_t *ok = lu_client(s);
  dlock_t *l = lu_get(ok, "bad:authu");
  ASSERT_DLOCK_OK(dlock_lock(l, 5000));
  ASSERT_DLOCK_OK(dlock_unlock(l));
  dlock_free(l);
  dlock_client_close(ok);
  rp_free(s);
}

TEST(bad_acl_users) {
  rp_server_t *s = lu_server(0);
  lu_ok(rp_cmd(s, "ACL SETUSER alice on >alicepw ~* &* +@all"));
  lu_ok(rp_cmd(s, "ACL SETUSER bob on >bobpw ~allowed:* ~redisson_* &* +@all"));
  char url[256];

  snprintf(url, sizeof(url), "redis://alice:nope@127.0.0.1:%d", rp_port(s));
  dlock_client_t *c = NULL;
  ASSERT_DLOCK_ERR(open_url(url, 2000, 2000, &c), DLOCK_EAUTH);
  ASSERT_NULL(c);
  snprintf(url, sizeof(url), "redis://nobody:x@127.0.0.1:%d", rp_port(s));
  ASSERT_DLOCK_ERR(open_url(url, 2000, 2000, &c), DLOCK_EAUTH);

  snprintf(url, sizeof(url), "redis://alice:alicepw@127.0.0.1:%d", rp_port(s));
  ASSERT_DLOCK_OK(open_url(url, 2000, 2000, &c));
  dlock_t *l = lu_get(c, "bad:alice");
  ASSERT_DLOCK_OK(dlock_lock(l, 5000));
  ASSERT_DLOCK_OK(dlock_unlock(l));
  dlock_free(l);
  dlock_client_close(c);

  /* bob may only touch allowed:* (and the lock bookkeeping keys). */
  snprintf(url, sizeof(url), "redis://bob:bobpw@127.0.0.1:%d", rp_port(s));
  ASSERT_DLOCK_OK(open_url(url, 2000, 2000, &c));
  l = lu_get(c, "allowed:x");
  ASSERT_DLOCK_OK(dlock_lock(l, 5000));
  ASSERT_DLOCK_OK(dlock_unlock(l));
  dlock_free(l);
  l = lu_get(c, "denied:x");
  int rc = dlock_trylock(l, 0, 5000);
  printf("denied key: %s \"%s\"\n", dlock_err_name(rc), dlock_last_error());
  ASSERT_DLOCK_ERR(rc, DLOCK_EAUTH);
  ASSERT(strstr(dlock_last_error(), "NOPERM") != NULL);
  ASSERT_EQ(lu_exists(s, "denied:x"), 0);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

TEST(bad_name_of_other_type) {
  /* The name is taken by a key of another type: a clear Redis error,
   * and the key is left as it was. */
  rp_server_t *s = lu_server(1);
  dlock_client_t *c = lu_client(s);
  lu_ok(rp_cmd(s, "SET bad:str hello"));
  dlock_t *l = lu_get(c, "bad:str");
  int rc = dlock_trylock(l, 0, 5000);
  printf("lock on a string key: %s \"%s\"\n", dlock_err_name(rc),
         dlock_last_error());
  ASSERT_DLOCK_ERR(rc, DLOCK_ESERVER);
  ASSERT(strstr(dlock_last_error(), "WRONGTYPE") != NULL);
  int64_t t0 = lu_now_ms();
  ASSERT_DLOCK_ERR(dlock_lock(l, 5000), DLOCK_ESERVER);
  ASSERT_LT(lu_now_ms() - t0, 2000);
  ASSERT_EQ(dlock_token(l), 0);
  redisReply *r = rp_cmd(s, "GET bad:str");
  ASSERT_NOT_NULL(r);
  ASSERT_STR_EQ(r->str, "hello");
  freeReplyObject(r);
  ASSERT_EQ(lu_pttl(s, "bad:str"), -1);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}

TEST(bad_database_out_of_range) {
  rp_server_t *s = lu_server(0);
  char url[128];
  snprintf(url, sizeof(url), "redis://127.0.0.1:%d/99999", rp_port(s));
  dlock_client_t *c = NULL;
  int rc = open_url(url, 2000, 2000, &c);
  printf("db 99999: %s \"%s\"\n", dlock_err_name(rc), dlock_last_error());
  ASSERT(rc == DLOCK_ESERVER || rc == DLOCK_EINVAL);
  assert_detail();
  ASSERT_NULL(c);
  rp_free(s);
}

/* ---- READONLY replica -------------------------------------------------- */

static int replica_link_up(rp_server_t *r) {
  redisReply *rep = rp_cmd(r, "INFO replication");
  if (rep == NULL)
    return 0;
  int up = rep->type == REDIS_REPLY_STRING &&
           strstr(rep->str, "master_link_status:up") != NULL;
  freeReplyObject(rep);
  return up;
}

TEST(bad_readonly_replica) {
  rp_server_t *m = lu_server(0);
  rp_server_t *r = lu_server(1);
  /* Sync at once instead of waiting for more replicas (default 5 s). */
  lu_ok(rp_cmd(m, "CONFIG SET repl-diskless-sync-delay 0"));
  lu_ok(rp_cmd(r, "REPLICAOF 127.0.0.1 %d", rp_port(m)));
  int64_t t0 = lu_now_ms();
  while (!replica_link_up(r) && lu_now_ms() - t0 < 10000)
    lu_sleep_ms(50);
  ASSERT(replica_link_up(r));

  /* READONLY is what a master demoted by a failover answers: a call with
   * time to wait rides it out (for outage_wait_ms here), then reports it. */
  dlock_options_t o;
  lu_options(&o, r);
  o.outage_wait_ms = 1000;
  dlock_client_t *c = lu_client_opts(&o);
  dlock_t *l = lu_get(c, "bad:ro");
  int rc = dlock_trylock(l, 0, 5000);
  printf("lock on a replica: %s \"%s\"\n", dlock_err_name(rc),
         dlock_last_error());
  ASSERT_DLOCK_ERR(rc, DLOCK_EIO);
  ASSERT(strstr(dlock_last_error(), "READONLY") != NULL);
  t0 = lu_now_ms();
  ASSERT_DLOCK_ERR(dlock_lock(l, DLOCK_WATCHDOG), DLOCK_EIO);
  printf("dlock_lock: \"%s\" after %" PRId64 " ms\n", dlock_last_error(),
         lu_now_ms() - t0);
  ASSERT(strstr(dlock_last_error(), "READONLY") != NULL);
  ASSERT_GE(lu_now_ms() - t0, 900);
  ASSERT_LT(lu_now_ms() - t0, 10000);
  ASSERT_EQ(dlock_is_held(l), 0);
  /* Reads work on a replica. */
  ASSERT_EQ(dlock_is_locked(l), 0);
  ASSERT_EQ(lu_exists(m, "bad:ro"), 0);
  ASSERT_EQ(lu_dbsize(m), 0);
  ASSERT_EQ(lu_dbsize(r), 0);
  dlock_free(l);
  dlock_client_close(c);
  rp_free(r);
  rp_free(m);
}
