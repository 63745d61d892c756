/*
 * Scenarios, the verdict and the printed summary of a chaos run.
 */
#include "chaos_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#ifdef DLOCK_CHAOS_HAVE_VALGRIND
#include <valgrind/valgrind.h>
#endif

const char *const chaos_scenarios[] = {"none",
                                       "kill",
                                       "stop",
                                       "pause",
                                       "restart-aof",
                                       "restart-empty",
                                       "clients",
                                       "redlock-minority",
                                       "redlock-majority",
                                       "mixed",
                                       "redlock-mixed",
                                       "sentinel-failover",
                                       "cluster-failover",
                                       "cluster-kill",
                                       "sem-none",
                                       "sem-kill",
                                       "sem-stop",
                                       "sem-pause",
                                       "sem-restart-aof",
                                       "sem-restart-empty",
                                       "sem-clients",
                                       "sem-mixed",
                                       "tls-kill",
                                       "tls-pause",
                                       "tls-restart-aof",
                                       "tls-mixed",
                                       NULL};

/* The faults where dlock promises safety, on a single Redis; the stopped
 * holder is among them because dlock promises to report its loss, and the
 * fencing token to make its late write harmless. */
#define SINGLE_MIX                                                             \
  (CHAOS_BIT(CHAOS_KILL_HOLDER) | CHAOS_BIT(CHAOS_STOP_HOLDER) |               \
   CHAOS_BIT(CHAOS_PAUSE_SHORT) | CHAOS_BIT(CHAOS_PAUSE_LONG) |                \
   CHAOS_BIT(CHAOS_PAUSE_PAST_LEASE) | CHAOS_BIT(CHAOS_RESTART_AOF) |          \
   CHAOS_BIT(CHAOS_CLIENT_KILL) | CHAOS_BIT(CHAOS_SCRIPT_FLUSH))

int chaos_config_init(chaos_config_t *c, const char *scenario) {
  /* "sem-X": scenario X's faults on an expirable-permit semaphore. */
  if (strncmp(scenario, "sem-", 4) == 0) {
    if (chaos_config_init(c, scenario + 4) != 0 || c->redlock)
      return -1;
    c->name = scenario;
    c->permits = CHAOS_SEM_PERMITS;
    return 0;
  }
  /* "tls-X": scenario X's faults with the clients on rediss://. */
  if (strncmp(scenario, "tls-", 4) == 0) {
    if (chaos_config_init(c, scenario + 4) != 0 || c->redlock || c->sentinel ||
        c->cluster)
      return -1;
    c->name = scenario;
    c->tls = 1;
    return 0;
  }
  memset(c, 0, sizeof(*c));
  c->name = scenario;
  c->duration_ms = 5000;
  c->procs = 3;
  c->threads = 2;
  c->lease = CHAOS_LEASE_BOTH;
  c->fixed_lease_ms = 500;
  c->watchdog_timeout_ms = 600;
  c->command_timeout_ms = 300;
  c->hold_ms = 10;
  c->wait_ms = 1000;
  c->gap_ms = 600;
  if (strcmp(scenario, "none") == 0) {
    c->faults = 0;
  } else if (strcmp(scenario, "kill") == 0) {
    c->faults = CHAOS_BIT(CHAOS_KILL_HOLDER);
  } else if (strcmp(scenario, "stop") == 0) {
    c->faults = CHAOS_BIT(CHAOS_STOP_HOLDER);
    /* Longer critical sections: the stop then mostly lands between the
     * read and the write, the case fencing exists for. */
    c->hold_ms = 30;
  } else if (strcmp(scenario, "pause") == 0) {
    c->faults = CHAOS_BIT(CHAOS_PAUSE_SHORT) | CHAOS_BIT(CHAOS_PAUSE_LONG) |
                CHAOS_BIT(CHAOS_PAUSE_PAST_LEASE);
  } else if (strcmp(scenario, "restart-aof") == 0) {
    c->faults = CHAOS_BIT(CHAOS_RESTART_AOF);
  } else if (strcmp(scenario, "restart-empty") == 0) {
    c->faults = CHAOS_BIT(CHAOS_RESTART_EMPTY);
  } else if (strcmp(scenario, "clients") == 0) {
    c->faults = CHAOS_BIT(CHAOS_CLIENT_KILL) | CHAOS_BIT(CHAOS_SCRIPT_FLUSH);
    c->gap_ms = 300;
  } else if (strcmp(scenario, "redlock-minority") == 0) {
    c->redlock = 1;
    c->faults = CHAOS_BIT(CHAOS_RED_KILL_MINORITY) |
                CHAOS_BIT(CHAOS_RED_PAUSE_MINORITY);
  } else if (strcmp(scenario, "redlock-majority") == 0) {
    c->redlock = 1;
    c->faults = CHAOS_BIT(CHAOS_RED_KILL_MAJORITY);
  } else if (strcmp(scenario, "mixed") == 0) {
    c->faults = SINGLE_MIX;
  } else if (strcmp(scenario, "redlock-mixed") == 0) {
    c->redlock = 1;
    c->faults = CHAOS_BIT(CHAOS_RED_KILL_MINORITY) |
                CHAOS_BIT(CHAOS_RED_PAUSE_MINORITY) |
                CHAOS_BIT(CHAOS_RED_KILL_MAJORITY) |
                CHAOS_BIT(CHAOS_STOP_HOLDER) | CHAOS_BIT(CHAOS_KILL_HOLDER);
  } else if (strcmp(scenario, "sentinel-failover") == 0) {
    c->sentinel = 1;
    c->faults =
        CHAOS_BIT(CHAOS_SENTINEL_FAILOVER) | CHAOS_BIT(CHAOS_MASTER_KILL);
    /* Leases that outlast the outage of a failover (the Sentinels take
     * about 2 s to act on a dead master), so that holds live through it
     * and replica sync, not expiry, is what keeps them single. */
    c->watchdog_timeout_ms = 5000;
    c->fixed_lease_ms = 5000;
    c->wait_ms = 3000;
    c->gap_ms = 1000;
    c->duration_ms = 20000;
  } else if (strcmp(scenario, "cluster-failover") == 0) {
    c->cluster = 1;
    c->faults = CHAOS_BIT(CHAOS_CLUSTER_FAILOVER);
    /* As for the Sentinels: leases that outlast the failover's outage, so
     * that replica sync, not expiry, is what keeps holds single. */
    c->watchdog_timeout_ms = 5000;
    c->fixed_lease_ms = 5000;
    c->wait_ms = 3000;
    /* Failovers of one shard closer than a few node timeouts (2 s here)
     * trip Redis itself: a master votes for a replica of the same master
     * at most once per two node timeouts, and a replica elected twice
     * within four may count the votes of its previous election and win
     * alone, then turn back. Either way the master stays paused for the
     * manual failover's 5 s timeout. Gaps of 4.5 s or more keep every
     * failover clean, so that what the run measures is dlock's doing. */
    c->gap_ms = 4500;
    c->duration_ms = 20000;
  } else if (strcmp(scenario, "cluster-kill") == 0) {
    c->cluster = 1;
    c->faults = CHAOS_BIT(CHAOS_CLUSTER_KILL);
    /* A dead master is replaced after the node timeout (2 s) and a vote:
     * leases of 8 s outlast that, even on a loaded machine. */
    c->watchdog_timeout_ms = 8000;
    c->fixed_lease_ms = 8000;
    c->wait_ms = 3000;
    c->gap_ms = 1000;
    c->duration_ms = 20000;
  } else {
    return -1;
  }
  return 0;
}

#define BROKEN(cond, ...)                                                      \
  do {                                                                         \
    if (cond) {                                                                \
      if (why != NULL && why_len > 0)                                          \
        snprintf(why, why_len, __VA_ARGS__);                                   \
      return 0;                                                                \
    }                                                                          \
  } while (0)

int chaos_slow_runtime(void) {
#if defined(__SANITIZE_THREAD__)
  return 1;
#elif defined(DLOCK_CHAOS_HAVE_VALGRIND)
  return RUNNING_ON_VALGRIND ? 1 : 0;
#else
  return 0;
#endif
}

int chaos_safe(const chaos_config_t *c, const chaos_result_t *r, char *why,
               size_t why_len) {
  if (why != NULL && why_len > 0)
    why[0] = '\0';
  BROKEN(r->setup_failed, "the run could not be set up");
  BROKEN(r->silent_overlaps, "%" PRId64 " silent overlaps", r->silent_overlaps);
  BROKEN(r->unconfirmed_overlaps, "%" PRId64 " unconfirmed overlaps",
         r->unconfirmed_overlaps);
  BROKEN(r->stale_accepted, "%" PRId64 " stale fenced writes accepted",
         r->stale_accepted);
  BROKEN(r->unnoticed_losses, "%" PRId64 " stopped holders not told ELOST",
         r->unnoticed_losses);
  BROKEN(r->misreported_losses, "%" PRId64 " losses reported as ENOTHELD",
         r->misreported_losses);
  BROKEN(r->reentry_token_changes, "%" PRId64 " reentrant token changes",
         r->reentry_token_changes);
  /* A server restarted empty forgets the token counter with the locks:
   * tokens start again from 1. Nothing else may make them go back. */
  BROKEN(r->token_regressions && !(c->faults & CHAOS_BIT(CHAOS_RESTART_EMPTY)),
         "%" PRId64 " token regressions", r->token_regressions);
  BROKEN(r->quorumless_grants, "%" PRId64 " RedLock grants without quorum",
         r->quorumless_grants);
  BROKEN(r->unexplained_lost_updates,
         "%" PRId64 " lost updates without any overlap",
         r->unexplained_lost_updates);
  BROKEN(r->phantom_updates, "%" PRId64 " phantom updates", r->phantom_updates);
  BROKEN(r->unfinished_holds, "%" PRId64 " unfinished holds",
         r->unfinished_holds);
  BROKEN(r->worker_crashes, "%" PRId64 " worker crashes", r->worker_crashes);
  BROKEN(c->permits > 0 && r->permits_drift != 0,
         "the semaphore ended with %" PRId64 " permits instead of %d",
         c->permits + r->permits_drift, c->permits);
  return 1;
}

int chaos_verdict(const chaos_config_t *c, const chaos_result_t *r, char *why,
                  size_t why_len) {
  if (!chaos_safe(c, r, why, why_len))
    return 0;
  BROKEN(r->slow_recoveries, "%" PRId64 " slow recoveries", r->slow_recoveries);
  BROKEN(r->held_at_end, "the lock was still held after the run");
  BROKEN(r->acquired == 0, "no acquisition succeeded");
  BROKEN((c->sentinel || c->cluster) && r->failovers == 0,
         "no failover took place");
  return 1;
}

static void print_timing(FILE *out, const char *label,
                         const chaos_timing_t *t) {
  if (t->n == 0)
    return;
  fprintf(out,
          "             %s: %" PRId64 " times, max %" PRId64
          " ms, mean %" PRId64 " ms\n",
          label, t->n, t->max_ms, t->sum_ms / t->n);
}

void chaos_print_summary(FILE *out, const chaos_config_t *c,
                         const chaos_result_t *r) {
  const char *lease = c->lease == CHAOS_LEASE_WATCHDOG ? "watchdog"
                      : c->lease == CHAOS_LEASE_FIXED  ? "fixed"
                                                       : "watchdog and fixed";
  fprintf(out,
          "== chaos %s: %.1f s, %d processes x %d threads, %s, leases %s "
          "(watchdog %" PRId64 " ms, fixed %" PRId64 " ms), command timeout "
          "%" PRId64 " ms\n",
          c->name, r->seconds, c->procs, c->threads,
          c->redlock       ? "RedLock over 5 servers"
          : c->sentinel    ? "a master, 2 replicas and 3 Sentinels, replica "
                             "sync on"
          : c->cluster     ? "a cluster of 3 masters with a replica each, "
                             "replica sync on"
          : c->permits > 0 ? "one Redis, expirable-permit semaphore"
                           : "one Redis",
          lease, c->watchdog_timeout_ms, c->fixed_lease_ms,
          c->command_timeout_ms);
  fprintf(out,
          "operations   acquisitions %" PRId64 ": %" PRId64 " ok, %" PRId64
          " timed out, %" PRId64 " no quorum, %" PRId64 " other errors\n",
          r->acquires, r->acquired, r->timeouts, r->noquorum,
          r->acquire_errors);
  fprintf(out,
          "             unlocks %" PRId64 ": %" PRId64 " ok, %" PRId64
          " ELOST, %" PRId64 " ENOTHELD, %" PRId64 " errors; %" PRId64
          " reentrant acquisitions\n",
          r->releases, r->released_ok, r->released_lost, r->released_notheld,
          r->released_error, r->reentries);
  fprintf(out,
          "             increments %" PRId64 " acknowledged, %" PRId64
          " unknown, counter %" PRId64 "; fenced writes %" PRId64
          " accepted, %" PRId64 " refused, %" PRId64 " failed\n",
          r->increments_ok, r->increments_unknown, r->final_counter,
          r->fenced_accepted, r->fenced_refused, r->fenced_errors);
  fprintf(out, "             worker processes %" PRId64 "\n", r->processes);
  fprintf(out, "faults      ");
  int64_t total = 0;
  for (int f = 0; f < CHAOS_FAULT_COUNT; f++)
    if (r->faults[f] > 0) {
      fprintf(out, " %s %" PRId64 ",", chaos_fault_name((chaos_fault_t)f),
              r->faults[f]);
      total += r->faults[f];
    }
  fprintf(out, " total %" PRId64 "\n", total);
  if (c->sentinel)
    fprintf(out,
            "failovers    %" PRId64 " (a new master named by the Sentinels)\n",
            r->failovers);
  if (c->cluster)
    fprintf(out,
            "failovers    %" PRId64 " (a new master serving the lock's slot)\n",
            r->failovers);
  fprintf(out,
          "violations   silent overlaps %" PRId64
          ", unconfirmed overlaps %" PRId64
          ", stale fenced writes accepted %" PRId64
          ", token regressions %" PRId64 "%s,\n",
          r->silent_overlaps, r->unconfirmed_overlaps, r->stale_accepted,
          r->token_regressions,
          r->token_regressions && (c->faults & CHAOS_BIT(CHAOS_RESTART_EMPTY))
              ? " (expected: the counter was lost)"
              : "");
  fprintf(out,
          "             reentrant token changes %" PRId64
          ", stopped holders not told ELOST %" PRId64
          ", losses reported as ENOTHELD %" PRId64
          ", grants without quorum %" PRId64 ",\n",
          r->reentry_token_changes, r->unnoticed_losses, r->misreported_losses,
          r->quorumless_grants);
  fprintf(out,
          "             unexplained lost updates %" PRId64
          ", phantom updates %" PRId64 ", slow recoveries %" PRId64
          ", unfinished holds %" PRId64 ", worker crashes %" PRId64
          ", held at end %" PRId64 "\n",
          r->unexplained_lost_updates, r->phantom_updates, r->slow_recoveries,
          r->unfinished_holds, r->worker_crashes, r->held_at_end);
  if (c->permits > 0)
    fprintf(out,
            "semaphore    %d permits; most holders at once %" PRId64
            " (%" PRId64 " with those told ELOST); permits at the end "
            "%" PRId64 "\n",
            c->permits, r->max_holders, r->max_with_lost,
            c->permits + r->permits_drift);
  fprintf(out,
          "detected     losses reported (DLOCK_ELOST) %" PRId64
          ", overlaps with a hold told ELOST %" PRId64
          ", lost updates of the unfenced counter %" PRId64 "\n",
          r->released_lost, r->detected_overlaps, r->lost_updates);
  fprintf(out,
          "             holders stopped past their lease %" PRId64
          " (told ELOST %" PRId64 "), stale fenced writes refused %" PRId64
          " (%" PRId64 " after a stop), refusals of clean holds %" PRId64 "\n",
          r->stopped_holds, r->stopped_holds_lost, r->stale_refused,
          r->stopped_writes_refused, r->refused_clean);
  fprintf(out,
          "recovery     (limit for a dead holder's lock: lease + 1 s = %" PRId64
          " ms)\n",
          r->lease_limit_ms);
  print_timing(out, "lock free after its holder was killed",
               &r->free_after_death);
  print_timing(out, "next holder after a holder was killed",
               &r->progress_after_death);
  for (int f = 0; f < CHAOS_FAULT_COUNT; f++) {
    char label[96];
    snprintf(label, sizeof(label), "next holder after %s healed",
             chaos_fault_name((chaos_fault_t)f));
    print_timing(out, label, &r->progress_after_heal[f]);
  }
  for (int f = 0; f < CHAOS_FAULT_COUNT; f++) {
    const chaos_spread_t *s = &r->recovery[f];
    if (s->n == 0 && s->never == 0)
      continue;
    fprintf(out,
            "             %s -> first grant asked after it: %" PRId64
            " times, min %" PRId64 " ms, median %" PRId64 " ms, max %" PRId64
            " ms; never %" PRId64 "\n",
            chaos_fault_name((chaos_fault_t)f), s->n, s->min_ms, s->median_ms,
            s->max_ms, s->never);
  }
  char why[160];
  if (chaos_verdict(c, r, why, sizeof(why)))
    fprintf(out, "verdict      OK: no silent violation, every promise kept\n");
  else
    fprintf(out, "verdict      FAILED: %s\n", why);
}
