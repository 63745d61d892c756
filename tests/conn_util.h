/*
 * A command connection (src/link/conn.h) to a test server, for the tests
 * that drive the connection through its internal calls.
 */
#ifndef DLOCK_TEST_CONN_UTIL_H
#define DLOCK_TEST_CONN_UTIL_H

#include <string.h>

#include "conn.h"
#include "harness/test.h"
#include "url.h"

typedef struct tconn {
  dlock__endpoint ep;
  dlock__conn *c;
} tconn;

static inline void tc_new(tconn *t, const char *url, int64_t connect_ms,
                          int64_t command_ms) {
  memset(t, 0, sizeof(*t));
  ASSERT_DLOCK_OK(dlock__url_parse(url, &t->ep));
  dlock__conn_cfg cfg = {&t->ep, connect_ms, command_ms, NULL, NULL, NULL, 50};
  ASSERT_DLOCK_OK(dlock__conn_new(&cfg, &t->c));
}

static inline void tc_free(tconn *t) {
  dlock__conn_free(t->c);
  dlock__endpoint_free(&t->ep);
}

#endif
