/*
 * Error names, descriptions and the per-thread detail of the last failure.
 */
#include "error.h"
#include "alloc.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Long enough for Redis's longest error replies plus context; longer
 * details are cut, never overflowed. */
#define DETAIL_MAX 512

static _Thread_local char detail[DETAIL_MAX];

const char *dlock_strerror(int err) {
  switch (err) {
#define DLOCK__ERR_TEXT(name, code, text)                                      \
  case code:                                                                   \
    return text;
    DLOCK_ERRNO_MAP(DLOCK__ERR_TEXT)
#undef DLOCK__ERR_TEXT
  case 0:
    return "success";
  default:
    return "unknown error";
  }
}

const char *dlock_err_name(int err) {
  switch (err) {
#define DLOCK__ERR_NAME(name, code, text)                                      \
  case code:                                                                   \
    return "DLOCK_" #name;
    DLOCK_ERRNO_MAP(DLOCK__ERR_NAME)
#undef DLOCK__ERR_NAME
  case 0:
    return "DLOCK_OK";
  default:
    return "DLOCK_E?";
  }
}

const char *dlock_last_error(void) { return detail; }

int dlock__fail(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof(detail), fmt, ap);
  va_end(ap);
  return code;
}

int dlock__fail_text(int code, const char *text) {
  snprintf(detail, sizeof(detail), "%s", text);
  return code;
}

/* Redis reports missing credentials and permissions with these prefixes;
 * everything else is an ordinary server error (OOM, READONLY, BUSY...). */
static int is_auth_error(const char *text, size_t len) {
  /* Redis 7 reports a command refused inside a script this way, naming
   * neither the command nor the script. */
  static const char script_acl[] = "user executing the script can't run";
  for (size_t i = 0; i + sizeof(script_acl) - 1 <= len; i++)
    if (memcmp(text + i, script_acl, sizeof(script_acl) - 1) == 0)
      return 1;
  static const char *const prefixes[] = {"NOAUTH",   "WRONGPASS",
                                         "NOPERM",   "ERR invalid password",
                                         "ERR AUTH", "ERR Client sent AUTH"};
  for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++) {
    size_t n = strlen(prefixes[i]);
    if (len >= n && memcmp(text, prefixes[i], n) == 0)
      return 1;
  }
  return 0;
}

int dlock__fail_reply(const char *text, size_t len) {
  return dlock__fail_reply_in(text, len, NULL);
}

/* Replies that mean "not now" rather than "no": a server loading its data
 * after a restart, a script still running, a replica without its master,
 * a master turned replica by a failover (READONLY: the connection reaches
 * the new master once it is made again), a master short of the replicas
 * its min-replicas-to-write asks for. They are reported like an
 * unreachable server, which callers retry. */
static int is_transient_error(const char *text, size_t len) {
  static const char *const prefixes[] = {"LOADING",    "BUSY",     "MASTERDOWN",
                                         "TRYAGAIN",   "READONLY", "NOREPLICAS",
                                         "CLUSTERDOWN"};
  for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++) {
    size_t n = strlen(prefixes[i]);
    if (len >= n && memcmp(text, prefixes[i], n) == 0 &&
        (len == n || text[n] == ' '))
      return 1;
  }
  return 0;
}

/* dlock's own scripts refuse a key that is not a lock of the kind they
 * were asked about with an error reply of this code (force_release.lua). */
static int is_not_lock_error(const char *text, size_t len) {
  static const char prefix[] = "NOTLOCK ";
  return len >= sizeof(prefix) - 1 &&
         memcmp(text, prefix, sizeof(prefix) - 1) == 0;
}

/* dlock's scripts refuse an argument they cannot use with this prefix,
 * before writing anything (a client and scripts that disagree, or a script
 * run by hand). */
static int is_argument_error(const char *text, size_t len) {
  static const char prefix[] = "DLOCK_EINVAL ";
  return len >= sizeof(prefix) - 1 &&
         memcmp(text, prefix, sizeof(prefix) - 1) == 0;
}

int dlock__fail_reply_in(const char *text, size_t len, const char *script) {
  int code = is_auth_error(text, len)        ? DLOCK_EAUTH
             : is_transient_error(text, len) ? DLOCK_EIO
             : is_not_lock_error(text, len)  ? DLOCK_ENOTLOCK
             : is_argument_error(text, len)  ? DLOCK_EINVAL
                                             : DLOCK_ESERVER;
  int shown = len > DETAIL_MAX - 80 ? DETAIL_MAX - 80 : (int)len;
  if (script != NULL)
    snprintf(detail, sizeof(detail), "redis: %.*s (in dlock's %s script)",
             shown, text, script);
  else
    snprintf(detail, sizeof(detail), "redis: %.*s", shown, text);
  return code;
}
