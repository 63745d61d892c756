/*
 * Unit tests of the URL parser (src/proto/url.c): every accepted form, and
 * rejection of malformed URLs with a detail that never shows the password.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <string.h>

#include "../src/proto/url.h"
#include "dlock.h"
#include "harness/test.h"

static void parse_ok(const char *url, dlock__endpoint *e) {
  int rc = dlock__url_parse(url, e);
  if (rc != 0)
    fprintf(stderr, "url %s: %s\n", url, dlock_last_error());
  ASSERT_EQ(rc, 0);
}

TEST(url_tcp_minimal) {
  dlock__endpoint e;
  parse_ok("redis://localhost", &e);
  ASSERT_STR_EQ(e.host, "localhost");
  ASSERT_EQ(e.port, 6379);
  ASSERT_NULL(e.path);
  ASSERT_NULL(e.user);
  ASSERT_NULL(e.pass);
  ASSERT_EQ(e.db, 0);
  dlock__endpoint_free(&e);
  ASSERT_NULL(e.host);
}

TEST(url_tcp_full) {
  dlock__endpoint e;
  parse_ok("redis://alice:s3cret@10.1.2.3:7001/5", &e);
  ASSERT_STR_EQ(e.host, "10.1.2.3");
  ASSERT_EQ(e.port, 7001);
  ASSERT_STR_EQ(e.user, "alice");
  ASSERT_STR_EQ(e.pass, "s3cret");
  ASSERT_EQ(e.db, 5);
  ASSERT_NULL(e.path);
  dlock__endpoint_free(&e);
}

TEST(url_tls) {
  dlock__endpoint e;
  parse_ok("redis://h", &e);
  ASSERT_EQ(e.tls, 0);
  dlock__endpoint_free(&e);
  parse_ok("rediss://bob:pw@redis.example.com:6380/2", &e);
  ASSERT_EQ(e.tls, 1);
  ASSERT_STR_EQ(e.host, "redis.example.com");
  ASSERT_EQ(e.port, 6380);
  ASSERT_STR_EQ(e.user, "bob");
  ASSERT_STR_EQ(e.pass, "pw");
  ASSERT_EQ(e.db, 2);
  dlock__endpoint_free(&e);
  ASSERT_EQ(e.tls, 0);
  parse_ok("rediss://[::1]", &e);
  ASSERT_EQ(e.tls, 1);
  ASSERT_STR_EQ(e.host, "::1");
  ASSERT_EQ(e.port, 6379);
  dlock__endpoint_free(&e);
  parse_ok("unix:///tmp/x.sock", &e);
  ASSERT_EQ(e.tls, 0);
  dlock__endpoint_free(&e);
}

TEST(url_tcp_password_only) {
  dlock__endpoint e;
  parse_ok("redis://:pw@127.0.0.1:6380", &e);
  ASSERT_NULL(e.user);
  ASSERT_STR_EQ(e.pass, "pw");
  ASSERT_EQ(e.port, 6380);
  ASSERT_EQ(e.db, 0);
  dlock__endpoint_free(&e);
}

TEST(url_tcp_trailing_slash_and_port_bounds) {
  dlock__endpoint e;
  parse_ok("redis://h:1/", &e);
  ASSERT_EQ(e.port, 1);
  ASSERT_EQ(e.db, 0);
  dlock__endpoint_free(&e);
  parse_ok("redis://h:65535/0", &e);
  ASSERT_EQ(e.port, 65535);
  dlock__endpoint_free(&e);
}

TEST(url_tcp_ipv6) {
  dlock__endpoint e;
  parse_ok("redis://[::1]:6390/2", &e);
  ASSERT_STR_EQ(e.host, "::1");
  ASSERT_EQ(e.port, 6390);
  ASSERT_EQ(e.db, 2);
  dlock__endpoint_free(&e);
  parse_ok("redis://[fe80::1]", &e);
  ASSERT_STR_EQ(e.host, "fe80::1");
  ASSERT_EQ(e.port, 6379);
  dlock__endpoint_free(&e);
}

TEST(url_percent_encoded_credentials) {
  dlock__endpoint e;
  parse_ok("redis://us%40er:p%3Aa%2Fss%40@host:1234", &e);
  ASSERT_STR_EQ(e.user, "us@er");
  ASSERT_STR_EQ(e.pass, "p:a/ss@");
  ASSERT_STR_EQ(e.host, "host");
  ASSERT_EQ(e.port, 1234);
  dlock__endpoint_free(&e);
}

TEST(url_unix) {
  dlock__endpoint e;
  parse_ok("unix:///tmp/redis.sock", &e);
  ASSERT_STR_EQ(e.path, "/tmp/redis.sock");
  ASSERT_NULL(e.host);
  ASSERT_EQ(e.db, 0);
  dlock__endpoint_free(&e);
  parse_ok("unix:///var/run/r.sock?db=3", &e);
  ASSERT_STR_EQ(e.path, "/var/run/r.sock");
  ASSERT_EQ(e.db, 3);
  dlock__endpoint_free(&e);
  parse_ok("unix://:pw@/tmp/x.sock", &e);
  ASSERT_STR_EQ(e.path, "/tmp/x.sock");
  ASSERT_STR_EQ(e.pass, "pw");
  dlock__endpoint_free(&e);
}

static void parse_bad(const char *url) {
  dlock__endpoint e;
  memset(&e, 0x5A, sizeof(e));
  int rc = dlock__url_parse(url, &e);
  if (rc != DLOCK_EINVAL)
    fprintf(stderr, "url \"%s\": expected DLOCK_EINVAL, got %d\n",
            url ? url : "(null)", rc);
  ASSERT_EQ(rc, DLOCK_EINVAL);
  ASSERT_GT((int64_t)strlen(dlock_last_error()), 0);
  /* A failed parse leaves nothing allocated. */
  ASSERT_NULL(e.host);
  ASSERT_NULL(e.path);
  ASSERT_NULL(e.user);
  ASSERT_NULL(e.pass);
  dlock__endpoint_free(&e);
}

TEST(url_invalid) {
  static const char *bad[] = {
      "",
      "http://x",
      "redis:/x",
      "redis//x",
      "REDIS",
      "redis://",
      "redis://:6379",
      "redis://host:notaport",
      "redis://host:",
      "redis://:99999",
      "redis://host:99999",
      "redis://host:0",
      "redis://host:-1",
      "redis://host:65536",
      "redis://host:12345678901234",
      "redis://host/abc",
      "redis://host/-1",
      "redis://host/1x",
      "redis://[::1",
      "redis://[::1]x",
      "redis://u:p%zz@host",
      "redis://u%4:p@host",
      "redis://u:p%00@host",
      "unix://",
      "unix://relative/path",
      "unix:///tmp/x.sock?db=abc",
      "unix:///tmp/x.sock?foo=1",
      "unix:///tmp/x.sock?db=",
      "rediss://",
      "rediss://host:0",
      "rediss:/host",
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    parse_bad(bad[i]);
  parse_bad(NULL);
}

TEST(url_unix_path_too_long) {
  char url[400];
  strcpy(url, "unix:///");
  memset(url + 8, 'a', 200);
  url[208] = '\0';
  parse_bad(url);
}

TEST(url_error_hides_password) {
  dlock__endpoint e;
  ASSERT_EQ(dlock__url_parse("redis://u:topsecret@host:notaport", &e),
            DLOCK_EINVAL);
  ASSERT_NULL(strstr(dlock_last_error(), "topsecret"));
  ASSERT_EQ(dlock__url_parse("ftp://u:topsecret@host", &e), DLOCK_EINVAL);
  ASSERT_NULL(strstr(dlock_last_error(), "topsecret"));
  ASSERT_EQ(dlock__url_parse("redis://u:topsecret@host/zz", &e), DLOCK_EINVAL);
  ASSERT_NULL(strstr(dlock_last_error(), "topsecret"));
}

TEST(url_error_marks_a_cut_quote) {
  dlock__endpoint e;
  /* A short URL is quoted whole; a long one in part, with an ellipsis. */
  ASSERT_EQ(dlock__url_parse("http://short", &e), DLOCK_EINVAL);
  ASSERT_NOT_NULL(strstr(dlock_last_error(), "(got \"http://short\")"));
  ASSERT_EQ(
      dlock__url_parse("http://a-rather-long-host-name.example.com:6379/2", &e),
      DLOCK_EINVAL);
  ASSERT_NOT_NULL(
      strstr(dlock_last_error(),
             "(got \"http://a-rather-long-host-name.example.c...\")"));
  /* Exactly 40 bytes is not cut. */
  ASSERT_EQ(dlock__url_parse("http://012345678901234567890123456789012", &e),
            DLOCK_EINVAL);
  ASSERT_NOT_NULL(strstr(dlock_last_error(),
                         "(got \"http://012345678901234567890123456789012\")"));
}

TEST(url_describe_hides_password) {
  dlock__endpoint e;
  char buf[256];
  parse_ok("redis://u:topsecret@myhost:7000/1", &e);
  dlock__endpoint_describe(&e, buf, sizeof(buf));
  ASSERT(strstr(buf, "myhost") != NULL);
  ASSERT(strstr(buf, "7000") != NULL);
  ASSERT_NULL(strstr(buf, "topsecret"));
  dlock__endpoint_free(&e);
  parse_ok("unix://:topsecret@/tmp/d.sock", &e);
  dlock__endpoint_describe(&e, buf, sizeof(buf));
  ASSERT(strstr(buf, "/tmp/d.sock") != NULL);
  ASSERT_NULL(strstr(buf, "topsecret"));
  /* A tiny buffer is still NUL-terminated. */
  memset(buf, 'x', sizeof(buf));
  dlock__endpoint_describe(&e, buf, 4);
  ASSERT_LE((int64_t)strlen(buf), 3);
  dlock__endpoint_free(&e);
}

TEST(url_free_zeroed_is_safe) {
  dlock__endpoint e;
  memset(&e, 0, sizeof(e));
  dlock__endpoint_free(&e);
  dlock__endpoint_free(&e);
  ASSERT_NULL(e.host);
}

/* ---- Sentinel URLs ------------------------------------------------------ */

TEST(url_sentinel_forms) {
  dlock__sentinel_url u;
  int rc = dlock__url_parse_sentinel(
      "redis-sentinel://app:pw%40x@s1:26380,10.0.0.2,[::1]:26381,[fe80::1]/"
      "my%2Dmaster?db=3&sentinel_password=sp%26w",
      &u);
  if (rc != 0)
    fprintf(stderr, "%s\n", dlock_last_error());
  ASSERT_EQ(rc, 0);
  ASSERT_EQ(u.n, 4);
  ASSERT_STR_EQ(u.sentinels[0].host, "s1");
  ASSERT_EQ(u.sentinels[0].port, 26380);
  ASSERT_STR_EQ(u.sentinels[1].host, "10.0.0.2");
  ASSERT_EQ(u.sentinels[1].port, 26379);
  ASSERT_STR_EQ(u.sentinels[2].host, "::1");
  ASSERT_EQ(u.sentinels[2].port, 26381);
  ASSERT_STR_EQ(u.sentinels[3].host, "fe80::1");
  ASSERT_EQ(u.sentinels[3].port, 26379);
  for (size_t i = 0; i < u.n; i++) {
    ASSERT_NULL(u.sentinels[i].user);
    ASSERT_STR_EQ(u.sentinels[i].pass, "sp&w");
  }
  ASSERT_STR_EQ(u.master, "my-master");
  ASSERT_STR_EQ(u.data.user, "app");
  ASSERT_STR_EQ(u.data.pass, "pw@x");
  ASSERT_EQ(u.data.db, 3);
  ASSERT_NULL(u.data.host);
  dlock__sentinel_url_free(&u);
  ASSERT_EQ(u.n, 0);

  rc = dlock__url_parse_sentinel("redis-sentinel://h/m?sentinel_user=su&"
                                 "sentinel_password=sp",
                                 &u);
  ASSERT_EQ(rc, 0);
  ASSERT_EQ(u.n, 1);
  ASSERT_STR_EQ(u.sentinels[0].user, "su");
  ASSERT_STR_EQ(u.sentinels[0].pass, "sp");
  ASSERT_NULL(u.data.pass);
  ASSERT_EQ(u.data.db, 0);
  dlock__sentinel_url_free(&u);
  ASSERT_EQ(dlock__url_is_sentinel("redis-sentinel://h/m"), 1);
  ASSERT_EQ(dlock__url_is_sentinel("redis://h"), 0);
}

/* rediss-sentinel:// is TLS to the Sentinels and to the data nodes; the
 * plain scheme is TLS to neither. */
TEST(url_sentinel_tls) {
  dlock__sentinel_url u;
  ASSERT_EQ(dlock__url_is_sentinel("rediss-sentinel://h/m"), 1);
  int rc = dlock__url_parse_sentinel(
      "rediss-sentinel://:pw@s1:26380,s2/mymaster?db=2", &u);
  ASSERT_EQ(rc, 0);
  ASSERT_EQ(u.n, 2);
  ASSERT_EQ(u.data.tls, 1);
  ASSERT_EQ(u.sentinels[0].tls, 1);
  ASSERT_EQ(u.sentinels[1].tls, 1);
  ASSERT_EQ(u.sentinels[1].port, 26379);
  ASSERT_STR_EQ(u.master, "mymaster");
  ASSERT_STR_EQ(u.data.pass, "pw");
  ASSERT_EQ(u.data.db, 2);
  dlock__sentinel_url_free(&u);
  ASSERT_EQ(dlock__url_parse_sentinel("redis-sentinel://s1/m", &u), 0);
  ASSERT_EQ(u.data.tls, 0);
  ASSERT_EQ(u.sentinels[0].tls, 0);
  dlock__sentinel_url_free(&u);
  ASSERT_EQ(dlock__url_parse_sentinel("rediss-sentinel://s1", &u),
            DLOCK_EINVAL);
  dlock__endpoint ep;
  ASSERT_EQ(dlock__url_parse("rediss-sentinel://s1/m", &ep), DLOCK_EINVAL);
}

TEST(url_sentinel_rejects) {
  static const char *const bad[] = {
      "redis-sentinel://h",                   /* no master name */
      "redis-sentinel://h/",                  /* empty master name */
      "redis-sentinel:///m",                  /* no Sentinel */
      "redis-sentinel://h,,g/m",              /* empty host */
      "redis-sentinel://h,/m",                /* empty host at the end */
      "redis-sentinel://h:0/m",               /* port out of range */
      "redis-sentinel://h:x/m",               /* port not a number */
      "redis-sentinel://h/m?db=x",            /* db not a number */
      "redis-sentinel://h/m?color=red",       /* unknown parameter */
      "redis-sentinel://h/m?db",              /* no value */
      "redis-sentinel://h/m?sentinel_user=u", /* user without password */
      "redis-sentinel://h/m?sentinel_password=a&sentinel_password=b",
      "redis-sentinel://h/a/b",    /* '/' in the name */
      "redis-sentinel://user@h/m", /* user without password */
      "redis-sentinel://h/m?sentinel_password=%zz",
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    dlock__sentinel_url u;
    int rc = dlock__url_parse_sentinel(bad[i], &u);
    printf("%s -> %s (%s)\n", bad[i], dlock_err_name(rc), dlock_last_error());
    ASSERT_EQ(rc, DLOCK_EINVAL);
    ASSERT_EQ(u.n, 0);
    ASSERT_NULL(u.master);
  }
  /* Never shown: the data nodes' password or the Sentinels'. */
  dlock__sentinel_url u;
  ASSERT_EQ(
      dlock__url_parse_sentinel(
          "redis-sentinel://:Secret1@h/m?sentinel_password=Secret2&x=1", &u),
      DLOCK_EINVAL);
  ASSERT(strstr(dlock_last_error(), "Secret") == NULL);
  /* A Sentinel URL is not a server's. */
  dlock__endpoint e;
  ASSERT_EQ(dlock__url_parse("redis-sentinel://h/m", &e), DLOCK_EINVAL);
  ASSERT(strstr(dlock_last_error(), "Sentinel") != NULL);
}
