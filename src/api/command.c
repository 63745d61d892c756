/*
 * dlock_client_command: a plain Redis command on the connection a client's
 * locks use, so that a program (the dlock command's demo among them) reads
 * and writes its own keys through the same URL parsing, authentication,
 * timeouts and reconnection as its locks, with no second Redis client.
 */
#include "alloc.h"
#include "engine.h"
#include "loop.h"
#include "proto/format.h"

#include "error.h"

#include <ctype.h>
#include <string.h>

/* Commands that would change the state of the shared connection (its
 * database, its user, its protocol, whether it answers at all), leave it
 * in a mode where replies no longer match requests, or hold it up for
 * every lock of the client. */
static const char *const refused[] = {
    "SELECT",       "AUTH",       "HELLO",      "RESET",       "QUIT",
    "MULTI",        "EXEC",       "DISCARD",    "WATCH",       "UNWATCH",
    "SUBSCRIBE",    "PSUBSCRIBE", "SSUBSCRIBE", "UNSUBSCRIBE", "PUNSUBSCRIBE",
    "SUNSUBSCRIBE", "MONITOR",    "SYNC",       "PSYNC",       "REPLCONF",
    "BLPOP",        "BRPOP",      "BRPOPLPUSH", "BLMOVE",      "BLMPOP",
    "BZPOPMIN",     "BZPOPMAX",   "BZMPOP",     "WAIT",        "WAITAOF"};

static int word_is(const char *s, size_t len, const char *word) {
  if (strlen(word) != len)
    return 0;
  for (size_t i = 0; i < len; i++)
    if (toupper((unsigned char)s[i]) != (unsigned char)word[i])
      return 0;
  return 1;
}

/* DLOCK_EINVAL when the command must not run on the shared connection. */
static int check_allowed(size_t argc, const char *const *argv,
                         const size_t *lens) {
  for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
    if (word_is(argv[0], lens[0], refused[i]))
      return dlock__fail(DLOCK_EINVAL,
                         "%s is not run on the connection the locks share "
                         "(it would change or hold up that connection)",
                         refused[i]);
  if (argc >= 2 && word_is(argv[0], lens[0], "CLIENT") &&
      word_is(argv[1], lens[1], "REPLY"))
    return dlock__fail(DLOCK_EINVAL, "CLIENT REPLY is not run on the "
                                     "connection the locks share");
  /* XREAD and XREADGROUP block only when asked to. */
  if (word_is(argv[0], lens[0], "XREAD") ||
      word_is(argv[0], lens[0], "XREADGROUP"))
    for (size_t i = 1; i < argc; i++)
      if (word_is(argv[i], lens[i], "BLOCK"))
        return dlock__fail(DLOCK_EINVAL, "a blocking XREAD is not run on the "
                                         "connection the locks share");
  return 0;
}

static void reply_clear(dlock_reply_t *r) {
  for (size_t i = 0; i < r->nelements; i++)
    reply_clear(&r->elements[i]);
  dlock__free(r->elements);
  dlock__free(r->str);
}

void dlock_reply_free(dlock_reply_t *r) {
  if (r == NULL)
    return;
  reply_clear(r);
  dlock__free(r);
}

/* Copies hiredis's reply 'from' into 'to' (zeroed). 0, DLOCK_ENOMEM or
 * DLOCK_EPROTO; what was copied is freed by the caller either way. */
static int copy_reply(const redisReply *from, dlock_reply_t *to) {
  switch (from->type) {
  case REDIS_REPLY_NIL:
    to->type = DLOCK_REPLY_NIL;
    return 0;
  case REDIS_REPLY_INTEGER:
    to->type = DLOCK_REPLY_INTEGER;
    to->integer = from->integer;
    return 0;
  case REDIS_REPLY_STRING:
  case REDIS_REPLY_STATUS:
  case REDIS_REPLY_ERROR:
    to->type = from->type == REDIS_REPLY_STRING   ? DLOCK_REPLY_STRING
               : from->type == REDIS_REPLY_STATUS ? DLOCK_REPLY_STATUS
                                                  : DLOCK_REPLY_ERROR;
    to->len = from->len;
    if ((to->str = dlock__memdup(from->str, from->len)) == NULL)
      return dlock__fail(DLOCK_ENOMEM, "out of memory copying a reply");
    return 0;
  case REDIS_REPLY_ARRAY:
    to->type = DLOCK_REPLY_ARRAY;
    if (from->elements == 0)
      return 0;
    to->elements = dlock__calloc(from->elements, sizeof(*to->elements));
    if (to->elements == NULL)
      return dlock__fail(DLOCK_ENOMEM, "out of memory copying a reply");
    for (size_t i = 0; i < from->elements; i++) {
      to->nelements = i + 1;
      int rc = copy_reply(from->element[i], &to->elements[i]);
      if (rc != 0)
        return rc;
    }
    return 0;
  default:
    return dlock__fail(DLOCK_EPROTO, "reply of unknown type %d", from->type);
  }
}

/* The argument sizes of a command, checked: '*sizes' is 'local' or an
 * allocation to free. */
static int check_command(dlock_client_t *c, size_t argc,
                         const char *const *argv, const size_t *lens,
                         size_t local[16], size_t **sizes) {
  *sizes = local;
  if (argc == 0 || argc > 1024 * 1024)
    return dlock__fail(DLOCK_EINVAL, "a command has 1 to 1048576 arguments");
  if (argc > 16 && (*sizes = dlock__calloc(argc, sizeof(**sizes))) == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory sending a command");
  for (size_t i = 0; i < argc; i++) {
    if (argv[i] == NULL)
      return dlock__fail(DLOCK_EINVAL, "argument %zu is NULL", i);
    (*sizes)[i] = lens != NULL ? lens[i] : strlen(argv[i]);
  }
  (void)c;
  return check_allowed(argc, argv, *sizes);
}

/* The reply as the API gives it; 'reply' is freed. */
static int convert_reply(redisReply *reply, dlock_reply_t **out) {
  dlock_reply_t *r = dlock__calloc(1, sizeof(*r));
  int rc = r != NULL
               ? copy_reply(reply, r)
               : dlock__fail(DLOCK_ENOMEM, "out of memory copying a reply");
  freeReplyObject(reply);
  if (rc != 0) {
    dlock_reply_free(r);
    return rc;
  }
  *out = r;
  return 0;
}

int dlock_client_command(dlock_client_t *c, size_t argc,
                         const char *const *argv, const size_t *lens,
                         dlock_reply_t **out) {
  if (out != NULL)
    *out = NULL;
  if (c == NULL || argv == NULL || out == NULL)
    return dlock__fail(DLOCK_EINVAL, "client, argv and out must not be NULL");
  size_t local[16], *sizes;
  int rc = check_command(c, argc, argv, lens, local, &sizes);
  if (rc == 0)
    rc = dlock__check_blocking(c);
  redisReply *reply = NULL;
  if (rc == 0)
    rc = dlock__command(c, (int)argc, (const char **)argv, sizes, &reply);
  if (sizes != local)
    dlock__free(sizes);
  return rc != 0 ? rc : convert_reply(reply, out);
}

/* ---- the same for an event loop ----------------------------------------- */

typedef struct command_op {
  dlock__aop op;
  dlock_client_t *c;
  dlock_reply_cb cb;
  void *data;
} command_op;

static void command_done(command_op *o, int status, dlock_reply_t *r) {
  dlock_reply_cb cb = o->cb;
  void *data = o->data;
  dlock_client_t *c = o->c;
  dlock__loop_remove(&o->op);
  dlock__free(o);
  cb(c, status, r, data);
}

static void command_run(dlock__aop *op) {
  command_op *o = (command_op *)op;
  if (op->in_flight)
    return;
  redisReply *reply = op->reply;
  op->reply = NULL;
  dlock_reply_t *r = NULL;
  int rc;
  if (op->err != 0)
    rc = dlock__fail(op->err, "%s", op->detail);
  else if (reply->type == REDIS_REPLY_ERROR) {
    rc = dlock__fail_reply(reply->str, reply->len);
    freeReplyObject(reply);
  } else
    rc = convert_reply(reply, &r);
  command_done(o, rc, r);
}

static void command_cancel(dlock__aop *op) {
  command_done((command_op *)op,
               dlock__fail(DLOCK_ECANCELED, "the client was closed"), NULL);
}

int dlock_client_command_async(dlock_client_t *c, size_t argc,
                               const char *const *argv, const size_t *lens,
                               dlock_reply_cb cb, void *data) {
  if (c == NULL || argv == NULL || cb == NULL)
    return dlock__fail(DLOCK_EINVAL, "client, argv and cb must not be NULL");
  if (c->loop == NULL)
    return dlock__fail(DLOCK_EINVAL, "the client was not opened with "
                                     "dlock_client_open_async()");
  size_t local[16], *sizes;
  int rc = check_command(c, argc, argv, lens, local, &sizes);
  if (rc == 0)
    rc = dlock__check_canceled(c);
  if (rc == 0 && c->loop->closing)
    rc = dlock__fail(DLOCK_ECANCELED, "the client is closing");
  char *cmd = NULL;
  int len = -1;
  if (rc == 0 && (len = dlock__format_argv(&cmd, (int)argc, argv, sizes)) < 0)
    rc = dlock__fail(DLOCK_ENOMEM, "out of memory formatting a command");
  if (sizes != local)
    dlock__free(sizes);
  command_op *o = NULL;
  if (rc == 0 && (o = dlock__calloc(1, sizeof(*o))) == NULL)
    rc = dlock__fail(DLOCK_ENOMEM, "out of memory sending a command");
  if (rc == 0) {
    o->c = c;
    o->cb = cb;
    o->data = data;
    o->op.run = command_run;
    o->op.cancel = command_cancel;
    dlock__loop_add(c->loop, &o->op);
    o->op.grants_nothing = 1;
    rc = dlock__loop_send(&o->op, cmd, (size_t)len);
    if (rc != 0) {
      dlock__loop_remove(&o->op);
      dlock__free(o);
    }
  }
  if (cmd != NULL)
    dlock__format_free(cmd);
  if (rc == 0)
    dlock__loop_poke(c->loop);
  return rc;
}
