/*
 * Fault injection with a history checker, in the manner of Jepsen's lock
 * tests: worker processes take a lock, do a read-modify-write and a fenced
 * write on a separate "resource" Redis, and record every step with its
 * CLOCK_MONOTONIC time; a nemesis injects faults into the lock servers and
 * the workers meanwhile; a checker reads the merged history afterwards and
 * counts what went wrong, by kind.
 *
 * The same code drives the short scenarios of tests/test_chaos.c and the
 * long run of "make chaos" (tests/chaos/chaos_main.c).
 *
 * chaos_run() forks the workers, so call it from a process with no threads
 * of its own (a test's main thread, before it opens any dlock client).
 */
#ifndef DLOCK_CHAOS_H
#define DLOCK_CHAOS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The faults the nemesis knows. Each is injected alone, then healed, and
 * the next one comes after a quiet gap, so their effects can be told apart
 * in the history. */
typedef enum chaos_fault {
  CHAOS_KILL_HOLDER = 0,   /* SIGKILL the process holding the lock */
  CHAOS_STOP_HOLDER,       /* SIGSTOP it past its lease, then SIGCONT */
  CHAOS_PAUSE_SHORT,       /* Redis stopped for less than command_timeout */
  CHAOS_PAUSE_LONG,        /* ... for more than that, less than the lease */
  CHAOS_PAUSE_PAST_LEASE,  /* ... for more than the lease */
  CHAOS_RESTART_AOF,       /* Redis SIGKILLed and restarted, AOF fsync always */
  CHAOS_RESTART_EMPTY,     /* Redis SIGKILLed and restarted without data */
  CHAOS_CLIENT_KILL,       /* CLIENT KILL TYPE normal (pubsub every other) */
  CHAOS_SCRIPT_FLUSH,      /* SCRIPT FLUSH */
  CHAOS_RED_KILL_MINORITY, /* RedLock: 2 of 5 nodes killed, restarted */
  CHAOS_RED_PAUSE_MINORITY, /* RedLock: 2 of 5 nodes stopped, resumed */
  CHAOS_RED_KILL_MAJORITY,  /* RedLock: 3 of 5 nodes killed, restarted */
  CHAOS_SENTINEL_FAILOVER,  /* Sentinel: SENTINEL FAILOVER */
  CHAOS_MASTER_KILL,        /* Sentinel: the master SIGKILLed; once the
                               Sentinels promoted a replica, it comes back
                               as a replica of the new master (no data) */
  CHAOS_CLUSTER_FAILOVER,   /* Cluster: CLUSTER FAILOVER on the replica of
                               the master serving the lock's slot */
  CHAOS_CLUSTER_KILL,       /* Cluster: that master SIGKILLed; once its
                               replica took over, it is restarted (no data)
                               and rejoins as the new master's replica */
  CHAOS_FAULT_COUNT
} chaos_fault_t;

#define CHAOS_BIT(f) (1u << (f))

/* Which lease the worker threads ask for. */
typedef enum chaos_lease {
  CHAOS_LEASE_BOTH = 0, /* even threads the watchdog, odd ones a fixed lease */
  CHAOS_LEASE_WATCHDOG,
  CHAOS_LEASE_FIXED
} chaos_lease_t;

typedef struct chaos_config {
  const char *name; /* the scenario's name, for the summary */
  unsigned faults;  /* CHAOS_BIT()s the nemesis draws from; 0: none */
  int redlock;      /* 1: a RedLock over five lock servers */
  /* 1: the lock server is a master with two replicas behind three
   * Sentinels (tests/harness/sentinel_group.h), which the workers reach
   * by a redis-sentinel:// URL, with replica sync on. */
  int sentinel;
  /* 1: the lock server is a Redis Cluster of 3 masters with a replica each
   * (tests/harness/cluster_group.h), which the workers reach by a
   * redis-cluster:// URL, with replica sync on. */
  int cluster;
  /* 0: the workers take a lock. N > 0: they take permits of an
   * expirable-permit semaphore of N permits instead (one Redis only), and
   * the checker's bound is N holders at once rather than one. */
  int permits;
  /* 1: the lock servers are reached over TLS (rediss://, a CA made with
   * openssl for the run); the nemesis still uses their plain ports. */
  int tls;
  int64_t duration_ms; /* how long the workers run */
  int procs;           /* worker processes */
  int threads;         /* threads per process, each with its own client */
  chaos_lease_t lease;
  int64_t fixed_lease_ms;      /* lease of the fixed-lease threads */
  int64_t watchdog_timeout_ms; /* the clients' watchdog lease */
  int64_t command_timeout_ms;  /* the clients' command timeout */
  int64_t hold_ms;             /* critical sections sleep up to this long */
  int64_t wait_ms;             /* dlock_trylock's wait */
  int64_t gap_ms;       /* quiet time between two faults (randomized +50%) */
  unsigned seed;        /* the nemesis's choices; 0: from the clock */
  const char *keep_dir; /* keep the history there; NULL: a removed temp dir */
  int verbose;          /* 1: print each fault as it is injected */
} chaos_config_t;

/* Count, largest and sum of a set of durations in milliseconds. */
typedef struct chaos_timing {
  int64_t n, max_ms, sum_ms;
} chaos_timing_t;

/* Count, smallest, median and largest of a set of durations in ms, and how
 * many of the events they follow were never followed at all. */
typedef struct chaos_spread {
  int64_t n, min_ms, median_ms, max_ms, never;
} chaos_spread_t;

typedef struct chaos_result {
  int setup_failed;  /* servers or workers could not be started */
  double seconds;    /* how long the workers ran */
  int64_t processes; /* worker processes started, replacements included */

  /* Operations, from the history. */
  int64_t acquires, acquired, timeouts, acquire_errors, noquorum;
  int64_t releases, released_ok, released_lost, released_notheld,
      released_error;
  int64_t reentries, increments_ok, increments_unknown;
  int64_t fenced_accepted, fenced_refused, fenced_errors;
  int64_t final_counter, fence_log_length;

  int64_t faults[CHAOS_FAULT_COUNT]; /* injected, by kind */
  int64_t failovers; /* Sentinel and cluster runs: new masters that took
                        over the lock (for a cluster: its slot) */

  /*
   * Violations: each is a broken promise when the scenario is one where
   * dlock promises safety (see chaos_verdict()).
   */
  int64_t silent_overlaps;      /* two holds overlapped; both released with 0 */
  int64_t unconfirmed_overlaps; /* overlapped; one released 0, the other's
                                   release failed or it was killed holding */
  int64_t token_regressions;    /* a later holder got a token not larger */
  int64_t reentry_token_changes; /* a reentrant acquisition changed token */
  int64_t stale_accepted;        /* the resource took a write with a token
                                    below one it had already accepted */
  int64_t unnoticed_losses;   /* a holder stopped past its lease unlocked 0 */
  int64_t misreported_losses; /* a holder's final unlock said ENOTHELD
                                 though no unlock of it said ELOST */
  int64_t unexplained_lost_updates; /* increments lost though no two holds
                                       overlapped at all */
  int64_t quorumless_grants; /* a RedLock granted while a majority was down */
  int64_t slow_recoveries;   /* the lock not free within lease + 1 s of its
                                holder's death, or no progress within 5 s
                                after Redis returned */
  int64_t unfinished_holds;  /* holds with no release and no kill */
  int64_t worker_crashes;    /* workers that died of a signal no one sent */
  int64_t held_at_end;       /* the lock still held after everyone left */
  int64_t permits_drift;     /* semaphore: free plus taken permits at the end,
                                minus the N it started with (lost or made up) */

  /* What dlock detected and reported, and what it let happen knowingly. */
  int64_t detected_overlaps; /* overlaps where a side saw DLOCK_ELOST */
  /* Semaphore runs (permits > 0): the overlap counts above count moments
   * when a grant made more than N holds current at once, by what their
   * holders learnt (silent: more than N released with 0; unconfirmed: more
   * than N not told DLOCK_ELOST; detected: more than N only with those
   * told DLOCK_ELOST). */
  int64_t max_holders;        /* the most current holds not told DLOCK_ELOST */
  int64_t max_with_lost;      /* ... and with those told DLOCK_ELOST */
  int64_t lost_updates;       /* successful increments minus the final count */
  int64_t phantom_updates;    /* final count above every possible increment */
  int64_t stopped_holds;      /* holds whose process was stopped past lease */
  int64_t stopped_holds_lost; /* ... and whose unlock said DLOCK_ELOST */
  int64_t stale_refused;      /* fenced writes the resource refused */
  int64_t refused_clean;      /* ... of holds that released with 0: the
                                 token was not the highest though the lock
                                 was held (a token counter that went back) */
  int64_t stopped_writes_refused; /* stopped holders' writes after SIGCONT
                                     that the resource refused */

  /* Recovery. */
  chaos_timing_t free_after_death;     /* holder killed -> lock free */
  chaos_timing_t progress_after_death; /* holder killed -> next holder */
  chaos_timing_t progress_after_heal[CHAOS_FAULT_COUNT]; /* -> next holder */
  /* From a fault's injection to the first grant of an acquisition invoked
   * after it: how long the lock stayed out of reach, by kind. */
  chaos_spread_t recovery[CHAOS_FAULT_COUNT];
  int64_t lease_limit_ms; /* the longest lease, plus 1 s */
} chaos_result_t;

/* The name of a fault ("kill-holder"); "?" for an unknown value. */
const char *chaos_fault_name(chaos_fault_t f);

/*
 * Fills 'c' with the preset scenario 'scenario' and the short timings of
 * the test suite (watchdog 600 ms, commands 300 ms, fixed lease 500 ms,
 * 3 processes x 2 threads, 5 s). Scenarios: none, kill, stop, pause,
 * restart-aof, restart-empty, clients, redlock-minority, redlock-majority,
 * mixed, redlock-mixed, sentinel-failover (SENTINEL FAILOVER and SIGKILL of
 * the master, with longer leases than the others: 5 s, beyond the
 * failover's outage); cluster-failover and cluster-kill (CLUSTER FAILOVER,
 * or SIGKILL, of the master serving the lock's slot in a 3-master cluster,
 * 20 s, leases of 5 s and 8 s); and "sem-" before any of the single-Redis ones
 * (sem-kill, sem-mixed, ...): the same faults on an expirable-permit
 * semaphore of CHAOS_SEM_PERMITS permits; and "tls-" before any of the
 * single-Redis ones (tls-kill, tls-pause, tls-restart-aof, tls-mixed...):
 * the same faults with the workers on rediss://. Returns 0, or -1 for an
 * unknown name.
 */
#define CHAOS_SEM_PERMITS 3

int chaos_config_init(chaos_config_t *c, const char *scenario);

/* The scenario names chaos_config_init() knows, NULL-terminated. */
extern const char *const chaos_scenarios[];

/*
 * Runs the scenario: starts the servers, the workers and the nemesis, waits
 * for the workers, checks the history into '*r' and stops everything it
 * started. Returns 0 when the run took place (whatever it found), -1 when
 * it could not be set up.
 */
int chaos_run(const chaos_config_t *c, chaos_result_t *r);

/*
 * 1 when the run kept every promise dlock makes for the faults of 'c':
 * no silent or unconfirmed overlap (for a semaphore: never more than N
 * holders not told DLOCK_ELOST, and its N permits all there at the end),
 * no stale fenced write accepted, every
 * stopped holder told DLOCK_ELOST, recovery in time, and token order kept
 * unless the scenario restarts Redis without persistence, which forgets
 * the token counter. Otherwise 0; 'why' (if not NULL) gets the first
 * broken promise.
 */
int chaos_verdict(const chaos_config_t *c, const chaos_result_t *r, char *why,
                  size_t why_len);

/*
 * 1 when this process runs far slower than native code (under valgrind or
 * ThreadSanitizer). Leases then run out in the middle of critical sections
 * and few faults fit in a run: the safety checks still hold, while counts
 * of faults, throughput and recovery times say little.
 */
int chaos_slow_runtime(void);

/* Like chaos_verdict(), but only the safety promises: what must hold
 * however slowly the workers run. */
int chaos_safe(const chaos_config_t *c, const chaos_result_t *r, char *why,
               size_t why_len);

/* Prints the summary of a run: operations, faults by kind, violations by
 * kind, detected losses, recovery times and the verdict. */
void chaos_print_summary(FILE *out, const chaos_config_t *c,
                         const chaos_result_t *r);

#endif
