/*
 * Plain commands on a client's connection, routed to the node of their key
 * on a cluster (made again after a pause while the cluster refuses them
 * for now).
 */
#include "engine.h"

#include "error.h"
#include "monotime.h"
#include "proto/format.h"

#include <string.h>
#include <strings.h>

int dlock__client_call(dlock_client_t *c, const char *key, size_t key_len,
                       size_t n, char *const *cmds, const size_t *lens,
                       redisReply **replies, int64_t deadline_us) {
  if (deadline_us == 0)
    deadline_us = dlock__deadline_ms(c->opt.command_timeout_ms);
  int rc, step = 0;
  /* A cluster that refuses the commands for now has them made again after
   * the busy back-off, within the deadline (its detail stands if not). */
  while ((rc = dlock__route_call(&c->route, key, key_len, n, cmds, lens,
                                 replies, deadline_us)) ==
         DLOCK__CLUSTER_BUSY) {
    int paused = dlock__busy_pause(c, &step, deadline_us);
    if (paused != 0)
      return paused == DLOCK_ETIMEDOUT ? DLOCK_EIO : paused;
  }
  return rc;
}

/* The argument that names the key of a plain command, for routing it (to
 * the master of its slot on a cluster): none for commands about the server, the
 * third for those whose second word is a subcommand, else the second. */
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
  /* Where all keys are in one shard, no key needs to be found. */
  int k = !dlock__route_one_shard(&c->route) && l != NULL && argc > 0
              ? key_arg(argc, argv, l)
              : -1;
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
