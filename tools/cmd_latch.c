/*
 * dlock latch set|count-down|await|count NAME: a count-down latch
 * (Redisson's RCountDownLatch) from shell scripts, so that one script can
 * wait until N others, on any host, have said they are done:
 *
 *   dlock latch set deploy-done 3          # once, by whoever starts it
 *   dlock latch count-down deploy-done     # by each of the three
 *   dlock latch await --wait 10m deploy-done && ./after-deploy.sh
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cli.h"
#include "duration.h"
#include "exit_codes.h"

static void print_latch_help(FILE *out) {
  fprintf(out,
          "usage: %s\n"
          "A count-down latch in Redis, shared with Redisson's "
          "RCountDownLatch of the same\nname:\n"
          "  set NAME COUNT    give the latch COUNT (1 or more) if it has no "
          "count;\n"
          "                    exits 1, changing nothing, if it has one\n"
          "  count-down NAME   count down by one and print the count left; "
          "at 0 every\n"
          "                    waiter wakes; exits 65, changing nothing, at 0 "
          "already\n"
          "  await NAME        wait until the count is 0 (a latch never set "
          "counts as 0)\n"
          "  count NAME        print the count\n\n"
          "Options:\n"
          "  --wait DUR    how long await waits; 0 = just look (default: "
          "forever)\n"
          "  -h, --help    show this help\n",
          cli_cmd_latch.usage);
  fputs("\nExit status: 0; 1 set found a count already; 65 count-down at 0; "
        "75 not at 0\nwithin --wait; 69 Redis unreachable or refusing (or "
        "NAME is not a latch);\n64 bad usage.\n"
        "\nExamples:\n"
        "  dlock latch set shards-loaded 8\n"
        "  dlock latch count-down shards-loaded\n"
        "  dlock latch await --wait 30m shards-loaded && ./serve.sh\n",
        out);
  cli_print_global_options_hint(out);
}

enum { OP_SET, OP_COUNT_DOWN, OP_AWAIT, OP_COUNT };

typedef struct latch_args {
  int op;
  const char *name;
  int64_t count; /* OP_SET */
  int64_t wait_ms;
} latch_args_t;

static int parse_count(const cli_command_t *cmd, const char *value,
                       int64_t *out) {
  char *end;
  errno = 0;
  long long n = strtoll(value, &end, 10);
  if (errno != 0 || end == value || *end != '\0' || n < 1 ||
      n > INT64_C(9007199254740992))
    return cli_usage_error(cmd, "COUNT: '%s' is not a number from 1 to 2^53",
                           value);
  *out = n;
  return 0;
}

/* Parses "OP [options] NAME [COUNT]"; 0, -1 after --help, or EXIT_USAGE. */
static int parse_latch_args(const cli_command_t *cmd, cli_globals_t *g,
                            int argc, char **argv, latch_args_t *a) {
  static const arg_option_t options[] = {{"wait", 0, ARG_VALUE},
                                         {"help", 'h', ARG_FLAG},
                                         {"url", 0, ARG_VALUES},
                                         {"watchdog", 0, ARG_VALUE}};
  static const char *const ops[] = {"set", "count-down", "await", "count"};
  const char *positional[3];
  size_t npos = 0;
  arg_parser_t p;
  int rc = 0, wait_given = 0;

  arg_parser_init(&p, options, sizeof options / sizeof options[0], argc, argv);
  while (rc == 0) {
    int opt = arg_next(&p);
    if (opt == ARG_END)
      break;
    if (opt == ARG_ERROR)
      rc = cli_usage_error(cmd, "%s", p.problem);
    else if (opt == ARG_DASHDASH)
      continue;
    else if (opt == ARG_POSITIONAL && npos < 3)
      positional[npos++] = p.value;
    else if (opt == ARG_POSITIONAL)
      rc = cli_usage_error(cmd, "unexpected argument '%s'", p.value);
    else if (strcmp(options[opt].long_name, "help") == 0) {
      print_latch_help(stdout);
      return -1;
    } else if (strcmp(options[opt].long_name, "wait") == 0) {
      wait_given = 1;
      rc = strcmp(p.value, "forever") == 0
               ? (a->wait_ms = DLOCK_WAIT_FOREVER, 0)
               : cli_parse_duration(cmd, "wait", p.value, 0, &a->wait_ms);
    } else {
      rc = cli_set_global_option(cmd, g, options[opt].long_name, p.value);
    }
  }
  if (rc != 0)
    return rc;
  if (npos == 0)
    return cli_usage_error(cmd, "missing operation: set, count-down, await "
                                "or count");
  a->op = -1;
  for (int i = 0; i < 4; i++)
    if (strcmp(positional[0], ops[i]) == 0)
      a->op = i;
  if (a->op < 0)
    return cli_usage_error(cmd,
                           "unknown operation '%s': set, count-down, await "
                           "or count",
                           positional[0]);
  size_t want = a->op == OP_SET ? 3 : 2;
  if (npos != want)
    return cli_usage_error(cmd, "%s takes %s", ops[a->op],
                           a->op == OP_SET ? "NAME and COUNT" : "NAME alone");
  if (wait_given && a->op != OP_AWAIT)
    return cli_usage_error(cmd, "--wait is for await only");
  a->name = positional[1];
  if ((rc = cli_check_lock_name(cmd, a->name)) != 0)
    return rc;
  if (a->op == OP_SET)
    return parse_count(cmd, positional[2], &a->count);
  return 0;
}

static int run_op(const cli_command_t *cmd, dlock_latch_t *l,
                  const latch_args_t *a) {
  char what[256];
  int64_t n = 0;
  int rc;

  switch (a->op) {
  case OP_SET:
    rc = dlock_latch_try_set_count(l, a->count);
    if (rc == 1)
      return EXIT_OK;
    if (rc == 0) {
      if (dlock_latch_count(l, &n) == 0)
        cli_error(cmd,
                  "latch '%s' has a count already (%" PRId64 "); "
                  "left as it is",
                  a->name, n);
      return 1;
    }
    break;
  case OP_COUNT_DOWN:
    rc = dlock_latch_count_down(l, &n);
    if (rc == 0) {
      printf("%" PRId64 "\n", n);
      return EXIT_OK;
    }
    if (rc == DLOCK_EINVAL) {
      cli_error(cmd,
                "latch '%s' is at 0 (or was never set): not counted "
                "down",
                a->name);
      return EXIT_NOT_A_LOCK;
    }
    break;
  case OP_AWAIT:
    rc = dlock_latch_await(l, a->wait_ms);
    if (rc == 0)
      return EXIT_OK;
    if (rc == DLOCK_ETIMEDOUT) {
      char wait_text[32];
      duration_format_exact(a->wait_ms, wait_text, sizeof wait_text);
      cli_error(cmd, "latch '%s' not at 0 within %s", a->name, wait_text);
      return EXIT_NOT_ACQUIRED;
    }
    break;
  default:
    rc = dlock_latch_count(l, &n);
    if (rc == 0) {
      printf("%" PRId64 "\n", n);
      return EXIT_OK;
    }
  }
  snprintf(what, sizeof what, "latch '%.200s'", a->name);
  return cli_fail(cmd, rc, what);
}

static int latch_main(const cli_command_t *cmd, cli_globals_t *g, int argc,
                      char **argv) {
  latch_args_t a = {0, NULL, 0, DLOCK_WAIT_FOREVER};
  int rc = parse_latch_args(cmd, g, argc, argv, &a);

  if (rc != 0)
    return rc < 0 ? EXIT_OK : rc;
  if (g->nurls > 1)
    return cli_usage_error(cmd, "a latch lives on one server: give a single "
                                "--url");
  dlock_client_t *c = NULL;
  rc = cli_open_client(cmd, g, NULL, NULL, &c);
  if (rc != 0)
    return rc;
  dlock_latch_t *l = NULL;
  rc = dlock_latch_get(c, a.name, &l);
  rc = rc == 0 ? run_op(cmd, l, &a) : cli_fail(cmd, rc, "latch name");
  dlock_latch_free(l);
  dlock_client_close(c);
  return rc;
}

const cli_command_t cli_cmd_latch = {
    "latch",
    "dlock latch [--wait DUR] set NAME COUNT | count-down NAME | await NAME "
    "| count NAME",
    "create, count down or await a count-down latch", latch_main,
    print_latch_help};
