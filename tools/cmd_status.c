/*
 * dlock status [--json] NAME...: what Redis knows about each lock, taken by
 * dlock or by Redisson (the layout is the same): held or free (or the mode
 * of a read-write lock), holders with their hold counts, time to expiry,
 * the last fencing token, and the queue of a fair lock; for a semaphore or
 * a count-down latch (a counter under the name), the count and the
 * permits taken with their lease ends. With several --url
 * (the servers of a RedLock) it shows each server's view, row by row, since
 * the servers may well disagree.
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "args.h"
#include "cli.h"
#include "duration.h"
#include "exit_codes.h"
#include "json.h"
#include "width.h"

static void print_status_help(FILE *out) {
  fprintf(out,
          "usage: %s\n"
          "Shows each lock: free, held, or the mode of a read-write lock "
          "(read/write),\nholders (owner id and hold count), time to expiry, "
          "the last fencing token, and\na fair lock's queue with each "
          "waiter's deadline. A semaphore or count-down latch (a number "
          "under NAME) shows\nas a counter: the free permits or the count, "
          "and the permits taken with when\ntheir lease ends. Read-only. "
          "With several --url, one row per server and lock,\nprefixed with "
          "the server's URL.\n\n"
          "Options:\n"
          "  --json      one JSON object per lock and line, for scripts "
          "(default: a table)\n"
          "  --watch     show it again every --interval until interrupted "
          "(a table is\n"
          "              redrawn in place on a terminal)\n"
          "  --interval DUR  the time between two views with --watch "
          "(default: 1s)\n"
          "  --count N   with --watch, stop after N views\n"
          "  -h, --help  show this help\n",
          cli_cmd_status.usage);
  fputs("\nJSON fields: name, locked, mode (\"read\"/\"write\" or null), "
        "ttl_ms (0 free;\n9223372036854775807, the C API's DLOCK_NO_EXPIRY, "
        "held without expiry), token,\nholders[{owner,count}], "
        "waiters[{owner,deadline_ms}]; with several --url also\nnode (the "
        "URL), and only node, name and error for a server that could not\n"
        "be read. A counter instead: name, kind (\"counter\"), count, "
        "ttl_ms,\npermits[{id,expires_ms}] (an expirable-permit semaphore's, "
        "else empty).\n"
        "\nExit status: 0; 69 when a server could not be read (the others "
        "are still shown).\n"
        "\nExamples:\n"
        "  dlock status nightly-report\n"
        "  dlock status --json nightly-report deploy | jq .holders\n",
        out);
  cli_print_global_options_hint(out);
}

/* ---- fetching ------------------------------------------------------- */

/* One lock as one server sees it, or why that server could not say. */
typedef struct lock_report {
  const char *name;
  const cli_node_t *node;
  dlock_info_t *info; /* NULL when 'err' or 'counter' */
  /* A semaphore's or latch's counter found under the name, or NULL. */
  dlock_counter_info_t *counter;
  int err;
  char *detail; /* the detail of 'err', masked; or NULL */
} lock_report_t;

static void free_reports(lock_report_t *reports, size_t n) {
  for (size_t i = 0; i < n; i++) {
    dlock_info_free(reports[i].info);
    dlock_counter_info_free(reports[i].counter);
    free(reports[i].detail);
  }
  free(reports);
}

/* The error text of a report that has no info: the library's description
 * and its detail, in a new string. */
static char *report_error_text(const lock_report_t *r) {
  const char *what = dlock_strerror(r->err);
  size_t size = strlen(what) + (r->detail ? strlen(r->detail) : 0) + 4;
  char *text = malloc(size);

  if (text == NULL)
    return NULL;
  if (r->detail != NULL)
    snprintf(text, size, "%s (%s)", what, r->detail);
  else
    snprintf(text, size, "%s", what);
  return text;
}

/*
 * Inspects every name on every node before printing anything, so the table
 * columns can be sized and a failure does not leave half a table behind.
 * The reports are ordered by name, then node. A node that could not be
 * opened or read gets an error report; with a single node that failure
 * is reported on stderr at once and its exit status returned instead.
 */
static int fetch_reports(const cli_command_t *cmd, const cli_node_t *nodes,
                         size_t nnodes, const char *const *names, size_t nnames,
                         lock_report_t **out) {
  lock_report_t *reports = calloc(nnames * nnodes, sizeof *reports);

  if (reports == NULL)
    return cli_fail(cmd, DLOCK_ENOMEM, "status");
  for (size_t i = 0; i < nnames; i++) {
    for (size_t j = 0; j < nnodes; j++) {
      lock_report_t *r = &reports[i * nnodes + j];
      r->name = names[i];
      r->node = &nodes[j];
      if (nodes[j].client == NULL) {
        r->err = nodes[j].err;
        r->detail = nodes[j].detail ? strdup(nodes[j].detail) : NULL;
        continue;
      }
      /* A counter (a semaphore or a latch) under the name, or a lock. */
      dlock_counter_info_t *counter = NULL;
      r->err = dlock_inspect_counter(nodes[j].client, names[i],
                                     strlen(names[i]), &counter);
      if (r->err == 0 && (counter->exists || counter->npermits > 0)) {
        r->counter = counter;
        continue;
      }
      dlock_counter_info_free(counter);
      r->err =
          dlock_inspect(nodes[j].client, names[i], strlen(names[i]), &r->info);
      if (r->err == 0)
        continue;
      r->info = NULL;
      if (nnodes == 1) {
        char what[256];
        snprintf(what, sizeof what, "cannot inspect lock '%.200s'", names[i]);
        int rc = cli_fail(cmd, r->err, what);
        free_reports(reports, nnames * nnodes);
        return rc;
      }
      r->detail = cli_last_error_detail();
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

static void print_json_counter(FILE *out, const dlock_counter_info_t *c) {
  fprintf(out,
          ",\"kind\":\"counter\",\"count\":%" PRId64 ",\"ttl_ms\":%" PRId64
          ",\"permits\":[",
          c->count, c->ttl_ms);
  for (size_t i = 0; i < c->npermits; i++) {
    fputs(i ? ",{\"id\":" : "{\"id\":", out);
    json_write_string(out, c->permits[i].id, strlen(c->permits[i].id));
    fprintf(out, ",\"expires_ms\":%" PRId64 "}", c->permits[i].expires_ms);
  }
  fputs("]}\n", out);
}

/* Prints one report as a JSON object on a line of its own; 'with_node'
 * adds the server's URL (password masked) as the first member. */
static void print_json_report(FILE *out, const lock_report_t *r,
                              int with_node) {
  const dlock_info_t *info = r->info;

  fputc('{', out);
  if (with_node) {
    const char *shown = r->node->shown ? r->node->shown : "?";
    fputs("\"node\":", out);
    json_write_string(out, shown, strlen(shown));
    fputc(',', out);
  }
  fputs("\"name\":", out);
  json_write_string(out, r->name, strlen(r->name));
  if (r->counter != NULL) {
    print_json_counter(out, r->counter);
    return;
  }
  if (info == NULL) {
    char *text = report_error_text(r);
    fputs(",\"error\":", out);
    json_write_string(out, text ? text : "?", text ? strlen(text) : 1);
    fputs("}\n", out);
    free(text);
    return;
  }
  /* "No expiry" is DLOCK_NO_EXPIRY here as in the C API: one value, larger
   * than any real time to expiry, so "ttl_ms >= needed" reads right. */
  int64_t ttl = info->ttl_ms;
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

static const char *state_text(const dlock_info_t *info) {
  if (!info->locked)
    return "free";
  return info->mode != NULL ? info->mode : "held";
}

static void format_ttl(const dlock_info_t *info, char *buf, size_t size) {
  if (!info->locked || info->ttl_ms <= 0)
    snprintf(buf, size, "-");
  else if (info->ttl_ms == DLOCK_NO_EXPIRY)
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
    char *owner = width_visible_copy(info->holders[i].owner);
    fprintf(out, "%s%s (x%" PRId64 ")", i ? ", " : "", owner ? owner : "?",
            info->holders[i].count);
    free(owner);
  }
}

static void print_waiter_lines(FILE *out, const dlock_info_t *info) {
  int64_t now = wall_clock_ms();

  for (size_t i = 0; i < info->nwaiters; i++) {
    const dlock_waiter_t *w = &info->waiters[i];
    char *owner = width_visible_copy(w->owner);
    char left[32];
    duration_format_human(w->deadline_ms > now ? w->deadline_ms - now : 0, left,
                          sizeof left);
    fprintf(out, "  waiter %zu: %s (dropped in %s unless it retries)\n", i + 1,
            owner ? owner : "?", left);
    free(owner);
  }
}

/* A counter's row: its count, what it may be, and the permits taken. */
static void print_counter_row(FILE *out, const dlock_counter_info_t *c) {
  char ttl[32];
  int64_t now = wall_clock_ms();

  if (c->ttl_ms <= 0 || c->ttl_ms == DLOCK_NO_EXPIRY)
    snprintf(ttl, sizeof ttl, "-");
  else
    duration_format_human(c->ttl_ms, ttl, sizeof ttl);
  if (c->expirable)
    fprintf(out,
            "  %-5s  %-9s  %-6s  %" PRId64 " free, %zu taken (%" PRId64
            " permits in all)\n",
            "sem", ttl, "-", c->count, c->npermits,
            c->count + (int64_t)c->npermits);
  else
    fprintf(out,
            "  %-5s  %-9s  %-6s  count %" PRId64 " (a semaphore's free "
            "permits, or a latch's count)\n",
            "count", ttl, "-", c->count);
  for (size_t i = 0; i < c->npermits; i++) {
    const dlock_permit_info_t *p = &c->permits[i];
    char left[32];
    if (p->expires_ms == DLOCK_NO_EXPIRY) {
      fprintf(out, "  permit %s: no lease\n", p->id);
    } else if (p->expires_ms <= now) {
      fprintf(out, "  permit %s: lease ended (back at the next use)\n", p->id);
    } else {
      duration_format_human(p->expires_ms - now, left, sizeof left);
      fprintf(out, "  permit %s: lease ends in %s\n", p->id, left);
    }
  }
}

/* The width of a column holding text 'columns' wide at most, within
 * [width, 60]: a longer name overflows its row rather than widen them
 * all. */
static size_t column_width(size_t width, size_t columns) {
  size_t w = columns < 60 ? columns : 60;
  return w > width ? w : width;
}

/* With several nodes: "NAME: held on 2 of the 3 servers (a majority)". */
static void print_majority_line(FILE *out, const char *shown_name,
                                const lock_report_t *reports, size_t nnodes) {
  size_t held = 0;

  for (size_t j = 0; j < nnodes; j++)
    held += (reports[j].info != NULL && reports[j].info->locked) ||
            (reports[j].counter != NULL && reports[j].counter->npermits > 0);
  fprintf(out, "%s: held on %zu of the %zu servers (%s)\n", shown_name, held,
          nnodes, held >= cli_quorum(nnodes) ? "a majority" : "no majority");
}

/* Prints the table: one row per lock, or per lock and server when there
 * are several servers, each row followed by its fair-lock waiters. */
static int print_table(FILE *out, const lock_report_t *reports, size_t nnames,
                       size_t nnodes) {
  size_t n = nnames * nnodes;
  char **shown = calloc(n, sizeof *shown);
  size_t name_width = 4; /* strlen("NAME") */
  size_t node_width = 4; /* strlen("NODE") */

  if (shown == NULL)
    return -1;
  for (size_t i = 0; i < n; i++) {
    shown[i] = width_visible_copy(reports[i].name);
    if (shown[i] == NULL)
      break;
    name_width = column_width(name_width, width_of(shown[i]));
    if (reports[i].node->shown != NULL)
      node_width = column_width(node_width, width_of(reports[i].node->shown));
  }
  if (nnodes > 1) {
    width_print_padded(out, "NODE", node_width);
    fputs("  ", out);
  }
  width_print_padded(out, "NAME", name_width);
  fprintf(out, "  %-5s  %-9s  %-6s  %s\n", "STATE", "TTL", "TOKEN", "HOLDERS");
  for (size_t i = 0; i < n; i++) {
    const dlock_info_t *info = reports[i].info;
    const char *name = shown[i] ? shown[i] : "?";
    if (nnodes > 1) {
      width_print_padded(out,
                         reports[i].node->shown ? reports[i].node->shown : "?",
                         node_width);
      fputs("  ", out);
    }
    width_print_padded(out, name, name_width);
    if (reports[i].counter != NULL) {
      print_counter_row(out, reports[i].counter);
    } else if (info == NULL) {
      char *text = report_error_text(&reports[i]);
      fprintf(out, "  error: %s\n", text ? text : "?");
      free(text);
    } else {
      char ttl[32], token[32];
      format_ttl(info, ttl, sizeof ttl);
      format_token(info, token, sizeof token);
      fprintf(out, "  %-5s  %-9s  %-6s  ", state_text(info), ttl, token);
      print_holders_cell(out, info);
      fputc('\n', out);
      print_waiter_lines(out, info);
    }
    if (nnodes > 1 && i % nnodes == nnodes - 1)
      print_majority_line(out, name, &reports[i + 1 - nnodes], nnodes);
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
/* How often and how long --watch shows the locks. */
typedef struct watch_options {
  int on;
  int64_t interval_ms;
  long count; /* views before stopping; 0: until interrupted */
} watch_options_t;

static int parse_status_args(const cli_command_t *cmd, cli_globals_t *g,
                             int argc, char **argv, const char **names,
                             size_t *nnames, int *json, watch_options_t *w) {
  static const arg_option_t options[] = {
      {"json", 0, ARG_FLAG},      {"watch", 0, ARG_FLAG},
      {"interval", 0, ARG_VALUE}, {"count", 0, ARG_VALUE},
      {"help", 'h', ARG_FLAG},    {"url", 0, ARG_VALUES},
      {"watchdog", 0, 1},         CLI_TLS_OPTIONS};
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
    } else if (strcmp(options[opt].long_name, "watch") == 0) {
      w->on = 1;
    } else if (strcmp(options[opt].long_name, "interval") == 0) {
      rc = cli_parse_duration(cmd, "interval", p.value, 1, &w->interval_ms);
    } else if (strcmp(options[opt].long_name, "count") == 0) {
      char *end = NULL;
      w->count = strtol(p.value, &end, 10);
      if (end == p.value || *end != '\0' || w->count < 1)
        rc = cli_usage_error(cmd,
                             "--count wants a number of views, 1 or "
                             "more: '%s'",
                             p.value);
    } else {
      rc = cli_set_global_option(cmd, g, options[opt].long_name, p.value);
    }
  }
  if (rc == 0 && *nnames == 0)
    rc = cli_usage_error(cmd, "missing lock name");
  if (rc == 0 && !w->on && w->count > 0)
    rc = cli_usage_error(cmd, "--count goes with --watch");
  return rc;
}

/* Fetches and prints every lock once; 0, EXIT_UNAVAILABLE when a server
 * could not be read, or an error status. */
static int show_once(const cli_command_t *cmd, cli_node_t *nodes, size_t nnodes,
                     const char **names, size_t nnames, int json) {
  lock_report_t *reports = NULL;
  int rc = fetch_reports(cmd, nodes, nnodes, names, nnames, &reports);
  if (rc != 0)
    return rc;
  size_t n = nnames * nnodes;
  if (json)
    for (size_t i = 0; i < n; i++)
      print_json_report(stdout, &reports[i], nnodes > 1);
  else if (print_table(stdout, reports, nnames, nnodes) != 0)
    rc = cli_fail(cmd, DLOCK_ENOMEM, "status");
  for (size_t i = 0; i < n && rc == 0; i++)
    if (reports[i].info == NULL && reports[i].counter == NULL)
      rc = EXIT_UNAVAILABLE;
  free_reports(reports, n);
  return rc;
}

/* --watch: the view again every interval. A table on a terminal is drawn
 * over the last one, with the time it was taken; elsewhere (a pipe, a
 * file) and in JSON the views follow each other. A server that cannot be
 * read is shown as such and watched on. */
static int watch(const cli_command_t *cmd, cli_node_t *nodes, size_t nnodes,
                 const char **names, size_t nnames, int json,
                 const watch_options_t *w) {
  int tty = !json && isatty(STDOUT_FILENO);
  int rc = 0;
  for (long k = 0; w->count == 0 || k < w->count; k++) {
    if (k > 0) {
      struct timespec ts = {(time_t)(w->interval_ms / 1000),
                            (long)(w->interval_ms % 1000) * 1000000L};
      while (nanosleep(&ts, &ts) != 0) {
      }
    }
    if (tty)
      fputs("\033[H\033[2J", stdout);
    if (!json) {
      time_t now = time(NULL);
      struct tm tm;
      char when[32];
      localtime_r(&now, &tm);
      strftime(when, sizeof(when), "%H:%M:%S", &tm);
      printf("%s every %.3gs\n", when, (double)w->interval_ms / 1000);
    }
    rc = show_once(cmd, nodes, nnodes, names, nnames, json);
    fflush(stdout);
    if (rc != 0 && rc != EXIT_UNAVAILABLE)
      break;
  }
  return rc;
}

static int status_main(const cli_command_t *cmd, cli_globals_t *g, int argc,
                       char **argv) {
  const char **names = calloc((size_t)argc + 1, sizeof *names);
  size_t nnames = 0;
  int json = 0;
  watch_options_t w = {0, 1000, 0};

  if (names == NULL)
    return cli_fail(cmd, DLOCK_ENOMEM, "status");
  int rc = parse_status_args(cmd, g, argc, argv, names, &nnames, &json, &w);
  if (rc != 0) {
    free(names);
    return rc < 0 ? EXIT_OK : rc;
  }

  /* A server that cannot be reached is shown as such among the others:
   * status is what one runs to find out which servers are in trouble. */
  cli_node_t *nodes = NULL;
  size_t nnodes = g->nurls;
  rc = cli_open_nodes(cmd, g, 1, NULL, &nodes);
  if (rc == 0 && w.on)
    rc = watch(cmd, nodes, nnodes, names, nnames, json, &w);
  else if (rc == 0)
    rc = show_once(cmd, nodes, nnodes, names, nnames, json);
  cli_close_nodes(nodes, nnodes);
  free(names);
  return rc;
}

const cli_command_t cli_cmd_status = {
    "status",
    "dlock status [--json] [--watch [--interval DUR] [--count N]] NAME...",
    "show holders, TTL, fencing token and waiters of locks; a semaphore's "
    "permits, a latch's count",
    status_main, print_status_help};
