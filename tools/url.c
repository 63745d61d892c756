#define _POSIX_C_SOURCE 200809L
#include "url.h"

#include <stdlib.h>
#include <string.h>

char *url_masked(const char *url) {
  const char *scheme_end = strstr(url, "://");
  const char *at = strrchr(url, '@');

  if (scheme_end == NULL || at == NULL || at < scheme_end)
    return strdup(url);

  const char *userinfo = scheme_end + 3;
  const char *colon = memchr(userinfo, ':', (size_t)(at - userinfo));
  /* Keep the user name (not a secret) when there is one before a ':'. */
  size_t keep = colon ? (size_t)(colon + 1 - url) : (size_t)(userinfo - url);
  size_t rest = strlen(at);
  char *out = malloc(keep + 3 + rest + 1);

  if (out == NULL)
    return NULL;
  memcpy(out, url, keep);
  memcpy(out + keep, "***", 3);
  memcpy(out + keep + 3, at, rest + 1);
  return out;
}
