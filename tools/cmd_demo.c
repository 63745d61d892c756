/*
 * dlock demo: the "MoonCake" flash sale from the command line. Buyers in
 * several processes sell a stock kept in Redis, once guarded by the lock
 * and once without it, and the two outcomes are printed side by side: with
 * the lock every item is sold exactly once; without it, items that do not
 * exist are sold and updates are lost.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "args.h"
#include "cli.h"
#include "demo_sale.h"
#include "demo_server.h"
#include "exit_codes.h"
#include "url.h"

#define MAX_PROCESSES 64
#define RUN_TIMEOUT_MS 60000

static void print_demo_help(FILE *out) {
  fprintf(out,
          "usage: %s\n"
          "Sells a stock of moon cakes kept in Redis to buyers in several "
          "processes, once\nguarded by the lock \"MoonCake\" and once "
          "without it, and prints both outcomes\nside by side. Without --url "
          "or $DLOCK_URL it starts a private redis-server on a\nunix socket "
          "and stops it afterwards; on a given server it overwrites the "
          "keys\nMoonCake, MoonCakeStock and MoonCake:*.\n\n"
          "Options:\n"
          "  --workers N    buyers in all (default: 100)\n"
          "  --processes P  processes the buyers are spread over (default: "
          "4)\n"
          "  --stock S      moon cakes in stock (default: 90)\n"
          "  -h, --help     show this help\n",
          cli_cmd_demo.usage);
  fputs("\nExit status: 0 when the guarded sale sold every cake exactly once, "
        "70 when not,\n69 when no Redis server could be used.\n"
        "\nExamples:\n"
        "  dlock demo\n"
        "  dlock --url redis://127.0.0.1:6379/15 demo --workers 200 "
        "--processes 8\n",
        out);
  cli_print_global_options_hint(out);
}

typedef struct demo_options {
  int buyers;
  int processes;
  long long stock;
} demo_options_t;

static volatile sig_atomic_t interrupted_by;

static void on_interrupt(int signo) { interrupted_by = signo; }

static int64_t monotonic_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL); /* an interrupt ends it early, which is wanted */
}

/* ---- command line --------------------------------------------------- */

static int parse_count(const cli_command_t *cmd, const char *name,
                       const char *value, long long min, long long max,
                       long long *out) {
  char *end;
  errno = 0;
  long long v = strtoll(value, &end, 10);

  if (errno != 0 || end == value || *end != '\0' || v < min || v > max)
    return cli_usage_error(cmd,
                           "--%s: '%s' is not a number from %lld to "
                           "%lld",
                           name, value, min, max);
  *out = v;
  return 0;
}

static int apply_demo_option(const cli_command_t *cmd, cli_globals_t *g,
                             demo_options_t *o, const char *name,
                             const char *value) {
  long long v = 0;
  int rc = 0;

  if (strcmp(name, "workers") == 0) {
    rc = parse_count(cmd, name, value, 1, 10000, &v);
    o->buyers = (int)v;
  } else if (strcmp(name, "processes") == 0) {
    rc = parse_count(cmd, name, value, 1, MAX_PROCESSES, &v);
    o->processes = (int)v;
  } else if (strcmp(name, "stock") == 0) {
    rc = parse_count(cmd, name, value, 0, 1000000000, &v);
    o->stock = v;
  } else {
    rc = cli_set_global_option(cmd, g, name, value);
  }
  return rc;
}

/* 0, -1 after --help, or EXIT_USAGE. */
static int parse_demo_args(const cli_command_t *cmd, cli_globals_t *g, int argc,
                           char **argv, demo_options_t *o) {
  static const arg_option_t options[] = {{"workers", 0, ARG_VALUE},
                                         {"processes", 0, ARG_VALUE},
                                         {"stock", 0, ARG_VALUE},
                                         {"help", 'h', ARG_FLAG},
                                         {"url", 0, ARG_VALUES},
                                         {"watchdog", 0, ARG_VALUE},
                                         CLI_TLS_OPTIONS};
  arg_parser_t p;
  int rc = 0;

  arg_parser_init(&p, options, sizeof options / sizeof options[0], argc, argv);
  while (rc == 0) {
    int opt = arg_next(&p);
    if (opt == ARG_END)
      break;
    if (opt == ARG_ERROR)
      rc = cli_usage_error(cmd, "%s", p.problem);
    else if (opt == ARG_DASHDASH || opt == ARG_POSITIONAL)
      rc = cli_usage_error(cmd, "unexpected argument '%s'",
                           opt == ARG_DASHDASH ? "--" : p.value);
    else if (strcmp(options[opt].long_name, "help") == 0) {
      print_demo_help(stdout);
      return -1;
    } else
      rc = apply_demo_option(cmd, g, o, options[opt].long_name, p.value);
  }
  /* The sale keeps its stock on one server; a RedLock would guard a
   * stock that is not replicated across its servers. */
  if (rc == 0 && g->nurls > 1)
    rc = cli_usage_error(cmd, "demo uses a single --url");
  if (rc == 0 && o->processes > o->buyers)
    rc = cli_usage_error(cmd, "--processes %d is more than --workers %d",
                         o->processes, o->buyers);
  return rc;
}

/* ---- one sale ------------------------------------------------------- */

static void draw_progress(const char *label, long long done, int total) {
  enum { WIDTH = 40 };
  char bar[WIDTH + 1];
  int filled = total > 0 ? (int)(done * WIDTH / total) : WIDTH;

  for (int i = 0; i < WIDTH; i++)
    bar[i] = i < filled ? '#' : '.';
  bar[WIDTH] = '\0';
  printf("\r  %-13s [%s] %3lld/%d buyers", label, bar, done, total);
  fflush(stdout);
}

/* Reaps the buyer processes that have exited; returns how many still run
 * and counts those that failed in '*failures'. */
static int reap_buyers(pid_t *pids, int n, int *failures) {
  int running = 0;

  for (int i = 0; i < n; i++) {
    int status;
    if (pids[i] <= 0)
      continue;
    if (waitpid(pids[i], &status, WNOHANG) == pids[i]) {
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        (*failures)++;
      pids[i] = 0;
    } else {
      running++;
    }
  }
  return running;
}

static void stop_buyers(pid_t *pids, int n) {
  for (int i = 0; i < n; i++) {
    if (pids[i] > 0) {
      kill(pids[i], SIGKILL);
      waitpid(pids[i], NULL, 0);
      pids[i] = 0;
    }
  }
}

/*
 * Runs one sale and waits for it, redrawing a progress bar (on a terminal)
 * every 100 ms; '*final' is the stock left. The data client is closed
 * while the buyers are forked, so that no thread of the library runs in
 * this process at the fork. Returns 0, or -1 when Redis could not be used,
 * a buyer process failed, the sale took too long or the user interrupted
 * it.
 */
static int run_sale(const cli_command_t *cmd, const cli_globals_t *g,
                    const sale_plan_t *plan, long long stock, const char *label,
                    sale_counts_t *counts, long long *final) {
  pid_t pids[MAX_PROCESSES];
  int failures = 0, tty = isatty(STDOUT_FILENO);
  int64_t deadline = monotonic_ms() + RUN_TIMEOUT_MS;
  dlock_client_t *data = NULL;

  if (cli_open_client(cmd, g, NULL, NULL, &data) != 0)
    return -1;
  int rc = sale_reset(data, stock);
  dlock_client_close(data);
  if (rc != 0) {
    cli_error(cmd, "cannot prepare the sale in Redis");
    return -1;
  }
  int started = sale_start(plan, pids);
  if (started < plan->processes)
    failures++;
  if (cli_open_client(cmd, g, NULL, NULL, &data) != 0) {
    stop_buyers(pids, started);
    return -1;
  }
  int running;
  while ((running = reap_buyers(pids, started, &failures)) > 0 &&
         !interrupted_by && monotonic_ms() < deadline) {
    sale_read_counts(data, counts);
    if (tty)
      draw_progress(label, sale_finished(counts), plan->buyers);
    sleep_ms(100);
  }
  stop_buyers(pids, started);
  sale_read_counts(data, counts);
  *final = sale_get_int(data, SALE_STOCK_KEY);
  dlock_client_close(data);
  draw_progress(label, sale_finished(counts), plan->buyers);
  putchar('\n');
  if (interrupted_by)
    return -1;
  if (running > 0) {
    cli_error(cmd, "the %s sale did not finish within %d s", label,
              RUN_TIMEOUT_MS / 1000);
    return -1;
  }
  if (failures > 0) {
    cli_error(cmd, "the %s sale had %d buyer process(es) fail", label,
              failures);
    return -1;
  }
  return 0;
}

/* ---- the report ----------------------------------------------------- */

static void print_row(const char *what, long long locked, long long unlocked) {
  printf("  %-22s %12lld %15lld\n", what, locked, unlocked);
}

/* Sales whose write overwrote another's: sold, yet the stock did not go
 * down for them. */
static long long lost_updates(const sale_counts_t *n, long long stock,
                              long long final_stock) {
  return n->sold - (stock - final_stock);
}

static void print_report(const demo_options_t *o, const sale_counts_t *l,
                         long long l_final, const sale_counts_t *u,
                         long long u_final) {
  printf("\n  %-22s %12s %15s\n", "", "with dlock", "without lock");
  print_row("sold", l->sold, u->sold);
  print_row("refused (no stock)", l->refused, u->refused);
  print_row("timed out (5 s wait)", l->timedout, u->timedout);
  print_row("final stock", l_final, u_final);
  print_row("lost updates", lost_updates(l, o->stock, l_final),
            lost_updates(u, o->stock, u_final));
  if (l->failed || u->failed)
    print_row("failed (errors)", l->failed, u->failed);
  putchar('\n');
  if (u->sold > o->stock || lost_updates(u, o->stock, u_final) > 0)
    printf("  Without the lock, %lld cakes were sold from a stock of %lld, "
           "and %lld sales\n  overwrote each other.\n",
           u->sold, o->stock, lost_updates(u, o->stock, u_final));
}

/* The guarded sale is right when it sold exactly what it could. */
static int locked_sale_is_right(const demo_options_t *o, const sale_counts_t *l,
                                long long final) {
  long long can_sell = o->buyers < o->stock ? o->buyers : o->stock;

  return l->sold == can_sell && l->refused == o->buyers - can_sell &&
         l->timedout == 0 && l->failed == 0 && final == o->stock - can_sell;
}

/* ---- command -------------------------------------------------------- */

/* Runs both sales against g->url; returns the exit status. */
static int run_demo(const cli_command_t *cmd, cli_globals_t *g,
                    const demo_options_t *o) {
  /* The buyers' own clients need the password from the environment too. */
  char *url = cli_effective_url(g->url);
  sale_plan_t plan = {url, g->watchdog_ms, 1, o->buyers, o->processes};
  sale_counts_t locked, unlocked;
  long long locked_final = 0, unlocked_final = 0;

  if (url == NULL)
    return cli_fail_with(cmd, DLOCK_ENOMEM, "demo", NULL);
  printf("Selling %lld moon cakes to %d buyers in %d processes\n", o->stock,
         o->buyers, o->processes);
  int rc =
      run_sale(cmd, g, &plan, o->stock, "with dlock", &locked, &locked_final);
  plan.use_lock = 0;
  if (rc == 0)
    rc = run_sale(cmd, g, &plan, o->stock, "without lock", &unlocked,
                  &unlocked_final);
  cli_free_url(url);
  if (rc != 0 && interrupted_by) {
    cli_error(cmd, "interrupted; the buyers were stopped");
    return EXIT_SIGNAL_BASE + interrupted_by;
  }
  if (rc != 0)
    return EXIT_INTERNAL;

  print_report(o, &locked, locked_final, &unlocked, unlocked_final);
  if (locked_sale_is_right(o, &locked, locked_final)) {
    printf("  With dlock, every cake was sold exactly once.\n");
    return EXIT_OK;
  }
  cli_error(cmd, "the guarded sale went wrong");
  return EXIT_INTERNAL;
}

/* Checks that the server is usable by opening (and closing) a lock client:
 * the same validation and messages as every other command, and no thread
 * left running when the buyers are forked. */
static int check_server(const cli_command_t *cmd, const cli_globals_t *g) {
  dlock_client_t *client = NULL;
  int rc = cli_open_client(cmd, g, NULL, NULL, &client);

  dlock_client_close(client);
  return rc;
}

static void catch_interrupts(void) {
  struct sigaction sa;

  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
}

static int demo_main(const cli_command_t *cmd, cli_globals_t *g, int argc,
                     char **argv) {
  demo_options_t o = {100, 4, 90};
  demo_server_t server;
  int rc = parse_demo_args(cmd, g, argc, argv, &o);

  if (rc != 0)
    return rc < 0 ? EXIT_OK : rc;
  /* A server named by --url or $DLOCK_URL is used as it is. */
  const char *env_url = getenv("DLOCK_URL");
  int own_server = !g->url_given && (env_url == NULL || env_url[0] == '\0');
  catch_interrupts();
  if (own_server) {
    char why[160];
    if (demo_server_start(&server, why, sizeof why) != 0) {
      cli_error(cmd, "%s", why);
      return EXIT_UNAVAILABLE;
    }
    g->url = server.url;
    printf("Started a private redis-server (pid %ld) on %s\n", (long)server.pid,
           server.url);
  } else {
    char *shown = url_masked(g->url);
    printf("Using the Redis server at %s\n", shown ? shown : "?");
    free(shown);
  }
  rc = check_server(cmd, g);
  if (rc == 0)
    rc = run_demo(cmd, g, &o);
  if (own_server)
    demo_server_stop(&server);
  return rc;
}

const cli_command_t cli_cmd_demo = {
    "demo", "dlock demo [--workers N] [--processes P] [--stock S]",
    "the MoonCake flash sale, with and without the lock", demo_main,
    print_demo_help};
