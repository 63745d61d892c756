/*
 * Numbers in decimal without stdio, and RESP commands by hiredis (see
 * format.h).
 */
#include "proto/format.h"

#include <hiredis/hiredis.h>
#include <hiredis/sds.h>
#include <limits.h>

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
  *out = NULL;
  if (argc < 0)
    return -1;
  /* hiredis's sds formatter writes lengths with its own integer code, not
   * sprintf(): the same bytes as redisFormatCommandArgv for less work. */
  sds cmd = NULL;
  long long n =
      redisFormatSdsCommandArgv(&cmd, argc, (const char **)argv, lens);
  if (n < 0 || cmd == NULL)
    return -1;
  if (n > INT_MAX) {
    redisFreeSdsCommand(cmd);
    return -1;
  }
  *out = cmd;
  return (int)n;
}

void dlock__format_free(char *cmd) {
  if (cmd != NULL)
    redisFreeSdsCommand(cmd);
}
