/*
 * The regular forms of the API and its guard rails: a forced release that
 * refuses keys that are not locks of its kind, plain commands on the
 * client's own connection (dlock_client_command), the name-and-length
 * constructor of every kind, inspection through a handle, the dlock_query_*
 * calls that keep answers and errors apart, and one value for "no expiry".
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "lock_util.h"

/* ---- forced release ---------------------------------------------------- */

/* The string value of 'key' as the server has it; freed by the caller. */
static char *server_get(rp_server_t *s, const char *key) {
  redisReply *r = rp_cmd(s, "GET %s", key);
  ASSERT_NOT_NULL(r);
  ASSERT_EQ(r->type, REDIS_REPLY_STRING);
  char *v = strdup(r->str);
  freeReplyObject(r);
  return v;
}

/* Forces 'l', expecting DLOCK_ENOTLOCK with a detail saying why. */
static void expect_not_a_lock(dlock_t *l, const char *why) {
  int rc = dlock_force_unlock(l);
  printf("forced release: %s \"%s\"\n", dlock_err_name(rc), dlock_last_error());
  ASSERT_DLOCK_ERR(rc, DLOCK_ENOTLOCK);
  ASSERT_NOT_NULL(strstr(dlock_last_error(), why));
  ASSERT_NOT_NULL(strstr(dlock_last_error(), "nothing deleted"));
}

TEST(api_force_unlock_refuses_keys_that_are_not_locks_of_its_kind) {
  rp_server_t *s = lu_server(1);
  dlock_client_t *c = lu_client(s);
  dlock_t *plain = NULL, *fair = NULL, *read = NULL, *write = NULL;

  /* A string: the value survives whichever handle asks. */
  lu_ok(rp_cmd(s, "SET counter 5"));
  ASSERT_DLOCK_OK(dlock_get(c, "counter", &plain));
  ASSERT_DLOCK_OK(dlock_get_fair(c, "counter", &fair));
  ASSERT_DLOCK_OK(dlock_get_rw(c, "counter", &read, &write));
  expect_not_a_lock(plain, "holds a string");
  expect_not_a_lock(fair, "holds a string");
  expect_not_a_lock(write, "holds a string");
  char *v = server_get(s, "counter");
  ASSERT_STR_EQ(v, "5");
  free(v);
  dlock_free(plain);
  dlock_free(fair);
  dlock_free(read);
  dlock_free(write);

  /* A list and a hash that are no locks. */
  lu_ok(rp_cmd(s, "RPUSH jobs a b"));
  plain = lu_get(c, "jobs");
  expect_not_a_lock(plain, "holds a list");
  ASSERT_EQ(lu_exists(s, "jobs"), 1);
  dlock_free(plain);
  lu_ok(rp_cmd(s, "HSET user:1 name bob age 42"));
  plain = lu_get(c, "user:1");
  expect_not_a_lock(plain, "not a lock");
  ASSERT_EQ(lu_hlen(s, "user:1"), 2);
  dlock_free(plain);

  /* A read-write lock is not deleted through an exclusive handle, nor an
   * exclusive lock through a read-write one; each through its own is. */
  ASSERT_DLOCK_OK(dlock_get_rw(c, "rw", &read, &write));
  ASSERT_DLOCK_OK(dlock_lock(read, 10000));
  plain = lu_get(c, "rw");
  expect_not_a_lock(plain, "read-write lock");
  ASSERT_DLOCK_OK(dlock_get_fair(c, "rw", &fair));
  expect_not_a_lock(fair, "read-write lock");
  ASSERT_EQ(lu_exists(s, "rw"), 1);
  ASSERT_EQ(dlock_force_unlock(write), 1);
  ASSERT_EQ(lu_exists(s, "rw"), 0);
  ASSERT_DLOCK_ERR(dlock_unlock(read), DLOCK_ELOST);
  dlock_free(fair);
  dlock_free(plain);

  plain = lu_get(c, "ex");
  ASSERT_DLOCK_OK(dlock_lock(plain, 10000));
  dlock_free(read);
  dlock_free(write);
  ASSERT_DLOCK_OK(dlock_get_rw(c, "ex", &read, &write));
  expect_not_a_lock(read, "not a read-write lock");
  expect_not_a_lock(write, "not a read-write lock");
  ASSERT_EQ(lu_exists(s, "ex"), 1);
  /* A fair lock is stored as a reentrant one: either handle deletes it. */
  ASSERT_DLOCK_OK(dlock_get_fair(c, "ex", &fair));
  ASSERT_EQ(dlock_force_unlock(fair), 1);
  ASSERT_EQ(lu_exists(s, "ex"), 0);
  ASSERT_EQ(dlock_force_unlock(plain), 0);
  ASSERT_DLOCK_ERR(dlock_unlock(plain), DLOCK_ELOST);

  dlock_free(fair);
  dlock_free(plain);
  dlock_free(read);
  dlock_free(write);
  dlock_client_close(c);
  rp_free(s);
}

/* ---- plain commands ---------------------------------------------------- */

static dlock_reply_t *command_ok(dlock_client_t *c, size_t argc,
                                 const char *const *argv, const size_t *lens) {
  dlock_reply_t *r = NULL;
  ASSERT_DLOCK_OK(dlock_client_command(c, argc, argv, lens, &r));
  ASSERT_NOT_NULL(r);
  return r;
}

static void expect_refused(dlock_client_t *c, size_t argc,
                           const char *const *argv) {
  dlock_reply_t *r = (dlock_reply_t *)1;
  int rc = dlock_client_command(c, argc, argv, NULL, &r);
  printf("%s: %s \"%s\"\n", argv[0], dlock_err_name(rc), dlock_last_error());
  ASSERT_DLOCK_ERR(rc, DLOCK_EINVAL);
  ASSERT_NULL(r);
}

TEST(api_client_command_uses_the_locks_connection) {
  rp_options_t o;
  rp_options_init(&o);
  o.requirepass = "cmd-secret";
  rp_server_t *s = lu_server_opts(&o);
  char url[256];
  /* The password and the database come from the URL, as for the locks. */
  snprintf(url, sizeof url, "%s/3", rp_url(s));
  dlock_options_t opt;
  lu_options(&opt, s);
  opt.url = url;
  dlock_client_t *c = lu_client_opts(&opt);

  const char *set[] = {"SET", "stock", "90"};
  dlock_reply_t *r = command_ok(c, 3, set, NULL);
  ASSERT_EQ(r->type, DLOCK_REPLY_STATUS);
  ASSERT_STR_EQ(r->str, "OK");
  dlock_reply_free(r);
  const char *decr[] = {"decrby", "stock", "7"};
  r = command_ok(c, 3, decr, NULL);
  ASSERT_EQ(r->type, DLOCK_REPLY_INTEGER);
  ASSERT_EQ(r->integer, 83);
  dlock_reply_free(r);
  const char *get[] = {"GET", "stock"};
  r = command_ok(c, 2, get, NULL);
  ASSERT_EQ(r->type, DLOCK_REPLY_STRING);
  ASSERT_EQ(r->len, 2);
  ASSERT_STR_EQ(r->str, "83");
  dlock_reply_free(r);
  const char *missing[] = {"GET", "no-such-key"};
  r = command_ok(c, 2, missing, NULL);
  ASSERT_EQ(r->type, DLOCK_REPLY_NIL);
  dlock_reply_free(r);

  /* Binary arguments and values, and arrays. */
  const char *bin[] = {"RPUSH", "bin", "a\0b", ""};
  const size_t bin_lens[] = {5, 3, 3, 0};
  r = command_ok(c, 4, bin, bin_lens);
  ASSERT_EQ(r->integer, 2);
  dlock_reply_free(r);
  const char *range[] = {"LRANGE", "bin", "0", "-1"};
  r = command_ok(c, 4, range, NULL);
  ASSERT_EQ(r->type, DLOCK_REPLY_ARRAY);
  ASSERT_EQ(r->nelements, 2);
  ASSERT_EQ(r->elements[0].type, DLOCK_REPLY_STRING);
  ASSERT_EQ(r->elements[0].len, 3);
  ASSERT_EQ(memcmp(r->elements[0].str, "a\0b", 3), 0);
  ASSERT_EQ(r->elements[1].len, 0);
  dlock_reply_free(r);
  const char *empty[] = {"LRANGE", "nothing", "0", "-1"};
  r = command_ok(c, 4, empty, NULL);
  ASSERT_EQ(r->type, DLOCK_REPLY_ARRAY);
  ASSERT_EQ(r->nelements, 0);
  dlock_reply_free(r);

  /* The keys went to database 3 of the password-protected server. */
  redisReply *info = rp_cmd(s, "INFO keyspace");
  ASSERT_NOT_NULL(info);
  ASSERT_NOT_NULL(strstr(info->str, "db3:keys=2"));
  ASSERT_NULL(strstr(info->str, "db0:"));
  freeReplyObject(info);

  /* An error reply is a code with Redis's text, and no reply. */
  const char *wrong[] = {"HSET", "stock", "f", "v"};
  r = (dlock_reply_t *)1;
  int rc = dlock_client_command(c, 4, wrong, NULL, &r);
  ASSERT_DLOCK_ERR(rc, DLOCK_ESERVER);
  ASSERT_NULL(r);
  ASSERT_NOT_NULL(strstr(dlock_last_error(), "WRONGTYPE"));

  /* Commands that would change or hold up the shared connection. */
  const char *select[] = {"select", "0"};
  const char *multi[] = {"MULTI"};
  const char *blpop[] = {"BLPOP", "q", "0"};
  const char *sub[] = {"Subscribe", "ch"};
  const char *xread[] = {"XREAD", "block", "0", "STREAMS", "s", "$"};
  const char *reply_off[] = {"CLIENT", "REPLY", "OFF"};
  expect_refused(c, 2, select);
  expect_refused(c, 1, multi);
  expect_refused(c, 3, blpop);
  expect_refused(c, 2, sub);
  expect_refused(c, 6, xread);
  expect_refused(c, 3, reply_off);
  /* Nothing was sent: the connection still answers from database 3. */
  r = command_ok(c, 2, get, NULL);
  ASSERT_STR_EQ(r->str, "83");
  dlock_reply_free(r);

  /* Bad arguments. */
  ASSERT_DLOCK_ERR(dlock_client_command(c, 0, get, NULL, &r), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_client_command(NULL, 2, get, NULL, &r), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_client_command(c, 2, NULL, NULL, &r), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_client_command(c, 2, get, NULL, NULL), DLOCK_EINVAL);
  const char *null_arg[] = {"GET", NULL};
  ASSERT_DLOCK_ERR(dlock_client_command(c, 2, null_arg, NULL, &r),
                   DLOCK_EINVAL);
  dlock_reply_free(NULL);

  /* Locks and commands share the client, and its shutdown. */
  dlock_t *l = lu_get(c, "stock-lock");
  ASSERT_DLOCK_OK(dlock_lock(l, 10000));
  r = command_ok(c, 2, get, NULL);
  dlock_reply_free(r);
  ASSERT_DLOCK_OK(dlock_unlock(l));
  dlock_free(l);
  dlock_client_shutdown(c);
  ASSERT_DLOCK_ERR(dlock_client_command(c, 2, get, NULL, &r), DLOCK_ECANCELED);
  dlock_client_close(c);
  rp_free(s);
}

/* ---- constructors and inspection ----------------------------------------- */

TEST(api_every_kind_has_a_name_and_length_constructor) {
  rp_server_t *s = lu_server(1);
  dlock_client_t *c = lu_client(s);
  static const char name[] = "ki\0nd";
  const size_t len = sizeof name - 1;
  dlock_t *fair = NULL, *spin = NULL, *read = NULL, *write = NULL;
  size_t got_len = 0;

  ASSERT_DLOCK_OK(dlock_getn_fair(c, name, len, &fair));
  ASSERT_EQ(dlock_kind(fair), DLOCK_FAIR);
  ASSERT_EQ(memcmp(dlock_name(fair, &got_len), name, len), 0);
  ASSERT_EQ(got_len, len);
  ASSERT_DLOCK_OK(dlock_lock(fair, 10000));
  ASSERT_EQ(lu_exists_n(s, name, len), 1);
  dlock_info_t *info = NULL;
  ASSERT_DLOCK_OK(dlock_inspect_lock(fair, &info));
  ASSERT_EQ(info->locked, 1);
  ASSERT_EQ(info->nholders, 1);
  ASSERT_NULL(info->mode);
  dlock_info_free(info);
  ASSERT_DLOCK_OK(dlock_unlock(fair));

  ASSERT_DLOCK_OK(dlock_getn_spin(c, name, len, &spin));
  ASSERT_EQ(dlock_kind(spin), DLOCK_SPIN);
  ASSERT_DLOCK_OK(dlock_lock(spin, 10000));
  ASSERT_EQ(lu_exists_n(s, name, len), 1);
  ASSERT_DLOCK_OK(dlock_unlock(spin));

  ASSERT_DLOCK_OK(dlock_getn_rw(c, name, len, &read, &write));
  ASSERT_EQ(dlock_kind(read), DLOCK_READ);
  ASSERT_EQ(dlock_kind(write), DLOCK_WRITE);
  ASSERT_DLOCK_OK(dlock_lock(read, 10000));
  /* Inspecting through either side shows the one lock. */
  ASSERT_DLOCK_OK(dlock_inspect_lock(write, &info));
  ASSERT_STR_EQ(info->mode, "read");
  dlock_info_free(info);
  ASSERT_DLOCK_OK(dlock_unlock(read));

  /* Bad arguments, and composites, which span several locks. */
  dlock_t *r2 = (dlock_t *)1, *w2 = (dlock_t *)1;
  ASSERT_DLOCK_ERR(dlock_getn_rw(c, name, len, NULL, &w2), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_getn_rw(c, name, 0, &r2, &w2), DLOCK_EINVAL);
  ASSERT_NULL(r2);
  ASSERT_NULL(w2);
  ASSERT_DLOCK_ERR(dlock_getn_fair(c, NULL, 3, &w2), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_inspect_lock(NULL, &info), DLOCK_EINVAL);
  dlock_t *parts[] = {fair, spin};
  dlock_t *multi = NULL;
  ASSERT_DLOCK_OK(dlock_get_multi(parts, 2, &multi));
  info = (dlock_info_t *)1;
  ASSERT_DLOCK_ERR(dlock_inspect_lock(multi, &info), DLOCK_EINVAL);
  ASSERT_NULL(info);

  dlock_free(multi);
  dlock_free(fair);
  dlock_free(spin);
  dlock_free(read);
  dlock_free(write);
  dlock_client_close(c);
  rp_free(s);
}

/* ---- questions ---------------------------------------------------------- */

TEST(api_query_calls_keep_answers_and_errors_apart) {
  rp_server_t *s = lu_server(0);
  dlock_options_t o;
  lu_options(&o, s);
  o.command_timeout_ms = 500;
  dlock_client_t *c = lu_client_opts(&o);
  dlock_t *l = lu_get(c, "q");
  int v = -7;
  int64_t ttl = -7;

  ASSERT_DLOCK_OK(dlock_query_locked(l, &v));
  ASSERT_EQ(v, 0);
  ASSERT_DLOCK_OK(dlock_query_ttl(l, &ttl));
  ASSERT_EQ(ttl, 0);
  ASSERT_DLOCK_OK(dlock_lock(l, 20000));
  ASSERT_DLOCK_OK(dlock_lock(l, 20000));
  ASSERT_DLOCK_OK(dlock_query_locked(l, &v));
  ASSERT_EQ(v, 1);
  ASSERT_DLOCK_OK(dlock_query_held(l, &v));
  ASSERT_EQ(v, 1);
  ASSERT_DLOCK_OK(dlock_query_held_as(l, dlock_owner_new(), &v));
  ASSERT_EQ(v, 0);
  ASSERT_DLOCK_OK(dlock_query_hold_count(l, &v));
  ASSERT_EQ(v, 2);
  ASSERT_DLOCK_OK(dlock_query_hold_count_as(l, dlock_self(), &v));
  ASSERT_EQ(v, 2);
  ASSERT_DLOCK_OK(dlock_query_ttl(l, &ttl));
  ASSERT_GT(ttl, 0);
  ASSERT_LE(ttl, 20000);

  /* Held without expiry (PERSIST by some other program): one value says
   * so everywhere. */
  lu_ok(rp_cmd(s, "PERSIST q"));
  ASSERT_DLOCK_OK(dlock_query_ttl(l, &ttl));
  ASSERT_EQ(ttl, DLOCK_NO_EXPIRY);
  ASSERT_EQ(dlock_ttl(l), DLOCK_NO_EXPIRY);
  dlock_info_t *info = NULL;
  ASSERT_DLOCK_OK(dlock_inspect_lock(l, &info));
  ASSERT_EQ(info->ttl_ms, DLOCK_NO_EXPIRY);
  dlock_info_free(info);

  ASSERT_DLOCK_ERR(dlock_query_held(l, NULL), DLOCK_EINVAL);
  ASSERT_DLOCK_ERR(dlock_query_ttl(l, NULL), DLOCK_EINVAL);

  /* With Redis gone, the old calls return a code that C reads as true;
   * the query calls return it apart from the answer, which stays 0. */
  ASSERT_EQ(rp_kill(s), 0);
  int held = dlock_is_held(l);
  printf("dlock_is_held with Redis down: %d (%s)\n", held,
         dlock_err_name(held));
  ASSERT_LT(held, 0);
  v = -7;
  int rc = dlock_query_held(l, &v);
  ASSERT_LT(rc, 0);
  ASSERT_EQ(v, 0);
  ttl = -7;
  rc = dlock_query_ttl(l, &ttl);
  ASSERT_LT(rc, 0);
  ASSERT_EQ(ttl, 0);
  v = -7;
  ASSERT_LT(dlock_query_hold_count(l, &v), 0);
  ASSERT_EQ(v, 0);
  ASSERT_LT(dlock_query_locked(l, &v), 0);
  ASSERT_EQ(v, 0);

  dlock_free(l);
  dlock_client_close(c);
  rp_free(s);
}
