/*
 * Formatting commands in RESP and numbers in decimal, on every call's hot
 * path.
 *
 * hiredis's redisFormatCommandArgv formats each length with sprintf(),
 * which made up about half of the instructions a client spent per lock and
 * unlock (callgrind, 16 threads on distinct locks). These produce the same
 * bytes (test_unit_format compares them with hiredis's) without stdio.
 */
#ifndef DLOCK_PROTO_FORMAT_H
#define DLOCK_PROTO_FORMAT_H

#include <stddef.h>
#include <stdint.h>

/* Room for any 64-bit integer in decimal, its sign and a NUL. */
#define DLOCK__DEC_MAX 21

/* Writes 'v' in decimal and a NUL into 'buf' (at least DLOCK__DEC_MAX
 * bytes); returns the number of digits (and sign) written. */
size_t dlock__fmt_u64(char *buf, uint64_t v);
size_t dlock__fmt_i64(char *buf, int64_t v);

/*
 * Formats one command as a RESP array of bulk strings, exactly as
 * redisFormatCommandArgv does ('lens' NULL: the arguments are C strings).
 * Returns its length and the command in '*out', to be freed with
 * dlock__format_free, or -1 (nothing allocated) when out of memory.
 */
int dlock__format_argv(char **out, int argc, const char *const *argv,
                       const size_t *lens);

/* The same, into 'buf' when the command and a NUL fit in its 'cap' bytes
 * ('*out' is then 'buf'), else into a new allocation: a lone call's
 * command then costs no allocation. Free with dlock__format_done. */
int dlock__format_argv_into(char *buf, size_t cap, char **out, int argc,
                            const char *const *argv, const size_t *lens);

void dlock__format_free(char *cmd);

/* Frees 'cmd' unless it is 'buf' (the caller's own buffer). */
static inline void dlock__format_done(char *cmd, const char *buf) {
  if (cmd != buf)
    dlock__format_free(cmd);
}

#endif
