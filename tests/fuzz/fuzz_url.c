/*
 * Fuzzes dlock__url_parse(), the first library code to see text from a
 * configuration file or a command line, and dlock__endpoint_describe().
 *
 * Input: one control byte, then the URL text (up to a NUL). The control
 * byte picks the scheme of the planted-password URL below (bits 0-2) and
 * an allocation to fail (bits 3-6; 0: none).
 *
 * Beyond "no crash, no leak, no undefined behaviour", every input checks:
 *  - the result is 0, DLOCK_EINVAL or DLOCK_ENOMEM; a failure leaves the
 *    endpoint zeroed and says why in dlock_last_error();
 *  - a parsed endpoint is whole: a host and a port in 1..65535, or an
 *    absolute socket path that fits sun_path; a database in 0..1000000;
 *  - its description fits any buffer, NUL-terminated;
 *  - a password planted in a URL made around the input (plain and
 *    %-encoded) appears neither in the detail of a failure nor in the
 *    description: passwords end up in logs otherwise;
 *  - with one allocation failing, the parse returns DLOCK_ENOMEM (never a
 *    misleading DLOCK_EINVAL) and frees what it had allocated.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlock.h"
#include "fuzz_common.h"
#include "url.h"

/* A password no parse error or description may ever show. */
#define SECRET "Zq7SecretPw"
/* The same, %-encoded where the library decodes it ("Z" is %5A). */
#define SECRET_ENCODED "%5Aq7Secr%65tPw"

#define FUZZ_MAX_INPUT 4096

/* 1 when 'hay' contains 'needle' (NULL hay: no). */
static int contains(const char *hay, const char *needle) {
  return hay != NULL && strstr(hay, needle) != NULL;
}

/* Describes 'e' into a heap buffer of exactly 'n' bytes, so that ASan sees
 * any write past it, and checks the result is terminated within it. */
static void describe_into(const dlock__endpoint *e, size_t n, char *copy,
                          size_t copy_size) {
  char *buf = malloc(n);
  FUZZ_CHECK(buf != NULL, "out of memory");
  memset(buf, 'x', n);
  dlock__endpoint_describe(e, buf, n);
  FUZZ_CHECK(memchr(buf, '\0', n) != NULL, "description not terminated");
  if (copy != NULL)
    snprintf(copy, copy_size, "%s", buf);
  free(buf);
}

/* Parses 'url' and checks the properties common to every input; returns
 * the result code. The endpoint is freed before returning. */
static int parse_and_check(const char *url, const char *secret) {
  dlock__endpoint e;
  memset(&e, 0x5a, sizeof e); /* the parser must zero it first */
  int rc = dlock__url_parse(url, &e);
  FUZZ_CHECK(rc == 0 || rc == DLOCK_EINVAL || rc == DLOCK_ENOMEM,
             "unexpected code %d for \"%s\"", rc, url);
  if (rc != 0) {
    static const dlock__endpoint zero;
    const char *detail = dlock_last_error();
    FUZZ_CHECK(memcmp(&e, &zero, sizeof e) == 0,
               "failed parse left the endpoint non-zero");
    FUZZ_CHECK(detail[0] != '\0', "failure without a detail");
    if (secret != NULL) {
      FUZZ_CHECK(!contains(detail, secret),
                 "password in the error detail \"%s\"", detail);
      FUZZ_CHECK(!contains(detail, SECRET_ENCODED),
                 "encoded password in the error detail \"%s\"", detail);
    }
    return rc;
  }

  FUZZ_CHECK((e.host == NULL) != (e.path == NULL),
             "exactly one of host and path must be set");
  FUZZ_CHECK(e.db >= 0 && e.db <= 1000000, "db %d", e.db);
  if (e.host != NULL) {
    FUZZ_CHECK(e.host[0] != '\0', "empty host");
    FUZZ_CHECK(e.port >= 1 && e.port <= 65535, "port %d", e.port);
  } else {
    FUZZ_CHECK(e.path[0] == '/', "relative socket path \"%s\"", e.path);
    FUZZ_CHECK(strlen(e.path) < 108, "socket path longer than sun_path");
  }
  char desc[600];
  describe_into(&e, 1, NULL, 0);
  describe_into(&e, 6, NULL, 0);
  describe_into(&e, sizeof desc, desc, sizeof desc);
  /* The description names the address only. A password found there is a
   * leak, unless the parse took the planted text for the address itself
   * (a URL such as "redis://host:Zq7...@" has no password to the parser). */
  if (secret != NULL && !contains(e.host, "Zq7") && !contains(e.path, "Zq7"))
    FUZZ_CHECK(!contains(desc, "Zq7"), "password in the description \"%s\"",
               desc);
  dlock__endpoint_free(&e);
  static const dlock__endpoint zero;
  FUZZ_CHECK(memcmp(&e, &zero, sizeof e) == 0, "freed endpoint not zeroed");
  return 0;
}

/* The planted-password URL: SCHEME LEFT ":" PASSWORD "@" RIGHT, where the
 * input gives LEFT and RIGHT (split at its first '|'). */
static void check_planted(unsigned ctl, const char *text, const char *pass) {
  static const char *const schemes[] = {"redis://", "unix://", "rediss://",
                                        "redis://", "unix://", "",
                                        "redis:/",  "REDIS://"};
  const char *bar = strchr(text, '|');
  size_t left = bar ? (size_t)(bar - text) : 0;
  const char *right = bar ? bar + 1 : text;
  char url[FUZZ_MAX_INPUT + 64];
  snprintf(url, sizeof url, "%s%.*s:%s@%s", schemes[ctl & 7], (int)left, text,
           pass, right);
  parse_and_check(url, SECRET);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || size > FUZZ_MAX_INPUT)
    return 0;
  unsigned ctl = data[0];
  char text[FUZZ_MAX_INPUT + 1];
  memcpy(text, data + 1, size - 1);
  text[size - 1] = '\0';
  /* An input that spells part of the password itself cannot show a leak. */
  int may_plant = strstr(text, "Zq7") == NULL;

  dlock_set_allocators(NULL);
  parse_and_check(text, NULL);
  if (may_plant) {
    check_planted(ctl, text, SECRET);
    check_planted(ctl, text, SECRET_ENCODED);
  }

  /* The same parses with one allocation failing. */
  long fail_at = (long)((ctl >> 3) & 15);
  if (fail_at != 0) {
    long before = fuzz_alloc_outstanding();
    fuzz_alloc_fail_at(fail_at);
    int rc = parse_and_check(text, NULL);
    FUZZ_CHECK(!fuzz_alloc_did_fail() || rc == DLOCK_ENOMEM,
               "allocation %ld failed, yet the parse returned %d", fail_at, rc);
    FUZZ_CHECK(fuzz_alloc_outstanding() == before,
               "%ld blocks leaked after a failed allocation",
               fuzz_alloc_outstanding() - before);
    dlock_set_allocators(NULL);
  }
  return 0;
}
