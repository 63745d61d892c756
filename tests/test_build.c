/*
 * Tests of what the build generates: the Lua scripts embedded from
 * src/lua. The library sends EVALSHA and falls back to EVAL on NOSCRIPT, so
 * a wrong digest would still work, only with every call sending the whole
 * script; only a comparison with Redis's own digest shows it.
 */
#include "harness/redis_proc.h"
#include "harness/test.h"
#include "scripts.h"

extern const dlock__script *const dlock__scripts_all[];

/* Whether some line of 'body' is an include line, "--@include NAME" after
 * spaces, which cmake/embed_lua.cmake should have replaced by its piece. */
static int has_include_line(const char *body) {
  for (const char *line = body; line != NULL;) {
    const char *p = line + strspn(line, " ");
    if (strncmp(p, "--@include", 10) == 0)
      return 1;
    line = strchr(line, '\n');
    if (line != NULL)
      line++;
  }
  return 0;
}

TEST(build_embeds_every_script) {
  int n = 0;
  for (const dlock__script *const *s = dlock__scripts_all; *s; s++) {
    const dlock__script *sc = *s;
    ASSERT_NOT_NULL(sc->name);
    ASSERT_GT(sc->len, 0);
    /* A NUL follows the body, and none is inside it. */
    ASSERT_EQ(sc->body[sc->len], '\0');
    ASSERT_EQ(strlen(sc->body), sc->len);
    ASSERT_EQ(strlen(sc->sha), 40);
    ASSERT_EQ(strspn(sc->sha, "0123456789abcdef"), 40);
    /* What Redis runs has every piece the script includes put in. */
    if (has_include_line(sc->body))
      TEST_FAIL("%s still has an include line", sc->name);
    /* Every script that publishes has its variant for a cluster with
     * sharded pub/sub, which publishes with SPUBLISH only. */
    int publishes = strstr(sc->body, "'publish'") != NULL ||
                    strstr(sc->body, "\"publish\"") != NULL;
    if (publishes != (sc->sharded != NULL))
      TEST_FAIL("%s publishes (%d) but its sharded variant is %s", sc->name,
                publishes, sc->sharded != NULL ? "there" : "missing");
    if (sc->sharded != NULL) {
      ASSERT_NULL(strstr(sc->sharded->body, "'publish'"));
      ASSERT_NULL(strstr(sc->sharded->body, "\"publish\""));
      ASSERT_NOT_NULL(strstr(sc->sharded->body, "redis.call('spublish'"));
      ASSERT_EQ(strlen(sc->sharded->body), sc->sharded->len);
      ASSERT_STR_EQ(sc->sharded->name, sc->name);
    }
    n++;
  }
  /* DLOCK_LUA_COUNT: how many .lua files src/lua had at configure time. */
  ASSERT_EQ(n, DLOCK_LUA_COUNT);
  ASSERT_STR_EQ(dlock__script_acquire.name, "acquire");
}

/* A function a script defines costs every call of it a closure, so a
 * script carries only the functions it calls: the pieces of src/lua/lib
 * are put in only where a script includes them, never before every
 * script. */
TEST(build_scripts_define_only_functions_they_call) {
  for (const dlock__script *const *p = dlock__scripts_all; *p; p++) {
    const char *body = (*p)->body;
    const char *def = "local function ";
    for (const char *q = strstr(body, def); q != NULL; q = strstr(q + 1, def)) {
      const char *name = q + strlen(def);
      size_t len = strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789_");
      ASSERT_GT(len, 0);
      char call[64];
      ASSERT_LT(len, sizeof(call) - 1);
      memcpy(call, name, len);
      call[len] = '(';
      call[len + 1] = '\0';
      /* The definition's own "name(" is the first; a call is another. */
      const char *first = strstr(body, call);
      if (first == NULL || strstr(first + 1, call) == NULL)
        TEST_FAIL("%s defines %.*s but never calls it", (*p)->name, (int)len,
                  name);
    }
  }
}

TEST(build_script_sha_matches_redis) {
  rp_server_t *s = NULL;
  ASSERT_EQ(rp_start(NULL, &s), 0);
  for (const dlock__script *const *p = dlock__scripts_all; *p; p++) {
    redisReply *r = rp_cmd(s, "SCRIPT LOAD %b", (*p)->body, (*p)->len);
    ASSERT_NOT_NULL(r);
    if (r->type != REDIS_REPLY_STRING)
      TEST_FAIL("SCRIPT LOAD of %s: %s", (*p)->name, r->str ? r->str : "?");
    ASSERT_STR_EQ(r->str, (*p)->sha);
    freeReplyObject(r);
    const dlock__script *v = (*p)->sharded;
    if (v == NULL)
      continue;
    r = rp_cmd(s, "SCRIPT LOAD %b", v->body, v->len);
    ASSERT_NOT_NULL(r);
    if (r->type != REDIS_REPLY_STRING)
      TEST_FAIL("SCRIPT LOAD of sharded %s: %s", v->name,
                r->str ? r->str : "?");
    ASSERT_STR_EQ(r->str, v->sha);
    freeReplyObject(r);
  }
  rp_free(s);
}
