#define _POSIX_C_SOURCE 200809L
#include "url.h"

#include <stdlib.h>
#include <string.h>

#define MASK "***"

/*
 * Finds the secret part of 'url': from after "user:" (or right after "://"
 * when there is no ':') up to the last '@'. Returns 0 when there is none.
 */
static int find_password(const char *url, size_t *start, size_t *len) {
  const char *scheme_end = strstr(url, "://");
  const char *at = strrchr(url, '@');

  if (scheme_end == NULL || at == NULL || at < scheme_end)
    return 0;
  const char *userinfo = scheme_end + 3;
  const char *colon = memchr(userinfo, ':', (size_t)(at - userinfo));
  /* Keep the user name (not a secret) when there is one before a ':'. */
  const char *secret = colon ? colon + 1 : userinfo;
  *start = (size_t)(secret - url);
  *len = (size_t)(at - secret);
  return 1;
}

/* A copy of 'text' with every occurrence of 'what' replaced by 'with'. */
static char *replace_all(const char *text, const char *what, const char *with) {
  size_t what_len = strlen(what), with_len = strlen(with), count = 0;

  if (what_len == 0)
    return strdup(text);
  for (const char *p = strstr(text, what); p; p = strstr(p + what_len, what))
    count++;
  char *out = malloc(strlen(text) + count * with_len + 1);
  char *o = out;
  if (out == NULL)
    return NULL;
  for (const char *p = text, *hit; *p; p = hit + what_len) {
    hit = strstr(p, what);
    if (hit == NULL) {
      strcpy(o, p);
      return out;
    }
    memcpy(o, p, (size_t)(hit - p));
    o += hit - p;
    memcpy(o, with, with_len);
    o += with_len;
  }
  *o = '\0';
  return out;
}

char *url_masked(const char *url) {
  size_t start, len;

  if (!find_password(url, &start, &len))
    return strdup(url);
  size_t rest = strlen(url + start + len);
  char *out = malloc(start + strlen(MASK) + rest + 1);
  if (out == NULL)
    return NULL;
  memcpy(out, url, start);
  memcpy(out + start, MASK, strlen(MASK));
  memcpy(out + start + strlen(MASK), url + start + len, rest + 1);
  return out;
}

char *url_scrub(const char *text, const char *url) {
  size_t start, len;
  char *masked = url_masked(url);
  char *out = masked ? replace_all(text, url, masked) : NULL;

  free(masked);
  if (out != NULL && find_password(url, &start, &len) && len >= 4) {
    char *password = strndup(url + start, len);
    char *scrubbed = password ? replace_all(out, password, MASK) : NULL;
    free(password);
    free(out);
    out = scrubbed;
  }
  return out;
}
