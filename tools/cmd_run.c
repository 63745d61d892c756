/*
 * dlock run [options] NAME [--] CMD [ARG]...: waits for the lock NAME, runs
 * CMD with the lock held, releases it when CMD exits and exits with CMD's
 * status. While CMD runs, dlock passes termination signals on to it, and
 * stops it (SIGTERM, then SIGKILL after --grace) if the lock is lost: a
 * command that keeps running without its lock is exactly what a lock is
 * there to prevent.
 *
 * Everything the main thread waits for (the acquisition, signals, the
 * child's exit, a lost lock) arrives as an event on one self-pipe, so the
 * flow below is a plain loop without races between those sources.
 *
 * The lock is a reentrant lock by default, a fair lock or one side of a
 * read-write lock on request, and a RedLock when several --url name
 * independent masters: one client and one reentrant lock per server, held
 * as long as a majority of the servers given still hold it. With
 * --permits N it is a permit of the expirable-permit semaphore NAME (N
 * permits, set if it has none): at most N commands run at once.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "args.h"
#include "child.h"
#include "cli.h"
#include "duration.h"
#include "events.h"
#include "exit_codes.h"

#define DEFAULT_GRACE_MS 5000

static void print_run_help(FILE *out) {
  fprintf(out,
          "usage: %s\n"
          "Waits for the lock NAME, runs CMD with it held (renewed by the "
          "watchdog), releases\nit when CMD exits and exits with CMD's status. "
          "CMD gets DLOCK_NAME and\nDLOCK_TOKEN (the fencing token) in its "
          "environment; SIGINT, SIGTERM, SIGHUP and\nSIGQUIT sent to dlock are "
          "passed on to CMD. If the lock is lost while CMD runs,\nCMD gets "
          "SIGTERM, then SIGKILL after --grace, and dlock exits with 76. If "
          "dlock\nitself dies (kill -9), CMD gets SIGKILL (Linux): it never "
          "runs on unguarded.\n"
          "With several --url the lock is a RedLock: taken on a majority of "
          "the servers,\nand lost when fewer than a majority still hold "
          "it.\n\n"
          "Options:\n"
          "  --wait DUR    how long to wait for the lock; 0 = a single try "
          "(default: forever)\n"
          "  --lease DUR   fixed lease without renewal; CMD is stopped as "
          "for a lost lock\n"
          "                when it runs out (default: none, the watchdog "
          "renews the lock)\n"
          "  --grace DUR   time from SIGTERM to SIGKILL after a loss "
          "(default: 5s)\n"
          "  -q, --quiet   no message when the lock is not acquired "
          "(errors still have one)\n"
          "  -v, --verbose report on stderr how long the lock was waited "
          "for and held,\n"
          "                and its fencing token\n"
          "  -E, --conflict-exit-code N\n"
          "                exit status when the lock is not acquired, 0-255 "
          "(default: 75)\n"
          "  --fair        a fair lock: waiters get it in the order they "
          "asked\n"
          "  --read        the read side of a read-write lock, shared with "
          "other readers\n"
          "  --write       the write side of a read-write lock, exclusive\n"
          "                (default: a reentrant lock; the three exclude each "
          "other and need\n"
          "                a single --url: a RedLock is made of reentrant "
          "locks)\n"
          "  --permits N   at most N commands at once under NAME: CMD holds "
          "one permit of\n"
          "                the semaphore NAME (Redisson's "
          "RPermitExpirableSemaphore), which\n"
          "                gets N permits if it has none yet; renewed, "
          "released and lost\n"
          "                like a lock; a single --url\n"
          "  -h, --help    show this help\n"
          "DUR is a number with a unit: 250ms, 5s, 2m or 1h (0 alone needs "
          "none).\n",
          cli_cmd_run.usage);
  fputs("\nExit status: CMD's status (128+N if killed by signal N); 75 (or "
        "-E N) lock not\nacquired within --wait, CMD not started; 76 lock "
        "lost while CMD ran; 69 Redis\nunreachable or refusing; 64 bad usage; "
        "126/127 CMD not executable/not found.\n"
        "\nExamples:\n"
        "  dlock run --wait 0 nightly-report -- ./report.sh --full\n"
        "  # cron, on every host: one runs it, the others stay silent and exit "
        "0\n"
        "  0 3 * * * dlock run --wait 0 --quiet -E 0 nightly -- ./nightly.sh\n"
        "  dlock run --permits 4 api-workers -- ./worker.sh   # 4 at once, "
        "fleet-wide\n"
        "  dlock --url redis://r1:6379 --url redis://r2:6379 --url "
        "redis://r3:6379 \\\n"
        "        run --wait 10m --grace 30s db-migrate -- make migrate\n",
        out);
  cli_print_global_options_hint(out);
}

typedef struct run_options {
  const char *name;
  char **command;   /* NULL-terminated, from argv */
  int64_t wait_ms;  /* DLOCK_WAIT_FOREVER unless --wait */
  int64_t lease_ms; /* DLOCK_WATCHDOG unless --lease */
  int64_t grace_ms;
  dlock_kind_t kind;     /* DLOCK_REENTRANT unless --fair/--read/--write */
  const char *kind_name; /* that option's name, for messages; or NULL */
  int quiet;             /* --quiet: no message when not acquired */
  int conflict_exit;     /* the status when not acquired (--conflict-...) */
  int64_t permits;       /* --permits N; 0 when not a semaphore */
  int verbose;           /* --verbose: wait, hold and token on stderr */
} run_options_t;

/* One server of a RedLock and its part of the lock. */
typedef struct red_part {
  cli_node_t *node;
  dlock_t *lock;
  int granted;  /* this server granted the lock at acquisition */
  int reported; /* its loss has been reported */
} red_part_t;

typedef struct run_state {
  const cli_command_t *cmd;
  const run_options_t *opt;
  cli_node_t *nodes; /* one per --url */
  size_t nnodes;
  /* A RedLock (several --url): its parts on the servers that could be
   * opened, and the majority of all the servers given. */
  red_part_t parts[CLI_MAX_URLS];
  size_t nparts;
  size_t quorum; /* 0 when the lock is not a RedLock */
  size_t held;   /* RedLock: servers still holding it, as last counted */
  dlock_t *lock;
  /* With --permits: the semaphore and the permit taken, instead of 'lock'. */
  dlock_psem_t *sem;
  dlock_permit_t permit;
  uint64_t
      owner; /* the lock's owner id: taken on one thread, freed on another */
  uint64_t token;
  int64_t asked_us, acquired_us; /* when it was asked for and acquired */
  int64_t wait_deadline;  /* monotonic ms when --wait ends; INT64_MAX none */
  int64_t lease_deadline; /* monotonic ms when a fixed lease ends; -1 none */
  pid_t child;
  int child_wait_status;
  int child_exited;
  int lost;              /* the lock is known to be lost */
  int64_t kill_deadline; /* when SIGKILL follows the SIGTERM of a loss */
  int killed;
} run_state_t;

static int64_t monotonic_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Microseconds, for --verbose, which reports waits shorter than 1 ms. */
static int64_t monotonic_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* ---- command line --------------------------------------------------- */

/* Applies one option of "dlock run"; 0 or EXIT_USAGE. */
static int apply_run_option(const cli_command_t *cmd, cli_globals_t *g,
                            run_options_t *o, const char *name,
                            const char *value) {
  if (strcmp(name, "wait") == 0) {
    if (strcmp(value, "forever") == 0) {
      o->wait_ms = DLOCK_WAIT_FOREVER;
      return 0;
    }
    return cli_parse_duration(cmd, "wait", value, 0, &o->wait_ms);
  }
  if (strcmp(name, "lease") == 0)
    return cli_parse_duration(cmd, "lease", value, 1, &o->lease_ms);
  if (strcmp(name, "grace") == 0)
    return cli_parse_duration(cmd, "grace", value, 0, &o->grace_ms);
  if (strcmp(name, "permits") == 0) {
    char *end;
    errno = 0;
    long long n = strtoll(value, &end, 10);
    if (errno != 0 || end == value || *end != '\0' || n < 1 ||
        n > DLOCK_PERMITS_MAX)
      return cli_usage_error(cmd,
                             "--permits: '%s' is not a number from 1 to "
                             "%lld",
                             value, (long long)DLOCK_PERMITS_MAX);
    o->permits = n;
    return 0;
  }
  if (strcmp(name, "conflict-exit-code") == 0) {
    char *end;
    errno = 0;
    long code = strtol(value, &end, 10);
    if (errno != 0 || end == value || *end != '\0' || code < 0 || code > 255)
      return cli_usage_error(cmd,
                             "--conflict-exit-code: '%s' is not a number "
                             "from 0 to 255",
                             value);
    o->conflict_exit = (int)code;
    return 0;
  }
  return cli_set_global_option(cmd, g, name, value);
}

/* Applies --fair, --read or --write; 0 or EXIT_USAGE. */
static int apply_kind_option(const cli_command_t *cmd, run_options_t *o,
                             const char *name) {
  dlock_kind_t kind = strcmp(name, "fair") == 0   ? DLOCK_FAIR
                      : strcmp(name, "read") == 0 ? DLOCK_READ
                                                  : DLOCK_WRITE;

  if (o->kind_name != NULL && o->kind != kind)
    return cli_usage_error(cmd,
                           "--%s and --%s exclude each other: a lock is "
                           "of one kind",
                           o->kind_name, name);
  o->kind = kind;
  o->kind_name = name;
  return 0;
}

/*
 * Parses "[options] NAME [--] CMD [ARG]...". Options may come before or
 * after NAME; the first argument after NAME that is not an option, or
 * everything after a "--" that follows NAME, is the command. Returns 0,
 * -1 after --help, or EXIT_USAGE.
 */
static int parse_run_args(const cli_command_t *cmd, cli_globals_t *g, int argc,
                          char **argv, run_options_t *o) {
  static const arg_option_t options[] = {
      {"wait", 0, ARG_VALUE},     {"lease", 0, ARG_VALUE},
      {"grace", 0, ARG_VALUE},    {"fair", 0, ARG_FLAG},
      {"read", 0, ARG_FLAG},      {"write", 0, ARG_FLAG},
      {"help", 'h', ARG_FLAG},    {"url", 0, ARG_VALUES},
      {"watchdog", 0, ARG_VALUE}, {"quiet", 'q', ARG_FLAG},
      {"verbose", 'v', ARG_FLAG}, {"conflict-exit-code", 'E', ARG_VALUE},
      {"permits", 0, ARG_VALUE},  CLI_TLS_OPTIONS};
  arg_parser_t p;
  int rc = 0;

  arg_parser_init(&p, options, sizeof options / sizeof options[0], argc, argv);
  while (rc == 0 && o->command == NULL) {
    int opt = arg_next(&p);
    if (opt == ARG_END)
      break;
    if (opt == ARG_ERROR)
      rc = cli_usage_error(cmd, "%s", p.problem);
    else if (opt == ARG_DASHDASH && o->name != NULL)
      o->command = arg_remaining(&p);
    else if (opt == ARG_DASHDASH)
      continue; /* "run -- NAME CMD...": the name comes next */
    else if (opt == ARG_POSITIONAL && o->name == NULL)
      o->name = p.value;
    else if (opt == ARG_POSITIONAL)
      o->command = arg_remaining(&p) - 1;
    else if (strcmp(options[opt].long_name, "help") == 0) {
      print_run_help(stdout);
      return -1;
    } else if (strcmp(options[opt].long_name, "quiet") == 0)
      o->quiet = 1;
    else if (strcmp(options[opt].long_name, "verbose") == 0)
      o->verbose = 1;
    else if (cli_is_global_option(options[opt].long_name))
      rc = cli_set_global_option(cmd, g, options[opt].long_name, p.value);
    else if (options[opt].takes_value == ARG_FLAG)
      rc = apply_kind_option(cmd, o, options[opt].long_name);
    else
      rc = apply_run_option(cmd, g, o, options[opt].long_name, p.value);
  }
  if (rc != 0)
    return rc;
  /* The library's RedLock is built over reentrant locks, one per server;
   * a fair queue or a read-write lock has no majority semantics there. */
  if (g->nurls > 1 && o->kind_name != NULL)
    return cli_usage_error(cmd,
                           "--%s cannot be used with several --url: RedLock "
                           "is made of reentrant locks",
                           o->kind_name);
  if (o->permits > 0 && o->kind_name != NULL)
    return cli_usage_error(cmd,
                           "--permits and --%s exclude each other: a "
                           "semaphore is not a lock of that kind",
                           o->kind_name);
  if (o->permits > 0 && g->nurls > 1)
    return cli_usage_error(cmd, "--permits needs a single --url: a "
                                "semaphore lives on one server");
  if (o->name == NULL)
    return cli_usage_error(cmd, "missing lock name and command");
  if ((rc = cli_check_lock_name(cmd, o->name)) != 0)
    return rc;
  if (o->command == NULL || o->command[0] == NULL)
    return cli_usage_error(cmd, "missing command to run under lock '%s'",
                           o->name);
  return 0;
}

/* ---- acquiring ------------------------------------------------------ */

typedef struct acquisition {
  run_state_t *run;
  int result;
  /* The library's detail of a failure, taken on the thread that met it
   * (details are per thread), masked; or NULL. */
  char *detail;
} acquisition_t;

/*
 * Records which servers of a RedLock granted it (those whose part has a
 * fencing token: the library keeps one per hold, without a round trip)
 * and returns how many did.
 */
static size_t count_granted(run_state_t *r) {
  size_t granted = 0;

  for (size_t i = 0; i < r->nparts; i++) {
    r->parts[i].granted = dlock_token_as(r->parts[i].lock, r->owner) != 0;
    granted += (size_t)r->parts[i].granted;
  }
  r->held = granted;
  return granted;
}

static void sleep_ms(int64_t ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/*
 * Takes the lock, waiting up to --wait. A RedLock built over the servers
 * that could be opened counts its majority among those; when some of the
 * servers given were unreachable, that majority may be smaller than a
 * majority of all of them, which another client that reaches the others
 * could then also win. Such a grant is given back and the lock asked for
 * again, after a short random pause, as RedLock does after a split vote.
 */
static int acquire_with_quorum(run_state_t *r) {
  const run_options_t *o = r->opt;
  int64_t deadline = r->wait_deadline;

  for (;;) {
    int64_t wait = DLOCK_WAIT_FOREVER;
    if (deadline != INT64_MAX) {
      int64_t left = deadline - monotonic_ms();
      wait = left > 0 ? left : 0;
    }
    /* A loss reported during an earlier, given back grant is old news. */
    for (size_t i = 0; i < r->nparts; i++)
      atomic_store(&r->parts[i].node->lost, 0);
    if (r->sem != NULL) {
      /* Every run may be the first: the semaphore gets its permits if it
       * has none, and keeps those it has otherwise. */
      int rc = dlock_psem_try_set_permits(r->sem, o->permits);
      if (rc < 0)
        return rc;
      return dlock_psem_acquire(r->sem, wait, o->lease_ms, &r->permit);
    }
    int rc = dlock_trylock_as(r->lock, r->owner, wait, o->lease_ms);
    if (rc != 0 || r->quorum == 0 || count_granted(r) >= r->quorum)
      return rc;
    dlock_unlock_as(r->lock, r->owner);
    if (monotonic_ms() >= deadline)
      return DLOCK_ETIMEDOUT;
    int64_t pause = 10 + monotonic_ms() % 50;
    if (deadline - monotonic_ms() < pause)
      pause = deadline - monotonic_ms();
    if (pause > 0)
      sleep_ms(pause);
  }
}

/* Runs the blocking acquisition off the main thread, so that the main
 * thread stays free to notice Ctrl-C or SIGTERM while waiting. */
static void *acquire_in_background(void *arg) {
  acquisition_t *a = arg;
  a->result = acquire_with_quorum(a->run);
  if (a->result != 0)
    a->detail = cli_last_error_detail();
  events_post(EVENT_ACQUIRE_DONE);
  return NULL;
}

/* Makes every pending call on every client return DLOCK_ECANCELED. */
static void shut_down_clients(run_state_t *r) {
  for (size_t i = 0; i < r->nnodes; i++)
    if (r->nodes[i].client != NULL)
      dlock_client_shutdown(r->nodes[i].client);
}

/* Waits for the acquisition thread; returns the first terminating signal
 * that arrived meanwhile (after cancelling the wait), or 0. */
static int wait_for_acquisition(run_state_t *r) {
  int interrupted_by = 0;

  for (;;) {
    unsigned char events[64];
    size_t n = events_wait(-1, events, sizeof events);
    for (size_t i = 0; i < n; i++) {
      int signo = event_signal(events[i]);
      if (events[i] == EVENT_ACQUIRE_DONE)
        return interrupted_by;
      if (signo != 0 && signo != SIGCHLD && interrupted_by == 0) {
        interrupted_by = signo;
        /* Makes the pending trylock return DLOCK_ECANCELED. Should it have
         * succeeded at this very moment, the lock cannot be released any
         * more and expires by itself (watchdog timeout or --lease). */
        shut_down_clients(r);
      }
    }
  }
}

/* A lost race is routine under cron (every host but one loses it), so
 * --quiet keeps it out of the mail and -E picks its exit status. */
static int report_not_acquired(const run_state_t *r) {
  char wait_text[32];

  if (r->opt->quiet) {
    /* Nothing to say. */
  } else if (r->sem != NULL) {
    duration_format_exact(r->opt->wait_ms, wait_text, sizeof wait_text);
    cli_error(r->cmd,
              "all permits of semaphore '%s' are taken; none acquired%s%s",
              r->opt->name, r->opt->wait_ms == 0 ? "" : " within ",
              r->opt->wait_ms == 0 ? " (--wait 0: a single try)" : wait_text);
  } else if (r->opt->wait_ms == 0) {
    cli_error(r->cmd,
              "lock '%s' is held elsewhere; not acquired "
              "(--wait 0: a single try)",
              r->opt->name);
  } else {
    duration_format_exact(r->opt->wait_ms, wait_text, sizeof wait_text);
    cli_error(r->cmd, "lock '%s' is held elsewhere; not acquired within %s",
              r->opt->name, wait_text);
  }
  return r->opt->conflict_exit;
}

/*
 * The monotonic time by which a fixed lease surely has run out: the key's
 * TTL measured after the acquisition, counted from before the question was
 * asked, so the estimate can only be early, never late.
 */
static int64_t lease_deadline_after_acquisition(run_state_t *r) {
  int64_t asked_at = monotonic_ms();

  if (r->sem != NULL) {
    /* The permit's lease end by Redis's clock, read on this host's: never
     * later than a lease from now, earlier when the clocks say so. */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t left = r->permit.expires_ms -
                   ((int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
    if (left > r->opt->lease_ms)
      left = r->opt->lease_ms;
    return asked_at + (left > 0 ? left : 0);
  }
  int64_t ttl = dlock_ttl(r->lock);

  if (ttl < 0)
    return asked_at + r->opt->lease_ms;
  if (ttl == INT64_MAX)
    return -1;
  return asked_at + ttl;
}

/* Takes the lock: 1 when held; 0 when not, with '*status' the exit status
 * (after a message, unless --quiet silenced it; -E 0 makes it 0). */
static int acquire_lock(run_state_t *r, int *status) {
  acquisition_t a = {r, 0, NULL};
  pthread_t thread;
  char what[256];

  r->asked_us = monotonic_us();
  if (pthread_create(&thread, NULL, acquire_in_background, &a) != 0) {
    cli_error(r->cmd, "cannot start a thread: %s", strerror(errno));
    *status = EXIT_INTERNAL;
    return 0;
  }
  /* A fair waiter interrupted here leaves the queue on its way out: the
   * library does that for a wait ended by dlock_client_shutdown. */
  int interrupted_by = wait_for_acquisition(r);
  pthread_join(thread, NULL);

  if (interrupted_by != 0) {
    cli_error(r->cmd, "interrupted by %s while waiting for lock '%s'",
              signal_name(interrupted_by), r->opt->name);
    *status = EXIT_SIGNAL_BASE + interrupted_by;
  } else if (a.result == DLOCK_ETIMEDOUT) {
    *status = report_not_acquired(r);
  } else if (a.result != 0) {
    snprintf(what, sizeof what, "cannot acquire lock '%.200s'", r->opt->name);
    *status = cli_fail_with(r->cmd, a.result, what, a.detail);
  }
  free(a.detail);
  if (interrupted_by != 0 || a.result != 0)
    return 0;
  r->token =
      r->sem != NULL ? r->permit.token : dlock_token_as(r->lock, r->owner);
  r->lease_deadline =
      r->opt->lease_ms > 0 ? lease_deadline_after_acquisition(r) : -1;
  r->acquired_us = monotonic_us();
  if (r->opt->verbose)
    cli_error(r->cmd,
              "lock '%s' acquired after waiting %.6f s; fencing token %llu",
              r->opt->name, (double)(r->acquired_us - r->asked_us) / 1e6,
              (unsigned long long)r->token);
  return 1;
}

/* ---- supervising the command ---------------------------------------- */

/* Called on a client's watchdog thread: marks the client's server (a
 * RedLock counts the servers that lost it) and wakes the main loop. */
static void on_lock_lost(void *data, const char *name, size_t name_len,
                         uint64_t owner) {
  cli_node_t *node = data;

  (void)name, (void)name_len, (void)owner;
  if (node != NULL)
    atomic_store(&node->lost, 1);
  events_post(EVENT_LOCK_LOST);
}

/*
 * Decides, after a lost-lock event, whether the lock as a whole is lost:
 * always for a lock on one server; for a RedLock when fewer than a
 * majority of all the servers given still hold it (each server counted
 * once, however often its client reports). A loss that leaves a majority
 * is reported and the command goes on.
 */
static int lock_is_lost(run_state_t *r) {
  size_t held = 0;

  if (r->quorum == 0)
    return 1;
  for (size_t i = 0; i < r->nparts; i++)
    held += r->parts[i].granted && !atomic_load(&r->parts[i].node->lost);
  r->held = held;
  for (size_t i = 0; i < r->nparts; i++) {
    red_part_t *part = &r->parts[i];
    if (!part->granted || part->reported || !atomic_load(&part->node->lost))
      continue;
    part->reported = 1;
    if (held >= r->quorum)
      cli_error(r->cmd,
                "lock '%s' lost on %s; still held on %zu of the %zu "
                "servers, a majority: the command goes on",
                r->opt->name, part->node->shown ? part->node->shown : "?", held,
                r->nnodes);
  }
  return held < r->quorum;
}

/* Starts stopping the command after the lock was lost: SIGTERM now,
 * SIGKILL when the grace period ends. */
static void stop_command_after_loss(run_state_t *r, const char *why) {
  char grace[32];

  if (r->lost)
    return;
  r->lost = 1;
  duration_format_exact(r->opt->grace_ms, grace, sizeof grace);
  cli_error(r->cmd,
            "lock '%s' lost while the command ran (%s); sending "
            "SIGTERM, SIGKILL in %s",
            r->opt->name, why, grace);
  kill(r->child, SIGTERM);
  r->kill_deadline = monotonic_ms() + r->opt->grace_ms;
}

static void handle_event(run_state_t *r, unsigned char event) {
  int signo = event_signal(event);

  if (event == EVENT_LOCK_LOST && lock_is_lost(r)) {
    char why[160];
    if (r->quorum != 0)
      snprintf(why, sizeof why,
               "only %zu of the %zu Redis servers still hold it, fewer "
               "than a majority",
               r->held, r->nnodes);
    else
      snprintf(why, sizeof why,
               "it expired or was deleted, or Redis was unreachable for "
               "longer than the lease");
    stop_command_after_loss(r, why);
  } else if (signo != 0 && signo != SIGCHLD && !event_from_terminal(event))
    kill(r->child, signo);
  /* SIGCHLD needs nothing here: the loop reaps after every wake-up. A
   * signal typed at the terminal already reached the command, which is in
   * the same foreground process group. */
}

static void check_deadlines(run_state_t *r) {
  int64_t now = monotonic_ms();

  if (!r->lost && r->lease_deadline >= 0 && now >= r->lease_deadline)
    stop_command_after_loss(r, "its --lease ran out");
  if (r->lost && !r->killed && now >= r->kill_deadline) {
    cli_error(r->cmd, "the command did not exit after SIGTERM; sending "
                      "SIGKILL");
    kill(r->child, SIGKILL);
    r->killed = 1;
  }
}

/* Milliseconds until the next deadline, for poll(); -1 when none. */
static int time_to_next_deadline(const run_state_t *r) {
  int64_t next = -1;

  if (!r->lost && r->lease_deadline >= 0)
    next = r->lease_deadline;
  else if (r->lost && !r->killed)
    next = r->kill_deadline;
  if (next < 0)
    return -1;
  int64_t left = next - monotonic_ms();
  return left <= 0 ? 0 : (left > INT_MAX ? INT_MAX : (int)left);
}

static void reap_command(run_state_t *r) {
  int status;
  pid_t pid;

  do
    pid = waitpid(r->child, &status, WNOHANG);
  while (pid < 0 && errno == EINTR);
  if (pid == r->child) {
    r->child_wait_status = status;
    r->child_exited = 1;
  }
}

static void supervise_command(run_state_t *r) {
  while (!r->child_exited) {
    unsigned char events[64];
    size_t n = events_wait(time_to_next_deadline(r), events, sizeof events);
    for (size_t i = 0; i < n; i++)
      handle_event(r, events[i]);
    check_deadlines(r);
    reap_command(r);
  }
}

/*
 * Checks the news that came between the acquisition and now: a signal or a
 * loss in that gap means the command must not start. Returns 0 or the exit
 * status.
 */
static int check_events_before_start(run_state_t *r) {
  unsigned char events[64];
  size_t n = events_wait(0, events, sizeof events);

  for (size_t i = 0; i < n; i++) {
    int signo = event_signal(events[i]);
    if (events[i] == EVENT_LOCK_LOST && lock_is_lost(r)) {
      cli_error(r->cmd, "lock '%s' lost before the command started",
                r->opt->name);
      r->lost = 1;
      return EXIT_LOCK_LOST;
    }
    if (signo != 0 && signo != SIGCHLD) {
      cli_error(r->cmd, "interrupted by %s; command not started",
                signal_name(signo));
      return EXIT_SIGNAL_BASE + signo;
    }
  }
  return 0;
}

static int start_command(run_state_t *r, const child_start_state_t *start) {
  int err =
      child_start(start, r->opt->command, r->opt->name, r->token, &r->child);

  if (err == 0)
    return 0;
  cli_error(r->cmd, "%s: %s", r->opt->command[0], strerror(err));
  if (err == ENOENT)
    return EXIT_NOT_FOUND;
  if (err == ENOMEM || err == EAGAIN)
    return EXIT_INTERNAL;
  return EXIT_CANNOT_EXECUTE;
}

/*
 * Releases the lock after the command ended and picks dlock's exit status:
 * the command's own, unless the lock turned out to be lost, in which case
 * the command's work may have overlapped another holder's.
 */
static int release_lock(run_state_t *r, int status) {
  /* A lost lock is not released: there is nothing left to release, and
   * when Redis is unreachable the attempt would only delay the exit by the
   * command timeout. */
  if (r->lost)
    return EXIT_LOCK_LOST;

  int rc = r->sem != NULL ? dlock_psem_release(r->sem, r->permit.id)
                          : dlock_unlock_as(r->lock, r->owner);
  if (r->opt->verbose && rc == 0)
    cli_error(r->cmd, "lock '%s' released after holding it %.6f s",
              r->opt->name, (double)(monotonic_us() - r->acquired_us) / 1e6);
  if (rc == DLOCK_ELOST || rc == DLOCK_ENOTHELD) {
    cli_error(r->cmd,
              "lock '%s' was lost while the command ran (found at "
              "release)",
              r->opt->name);
    return EXIT_LOCK_LOST;
  }
  if (rc != 0) {
    char what[256];
    snprintf(what, sizeof what,
             "could not release lock '%.200s'; it "
             "expires by itself",
             r->opt->name);
    cli_fail(r->cmd, rc, what);
  }
  return status;
}

static int run_command_under_lock(run_state_t *r,
                                  const child_start_state_t *start) {
  int rc = check_events_before_start(r);

  if (rc == 0)
    rc = start_command(r, start);
  if (rc != 0) {
    if (!r->lost && r->sem != NULL)
      dlock_psem_release(r->sem, r->permit.id);
    else if (!r->lost)
      dlock_unlock_as(r->lock, r->owner);
    return rc;
  }
  supervise_command(r);
  return release_lock(r, child_exit_status(r->child_wait_status));
}

/* ---- command -------------------------------------------------------- */

/* Opens the client(s) and the lock handle; 0 or the exit status. */
static int open_lock(run_state_t *r, const cli_globals_t *g) {
  const cli_command_t *cmd = r->cmd;
  const char *name = r->opt->name;
  size_t need = g->nurls > 1 ? cli_quorum(g->nurls) : 1;
  int rc = cli_open_nodes(cmd, g, need, on_lock_lost, &r->nodes);

  if (rc != 0)
    return rc;
  r->nnodes = g->nurls;
  if (r->opt->permits > 0) {
    rc = dlock_psem_get(r->nodes[0].client, name, &r->sem);
    return rc == 0 ? 0 : cli_fail(cmd, rc, "cannot use the semaphore name");
  }
  if (g->nurls == 1) {
    rc = dlock_get_kind(r->nodes[0].client, r->opt->kind, name, strlen(name),
                        &r->lock);
    return rc == 0 ? 0 : cli_fail(cmd, rc, "cannot use the lock name");
  }

  /* A RedLock over the servers that answered. The library cannot open a
   * client on a server that is down, so those are left out; the majority
   * stays that of every server given (see acquire_with_quorum). */
  dlock_t *locks[CLI_MAX_URLS];
  for (size_t i = 0; i < r->nnodes; i++) {
    cli_node_t *node = &r->nodes[i];
    if (node->client == NULL) {
      cli_report_node(cmd, node, "left out of the RedLock");
      continue;
    }
    red_part_t *part = &r->parts[r->nparts];
    part->node = node;
    if ((rc = dlock_get(node->client, name, &part->lock)) != 0)
      return cli_fail(cmd, rc, "cannot use the lock name");
    locks[r->nparts++] = part->lock;
  }
  r->quorum = cli_quorum(r->nnodes);
  if ((rc = dlock_get_red(locks, r->nparts, &r->lock)) != 0)
    return cli_fail(cmd, rc, "cannot build the RedLock");
  return 0;
}

/* Frees the handles before their clients, the RedLock before its parts. */
static void close_lock(run_state_t *r) {
  dlock_psem_free(r->sem);
  dlock_free(r->lock);
  for (size_t i = 0; i < r->nparts; i++)
    dlock_free(r->parts[i].lock);
  cli_close_nodes(r->nodes, r->nnodes);
}

static int run_main(const cli_command_t *cmd, cli_globals_t *g, int argc,
                    char **argv) {
  run_options_t o = {NULL,
                     NULL,
                     DLOCK_WAIT_FOREVER,
                     DLOCK_WATCHDOG,
                     DEFAULT_GRACE_MS,
                     DLOCK_REENTRANT,
                     NULL,
                     0,
                     EXIT_NOT_ACQUIRED,
                     0,
                     0};
  run_state_t r;
  child_start_state_t start;
  int rc = parse_run_args(cmd, g, argc, argv, &o);

  if (rc != 0)
    return rc < 0 ? EXIT_OK : rc;
  /* Before the library starts threads or touches signals, so the command
   * can be given back exactly the state dlock was started with. */
  child_start_state_capture(&start);
  if (events_open() != 0) {
    cli_error(cmd, "cannot create a pipe: %s", strerror(errno));
    return EXIT_INTERNAL;
  }

  memset(&r, 0, sizeof r);
  r.cmd = cmd;
  r.opt = &o;
  r.owner = dlock_owner_new();
  /* --wait counts from here: a client opened while Redis is failed over
   * waits for it within --wait (no longer: the clients ride outages for
   * --wait, their release too), and the acquisition has what is left. */
  r.wait_deadline =
      o.wait_ms == DLOCK_WAIT_FOREVER ? INT64_MAX : monotonic_ms() + o.wait_ms;
  if (o.wait_ms != DLOCK_WAIT_FOREVER)
    g->outage_wait_ms = o.wait_ms;
  rc = open_lock(&r, g);
  if (rc == 0 && events_catch_signals(&start.ignored) != 0) {
    cli_error(cmd, "cannot install signal handlers: %s", strerror(errno));
    rc = EXIT_INTERNAL;
  }
  if (rc == 0 && acquire_lock(&r, &rc))
    rc = run_command_under_lock(&r, &start);

  close_lock(&r);
  events_close();
  return rc;
}

const cli_command_t cli_cmd_run = {
    "run",
    "dlock run [--wait DUR] [--lease DUR] [--grace DUR] [-q] [-E N] "
    "[-v] [--fair|--read|--write|--permits N] NAME [--] CMD [ARG]...",
    "run a command while holding a lock", run_main, print_run_help};
