/*
 * dlock status [--json] NAME...: what Redis knows about each lock, taken by
 * dlock or by Redisson (the layout is the same): held or free, holders with
 * their hold counts, time to expiry, the last fencing token, and the queue
 * of a fair lock.
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "args.h"
#include "cli.h"
#include "duration.h"
#include "exit_codes.h"
#include "json.h"

static void print_status_help(FILE *out) {
  fprintf(out,
          "usage: %s\n"
          "Shows each lock: free or held, holders (owner id and hold count), "
          "time to\nexpiry, the last fencing token, and a fair lock's queue. "
          "Read-only.\n\n"
          "Options:\n"
          "  --json      one JSON object per lock and line, for scripts "
          "(default: a table)\n"
          "  -h, --help  show this help\n",
          cli_cmd_status.usage);
  cli_print_global_options_help(out);
  fputs("\nJSON fields: name, locked, mode (\"read\"/\"write\" or null), "
        "ttl_ms (0 free,\n-1 no expiry), token, holders[{owner,count}], "
        "waiters[{owner,deadline_ms}].\n"
        "\nExamples:\n"
        "  dlock status nightly-report\n"
        "  dlock status --json nightly-report deploy | jq .holders\n",
        out);
}

/* ---- fetching ------------------------------------------------------- */

typedef struct lock_report {
  const char *name;
  dlock_info_t *info;
} lock_report_t;

static void free_reports(lock_report_t *reports, size_t n) {
  for (size_t i = 0; i < n; i++)
    dlock_info_free(reports[i].info);
  free(reports);
}

/* Inspects every name before printing anything, so the table columns can
 * be sized and a failure does not leave half a table behind. */
static int fetch_reports(const cli_command_t *cmd, dlock_client_t *client,
                         const char *const *names, size_t n,
                         lock_report_t **out) {
  lock_report_t *reports = calloc(n, sizeof *reports);

  if (reports == NULL)
    return cli_fail(cmd, DLOCK_ENOMEM, "status");
  for (size_t i = 0; i < n; i++) {
    reports[i].name = names[i];
    int rc =
        dlock_inspect(client, names[i], strlen(names[i]), &reports[i].info);
    if (rc != 0) {
      char what[256];
      snprintf(what, sizeof what, "cannot inspect lock '%.200s'", names[i]);
      free_reports(reports, n);
      return cli_fail(cmd, rc, what);
    }
  }
  *out = reports;
  return 0;
}

/* ---- JSON ----------------------------------------------------------- */

static void print_json_holders(FILE *out, const dlock_info_t *info) {
  fputs("\"holders\":[", out);
  for (size_t i = 0; i < info->nholders; i++) {
    const dlock_holder_t *h = &info->holders[i];
    fputs(i ? ",{\"owner\":" : "{\"owner\":", out);
    json_write_string(out, h->owner, strlen(h->owner));
    fprintf(out, ",\"count\":%" PRId64 "}", h->count);
  }
  fputc(']', out);
}

static void print_json_waiters(FILE *out, const dlock_info_t *info) {
  fputs("\"waiters\":[", out);
  for (size_t i = 0; i < info->nwaiters; i++) {
    const dlock_waiter_t *w = &info->waiters[i];
    fputs(i ? ",{\"owner\":" : "{\"owner\":", out);
    json_write_string(out, w->owner, strlen(w->owner));
    fprintf(out, ",\"deadline_ms\":%" PRId64 "}", w->deadline_ms);
  }
  fputc(']', out);
}

static void print_json_report(FILE *out, const lock_report_t *r) {
  const dlock_info_t *info = r->info;
  /* -1 for "no expiry" follows Redis's PTTL and stays exact in every JSON
   * reader, unlike INT64_MAX. */
  int64_t ttl = info->ttl_ms == INT64_MAX ? -1 : info->ttl_ms;

  fputs("{\"name\":", out);
  json_write_string(out, r->name, strlen(r->name));
  fprintf(out, ",\"locked\":%s,\"mode\":", info->locked ? "true" : "false");
  if (info->mode != NULL)
    json_write_string(out, info->mode, strlen(info->mode));
  else
    fputs("null", out);
  fprintf(out, ",\"ttl_ms\":%" PRId64 ",\"token\":%" PRIu64 ",", ttl,
          info->token);
  print_json_holders(out, info);
  fputc(',', out);
  print_json_waiters(out, info);
  fputs("}\n", out);
}

/* ---- table ---------------------------------------------------------- */

/* A copy of 's' with control characters written as \xNN, so a name with a
 * newline or an escape sequence cannot break or recolour the table. */
static char *visible_copy(const char *s) {
  char *out = malloc(strlen(s) * 4 + 1);
  char *p = out;

  if (out == NULL)
    return NULL;
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c < 0x20 || c == 0x7F)
      p += sprintf(p, "\\x%02x", c);
    else
      *p++ = (char)c;
  }
  *p = '\0';
  return out;
}

static const char *state_text(const dlock_info_t *info) {
  if (!info->locked)
    return "free";
  return info->mode != NULL ? info->mode : "held";
}

static void format_ttl(const dlock_info_t *info, char *buf, size_t size) {
  if (!info->locked || info->ttl_ms <= 0)
    snprintf(buf, size, "-");
  else if (info->ttl_ms == INT64_MAX)
    snprintf(buf, size, "no-expiry");
  else
    duration_format_human(info->ttl_ms, buf, size);
}

static void format_token(const dlock_info_t *info, char *buf, size_t size) {
  if (info->token == 0)
    snprintf(buf, size, "-");
  else
    snprintf(buf, size, "%" PRIu64, info->token);
}

static int64_t wall_clock_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void print_holders_cell(FILE *out, const dlock_info_t *info) {
  if (info->nholders == 0) {
    fputc('-', out);
    return;
  }
  for (size_t i = 0; i < info->nholders; i++) {
    char *owner = visible_copy(info->holders[i].owner);
    fprintf(out, "%s%s (x%" PRId64 ")", i ? ", " : "", owner ? owner : "?",
            info->holders[i].count);
    free(owner);
  }
}

static void print_waiter_lines(FILE *out, const dlock_info_t *info) {
  int64_t now = wall_clock_ms();

  for (size_t i = 0; i < info->nwaiters; i++) {
    const dlock_waiter_t *w = &info->waiters[i];
    char *owner = visible_copy(w->owner);
    char left[32];
    duration_format_human(w->deadline_ms > now ? w->deadline_ms - now : 0, left,
                          sizeof left);
    fprintf(out, "  waiter %zu: %s (dropped in %s unless it retries)\n", i + 1,
            owner ? owner : "?", left);
    free(owner);
  }
}

static int print_table(FILE *out, const lock_report_t *reports, size_t n) {
  char **shown = calloc(n, sizeof *shown);
  int name_width = 4; /* strlen("NAME") */

  if (shown == NULL)
    return -1;
  for (size_t i = 0; i < n; i++) {
    shown[i] = visible_copy(reports[i].name);
    if (shown[i] == NULL)
      break;
    int len = (int)strlen(shown[i]);
    if (len > name_width)
      name_width = len < 60 ? len : 60;
  }
  fprintf(out, "%-*s  %-5s  %-9s  %-6s  %s\n", name_width, "NAME", "STATE",
          "TTL", "TOKEN", "HOLDERS");
  for (size_t i = 0; i < n; i++) {
    const dlock_info_t *info = reports[i].info;
    char ttl[32], token[32];
    format_ttl(info, ttl, sizeof ttl);
    format_token(info, token, sizeof token);
    fprintf(out, "%-*s  %-5s  %-9s  %-6s  ", name_width,
            shown[i] ? shown[i] : "?", state_text(info), ttl, token);
    print_holders_cell(out, info);
    fputc('\n', out);
    print_waiter_lines(out, info);
  }
  for (size_t i = 0; i < n; i++)
    free(shown[i]);
  free(shown);
  return 0;
}

/* ---- command -------------------------------------------------------- */

/* Adds a lock name from the command line to 'names' after checking it. */
static int add_name(const cli_command_t *cmd, const char **names,
                    size_t *nnames, const char *name) {
  int rc = cli_check_lock_name(cmd, name);
  if (rc == 0)
    names[(*nnames)++] = name;
  return rc;
}

/* Parses the options and names of "dlock status"; 0, -1 after --help, or
 * the exit status of a usage error. */
static int parse_status_args(const cli_command_t *cmd, cli_globals_t *g,
                             int argc, char **argv, const char **names,
                             size_t *nnames, int *json) {
  static const arg_option_t options[] = {
      {"json", 0, 0}, {"help", 'h', 0}, {"url", 0, 1}, {"watchdog", 0, 1}};
  arg_parser_t p;
  int rc = 0;

  arg_parser_init(&p, options, sizeof options / sizeof options[0], argc, argv);
  while (rc == 0) {
    int opt = arg_next(&p);
    if (opt == ARG_END)
      break;
    if (opt == ARG_ERROR) {
      rc = cli_usage_error(cmd, "%s", p.problem);
    } else if (opt == ARG_DASHDASH) {
      continue; /* later arguments are names, even when starting with '-' */
    } else if (opt == ARG_POSITIONAL) {
      rc = add_name(cmd, names, nnames, p.value);
    } else if (strcmp(options[opt].long_name, "help") == 0) {
      print_status_help(stdout);
      return -1;
    } else if (strcmp(options[opt].long_name, "json") == 0) {
      *json = 1;
    } else {
      rc = cli_set_global_option(cmd, g, options[opt].long_name, p.value);
    }
  }
  if (rc == 0 && *nnames == 0)
    rc = cli_usage_error(cmd, "missing lock name");
  return rc;
}

static int status_main(const cli_command_t *cmd, cli_globals_t *g, int argc,
                       char **argv) {
  const char **names = calloc((size_t)argc + 1, sizeof *names);
  size_t nnames = 0;
  int json = 0;

  if (names == NULL)
    return cli_fail(cmd, DLOCK_ENOMEM, "status");
  int rc = parse_status_args(cmd, g, argc, argv, names, &nnames, &json);
  if (rc != 0) {
    free(names);
    return rc < 0 ? EXIT_OK : rc;
  }

  dlock_client_t *client = NULL;
  lock_report_t *reports = NULL;
  rc = cli_open_client(cmd, g, NULL, NULL, &client);
  if (rc == 0)
    rc = fetch_reports(cmd, client, names, nnames, &reports);
  if (rc == 0) {
    if (json)
      for (size_t i = 0; i < nnames; i++)
        print_json_report(stdout, &reports[i]);
    else if (print_table(stdout, reports, nnames) != 0)
      rc = cli_fail(cmd, DLOCK_ENOMEM, "status");
    free_reports(reports, nnames);
  }
  dlock_client_close(client);
  free(names);
  return rc;
}

const cli_command_t cli_cmd_status = {
    "status", "dlock status [--json] NAME...",
    "show holders, TTL, fencing token and waiters of locks", status_main,
    print_status_help};
