/*
 * Server addresses: parsing "redis://", "rediss://" (TLS) and "unix://"
 * URLs into an endpoint, and describing an endpoint without its password.
 */
#ifndef DLOCK_URL_H
#define DLOCK_URL_H

#include "stats.h"

#include <stddef.h>

typedef struct dlock__endpoint {
  char *host; /* TCP host name or address; NULL for a unix socket */
  int port;   /* TCP port */
  char *path; /* unix socket path; NULL for TCP */
  char *user; /* ACL user name or NULL */
  char *pass; /* password or NULL */
  int db;     /* database number, 0 by default */
  int tls;    /* 1 for rediss://: TLS over TCP */
} dlock__endpoint;

/*
 * Parses 'url' into '*out' (which owns its strings afterwards). Accepts
 * redis://[user[:pass]@]host[:port][/db] (host may be [v6]), the same
 * with rediss:// for TLS, and
 * unix://[user[:pass]@]/path[?db=N]; user and pass may be %-encoded.
 * Returns 0 or DLOCK_EINVAL with a detail that never shows the password.
 */
int dlock__url_parse(const char *url, dlock__endpoint *out);

/*
 * A Sentinel URL:
 *
 *   redis-sentinel://[user:pass@]host[:port][,host[:port]...]/master
 *                    [?db=N&sentinel_user=U&sentinel_password=P]
 *
 * The hosts are the Sentinels (port 26379 by default; [v6] hosts too),
 * 'master' the name they monitor. user and pass are those of the data
 * nodes (the master and its replicas), as in a redis:// URL; Sentinels
 * that require a password of their own get sentinel_password (and
 * sentinel_user for an ACL user). Values may be %-encoded.
 *
 * rediss-sentinel:// is the same with TLS to the Sentinels and to the data
 * nodes (every endpoint's tls is 1), with the client's TLS options.
 */
typedef struct dlock__sentinel_url {
  dlock__endpoint data;       /* user, pass, db and tls of the data nodes */
  dlock__endpoint *sentinels; /* host, port and the Sentinels' user/pass */
  size_t n;
  char *master; /* the master's name */
} dlock__sentinel_url;

#define DLOCK__SENTINELS_MAX 32

/* 1 when 'url' has the redis-sentinel:// or rediss-sentinel:// scheme. */
int dlock__url_is_sentinel(const char *url);

/* Parses a Sentinel URL into '*out' (which owns its strings afterwards). 0
 * or DLOCK_EINVAL with a detail that never shows a password. */
int dlock__url_parse_sentinel(const char *url, dlock__sentinel_url *out);

/* Frees what '*u' owns and zeroes it; safe on a zeroed one. */
void dlock__sentinel_url_free(dlock__sentinel_url *u);

/*
 * A Redis Cluster URL:
 *
 *   redis-cluster://[user:pass@]host[:port][,host[:port]...]
 *       [?sharded_pubsub=auto|off]
 *   rediss-cluster://...   (TLS to every node)
 *
 * The hosts are seed nodes (port 6379 by default; [v6] hosts too): any
 * one that answers gives the whole slot map. user and pass are those of
 * every node. A cluster has one database, so no /db is accepted.
 * sharded_pubsub says whether unlock messages may travel on sharded
 * pub/sub: auto (the default) where the cluster has it, as Redisson's
 * shardedSubscriptionMode AUTO; off never (classic PUBLISH and SUBSCRIBE),
 * as its mode OFF, for peers that only speak classic pub/sub.
 */
typedef struct dlock__cluster_url {
  dlock__endpoint data;   /* user, pass and tls of every node */
  dlock__endpoint *seeds; /* host and port of each seed */
  size_t n;
  int sharded_off;     /* 1: ?sharded_pubsub=off */
  dlock__stats *stats; /* the client's statistics, or NULL; not owned */
} dlock__cluster_url;

#define DLOCK__SEEDS_MAX 64

/* 1 when 'url' has the redis-cluster:// or rediss-cluster:// scheme. */
int dlock__url_is_cluster(const char *url);

/* Parses a cluster URL into '*out' (which owns its strings afterwards). 0
 * or DLOCK_EINVAL with a detail that never shows a password. */
int dlock__url_parse_cluster(const char *url, dlock__cluster_url *out);

/* Frees what '*u' owns and zeroes it; safe on a zeroed one. */
void dlock__cluster_url_free(dlock__cluster_url *u);

/* Frees the strings of 'e' and zeroes it; safe on a zeroed endpoint. */
void dlock__endpoint_free(dlock__endpoint *e);

/* Writes "host:port" or the socket path into 'buf'; never the password. */
void dlock__endpoint_describe(const dlock__endpoint *e, char *buf, size_t n);

#endif
