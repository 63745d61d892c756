#define _POSIX_C_SOURCE 200809L
#include "cli.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "duration.h"
#include "exit_codes.h"
#include "url.h"

void cli_globals_init(cli_globals_t *g) {
  const char *env_url = getenv("DLOCK_URL");

  memset(g, 0, sizeof *g);
  g->url =
      (env_url != NULL && env_url[0] != '\0') ? env_url : DLOCK_DEFAULT_URL;
  g->watchdog_ms = 30000;
}

static void print_prefix(const cli_command_t *cmd) {
  if (cmd != NULL && cmd->name != NULL)
    fprintf(stderr, "dlock %s: ", cmd->name);
  else
    fputs("dlock: ", stderr);
}

void cli_error(const cli_command_t *cmd, const char *fmt, ...) {
  va_list ap;

  print_prefix(cmd);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

int cli_usage_error(const cli_command_t *cmd, const char *fmt, ...) {
  va_list ap;

  print_prefix(cmd);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\nusage: %s\n", cmd->usage);
  if (cmd->name != NULL)
    fprintf(stderr, "Try 'dlock %s --help' for more.\n", cmd->name);
  else
    fputs("Try 'dlock --help' for more.\n", stderr);
  return EXIT_USAGE;
}

void cli_print_global_options_help(FILE *out) {
  fputs("Global options (before or after the command name):\n"
        "  --url URL       Redis server, redis://[user:pass@]host[:port][/db]"
        "\n"
        "                  or unix:///path[?db=N]\n"
        "                  (default: $DLOCK_URL, else " DLOCK_DEFAULT_URL ")\n"
        "  --watchdog DUR  lease of a held lock, renewed every third of it "
        "(default: 30s)\n"
        "DUR is 250ms, 5s, 2m, 1h or a bare number of milliseconds.\n",
        out);
}

int cli_is_global_option(const char *name) {
  return strcmp(name, "url") == 0 || strcmp(name, "watchdog") == 0;
}

int cli_set_global_option(const cli_command_t *cmd, cli_globals_t *g,
                          const char *name, const char *value) {
  if (strcmp(name, "url") == 0) {
    if (g->url_given)
      return cli_usage_error(cmd, "option given more than once: '--url'");
    if (value[0] == '\0')
      return cli_usage_error(cmd, "--url: empty URL");
    g->url = value;
    g->url_given = 1;
    return 0;
  }
  if (g->watchdog_given)
    return cli_usage_error(cmd, "option given more than once: '--watchdog'");
  g->watchdog_given = 1;
  /* Renewal runs every third of the timeout, so below a few milliseconds
   * the lock would expire between renewals. */
  return cli_parse_duration(cmd, "watchdog", value, 30, &g->watchdog_ms);
}

int cli_parse_duration(const cli_command_t *cmd, const char *name,
                       const char *value, int64_t min_ms, int64_t *ms) {
  const char *why = NULL;

  if (duration_parse(value, ms, &why) != 0)
    return cli_usage_error(cmd, "--%s: bad duration '%s': %s", name, value,
                           why);
  if (*ms < min_ms) {
    char min_text[32];
    duration_format_exact(min_ms, min_text, sizeof min_text);
    return cli_usage_error(cmd, "--%s: '%s' is too short (at least %s)", name,
                           value, min_text);
  }
  return 0;
}

int cli_check_lock_name(const cli_command_t *cmd, const char *name) {
  size_t len = strlen(name);

  if (len == 0)
    return cli_usage_error(cmd, "the lock name is empty");
  if (len > DLOCK_NAME_MAX)
    return cli_usage_error(cmd,
                           "the lock name is %zu bytes long; the "
                           "limit is %d",
                           len, DLOCK_NAME_MAX);
  return 0;
}

int cli_exit_status_for(int err) {
  switch (err) {
  case DLOCK_ETIMEDOUT:
    return EXIT_NOT_ACQUIRED;
  case DLOCK_ELOST:
    return EXIT_LOCK_LOST;
  case DLOCK_EINVAL:
    return EXIT_USAGE;
  case DLOCK_EIO:
  case DLOCK_EAUTH:
  case DLOCK_EPROTO:
  case DLOCK_ESERVER:
  case DLOCK_ENOQUORUM:
    return EXIT_UNAVAILABLE;
  default:
    return EXIT_INTERNAL;
  }
}

/* The URL whose password must never appear in a message; set once the
 * command line is parsed. */
static const char *secret_url;

/*
 * The library's detail of the last error, with the password of the URL in
 * use masked: some details quote the URL they refused. The result is freed
 * by the caller; NULL when there is no detail.
 */
static char *last_error_detail(void) {
  const char *detail = dlock_last_error();

  if (detail == NULL || detail[0] == '\0')
    return NULL;
  return secret_url ? url_scrub(detail, secret_url) : strdup(detail);
}

int cli_fail(const cli_command_t *cmd, int err, const char *what) {
  char *detail = last_error_detail();

  if (detail != NULL)
    cli_error(cmd, "%s: %s (%s)", what, dlock_strerror(err), detail);
  else
    cli_error(cmd, "%s: %s", what, dlock_strerror(err));
  free(detail);
  return cli_exit_status_for(err);
}

int cli_open_client(const cli_command_t *cmd, const cli_globals_t *g,
                    dlock_lost_cb on_lost, void *on_lost_data,
                    dlock_client_t **out) {
  dlock_options_t o;
  dlock_options_init(&o);
  o.url = g->url;
  o.watchdog_timeout_ms = g->watchdog_ms;
  /* A renewal stuck on an unresponsive server delays the news that the
   * lock expired until the command times out; bounding commands by one
   * renewal period keeps that delay below a third of the lease. With the
   * default 30 s watchdog the library's default timeout already is. */
  if (o.command_timeout_ms > g->watchdog_ms / 3)
    o.command_timeout_ms = g->watchdog_ms / 3;
  o.on_lost = on_lost;
  o.on_lost_data = on_lost_data;

  secret_url = g->url;
  int rc = dlock_client_open(&o, out);
  if (rc == 0)
    return 0;

  char *shown = url_masked(g->url);
  if (rc == DLOCK_EINVAL) {
    char *detail = last_error_detail();
    rc = cli_usage_error(cmd, "--url: cannot use '%s': %s",
                         shown ? shown : "(out of memory)",
                         detail ? detail : "invalid URL");
    free(detail);
    free(shown);
    return rc;
  }
  char what[512];
  snprintf(what, sizeof what, "cannot use %s", shown ? shown : "the Redis URL");
  free(shown);
  return cli_fail(cmd, rc, what);
}
