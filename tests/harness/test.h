/*
 * A small test runner in the libuv manner.
 *
 * A test file defines tests with TEST(name) { ... } and no main(): the
 * runner (test.c) provides it. The binary runs every test in the file, or
 * only those named on its command line; "--list" prints the names, one per
 * line. Each test runs in a forked child, in a process group of its own, with
 * a timeout of DLOCK_TEST_TIMEOUT seconds (default 60). When the test ends,
 * or its time is up, the runner kills that whole group, so nothing the test
 * started (redis-server processes included) outlives it. The runner prints
 * "ok NAME (12 ms)" or "FAIL NAME: <reason>" for each test and finally
 * "N passed, N failed", and exits with 0 only when all passed.
 *
 * A failed assertion prints where it failed, the expression, what was
 * expected and what came, and ends the test with exit(1), so atexit handlers
 * (which stop the harness's servers) still run. Assertions work in any
 * thread of the test. By convention the first argument of a comparison is
 * the value under test and the second the expected one:
 * ASSERT_EQ(rc, 0) fails with "rc is 3, expected == 0".
 *
 * The build registers every TEST(name) that starts a line of
 * tests/test_FILE.c as the ctest test "test_FILE.name".
 */
#ifndef DLOCK_TEST_H
#define DLOCK_TEST_H

/* stdio.h and stdlib.h too, as most tests print and allocate. */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlock.h"

typedef void (*test_fn)(void);

/* Defines the test 'name' and registers it before main() runs. */
#define TEST(name)                                                             \
  static void test_##name(void);                                               \
  __attribute__((constructor)) static void test__register_##name(void) {       \
    test__register(#name, test_##name, __FILE__, __LINE__);                    \
  }                                                                            \
  static void test_##name(void)

/* Ends the test as failed with a printf-style message. */
#define TEST_FAIL(...) test__fail(__FILE__, __LINE__, __VA_ARGS__)

#define ASSERT(cond)                                                           \
  do {                                                                         \
    if (!(cond))                                                               \
      test__fail(__FILE__, __LINE__, "ASSERT(%s) failed", #cond);              \
  } while (0)

/* Integer comparisons, evaluated once each, as int64_t. */
#define ASSERT_EQ(a, b) TEST__CMP("ASSERT_EQ", ==, a, b)
#define ASSERT_NE(a, b) TEST__CMP("ASSERT_NE", !=, a, b)
#define ASSERT_GE(a, b) TEST__CMP("ASSERT_GE", >=, a, b)
#define ASSERT_LE(a, b) TEST__CMP("ASSERT_LE", <=, a, b)
#define ASSERT_GT(a, b) TEST__CMP("ASSERT_GT", >, a, b)
#define ASSERT_LT(a, b) TEST__CMP("ASSERT_LT", <, a, b)

#define TEST__CMP(macro, op, a, b)                                             \
  do {                                                                         \
    int64_t test__a = (int64_t)(a);                                            \
    int64_t test__b = (int64_t)(b);                                            \
    if (!(test__a op test__b))                                                 \
      test__fail(__FILE__, __LINE__,                                           \
                 "%s(%s, %s) failed: %s is %" PRId64 ", expected %s %" PRId64, \
                 macro, #a, #b, #a, test__a, #op, test__b);                    \
  } while (0)

/* Strings compared with strcmp; NULL equals only NULL. */
#define ASSERT_STR_EQ(a, b)                                                    \
  do {                                                                         \
    const char *test__a = (a);                                                 \
    const char *test__b = (b);                                                 \
    if (!test__str_eq(test__a, test__b))                                       \
      test__fail(__FILE__, __LINE__,                                           \
                 "ASSERT_STR_EQ(%s, %s) failed: %s is %s%s%s, expected "       \
                 "%s%s%s",                                                     \
                 #a, #b, #a, test__a ? "\"" : "", test__a ? test__a : "NULL",  \
                 test__a ? "\"" : "", test__b ? "\"" : "",                     \
                 test__b ? test__b : "NULL", test__b ? "\"" : "");             \
  } while (0)

#define ASSERT_NULL(p)                                                         \
  do {                                                                         \
    const void *test__p = (const void *)(p);                                   \
    if (test__p != NULL)                                                       \
      test__fail(__FILE__, __LINE__,                                           \
                 "ASSERT_NULL(%s) failed: %s is %p, expected NULL", #p, #p,    \
                 (void *)(uintptr_t)test__p);                                  \
  } while (0)

#define ASSERT_NOT_NULL(p)                                                     \
  do {                                                                         \
    if ((const void *)(p) == NULL)                                             \
      test__fail(__FILE__, __LINE__, "ASSERT_NOT_NULL(%s) failed: %s is NULL", \
                 #p, #p);                                                      \
  } while (0)

/* A dlock call that must return 0. On failure prints the code's name and
 * dlock_last_error() of the calling thread. */
#define ASSERT_DLOCK_OK(expr)                                                  \
  do {                                                                         \
    int test__r = (expr);                                                      \
    if (test__r != 0)                                                          \
      test__fail(__FILE__, __LINE__,                                           \
                 "ASSERT_DLOCK_OK(%s) failed: got %s (%d) \"%s\", "            \
                 "expected 0",                                                 \
                 #expr, dlock_err_name(test__r), test__r, dlock_last_error()); \
  } while (0)

/* A dlock call that must fail with 'code' (a DLOCK_E* value). */
#define ASSERT_DLOCK_ERR(expr, code)                                           \
  do {                                                                         \
    int test__r = (expr);                                                      \
    int test__c = (code);                                                      \
    if (test__r != test__c)                                                    \
      test__fail(__FILE__, __LINE__,                                           \
                 "ASSERT_DLOCK_ERR(%s, %s) failed: got %s (%d) \"%s\", "       \
                 "expected %s (%d)",                                           \
                 #expr, #code, test__r ? dlock_err_name(test__r) : "OK",       \
                 test__r, test__r ? dlock_last_error() : "",                   \
                 dlock_err_name(test__c), test__c);                            \
  } while (0)

/* CLOCK_MONOTONIC in milliseconds; comparable across processes. */
int64_t test_now_ms(void);

/* Sleeps 'ms' milliseconds, resuming after signals. */
void test_sleep_ms(int64_t ms);

/* The name of the test running in this process; NULL in the runner. */
const char *test_current_name(void);

/* Internals used by the macros above. */
void test__register(const char *name, test_fn fn, const char *file, int line);
_Noreturn void test__fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static inline int test__str_eq(const char *a, const char *b) {
  return a == b || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

#endif
