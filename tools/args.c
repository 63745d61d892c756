#include "args.h"

#include <stdio.h>
#include <string.h>

void arg_parser_init(arg_parser_t *p, const arg_option_t *options,
                     size_t noptions, int argc, char **argv) {
  memset(p, 0, sizeof *p);
  p->options = options;
  p->noptions = noptions < ARG_MAX_OPTIONS ? noptions : ARG_MAX_OPTIONS;
  p->argc = argc;
  p->argv = argv;
}

static int find_long(const arg_parser_t *p, const char *name, size_t len) {
  for (size_t i = 0; i < p->noptions; i++) {
    const char *candidate = p->options[i].long_name;
    if (strlen(candidate) == len && strncmp(candidate, name, len) == 0)
      return (int)i;
  }
  return -1;
}

static int find_short(const arg_parser_t *p, char name) {
  for (size_t i = 0; i < p->noptions; i++)
    if (p->options[i].short_name != 0 && p->options[i].short_name == name)
      return (int)i;
  return -1;
}

static int fail(arg_parser_t *p, const char *what, const char *arg) {
  snprintf(p->problem, sizeof p->problem, "%s '%s'", what, arg);
  return ARG_ERROR;
}

/*
 * Takes the value of option 'opt' from 'inline_value' ("--x=V") or from the
 * next argument, and refuses a second occurrence unless the option is
 * declared ARG_VALUES: a repeated value option is almost always a mistake
 * in a script, and silently keeping the last one would hide it.
 */
static int take_value(arg_parser_t *p, int opt, const char *arg,
                      const char *inline_value) {
  if (p->seen[opt] > 1 && p->options[opt].takes_value != ARG_VALUES)
    return fail(p, "option given more than once:", arg);
  if (inline_value != NULL) {
    p->value = inline_value;
    return opt;
  }
  if (p->index >= p->argc)
    return fail(p, "missing value for option", arg);
  p->value = p->argv[p->index++];
  return opt;
}

static int parse_long(arg_parser_t *p, const char *arg) {
  const char *name = arg + 2;
  const char *eq = strchr(name, '=');
  size_t len = eq ? (size_t)(eq - name) : strlen(name);
  int opt = find_long(p, name, len);

  if (opt < 0)
    return fail(p, "unknown option", arg);
  p->seen[opt]++;
  if (!p->options[opt].takes_value) {
    if (eq != NULL)
      return fail(p, "option takes no value:", arg);
    p->value = NULL;
    return opt;
  }
  return take_value(p, opt, arg, eq ? eq + 1 : NULL);
}

static int parse_short(arg_parser_t *p, const char *arg) {
  int opt = arg[2] == '\0' ? find_short(p, arg[1]) : -1;

  if (opt < 0)
    return fail(p, "unknown option", arg);
  p->seen[opt]++;
  if (!p->options[opt].takes_value) {
    p->value = NULL;
    return opt;
  }
  return take_value(p, opt, arg, NULL);
}

int arg_next(arg_parser_t *p) {
  if (p->index >= p->argc)
    return ARG_END;

  const char *arg = p->argv[p->index++];
  if (p->options_ended) {
    p->value = arg;
    return ARG_POSITIONAL;
  }
  if (strcmp(arg, "--") == 0) {
    p->options_ended = 1;
    return ARG_DASHDASH;
  }
  if (arg[0] == '-' && arg[1] == '-')
    return parse_long(p, arg);
  if (arg[0] == '-' && arg[1] != '\0')
    return parse_short(p, arg);
  p->value = arg;
  return ARG_POSITIONAL;
}

int arg_remaining_count(const arg_parser_t *p) { return p->argc - p->index; }

char **arg_remaining(const arg_parser_t *p) { return p->argv + p->index; }
