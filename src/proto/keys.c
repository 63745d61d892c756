/*
 * Key and channel names (see keys.h).
 */
#include "keys.h"
#include "alloc.h"

#include "dlock.h"
#include "error.h"

#include <string.h>

int dlock__prefixed(const char *prefix, const char *name, size_t len,
                    char **out, size_t *out_len) {
  return dlock__prefixed_suffix(prefix, name, len, NULL, out, out_len);
}

int dlock__prefixed_suffix(const char *prefix, const char *name, size_t len,
                           const char *suffix, char **out, size_t *out_len) {
  size_t plen = strlen(prefix), slen = suffix != NULL ? strlen(suffix) : 0;
  int tagged = memchr(name, '{', len) != NULL;
  size_t n = plen + 1 + len + (tagged ? 0 : 2) + (suffix ? 1 + slen : 0);
  char *s = dlock__malloc(n + 1);
  if (s == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory building key names");
  char *p = s;
  memcpy(p, prefix, plen);
  p += plen;
  *p++ = ':';
  if (!tagged)
    *p++ = '{';
  memcpy(p, name, len);
  p += len;
  if (!tagged)
    *p++ = '}';
  if (suffix != NULL) {
    *p++ = ':';
    memcpy(p, suffix, slen);
    p += slen;
  }
  *p = '\0';
  *out = s;
  *out_len = n;
  return 0;
}

int dlock__suffixed(const char *name, size_t len, const char *suffix,
                    size_t suffix_len, char **out, size_t *out_len) {
  int tagged = memchr(name, '{', len) != NULL;
  size_t n = len + 1 + suffix_len + (tagged ? 0 : 2);
  char *s = dlock__malloc(n + 1);
  if (s == NULL)
    return dlock__fail(DLOCK_ENOMEM, "out of memory building key names");
  char *p = s;
  if (!tagged)
    *p++ = '{';
  memcpy(p, name, len);
  p += len;
  if (!tagged)
    *p++ = '}';
  *p++ = ':';
  memcpy(p, suffix, suffix_len);
  p[suffix_len] = '\0';
  *out = s;
  *out_len = n;
  return 0;
}
