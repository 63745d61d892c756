/*
 * A small long-option parser shared by every dlock command. getopt_long
 * would do most of it, but its global state, its GNU argument permutation
 * (which would eat the options of the command under "dlock run") and its
 * terse messages make a tiny dedicated parser the simpler choice.
 *
 * Accepted forms: "--name VALUE", "--name=VALUE", "--flag", "-x" for an
 * option with a short name, "--" to end the options; "-" alone and anything
 * not starting with '-' is a positional argument.
 */
#ifndef DLOCK_TOOLS_ARGS_H
#define DLOCK_TOOLS_ARGS_H

#include <stddef.h>

/* What an option takes: nothing, a value given at most once, or a value
 * that may be given again (each occurrence is reported). */
enum { ARG_FLAG = 0, ARG_VALUE = 1, ARG_VALUES = 2 };

typedef struct arg_option {
  const char *long_name; /* "wait" for --wait */
  char short_name;       /* 'h' for -h, or 0 */
  int takes_value;       /* ARG_FLAG, ARG_VALUE or ARG_VALUES */
} arg_option_t;

enum {
  ARG_END = -1,        /* no arguments left */
  ARG_POSITIONAL = -2, /* a positional argument, in 'value' */
  ARG_DASHDASH = -3,   /* "--"; every later argument is ARG_POSITIONAL */
  ARG_ERROR = -4       /* a malformed option, described in 'problem' */
};

#define ARG_MAX_OPTIONS 24

typedef struct arg_parser {
  const arg_option_t *options;
  size_t noptions;
  int argc;
  char **argv;
  int index;                 /* the next argument to look at */
  int options_ended;         /* 1 after "--" */
  const char *value;         /* value of the last option or positional */
  int seen[ARG_MAX_OPTIONS]; /* how often each option came */
  char problem[160];         /* what was wrong, for ARG_ERROR */
} arg_parser_t;

void arg_parser_init(arg_parser_t *p, const arg_option_t *options,
                     size_t noptions, int argc, char **argv);

/*
 * Consumes the next argument. Returns the index of the option in the table,
 * or one of the ARG_* values above.
 */
int arg_next(arg_parser_t *p);

/* The arguments not consumed yet. */
int arg_remaining_count(const arg_parser_t *p);
char **arg_remaining(const arg_parser_t *p);

#endif
