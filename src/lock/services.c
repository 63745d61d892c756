/*
 * The small services a client gives the lock code: owner fields, the check
 * for a client shut down or inherited across fork(), plain commands, and
 * the pause between the attempts of a call riding out an outage.
 */
#include "client.h"
#include "lock.h"

#include "error.h"
#include "monotime.h"
#include "proto/format.h"
#include "proto/slot.h"
#include "sleep.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

size_t dlock__owner_field(const dlock_client_t *c, uint64_t owner,
                          char buf[DLOCK__FIELD_MAX]) {
  /* "<client id>:<owner>" without stdio: this is on every call's path. */
  size_t id_len = strlen(c->id);
  memcpy(buf, c->id, id_len);
  buf[id_len] = ':';
  return id_len + 1 + dlock__fmt_u64(buf + id_len + 1, owner);
}

int dlock__check_canceled(dlock_client_t *c) {
  if (dlock__forked_since(c->fork_gen))
    return dlock__fail_forked();
  if (atomic_load(&c->canceled))
    return dlock__fail(DLOCK_ECANCELED, "client is shutting down");
  return 0;
}

int64_t dlock__client_retry_at(dlock_client_t *c) {
  /* On a cluster the next attempt goes where the slot map says, which a
   * failover changes: waiting for the dead master's reconnect back-off (up
   * to a second) would hold a retry back from its promoted replica. The
   * callers' own pauses keep a node that is down from a busy loop. */
  return c->cluster != NULL ? 0 : dlock__conn_retry_at(c->conn);
}

int dlock__client_call(dlock_client_t *c, const char *key, size_t key_len,
                       size_t n, char *const *cmds, const size_t *lens,
                       redisReply **replies, int64_t deadline_us) {
  if (c->cluster != NULL && key != NULL)
    return dlock__cluster_call(c->cluster, dlock__key_slot(key, key_len), n,
                               cmds, lens, replies, deadline_us);
  return dlock__conn_call(c->conn, n, cmds, lens, replies, deadline_us);
}

/* The argument that names the key of a plain command, for routing it on a
 * cluster: none for commands about the server, the third for those whose
 * second word is a subcommand, else the second. */
static int key_arg(int argc, const char **argv, const size_t *lens) {
  static const char *const keyless[] = {
      "INFO",   "CONFIG", "PING",  "CLUSTER",  "CLIENT",  "SCRIPT",
      "WAIT",   "DBSIZE", "TIME",  "ROLE",     "COMMAND", "HELLO",
      "SCAN",   "KEYS",   "ECHO",  "FUNCTION", "LATENCY", "SLOWLOG",
      "MEMORY", "ACL",    "DEBUG", "PUBLISH",  "PUBSUB",  "LASTSAVE"};
  static const char *const sub[] = {"OBJECT"};
  for (size_t i = 0; i < sizeof(keyless) / sizeof(*keyless); i++)
    if (lens[0] == strlen(keyless[i]) &&
        strncasecmp(argv[0], keyless[i], lens[0]) == 0)
      return -1;
  for (size_t i = 0; i < sizeof(sub) / sizeof(*sub); i++)
    if (lens[0] == strlen(sub[i]) && strncasecmp(argv[0], sub[i], lens[0]) == 0)
      return argc > 2 ? 2 : -1;
  return argc > 1 ? 1 : -1;
}

int dlock__command(dlock_client_t *c, int argc, const char **argv,
                   const size_t *lens, redisReply **out) {
  char *cmd;
  size_t local[16];
  if (lens == NULL && argc <= 16) {
    for (int i = 0; i < argc; i++)
      local[i] = strlen(argv[i]);
  }
  const size_t *l = lens != NULL ? lens : argc <= 16 ? local : NULL;
  int len = dlock__format_argv(&cmd, argc, argv, lens);
  if (len < 0)
    return dlock__fail(DLOCK_ENOMEM, "out of memory formatting %s", argv[0]);
  size_t slen = (size_t)len;
  int k =
      c->cluster != NULL && l != NULL && argc > 0 ? key_arg(argc, argv, l) : -1;
  int rc = dlock__client_call(c, k >= 0 ? argv[k] : NULL, k >= 0 ? l[k] : 0, 1,
                              &cmd, &slen, out, 0);
  dlock__format_free(cmd);
  if (rc == 0 && (*out)->type == REDIS_REPLY_ERROR) {
    rc = dlock__fail_reply((*out)->str, (*out)->len);
    freeReplyObject(*out);
    *out = NULL;
  }
  return rc;
}

int dlock__outage_pause(dlock_client_t *c, int *step, int64_t until_us) {
  /* 20 ms doubling to 640 ms, with jitter, never past 'until_us', and not
   * before the connection may be tried again: a server that is down gets
   * a few tries a second, not a busy loop. */
  int64_t base_us = (int64_t)20000 << (*step < 5 ? *step : 5);
  if (*step < 5)
    (*step)++;
  int64_t now = dlock__now_us();
  int64_t at =
      now + base_us / 2 + (int64_t)(dlock__jitter() % (uint64_t)(base_us / 2));
  int64_t reconnect_at = dlock__client_retry_at(c);
  if (reconnect_at > at)
    at = reconnect_at;
  if (at > until_us)
    at = until_us;
  dlock__sleep_us(at - now);
  return dlock__check_canceled(c);
}

int dlock__outage_next(dlock_client_t *c, dlock__riding *r, int rc,
                       int64_t until_us) {
  int64_t now = dlock__now_us();
  if (r->until_us == 0) {
    r->first_us = now;
    r->until_us = until_us;
  }
  if (now >= r->until_us)
    return rc;
  char why[512];
  snprintf(why, sizeof(why), "%s", dlock_last_error());
  r->tries++;
  int prc = dlock__outage_pause(c, &r->step, r->until_us);
  if (prc != 0) {
    r->tries = 0; /* canceled: that is the news, not the ride */
    return prc;
  }
  if (dlock__now_us() >= r->until_us)
    /* No time for another attempt: the last error stands. */
    return dlock__fail_text(rc, why);
  return 0;
}

int dlock__outage_end(const dlock__riding *r, int rc) {
  if (r->tries == 0)
    return rc;
  char why[512];
  snprintf(why, sizeof(why), "%s", dlock_last_error());
  return dlock__fail(rc, "%s (tried %d more times over %lld ms)", why, r->tries,
                     (long long)((dlock__now_us() - r->first_us) / 1000));
}
