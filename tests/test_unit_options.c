/*
 * dlock_options_t as a struct that grows: dlock_options_init writes only
 * the caller's bytes and records their number, dlock_client_open reads only
 * those and refuses fields it does not know, and the version calls agree
 * with the header; and the reading of a master's INFO that picks WAIT or
 * WAITAOF for DLOCK_SYNC_ANY. No server: every open here fails before
 * connecting, or is lazy.
 */
#include "harness/test.h"

#include "topo/route.h"

#include <dlock.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* The smallest dlock_options_t there can be: one that ends with its size. */
#define MIN_SIZE (offsetof(dlock_options_t, struct_size) + sizeof(size_t))

TEST(options_init_fills_defaults_and_records_its_size) {
  dlock_options_t o;
  memset(&o, 0x5a, sizeof(o));
  dlock_options_init(&o);
  ASSERT_EQ(o.struct_size, sizeof(dlock_options_t));
  ASSERT_STR_EQ(o.url, "redis://127.0.0.1:6379");
  ASSERT_EQ(o.connect_timeout_ms, 2000);
  ASSERT_EQ(o.command_timeout_ms, 3000);
  ASSERT_EQ(o.replica_sync_mode, DLOCK_SYNC_ALL);
  ASSERT_EQ(o.spin_backoff, DLOCK_BACKOFF_EXPONENTIAL);
  ASSERT_EQ(o.spin_us, DLOCK_SPIN_US_DEFAULT);
  ASSERT_EQ(o.watchdog_timeout_ms, 30000);
  ASSERT_EQ(o.unlock_retries, 2);
  ASSERT_EQ(o.fair_wait_timeout_ms, 300000);
  ASSERT_NULL(o.client_id);
  ASSERT_EQ(o.lazy_connect, 0);
  ASSERT_NULL(o.on_lost_data);
  dlock_options_init(NULL); /* ignored, as before */
}

TEST(options_init_writes_only_the_callers_bytes) {
  /* A program built against a header whose struct ends at struct_size: the
   * library must not write a byte past it (it would be the caller's next
   * variable). */
  size_t cap = sizeof(dlock_options_t) + 64;
  unsigned char *buf = malloc(cap);
  ASSERT_NOT_NULL(buf);
  memset(buf, 0xa5, cap);
  dlock_options_init_size((dlock_options_t *)buf, MIN_SIZE);
  for (size_t i = MIN_SIZE; i < cap; i++)
    if (buf[i] != 0xa5)
      TEST_FAIL("byte %zu past the caller's %zu was written", i,
                (size_t)MIN_SIZE);
  size_t recorded;
  memcpy(&recorded, buf + offsetof(dlock_options_t, struct_size),
         sizeof(recorded));
  ASSERT_EQ(recorded, MIN_SIZE);
  free(buf);
}

/* A dlock.h newer than this library: one more field at the end. */
typedef struct newer_options {
  dlock_options_t known;
  int64_t from_the_future;
} newer_options;

static dlock_options_t *newer_init(newer_options *n) {
  dlock_options_init_size(&n->known, sizeof(*n));
  /* Nowhere to connect: the open must fail before it would matter. */
  n->known.url = "redis://127.0.0.1:1";
  n->known.connect_timeout_ms = 200;
  return &n->known;
}

TEST(options_from_a_newer_header_with_unknown_fields_unset_are_accepted) {
  newer_options n;
  memset(&n, 0x77, sizeof(n));
  dlock_options_t *o = newer_init(&n);
  ASSERT_EQ(o->struct_size, sizeof(n));
  ASSERT_EQ(n.from_the_future, 0);
  /* It gets as far as connecting: the options themselves were accepted. */
  dlock_client_t *c = NULL;
  ASSERT_DLOCK_ERR(dlock_client_open(o, &c), DLOCK_EIO);
  ASSERT_NULL(c);
}

TEST(options_from_a_newer_header_with_an_unknown_field_set_are_refused) {
  newer_options n;
  dlock_options_t *o = newer_init(&n);
  n.from_the_future = 5;
  dlock_client_t *c = NULL;
  ASSERT_DLOCK_ERR(dlock_client_open(o, &c), DLOCK_EINVAL);
  ASSERT_NULL(c);
  ASSERT_NOT_NULL(strstr(dlock_last_error(), "newer dlock.h"));
}

TEST(options_with_a_size_nobody_set_are_refused) {
  dlock_options_t o;
  dlock_options_init(&o);
  o.url = "redis://127.0.0.1:1";
  dlock_client_t *c = NULL;
  /* Too small to even hold the size field, and absurdly large: garbage. */
  o.struct_size = 3;
  ASSERT_DLOCK_ERR(dlock_client_open(&o, &c), DLOCK_EINVAL);
  ASSERT_NOT_NULL(strstr(dlock_last_error(), "dlock_options_init"));
  o.struct_size = (size_t)1 << 40;
  ASSERT_DLOCK_ERR(dlock_client_open(&o, &c), DLOCK_EINVAL);
  ASSERT_NULL(c);
}

TEST(options_filled_by_hand_are_read_as_the_first_sized_layout) {
  /* struct_size 0: a program that sets every field itself, as dlock 0.1
   * allowed. It still opens (here up to the connect). */
  dlock_options_t o;
  memset(&o, 0, sizeof(o));
  o.url = "redis://127.0.0.1:1";
  o.connect_timeout_ms = 200;
  o.command_timeout_ms = 200;
  o.watchdog_timeout_ms = 30000;
  o.fair_wait_timeout_ms = 300000;
  dlock_client_t *c = NULL;
  ASSERT_DLOCK_ERR(dlock_client_open(&o, &c), DLOCK_EIO);
  /* And its fields are read, not replaced by defaults. */
  o.command_timeout_ms = -1;
  ASSERT_DLOCK_ERR(dlock_client_open(&o, &c), DLOCK_EINVAL);
  ASSERT_NOT_NULL(strstr(dlock_last_error(), "command_timeout_ms"));
}

TEST(version_calls_match_the_header) {
  ASSERT_EQ(dlock_version(), DLOCK_VERSION_NUMBER);
  ASSERT_STR_EQ(dlock_version_string(), DLOCK_VERSION_STRING);
  char want[32];
  snprintf(want, sizeof(want), "%d.%d.%d", DLOCK_VERSION_MAJOR,
           DLOCK_VERSION_MINOR, DLOCK_VERSION_PATCH);
  ASSERT_STR_EQ(DLOCK_VERSION_STRING, want);
  ASSERT_EQ(DLOCK_VERSION_NUMBER, (DLOCK_VERSION_MAJOR << 16) |
                                      (DLOCK_VERSION_MINOR << 8) |
                                      DLOCK_VERSION_PATCH);
  ASSERT(DLOCK_VERSION_AT_LEAST(0, 2, 0));
  ASSERT(DLOCK_VERSION_AT_LEAST(DLOCK_VERSION_MAJOR, DLOCK_VERSION_MINOR,
                                DLOCK_VERSION_PATCH));
  ASSERT(
      !DLOCK_VERSION_AT_LEAST(DLOCK_VERSION_MAJOR, DLOCK_VERSION_MINOR + 1, 0));
}

/* AOF on and WAITAOF known (Redis 7.2 on, Valkey's 7.2.4): WAITAOF; AOF
 * off, an older server, or no persistence section at all: not. */
TEST(info_tells_whether_waitaof_fits) {
  static const char on8[] = "# Server\r\nredis_version:8.2.3\r\n"
                            "# Persistence\r\naof_enabled:1\r\n";
  static const char valkey[] = "redis_version:7.2.4\r\nvalkey_version:9.1.2"
                               "\r\naof_enabled:1\r\n";
  static const char old[] = "redis_version:7.0.15\r\naof_enabled:1\r\n";
  static const char off[] = "redis_version:8.2.3\r\naof_enabled:0\r\n";
  static const char repl[] = "# Replication\r\nrole:master\r\n"
                             "connected_slaves:0\r\n";
  static const char cut[] = "redis_version:8.2.3\r\naof_enabled:";
  ASSERT_EQ(dlock__route_aof_info(on8, sizeof(on8) - 1), 1);
  ASSERT_EQ(dlock__route_aof_info(valkey, sizeof(valkey) - 1), 1);
  ASSERT_EQ(dlock__route_aof_info(old, sizeof(old) - 1), 0);
  ASSERT_EQ(dlock__route_aof_info(off, sizeof(off) - 1), 0);
  ASSERT_EQ(dlock__route_aof_info(repl, sizeof(repl) - 1), -1);
  ASSERT_EQ(dlock__route_aof_info(cut, sizeof(cut) - 1), -1);
}
