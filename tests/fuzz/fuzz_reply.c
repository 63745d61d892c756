/*
 * Fuzzes the decoding of Redis replies into lock results: arbitrary bytes
 * go through hiredis's own reader (redisReaderFeed/redisReaderGetReply),
 * as they would from a socket, and every reply it builds, and every
 * element of every reply, goes into dlock__decode_acquire,
 * dlock__decode_integer and dlock__decode_number.
 *
 * Input: one control byte, then the bytes "from the server". The control
 * byte picks how the bytes are cut into reads (the reader must give the
 * same replies whatever the cuts), a nil value for decode_number, and
 * whether the bytes are sent as they are or first turned into well-formed
 * RESP by the small generator below. hiredis is not instrumented, so the
 * fuzzer sees no coverage of its parser; the generator lets it reach every
 * reply shape (integers, numeric strings, nested arrays) anyway.
 *
 * Beyond "no crash, no leak, no undefined behaviour", every reply checks:
 *  - each decoder returns 0 or DLOCK_EPROTO, with a detail on failure;
 *  - decode_acquire accepts exactly {1, token >= 0, count > 0} and
 *    {0, ttl}, all integers, and fills the result to match;
 *  - decode_integer accepts exactly integer replies, with their value;
 *  - decode_number accepts exactly nil, integers and strings that are a
 *    whole decimal number in int64 range, with the right value (checked
 *    against a parser written here, not strtoll).
 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "dlock.h"
#include "fuzz_common.h"
#include "reply.h"

#define FUZZ_MAX_INPUT 65536

/* The oracle for numeric strings: optional blanks and sign, then digits
 * only, within int64. strtoll, which the library uses, accepts leading
 * white space and a sign; so does this. Returns 1 and the value when
 * 's' (len bytes) is such a number. */
static int oracle_number(const char *s, size_t len, int64_t *out) {
  size_t i = 0;
  while (i < len && (s[i] == ' ' || (s[i] >= '\t' && s[i] <= '\r')))
    i++;
  int neg = 0;
  if (i < len && (s[i] == '+' || s[i] == '-'))
    neg = s[i++] == '-';
  if (i == len)
    return 0;
  /* Accumulate as a negative number, whose range is the larger one. */
  int64_t v = 0;
  for (; i < len; i++) {
    if (s[i] < '0' || s[i] > '9')
      return 0;
    int d = s[i] - '0';
    if (v < (INT64_MIN + d) / 10)
      return 0;
    v = v * 10 - d;
  }
  if (!neg && v == INT64_MIN)
    return 0;
  *out = neg ? v : -v;
  return 1;
}

static int all_integers(const redisReply *r) {
  for (size_t i = 0; i < r->elements; i++)
    if (r->element[i] == NULL || r->element[i]->type != REDIS_REPLY_INTEGER)
      return 0;
  return 1;
}

static void check_failure(int rc, const char *what) {
  FUZZ_CHECK(rc == DLOCK_EPROTO, "%s returned %d", what, rc);
  FUZZ_CHECK(dlock_last_error()[0] != '\0', "%s failed without a detail", what);
}

static void check_acquire(const redisReply *r) {
  dlock__acquired a;
  memset(&a, 0x77, sizeof a);
  int rc = dlock__decode_acquire(r, &a);
  int shape_ok =
      r->type == REDIS_REPLY_ARRAY && r->elements >= 2 && all_integers(r);
  int held_ok = shape_ok && r->elements == 3 && r->element[0]->integer == 1 &&
                r->element[1]->integer >= 0 && r->element[2]->integer > 0;
  int free_ok =
      shape_ok && r->element[0]->integer == 0 &&
      (r->elements == 2 || (r->elements == 3 && r->element[2]->integer >= 0));
  int gone_ok = shape_ok && r->elements == 2 && r->element[0]->integer == 2;
  if (!held_ok && !free_ok && !gone_ok) {
    check_failure(rc, "decode_acquire");
    return;
  }
  FUZZ_CHECK(rc == 0, "decode_acquire refused a good reply (%d)", rc);
  if (gone_ok) {
    FUZZ_CHECK(a.held == 0 && a.gone == 1, "gone: held %d gone %d", a.held,
               a.gone);
  } else if (held_ok) {
    FUZZ_CHECK(a.held == 1, "held %d", a.held);
    FUZZ_CHECK(a.token == (uint64_t)r->element[1]->integer, "token");
    FUZZ_CHECK(a.count == r->element[2]->integer && a.count > 0, "count");
  } else {
    FUZZ_CHECK(a.held == 0, "held %d", a.held);
    FUZZ_CHECK(a.ttl_ms == r->element[1]->integer, "ttl");
    FUZZ_CHECK(a.counter ==
                   (r->elements == 3 ? (uint64_t)r->element[2]->integer : 0),
               "counter");
  }
}

static void check_integer(const redisReply *r) {
  int64_t v = 0x1234;
  int rc = dlock__decode_integer(r, &v);
  if (r->type != REDIS_REPLY_INTEGER) {
    check_failure(rc, "decode_integer");
    FUZZ_CHECK(v == 0x1234, "decode_integer wrote its output on failure");
    return;
  }
  FUZZ_CHECK(rc == 0 && v == r->integer, "decode_integer(%lld) gave %d/%lld",
             r->integer, rc, (long long)v);
}

static void check_number(const redisReply *r, int64_t nil_value) {
  int64_t v = 0x1234, want = 0;
  int rc = dlock__decode_number(r, nil_value, &v);
  int good = 0;
  if (r->type == REDIS_REPLY_NIL) {
    good = 1;
    want = nil_value;
  } else if (r->type == REDIS_REPLY_INTEGER) {
    good = 1;
    want = r->integer;
  } else if (r->type == REDIS_REPLY_STRING) {
    /* The library reads at most 20 bytes, enough for any int64. */
    good = r->len > 0 && r->len < 21 && oracle_number(r->str, r->len, &want);
  }
  if (!good) {
    check_failure(rc, "decode_number");
    return;
  }
  FUZZ_CHECK(rc == 0, "decode_number refused a good reply (type %d, \"%.*s\")",
             r->type, (int)(r->str ? r->len : 0), r->str ? r->str : "");
  FUZZ_CHECK(v == want, "decode_number gave %lld, expected %lld", (long long)v,
             (long long)want);
}

/* Every decoder on 'r' and, recursively, on each of its elements, as the
 * library decodes nested replies (a renewal's array of results). */
static void check_all(const redisReply *r, int64_t nil_value, int depth) {
  FUZZ_CHECK(r != NULL, "NULL element from the reader");
  FUZZ_CHECK(depth < 16, "replies nested deeper than hiredis allows");
  check_acquire(r);
  check_integer(r);
  check_number(r, nil_value);
  if (r->type == REDIS_REPLY_ARRAY)
    for (size_t i = 0; i < r->elements; i++)
      check_all(r->element[i], nil_value, depth + 1);
}

/* ---- the RESP generator ---------------------------------------------- */

typedef struct gen {
  const uint8_t *in;
  size_t n, pos;
  char *out;
  size_t len, cap;
} gen;

static unsigned next_byte(gen *g) {
  return g->pos < g->n ? g->in[g->pos++] : 0;
}

static void put(gen *g, const char *s, size_t len) {
  if (g->len + len > g->cap)
    return; /* the output is bounded; the rest is dropped */
  memcpy(g->out + g->len, s, len);
  g->len += len;
}

static void putf(gen *g, const char *fmt, long long v) {
  char buf[32];
  int k = snprintf(buf, sizeof buf, fmt, v);
  put(g, buf, (size_t)k);
}

static long long next_integer(gen *g, unsigned tag) {
  static const long long edges[] = {
      0,         1,         -1,
      2,         -2,        INT64_MAX,
      INT64_MIN, INT32_MAX, (long long)INT32_MAX + 1};
  if ((tag & 8) == 0)
    return edges[next_byte(g) % (sizeof edges / sizeof edges[0])];
  unsigned long long v = 0;
  for (int i = 0; i < 8; i++)
    v |= (unsigned long long)next_byte(g) << (8 * i);
  return (long long)v;
}

/* Texts that are, almost are, or look like numbers. */
static void put_numeric_text(gen *g, unsigned tag) {
  static const char *const texts[] = {"0",
                                      "1",
                                      "-1",
                                      "+5",
                                      " 7",
                                      "007",
                                      "9223372036854775807",
                                      "-9223372036854775808",
                                      "9223372036854775808",
                                      "1e3",
                                      "0x10",
                                      "",
                                      "-",
                                      "+",
                                      " ",
                                      "12 ",
                                      "1\r",
                                      "99999999999999999999",
                                      "3.0"};
  char buf[64];
  const char *t;
  size_t len;
  if ((tag & 8) != 0) {
    snprintf(buf, sizeof buf, "%lld", next_integer(g, 8));
    t = buf;
    len = strlen(buf);
  } else {
    unsigned k = next_byte(g);
    t = texts[k % (sizeof texts / sizeof texts[0])];
    len = strlen(t);
    if (k & 128) { /* the same followed by a NUL and a digit */
      memcpy(buf, t, len);
      buf[len++] = '\0';
      buf[len++] = '9';
      t = buf;
    }
  }
  putf(g, "$%lld\r\n", (long long)len);
  put(g, t, len);
  put(g, "\r\n", 2);
}

static void put_item(gen *g, int depth) {
  unsigned tag = next_byte(g);
  switch (tag & 7) {
  case 0:
    putf(g, ":%lld\r\n", next_integer(g, tag));
    break;
  case 1: {
    size_t len = next_byte(g);
    char bytes[256];
    for (size_t i = 0; i < len; i++)
      bytes[i] = (char)next_byte(g);
    putf(g, "$%lld\r\n", (long long)len);
    put(g, bytes, len);
    put(g, "\r\n", 2);
    break;
  }
  case 2:
    put(g, "$-1\r\n", 5);
    break;
  case 3: {
    /* hiredis 0.14 refuses arrays nested more than 7 deep. */
    long long count = depth < 6 ? (long long)(next_byte(g) % 8) : 0;
    putf(g, "*%lld\r\n", count);
    for (long long i = 0; i < count; i++)
      put_item(g, depth + 1);
    break;
  }
  case 4:
    put(g, "+OK\r\n", 5);
    break;
  case 5:
    put(g, "-ERR fuzz\r\n", 11);
    break;
  case 6:
    put(g, "*-1\r\n", 5);
    break;
  default:
    put_numeric_text(g, tag);
    break;
  }
}

/* Turns the input into a stream of well-formed replies, into 'out'. */
static size_t generate(const uint8_t *in, size_t n, char *out, size_t cap) {
  gen g = {in, n, 0, out, 0, cap};
  while (g.pos < g.n && g.len < g.cap)
    put_item(&g, 0);
  return g.len;
}

/* ---- the target -------------------------------------------------------- */

/* Whether the bytes declare an array or string longer than 1 << 20 ('*'
 * or '$' then more digits than that). hiredis 0.14, Debian's, allocates a
 * declared array before its elements arrive (later versions cap the
 * count), so such an input only measures the fuzzer's memory limit: the
 * allocation is hiredis's, made before dlock sees any reply. */
static int declares_huge_length(const char *b, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (b[i] != '*' && b[i] != '$')
      continue;
    uint64_t v = 0;
    for (size_t j = i + 1; j < n && b[j] >= '0' && b[j] <= '9'; j++)
      if ((v = v * 10 + (uint64_t)(b[j] - '0')) > (1u << 20))
        return 1;
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || size > FUZZ_MAX_INPUT)
    return 0;
  unsigned ctl = data[0];
  const char *bytes = (const char *)data + 1;
  size_t n = size - 1;
  static char generated[4 * FUZZ_MAX_INPUT];
  if (ctl & 32) {
    n = generate(data + 1, size - 1, generated, sizeof generated);
    bytes = generated;
  }
  if (declares_huge_length(bytes, n))
    return 0;
  /* Reads of 1..16 bytes, or all at once: a reply cut anywhere must be
   * resumed correctly when the rest arrives. */
  size_t chunk = (ctl & 15) == 0 ? (n ? n : 1) : (ctl & 15);
  int64_t nil_value = (ctl & 16) ? -1 : 0;

  redisReader *reader = redisReaderCreate();
  FUZZ_CHECK(reader != NULL, "out of memory");
  size_t fed = 0;
  int broken = 0;
  while (!broken) {
    if (fed < n) {
      size_t k = n - fed < chunk ? n - fed : chunk;
      if (redisReaderFeed(reader, bytes + fed, k) != REDIS_OK)
        break;
      fed += k;
    }
    for (;;) {
      void *reply = NULL;
      if (redisReaderGetReply(reader, &reply) != REDIS_OK) {
        broken = 1; /* a protocol error: the connection would be dropped */
        break;
      }
      if (reply == NULL)
        break;
      check_all(reply, nil_value, 0);
      freeReplyObject(reply);
    }
    if (fed >= n)
      break;
  }
  redisReaderFree(reader);
  return 0;
}
