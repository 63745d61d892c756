#define _POSIX_C_SOURCE 200809L
#include "redis_conn.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* The parts of a URL, each a malloc'd string or NULL. */
typedef struct url_parts {
  char *user, *pass, *host, *path;
  int port, db;
} url_parts_t;

static int hex_value(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

/* A copy of 'len' bytes of 's' with %XX escapes decoded. */
static char *decode_range(const char *s, size_t len) {
  char *out = malloc(len + 1), *o = out;

  if (out == NULL)
    return NULL;
  for (size_t i = 0; i < len; i++) {
    int hi, lo;
    if (s[i] == '%' && i + 2 < len && (hi = hex_value(s[i + 1])) >= 0 &&
        (lo = hex_value(s[i + 2])) >= 0) {
      *o++ = (char)(hi * 16 + lo);
      i += 2;
    } else {
      *o++ = s[i];
    }
  }
  *o = '\0';
  return out;
}

/* Takes "user:pass@" off the front of '*rest' when there is one before
 * 'end'. */
static void split_userinfo(const char **rest, const char *end, url_parts_t *u) {
  const char *at = NULL;

  for (const char *p = *rest; p < end; p++)
    if (*p == '@')
      at = p;
  if (at == NULL)
    return;
  const char *colon = memchr(*rest, ':', (size_t)(at - *rest));
  const char *user_end = colon ? colon : at;
  if (user_end > *rest)
    u->user = decode_range(*rest, (size_t)(user_end - *rest));
  if (colon != NULL)
    u->pass = decode_range(colon + 1, (size_t)(at - colon - 1));
  *rest = at + 1;
}

static void parse_unix(const char *rest, url_parts_t *u) {
  const char *query = strchr(rest, '?');
  const char *end = query ? query : rest + strlen(rest);

  split_userinfo(&rest, end, u);
  u->path = strndup(rest, (size_t)(end - rest));
  if (query != NULL && strncmp(query, "?db=", 4) == 0)
    u->db = atoi(query + 4);
}

static void parse_tcp(const char *rest, url_parts_t *u) {
  const char *slash = strchr(rest, '/');
  const char *end = slash ? slash : rest + strlen(rest);
  const char *host = rest, *host_end, *port = NULL;

  split_userinfo(&rest, end, u);
  host = rest;
  if (*host == '[') {
    host++;
    host_end = memchr(host, ']', (size_t)(end - host));
    host_end = host_end ? host_end : end;
    if (host_end + 1 < end && host_end[1] == ':')
      port = host_end + 2;
  } else {
    host_end = memchr(host, ':', (size_t)(end - host));
    if (host_end != NULL)
      port = host_end + 1;
    else
      host_end = end;
  }
  u->host = strndup(host, (size_t)(host_end - host));
  u->port = port ? atoi(port) : 6379;
  if (slash != NULL && slash[1] != '\0')
    u->db = atoi(slash + 1);
}

static void free_parts(url_parts_t *u) {
  free(u->user);
  free(u->pass);
  free(u->host);
  free(u->path);
}

/* AUTH (with the user name when there is one) and SELECT. */
static int authenticate_and_select(redisContext *c, const url_parts_t *u) {
  if (u->pass != NULL) {
    int rc = u->user ? redis_conn_run(c, "AUTH %s %s", u->user, u->pass)
                     : redis_conn_run(c, "AUTH %s", u->pass);
    if (rc != 0)
      return -1;
  }
  if (u->db != 0 && redis_conn_run(c, "SELECT %d", u->db) != 0)
    return -1;
  return 0;
}

redisContext *redis_conn_open(const char *url) {
  url_parts_t u = {NULL, NULL, NULL, NULL, 0, 0};
  redisContext *c = NULL;

  if (strncmp(url, "unix://", 7) == 0)
    parse_unix(url + 7, &u);
  else if (strncmp(url, "redis://", 8) == 0)
    parse_tcp(url + 8, &u);
  if (u.path != NULL)
    c = redisConnectUnix(u.path);
  else if (u.host != NULL)
    c = redisConnect(u.host, u.port);
  if (c != NULL && (c->err || authenticate_and_select(c, &u) != 0)) {
    redisFree(c);
    c = NULL;
  }
  free_parts(&u);
  return c;
}

int redis_conn_run(redisContext *c, const char *fmt, ...) {
  va_list ap;

  va_start(ap, fmt);
  redisReply *r = redisvCommand(c, fmt, ap);
  va_end(ap);
  int ok = r != NULL && r->type != REDIS_REPLY_ERROR;
  freeReplyObject(r);
  return ok ? 0 : -1;
}

long long redis_conn_get_int(redisContext *c, const char *key) {
  redisReply *r = redisCommand(c, "GET %s", key);
  long long v = 0;

  if (r != NULL && r->type == REDIS_REPLY_STRING)
    v = atoll(r->str);
  freeReplyObject(r);
  return v;
}
