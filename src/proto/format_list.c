/*
 * Lists of commands formatted at once (see format_list.h).
 */
#include "format_list.h"
#include "proto/format.h"

#include "error.h"

int dlock__format_list(size_t n, const dlock__words *w, char **cmds,
                       size_t *lens, const char *what) {
  int rc = 0;
  for (size_t i = 0; i < n; i++) {
    int len = dlock__format_argv(&cmds[i], w[i].argc, w[i].argv, w[i].lens);
    if (len < 0)
      rc = dlock__fail(DLOCK_ENOMEM, "out of memory inspecting %s", what);
    lens[i] = len < 0 ? 0 : (size_t)len;
  }
  return rc;
}

void dlock__format_list_free(size_t n, char **cmds) {
  for (size_t i = 0; i < n; i++)
    if (cmds[i] != NULL)
      dlock__format_free(cmds[i]);
}
