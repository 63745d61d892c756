/*
 * dlock unlock --force NAME: deletes a lock whoever holds it and wakes its
 * waiters, for the day a holder died with a long lease. It refuses without
 * --force because the holder may well be alive and still working.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cli.h"
#include "exit_codes.h"

static void print_unlock_help(FILE *out) {
  fprintf(out,
          "usage: %s\n"
          "Deletes the lock NAME whoever holds it, wakes its waiters and "
          "prints what it\nremoved. The fencing-token counter is kept, so "
          "later holders still get larger\ntokens. A holder that is still "
          "running loses its lock: use with care.\n\n"
          "Options:\n"
          "  --force     required: confirms the deletion (default: refuse)\n"
          "  -h, --help  show this help\n",
          cli_cmd_unlock.usage);
  cli_print_global_options_help(out);
  fputs("\nExamples:\n"
        "  dlock unlock --force nightly-report\n"
        "  dlock --url redis://redis.internal:6379/2 unlock --force deploy\n",
        out);
}

/* Describes the holders about to be removed, so the operator's log says
 * whose lock was broken. */
static void print_removed(const char *name, const dlock_info_t *info) {
  printf("removed lock '%s'", name);
  if (info == NULL || info->nholders == 0) {
    printf("\n");
    return;
  }
  printf(" held by");
  for (size_t i = 0; i < info->nholders; i++)
    printf("%s %s (x%" PRId64 ")", i ? "," : "", info->holders[i].owner,
           info->holders[i].count);
  if (info->token != 0)
    printf(", last token %" PRIu64, info->token);
  printf("\n");
}

static int force_unlock(const cli_command_t *cmd, dlock_client_t *client,
                        const char *name) {
  dlock_info_t *info = NULL;
  dlock_t *lock = NULL;
  char what[256];
  int rc;

  snprintf(what, sizeof what, "cannot unlock '%.200s'", name);
  /* The holders are read first only to report them; a missing report is
   * no reason to leave a stuck lock in place. */
  if (dlock_inspect(client, name, strlen(name), &info) != 0)
    info = NULL;
  rc = dlock_get(client, name, &lock);
  if (rc == 0)
    rc = dlock_force_unlock(lock);
  if (rc == 1)
    print_removed(name, info);
  else if (rc == 0)
    printf("lock '%s' was not held; nothing removed\n", name);
  dlock_info_free(info);
  dlock_free(lock);
  return rc < 0 ? cli_fail(cmd, rc, what) : EXIT_OK;
}

static int unlock_main(const cli_command_t *cmd, cli_globals_t *g, int argc,
                       char **argv) {
  static const arg_option_t options[] = {
      {"force", 0, 0}, {"help", 'h', 0}, {"url", 0, 1}, {"watchdog", 0, 1}};
  const char *name = NULL;
  int force = 0, rc = 0;
  arg_parser_t p;

  arg_parser_init(&p, options, sizeof options / sizeof options[0], argc, argv);
  while (rc == 0) {
    int opt = arg_next(&p);
    if (opt == ARG_END)
      break;
    if (opt == ARG_ERROR)
      rc = cli_usage_error(cmd, "%s", p.problem);
    else if (opt == ARG_DASHDASH)
      continue; /* a name starting with '-' may follow */
    else if (opt == ARG_POSITIONAL && name != NULL)
      rc = cli_usage_error(cmd, "one lock name at a time ('%s' and '%s')", name,
                           p.value);
    else if (opt == ARG_POSITIONAL)
      name = p.value;
    else if (strcmp(options[opt].long_name, "help") == 0) {
      print_unlock_help(stdout);
      return EXIT_OK;
    } else if (strcmp(options[opt].long_name, "force") == 0)
      force = 1;
    else
      rc = cli_set_global_option(cmd, g, options[opt].long_name, p.value);
  }
  if (rc != 0)
    return rc;
  if (name == NULL)
    return cli_usage_error(cmd, "missing lock name");
  if ((rc = cli_check_lock_name(cmd, name)) != 0)
    return rc;
  if (!force)
    return cli_usage_error(cmd,
                           "refusing to delete lock '%s' without "
                           "--force: its holder may still be working",
                           name);

  dlock_client_t *client = NULL;
  rc = cli_open_client(cmd, g, NULL, NULL, &client);
  if (rc == 0)
    rc = force_unlock(cmd, client, name);
  dlock_client_close(client);
  return rc;
}

const cli_command_t cli_cmd_unlock = {
    "unlock", "dlock unlock --force NAME",
    "delete a lock whoever holds it and wake its waiters", unlock_main,
    print_unlock_help};
