/*
 * Deployments that break locks are reported: a server whose
 * maxmemory-policy may evict keys (which evicts a held lock: every lock
 * key has an expiry, and volatile-ttl evicts the shortest first) gets a
 * warning through on_warning at dlock_client_open, also when CONFIG is
 * renamed away (INFO memory says it too). noeviction gets none.
 */
#include <pthread.h>

#include "lock_util.h"

typedef struct warnings {
  int count;
  char text[1024];
} warnings_t;

static void record_warning(void *data, const char *text) {
  warnings_t *w = data;
  if (w->count++ == 0)
    snprintf(w->text, sizeof(w->text), "%s", text);
}

/* Opens and closes a client on 's' and returns the warnings it gave. */
static warnings_t open_and_collect(rp_server_t *s) {
  warnings_t w;
  memset(&w, 0, sizeof(w));
  dlock_options_t o;
  lu_options(&o, s);
  o.on_warning = record_warning;
  o.on_warning_data = &w;
  dlock_client_t *c = lu_client_opts(&o);
  /* The check leaves no error detail behind on success. */
  ASSERT_STR_EQ(dlock_last_error(), "");
  dlock_client_close(c);
  if (w.count > 0)
    printf("warning: %s\n", w.text);
  return w;
}

static rp_server_t *server_with(const char *conf) {
  rp_options_t ro;
  rp_options_init(&ro);
  ro.unix_socket = 1;
  ro.extra_conf = conf;
  return lu_server_opts(&ro);
}

TEST(dep_evicting_policy_warns) {
  rp_server_t *s = server_with("maxmemory-policy volatile-ttl");
  warnings_t w = open_and_collect(s);
  ASSERT_EQ(w.count, 1);
  ASSERT_NOT_NULL(strstr(w.text, "volatile-ttl"));
  ASSERT_NOT_NULL(strstr(w.text, "noeviction"));
  ASSERT_NOT_NULL(strstr(w.text, rp_socket(s)));

  /* Without a callback the client opens as ever, and works. */
  dlock_client_t *c = lu_client(s);
  dlock_t *l = lu_get(c, "dep:lock");
  ASSERT_DLOCK_OK(dlock_lock(l, 5000));
  ASSERT_DLOCK_OK(dlock_unlock(l));
  dlock_free(l);
  dlock_client_close(c);

  /* The policy changed at run time is seen by the next client. */
  lu_ok(rp_cmd(s, "CONFIG SET maxmemory-policy allkeys-lru"));
  w = open_and_collect(s);
  ASSERT_EQ(w.count, 1);
  ASSERT_NOT_NULL(strstr(w.text, "allkeys-lru"));
  lu_ok(rp_cmd(s, "CONFIG SET maxmemory-policy noeviction"));
  w = open_and_collect(s);
  ASSERT_EQ(w.count, 0);
  rp_free(s);
}

TEST(dep_noeviction_gives_no_warning) {
  rp_server_t *s = server_with(NULL);
  warnings_t w = open_and_collect(s);
  ASSERT_EQ(w.count, 0);
  ASSERT_EQ(lu_dbsize(s), 0);
  rp_free(s);
}

/* Where CONFIG is renamed away (as hardened or managed servers do), the
 * policy is read from INFO memory. */
TEST(dep_policy_read_from_info_without_config) {
  rp_server_t *s = server_with("maxmemory-policy allkeys-random\n"
                               "rename-command CONFIG \"\"");
  warnings_t w = open_and_collect(s);
  ASSERT_EQ(w.count, 1);
  ASSERT_NOT_NULL(strstr(w.text, "allkeys-random"));
  rp_free(s);
}
