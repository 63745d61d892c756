/*
 * Formatting commands in RESP and numbers in decimal, on every call's hot
 * path.
 *
 * The commands are hiredis's: redisFormatSdsCommandArgv, which writes each
 * length with hiredis's own integer code rather than sprintf() as
 * redisFormatCommandArgv does (about 220 ns instead of 300 for a lock's
 * script call). Numbers that go into dlock's own strings (owner fields,
 * latch names, leases) are written here without stdio, which callgrind
 * showed as a fifth of the client's instructions per lock and unlock.
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
 * Formats one command as a RESP array of bulk strings with hiredis ('lens'
 * NULL: the arguments are C strings). Returns its length and the command
 * (NUL-terminated) in '*out', to be freed with dlock__format_free, or -1
 * (nothing allocated) when out of memory.
 */
int dlock__format_argv(char **out, int argc, const char *const *argv,
                       const size_t *lens);

/* Frees a command from dlock__format_argv; NULL is ignored. */
void dlock__format_free(char *cmd);

#endif
