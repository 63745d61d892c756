/*
 * What the dlock commands share: the global options, the command table
 * entries, and the helpers that turn bad input and library errors into one
 * clear line on stderr plus the documented exit status (see exit_codes.h).
 */
#ifndef DLOCK_TOOLS_CLI_H
#define DLOCK_TOOLS_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "dlock.h"

/* The options every command accepts, before or after its name. */
typedef struct cli_globals {
  const char *url;     /* --url, else $DLOCK_URL, else DLOCK_DEFAULT_URL */
  int64_t watchdog_ms; /* --watchdog, default 30 s */
  int url_given;
  int watchdog_given;
} cli_globals_t;

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

/* The global options lines that every help text ends with. */
void cli_print_global_options_help(FILE *out);

/* 1 when --NAME is a global option ("url", "watchdog"). */
int cli_is_global_option(const char *name);

/* Applies global option --NAME VALUE; 0, or EXIT_USAGE after a message. */
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

/* The exit status that stands for library error 'err'. */
int cli_exit_status_for(int err);

/*
 * Prints "dlock CMD: WHAT: <description> (<detail>)" for library error
 * 'err' and returns cli_exit_status_for(err).
 */
int cli_fail(const cli_command_t *cmd, int err, const char *what);

#endif
