/*
 * Error reporting inside the library: every failure records a readable
 * detail for the calling thread and returns its DLOCK_E* code, so a caller
 * can write "return dlock__fail(DLOCK_EINVAL, "name is empty");".
 */
#ifndef DLOCK_ERROR_H
#define DLOCK_ERROR_H

#include "dlock.h"

#if defined(__GNUC__)
#define DLOCK__PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define DLOCK__PRINTF(a, b)
#endif

/* Records the detail for this thread and returns 'code'. */
int dlock__fail(int code, const char *fmt, ...) DLOCK__PRINTF(2, 3);

/* Records a detail copied verbatim (it may contain '%'). */
int dlock__fail_text(int code, const char *text);

/* Maps the text of a Redis error reply to a code and records it. */
int dlock__fail_reply(const char *text, size_t len);

/* The same for an error raised inside one of dlock's scripts, named in the
 * detail (Redis itself names only its SHA-1). */
int dlock__fail_reply_in(const char *text, size_t len, const char *script);

#endif
