/*
 * dlock: run a command under a Redis lock shared with Redisson, inspect
 * locks and clear them. This file parses the global options and hands the
 * rest of the command line to the command named by the first positional
 * argument.
 */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "cli.h"
#include "exit_codes.h"

static const cli_command_t *const commands[] = {&cli_cmd_run, &cli_cmd_status,
                                                &cli_cmd_unlock, &cli_cmd_latch,
                                                &cli_cmd_demo};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static void print_main_help(FILE *out);

static const cli_command_t dlock_itself = {
    NULL, "dlock [global options] COMMAND [ARGS]...", NULL, NULL,
    print_main_help};

static void print_main_help(FILE *out) {
  fprintf(out,
          "usage: %s\n"
          "Run commands under a distributed lock kept in Redis, compatible "
          "with Redisson.\n\n"
          "Commands:\n",
          dlock_itself.usage);
  for (size_t i = 0; i < NCOMMANDS; i++)
    fprintf(out, "  %-8s %s\n", commands[i]->name, commands[i]->summary);
  fputs("\nOptions:\n"
        "  -h, --help      show this help (each command has its own --help)\n"
        "  -V, --version   show the version\n",
        out);
  cli_print_global_options_help(out);
  fputs("\nExit status: the command's own status under 'run'; 64 bad usage; "
        "65 'unlock'\nfound a key that is not a lock of the kind named; 69 "
        "Redis unreachable or\nrefusing; 70 internal error; 75 lock not "
        "acquired in time (or 'run -E N');\n76 lock lost while the command "
        "ran; 126/127 command not executable/found;\n128+N command killed "
        "by signal N.\n"
        "\nExamples:\n"
        "  dlock run --wait 0 nightly-report -- ./report.sh\n"
        "  # the password from a file, through the environment, never in "
        "argv\n"
        "  DLOCK_PASSWORD=\"$(cat /run/secrets/redis)\" \\\n"
        "    dlock --url redis://redis:6379 status --json nightly-report\n"
        "  dlock --url redis://r1 --url redis://r2 --url redis://r3 \\\n"
        "    run deploy -- ./deploy.sh\n",
        out);
}

static const cli_command_t *find_command(const char *name) {
  for (size_t i = 0; i < NCOMMANDS; i++)
    if (strcmp(commands[i]->name, name) == 0)
      return commands[i];
  return NULL;
}

int main(int argc, char **argv) {
  static const arg_option_t options[] = {{"help", 'h', ARG_FLAG},
                                         {"version", 'V', ARG_FLAG},
                                         {"url", 0, ARG_VALUES},
                                         {"watchdog", 0, ARG_VALUE},
                                         CLI_TLS_OPTIONS};
  cli_globals_t globals;
  arg_parser_t p;

  cli_globals_init(&globals);
  arg_parser_init(&p, options, sizeof options / sizeof options[0], argc - 1,
                  argv + 1);
  for (;;) {
    int opt = arg_next(&p);
    if (opt == ARG_ERROR)
      return cli_usage_error(&dlock_itself, "%s", p.problem);
    if (opt == ARG_END || opt == ARG_DASHDASH)
      return cli_usage_error(&dlock_itself, "missing command");
    if (opt == ARG_POSITIONAL) {
      const cli_command_t *cmd = find_command(p.value);
      if (cmd == NULL)
        return cli_usage_error(&dlock_itself, "unknown command '%s'", p.value);
      return cmd->run(cmd, &globals, arg_remaining_count(&p),
                      arg_remaining(&p));
    }
    const char *name = options[opt].long_name;
    if (strcmp(name, "help") == 0) {
      print_main_help(stdout);
      return EXIT_OK;
    }
    if (strcmp(name, "version") == 0) {
      printf("dlock %s\n", DLOCK_VERSION_STRING);
      return EXIT_OK;
    }
    int rc = cli_set_global_option(&dlock_itself, &globals, name, p.value);
    if (rc != 0)
      return rc;
  }
}
