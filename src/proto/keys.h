/*
 * Key and channel names in Redisson's layout. A lock's keys carry its name
 * as a hash tag, "{name}", so that they live in one Redis Cluster slot;
 * a name that holds a '{' is its own hash tag and is used as it is.
 */
#ifndef DLOCK_KEYS_H
#define DLOCK_KEYS_H

#include <stddef.h>

/* Builds "prefix:{name}", or "prefix:name" when the name holds a '{' (it is
 * then taken to carry its own hash tag), as Redisson does. */
int dlock__prefixed(const char *prefix, const char *name, size_t len,
                    char **out, size_t *out_len);

/* The same with ":suffix" appended, in one allocation. */
int dlock__prefixed_suffix(const char *prefix, const char *name, size_t len,
                           const char *suffix, char **out, size_t *out_len);

/* Builds "{name}:suffix" (or "name:suffix" when the name holds a '{'). */
int dlock__suffixed(const char *name, size_t len, const char *suffix,
                    size_t suffix_len, char **out, size_t *out_len);

#endif
