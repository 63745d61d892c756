/*
 * Text for terminal tables: lock names are any bytes, so they are made
 * visible (control characters and bytes that are not UTF-8 escaped) and
 * measured in terminal columns rather than bytes, so that a table whose
 * names hold "é" or "日本" stays aligned.
 */
#ifndef DLOCK_TOOLS_WIDTH_H
#define DLOCK_TOOLS_WIDTH_H

#include <stddef.h>
#include <stdio.h>

/*
 * A copy of 's' with control characters (C0, DEL and C1) and every byte
 * that is not part of a well-formed UTF-8 sequence written as \xNN, so that
 * a name cannot break or recolour the table. Freed by the caller; NULL when
 * out of memory.
 */
char *width_visible_copy(const char *s);

/*
 * The columns a terminal gives 's' (well-formed UTF-8, as the copy above
 * is): 2 for East Asian wide and fullwidth characters and emoji, 0 for
 * combining marks and zero-width characters, 1 for the others. The same
 * on every system, whatever its locale.
 */
size_t width_of(const char *s);

/* Prints 's' and pads it with spaces to 'columns' wide. */
void width_print_padded(FILE *out, const char *s, size_t columns);

#endif
