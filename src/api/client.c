/*
 * Opening and closing clients. (The small services a client gives the code
 * below the API are in services.c.)
 */
#include "client.h"
#include "alloc.h"
#include "engine.h"

#include "async.h"
#include "error.h"
#include "loop.h"
#include "monotime.h"
#include "net/net.h"
#include "proto/format.h"
#include "proto/slot.h"
#include "watchdog.h"
#include "watcher.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <unistd.h>

#define DEFAULT_URL "redis://127.0.0.1:6379"

/*
 * dlock_options_t grows at its end. 'struct_size' tells the library how much
 * of it the caller's header had: the smallest struct there can be ends with
 * that field, and one filled by hand (struct_size 0) is read as the layout
 * of 0.2, the first to have the field. OPTIONS_SIZE_0_2 must never change:
 * fields added later lie beyond it. Sizes beyond any plausible growth mean
 * a struct nobody initialized, whose size field holds stack garbage.
 */
#define OPTIONS_MIN_SIZE                                                       \
  (offsetof(dlock_options_t, struct_size) + sizeof(size_t))
#define OPTIONS_SIZE_0_2 (offsetof(dlock_options_t, tls_insecure) + sizeof(int))
#define OPTIONS_MAX_SIZE 65536

void dlock_options_init_size(dlock_options_t *o, size_t size) {
  if (o == NULL)
    return;
  dlock_options_t d;
  memset(&d, 0, sizeof(d));
  d.url = DEFAULT_URL;
  d.connect_timeout_ms = 2000;
  d.command_timeout_ms = 3000;
  d.watchdog_timeout_ms = 30000;
  d.unlock_retries = 2;
  d.fair_wait_timeout_ms = 300000;
  d.replica_sync = 1;
  d.replica_sync_timeout_ms = 1000;
  d.outage_wait_ms = 30000;
  d.spin_us = DLOCK_SPIN_US_DEFAULT;
  d.struct_size = size;
  /* Only the caller's bytes are written: a program built against an older
   * header has a smaller struct. Fields of a newer header that this
   * library does not know are zeroed, which is how open recognizes them
   * as unset. */
  memset(o, 0, size);
  memcpy(o, &d, size < sizeof(d) ? size : sizeof(d));
}

/* Copies the caller's options, of whatever version, into a struct of this
 * library's layout with defaults for what the caller's did not have. */
static int read_options(const dlock_options_t *o, dlock_options_t *out) {
  size_t size = o->struct_size == 0 ? OPTIONS_SIZE_0_2 : o->struct_size;
  if (size < OPTIONS_MIN_SIZE || size > OPTIONS_MAX_SIZE)
    return dlock__fail(DLOCK_EINVAL,
                       "options have struct_size %zu: initialize them with "
                       "dlock_options_init()",
                       o->struct_size);
  dlock_options_init_size(out, sizeof(*out));
  if (size > sizeof(*out)) {
    /* A program built against a newer dlock.h: the fields this library
     * does not know must be unset, else it would silently ignore them. */
    const unsigned char *tail = (const unsigned char *)o + sizeof(*out);
    for (size_t i = 0; i < size - sizeof(*out); i++)
      if (tail[i] != 0)
        return dlock__fail(
            DLOCK_EINVAL,
            "options set a field at byte %zu that dlock %s does not know "
            "(it knows %zu bytes): the program was built against a newer "
            "dlock.h than the library it runs with",
            sizeof(*out) + i, DLOCK_VERSION_STRING, sizeof(*out));
    size = sizeof(*out);
  }
  memcpy(out, o, size);
  out->struct_size = sizeof(*out);
  return 0;
}

/* A random (version 4) UUID, like Redisson's client ids. */
static int make_uuid(char out[37]) {
  unsigned char b[16];
  size_t got = 0;
  while (got < sizeof(b)) {
    ssize_t n = getrandom(b + got, sizeof(b) - got, 0);
    if (n < 0 && errno != EINTR)
      return dlock__fail(DLOCK_EIO, "getrandom: %s", strerror(errno));
    if (n > 0)
      got += (size_t)n;
  }
  b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
  b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
  snprintf(
      out, 37,
      "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
      b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11],
      b[12], b[13], b[14], b[15]);
  return 0;
}

/* A duration option: 'min'..DLOCK_DURATION_MAX_MS (see dlock.h for why
 * there is a limit). */
static int check_ms(const char *what, int64_t v, int64_t min) {
  if (v >= min && v <= DLOCK_DURATION_MAX_MS)
    return 0;
  return dlock__fail(DLOCK_EINVAL,
                     "%s must be %lld..DLOCK_DURATION_MAX_MS (%lld ms, about "
                     "31 years), got %lld",
                     what, (long long)min, (long long)DLOCK_DURATION_MAX_MS,
                     (long long)v);
}

/* A count option: 0..'max', named 'max_name' in the message as dlock.h
 * names it. */
static int check_upto(const char *what, long long v, long long max,
                      const char *max_name) {
  if (v >= 0 && v <= max)
    return 0;
  return dlock__fail(DLOCK_EINVAL, "%s must be 0..%s (%lld), got %lld", what,
                     max_name, max, v);
}
#define CHECK_UPTO(what, v, max) check_upto(what, v, max, #max)

/* An option that is one of the constants 'a' and 'b', named in the message
 * as dlock.h names them. */
static int check_either(const char *what, int v, int a, const char *a_name,
                        int b, const char *b_name) {
  if (v == a || v == b)
    return 0;
  return dlock__fail(DLOCK_EINVAL, "%s must be %s or %s, got %d", what, a_name,
                     b_name, v);
}
#define CHECK_EITHER(what, v, a, b) check_either(what, v, a, #a, b, #b)

static int check_options(const dlock_options_t *o) {
  int rc = check_ms("connect_timeout_ms", o->connect_timeout_ms, 1);
  if (rc == 0)
    rc = check_ms("command_timeout_ms", o->command_timeout_ms, 1);
  /* Renewed every third of it: a third must be at least 1 ms. */
  if (rc == 0)
    rc = check_ms("watchdog_timeout_ms", o->watchdog_timeout_ms, 3);
  if (rc == 0)
    rc = check_ms("fair_wait_timeout_ms", o->fair_wait_timeout_ms, 1);
  if (rc == 0)
    rc = check_ms("replica_sync_timeout_ms", o->replica_sync_timeout_ms, 1);
  /* 0 is allowed: no riding through outages. */
  if (rc == 0)
    rc = check_ms("outage_wait_ms", o->outage_wait_ms, 0);
  if (rc == 0)
    rc = CHECK_UPTO("replica_sync_replicas", o->replica_sync_replicas,
                    DLOCK_REPLICAS_MAX);
  if (rc == 0)
    rc = CHECK_EITHER("replica_sync_mode", o->replica_sync_mode, DLOCK_SYNC_ALL,
                      DLOCK_SYNC_ANY);
  if (rc == 0)
    rc = CHECK_EITHER("spin_backoff", o->spin_backoff,
                      DLOCK_BACKOFF_EXPONENTIAL, DLOCK_BACKOFF_CONSTANT);
  if (rc == 0)
    rc = CHECK_UPTO("spin_us", o->spin_us, DLOCK_SPIN_US_MAX);
  if (rc == 0)
    rc = CHECK_UPTO("unlock_retries", o->unlock_retries,
                    DLOCK_UNLOCK_RETRIES_MAX);
  if (rc != 0)
    return rc;
  if (o->client_id != NULL &&
      (o->client_id[0] == '\0' || strlen(o->client_id) > DLOCK__CLIENT_ID_MAX))
    return dlock__fail(DLOCK_EINVAL, "client_id must be 1..%d bytes",
                       DLOCK__CLIENT_ID_MAX);
  return 0;
}

/* Whether any TLS option is set. */
static int wants_tls(const dlock_options_t *o) {
  return o->tls_ca_file != NULL || o->tls_ca_dir != NULL ||
         o->tls_cert_file != NULL || o->tls_key_file != NULL ||
         o->tls_server_name != NULL || o->tls_insecure != 0;
}

/* Checks the TLS options against the URL, and loads them into '*out'
 * (reading the CA and certificate files) so that a missing or wrong file is
 * reported by the open, naming it, rather than by every connection
 * attempt. */
static int load_tls(const dlock_options_t *o, const dlock__endpoint *ep,
                    dlock__tls **out) {
  *out = NULL;
  if (!ep->tls) {
    if (wants_tls(o))
      return dlock__fail(DLOCK_EINVAL,
                         "TLS options given for a URL without TLS: use a "
                         "rediss:// URL");
    return 0;
  }
  dlock__tls_cfg cfg = {o->tls_ca_file,     o->tls_ca_dir,
                        o->tls_cert_file,   o->tls_key_file,
                        o->tls_server_name, o->tls_insecure != 0};
  return dlock__tls_new(&cfg, out);
}

/* 1 in a child of fork(): the fork count moved, or (should the handler be
 * missing) the process is not the one that opened the client. */
static int is_forked(const dlock_client_t *c) {
  return dlock__forked_since(c->fork_gen) || getpid() != c->pid;
}

/* Clients closed in a child of fork() that kept some memory (see
 * forget_after_fork): listed, so that it stays reachable rather than
 * leaked. Pushed without a lock, which a parent thread could hold. */
static _Atomic(dlock_client_t *) forked_leftovers;

/*
 * dlock_client_close in a child of fork(): frees what is safe to free and
 * takes nothing that a parent thread may hold. The threads are the
 * parent's (nothing to join), the sockets and pipes are shared with the
 * parent (only this process's descriptors are closed, nothing is written),
 * and a part whose mutex a parent thread held at the fork may be half
 * changed, so it is left as it is.
 */
static void forget_after_fork(dlock_client_t *c) {
  dlock__watchdog_forget(c->wd);
  c->wd = NULL;
  if (dlock__settler_forget(c->settle) == 0)
    c->settle = NULL;
  if (dlock__pubsub_forget(c->ps) == 0)
    c->ps = NULL;
  int route_left = dlock__route_forget(&c->route) != 0;
  int holds_left = pthread_mutex_trylock(&c->mu) != 0;
  if (!holds_left) {
    dlock__holds_clear(&c->holds);
    pthread_mutex_unlock(&c->mu);
  }
  /* The TLS settings stay too: freeing them takes OpenSSL's locks, which
   * a parent thread may have held at the fork. */
  /* A Sentinel watcher is the parent's thread, as the others are: its
   * memory stays with the rest (dlock__route_forget). */
  /* An async client's loop keeps its sockets open in the child too; it
   * stays with the rest. */
  if (c->ps != NULL || route_left || c->settle != NULL || holds_left ||
      c->tls != NULL || c->loop != NULL) {
    c->forked_next = atomic_load(&forked_leftovers);
    while (
        !atomic_compare_exchange_weak(&forked_leftovers, &c->forked_next, c)) {
    }
    return;
  }
  pthread_mutex_destroy(&c->mu);
  /* The statistics' memory only: their mutex may have been held by a
   * parent thread at the fork, so it is not destroyed. */
  dlock__free(c->stats);
  dlock__endpoint_free(&c->ep);
  dlock__free(c->url);
  dlock__free(c);
}

static void destroy(dlock_client_t *c) {
  /* An async client's operations end first, while everything they may
   * need to give back what they got is still there. */
  dlock__loop_free(c->loop);
  c->loop = NULL;
  dlock__watchdog_stop(c->wd);
  /* Its watcher pokes the pub/sub thread: stopped before that goes. */
  dlock__watcher_stop(c->watcher);
  /* An undo in flight (settle.c) on a server that does not answer would
   * hold the close for a command timeout: it ends now, and what is still
   * unsettled expires with its lease, like every hold left at close. */
  dlock__route_cancel(&c->route);
  dlock__settler_free(c->settle);
  dlock__pubsub_stop(c->ps);
  dlock__route_free(&c->route);
  dlock__tls_free(c->tls);
  dlock__holds_clear(&c->holds);
  dlock__done_latches_clear(c);
  dlock__endpoint_free(&c->ep);
  pthread_mutex_destroy(&c->mu);
  dlock__stats_free(c->stats);
  dlock__free(c->url);
  dlock__free(c);
}

/* The server's maxmemory-policy into 'buf' ("" when it cannot be read):
 * CONFIG GET, or INFO memory where CONFIG is renamed, disabled or not
 * granted to the user. */
static void read_eviction_policy(dlock_client_t *c, char *buf, size_t n) {
  const char *config[] = {"CONFIG", "GET", "maxmemory-policy"};
  const size_t config_lens[] = {6, 3, 16};
  redisReply *r = NULL;
  buf[0] = '\0';
  if (dlock__command(c, 3, config, config_lens, &r) == 0 &&
      r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
      r->element[1]->type == REDIS_REPLY_STRING) {
    snprintf(buf, n, "%.*s", (int)r->element[1]->len, r->element[1]->str);
    freeReplyObject(r);
    return;
  }
  if (r != NULL)
    freeReplyObject(r);
  const char *info[] = {"INFO", "memory"};
  const size_t info_lens[] = {4, 6};
  if (dlock__command(c, 2, info, info_lens, &r) != 0)
    return;
  static const char field[] = "maxmemory_policy:";
  const char *p = r->type == REDIS_REPLY_STRING ? strstr(r->str, field) : NULL;
  if (p != NULL) {
    p += sizeof(field) - 1;
    snprintf(buf, n, "%.*s", (int)strcspn(p, "\r\n"), p);
  }
  freeReplyObject(r);
}

/*
 * Warns through on_warning when the server may evict keys under memory
 * pressure: every lock key has an expiry, so volatile-* policies may evict
 * it as well as allkeys-* ones (volatile-ttl first of all, a lock's lease
 * being shorter than most caches' TTLs), and an evicted lock is granted to
 * the next owner while its holder still works. Only noeviction keeps locks.
 * A server that does not say is not warned about; the check costs one
 * round trip, made only when someone listens.
 */
static void warn_if_evicting(dlock_client_t *c) {
  if (c->opt.on_warning == NULL)
    return;
  char policy[64];
  read_eviction_policy(c, policy, sizeof(policy));
  /* The failure of a check that is only advice is nobody's business. */
  dlock__fail_text(0, "");
  if (policy[0] == '\0' || strcmp(policy, "noeviction") == 0)
    return;
  char where[256], text[1024];
  dlock__route_describe(&c->route, &c->ep, where, sizeof(where));
  snprintf(text, sizeof(text),
           "Redis at %s has maxmemory-policy %s: once it reaches maxmemory "
           "it evicts %s, and an evicted lock is granted to another owner "
           "while its holder still holds it; run lock servers with "
           "maxmemory-policy noeviction (see docs/deployment.md)",
           where, policy,
           strncmp(policy, "volatile-", 9) == 0
               ? "keys that have an expiry, which every lock has"
               : "any key, locks included");
  c->opt.on_warning(c->opt.on_warning_data, text);
}

/* A redis-sentinel:// or rediss-sentinel:// URL: the Sentinels and the
 * master's name go to the discovery, the data nodes' credentials, db and
 * TLS to 'c->ep'; the TLS settings are loaded here, for the discovery's
 * connections as much as for the client's own. */
static int open_sentinel(dlock_client_t *c, const char *url) {
  dlock__sentinel_url su;
  int rc = dlock__url_parse_sentinel(url, &su);
  if (rc != 0)
    return rc;
  /* The discovery keeps its own copy: it opens the data nodes' streams
   * with their password, db and TLS. */
  c->ep = su.data;
  c->ep.user = su.data.user ? dlock__strdup(su.data.user) : NULL;
  c->ep.pass = su.data.pass ? dlock__strdup(su.data.pass) : NULL;
  if ((su.data.user != NULL && c->ep.user == NULL) ||
      (su.data.pass != NULL && c->ep.pass == NULL))
    rc = dlock__fail(DLOCK_ENOMEM, "out of memory opening a client");
  if (rc == 0)
    rc = load_tls(&c->opt, &c->ep, &c->tls);
  if (rc != 0) {
    dlock__sentinel_url_free(&su);
    return rc;
  }
  return dlock__sentinel_new(&su, c->tls, c->opt.connect_timeout_ms,
                             c->opt.command_timeout_ms, &c->route.sentinel);
}

/* The Sentinel discovery as the command connection's locator. */
static int locate_master(void *s, int64_t deadline_us,
                         const dlock__cancel *cancel, dlock__stream **out,
                         unsigned *gen) {
  return dlock__sentinel_open(s, deadline_us, cancel, out, gen);
}

static unsigned master_gen(void *s) { return dlock__sentinel_gen(s); }

/* A redis-cluster:// URL: the seeds go to the topology (made once the TLS
 * settings are loaded), and the first seed, with the credentials, to
 * 'c->ep', where the pub/sub connection goes: a classic PUBLISH reaches
 * every node of a cluster. */
static int parse_cluster(dlock_client_t *c, const char *url,
                         dlock__cluster_url *cu) {
  int rc = dlock__url_parse_cluster(url, cu);
  if (rc != 0)
    return rc;
  c->ep.port = cu->seeds[0].port;
  c->ep.tls = cu->data.tls;
  c->ep.host = dlock__strdup(cu->seeds[0].host);
  c->ep.user = cu->data.user ? dlock__strdup(cu->data.user) : NULL;
  c->ep.pass = cu->data.pass ? dlock__strdup(cu->data.pass) : NULL;
  if (c->ep.host == NULL || (cu->data.user != NULL && c->ep.user == NULL) ||
      (cu->data.pass != NULL && c->ep.pass == NULL))
    return dlock__fail(DLOCK_ENOMEM, "out of memory opening a client");
  return 0;
}

/* The master moved: the pub/sub thread follows it now. */
static void on_switch(void *data) {
  dlock_client_t *c = data;
  dlock__pubsub_poke(c->ps);
  dlock__stat_event(c->stats, DLOCK__ST_FAILOVERS, DLOCK_EVENT_FAILOVER, 0, 0);
}

/* One try at reaching the server(s), each try waiting for the connect
 * timeout in all: a server that accepts and never answers makes it fail
 * then, not after a command timeout more for each connection's
 * handshake. */
static int open_try(dlock_client_t *c, int64_t deadline_us) {
  return dlock__route_open(&c->route, deadline_us);
}

/*
 * Reaches the server(s) for the open, riding out an outage as a call
 * without a wait of its own does: while dlock__route_in_outage says so, a try
 * that fails with DLOCK_EIO is made again after the outage back-off, until
 * outage_wait_ms have passed since the first (0: none is). So a client
 * opened while its master is being failed over comes up once the Sentinels
 * name one that answers. '*deadline_us' is the deadline of what the open
 * still does after a try that succeeded.
 */
static int open_riding(dlock_client_t *c, int64_t *deadline_us) {
  dlock__riding ride;
  memset(&ride, 0, sizeof(ride));
  int rc;
  for (;;) {
    *deadline_us = dlock__deadline_ms(c->opt.connect_timeout_ms);
    rc = open_try(c, *deadline_us);
    if (rc != DLOCK_EIO || c->opt.lazy_connect || c->opt.outage_wait_ms == 0 ||
        !dlock__route_in_outage(&c->route))
      break;
    int next = dlock__outage_next(
        c, &ride, rc, dlock__after_ms(dlock__now_us(), c->opt.outage_wait_ms));
    if (next == DLOCK_ECANCELED)
      return next;
    if (next != 0)
      break;
  }
  return rc == DLOCK_EIO ? dlock__outage_end(&ride, rc) : rc;
}

/* Opens a client; an 'async' one connects nothing and starts no thread: an
 * event loop drives it (engine/loop.h). */
static int open_client(const dlock_options_t *o, dlock_client_t **out,
                       int async) {
  if (o == NULL || out == NULL)
    return dlock__fail(DLOCK_EINVAL, "options and out must not be NULL");
  *out = NULL;
  dlock_options_t opt;
  int rc = read_options(o, &opt);
  if (rc != 0)
    return rc;
  o = &opt;
  rc = check_options(o);
  if (rc != 0)
    return rc;
  dlock_client_t *c = dlock__calloc(1, sizeof(*c));
  if (c == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory opening a client");
  pthread_mutex_init(&c->mu, NULL);
  dlock__holds_init(&c->holds);
  dlock__fork_watch();
  c->fork_gen = dlock__fork_gen();
  c->pid = getpid();
  c->opt = *o;
  /* Statistics are kept unless turned off; an event hook needs the block
   * either way. */
  if (!o->stats_off || o->on_event != NULL) {
    c->stats = dlock__stats_new(o->on_event, o->on_event_data);
    if (c->stats == NULL)
      rc = dlock__fail(DLOCK_ENOMEM, "out of memory opening a client");
  }
  dlock__sync_init(&c->sync, o);
  dlock__route_init(&c->route, o->command_timeout_ms, o->on_warning,
                    o->on_warning_data);
  c->route.info_all = c->sync.any;
  const char *url = o->url ? o->url : DEFAULT_URL;
  if (rc == 0 && (c->url = dlock__strdup(url)) == NULL)
    rc = dlock__fail(DLOCK_ENOMEM, "out of memory opening a client");
  c->opt.url = c->url;
  dlock__cluster_url cu;
  memset(&cu, 0, sizeof(cu));
  if (rc == 0 && dlock__url_is_sentinel(url))
    rc = open_sentinel(c, url);
  else if (rc == 0 && dlock__url_is_cluster(url))
    rc = parse_cluster(c, url, &cu);
  else if (rc == 0)
    rc = dlock__url_parse(url, &c->ep);
  if (rc == 0 && !dlock__url_is_sentinel(url))
    rc = load_tls(o, &c->ep, &c->tls);
  if (rc == 0 && o->client_id != NULL)
    snprintf(c->id, sizeof(c->id), "%s", o->client_id);
  else if (rc == 0)
    rc = make_uuid(c->id);
  dlock__route *route = &c->route;
  c->locator = (dlock__locator){locate_master, master_gen, route->sentinel};
  dlock__conn_cfg cfg = {&c->ep,
                         o->connect_timeout_ms,
                         o->command_timeout_ms,
                         c->tls,
                         route->sentinel != NULL ? &c->locator : NULL,
                         c->stats,
                         o->spin_us};
  cu.stats = c->stats;
  if (rc == 0 && cu.n > 0) {
    rc = dlock__cluster_new(&cu, c->tls, o->connect_timeout_ms,
                            o->command_timeout_ms, &route->cluster);
    if (rc == 0)
      route->conn = dlock__cluster_any(route->cluster);
  } else if (rc == 0)
    rc = dlock__conn_new(&cfg, &route->conn);
  dlock__cluster_url_free(&cu);
  if (rc == 0)
    rc = dlock__settler_new(c, dlock__undo, &c->settle);
  if (async) {
    if (rc == 0)
      rc = dlock__loop_new(c, route->sentinel != NULL ? &c->locator : NULL,
                           dlock__async_renew, &c->loop);
    if (rc != 0) {
      destroy(c);
      return rc;
    }
    *out = c;
    return 0;
  }
  int64_t open_deadline = dlock__deadline_ms(o->connect_timeout_ms);
  if (rc == 0) {
    rc = open_riding(c, &open_deadline);
    /* A lazy client starts while its server is unreachable (a RedLock node
     * that is down); wrong passwords and non-Redis servers still fail. */
    if (rc == DLOCK_EIO && o->lazy_connect)
      rc = 0;
    else if (rc == 0)
      warn_if_evicting(c);
    /* Whether unlock messages travel on sharded pub/sub, asked once, as
     * Redisson does; a cluster that cannot be asked now keeps classic. */
    if (rc == 0 && route->cluster != NULL) {
      /* Asked again after the busy back-off while the cluster refuses
       * it for now (CLUSTERDOWN), within the open's time. */
      int step = 0;
      while (dlock__cluster_probe_sharded(route->cluster, open_deadline) ==
                 DLOCK__CLUSTER_BUSY &&
             dlock__busy_pause(c, &step, open_deadline) == 0) {
      }
    }
  }
  if (rc == 0)
    rc = dlock__pubsub_start(&c->ep, c->tls, route->sentinel, route->cluster,
                             o->connect_timeout_ms, o->command_timeout_ms,
                             o->lazy_connect, open_deadline, &c->ps);
  if (rc == 0)
    dlock__pubsub_set_stats(c->ps, c->stats);
  /* Failovers are followed from now on: the pub/sub thread is told at
   * once, the command connection at its next use. */
  if (rc == 0 && route->sentinel != NULL) {
    dlock__sentinel_on_switch(route->sentinel, on_switch, c);
    rc = dlock__watcher_start(route->sentinel, &c->watcher);
  }
  if (rc == 0)
    rc = dlock__watchdog_start(c, &c->wd);
  if (rc != 0) {
    destroy(c);
    return rc;
  }
  *out = c;
  return 0;
}

int dlock_client_open(const dlock_options_t *o, dlock_client_t **out) {
  return open_client(o, out, 0);
}

int dlock_client_open_async(const dlock_options_t *o, dlock_client_t **out) {
  return open_client(o, out, 1);
}

static int check_async(const dlock_client_t *c) {
  if (c == NULL)
    return dlock__fail(DLOCK_EINVAL, "client is NULL");
  if (c->loop == NULL)
    return dlock__fail(DLOCK_EINVAL, "the client was not opened with "
                                     "dlock_client_open_async()");
  return 0;
}

int dlock_loop_attach(dlock_client_t *c, dlock_socket_cb on_socket,
                      dlock_timer_cb on_timer, void *data) {
  int rc = check_async(c);
  if (rc == 0 && (on_socket == NULL || on_timer == NULL))
    rc = dlock__fail(DLOCK_EINVAL, "on_socket and on_timer must be given");
  return rc != 0 ? rc : dlock__loop_attach(c->loop, on_socket, on_timer, data);
}

int dlock_loop_action(dlock_client_t *c, int fd, int events) {
  int rc = check_async(c);
  if (rc == 0 && is_forked(c))
    rc = dlock__fail_forked();
  if (rc != 0)
    return rc;
  dlock__loop_action(c->loop, fd, events);
  /* A callback closed the client: its end waited for this. */
  if (c->loop->close_requested)
    destroy(c);
  return 0;
}

size_t dlock_loop_pending(const dlock_client_t *c) {
  return c != NULL && c->loop != NULL ? c->loop->nops : 0;
}

void dlock_client_shutdown(dlock_client_t *c) {
  /* In a child of fork() the calls it would cancel are the parent's, and
   * canceling them would shut the parent's socket down. */
  if (c == NULL || is_forked(c))
    return;
  atomic_store(&c->canceled, 1);
  dlock__route_cancel(&c->route);
  dlock__pubsub_cancel(c->ps);
}

void dlock_client_close(dlock_client_t *c) {
  if (c == NULL)
    return;
  /* A callback of an operation that the close is ending closes the client
   * again: the close under way finishes it. */
  if (!is_forked(c) && c->loop != NULL && c->loop->closing)
    return;
  if (!is_forked(c) && c->loop != NULL && c->loop->dispatching) {
    /* From a callback: the operations end now, the client once the loop's
     * action that runs the callback returns. */
    dlock__loop_cancel_all(c->loop);
    c->loop->close_requested = 1;
    return;
  }
  if (is_forked(c))
    forget_after_fork(c);
  else
    destroy(c);
}

const char *dlock_client_id(const dlock_client_t *c) {
  return c != NULL ? c->id : "";
}
