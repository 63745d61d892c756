/*
 * The little JSON output "dlock status --json" needs. Lock names and owner
 * ids are arbitrary bytes, so strings are escaped here once, correctly,
 * rather than at every printf.
 */
#ifndef DLOCK_TOOLS_JSON_H
#define DLOCK_TOOLS_JSON_H

#include <stddef.h>
#include <stdio.h>

/*
 * Writes 'len' bytes of 's' as a quoted JSON string. Quotes, backslashes
 * and control characters are escaped; valid UTF-8 passes through; bytes that
 * are not valid UTF-8 become U+FFFD so the output always parses.
 */
void json_write_string(FILE *out, const char *s, size_t len);

#endif
