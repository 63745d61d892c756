/*
 * The public face of the statistics (stats.h keeps them): the copy into
 * the caller's struct, the quantiles of a histogram, the names of events,
 * and the rendering in the Prometheus text exposition format.
 */
#include "client.h"
#include "stats.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

void dlock_client_stats_size(dlock_client_t *c, dlock_stats_t *s, size_t size) {
  if (s == NULL || size < sizeof(size_t))
    return;
  /* Read in this library's layout, then only the caller's bytes given: an
   * older program's struct is shorter. */
  dlock_stats_t all;
  dlock__stats_read(c != NULL ? c->stats : NULL, &all);
  all.struct_size = size < sizeof(all) ? size : sizeof(all);
  memset(s, 0, size);
  memcpy(s, &all, all.struct_size);
}

uint64_t dlock_histogram_quantile(const dlock_histogram_t *h, double q) {
  if (h == NULL || h->count == 0)
    return 0;
  if (q < 0)
    q = 0;
  if (q > 1)
    q = 1;
  /* The rank of the sample sought, 1-based, rounded up. */
  double want = q * (double)h->count;
  uint64_t rank = (uint64_t)want;
  if ((double)rank < want || rank == 0)
    rank++;
  uint64_t seen = 0;
  for (int i = 0; i < DLOCK_STATS_BUCKETS; i++) {
    seen += h->buckets[i];
    if (seen >= rank) {
      uint64_t bound =
          i < DLOCK_STATS_BUCKETS - 1 ? (uint64_t)1 << i : h->max_us;
      return bound < h->max_us ? bound : h->max_us;
    }
  }
  return h->max_us;
}

const char *dlock_event_kind_name(int kind) {
  static const char *const names[] = {
      [DLOCK_EVENT_ACQUIRED] = "acquired",
      [DLOCK_EVENT_RELEASED] = "released",
      [DLOCK_EVENT_WAITED] = "waited",
      [DLOCK_EVENT_TIMED_OUT] = "timed_out",
      [DLOCK_EVENT_FAILED] = "failed",
      [DLOCK_EVENT_LOST] = "lost",
      [DLOCK_EVENT_RENEWAL_ROUND] = "renewal_round",
      [DLOCK_EVENT_RECONNECT] = "reconnect",
      [DLOCK_EVENT_FAILOVER] = "failover",
      [DLOCK_EVENT_SYNC_SHORTFALL] = "sync_shortfall",
      [DLOCK_EVENT_PUBSUB_RECONNECT] = "pubsub_reconnect",
  };
  if (kind <= 0 || (size_t)kind >= sizeof(names) / sizeof(names[0]))
    return "?";
  return names[kind];
}

const char *dlock_stats_kind_name(int kind) {
  static const char *const names[] = {
      [DLOCK_STATS_LOCK] = "lock",
      [DLOCK_STATS_SEMAPHORE] = "semaphore",
      [DLOCK_STATS_PSEM] = "psem",
      [DLOCK_STATS_LATCH] = "latch",
      [DLOCK_STATS_MULTILOCK] = "multilock",
      [DLOCK_STATS_REDLOCK] = "redlock",
  };
  if (kind < 0 || kind >= DLOCK_STATS_KINDS)
    return "?";
  return names[kind];
}

/* ---- the Prometheus text format ------------------------------------------ */

/* Text written into the caller's buffer, 'len' counting all of it even
 * past 'cap', as snprintf does. */
typedef struct out {
  char *buf;
  size_t cap, len;
  const char *labels; /* extra labels, or "" */
} out;

static void put(out *o, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *at = o->len < o->cap ? o->buf + o->len : NULL;
  size_t room = o->len < o->cap ? o->cap - o->len : 0;
  int n = vsnprintf(at, room, fmt, ap);
  va_end(ap);
  if (n > 0)
    o->len += (size_t)n;
}

static void head(out *o, const char *name, const char *type, const char *help) {
  put(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* The label set of a sample: 'own' (may be "") and the caller's. */
static void labels(out *o, const char *own) {
  int extra = o->labels[0] != '\0';
  if (own[0] == '\0' && !extra)
    return;
  put(o, "{%s%s%s}", own, own[0] != '\0' && extra ? "," : "", o->labels);
}

static void sample(out *o, const char *name, const char *own, uint64_t v) {
  put(o, "%s", name);
  labels(o, own);
  put(o, " %llu\n", (unsigned long long)v);
}

static void counter(out *o, const char *name, const char *help, uint64_t v) {
  head(o, name, "counter", help);
  sample(o, name, "", v);
}

/* The samples of histogram 'h' of family 'name', with label 'kind' (a
 * label pair). */
static void histogram(out *o, const char *name, const char *kind,
                      const dlock_histogram_t *h) {
  uint64_t cum = 0;
  char le[96];
  for (int i = 0; i < DLOCK_STATS_BUCKETS - 1; i++) {
    cum += h->buckets[i];
    snprintf(le, sizeof(le), "%s,le=\"%.10g\"", kind,
             (double)((uint64_t)1 << i) / 1e6);
    put(o, "%s_bucket", name);
    labels(o, le);
    put(o, " %llu\n", (unsigned long long)cum);
  }
  snprintf(le, sizeof(le), "%s,le=\"+Inf\"", kind);
  put(o, "%s_bucket", name);
  labels(o, le);
  put(o, " %llu\n", (unsigned long long)h->count);
  put(o, "%s_sum", name);
  labels(o, kind);
  put(o, " %.6f\n", (double)h->sum_us / 1e6);
  put(o, "%s_count", name);
  labels(o, kind);
  put(o, " %llu\n", (unsigned long long)h->count);
}

/* A lock name as a label value: '\', '"' and a newline escaped as the
 * format says, and bytes outside printable ASCII (which a lock name may
 * hold, and the format's UTF-8 may not) as %HH. */
static void name_label(char *dst, size_t cap, const char *name, size_t len) {
  size_t k = 0;
  k += (size_t)snprintf(dst, cap, "lock=\"");
  for (size_t i = 0; i < len && k + 8 < cap; i++) {
    unsigned char ch = (unsigned char)name[i];
    if (ch == '\\' || ch == '"')
      k += (size_t)snprintf(dst + k, cap - k, "\\%c", ch);
    else if (ch == '\n')
      k += (size_t)snprintf(dst + k, cap - k, "\\n");
    else if (ch < 0x20 || ch >= 0x7f)
      k += (size_t)snprintf(dst + k, cap - k, "%%%02X", ch);
    else
      dst[k++] = (char)ch;
  }
  snprintf(dst + k, cap - k, "\"");
}

/* The plain counters, each one family of one sample. */
static const struct {
  const char *name, *help;
  size_t offset;
} counters[] = {
#define C(name, field, help)                                                   \
  { name, help, offsetof(dlock_stats_t, field) }
    C("dlock_reentrant_acquisitions_total", reentrant,
      "Acquisitions by an owner that held the lock already."),
    C("dlock_unlocks_total", unlocks,
      "Unlock calls of single locks that succeeded."),
    C("dlock_unlock_retries_total", unlock_retries,
      "Unlocks sent again after a lost reply."),
    C("dlock_handovers_total", handovers,
      "Releases that handed the lock to a waiter of the client."),
    C("dlock_locks_lost_total", lost, "Holds found lost (expired or deleted)."),
    C("dlock_watchdog_rounds_total", watchdog_rounds,
      "Watchdog renewal rounds."),
    C("dlock_renewals_total", renewed, "Holds renewed by the watchdog."),
    C("dlock_replica_sync_waits_total", sync_waits,
      "Writes followed by a replica-sync WAIT."),
    C("dlock_replica_sync_shortfalls_total", sync_shortfalls,
      "Writes acknowledged by too few replicas."),
    C("dlock_reconnects_total", reconnects,
      "Command connections made again after a failure."),
    C("dlock_pubsub_reconnects_total", pubsub_reconnects,
      "Pub/sub connections made again after a failure or a failover."),
    C("dlock_failovers_total", failovers, "Changes of master followed."),
    C("dlock_redirections_total", redirections,
      "Cluster MOVED and ASK replies followed."),
    C("dlock_script_reloads_total", script_reloads,
      "Scripts loaded again after NOSCRIPT."),
    C("dlock_commands_total", commands, "Commands queued to Redis."),
    C("dlock_pipelines_total", pipelines,
      "Writes to Redis, each carrying one or more commands."),
    C("dlock_pubsub_messages_total", messages, "Pub/sub messages read."),
    C("dlock_wakeups_total", wakeups, "Waiters woken by a message."),
#undef C
};

size_t dlock_stats_format(const dlock_stats_t *s, const char *extra, char *buf,
                          size_t cap) {
  out o = {buf, buf != NULL ? cap : 0, 0, extra != NULL ? extra : ""};
  if (o.cap > 0)
    buf[0] = '\0';
  if (s == NULL)
    return 0;
  /* Every kind as a dlock_kind_stats_t, the single locks' gathered. */
  dlock_kind_stats_t k[DLOCK_STATS_KINDS];
  memset(k, 0, sizeof(k));
  k[0] = (dlock_kind_stats_t){s->acquired, s->refused, s->timed_out,
                              s->failed,   s->waits,   s->released,
                              s->acquire,  s->wait,    s->hold};
  /* A struct from an older program has no room for the other kinds. */
  size_t have = s->struct_size != 0 ? s->struct_size : sizeof(*s);
  const dlock_kind_stats_t *more[] = {&s->semaphore, &s->psem, &s->latch,
                                      &s->multilock, &s->redlock};
  for (int i = 1; i < DLOCK_STATS_KINDS; i++)
    if ((size_t)((const char *)(more[i - 1] + 1) - (const char *)s) <= have)
      k[i] = *more[i - 1];
  char kl[DLOCK_STATS_KINDS][32];
  for (int i = 0; i < DLOCK_STATS_KINDS; i++)
    snprintf(kl[i], sizeof(kl[i]), "kind=\"%s\"", dlock_stats_kind_name(i));
  head(&o, "dlock_acquisitions_total", "counter",
       "Acquisitions by what was acquired and how they ended.");
  static const char *const results[] = {"acquired", "refused", "timed_out",
                                        "failed"};
  for (int i = 0; i < DLOCK_STATS_KINDS; i++) {
    const uint64_t v[] = {k[i].acquired, k[i].refused, k[i].timed_out,
                          k[i].failed};
    for (int r = 0; r < 4; r++) {
      char l[224];
      snprintf(l, sizeof(l), "%s,result=\"%s\"", kl[i], results[r]);
      sample(&o, "dlock_acquisitions_total", l, v[r]);
    }
  }
  head(&o, "dlock_waits_total", "counter",
       "Acquisitions that waited for another holder.");
  for (int i = 0; i < DLOCK_STATS_KINDS; i++)
    sample(&o, "dlock_waits_total", kl[i], k[i].waits);
  head(&o, "dlock_releases_total", "counter",
       "Releases: of a single lock an owner's last hold; of a semaphore, "
       "a permit, a MultiLock or a RedLock each release call.");
  for (int i = 0; i < DLOCK_STATS_KINDS; i++)
    if (i != DLOCK_STATS_LATCH)
      sample(&o, "dlock_releases_total", kl[i], k[i].released);
  head(&o, "dlock_acquisition_errors_total", "counter",
       "Acquisitions of single locks that failed, by error.");
  for (int i = 0; i < DLOCK_STATS_CODES; i++) {
    if (s->failed_by_code[i] == 0)
      continue;
    char l[64];
    snprintf(l, sizeof(l), "error=\"%s\"", dlock_err_name(-i));
    sample(&o, "dlock_acquisition_errors_total", l, s->failed_by_code[i]);
  }
  for (size_t i = 0; i < sizeof(counters) / sizeof(counters[0]); i++) {
    uint64_t v = 0;
    if (counters[i].offset + sizeof(v) <= have)
      memcpy(&v, (const char *)s + counters[i].offset, sizeof(v));
    counter(&o, counters[i].name, counters[i].help, v);
  }
  head(&o, "dlock_acquire_seconds", "histogram",
       "How long acquisition calls took, whatever their end.");
  for (int i = 0; i < DLOCK_STATS_KINDS; i++)
    histogram(&o, "dlock_acquire_seconds", kl[i], &k[i].acquire);
  head(&o, "dlock_wait_seconds", "histogram",
       "How long acquisitions that waited took.");
  for (int i = 0; i < DLOCK_STATS_KINDS; i++)
    histogram(&o, "dlock_wait_seconds", kl[i], &k[i].wait);
  /* A plain semaphore's permits and a latch are not held by anyone. */
  head(&o, "dlock_hold_seconds", "histogram",
       "How long locks and permits were held, acquisition to release.");
  for (int i = 0; i < DLOCK_STATS_KINDS; i++)
    if (i != DLOCK_STATS_SEMAPHORE && i != DLOCK_STATS_LATCH)
      histogram(&o, "dlock_hold_seconds", kl[i], &k[i].hold);
  head(&o, "dlock_lock_waits_total", "counter",
       "Waits on the most contended lock names (an upper bound).");
  char l[DLOCK_STATS_NAME_MAX * 3 + 16];
  size_t ntop = s->ntop < DLOCK_STATS_TOP ? s->ntop : DLOCK_STATS_TOP;
  for (size_t i = 0; i < ntop; i++) {
    name_label(l, sizeof(l), s->top[i].name, s->top[i].name_len);
    sample(&o, "dlock_lock_waits_total", l, s->top[i].waits);
  }
  head(&o, "dlock_lock_timeouts_total", "counter",
       "Waits on those names that ended without the lock.");
  for (size_t i = 0; i < ntop; i++) {
    name_label(l, sizeof(l), s->top[i].name, s->top[i].name_len);
    sample(&o, "dlock_lock_timeouts_total", l, s->top[i].timeouts);
  }
  head(&o, "dlock_lock_wait_seconds_total", "counter",
       "Time spent waiting on those names.");
  for (size_t i = 0; i < ntop; i++) {
    name_label(l, sizeof(l), s->top[i].name, s->top[i].name_len);
    put(&o, "dlock_lock_wait_seconds_total");
    labels(&o, l);
    put(&o, " %.6f\n", (double)s->top[i].wait_us / 1e6);
  }
  return o.len;
}
