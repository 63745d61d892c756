/*
 * The checker: rebuilds every hold from the merged history and looks for
 * what a lock must never allow.
 *
 * A hold is what one worker believed: from the moment its acquisition
 * returned (EV_OK) to the moment it called the final unlock (EV_REL). It
 * ends earlier only when its process was SIGKILLed. Two holds of different
 * owners overlap when each began before the other ended. Since EV_OK is
 * written after the reply and EV_REL before the request, a correct lock
 * can never produce an overlap, however late the records are.
 *
 * What the holder learnt at unlock decides what an overlap means:
 *   both unlocks returned 0      -> silent: the lock failed and nobody knew;
 *   one returned DLOCK_ELOST     -> detected: dlock told the holder that its
 *                                   lease ran out (a paused holder, a lost
 *                                   Redis); only fencing protects data then;
 *   otherwise (an unlock failed,
 *   the holder was killed)       -> unconfirmed: the holder was told nothing
 *                                   certain, and the other one was clean.
 */
#include "chaos_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlock.h"

/* How long after Redis returns (or a holder dies) waiters must have made
 * progress. */
#define PROGRESS_LIMIT_US 5000000
/* Overlaps and other violations printed in detail, per kind. */
#define SHOW_MAX 5

enum hold_class { H_CLEAN, H_LOST, H_UNCONFIRMED, H_KILLED, H_UNFINISHED };

static const char *const class_names[] = {"clean", "lost", "unconfirmed",
                                          "killed", "unfinished"};

typedef struct hold {
  int owner, pid;
  int64_t seq;
  int64_t t_acq, t_ok, t_rel, t_end;
  int64_t token;
  int ok, has_rel, has_reld, rel_rc;
  int re, re_rc, reu, reu_rc;
  int64_t re_token;
  int has_rd, has_wr, wr_ok;
  int fw, fw_res;
  int64_t fw_token, t_fw_inv, t_fw_done;
  int cls;
} hold;

/* ---- a map from (owner, hold number) to the hold ------------------------- */

typedef struct hmap {
  uint64_t *keys; /* 0: empty */
  size_t *vals;
  size_t cap;
} hmap;

static uint64_t hkey(int owner, int64_t seq) {
  return ((uint64_t)(uint32_t)owner << 32 | (uint64_t)(uint32_t)seq) + 1;
}

static size_t hslot(const hmap *m, uint64_t k) {
  uint64_t h = k * 0x9e3779b97f4a7c15ULL;
  size_t i = (size_t)(h >> 17) & (m->cap - 1);
  while (m->keys[i] != 0 && m->keys[i] != k)
    i = (i + 1) & (m->cap - 1);
  return i;
}

/* ---- building the holds -------------------------------------------------- */

typedef struct span {
  int pid;
  int64_t from, to;
} span;

typedef struct model {
  hold *h;
  size_t n, cap;
  hmap map;
  span *kills; /* to = kill time; from unused */
  size_t nkills;
  span *stops;
  size_t nstops;
  int64_t t_last;
} model;

static hold *hold_of(model *m, const chaos_event_t *e) {
  uint64_t k = hkey(e->owner, e->hold);
  size_t i = hslot(&m->map, k);
  if (m->map.keys[i] != 0)
    return &m->h[m->map.vals[i]];
  if (m->n == m->cap) {
    size_t cap = m->cap ? m->cap * 2 : 1024;
    hold *grown = realloc(m->h, cap * sizeof(*grown));
    if (grown == NULL)
      return NULL;
    m->h = grown;
    m->cap = cap;
  }
  hold *h = &m->h[m->n];
  memset(h, 0, sizeof(*h));
  h->owner = e->owner;
  h->pid = e->pid;
  h->seq = e->hold;
  h->t_acq = e->t_us;
  m->map.keys[i] = k;
  m->map.vals[i] = m->n++;
  return h;
}

static int add_span(span **v, size_t *n, int pid, int64_t from, int64_t to) {
  span *grown = realloc(*v, (*n + 1) * sizeof(*grown));
  if (grown == NULL)
    return -1;
  *v = grown;
  grown[*n].pid = pid;
  grown[*n].from = from;
  grown[*n].to = to;
  (*n)++;
  return 0;
}

static int build(model *m, const chaos_event_t *ev, size_t n) {
  size_t worker_events = 0;
  for (size_t i = 0; i < n; i++)
    worker_events += ev[i].ev == EV_ACQ;
  m->map.cap = 1024;
  while (m->map.cap < worker_events * 2 + 2)
    m->map.cap *= 2;
  m->map.keys = calloc(m->map.cap, sizeof(*m->map.keys));
  m->map.vals = calloc(m->map.cap, sizeof(*m->map.vals));
  if (m->map.keys == NULL || m->map.vals == NULL)
    return -1;
  for (size_t i = 0; i < n; i++) {
    const chaos_event_t *e = &ev[i];
    m->t_last = e->t_us;
    if (e->ev == EV_KILL) {
      if (add_span(&m->kills, &m->nkills, e->pid, e->t_us, e->t_us) != 0)
        return -1;
      continue;
    }
    if (e->ev == EV_STOP) {
      if (add_span(&m->stops, &m->nstops, e->pid, e->t_us, INT64_MAX) != 0)
        return -1;
      continue;
    }
    if (e->ev == EV_CONT) {
      for (size_t s = m->nstops; s-- > 0;)
        if (m->stops[s].pid == e->pid && m->stops[s].to == INT64_MAX) {
          m->stops[s].to = e->t_us;
          break;
        }
      continue;
    }
    if (e->ev > EV_RELD)
      continue;
    hold *h = hold_of(m, e);
    if (h == NULL)
      return -1;
    switch (e->ev) {
    case EV_OK:
      h->ok = 1;
      h->t_ok = e->t_us;
      h->token = e->a;
      break;
    case EV_RE:
      h->re = 1;
      h->re_rc = (int)e->a;
      h->re_token = e->b;
      break;
    case EV_RD:
      h->has_rd = e->a >= 0;
      break;
    case EV_WR:
      h->has_wr = 1;
      h->wr_ok = e->b == 1;
      break;
    case EV_FW:
      h->fw = 1;
      h->fw_token = e->a;
      h->fw_res = (int)e->b;
      h->t_fw_inv = e->c;
      h->t_fw_done = e->t_us;
      break;
    case EV_REU:
      h->reu = 1;
      h->reu_rc = (int)e->a;
      break;
    case EV_REL:
      h->has_rel = 1;
      h->t_rel = e->t_us;
      break;
    case EV_RELD:
      h->has_reld = 1;
      h->rel_rc = (int)e->a;
      break;
    default:
      break;
    }
  }
  return 0;
}

/* When process 'pid' was killed after 't', or -1. */
static int64_t killed_after(const model *m, int pid, int64_t t) {
  for (size_t i = 0; i < m->nkills; i++)
    if (m->kills[i].pid == pid && m->kills[i].to >= t)
      return m->kills[i].to;
  return -1;
}

static void classify(model *m, chaos_result_t *r) {
  for (size_t i = 0; i < m->n; i++) {
    hold *h = &m->h[i];
    if (!h->ok)
      continue;
    int64_t kill = killed_after(m, h->pid, h->t_ok);
    int lost = (h->has_reld && h->rel_rc == DLOCK_ELOST) ||
               (h->reu && h->reu_rc == DLOCK_ELOST);
    if (h->has_reld && lost)
      h->cls = H_LOST;
    else if (h->has_reld && h->rel_rc == 0)
      h->cls = H_CLEAN;
    else if (h->has_reld)
      h->cls = H_UNCONFIRMED;
    else if (kill >= 0)
      h->cls = H_KILLED;
    else
      h->cls = H_UNFINISHED;
    h->t_end = h->has_rel ? h->t_rel : kill >= 0 ? kill : m->t_last;
    /* A final unlock that says "not held" after no unlock said "lost" hid
     * a loss from the holder. */
    if (h->has_reld && h->rel_rc == DLOCK_ENOTHELD && !lost)
      r->misreported_losses++;
    r->unfinished_holds += h->cls == H_UNFINISHED;
  }
}

/* ---- overlaps ------------------------------------------------------------ */

static hold *sort_base;

static int by_ok(const void *pa, const void *pb) {
  const hold *a = &sort_base[*(const size_t *)pa];
  const hold *b = &sort_base[*(const size_t *)pb];
  return (a->t_ok > b->t_ok) - (a->t_ok < b->t_ok);
}

static int by_acq(const void *pa, const void *pb) {
  const hold *a = &sort_base[*(const size_t *)pa];
  const hold *b = &sort_base[*(const size_t *)pb];
  return (a->t_acq > b->t_acq) - (a->t_acq < b->t_acq);
}

static void show_hold(const char *label, const hold *h, int64_t t0) {
  fprintf(stderr,
          "    %s: owner %d pid %d hold %" PRId64 " token %" PRId64
          " held %.3f..%.3f s, %s (unlock %s)\n",
          label, h->owner, h->pid, h->seq, h->token,
          (double)(h->t_ok - t0) / 1e6, (double)(h->t_end - t0) / 1e6,
          class_names[h->cls],
          h->has_reld ? dlock_err_name(h->rel_rc) : "never");
}

static void check_overlaps(model *m, const size_t *ok_order, size_t nok,
                           int64_t t0, chaos_result_t *r) {
  size_t *active = malloc((nok + 1) * sizeof(*active));
  size_t nactive = 0;
  int shown = 0;
  if (active == NULL)
    return;
  for (size_t k = 0; k < nok; k++) {
    hold *h = &m->h[ok_order[k]];
    size_t keep = 0;
    for (size_t j = 0; j < nactive; j++)
      if (m->h[active[j]].t_end > h->t_ok)
        active[keep++] = active[j];
    nactive = keep;
    for (size_t j = 0; j < nactive; j++) {
      hold *a = &m->h[active[j]];
      if (a->owner == h->owner)
        continue;
      const char *kind;
      if (a->cls == H_LOST || h->cls == H_LOST) {
        r->detected_overlaps++;
        continue;
      }
      if (a->cls == H_CLEAN && h->cls == H_CLEAN) {
        r->silent_overlaps++;
        kind = "silent";
      } else {
        r->unconfirmed_overlaps++;
        kind = "unconfirmed";
      }
      if (shown++ < SHOW_MAX) {
        fprintf(stderr, "  chaos: %s overlap:\n", kind);
        show_hold("first ", a, t0);
        show_hold("second", h, t0);
      }
    }
    active[nactive++] = ok_order[k];
  }
  free(active);
}

/*
 * The semaphore's bound: a grant may make at most N holds current at once.
 * As for the lock, a hold whose holder was told DLOCK_ELOST does not count
 * against it (its lease ran out; dlock said so). With more than N current,
 * the moment is silent when more than N of them released with 0, else
 * unconfirmed when more than N were not told DLOCK_ELOST, else detected.
 */
static void check_holders(model *m, const size_t *ok_order, size_t nok,
                          int64_t permits, int64_t t0, chaos_result_t *r) {
  size_t *active = malloc((nok + 1) * sizeof(*active));
  size_t nactive = 0;
  int shown = 0;
  if (active == NULL)
    return;
  for (size_t k = 0; k < nok; k++) {
    hold *h = &m->h[ok_order[k]];
    size_t keep = 0;
    for (size_t j = 0; j < nactive; j++)
      if (m->h[active[j]].t_end > h->t_ok)
        active[keep++] = active[j];
    nactive = keep;
    active[nactive++] = ok_order[k];
    int64_t lost = 0, clean = 0;
    for (size_t j = 0; j < nactive; j++) {
      lost += m->h[active[j]].cls == H_LOST;
      clean += m->h[active[j]].cls == H_CLEAN;
    }
    int64_t held = (int64_t)nactive - lost;
    if (held > r->max_holders)
      r->max_holders = held;
    if ((int64_t)nactive > r->max_with_lost)
      r->max_with_lost = (int64_t)nactive;
    if ((int64_t)nactive <= permits)
      continue;
    if (held <= permits) {
      r->detected_overlaps++;
      continue;
    }
    const char *kind;
    if (clean > permits) {
      r->silent_overlaps++;
      kind = "silent";
    } else {
      r->unconfirmed_overlaps++;
      kind = "unconfirmed";
    }
    if (shown++ < SHOW_MAX) {
      fprintf(stderr,
              "  chaos: %s excess: %zu holders of %" PRId64 " permits:\n", kind,
              nactive, permits);
      for (size_t j = 0; j < nactive; j++)
        show_hold("holder", &m->h[active[j]], t0);
    }
  }
  free(active);
}

/* ---- tokens -------------------------------------------------------------- */

/* A hold that asked for the lock after another was granted it must get a
 * larger token. The comparison is only made where the order is certain:
 * granted (EV_OK) before asked (EV_ACQ). */
static void check_tokens(model *m, const size_t *ok_order,
                         const size_t *acq_order, size_t nok,
                         chaos_result_t *r) {
  int64_t max = 0;
  size_t p = 0;
  int shown = 0;
  for (size_t k = 0; k < nok; k++) {
    hold *b = &m->h[acq_order[k]];
    while (p < nok && m->h[ok_order[p]].t_ok < b->t_acq) {
      if (m->h[ok_order[p]].token > max)
        max = m->h[ok_order[p]].token;
      p++;
    }
    if (b->token > 0 && b->token <= max) {
      r->token_regressions++;
      if (shown++ < SHOW_MAX)
        fprintf(stderr,
                "  chaos: token regression: owner %d hold %" PRId64
                " got token %" PRId64 " after token %" PRId64 " was granted\n",
                b->owner, b->seq, b->token, max);
    }
  }
  for (size_t i = 0; i < m->n; i++) {
    hold *h = &m->h[i];
    if (h->ok && h->re && h->re_rc == 0 && h->token > 0 && h->re_token > 0 &&
        h->re_token != h->token) {
      r->reentry_token_changes++;
      if (r->reentry_token_changes <= SHOW_MAX)
        fprintf(stderr,
                "  chaos: reentrant acquisition changed the token: owner %d "
                "hold %" PRId64 " token %" PRId64 " -> %" PRId64 " (%s)\n",
                h->owner, h->seq, h->token, h->re_token, class_names[h->cls]);
    }
  }
}

/* ---- fencing ------------------------------------------------------------- */

static int by_fw_done(const void *pa, const void *pb) {
  const hold *a = &sort_base[*(const size_t *)pa];
  const hold *b = &sort_base[*(const size_t *)pb];
  return (a->t_fw_done > b->t_fw_done) - (a->t_fw_done < b->t_fw_done);
}

static int by_fw_inv(const void *pa, const void *pb) {
  const hold *a = &sort_base[*(const size_t *)pa];
  const hold *b = &sort_base[*(const size_t *)pb];
  return (a->t_fw_inv > b->t_fw_inv) - (a->t_fw_inv < b->t_fw_inv);
}

/*
 * Two views of the same rule, "never accept a token below one already
 * accepted": the resource's own log, in its order; and the workers'
 * records, where a write accepted after another with a larger token had
 * been acknowledged is stale whatever the log says.
 */
static void check_fencing(model *m, const chaos_final_t *fin,
                          chaos_result_t *r) {
  int64_t max = 0;
  int max_owner = -1;
  int64_t max_hold = -1;
  for (size_t i = 0; i < fin->nlog; i++) {
    const chaos_fence_entry_t *e = &fin->log[i];
    if (e->token < max ||
        (e->token == max && (e->owner != max_owner || e->hold != max_hold)))
      r->stale_accepted++;
    if (e->token >= max) {
      max = e->token;
      max_owner = e->owner;
      max_hold = e->hold;
    }
  }
  size_t n = 0;
  for (size_t i = 0; i < m->n; i++)
    n += m->h[i].fw && m->h[i].fw_res == 1;
  size_t *done = malloc((n + 1) * sizeof(*done));
  size_t *inv = malloc((n + 1) * sizeof(*inv));
  if (done == NULL || inv == NULL) {
    free(done);
    free(inv);
    return;
  }
  size_t k = 0;
  for (size_t i = 0; i < m->n; i++)
    if (m->h[i].fw && m->h[i].fw_res == 1)
      done[k] = inv[k] = i, k++;
  sort_base = m->h;
  qsort(done, n, sizeof(*done), by_fw_done);
  qsort(inv, n, sizeof(*inv), by_fw_inv);
  const hold *top = NULL;
  size_t p = 0;
  for (k = 0; k < n; k++) {
    hold *w = &m->h[inv[k]];
    while (p < n && m->h[done[p]].t_fw_done < w->t_fw_inv) {
      if (top == NULL || m->h[done[p]].fw_token > top->fw_token)
        top = &m->h[done[p]];
      p++;
    }
    if (top != NULL && top != w &&
        (w->fw_token < top->fw_token ||
         (w->fw_token == top->fw_token &&
          (w->owner != top->owner || w->seq != top->seq)))) {
      r->stale_accepted++;
      fprintf(stderr,
              "  chaos: stale fenced write accepted: owner %d token %" PRId64
              " after token %" PRId64 "\n",
              w->owner, w->fw_token, top->fw_token);
    }
  }
  free(done);
  free(inv);
}

/* ---- stopped holders ----------------------------------------------------- */

static void check_stopped(model *m, chaos_result_t *r) {
  for (size_t s = 0; s < m->nstops; s++) {
    const span *st = &m->stops[s];
    if (st->to == INT64_MAX)
      continue;
    for (size_t i = 0; i < m->n; i++) {
      hold *h = &m->h[i];
      if (!h->ok || h->pid != st->pid || h->t_ok >= st->from ||
          (h->has_rel && h->t_rel < st->to) || h->cls == H_KILLED ||
          h->cls == H_UNFINISHED)
        continue;
      r->stopped_holds++;
      if (h->cls == H_LOST)
        r->stopped_holds_lost++;
      else if (h->cls == H_CLEAN) {
        r->unnoticed_losses++;
        fprintf(stderr,
                "  chaos: owner %d held the lock through a stop past its "
                "lease, and its unlock returned 0\n",
                h->owner);
      }
      if (h->fw && h->t_fw_inv > st->to && h->fw_res == 0)
        r->stopped_writes_refused++;
    }
  }
}

/* ---- recovery ------------------------------------------------------------ */

static void timing_add(chaos_timing_t *t, int64_t ms) {
  t->n++;
  t->sum_ms += ms;
  if (ms > t->max_ms)
    t->max_ms = ms;
}

/* The first grant after 't' (by a process other than 'not_pid'), or -1. */
static int64_t first_ok_after(const chaos_event_t *ev, size_t n, size_t from,
                              int64_t t, int not_pid) {
  for (size_t i = from; i < n; i++)
    if (ev[i].ev == EV_OK && ev[i].t_us > t && ev[i].pid != not_pid)
      return ev[i].t_us;
  return -1;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

/*
 * For each fault injected, the time to the first grant of an acquisition
 * invoked after it: a grant asked for earlier may have been served before
 * the fault took effect, one asked for later had to get through it. Kept
 * by kind as count, min, median and max; faults never followed by such a
 * grant are counted apart.
 */
static void check_fault_recovery(const chaos_event_t *ev, size_t n, model *m,
                                 chaos_result_t *r) {
  int64_t *ms = malloc((n + 1) * sizeof(*ms));
  if (ms == NULL)
    return;
  for (int f = 0; f < CHAOS_FAULT_COUNT; f++) {
    size_t k = 0;
    chaos_spread_t *s = &r->recovery[f];
    for (size_t i = 0; i < n; i++) {
      if (ev[i].ev != EV_FAULT || ev[i].owner != f)
        continue;
      int64_t first = -1;
      for (size_t j = 0; j < m->n; j++) {
        const hold *h = &m->h[j];
        if (h->ok && h->t_acq > ev[i].t_us && (first < 0 || h->t_ok < first))
          first = h->t_ok;
      }
      if (first < 0)
        s->never++;
      else
        ms[k++] = (first - ev[i].t_us) / 1000;
    }
    if (k == 0)
      continue;
    qsort(ms, k, sizeof(*ms), cmp_i64);
    s->n = (int64_t)k;
    s->min_ms = ms[0];
    s->median_ms = ms[k / 2];
    s->max_ms = ms[k - 1];
  }
  free(ms);
}

static void check_recovery(const chaos_config_t *c, const chaos_event_t *ev,
                           size_t n, model *m, chaos_result_t *r) {
  check_fault_recovery(ev, n, m, r);
  int64_t end = n > 0 ? ev[n - 1].t_us : 0;
  int64_t down = -1;
  for (size_t i = 0; i < n; i++) {
    const chaos_event_t *e = &ev[i];
    if (e->ev == EV_FREE) {
      if (e->a >= 0)
        timing_add(&r->free_after_death, e->a);
      if (e->a < 0 || e->a > r->lease_limit_ms) {
        r->slow_recoveries++;
        fprintf(stderr,
                "  chaos: lock not free %" PRId64 " ms after its holder's "
                "death (limit %" PRId64 " ms)\n",
                e->a, r->lease_limit_ms);
      }
    } else if (e->ev == EV_KILL || e->ev == EV_HEAL) {
      int64_t t =
          first_ok_after(ev, n, i, e->t_us, e->ev == EV_KILL ? e->pid : -1);
      chaos_timing_t *tm =
          e->ev == EV_KILL
              ? &r->progress_after_death
              : &r->progress_after_heal[e->owner % CHAOS_FAULT_COUNT];
      if (t >= 0 && t - e->t_us <= PROGRESS_LIMIT_US) {
        timing_add(tm, (t - e->t_us) / 1000);
      } else if (end - e->t_us > PROGRESS_LIMIT_US) {
        r->slow_recoveries++;
        fprintf(stderr, "  chaos: no holder within %d s after %s (%s)\n",
                PROGRESS_LIMIT_US / 1000000,
                e->ev == EV_KILL ? "a holder's death" : "a fault healed",
                chaos_fault_name((chaos_fault_t)e->owner));
      }
    } else if (e->ev == EV_DOWN) {
      down = e->t_us;
    } else if (e->ev == EV_UP && down >= 0) {
      for (size_t k = 0; k < m->n; k++)
        if (m->h[k].ok && m->h[k].t_acq > down && m->h[k].t_ok < e->t_us)
          r->quorumless_grants++;
      down = -1;
    }
  }
  (void)c;
}

/* ---- counts and lost updates -------------------------------------------- */

static void count_ops(const chaos_event_t *ev, size_t n, model *m,
                      const chaos_final_t *fin, chaos_result_t *r) {
  for (size_t i = 0; i < n; i++) {
    const chaos_event_t *e = &ev[i];
    switch (e->ev) {
    case EV_ACQ:
      r->acquires++;
      break;
    case EV_OK:
      r->acquired++;
      break;
    case EV_FAIL:
      if (e->a == DLOCK_ETIMEDOUT)
        r->timeouts++;
      else if (e->a == DLOCK_ENOQUORUM)
        r->noquorum++;
      else
        r->acquire_errors++;
      break;
    case EV_RE:
      r->reentries++;
      break;
    case EV_RELD:
      r->releases++;
      if (e->a == 0)
        r->released_ok++;
      else if (e->a == DLOCK_ELOST)
        r->released_lost++;
      else if (e->a == DLOCK_ENOTHELD)
        r->released_notheld++;
      else
        r->released_error++;
      break;
    case EV_WR:
      if (e->b == 1)
        r->increments_ok++;
      else
        r->increments_unknown++;
      break;
    case EV_FW:
      if (e->b == 1)
        r->fenced_accepted++;
      else if (e->b == 0)
        r->fenced_refused++;
      else
        r->fenced_errors++;
      break;
    default:
      break;
    }
  }
  /* A killed holder may have written without recording it. */
  int64_t maybe = r->increments_unknown;
  for (size_t i = 0; i < m->n; i++) {
    hold *h = &m->h[i];
    if (h->ok && h->has_rd && !h->has_wr && h->cls == H_KILLED)
      maybe++;
    if (h->fw && h->fw_res == 0) {
      if (h->cls == H_CLEAN)
        r->refused_clean++;
      else
        r->stale_refused++;
    }
  }
  r->final_counter = fin->counter;
  r->fence_log_length = (int64_t)fin->nlog;
  if (r->increments_ok > fin->counter)
    r->lost_updates = r->increments_ok - fin->counter;
  if (fin->counter > r->increments_ok + maybe)
    r->phantom_updates = fin->counter - r->increments_ok - maybe;
  if (r->lost_updates > 0 && r->silent_overlaps == 0 &&
      r->unconfirmed_overlaps == 0 && r->detected_overlaps == 0)
    r->unexplained_lost_updates = r->lost_updates;
}

void chaos__check(const chaos_config_t *c, const chaos_event_t *ev, size_t n,
                  const chaos_final_t *fin, chaos_result_t *r) {
  model m;
  memset(&m, 0, sizeof(m));
  if (build(&m, ev, n) != 0) {
    fprintf(stderr, "chaos: out of memory checking the history\n");
    r->setup_failed = 1;
    goto out;
  }
  classify(&m, r);
  size_t nok = 0;
  for (size_t i = 0; i < m.n; i++)
    nok += m.h[i].ok;
  size_t *ok_order = malloc((nok + 1) * sizeof(*ok_order));
  size_t *acq_order = malloc((nok + 1) * sizeof(*acq_order));
  if (ok_order == NULL || acq_order == NULL) {
    free(ok_order);
    free(acq_order);
    r->setup_failed = 1;
    goto out;
  }
  size_t k = 0;
  for (size_t i = 0; i < m.n; i++)
    if (m.h[i].ok)
      ok_order[k] = acq_order[k] = i, k++;
  sort_base = m.h;
  qsort(ok_order, nok, sizeof(*ok_order), by_ok);
  qsort(acq_order, nok, sizeof(*acq_order), by_acq);
  int64_t t0 = n > 0 ? ev[0].t_us : 0;
  if (c->permits > 0)
    check_holders(&m, ok_order, nok, c->permits, t0, r);
  else
    check_overlaps(&m, ok_order, nok, t0, r);
  check_tokens(&m, ok_order, acq_order, nok, r);
  free(ok_order);
  free(acq_order);
  check_fencing(&m, fin, r);
  check_stopped(&m, r);
  check_recovery(c, ev, n, &m, r);
  count_ops(ev, n, &m, fin, r);
out:
  free(m.h);
  free(m.map.keys);
  free(m.map.vals);
  free(m.kills);
  free(m.stops);
}
