/*
 * RESP command formatting without stdio (see format.h).
 */
#include "proto/format.h"

#include "alloc.h"

#include <limits.h>
#include <string.h>

/* How many decimal digits 'v' has; most lengths and counts are short. */
static size_t digits(uint64_t v) {
  if (v < 10)
    return 1;
  if (v < 100)
    return 2;
  if (v < 1000)
    return 3;
  size_t n = 4;
  for (v /= 10000; v != 0; v /= 10)
    n++;
  return n;
}

/* Writes the 'n' digits of 'v' at 'p', without a NUL; returns p + n. */
static char *put_digits(char *p, uint64_t v, size_t n) {
  for (size_t i = n; i > 0; i--) {
    p[i - 1] = (char)('0' + v % 10);
    v /= 10;
  }
  return p + n;
}

size_t dlock__fmt_u64(char *buf, uint64_t v) {
  size_t n = digits(v);
  put_digits(buf, v, n);
  buf[n] = '\0';
  return n;
}

size_t dlock__fmt_i64(char *buf, int64_t v) {
  if (v >= 0)
    return dlock__fmt_u64(buf, (uint64_t)v);
  buf[0] = '-';
  /* The magnitude in unsigned arithmetic: -INT64_MIN does not fit. */
  return 1 + dlock__fmt_u64(buf + 1, (uint64_t)0 - (uint64_t)v);
}

int dlock__format_argv(char **out, int argc, const char *const *argv,
                       const size_t *lens) {
  return dlock__format_argv_into(NULL, 0, out, argc, argv, lens);
}

int dlock__format_argv_into(char *buf, size_t cap, char **out, int argc,
                            const char *const *argv, const size_t *lens) {
  *out = NULL;
  if (argc < 0)
    return -1;
  /* "*<argc>\r\n", then "$<len>\r\n<bytes>\r\n" per argument. */
  size_t total = 1 + digits((uint64_t)argc) + 2;
  for (int i = 0; i < argc; i++) {
    size_t len = lens != NULL ? lens[i] : strlen(argv[i]);
    size_t piece = 1 + digits(len) + 2 + len + 2;
    if (piece < len || total > SIZE_MAX - piece)
      return -1;
    total += piece;
  }
  if (total > INT_MAX)
    return -1;
  char *cmd = total < cap ? buf : dlock__malloc(total + 1);
  if (cmd == NULL)
    return -1;
  char *p = cmd;
  *p++ = '*';
  p = put_digits(p, (uint64_t)argc, digits((uint64_t)argc));
  *p++ = '\r';
  *p++ = '\n';
  for (int i = 0; i < argc; i++) {
    size_t len = lens != NULL ? lens[i] : strlen(argv[i]);
    *p++ = '$';
    p = put_digits(p, len, digits(len));
    *p++ = '\r';
    *p++ = '\n';
    if (len > 0)
      memcpy(p, argv[i], len);
    p += len;
    *p++ = '\r';
    *p++ = '\n';
  }
  *p = '\0';
  *out = cmd;
  return (int)total;
}

void dlock__format_free(char *cmd) { dlock__free(cmd); }
