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
