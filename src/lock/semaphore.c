/*
 * Semaphores (Redisson's RSemaphore), expirable-permit semaphores
 * (RPermitExpirableSemaphore) and count-down latches (RCountDownLatch), in
 * Redisson's layout (see dlock.h): their names, their calls and what their
 * replies mean. The engine sends the calls and waits (engine/counter.c,
 * sem.c, psem.c, latch_wait.c).
 */
#include "alloc.h"
#include "sem_kinds.h"

#include "error.h"
#include "format_list.h"
#include "keys.h"
#include "reply.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- permit ids ---------------------------------------------------------
 */

/* FNV-1a over the client id: the client's half of its permit ids. Two
 * live clients never share an id (dlock.h), so neither do their permits
 * but for a 64-bit hash collision. */
static uint64_t client_hash(const dlock_client_t *c) {
  uint64_t h = 1469598103934665603ULL;
  for (const char *p = c->id; *p != '\0'; p++) {
    h ^= (unsigned char)*p;
    h *= 1099511628211ULL;
  }
  return h;
}

static void put_be64(unsigned char *out, uint64_t v) {
  for (int i = 7; i >= 0; i--) {
    out[i] = (unsigned char)(v & 0xff);
    v >>= 8;
  }
}

static uint64_t get_be64(const unsigned char *in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++)
    v = (v << 8) | in[i];
  return v;
}

void dlock__permit_id(const dlock_client_t *c, uint64_t owner,
                      unsigned char out[DLOCK__PERMIT_ID_BYTES]) {
  put_be64(out, client_hash(c));
  put_be64(out + 8, owner);
}

int dlock__permit_zset(const char *name, size_t len, char **out,
                       size_t *out_len) {
  return dlock__suffixed(name, len, "timeout", 7, out, out_len);
}

void dlock__permit_hex(const unsigned char *b, size_t n, char *out) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = digits[b[i] >> 4];
    out[2 * i + 1] = digits[b[i] & 15];
  }
  out[2 * n] = '\0';
}

static int from_hex(const char *s, unsigned char *out, size_t n) {
  for (size_t i = 0; i < 2 * n; i++) {
    char ch = s[i];
    int v = ch >= '0' && ch <= '9'   ? ch - '0'
            : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
            : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
                                     : -1;
    if (v < 0)
      return -1;
    if (i % 2 == 0)
      out[i / 2] = (unsigned char)(v << 4);
    else
      out[i / 2] |= (unsigned char)v;
  }
  return s[2 * n] == '\0' ? 0 : -1;
}

int dlock__permit_parse(const dlock_client_t *c, const char *id,
                        unsigned char raw[DLOCK__PERMIT_ID_BYTES],
                        uint64_t *owner, int *ours) {
  if (strnlen(id, 2 * DLOCK__PERMIT_ID_BYTES + 1) !=
          2 * DLOCK__PERMIT_ID_BYTES ||
      from_hex(id, raw, DLOCK__PERMIT_ID_BYTES) != 0)
    return dlock__fail(DLOCK_EINVAL,
                       "permit id \"%.40s\" is not 32 hexadecimal digits", id);
  unsigned char mine[DLOCK__PERMIT_ID_BYTES];
  *owner = get_be64(raw + 8);
  dlock__permit_id(c, *owner, mine);
  *ours = memcmp(mine, raw, 8) == 0;
  return 0;
}

/* ---- names --------------------------------------------------------------
 */

/* redisson_countdownlatch__channel__{name}: Redisson puts the braces round
 * the name whatever it holds. */
static int latch_channel(const char *name, size_t len,
                         dlock__counter_names *n) {
  static const char prefix[] = "redisson_countdownlatch__channel__{";
  size_t plen = sizeof(prefix) - 1;
  n->channel = dlock__malloc(plen + len + 2);
  if (n->channel == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory creating a latch");
  memcpy(n->channel, prefix, plen);
  memcpy(n->channel + plen, name, len);
  n->channel[plen + len] = '}';
  n->channel[plen + len + 1] = '\0';
  n->channel_len = plen + len + 1;
  return 0;
}

int dlock__counter_names_make(int type, const char *name, size_t len,
                              dlock__counter_names *n) {
  memset(n, 0, sizeof(*n));
  if ((n->name = dlock__memdup(name, len)) == NULL)
    return dlock__fail(DLOCK_ENOMEM, type == DLOCK__LATCH
                                         ? "out of memory creating a latch"
                                         : "out of memory creating a "
                                           "semaphore");
  n->len = len;
  int rc = type == DLOCK__LATCH ? latch_channel(name, len, n)
                                : dlock__prefixed("redisson_sc", name, len,
                                                  &n->channel, &n->channel_len);
  if (rc == 0 && type == DLOCK__PSEM)
    rc = dlock__permit_zset(name, len, &n->zset, &n->zset_len);
  if (rc == 0 && type == DLOCK__PSEM)
    rc = dlock__prefixed("dlock_permit_token", name, len, &n->token_key,
                         &n->token_key_len);
  if (rc != 0)
    dlock__counter_names_free(n);
  return rc;
}

void dlock__counter_names_free(dlock__counter_names *n) {
  dlock__free(n->name);
  dlock__free(n->channel);
  dlock__free(n->zset);
  dlock__free(n->token_key);
  memset(n, 0, sizeof(*n));
}

/* ---- calls --------------------------------------------------------------
 */

/* Puts the keys, then the arguments, of a call of 'script' into 'a'. */
static void script_call(dlock__counter_call *a, const dlock__script *script,
                        int nkeys, int nargs, const char *const *argv,
                        const size_t *lens) {
  for (int i = 0; i < nkeys + nargs; i++) {
    a->argv[i] = argv[i];
    a->lens[i] = lens[i];
  }
  a->argc = 0;
  a->call.script = script;
  a->call.nkeys = nkeys;
  a->call.nargs = nargs;
  a->call.argv = a->argv;
  a->call.lens = a->lens;
}

/* A call on the name and the channel, with a number as its one argument. */
static void counted_call(const dlock__counter_names *n, int64_t v,
                         const dlock__script *script, dlock__counter_call *a) {
  snprintf(a->n, sizeof(a->n), "%" PRId64, v);
  const char *argv[] = {n->name, n->channel, a->n};
  const size_t lens[] = {n->len, n->channel_len, strlen(a->n)};
  script_call(a, script, 2, 1, argv, lens);
}

void dlock__sem_set_call(const dlock__counter_names *n, int64_t permits,
                         dlock__counter_call *a) {
  counted_call(n, permits, &dlock__script_sem_set, a);
}

void dlock__sem_add_call(const dlock__counter_names *n, int64_t magnitude,
                         int add, dlock__counter_call *a) {
  snprintf(a->n, sizeof(a->n), "%" PRId64, magnitude);
  const char *argv[] = {n->name, n->channel, a->n, add ? "1" : "0"};
  const size_t lens[] = {n->len, n->channel_len, strlen(a->n), 1};
  script_call(a, &dlock__script_sem_add, 2, 2, argv, lens);
}

void dlock__sem_acquire_call(const dlock__counter_names *n, int64_t permits,
                             dlock__counter_call *a) {
  snprintf(a->n, sizeof(a->n), "%" PRId64, permits);
  const char *argv[] = {n->name, a->n};
  const size_t lens[] = {n->len, strlen(a->n)};
  script_call(a, &dlock__script_sem_acquire, 1, 1, argv, lens);
}

void dlock__sem_release_call(const dlock__counter_names *n, int64_t permits,
                             dlock__counter_call *a) {
  counted_call(n, permits, &dlock__script_sem_release, a);
}

void dlock__sem_drain_call(const dlock__counter_names *n,
                           dlock__counter_call *a) {
  script_call(a, &dlock__script_sem_drain, 1, 0, (const char *[]){n->name},
              (const size_t[]){n->len});
}

void dlock__counter_get_call(const dlock__counter_names *n,
                             dlock__counter_call *a) {
  memset(&a->call, 0, sizeof(a->call));
  a->argv[0] = "GET";
  a->lens[0] = 3;
  a->argv[1] = n->name;
  a->lens[1] = n->len;
  a->argc = 2;
}

void dlock__psem_acquire_call(const dlock__counter_names *n, int64_t lease_ms,
                              const unsigned char id[DLOCK__PERMIT_ID_BYTES],
                              dlock__counter_call *a) {
  snprintf(a->n, sizeof(a->n), "%" PRId64, lease_ms);
  const char *argv[] = {n->name,      n->zset, n->channel,
                        n->token_key, a->n,    (const char *)id};
  const size_t lens[] = {n->len,         n->zset_len,
                         n->channel_len, n->token_key_len,
                         strlen(a->n),   DLOCK__PERMIT_ID_BYTES};
  script_call(a, &dlock__script_psem_acquire, 4, 2, argv, lens);
}

void dlock__psem_release_call(const dlock__counter_names *n,
                              const unsigned char id[DLOCK__PERMIT_ID_BYTES],
                              dlock__counter_call *a) {
  dlock__permit_hex(id, DLOCK__PERMIT_ID_BYTES, a->hex);
  const char *argv[] = {n->name, n->zset, n->channel, (const char *)id, a->hex};
  const size_t lens[] = {n->len, n->zset_len, n->channel_len,
                         DLOCK__PERMIT_ID_BYTES, 2 * DLOCK__PERMIT_ID_BYTES};
  script_call(a, &dlock__script_psem_release, 3, 2, argv, lens);
}

void dlock__psem_count_call(const dlock__counter_names *n,
                            dlock__counter_call *a) {
  const char *argv[] = {n->name, n->zset, n->channel};
  const size_t lens[] = {n->len, n->zset_len, n->channel_len};
  script_call(a, &dlock__script_psem_count, 3, 0, argv, lens);
}

void dlock__latch_set_call(const dlock__counter_names *n, int64_t count,
                           dlock__counter_call *a) {
  counted_call(n, count, &dlock__script_latch_set, a);
}

void dlock__latch_count_down_call(const dlock__counter_names *n,
                                  dlock__counter_call *a) {
  const char *argv[] = {n->name, n->channel};
  const size_t lens[] = {n->len, n->channel_len};
  script_call(a, &dlock__script_latch_count_down, 2, 0, argv, lens);
}

/* ---- outcomes -----------------------------------------------------------
 */

/* The integer element 'i' of an array reply; 0 or DLOCK_EPROTO. */
static int element(const redisReply *r, size_t i, int64_t *out) {
  if (r == NULL || r->type != REDIS_REPLY_ARRAY || i >= r->elements)
    return dlock__fail(DLOCK_EPROTO, "a semaphore script gave a bad reply");
  return dlock__decode_integer(r->element[i], out);
}

int dlock__sem_acquire_outcome(const redisReply *r, int *pass) {
  int64_t taken = 0, free_permits = 0;
  int rc = element(r, 0, &taken);
  if (rc == 0)
    rc = element(r, 1, &free_permits);
  if (rc != 0)
    return rc;
  if (taken == 1)
    return 0;
  *pass = free_permits > 0;
  return 1;
}

int dlock__psem_acquire_outcome(const redisReply *r, dlock__psem_taken *o) {
  int64_t taken = 0, a = 0, ends = 0;
  int rc = element(r, 0, &taken);
  if (rc == 0)
    rc = element(r, 1, &a);
  if (rc == 0 && taken == 1)
    rc = element(r, 2, &ends);
  if (rc != 0)
    return rc;
  memset(o, 0, sizeof(*o));
  if (taken != 1) {
    o->sleep_ms = a;
    return 1;
  }
  o->token = (uint64_t)a;
  o->expires_ms = ends;
  return 0;
}

int dlock__psem_count_outcome(const redisReply *r, int64_t *free_permits,
                              int64_t *taken) {
  int rc = element(r, 0, free_permits);
  if (rc == 0)
    rc = element(r, 1, taken);
  if (rc == 0 && *free_permits < 0)
    *free_permits = 0;
  return rc;
}

int dlock__sem_add_outcome(const dlock__counter_names *n, int64_t magnitude,
                           int64_t now, int64_t *free_after) {
  if (now < 0)
    return dlock__fail(DLOCK_EINVAL,
                       "cannot take %lld permits away from semaphore "
                       "\"%.100s\": fewer are free; nothing was changed",
                       (long long)magnitude, n->name);
  if (free_after != NULL)
    *free_after = now;
  return 0;
}

int dlock__sem_available_outcome(const dlock__counter_names *n,
                                 const redisReply *r, int64_t *out) {
  int rc = r->type == REDIS_REPLY_ERROR ? dlock__fail_reply(r->str, r->len)
                                        : dlock__decode_number(r, 0, out);
  if (rc == DLOCK_EPROTO)
    rc = dlock__fail(DLOCK_ENOTLOCK,
                     "\"%.100s\" holds a string that is not a number of "
                     "permits",
                     n->name);
  return rc;
}

int dlock__latch_count_outcome(const dlock__counter_names *n,
                               const redisReply *r, int64_t *out) {
  int64_t v = 0;
  if (r->type == REDIS_REPLY_ERROR)
    return dlock__fail(DLOCK_ENOTLOCK, "\"%.100s\" is not a latch: %.*s",
                       n->name, (int)r->len, r->str);
  if (dlock__decode_number(r, 0, &v) != 0)
    return dlock__fail(DLOCK_ENOTLOCK,
                       "\"%.100s\" holds a string that is not a count",
                       n->name);
  *out = v > 0 ? v : 0;
  return 0;
}

int dlock__latch_count_down_outcome(const dlock__counter_names *n,
                                    int64_t left) {
  if (left < 0)
    return dlock__fail(DLOCK_EINVAL,
                       "latch \"%.100s\" is at zero or has no count: "
                       "counting down would take it below zero; nothing "
                       "was changed",
                       n->name);
  return 0;
}

int dlock__psem_release_outcome(const dlock__counter_names *n, const char *id,
                                int64_t result, int known, int lost) {
  if (lost || result == 0 || (result < 0 && known))
    return dlock__fail(DLOCK_ELOST,
                       "permit %s of semaphore \"%.100s\" was lost while "
                       "held (its lease ended first): another holder may "
                       "have had it meanwhile",
                       id, n->name);
  if (result < 0)
    return dlock__fail(DLOCK_ENOTHELD,
                       "permit %s of semaphore \"%.100s\" is not taken: "
                       "never acquired, or released already",
                       id, n->name);
  return 0;
}

/* ---- inspection ---------------------------------------------------------
 */

int dlock__counter_queries(const char *name, size_t len, const char *zset,
                           size_t zset_len, char **cmds, size_t *lens) {
  const char *type[] = {"TYPE", name};
  const size_t type_l[] = {4, len};
  const char *get[] = {"GET", name};
  const size_t get_l[] = {3, len};
  const char *pttl[] = {"PTTL", name};
  const size_t pttl_l[] = {4, len};
  const char *ztype[] = {"TYPE", zset};
  const size_t ztype_l[] = {4, zset_len};
  const char *zrange[] = {"ZRANGE", zset, "0", "-1", "WITHSCORES"};
  const size_t zrange_l[] = {6, zset_len, 1, 2, 10};
  dlock__words w[DLOCK__CQ_COUNT];
  w[DLOCK__CQ_TYPE] = (dlock__words){2, type, type_l};
  /* GET of a key of another type is an error reply, which TYPE explains
   * better: it is read only when TYPE says string (see decode_counter). */
  w[DLOCK__CQ_GET] = (dlock__words){2, get, get_l};
  w[DLOCK__CQ_PTTL] = (dlock__words){2, pttl, pttl_l};
  w[DLOCK__CQ_ZTYPE] = (dlock__words){2, ztype, ztype_l};
  w[DLOCK__CQ_ZRANGE] = (dlock__words){5, zrange, zrange_l};
  return dlock__format_list(DLOCK__CQ_COUNT, w, cmds, lens, "a semaphore");
}

void dlock__counter_queries_free(char **cmds) {
  dlock__format_list_free(DLOCK__CQ_COUNT, cmds);
}

static int decode_counter(redisReply **r, const char *name,
                          dlock_counter_info_t *info) {
  for (int i = 0; i < DLOCK__CQ_COUNT; i++)
    if (r[i]->type == REDIS_REPLY_ERROR)
      return dlock__fail_reply(r[i]->str, r[i]->len);
  if (r[DLOCK__CQ_TYPE]->type != REDIS_REPLY_STATUS ||
      r[DLOCK__CQ_ZTYPE]->type != REDIS_REPLY_STATUS)
    return dlock__fail(DLOCK_EPROTO, "TYPE gave a bad reply");
  const char *type = r[DLOCK__CQ_TYPE]->str, *ztype = r[DLOCK__CQ_ZTYPE]->str;
  if (strcmp(type, "none") != 0 && strcmp(type, "string") != 0)
    return dlock__fail(DLOCK_ENOTLOCK,
                       "\"%.100s\" is a %s, not a semaphore or a latch", name,
                       type);
  if (strcmp(type, "string") == 0) {
    if (dlock__decode_number(r[DLOCK__CQ_GET], 0, &info->count) != 0)
      return dlock__fail(DLOCK_ENOTLOCK,
                         "\"%.100s\" holds a string that is not a number",
                         name);
    info->exists = 1;
  }
  int64_t pttl = 0;
  if (dlock__decode_integer(r[DLOCK__CQ_PTTL], &pttl) != 0)
    return DLOCK_EPROTO;
  info->ttl_ms = pttl == -2 ? 0 : pttl == -1 ? DLOCK_NO_EXPIRY : pttl;
  info->expirable = strcmp(ztype, "zset") == 0;
  const redisReply *z = r[DLOCK__CQ_ZRANGE];
  if (!info->expirable)
    return 0;
  int rc;
  info->permits = dlock__reply_pairs_alloc(z, sizeof(*info->permits), "ZRANGE",
                                           "semaphore", &rc);
  if (info->permits == NULL)
    return rc;
  for (size_t i = 0; i + 1 < z->elements; i += 2) {
    const redisReply *m = z->element[i], *score = z->element[i + 1];
    if (m->type != REDIS_REPLY_STRING)
      continue;
    dlock_permit_info_t *p = &info->permits[info->npermits++];
    /* Redisson's current ids are 16 bytes; older ones their hex text. */
    if (m->len == DLOCK__PERMIT_ID_BYTES)
      dlock__permit_hex((const unsigned char *)m->str, m->len, p->id);
    else
      snprintf(p->id, sizeof(p->id), "%.*s", (int)m->len, m->str);
    double at =
        score->type == REDIS_REPLY_STRING ? strtod(score->str, NULL) : 0;
    /* Redisson's mark of a permit without a lease. */
    p->expires_ms = at >= 922337203685477.0 ? DLOCK_NO_EXPIRY : (int64_t)at;
  }
  return 0;
}

int dlock__counter_info_decode(redisReply **r, const char *name,
                               dlock_counter_info_t *info) {
  /* A key of another type makes GET (and ZRANGE) fail: TYPE says what it
   * is instead. */
  if (r[DLOCK__CQ_TYPE]->type == REDIS_REPLY_STATUS &&
      strcmp(r[DLOCK__CQ_TYPE]->str, "none") != 0 &&
      strcmp(r[DLOCK__CQ_TYPE]->str, "string") != 0)
    return dlock__fail(DLOCK_ENOTLOCK,
                       "\"%.100s\" is a %s, not a semaphore or a latch", name,
                       r[DLOCK__CQ_TYPE]->str);
  if (r[DLOCK__CQ_ZTYPE]->type == REDIS_REPLY_STATUS &&
      strcmp(r[DLOCK__CQ_ZTYPE]->str, "none") != 0 &&
      strcmp(r[DLOCK__CQ_ZTYPE]->str, "zset") != 0)
    return dlock__fail(DLOCK_ENOTLOCK,
                       "the permits of \"%.100s\" are a %s, not a zset", name,
                       r[DLOCK__CQ_ZTYPE]->str);
  return decode_counter(r, name, info);
}
