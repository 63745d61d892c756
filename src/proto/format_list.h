/*
 * Formatting a list of commands at once, for the calls that send several in
 * one pipelined round (the inspections).
 */
#ifndef DLOCK_PROTO_FORMAT_LIST_H
#define DLOCK_PROTO_FORMAT_LIST_H

#include <stddef.h>

/* One command of a list: 'argc' words. */
typedef struct dlock__words {
  int argc;
  const char *const *argv;
  const size_t *lens;
} dlock__words;

/*
 * Formats each of the 'n' commands of 'w' with dlock__format_argv into
 * 'cmds' and 'lens' (0 for one that could not be). Returns 0, or
 * DLOCK_ENOMEM with "out of memory inspecting 'what'" as its detail; the
 * caller frees 'cmds' with dlock__format_list_free either way.
 */
int dlock__format_list(size_t n, const dlock__words *w, char **cmds,
                       size_t *lens, const char *what);
void dlock__format_list_free(size_t n, char **cmds);

#endif
