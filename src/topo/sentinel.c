/*
 * Finding the master through Sentinel (see sentinel.h).
 */
#include "sentinel.h"

#include "alloc.h"
#include "error.h"
#include "monotime.h"

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The watcher's pause before it tries the next Sentinel, doubling. */
#define WATCH_BACKOFF_FIRST_MS 100
#define WATCH_BACKOFF_MAX_MS 2000
/* The watcher pings its Sentinel this often, and calls the connection
 * dead after three periods (or three command timeouts) of silence. */
#define WATCH_PING_MS 1000

struct dlock__sentinel {
  dlock__sentinel_url url;
  const dlock__tls *tls; /* for rediss-sentinel://, or NULL */
  int64_t connect_timeout_ms, command_timeout_ms;
  pthread_mutex_t mu; /* guards the master, 'next' */
  char *master_host;  /* the master last known, or NULL */
  int master_port;
  size_t next; /* the Sentinel to ask first */
  atomic_uint gen;
  atomic_int named; /* a Sentinel has named a master (dlock__sentinel_named) */
  /* The watcher (dlock__sentinel_watch_step), stepped by one thread. */
  dlock__sentinel_cb cb;
  void *cb_data;
  int wstarted;
  dlock__stream *wst; /* its connection, or NULL while it pauses */
  size_t wi;          /* the Sentinel it watches or tries next */
  int64_t wbackoff_ms, wlast_rx, wnext_ping;
};

int dlock__sentinel_new(dlock__sentinel_url *url, const dlock__tls *tls,
                        int64_t connect_timeout_ms, int64_t command_timeout_ms,
                        dlock__sentinel **out) {
  *out = NULL;
  dlock__sentinel *s = dlock__calloc(1, sizeof(*s));
  if (s == NULL) {
    dlock__sentinel_url_free(url);
    return dlock__fail(DLOCK_ENOMEM, "out of memory for Sentinel discovery");
  }
  s->url = *url;
  memset(url, 0, sizeof(*url));
  s->tls = tls;
  s->connect_timeout_ms = connect_timeout_ms;
  s->command_timeout_ms = command_timeout_ms;
  pthread_mutex_init(&s->mu, NULL);
  *out = s;
  return 0;
}

unsigned dlock__sentinel_gen(dlock__sentinel *s) {
  return atomic_load(&s->gen);
}

int dlock__sentinel_named(dlock__sentinel *s) { return atomic_load(&s->named); }

void dlock__sentinel_describe(dlock__sentinel *s, char *buf, size_t n) {
  pthread_mutex_lock(&s->mu);
  if (s->master_host == NULL)
    snprintf(buf, n, "master \"%s\" (not found yet)", s->url.master);
  else if (strchr(s->master_host, ':') != NULL)
    snprintf(buf, n, "[%s]:%d", s->master_host, s->master_port);
  else
    snprintf(buf, n, "%s:%d", s->master_host, s->master_port);
  pthread_mutex_unlock(&s->mu);
}

/* Records the master 'host':'port', and Sentinel 'asked' (when not
 * (size_t)-1) as the one to ask first; a change of master moves the
 * generation on. Returns the generation of that master: a stream opened to
 * it belongs to it. */
static unsigned set_master(dlock__sentinel *s, const char *host,
                           size_t host_len, int port, size_t asked) {
  char *copy = dlock__memdup(host, host_len);
  atomic_store(&s->named, 1);
  pthread_mutex_lock(&s->mu);
  if (asked != (size_t)-1)
    s->next = asked;
  if (copy == NULL) {
    /* Out of memory: the stream is an old one, replaced at its first use. */
    unsigned g = atomic_fetch_add(&s->gen, 1);
    pthread_mutex_unlock(&s->mu);
    return g;
  }
  int changed = s->master_host == NULL || s->master_port != port ||
                strcmp(s->master_host, copy) != 0;
  if (changed) {
    dlock__free(s->master_host);
    s->master_host = copy;
    s->master_port = port;
    atomic_fetch_add(&s->gen, 1);
  } else {
    dlock__free(copy);
  }
  unsigned g = atomic_load(&s->gen);
  pthread_mutex_unlock(&s->mu);
  return g;
}

/* set_master for the watcher: 1 when the master changed. */
static int switch_master(dlock__sentinel *s, const char *host, size_t host_len,
                         int port) {
  unsigned before = dlock__sentinel_gen(s);
  return set_master(s, host, host_len, port, (size_t)-1) != before;
}

/* Forgets the master last known, moving the generation on: every
 * connection to it is replaced at its next use, through the Sentinels. */
static void forget_master(dlock__sentinel *s) {
  pthread_mutex_lock(&s->mu);
  dlock__free(s->master_host);
  s->master_host = NULL;
  s->master_port = 0;
  atomic_fetch_add(&s->gen, 1);
  pthread_mutex_unlock(&s->mu);
  if (s->cb != NULL)
    s->cb(s->cb_data);
}

/* 1 when 'r', a reply to GET-MASTER-ADDR-BY-NAME, names the master last
 * known (or none is known yet), 0 when it names another or is no address,
 * -1 out of memory. */
static int names_known_master(dlock__sentinel *s, const redisReply *r) {
  if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
      r->element[0]->type != REDIS_REPLY_STRING ||
      r->element[1]->type != REDIS_REPLY_STRING)
    return 0;
  pthread_mutex_lock(&s->mu);
  int same = s->master_host == NULL ||
             (strcmp(s->master_host, r->element[0]->str) == 0 &&
              s->master_port == atoi(r->element[1]->str));
  pthread_mutex_unlock(&s->mu);
  return same;
}

/* Appends 'text' to the reasons gathered in 'why'. */
static void add_reason(char *why, size_t n, const char *text) {
  size_t len = strlen(why);
  if (len + 3 < n)
    snprintf(why + len, n - len, "%s%s", len > 0 ? "; " : "", text);
}

static int64_t earlier(int64_t a, int64_t b) { return a < b ? a : b; }

/* The TLS settings for 'ep': the client's when the URL asked for TLS. */
static const dlock__tls *tls_of(const dlock__sentinel *s,
                                const dlock__endpoint *ep) {
  return ep->tls ? s->tls : NULL;
}

/* Opens a stream to the data node 'host':'port' and checks with ROLE that
 * it is a master. */
static int open_master(dlock__sentinel *s, const char *host, int port,
                       int64_t deadline_us, const dlock__cancel *cancel,
                       dlock__stream **out) {
  *out = NULL;
  dlock__endpoint ep = s->url.data;
  ep.host = (char *)host;
  ep.port = port;
  ep.path = NULL;
  char addr[160];
  dlock__endpoint_describe(&ep, addr, sizeof(addr));
  dlock__stream *st = NULL;
  int rc = dlock__stream_open_until(
      &ep, tls_of(s, &ep), s->connect_timeout_ms, s->command_timeout_ms,
      deadline_us, cancel->fd, cancel->canceled, cancel->arg, &st);
  if (rc != 0)
    return rc;
  const char *argv[] = {"ROLE"};
  redisReply *r = NULL;
  rc = dlock__stream_command_cancel(
      st, addr, earlier(deadline_us, dlock__deadline_ms(s->command_timeout_ms)),
      cancel, 1, argv, &r);
  if (rc == 0 && r->type == REDIS_REPLY_ERROR) {
    /* A user not allowed ROLE cannot confirm the master this way; a
     * replica would refuse its writes with READONLY all the same. */
    if (dlock__fail_reply(r->str, r->len) != DLOCK_EAUTH)
      rc = dlock__fail(DLOCK_EIO, "ROLE %s: %.200s", addr, r->str);
  } else if (rc == 0 && (r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
                         r->element[0]->type != REDIS_REPLY_STRING ||
                         strcmp(r->element[0]->str, "master") != 0)) {
    rc = dlock__fail(DLOCK_EIO,
                     "%s, named master of \"%s\", is not a master (ROLE says "
                     "%s): a failover is under way or the Sentinel is stale",
                     addr, s->url.master,
                     r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
                             r->element[0]->type == REDIS_REPLY_STRING
                         ? r->element[0]->str
                         : "something else");
  }
  if (r != NULL)
    freeReplyObject(r);
  if (rc != 0) {
    dlock__stream_free(st);
    return rc;
  }
  *out = st;
  return 0;
}

/* Asks Sentinel 'i' for the master's address: 0 with '*host' (the
 * caller's) and '*port', or an error. */
static int ask_sentinel(dlock__sentinel *s, size_t i, int64_t deadline_us,
                        const dlock__cancel *cancel, char **host, int *port) {
  *host = NULL;
  const dlock__endpoint *ep = &s->url.sentinels[i];
  char addr[160];
  dlock__endpoint_describe(ep, addr, sizeof(addr));
  dlock__stream *st = NULL;
  int rc = dlock__stream_open_until(
      ep, tls_of(s, ep), s->connect_timeout_ms, s->command_timeout_ms,
      deadline_us, cancel->fd, cancel->canceled, cancel->arg, &st);
  if (rc != 0) {
    char why[300];
    snprintf(why, sizeof(why), "%s", dlock_last_error());
    return dlock__fail(rc, "Sentinel %s: %s", addr, why);
  }
  const char *argv[] = {"SENTINEL", "GET-MASTER-ADDR-BY-NAME", s->url.master};
  redisReply *r = NULL;
  rc = dlock__stream_command_cancel(
      st, addr, earlier(deadline_us, dlock__deadline_ms(s->command_timeout_ms)),
      cancel, 3, argv, &r);
  dlock__stream_free(st);
  if (rc != 0)
    return rc;
  if (r->type == REDIS_REPLY_ERROR) {
    rc = dlock__fail_reply(r->str, r->len);
    char why[300];
    snprintf(why, sizeof(why), "%s", dlock_last_error());
    rc = dlock__fail(rc == DLOCK_EAUTH ? DLOCK_EAUTH : DLOCK_EIO,
                     "Sentinel %s: %s", addr, why);
  } else if (r->type == REDIS_REPLY_NIL) {
    rc = dlock__fail(DLOCK_EIO, "Sentinel %s does not know master \"%s\"", addr,
                     s->url.master);
  } else if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
             r->element[0]->type != REDIS_REPLY_STRING ||
             r->element[1]->type != REDIS_REPLY_STRING ||
             atoi(r->element[1]->str) <= 0 ||
             atoi(r->element[1]->str) > 65535) {
    rc = dlock__fail(DLOCK_EPROTO,
                     "Sentinel %s gave an unexpected answer to "
                     "GET-MASTER-ADDR-BY-NAME",
                     addr);
  } else {
    *host = dlock__memdup(r->element[0]->str, r->element[0]->len);
    *port = atoi(r->element[1]->str);
    if (*host == NULL)
      rc = dlock__fail(DLOCK_ENOMEM, "out of memory asking a Sentinel");
  }
  freeReplyObject(r);
  return rc;
}

/* What opening a master of generation 'g' that gave 'rc' means for the
 * lookup: 0 found (with '*gen' set), 1 try the next Sentinel (the reason
 * added to 'why'), or an error that no other Sentinel would change (a
 * wrong password, no memory, the client closing). */
static int master_tried(int rc, unsigned g, unsigned *gen, char *why,
                        size_t why_len) {
  if (rc == 0)
    *gen = g;
  if (rc == 0 || rc == DLOCK_EAUTH || rc == DLOCK_ENOMEM ||
      rc == DLOCK_ECANCELED)
    return rc;
  add_reason(why, why_len, dlock_last_error());
  return 1;
}

/* Whether 'cancel' says stop now. */
static int stop_now(const dlock__cancel *cancel) {
  return cancel->canceled != NULL && cancel->canceled(cancel->arg);
}

int dlock__sentinel_open(dlock__sentinel *s, int64_t deadline_us,
                         const dlock__cancel *cancel, dlock__stream **out,
                         unsigned *gen) {
  static const dlock__cancel never = {-1, NULL, NULL};
  if (cancel == NULL)
    cancel = &never;
  *out = NULL;
  char why[1024] = "";
  /* The master last known first: after a reconnect it is usually still
   * the master, and a Sentinel need not be asked. */
  pthread_mutex_lock(&s->mu);
  char *known = s->master_host ? dlock__strdup(s->master_host) : NULL;
  int known_port = s->master_port;
  /* The generation of this master, read with it: one that moves on
   * meanwhile makes the stream an old one, replaced at its first use. */
  unsigned known_gen = dlock__sentinel_gen(s);
  size_t first = s->next;
  pthread_mutex_unlock(&s->mu);
  int rc = DLOCK_EIO;
  if (known != NULL) {
    rc = open_master(s, known, known_port, deadline_us, cancel, out);
    dlock__free(known);
    rc = master_tried(rc, known_gen, gen, why, sizeof(why));
    if (rc <= 0)
      return rc;
  }
  for (size_t k = 0; k < s->url.n; k++) {
    if (dlock__now_us() >= deadline_us)
      break;
    /* A client closing stops the lookup between Sentinels too. */
    if (stop_now(cancel))
      return dlock__fail(DLOCK_ECANCELED, "client is shutting down");
    size_t i = (first + k) % s->url.n;
    char *host;
    int port = 0;
    rc = ask_sentinel(s, i, deadline_us, cancel, &host, &port);
    if (rc == DLOCK_ENOMEM || rc == DLOCK_ECANCELED)
      return rc;
    if (rc != 0) {
      add_reason(why, sizeof(why), dlock_last_error());
      continue;
    }
    unsigned g = set_master(s, host, strlen(host), port, i);
    rc = open_master(s, host, port, deadline_us, cancel, out);
    dlock__free(host);
    rc = master_tried(rc, g, gen, why, sizeof(why));
    if (rc <= 0)
      return rc;
  }
  return dlock__fail(DLOCK_EIO,
                     "no master \"%s\" found through %zu "
                     "Sentinel(s): %s",
                     s->url.master, s->url.n, why[0] ? why : "out of time");
}

/* The value of field 'name' in one entry of SENTINEL REPLICAS (a flat
 * array of names and values), or "". */
static const char *entry_field(const redisReply *e, const char *name) {
  if (e->type != REDIS_REPLY_ARRAY)
    return "";
  for (size_t i = 0; i + 1 < e->elements; i += 2)
    if (e->element[i]->type == REDIS_REPLY_STRING &&
        strcmp(e->element[i]->str, name) == 0 &&
        e->element[i + 1]->type == REDIS_REPLY_STRING)
      return e->element[i + 1]->str;
  return "";
}

/* 1 when 'flags' (comma-separated) has 'flag'. */
static int has_flag(const char *flags, const char *flag) {
  size_t n = strlen(flag);
  for (const char *p = flags; (p = strstr(p, flag)) != NULL; p += n)
    if ((p == flags || p[-1] == ',') && (p[n] == '\0' || p[n] == ','))
      return 1;
  return 0;
}

int dlock__sentinel_count_replicas(const redisReply *r) {
  int n = 0;
  for (size_t j = 0; r->type == REDIS_REPLY_ARRAY && j < r->elements; j++) {
    const char *flags = entry_field(r->element[j], "flags");
    /* The replica a failover is promoting (flag "promoted", on the
     * Sentinel leading it) has left the master, or is about to, and the
     * other replicas will follow it and drop whatever the master wrote
     * since: it still counts, so that no write on the old master reads as
     * synced in the meantime (WAIT cannot reach the count), until
     * +switch-master names the new master. */
    if (has_flag(flags, "promoted")) {
      n++;
      continue;
    }
    /* Replicas not down and saying they are replicas (a master demoted by
     * a failover is listed before it has been told so). One the Sentinel
     * has no link to counts too: right after +switch-master the Sentinel
     * lists every replica of the new master afresh, "disconnected" until
     * it reaches them, and a client still on the old master would
     * otherwise wait for none and write there unsynced; a replica really
     * gone is "s_down" after down-after-milliseconds. */
    if (has_flag(flags, "s_down") || has_flag(flags, "o_down"))
      continue;
    const char *role = entry_field(r->element[j], "role-reported");
    if (strcmp(role, "slave") == 0) {
      n++;
      continue;
    }
    /* A replica that says "master" after the Sentinel saw it replicate
     * (its master-host is known) is being promoted by a failover that this
     * Sentinel does not lead, or was made a master by hand: the other
     * replicas may soon follow it and drop what the old master wrote, so
     * it counts and the old master's writes cannot read as synced. The old
     * master listed under the new one after +switch-master, never seen as
     * a replica since (master-host "?"), does not count: it has none of
     * the new master's writes until it is told to follow it. */
    const char *mhost = entry_field(r->element[j], "master-host");
    if (strcmp(role, "master") == 0 && mhost[0] != '\0' &&
        strcmp(mhost, "?") != 0)
      n++;
  }
  return n;
}

int dlock__sentinel_replicas(dlock__sentinel *s, int64_t deadline_us,
                             int *out) {
  char why[1024] = "";
  pthread_mutex_lock(&s->mu);
  size_t first = s->next;
  pthread_mutex_unlock(&s->mu);
  for (size_t k = 0; k < s->url.n; k++) {
    if (dlock__now_us() >= deadline_us)
      break;
    size_t i = (first + k) % s->url.n;
    const dlock__endpoint *ep = &s->url.sentinels[i];
    char addr[160];
    dlock__endpoint_describe(ep, addr, sizeof(addr));
    dlock__stream *st = NULL;
    int rc = dlock__stream_open_until(ep, tls_of(s, ep), s->connect_timeout_ms,
                                      s->command_timeout_ms, deadline_us, -1,
                                      NULL, NULL, &st);
    redisReply *r = NULL;
    const char *argv[] = {"SENTINEL", "REPLICAS", s->url.master};
    if (rc == 0)
      rc = dlock__stream_command(
          st, addr,
          earlier(deadline_us, dlock__deadline_ms(s->command_timeout_ms)), 3,
          argv, &r);
    /* The master this Sentinel names, asked after the replicas: a Sentinel
     * that still names it then named it when it listed them. */
    redisReply *m = NULL;
    const char *ask[] = {"SENTINEL", "GET-MASTER-ADDR-BY-NAME", s->url.master};
    if (rc == 0 && r->type == REDIS_REPLY_ARRAY)
      rc = dlock__stream_command(
          st, addr,
          earlier(deadline_us, dlock__deadline_ms(s->command_timeout_ms)), 3,
          ask, &m);
    dlock__stream_free(st);
    if (rc == 0 && r->type == REDIS_REPLY_ARRAY) {
      int named = names_known_master(s, m);
      if (m != NULL)
        freeReplyObject(m);
      if (named < 0) {
        freeReplyObject(r);
        return dlock__fail(DLOCK_ENOMEM, "out of memory asking a Sentinel");
      }
      if (named == 0) {
        /* The Sentinel names another master than the one this client
         * writes to: a failover is under way or done, and the replicas it
         * lists follow another master. Their count must not be used for
         * writes on this one (replicas still attached to it acknowledge
         * writes that they drop when they follow the new master): the
         * master is looked up again, and the write is not sent. */
        freeReplyObject(r);
        char known[160];
        dlock__sentinel_describe(s, known, sizeof(known));
        forget_master(s);
        return dlock__fail(DLOCK_EIO,
                           "Sentinel %s names another master of \"%s\" than "
                           "%s, where this client writes: a failover is under "
                           "way; the master is looked up again",
                           addr, s->url.master, known);
      }
      *out = dlock__sentinel_count_replicas(r);
      freeReplyObject(r);
      return 0;
    }
    if (m != NULL)
      freeReplyObject(m);
    if (rc == 0)
      rc = dlock__fail(DLOCK_EIO, "Sentinel %s: SENTINEL REPLICAS %s: %.200s",
                       addr, s->url.master,
                       r->type == REDIS_REPLY_ERROR ? r->str : "bad reply");
    if (r != NULL)
      freeReplyObject(r);
    add_reason(why, sizeof(why), dlock_last_error());
  }
  return dlock__fail(DLOCK_EIO, "no Sentinel told the replicas of \"%s\": %s",
                     s->url.master, why[0] ? why : "out of time");
}

/* ---- the +switch-master watcher ------------------------------------------ */

/*
 * The watcher keeps a subscription to "+switch-master" on one Sentinel at
 * a time, moving to the next when its connection fails or falls silent.
 * It does no waiting of its own: dlock__sentinel_watch_step says what it
 * waits for next (its connection's descriptor, or a time), and whoever
 * drives it (engine/watcher.c, a thread) waits for that and steps it again.
 */

/* Handles one message of the subscription: "+switch-master" with
 * "<name> <old-ip> <old-port> <new-ip> <new-port>". */
static void on_message(dlock__sentinel *s, const redisReply *r) {
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
      r->element[0]->type != REDIS_REPLY_STRING ||
      strcmp(r->element[0]->str, "message") != 0 ||
      r->element[2]->type != REDIS_REPLY_STRING)
    return;
  const char *text = r->element[2]->str;
  size_t nlen = strlen(s->url.master);
  if (strncmp(text, s->url.master, nlen) != 0 || text[nlen] != ' ')
    return;
  char oldip[64], newip[64];
  int oldport, newport;
  if (sscanf(text + nlen, " %63s %d %63s %d", oldip, &oldport, newip,
             &newport) != 4)
    return;
  if (switch_master(s, newip, strlen(newip), newport) && s->cb != NULL)
    s->cb(s->cb_data);
}

/* Connects to Sentinel 'i', catches up with a switch made while nobody
 * watched, and subscribes (the SUBSCRIBE queued on the stream): the
 * stream, or NULL when the Sentinel did not answer. */
static dlock__stream *watch_open(dlock__sentinel *s, size_t i) {
  const dlock__endpoint *ep = &s->url.sentinels[i];
  char addr[160];
  dlock__endpoint_describe(ep, addr, sizeof(addr));
  dlock__stream *st = NULL;
  int64_t budget = s->connect_timeout_ms + s->command_timeout_ms;
  if (dlock__stream_open_until(
          ep, tls_of(s, ep), s->connect_timeout_ms, s->command_timeout_ms,
          dlock__deadline_ms(budget), -1, NULL, NULL, &st) != 0)
    return NULL;
  const char *ask[] = {"SENTINEL", "GET-MASTER-ADDR-BY-NAME", s->url.master};
  redisReply *r = NULL;
  if (dlock__stream_command(st, addr, dlock__deadline_ms(s->command_timeout_ms),
                            3, ask, &r) != 0) {
    dlock__stream_free(st);
    return NULL;
  }
  if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
      r->element[0]->type == REDIS_REPLY_STRING &&
      r->element[1]->type == REDIS_REPLY_STRING) {
    pthread_mutex_lock(&s->mu);
    int known = s->master_host != NULL;
    pthread_mutex_unlock(&s->mu);
    if (known &&
        switch_master(s, r->element[0]->str, r->element[0]->len,
                      atoi(r->element[1]->str)) &&
        s->cb != NULL)
      s->cb(s->cb_data);
  }
  freeReplyObject(r);
  const char *sub[] = {"SUBSCRIBE", "+switch-master"};
  if (dlock__stream_append_argv(st, 2, sub, NULL) != 0) {
    dlock__stream_free(st);
    return NULL;
  }
  return st;
}

/* Drops the connection to the current Sentinel: the next one is tried
 * after a pause, which doubles while they fail. 'subscribed': the one
 * dropped got as far as subscribing, and the pauses start again. */
static void watch_next(dlock__sentinel *s, int subscribed,
                       dlock__watch_io *next) {
  dlock__stream_free(s->wst);
  s->wst = NULL;
  if (subscribed)
    s->wbackoff_ms = WATCH_BACKOFF_FIRST_MS;
  s->wi = (s->wi + 1) % s->url.n;
  next->fd = -1;
  next->events = 0;
  next->until_us = dlock__now_us() + s->wbackoff_ms * 1000;
  s->wbackoff_ms = s->wbackoff_ms * 2 > WATCH_BACKOFF_MAX_MS
                       ? WATCH_BACKOFF_MAX_MS
                       : s->wbackoff_ms * 2;
}

/* Reads what the Sentinel sent: 0, or -1 when the connection failed. */
static int message_read(void *s, const redisReply *r) {
  ((dlock__sentinel *)s)->wlast_rx = dlock__now_us();
  on_message(s, r);
  return 0;
}

static int watch_read(dlock__sentinel *s) {
  return dlock__stream_read_each(s->wst, message_read, s) != 0 ? -1 : 0;
}

void dlock__sentinel_watch_step(dlock__sentinel *s, short revents,
                                dlock__watch_io *next) {
  if (!s->wstarted) {
    s->wstarted = 1;
    pthread_mutex_lock(&s->mu);
    s->wi = s->next;
    pthread_mutex_unlock(&s->mu);
    s->wbackoff_ms = WATCH_BACKOFF_FIRST_MS;
  }
  if (s->wst == NULL) {
    /* Its pause is over (or it starts): the next Sentinel. */
    if ((s->wst = watch_open(s, s->wi)) == NULL) {
      watch_next(s, 0, next);
      return;
    }
    s->wlast_rx = dlock__now_us();
    s->wnext_ping = s->wlast_rx + WATCH_PING_MS * 1000;
  } else if ((revents & (POLLIN | POLLHUP | POLLERR)) && watch_read(s) != 0) {
    watch_next(s, 1, next);
    return;
  }
  int64_t silence_ms =
      3 * (s->command_timeout_ms > WATCH_PING_MS ? s->command_timeout_ms
                                                 : WATCH_PING_MS);
  for (;;) {
    int done = 0;
    if (dlock__stream_flush(s->wst, &done) != 0) {
      watch_next(s, 1, next);
      return;
    }
    int64_t now = dlock__now_us();
    if (now - s->wlast_rx > silence_ms * 1000) {
      watch_next(s, 1, next); /* a silent Sentinel: the next one */
      return;
    }
    if (now < s->wnext_ping) {
      next->fd = dlock__stream_fd(s->wst);
      next->events = (short)(POLLIN | (done ? 0 : POLLOUT));
      next->until_us = s->wnext_ping;
      return;
    }
    const char *ping[] = {"PING"};
    if (dlock__stream_append_argv(s->wst, 1, ping, NULL) != 0) {
      watch_next(s, 1, next);
      return;
    }
    s->wnext_ping = now + WATCH_PING_MS * 1000;
  }
}

void dlock__sentinel_on_switch(dlock__sentinel *s, dlock__sentinel_cb cb,
                               void *data) {
  s->cb = cb;
  s->cb_data = data;
}

void dlock__sentinel_watch_end(dlock__sentinel *s) {
  if (s == NULL)
    return;
  dlock__stream_free(s->wst);
  s->wst = NULL;
}

void dlock__sentinel_free(dlock__sentinel *s) {
  if (s == NULL)
    return;
  dlock__sentinel_watch_end(s);
  dlock__sentinel_url_free(&s->url);
  dlock__free(s->master_host);
  pthread_mutex_destroy(&s->mu);
  dlock__free(s);
}
