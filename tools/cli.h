/*
 * What the dlock commands share: the global options, the command table
 * entries, and the helpers that turn bad input and library errors into one
 * clear line on stderr plus the documented exit status (see exit_codes.h).
 */
#ifndef DLOCK_TOOLS_CLI_H
#define DLOCK_TOOLS_CLI_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dlock.h"

/* The most --url options one command line may give. A RedLock rarely spans
 * more than 5 or 7 masters; the bound keeps the option storage fixed. */
#define CLI_MAX_URLS 16

/* The options every command accepts, before or after its name. */
typedef struct cli_globals {
  /* --url, repeatable (several: a RedLock over independent masters), else
   * $DLOCK_URL, else DLOCK_DEFAULT_URL. 'url' is urls[0]. */
  const char *urls[CLI_MAX_URLS];
  size_t nurls;
  const char *url;
  int64_t watchdog_ms; /* --watchdog, default 30 s */
  int url_given;
  int watchdog_given;
  /* TLS for rediss:// URLs, with redis-cli's names: --cacert, --cacertdir,
   * --cert, --key, --sni, --insecure. NULL/0 when not given. */
  const char *cacert;
  const char *cacertdir;
  const char *cert;
  const char *key;
  const char *sni;
  int insecure;
  /* The clients' outage_wait_ms: set by a command whose --wait bounds all
   * it does (dlock run), so that an outage met at the open is ridden within
   * that wait, as the acquisition rides one; -1 (default): the library's
   * default. */
  int64_t outage_wait_ms;
} cli_globals_t;

/* The TLS options, to append to a command's option table. */
#define CLI_TLS_OPTIONS                                                        \
  {"cacert", 0, ARG_VALUE}, {"cacertdir", 0, ARG_VALUE},                       \
      {"cert", 0, ARG_VALUE}, {"key", 0, ARG_VALUE}, {"sni", 0, ARG_VALUE}, {  \
    "insecure", 0, ARG_FLAG                                                    \
  }

/* One Redis server of the command line and the client opened on it. */
typedef struct cli_node {
  const char *url;
  char *shown;            /* 'url' with its password masked */
  dlock_client_t *client; /* NULL when it could not be opened */
  int err;                /* why not: a DLOCK_E* code; 0 when open */
  char *detail;           /* the library's detail of 'err', masked; or NULL */
  /* Set by the lost-lock callback of the client (see cli_open_nodes). */
  atomic_int lost;
} cli_node_t;

typedef struct cli_command {
  const char *name;    /* "run"; NULL for dlock itself */
  const char *usage;   /* the synopsis line, without "usage: " */
  const char *summary; /* one line for "dlock --help" */
  int (*run)(const struct cli_command *self, cli_globals_t *g, int argc,
             char **argv);
  void (*help)(FILE *out);
} cli_command_t;

extern const cli_command_t cli_cmd_run;
extern const cli_command_t cli_cmd_status;
extern const cli_command_t cli_cmd_unlock;
extern const cli_command_t cli_cmd_demo;
extern const cli_command_t cli_cmd_latch;

/* The defaults, before the command line and $DLOCK_URL are applied. */
void cli_globals_init(cli_globals_t *g);

/* Prints "dlock CMD: " (or "dlock: ") and the formatted message on stderr. */
void cli_error(const cli_command_t *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Prints the message, the usage line and a hint to --help; returns 64. */
int cli_usage_error(const cli_command_t *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* The global options and the environment, for "dlock --help". */
void cli_print_global_options_help(FILE *out);

/* The line a command's --help ends with instead: where to find them. */
void cli_print_global_options_hint(FILE *out);

/* 1 when --NAME is a global option ("url", "watchdog", the TLS ones). */
int cli_is_global_option(const char *name);

/* The majority of 'n' nodes: n/2 + 1. */
size_t cli_quorum(size_t n);

/* Applies global option --NAME VALUE ('value' NULL for --insecure); 0, or
 * EXIT_USAGE after a message. */
int cli_set_global_option(const cli_command_t *cmd, cli_globals_t *g,
                          const char *name, const char *value);

/*
 * Parses the duration 'value' of option --NAME into '*ms', requiring at
 * least 'min_ms'. 0, or EXIT_USAGE after a message naming the option.
 */
int cli_parse_duration(const cli_command_t *cmd, const char *name,
                       const char *value, int64_t min_ms, int64_t *ms);

/* Checks a lock name given on the command line; 0 or EXIT_USAGE. */
int cli_check_lock_name(const cli_command_t *cmd, const char *name);

/*
 * Opens a client on g->url with g's options, calling 'on_lost' (may be
 * NULL) when a held lock is lost. 0, or the exit status to use after
 * printing why (the URL with its password masked).
 */
int cli_open_client(const cli_command_t *cmd, const cli_globals_t *g,
                    dlock_lost_cb on_lost, void *on_lost_data,
                    dlock_client_t **out);

/*
 * The URL a client is opened on: 'url' with the password from the
 * environment (DLOCK_PASSWORD, else REDISCLI_AUTH) when it has none of its
 * own. NULL when out of memory; freed with cli_free_url(), which wipes it.
 */
char *cli_effective_url(const char *url);
void cli_free_url(char *url);

/*
 * Opens one client per URL of 'g' (the slow part, connecting, for all at
 * once) into the new array '*out' of g->nurls nodes, freed with
 * cli_close_nodes(). The lost-lock callback of node i's client is
 * 'on_lost' (may be NULL) with &(*out)[i] as its data. With one URL this is
 * cli_open_client(): any failure is reported and its exit status returned.
 * With several, a bad URL is a usage error (64); nodes that cannot be
 * reached are left with client NULL and their error, unreported, for the
 * caller to present; fewer than 'need' open ones is reported with the
 * reason of each and gives 69. Returns 0 or the exit status.
 */
int cli_open_nodes(const cli_command_t *cmd, const cli_globals_t *g,
                   size_t need, dlock_lost_cb on_lost, cli_node_t **out);

/* Prints "dlock CMD: URL: <error> (<detail>)" for a node left unopened. */
void cli_report_node(const cli_command_t *cmd, const cli_node_t *node,
                     const char *what);

/* Closes the clients and frees the array. NULL is ignored. */
void cli_close_nodes(cli_node_t *nodes, size_t n);

/* The library's detail of the last error on this thread with the
 * passwords of the command line's URLs masked; NULL when there is none.
 * Freed by the caller. */
char *cli_last_error_detail(void);

/* The exit status that stands for library error 'err'. */
int cli_exit_status_for(int err);

/*
 * Prints "dlock CMD: WHAT: <description> (<detail>)" for library error
 * 'err' and returns cli_exit_status_for(err).
 */
int cli_fail(const cli_command_t *cmd, int err, const char *what);

/* The same with a detail taken earlier (the library's detail is per
 * thread: an error met on another thread brings its detail along), masked
 * already; NULL for none. */
int cli_fail_with(const cli_command_t *cmd, int err, const char *what,
                  const char *detail);

#endif
