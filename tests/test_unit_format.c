/*
 * Unit tests of src/proto/format.c: commands (formatted by hiredis's sds
 * formatter) must be byte for byte what redisFormatCommandArgv makes, with
 * the length returned and a NUL after them; numbers in decimal as printf
 * writes them.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlock.h"
#include "harness/test.h"
#include "proto/format.h"

/* Formats argv both ways and asserts the same bytes. */
static void same_as_hiredis(int argc, const char **argv, const size_t *lens) {
  char *ours = NULL, *theirs = NULL;
  int n = dlock__format_argv(&ours, argc, argv, lens);
  int m = redisFormatCommandArgv(&theirs, argc, argv, lens);
  ASSERT_GE(m, 0);
  ASSERT_EQ(n, m);
  ASSERT(memcmp(ours, theirs, (size_t)n) == 0);
  ASSERT_EQ(ours[n], '\0');
  dlock__format_free(ours);
  redisFreeCommand(theirs);
}

TEST(format_matches_hiredis_for_c_strings) {
  const char *none[1] = {NULL};
  same_as_hiredis(0, none, NULL);
  const char *ping[] = {"PING"};
  same_as_hiredis(1, ping, NULL);
  const char *empty[] = {"SET", "", ""};
  same_as_hiredis(3, empty, NULL);
  const char *wait[] = {"WAIT", "2", "1000"};
  same_as_hiredis(3, wait, NULL);
}

TEST(format_matches_hiredis_for_binary_and_long_arguments) {
  /* Lengths around every digit boundary, NULs and CR/LF inside. */
  static const size_t sizes[] = {
      0,    1,    9,     10,    11,    99,    100,   101,    999,    1000,
      1001, 9999, 10000, 10001, 65535, 65536, 99999, 100000, 1000000};
  size_t nsizes = sizeof(sizes) / sizeof(sizes[0]);
  char *big = malloc(1000001);
  ASSERT_NOT_NULL(big);
  for (size_t i = 0; i < 1000001; i++)
    big[i] = (char)(i * 7 + 3); /* every byte value, "\r\n" and NUL too */
  for (size_t i = 0; i < nsizes; i++) {
    const char *argv[] = {"EVALSHA", big, big + 1, "1"};
    size_t lens[] = {7, sizes[i], sizes[nsizes - 1 - i], 1};
    same_as_hiredis(4, argv, lens);
  }
  /* More arguments than one digit, and than two, counts. */
  const char *many[120];
  size_t many_lens[120];
  for (int i = 0; i < 120; i++) {
    many[i] = big + i;
    many_lens[i] = (size_t)i;
  }
  same_as_hiredis(9, many, many_lens);
  same_as_hiredis(10, many, many_lens);
  same_as_hiredis(11, many, many_lens);
  same_as_hiredis(99, many, many_lens);
  same_as_hiredis(100, many, many_lens);
  same_as_hiredis(120, many, many_lens);
  free(big);
}

TEST(format_numbers_as_printf_does) {
  static const int64_t values[] = {
      0,          1,         -1,           9,
      10,         -10,       99,           100,
      1000,       9999,      10000,        123456789,
      -987654321, INT32_MAX, INT32_MIN,    (int64_t)1 << 53,
      INT64_MAX,  INT64_MIN, INT64_MIN + 1};
  for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
    char ours[DLOCK__DEC_MAX], theirs[32];
    size_t n = dlock__fmt_i64(ours, values[i]);
    snprintf(theirs, sizeof(theirs), "%" PRId64, values[i]);
    ASSERT_STR_EQ(ours, theirs);
    ASSERT_EQ(n, strlen(theirs));
  }
  static const uint64_t uvalues[] = {0,           7,          10,
                                     4294967296u, UINT64_MAX, UINT64_MAX - 1};
  for (size_t i = 0; i < sizeof(uvalues) / sizeof(uvalues[0]); i++) {
    char ours[DLOCK__DEC_MAX], theirs[32];
    size_t n = dlock__fmt_u64(ours, uvalues[i]);
    snprintf(theirs, sizeof(theirs), "%" PRIu64, uvalues[i]);
    ASSERT_STR_EQ(ours, theirs);
    ASSERT_EQ(n, strlen(theirs));
  }
}
