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
#include "sleep.h"

#include <string.h>

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

int dlock__command(dlock_client_t *c, int argc, const char **argv,
                   const size_t *lens, redisReply **out) {
  char *cmd;
  int len = dlock__format_argv(&cmd, argc, argv, lens);
  if (len < 0)
    return dlock__fail(DLOCK_ENOMEM, "out of memory formatting %s", argv[0]);
  size_t slen = (size_t)len;
  int rc = dlock__conn_call(c->conn, 1, &cmd, &slen, out, 0);
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
  int64_t reconnect_at = dlock__conn_retry_at(c->conn);
  if (reconnect_at > at)
    at = reconnect_at;
  if (at > until_us)
    at = until_us;
  dlock__sleep_us(at - now);
  return dlock__check_canceled(c);
}
