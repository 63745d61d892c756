/*
 * Durations on the command line: "250ms", "5s", "2m", "1h", or "0" alone.
 * Any other number needs its unit: flock(1) reads "-w 5" as seconds and
 * other tools as milliseconds, so a bare "5" is refused rather than
 * guessed. Kept apart from option parsing so both the parser and the tests
 * of the format rules stay small.
 */
#ifndef DLOCK_TOOLS_DURATION_H
#define DLOCK_TOOLS_DURATION_H

#include <stddef.h>
#include <stdint.h>

/* What duration_parse returns for a number other than 0 without a unit. */
#define DURATION_NO_UNIT (-2)

/*
 * Parses 'text' into milliseconds. Returns 0, or -1 (DURATION_NO_UNIT for a
 * bare non-zero number) with a one-line reason (without the offending text,
 * which the caller quotes) in 'why'.
 */
int duration_parse(const char *text, int64_t *ms, const char **why);

/*
 * Writes 'ms' in the shortest exact unit ("250ms", "5s", "2m", "1h",
 * "1500ms") into 'buf', so help texts and messages echo what users type.
 */
void duration_format_exact(int64_t ms, char *buf, size_t size);

/*
 * Writes 'ms' rounded for humans ("850ms", "29.5s", "4m59s", "2h05m") into
 * 'buf', for remaining times in status tables.
 */
void duration_format_human(int64_t ms, char *buf, size_t size);

#endif
