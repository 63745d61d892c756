/*
 * A pub/sub connection that an event loop drives (see loopsub.h).
 */
#define _GNU_SOURCE
#include "loopsub.h"

#include "alloc.h"
#include "error.h"
#include "fifo.h"
#include "link/stream.h"
#include "monotime.h"
#include "reply.h"

#include <hiredis/hiredis.h>
#include <poll.h>
#include <string.h>

/* How long a channel nobody waits on stays subscribed. */
#define LINGER_US 1000000
/* The reconnection back-off: doubling from the first to the last. */
#define BACKOFF_FIRST_US 50000
#define BACKOFF_MAX_US 2000000

typedef struct dlock__lchan {
  struct dlock__lchan *next;
  char *name;
  size_t len;
  dlock__wake_fn wake;
  dlock__lwaiter *head, *tail; /* in the order they joined */
  int nwaiters;
  int subscribed; /* the last command sent for it was SUBSCRIBE */
  int pending;    /* its (un)subscriptions not confirmed yet */
  int resync;     /* subscribed again after a reconnect: wake everyone */
  int64_t idle_since;
  void *slot; /* the engine's, for the channel */
} lchan;

struct dlock__lsub {
  const dlock__endpoint *ep;
  const dlock__tls *tls;
  const dlock__locator *locator;
  unsigned gen; /* the locator's generation the connection was made in */
  int64_t connect_ms, command_ms;
  dlock__stream *ctx;
  int64_t retry_at_us, backoff_us;
  int64_t awaiting_since; /* the oldest confirmation awaited was asked */
  int outstanding;        /* confirmations awaited on the connection */
  unsigned sockets;       /* streams made so far (tells sockets apart) */
  int sharded;            /* SSUBSCRIBE on a cluster's node */
  lchan *chans;
  dlock__stats *stats; /* the client's statistics, or NULL */
};

void dlock__lsub_set_stats(dlock__lsub *s, dlock__stats *st) { s->stats = st; }

void dlock__lsub_set_sharded(dlock__lsub *s) { s->sharded = 1; }

int dlock__lsub_new(const dlock__endpoint *ep, const dlock__tls *tls,
                    const dlock__locator *locator, int64_t connect_timeout_ms,
                    int64_t command_timeout_ms, dlock__lsub **out) {
  dlock__lsub *s = dlock__calloc(1, sizeof(*s));
  if (s == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory for pub/sub");
  s->ep = ep;
  s->tls = tls;
  s->locator = locator;
  s->connect_ms = connect_timeout_ms;
  s->command_ms = command_timeout_ms;
  *out = s;
  return 0;
}

static void free_chan(lchan *ch) {
  dlock__free(ch->slot);
  dlock__free(ch->name);
  dlock__free(ch);
}

void dlock__lsub_free(dlock__lsub *s) {
  if (s == NULL)
    return;
  dlock__stream_free(s->ctx);
  while (s->chans != NULL) {
    lchan *ch = s->chans;
    s->chans = ch->next;
    free_chan(ch);
  }
  dlock__free(s);
}

static int is_ready(const dlock__lsub *s) {
  return s->ctx != NULL && dlock__stream_ready(s->ctx);
}

static int is_active(const dlock__lsub *s, const lchan *ch) {
  return is_ready(s) && ch->subscribed && ch->pending == 0;
}

/* ---- waking ------------------------------------------------------------- */

static void tell(dlock__lwaiter *w, int ev) { w->on(w, ev); }

static void wake_one(dlock__lwaiter *w, uint64_t value) {
  w->awake = 1;
  w->value = value;
  tell(w, value != 0 ? 2 : 1);
}

static void wake_all(lchan *ch) {
  for (dlock__lwaiter *w = ch->head; w != NULL; w = w->next) {
    if (w->joined)
      wake_one(w, 0);
  }
}

/* Wakes up to 'count' joined waiters that are not awake, first in line
 * first, skipping 'except'. */
static void wake_first(lchan *ch, int64_t count, uint64_t value,
                       const dlock__lwaiter *except) {
  for (dlock__lwaiter *w = ch->head; w != NULL && count > 0; w = w->next) {
    if (w != except && w->joined && !w->awake && w->pin == NULL) {
      wake_one(w, value);
      count--;
    }
  }
}

/* The join of every waiter not answered yet is answered. */
static void answer_joins(lchan *ch, int ev) {
  for (dlock__lwaiter *w = ch->head; w != NULL; w = w->next) {
    if (!w->joined) {
      w->joined = ev == 0;
      tell(w, ev);
    }
  }
}

/* ---- the connection ----------------------------------------------------- */

static void send_cmd(dlock__lsub *s, lchan *ch, int subscribe) {
  static const char *const verbs[2][2] = {{"UNSUBSCRIBE", "SUBSCRIBE"},
                                          {"SUNSUBSCRIBE", "SSUBSCRIBE"}};
  const char *verb = verbs[s->sharded][subscribe != 0];
  const char *argv[2] = {verb, ch->name};
  const size_t lens[2] = {strlen(verb), ch->len};
  ch->subscribed = subscribe;
  if (!is_ready(s))
    return; /* sent when the connection is ready */
  if (dlock__stream_append_argv(s->ctx, 2, argv, lens) != 0)
    return; /* out of memory: the join is answered at its deadline */
  ch->pending++;
  if (s->outstanding++ == 0)
    s->awaiting_since = dlock__now_us();
}

static void flush(dlock__lsub *s);

static void disconnect(dlock__lsub *s) {
  int64_t now = dlock__now_us();
  dlock__stream_free(s->ctx);
  s->ctx = NULL;
  s->outstanding = 0;
  s->retry_at_us = now + s->backoff_us;
  s->backoff_us = s->backoff_us == 0 ? BACKOFF_FIRST_US : s->backoff_us * 2;
  if (s->backoff_us > BACKOFF_MAX_US)
    s->backoff_us = BACKOFF_MAX_US;
  for (lchan *ch = s->chans; ch != NULL; ch = ch->next) {
    ch->pending = 0;
    ch->resync = 1;
    /* Messages may be lost until it is subscribed again: the waiters try
     * again now, and sleep by their locks' TTLs meanwhile. A cluster
     * node's waiters are told to join again where the map puts their
     * channel: the node may be gone for good (a master that failed over). */
    if (!s->sharded) {
      wake_all(ch);
      continue;
    }
    for (dlock__lwaiter *w = ch->head; w != NULL; w = w->next)
      tell(w, 3);
  }
}

static int wanted(const dlock__lsub *s) {
  for (const lchan *ch = s->chans; ch != NULL; ch = ch->next) {
    if (ch->nwaiters > 0)
      return 1;
  }
  return 0;
}

static void on_ready(dlock__lsub *s);

static void connect_if_due(dlock__lsub *s) {
  /* The master moved (Sentinel): its messages come from the next one. */
  if (s->ctx != NULL && s->locator != NULL &&
      s->gen != s->locator->gen(s->locator->ctx))
    disconnect(s);
  if (s->ctx != NULL || !wanted(s) || dlock__now_us() < s->retry_at_us)
    return;
  int rc;
  if (s->locator != NULL)
    rc = s->locator->open(s->locator->ctx,
                          dlock__deadline_ms(s->connect_ms + s->command_ms),
                          NULL, &s->ctx, &s->gen);
  else
    rc = dlock__stream_start_at(s->ep, s->tls, NULL, s->connect_ms,
                                s->command_ms, &s->ctx);
  if (rc != 0) {
    s->ctx = NULL;
    disconnect(s);
    return;
  }
  /* Every stream after the first is made again after a failure (the
   * connection is not closed while waiters want it) or a failover. */
  if (s->sockets > 0)
    dlock__stat_event(s->stats, DLOCK__ST_PUBSUB_RECONNECTS,
                      DLOCK_EVENT_PUBSUB_RECONNECT, 0, 0);
  s->sockets++;
  /* A located stream comes past its handshake. */
  if (dlock__stream_ready(s->ctx))
    on_ready(s);
}

/* The handshake is done: every channel that is wanted is subscribed. */
static void on_ready(dlock__lsub *s) {
  s->backoff_us = 0;
  for (lchan *ch = s->chans; ch != NULL; ch = ch->next) {
    if (ch->nwaiters > 0)
      send_cmd(s, ch, 1);
    else
      ch->subscribed = 0;
  }
}

static void flush(dlock__lsub *s) {
  int done;
  if (is_ready(s) && dlock__stream_flush(s->ctx, &done) != 0)
    disconnect(s);
}

static lchan *find(dlock__lsub *s, const char *name, size_t len) {
  for (lchan *ch = s->chans; ch != NULL; ch = ch->next) {
    if (ch->len == len && memcmp(ch->name, name, len) == 0)
      return ch;
  }
  return NULL;
}

/* A confirmation of (un)subscribing 'ch' came. */
static void confirmed(dlock__lsub *s, lchan *ch) {
  if (ch->pending > 0)
    ch->pending--;
  if (s->outstanding > 0 && --s->outstanding > 0)
    s->awaiting_since = dlock__now_us();
  if (!is_active(s, ch))
    return;
  answer_joins(ch, 0);
  if (ch->resync) {
    ch->resync = 0;
    wake_all(ch);
  }
}

/* An error reply: the oldest (un)subscription awaited is refused. */
static void refused(dlock__lsub *s, const redisReply *r) {
  for (lchan *ch = s->chans; ch != NULL; ch = ch->next) {
    if (ch->pending == 0)
      continue;
    dlock__fail(DLOCK_ESERVER, "Redis refused to subscribe to \"%.*s\": %.*s",
                (int)(ch->len > 100 ? 100 : ch->len), ch->name,
                (int)(r->len > 200 ? 200 : r->len), r->str);
    ch->pending--;
    if (s->outstanding > 0)
      s->outstanding--;
    ch->subscribed = 0;
    if (s->sharded && r->len > 6 && memcmp(r->str, "MOVED ", 6) == 0) {
      /* Asked of a node that no longer serves the channel's slot: its
       * waiters join again where the map, read again, says it is. */
      for (dlock__lwaiter *w = ch->head; w != NULL; w = w->next)
        tell(w, 3);
      return;
    }
    answer_joins(ch, DLOCK_ESERVER);
    return;
  }
}

static void on_frame(dlock__lsub *s, const redisReply *r) {
  if (r->type == REDIS_REPLY_ERROR) {
    refused(s, r);
    return;
  }
  if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 ||
      r->element[1]->type != REDIS_REPLY_STRING)
    return;
  lchan *ch = find(s, r->element[1]->str, r->element[1]->len);
  if (ch == NULL)
    return;
  const redisReply *kind = r->element[0];
  if (dlock__reply_is(kind, "message") || dlock__reply_is(kind, "smessage")) {
    const redisReply *m = r->element[2];
    dlock__wakeup wu = ch->wake(m->type == REDIS_REPLY_STRING ? m->str : NULL,
                                m->type == REDIS_REPLY_STRING ? m->len : 0);
    if (wu.how == DLOCK__WAKE_ALL)
      wake_all(ch);
    else if (wu.how == DLOCK__WAKE_FIRST)
      wake_first(ch, 1, wu.value, NULL);
    else if (wu.how == DLOCK__WAKE_SOME)
      wake_first(ch, wu.count, 0, NULL);
  } else if (dlock__reply_is(kind, "sunsubscribe") && ch->pending == 0 &&
             ch->subscribed) {
    /* Unasked: the node no longer serves the channel's slot (a failover
     * or a migration). Its waiters may have missed a message: they are
     * told to join again where the channel is now (and look again). */
    ch->subscribed = 0;
    for (dlock__lwaiter *w = ch->head; w != NULL; w = w->next)
      tell(w, 3);
  } else if (dlock__reply_is(kind, "subscribe") ||
             dlock__reply_is(kind, "unsubscribe") ||
             dlock__reply_is(kind, "ssubscribe") ||
             dlock__reply_is(kind, "sunsubscribe")) {
    confirmed(s, ch);
  }
}

static int frame_read(void *s, const redisReply *r) {
  on_frame(s, r);
  return 0;
}

static void read_frames(dlock__lsub *s) {
  if (dlock__stream_read_each(s->ctx, frame_read, s) != 0)
    disconnect(s);
}

/* Joins past their deadline, lingering channels, an unanswered connection. */
static void check_times(dlock__lsub *s) {
  int64_t now = dlock__now_us();
  if (is_ready(s) && s->outstanding > 0 &&
      now - s->awaiting_since >= s->command_ms * 1000) {
    dlock__fail(DLOCK_EIO, "no reply from Redis's pub/sub within %lld ms",
                (long long)s->command_ms);
    disconnect(s);
  }
  lchan **p = &s->chans;
  while (*p != NULL) {
    lchan *ch = *p;
    for (dlock__lwaiter *w = ch->head; w != NULL; w = w->next) {
      if (!w->joined && now >= w->join_by) {
        w->joined = 1;
        tell(w, 0);
      }
    }
    if (ch->nwaiters == 0 && ch->subscribed &&
        now - ch->idle_since >= LINGER_US)
      send_cmd(s, ch, 0);
    if (ch->nwaiters == 0 && !ch->subscribed &&
        (ch->pending == 0 || !is_ready(s))) {
      *p = ch->next;
      free_chan(ch);
      continue;
    }
    p = &ch->next;
  }
}

void dlock__lsub_service(dlock__lsub *s) {
  connect_if_due(s);
  if (s->ctx != NULL && !is_ready(s)) {
    int rc = dlock__stream_step(s->ctx);
    if (rc < 0)
      disconnect(s);
    else if (rc == 0)
      on_ready(s);
  }
  if (is_ready(s)) {
    flush(s);
    if (is_ready(s))
      read_frames(s);
  }
  check_times(s);
  flush(s);
}

void dlock__lsub_watch(dlock__lsub *s, int *fd, short *events,
                       int64_t *until_us, unsigned *socket) {
  int64_t until = INT64_MAX;
  *socket = s->sockets;
  *fd = -1;
  *events = 0;
  if (s->ctx != NULL) {
    *fd = dlock__stream_fd(s->ctx);
    if (!is_ready(s)) {
      *events = dlock__stream_events(s->ctx);
      until = dlock__stream_deadline(s->ctx);
    } else {
      *events = POLLIN | (sdslen(s->ctx->obuf) > 0 ? POLLOUT : 0);
      if (s->outstanding > 0)
        until = dlock__after_ms(s->awaiting_since, s->command_ms);
    }
  } else if (wanted(s) && s->retry_at_us < until) {
    until = s->retry_at_us;
  }
  for (const lchan *ch = s->chans; ch != NULL; ch = ch->next) {
    int64_t at = ch->nwaiters == 0 && ch->subscribed
                     ? ch->idle_since + LINGER_US
                     : INT64_MAX;
    if (ch->nwaiters == 0 && !ch->subscribed && ch->pending == 0)
      at = 0; /* to be freed */
    for (const dlock__lwaiter *w = ch->head; w != NULL; w = w->next) {
      if (!w->joined && w->join_by < at)
        at = w->join_by;
    }
    if (at < until)
      until = at;
  }
  *until_us = until;
}

/* ---- joining and leaving ------------------------------------------------ */

int dlock__lsub_join(dlock__lsub *s, const char *channel, size_t len,
                     dlock__wake_fn wake, int64_t deadline_us,
                     dlock__lwaiter *w, int active_only, int *others) {
  lchan *ch = find(s, channel, len);
  if (active_only) {
    if (ch == NULL || !is_active(s, ch))
      return 0;
    *others = ch->nwaiters;
  }
  if (ch == NULL) {
    ch = dlock__calloc(1, sizeof(*ch));
    if (ch == NULL || (ch->name = dlock__malloc(len + 1)) == NULL) {
      dlock__free(ch);
      return dlock__fail(DLOCK_ENOMEM, "out of memory joining a channel");
    }
    memcpy(ch->name, channel, len);
    ch->name[len] = '\0';
    ch->len = len;
    ch->next = s->chans;
    s->chans = ch;
  }
  ch->wake = wake;
  w->next = NULL;
  w->ch = ch;
  w->awake = 0;
  w->value = 0;
  w->join_by = deadline_us;
  w->parked = 0;
  w->pin = NULL;
  w->joined = is_active(s, ch);
  DLOCK__FIFO_APPEND(ch->head, ch->tail, w);
  ch->nwaiters++;
  if (w->joined)
    return 1;
  if (!ch->subscribed)
    send_cmd(s, ch, 1);
  connect_if_due(s);
  flush(s);
  return 0;
}

void dlock__lsub_leave(dlock__lsub *s, dlock__lwaiter *w) {
  lchan *ch = w->ch;
  if (ch == NULL)
    return;
  DLOCK__FIFO_REMOVE(dlock__lwaiter, ch->head, ch->tail, w);
  /* Pinned still (the client is closing): the pinner learns it is gone. */
  if (w->pin != NULL)
    *w->pin = NULL;
  w->pin = NULL;
  w->ch = NULL;
  w->next = NULL;
  if (--ch->nwaiters == 0)
    ch->idle_since = dlock__now_us();
  (void)s;
}

void dlock__lsub_pass(dlock__lsub *s, dlock__lwaiter *w) {
  (void)s;
  if (w->ch != NULL)
    wake_first(w->ch, 1, 0, w);
}

/* ---- pinning, for a release made in the loop ---------------------------- */

dlock__lwaiter *dlock__lsub_pin_first(dlock__lsub *s, const char *channel,
                                      size_t len,
                                      dlock__lpin_eligible_fn eligible,
                                      dlock__lpin_note_fn note, void *arg,
                                      dlock__lwaiter **ref) {
  lchan *ch = find(s, channel, len);
  if (ch == NULL)
    return NULL;
  dlock__lwaiter *chosen = NULL;
  for (dlock__lwaiter *w = ch->head; w != NULL; w = w->next)
    if (w->joined && !w->awake && w->pin == NULL && eligible(w, arg)) {
      chosen = w;
      break;
    }
  if (note(&ch->slot, chosen != NULL, arg) != 0 || chosen == NULL)
    return NULL;
  chosen->pin = ref;
  *ref = chosen;
  return chosen;
}

void dlock__lsub_unpin(dlock__lsub *s, dlock__lwaiter *w, int wake,
                       uint64_t value, dlock__slot_fn fn, void *arg) {
  (void)s;
  w->pin = NULL;
  if (fn != NULL && w->ch != NULL)
    fn(&w->ch->slot, arg);
  if (wake)
    wake_one(w, value);
  else
    tell(w, 4);
}

void dlock__lsub_with_slot(dlock__lsub *s, dlock__lwaiter *w, dlock__slot_fn fn,
                           void *arg) {
  (void)s;
  if (w->ch != NULL)
    fn(&w->ch->slot, arg);
}
