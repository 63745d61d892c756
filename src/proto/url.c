/*
 * URL parsing. Written for hostile input: every length is checked, nothing is
 * read past the terminating NUL, and a failure frees what it allocated.
 */
#include "url.h"
#include "alloc.h"

#include "error.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_PORT 6379

static int hexval(int ch) {
  if (ch >= '0' && ch <= '9')
    return ch - '0';
  ch = tolower(ch);
  if (ch >= 'a' && ch <= 'f')
    return ch - 'a' + 10;
  return -1;
}

/* Copies 'len' bytes of 's' while decoding %XX escapes. NULL on a bad
 * escape or allocation failure ('*nomem' tells which). */
static char *decode(const char *s, size_t len, int *nomem) {
  char *out = dlock__malloc(len + 1);
  size_t o = 0;
  *nomem = out == NULL;
  if (out == NULL)
    return NULL;
  for (size_t i = 0; i < len; i++) {
    if (s[i] != '%') {
      out[o++] = s[i];
      continue;
    }
    if (i + 2 >= len) {
      dlock__free(out);
      return NULL;
    }
    int a = hexval((unsigned char)s[i + 1]),
        b = hexval((unsigned char)s[i + 2]);
    if (a < 0 || b < 0 || (a == 0 && b == 0)) {
      dlock__free(out);
      return NULL;
    }
    out[o++] = (char)(a * 16 + b);
    i += 2;
  }
  out[o] = '\0';
  return out;
}

/* Parses a decimal number in [lo, hi] from exactly 'len' bytes. */
static int parse_number(const char *s, size_t len, long lo, long hi,
                        long *out) {
  if (len == 0 || len > 10)
    return -1;
  long v = 0;
  for (size_t i = 0; i < len; i++) {
    if (!isdigit((unsigned char)s[i]))
      return -1;
    v = v * 10 + (s[i] - '0');
  }
  if (v < lo || v > hi)
    return -1;
  *out = v;
  return 0;
}

/* Splits "user:pass@" off the front of 'rest' (up to 'end'). */
static int parse_userinfo(const char **rest, const char *end,
                          dlock__endpoint *out) {
  const char *at = memchr(*rest, '@', (size_t)(end - *rest));
  if (at == NULL)
    return 0;
  const char *colon = memchr(*rest, ':', (size_t)(at - *rest));
  const char *user_end = colon ? colon : at;
  int nomem = 0;
  if (user_end > *rest) {
    out->user = decode(*rest, (size_t)(user_end - *rest), &nomem);
    if (out->user == NULL)
      return nomem ? dlock__fail(DLOCK_ENOMEM, "out of memory parsing URL")
                   : dlock__fail(DLOCK_EINVAL, "bad %%-escape in URL user");
  }
  if (colon == NULL)
    /* A lone word may well be a password written without its colon: say
     * so, and never echo it. */
    return dlock__fail(DLOCK_EINVAL,
                       "URL names a user but no password; a password alone "
                       "is written redis://:PASSWORD@host");
  {
    out->pass = decode(colon + 1, (size_t)(at - colon - 1), &nomem);
    if (out->pass == NULL)
      return nomem ? dlock__fail(DLOCK_ENOMEM, "out of memory parsing URL")
                   : dlock__fail(DLOCK_EINVAL, "bad %%-escape in URL password");
  }
  *rest = at + 1;
  return 0;
}

static int parse_unix(const char *rest, dlock__endpoint *out) {
  const char *end = rest + strlen(rest);
  const char *query = strchr(rest, '?');
  const char *path_end = query ? query : end;
  int rc = parse_userinfo(&rest, path_end, out);
  if (rc != 0)
    return rc;
  if (rest >= path_end || *rest != '/')
    return dlock__fail(DLOCK_EINVAL,
                       "unix URL needs an absolute socket path: unix:///path");
  if ((size_t)(path_end - rest) >= 108)
    return dlock__fail(DLOCK_EINVAL, "unix socket path is too long");
  if ((out->path = dlock__memdup(rest, (size_t)(path_end - rest))) == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory parsing URL");
  if (query != NULL) {
    long db;
    if (strncmp(query, "?db=", 4) != 0 ||
        parse_number(query + 4, strlen(query + 4), 0, 1000000, &db) != 0)
      return dlock__fail(DLOCK_EINVAL,
                         "unix URL query must be ?db=N (a database number)");
    out->db = (int)db;
  }
  return 0;
}

static int parse_host_port(const char *rest, const char *end,
                           dlock__endpoint *out) {
  const char *host = rest, *host_end, *port = NULL;
  if (*rest == '[') {
    host = rest + 1;
    host_end = memchr(host, ']', (size_t)(end - host));
    if (host_end == NULL)
      return dlock__fail(DLOCK_EINVAL, "unterminated [IPv6] host in URL");
    if (host_end + 1 < end) {
      if (host_end[1] != ':')
        return dlock__fail(DLOCK_EINVAL, "junk after [IPv6] host in URL");
      port = host_end + 2;
    }
  } else {
    host_end = memchr(rest, ':', (size_t)(end - rest));
    if (host_end != NULL)
      port = host_end + 1;
    else
      host_end = end;
  }
  if (host_end == host)
    return dlock__fail(DLOCK_EINVAL, "URL has no host");
  long p = DEFAULT_PORT;
  if (port != NULL && parse_number(port, (size_t)(end - port), 1, 65535, &p))
    return dlock__fail(DLOCK_EINVAL,
                       "URL port must be a number from 1 to 65535");
  out->port = (int)p;
  if ((out->host = dlock__memdup(host, (size_t)(host_end - host))) == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory parsing URL");
  return 0;
}

static int parse_tcp(const char *rest, dlock__endpoint *out) {
  const char *end = rest + strlen(rest);
  const char *slash = strchr(rest, '/');
  const char *authority_end = slash ? slash : end;
  int rc = parse_userinfo(&rest, authority_end, out);
  if (rc == 0)
    rc = parse_host_port(rest, authority_end, out);
  if (rc == 0 && slash != NULL && slash[1] != '\0') {
    long db;
    if (parse_number(slash + 1, strlen(slash + 1), 0, 1000000, &db) != 0)
      return dlock__fail(DLOCK_EINVAL,
                         "URL path must be a database number: /N");
    out->db = (int)db;
  }
  return rc;
}

int dlock__url_parse(const char *url, dlock__endpoint *out) {
  if (out == NULL)
    return dlock__fail(DLOCK_EINVAL, "no endpoint to fill");
  memset(out, 0, sizeof(*out));
  if (url == NULL || *url == '\0')
    return dlock__fail(DLOCK_EINVAL, "URL is empty");
  int rc;
  if (strncmp(url, "redis://", 8) == 0)
    rc = parse_tcp(url + 8, out);
  else if (strncmp(url, "unix://", 7) == 0)
    rc = parse_unix(url + 7, out);
  else if (strncmp(url, "rediss://", 9) == 0) {
    rc = parse_tcp(url + 9, out);
    out->tls = 1;
  } else if (dlock__url_is_sentinel(url)) {
    rc = dlock__fail(DLOCK_EINVAL, "a Sentinel URL names Sentinels, "
                                   "not one server");
  } else if (dlock__url_is_cluster(url)) {
    rc = dlock__fail(DLOCK_EINVAL, "a redis-cluster:// URL names a cluster's "
                                   "seed nodes, not one server");
  } else {
    /* Quoted at most in part (and never with its user information), and
     * an ellipsis says when it was cut. */
    const char *quoted = strchr(url, '@') != NULL ? "..." : url;
    rc = dlock__fail(DLOCK_EINVAL,
                     "URL must start with redis://, rediss://, unix://, "
                     "redis-sentinel://, rediss-sentinel://, "
                     "redis-cluster:// or rediss-cluster:// (got "
                     "\"%.40s%s\")",
                     quoted, strlen(quoted) > 40 ? "..." : "");
  }
  if (rc != 0)
    dlock__endpoint_free(out);
  return rc;
}

void dlock__endpoint_free(dlock__endpoint *e) {
  if (e == NULL)
    return;
  dlock__free(e->host);
  dlock__free(e->path);
  dlock__free(e->user);
  if (e->pass != NULL) {
    /* Passwords do not linger in freed memory. */
    memset(e->pass, 0, strlen(e->pass));
    dlock__free(e->pass);
  }
  memset(e, 0, sizeof(*e));
}

void dlock__endpoint_describe(const dlock__endpoint *e, char *buf, size_t n) {
  if (e->path != NULL)
    snprintf(buf, n, "%s", e->path);
  else if (e->host != NULL && strchr(e->host, ':') != NULL)
    snprintf(buf, n, "[%s]:%d", e->host, e->port);
  else
    snprintf(buf, n, "%s:%d", e->host ? e->host : "?", e->port);
}

/* ---- URLs of several nodes ---------------------------------------------- */

/* What follows 'scheme' or its TLS form 'tls_scheme' in 'url' ('*tls' says
 * which), or NULL when 'url' starts with neither. */
static const char *after_scheme(const char *url, const char *scheme,
                                const char *tls_scheme, int *tls) {
  *tls = 0;
  if (url == NULL)
    return NULL;
  if (strncmp(url, scheme, strlen(scheme)) == 0)
    return url + strlen(scheme);
  *tls = 1;
  if (strncmp(url, tls_scheme, strlen(tls_scheme)) == 0)
    return url + strlen(tls_scheme);
  return NULL;
}

/* The comma-separated host[:port] list from 'p' to 'end' ([v6] hosts
 * too), at most 'max' of them, into a new array '*nodes' of '*n' (which
 * the URL's free function frees, also after a failure). A host without a
 * port gets 'default_port', or parse_host_port's when that is 0. 'url'
 * and 'hosts' name the URL and its hosts in messages. */
static int parse_hosts(const char *p, const char *end, size_t max,
                       int default_port, const char *url, const char *hosts,
                       dlock__endpoint **nodes, size_t *n) {
  size_t count = 1;
  for (const char *c = p; c < end; c++)
    count += *c == ',';
  if (count > max)
    return dlock__fail(DLOCK_EINVAL, "%s names more than %zu %s", url, max,
                       hosts);
  if ((*nodes = dlock__calloc(count, sizeof(**nodes))) == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory parsing URL");
  int rc = 0;
  while (p <= end && rc == 0) {
    const char *comma = memchr(p, ',', (size_t)(end - p));
    const char *item_end = comma ? comma : end;
    if (item_end == p)
      return dlock__fail(DLOCK_EINVAL, "%s has an empty host", url);
    dlock__endpoint *e = &(*nodes)[(*n)++];
    rc = parse_host_port(p, item_end, e);
    int no_port = memchr(p, ':', (size_t)(item_end - p)) == NULL ||
                  (*p == '[' && item_end[-1] == ']');
    if (rc == 0 && no_port && default_port != 0)
      e->port = default_port;
    p = item_end + 1;
  }
  return rc;
}

/* Frees the data nodes' endpoint and the 'n' listed ones. */
static void free_nodes(dlock__endpoint *data, dlock__endpoint *nodes,
                       size_t n) {
  dlock__endpoint_free(data);
  for (size_t i = 0; i < n; i++)
    dlock__endpoint_free(&nodes[i]);
  dlock__free(nodes);
}

/* Gives the data nodes and the 'n' listed nodes the URL's TLS: every one
 * of them speaks it, or none does. */
static void set_tls(dlock__endpoint *data, dlock__endpoint *nodes, size_t n,
                    int tls) {
  data->tls = tls;
  for (size_t i = 0; i < n; i++)
    nodes[i].tls = tls;
}

/* ---- Sentinel URLs ------------------------------------------------------- */

#define SENTINEL_SCHEME "redis-sentinel://"
#define SENTINEL_TLS_SCHEME "rediss-sentinel://"
#define SENTINEL_DEFAULT_PORT 26379

int dlock__url_is_sentinel(const char *url) {
  int tls;
  return after_scheme(url, SENTINEL_SCHEME, SENTINEL_TLS_SCHEME, &tls) != NULL;
}

void dlock__sentinel_url_free(dlock__sentinel_url *u) {
  if (u == NULL)
    return;
  free_nodes(&u->data, u->sentinels, u->n);
  dlock__free(u->master);
  memset(u, 0, sizeof(*u));
}

/* One "name=value" of the query ('p' up to 'end'). */
static int sentinel_param(const char *p, const char *end,
                          dlock__sentinel_url *out, char **s_user,
                          char **s_pass) {
  const char *eq = memchr(p, '=', (size_t)(end - p));
  if (eq == NULL)
    return dlock__fail(DLOCK_EINVAL,
                       "Sentinel URL query takes name=value pairs");
  size_t nlen = (size_t)(eq - p);
  const char *v = eq + 1;
  size_t vlen = (size_t)(end - v);
  int nomem = 0;
  if (nlen == 2 && memcmp(p, "db", 2) == 0) {
    long db;
    if (parse_number(v, vlen, 0, 1000000, &db) != 0)
      return dlock__fail(DLOCK_EINVAL,
                         "Sentinel URL db must be a database number");
    out->data.db = (int)db;
    return 0;
  }
  char **dst = NULL;
  if (nlen == 17 && memcmp(p, "sentinel_password", 17) == 0)
    dst = s_pass;
  else if (nlen == 13 && memcmp(p, "sentinel_user", 13) == 0)
    dst = s_user;
  if (dst == NULL)
    return dlock__fail(DLOCK_EINVAL,
                       "Sentinel URL query: unknown parameter \"%.*s\" (db, "
                       "sentinel_user, sentinel_password)",
                       (int)(nlen < 40 ? nlen : 40), p);
  if (*dst != NULL)
    return dlock__fail(DLOCK_EINVAL, "Sentinel URL query repeats \"%.*s\"",
                       (int)nlen, p);
  *dst = decode(v, vlen, &nomem);
  if (*dst == NULL)
    return nomem ? dlock__fail(DLOCK_ENOMEM, "out of memory parsing URL")
                 : dlock__fail(DLOCK_EINVAL, "bad %%-escape in Sentinel URL "
                                             "query");
  return 0;
}

static int parse_sentinel(const char *rest, dlock__sentinel_url *out) {
  const char *end = rest + strlen(rest);
  const char *query = strchr(rest, '?');
  const char *path_end = query ? query : end;
  const char *slash = memchr(rest, '/', (size_t)(path_end - rest));
  if (slash == NULL || slash + 1 >= path_end)
    return dlock__fail(DLOCK_EINVAL,
                       "Sentinel URL needs the master's name: "
                       "redis-sentinel://host:port[,host:port...]/mastername");
  int rc = parse_userinfo(&rest, slash, &out->data);
  if (rc != 0)
    return rc;
  int nomem = 0;
  out->master = decode(slash + 1, (size_t)(path_end - slash - 1), &nomem);
  if (out->master == NULL)
    return nomem ? dlock__fail(DLOCK_ENOMEM, "out of memory parsing URL")
                 : dlock__fail(DLOCK_EINVAL, "bad %%-escape in the master's "
                                             "name");
  if (strchr(out->master, '/') != NULL || strchr(out->master, ' ') != NULL)
    return dlock__fail(DLOCK_EINVAL,
                       "Sentinel URL: the master's name has a '/' or a space");
  /* The Sentinels, on their own default port. */
  rc = parse_hosts(rest, slash, DLOCK__SENTINELS_MAX, SENTINEL_DEFAULT_PORT,
                   "Sentinel URL", "Sentinels", &out->sentinels, &out->n);
  if (rc != 0)
    return rc;
  char *s_user = NULL, *s_pass = NULL;
  for (const char *p = query ? query + 1 : end; p < end && rc == 0;) {
    const char *amp = memchr(p, '&', (size_t)(end - p));
    const char *item_end = amp ? amp : end;
    rc = sentinel_param(p, item_end, out, &s_user, &s_pass);
    p = item_end + 1;
  }
  if (rc == 0 && s_user != NULL && s_pass == NULL)
    rc = dlock__fail(DLOCK_EINVAL, "Sentinel URL has sentinel_user but no "
                                   "sentinel_password");
  for (size_t i = 0; i < out->n && rc == 0; i++) {
    dlock__endpoint *e = &out->sentinels[i];
    if ((s_user != NULL && (e->user = dlock__strdup(s_user)) == NULL) ||
        (s_pass != NULL && (e->pass = dlock__strdup(s_pass)) == NULL))
      rc = dlock__fail(DLOCK_ENOMEM, "out of memory parsing URL");
  }
  dlock__free(s_user);
  if (s_pass != NULL) {
    memset(s_pass, 0, strlen(s_pass));
    dlock__free(s_pass);
  }
  return rc;
}

int dlock__url_parse_sentinel(const char *url, dlock__sentinel_url *out) {
  if (out == NULL)
    return dlock__fail(DLOCK_EINVAL, "no Sentinel URL to fill");
  memset(out, 0, sizeof(*out));
  int tls;
  const char *rest =
      after_scheme(url, SENTINEL_SCHEME, SENTINEL_TLS_SCHEME, &tls);
  if (rest == NULL)
    return dlock__fail(DLOCK_EINVAL, "not a redis-sentinel:// URL");
  /* rediss-sentinel:// is TLS to every Sentinel and every data node alike,
   * as a deployment whose Sentinels run tls-port and tls-replication has
   * it: Sentinel hands out the data nodes' TLS ports then. */
  int rc = parse_sentinel(rest, out);
  set_tls(&out->data, out->sentinels, out->n, tls);
  if (rc != 0)
    dlock__sentinel_url_free(out);
  return rc;
}

/* ---- Cluster URLs -------------------------------------------------------- */

#define CLUSTER_SCHEME "redis-cluster://"
#define CLUSTER_TLS_SCHEME "rediss-cluster://"

int dlock__url_is_cluster(const char *url) {
  int tls;
  return after_scheme(url, CLUSTER_SCHEME, CLUSTER_TLS_SCHEME, &tls) != NULL;
}

void dlock__cluster_url_free(dlock__cluster_url *u) {
  if (u == NULL)
    return;
  free_nodes(&u->data, u->seeds, u->n);
  memset(u, 0, sizeof(*u));
}

/* The query of a cluster URL ('q' after its '?'): sharded_pubsub=auto or
 * off, once; nothing else. */
static int cluster_query(const char *q, dlock__cluster_url *out) {
  static const char name[] = "sharded_pubsub=";
  if (strncmp(q, name, sizeof(name) - 1) != 0)
    return dlock__fail(DLOCK_EINVAL,
                       "cluster URL query takes sharded_pubsub=auto|off "
                       "only (a cluster has database 0 only)");
  const char *v = q + sizeof(name) - 1;
  if (strcmp(v, "auto") == 0)
    out->sharded_off = 0;
  else if (strcmp(v, "off") == 0)
    out->sharded_off = 1;
  else
    return dlock__fail(DLOCK_EINVAL,
                       "cluster URL sharded_pubsub must be auto or off");
  return 0;
}

static int parse_cluster(const char *rest, dlock__cluster_url *out) {
  const char *end = rest + strlen(rest);
  /* A query may say how unlock messages travel. Before it, a trailing
   * slash is harmless; anything after one (a database) has no meaning on
   * a cluster. */
  const char *query = strchr(rest, '?');
  if (query != NULL) {
    int rc = cluster_query(query + 1, out);
    if (rc != 0)
      return rc;
    end = query;
  }
  const char *slash = memchr(rest, '/', (size_t)(end - rest));
  if (slash != NULL && slash + 1 != end)
    return dlock__fail(DLOCK_EINVAL,
                       "cluster URL takes no database: a cluster has "
                       "database 0 only");
  if (slash != NULL)
    end = slash;
  int rc = parse_userinfo(&rest, end, &out->data);
  if (rc != 0)
    return rc;
  if (rest >= end)
    return dlock__fail(DLOCK_EINVAL,
                       "cluster URL needs at least one seed node: "
                       "redis-cluster://host:port[,host:port...]");
  return parse_hosts(rest, end, DLOCK__SEEDS_MAX, 0, "cluster URL", "seeds",
                     &out->seeds, &out->n);
}

int dlock__url_parse_cluster(const char *url, dlock__cluster_url *out) {
  if (out == NULL)
    return dlock__fail(DLOCK_EINVAL, "no cluster URL to fill");
  memset(out, 0, sizeof(*out));
  int tls;
  const char *rest =
      after_scheme(url, CLUSTER_SCHEME, CLUSTER_TLS_SCHEME, &tls);
  if (rest == NULL)
    return dlock__fail(DLOCK_EINVAL, "not a redis-cluster:// URL");
  int rc = parse_cluster(rest, out);
  set_tls(&out->data, out->seeds, out->n, tls);
  if (rc != 0)
    dlock__cluster_url_free(out);
  return rc;
}
