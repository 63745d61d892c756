/*
 * dlock unlock --force NAME: deletes a lock whoever holds it and wakes its
 * waiters, for the day a holder died with a long lease. It refuses without
 * --force because the holder may well be alive and still working. With
 * several --url (the servers of a RedLock) it does so on every server.
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
          "running loses its lock: use with care.\nA key that is not a lock "
          "(a counter, a hash of your own) or not one of the kind\nnamed is "
          "left alone, and the exit status is 65; the check and the "
          "deletion\nare one atomic step in Redis.\nWith several --url, on "
          "every server, each line prefixed with its URL.\n\n"
          "Options:\n"
          "  --force     required: confirms the deletion (default: refuse)\n"
          "  --fair      the lock must be a fair (or reentrant) lock\n"
          "  --read, --write\n"
          "              the lock must be a read-write lock\n"
          "              (default: whichever kind NAME is, if it is a lock)\n"
          "  -h, --help  show this help\n",
          cli_cmd_unlock.usage);
  fputs("\nExit status: 0 removed, or nothing to remove; 65 not a lock of "
        "the kind named;\n69 Redis unreachable or refusing; 64 bad usage.\n"
        "\nExamples:\n"
        "  dlock unlock --force nightly-report\n"
        "  dlock --url redis://redis.internal:6379/2 unlock --force --write "
        "catalog\n",
        out);
  cli_print_global_options_hint(out);
}

/* Describes the holders about to be removed, so the operator's log says
 * whose lock was broken. */
static void print_removed(const char *prefix, const char *name,
                          const dlock_info_t *info) {
  printf("%sremoved lock '%s'", prefix, name);
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

/* No kind named on the command line: whichever kind the key is. */
#define KIND_ANY ((dlock_kind_t)-1)

/*
 * The kind of handle whose deletion wakes the waiters of the lock 'info'
 * describes: each kind's waiters listen on a channel of their own (a fair
 * lock's on one per waiter, a read-write lock's on the rwlock channel), so
 * deleting through a plain handle would leave them asleep until their
 * timeouts. The kind named on the command line, if any, is the kind the
 * key must be: the library's script refuses any other.
 */
static dlock_kind_t kind_of(const dlock_info_t *info, dlock_kind_t named) {
  if (named != KIND_ANY)
    return named;
  if (info != NULL && info->mode != NULL)
    return DLOCK_WRITE;
  if (info != NULL && info->nwaiters > 0)
    return DLOCK_FAIR;
  return DLOCK_REENTRANT;
}

/* Says why a key was left alone: the script's reason, without the
 * library's wrapping ("redis: NOTLOCK ... (in dlock's ... script)"). */
static int report_not_a_lock(const cli_command_t *cmd, const char *prefix,
                             const char *name) {
  char *detail = cli_last_error_detail();
  const char *why = detail ? strstr(detail, "NOTLOCK ") : NULL;
  char *end = why ? strstr(why, " (in dlock's") : NULL;

  if (end != NULL)
    *end = '\0';
  cli_error(cmd, "%srefusing to delete '%s': %s", prefix, name,
            why ? why + strlen("NOTLOCK ") : dlock_strerror(DLOCK_ENOTLOCK));
  free(detail);
  return EXIT_NOT_A_LOCK;
}

/* Deletes lock 'name' on one server; 'prefix' starts every line printed
 * ("" or the server's URL). 0 or the exit status after a message. */
static int force_unlock(const cli_command_t *cmd, const cli_node_t *node,
                        const char *prefix, const char *name,
                        dlock_kind_t named) {
  dlock_info_t *info = NULL;
  dlock_t *lock = NULL;
  char what[512];
  int rc;

  snprintf(what, sizeof what, "%scannot unlock '%.200s'", prefix, name);
  if (node->client == NULL) {
    cli_report_node(cmd, node, "cannot unlock it there");
    return cli_exit_status_for(node->err);
  }
  /* The holders are read first to report them and to pick the handle that
   * wakes the waiters; a missing report is no reason to leave a stuck lock
   * in place. Whether the key is a lock at all is for the deletion itself
   * to check, atomically: the key may change in between. */
  if (dlock_inspect(node->client, name, strlen(name), &info) != 0)
    info = NULL;
  rc = dlock_get_kind(node->client, kind_of(info, named), name, strlen(name),
                      &lock);
  if (rc == 0)
    rc = dlock_force_unlock(lock);
  if (rc == 1)
    print_removed(prefix, name, info);
  else if (rc == 0)
    printf("%slock '%s' was not held; nothing removed\n", prefix, name);
  dlock_info_free(info);
  dlock_free(lock);
  if (rc == DLOCK_ENOTLOCK)
    return report_not_a_lock(cmd, prefix, name);
  return rc < 0 ? cli_fail(cmd, rc, what) : EXIT_OK;
}

static int unlock_main(const cli_command_t *cmd, cli_globals_t *g, int argc,
                       char **argv) {
  static const arg_option_t options[] = {
      {"force", 0, ARG_FLAG}, {"help", 'h', ARG_FLAG},
      {"url", 0, ARG_VALUES}, {"watchdog", 0, ARG_VALUE},
      {"fair", 0, ARG_FLAG},  {"read", 0, ARG_FLAG},
      {"write", 0, ARG_FLAG}, CLI_TLS_OPTIONS};
  const char *name = NULL, *kind_name = NULL;
  dlock_kind_t named = KIND_ANY;
  int force = 0, rc = 0, failed = 0;
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
    else if (cli_is_global_option(options[opt].long_name))
      rc = cli_set_global_option(cmd, g, options[opt].long_name, p.value);
    else if (options[opt].takes_value == ARG_FLAG) {
      /* --fair, --read or --write. A read-write lock is one key whichever
       * side names it; the write side's handle wakes all its waiters. */
      dlock_kind_t kind = strcmp(options[opt].long_name, "fair") == 0
                              ? DLOCK_FAIR
                              : DLOCK_WRITE;
      if (kind_name != NULL && named != kind)
        rc = cli_usage_error(cmd, "--%s and --%s exclude each other", kind_name,
                             options[opt].long_name);
      named = kind;
      kind_name = options[opt].long_name;
    } else
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

  /* Every server that can be reached is cleared, even when others cannot:
   * what is left behind on those expires or is cleared by a later run. */
  cli_node_t *nodes = NULL;
  size_t nnodes = g->nurls;
  rc = cli_open_nodes(cmd, g, 1, NULL, &nodes);
  for (size_t i = 0; rc == 0 && i < nnodes; i++) {
    char prefix[512] = "";
    if (nnodes > 1)
      snprintf(prefix, sizeof prefix,
               "%.500s: ", nodes[i].shown ? nodes[i].shown : "?");
    int node_rc = force_unlock(cmd, &nodes[i], prefix, name, named);
    if (node_rc != 0)
      failed = node_rc;
  }
  cli_close_nodes(nodes, nnodes);
  return rc != 0 ? rc : failed;
}

const cli_command_t cli_cmd_unlock = {
    "unlock", "dlock unlock --force [--fair|--read|--write] NAME",
    "delete a lock whoever holds it and wake its waiters", unlock_main,
    print_unlock_help};
