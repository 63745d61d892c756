/*
 * A program built against an older dlock.h, whose dlock_options_t is a
 * prefix of today's, still opens a working client: the library reads only
 * the bytes the program's struct has (the struct is allocated to exactly
 * its size, so a sanitizer or valgrind reports any read past it) and gives
 * the fields it lacks their defaults.
 */
#include "harness/redis_proc.h"
#include "harness/test.h"
#include "lock_util.h"

#include <dlock.h>
#include <stddef.h>
#include <stdlib.h>

/* dlock_options_t as the first header with struct_size declared it: the
 * fields of dlock 0.1, then the size, and nothing after. */
typedef struct options_prefix {
  const char *url;
  int64_t connect_timeout_ms;
  int64_t command_timeout_ms;
  int64_t watchdog_timeout_ms;
  const char *client_id;
  int unlock_retries;
  int64_t fair_wait_timeout_ms;
  int lazy_connect;
  dlock_lost_cb on_lost;
  void *on_lost_data;
  size_t struct_size;
} options_prefix;

/* The simulation is honest only while today's struct starts the same way. */
#define SAME_OFFSET(f)                                                         \
  _Static_assert(offsetof(options_prefix, f) == offsetof(dlock_options_t, f),  \
                 "options_prefix." #f " moved")
SAME_OFFSET(url);
SAME_OFFSET(connect_timeout_ms);
SAME_OFFSET(command_timeout_ms);
SAME_OFFSET(watchdog_timeout_ms);
SAME_OFFSET(client_id);
SAME_OFFSET(unlock_retries);
SAME_OFFSET(fair_wait_timeout_ms);
SAME_OFFSET(lazy_connect);
SAME_OFFSET(on_lost);
SAME_OFFSET(on_lost_data);
SAME_OFFSET(struct_size);

TEST(options_of_an_older_layout_open_a_working_client) {
  rp_server_t *s = lu_server(0);
  /* On the heap, exactly its size: a read past it is an error the
   * sanitizers see. */
  options_prefix *old = malloc(sizeof(*old));
  ASSERT_NOT_NULL(old);
  /* What the older program's inline dlock_options_init compiled to. */
  dlock_options_init_size((dlock_options_t *)old, sizeof(*old));
  ASSERT_EQ(old->struct_size, sizeof(*old));
  ASSERT_EQ(old->command_timeout_ms, 3000);
  old->url = rp_url(s);
  old->client_id = "old-layout-client";
  old->watchdog_timeout_ms = 900;

  dlock_client_t *c = NULL;
  ASSERT_DLOCK_OK(dlock_client_open((const dlock_options_t *)old, &c));
  ASSERT_STR_EQ(dlock_client_id(c), "old-layout-client");
  dlock_t *l = lu_get(c, "layout:old");
  ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));
  /* The watchdog lease is the old struct's, not the default 30 s. */
  int64_t ttl = dlock_ttl(l);
  ASSERT_GT(ttl, 0);
  ASSERT_LE(ttl, 900);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  dlock_free(l);
  dlock_client_close(c);
  free(old);
  rp_free(s);
}
