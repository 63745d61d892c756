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

/* The query parameter of a redis-sentinel:// URL that holds the
 * Sentinels' own password. */
#define SENTINEL_PASSWORD "sentinel_password="

/* Finds the value of the Sentinels' password in a URL's query. */
static int find_sentinel_password(const char *url, size_t *start, size_t *len) {
  const char *query = strchr(url, '?');
  for (const char *p = query; p != NULL; p = strchr(p + 1, '&')) {
    if (strncmp(p + 1, SENTINEL_PASSWORD, strlen(SENTINEL_PASSWORD)) == 0) {
      const char *value = p + 1 + strlen(SENTINEL_PASSWORD);
      *start = (size_t)(value - url);
      *len = strcspn(value, "&");
      return 1;
    }
  }
  return 0;
}

/* A copy of 'url' with 'len' bytes from 'start' replaced by the mask. */
static char *mask_span(const char *url, size_t start, size_t len) {
  size_t rest = strlen(url + start + len);
  char *out = malloc(start + strlen(MASK) + rest + 1);
  if (out == NULL)
    return NULL;
  memcpy(out, url, start);
  memcpy(out + start, MASK, strlen(MASK));
  memcpy(out + start + strlen(MASK), url + start + len, rest + 1);
  return out;
}

char *url_masked(const char *url) {
  size_t start, len;
  char *out = find_password(url, &start, &len) ? mask_span(url, start, len)
                                               : strdup(url);
  /* A Sentinel URL may carry the Sentinels' password in its query too. */
  if (out != NULL && find_sentinel_password(out, &start, &len) && len > 0) {
    char *masked = mask_span(out, start, len);
    free(out);
    out = masked;
  }
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
  if (out != NULL && find_sentinel_password(url, &start, &len) && len >= 4) {
    char *password = strndup(url + start, len);
    char *scrubbed = password ? replace_all(out, password, MASK) : NULL;
    free(password);
    free(out);
    out = scrubbed;
  }
  return out;
}

char *url_mask_secret(const char *text, const char *secret) {
  return strlen(secret) >= 4 ? replace_all(text, secret, MASK) : strdup(text);
}

const char *url_env_password(void) {
  static const char *const names[] = {"DLOCK_PASSWORD", "REDISCLI_AUTH"};

  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    const char *value = getenv(names[i]);
    if (value != NULL && value[0] != '\0')
      return value;
  }
  return NULL;
}

/* 1 for the bytes a URL's user information may hold unescaped (RFC 3986's
 * unreserved set); every other byte is written %XX. */
static int unreserved(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' || c == '~';
}

char *url_with_password(const char *url, const char *password) {
  const char *scheme_end = strstr(url, "://");

  if (password == NULL || scheme_end == NULL)
    return strdup(url);
  /* The authority runs to the path ('/', which also starts a unix
   * socket's path) or the query; its user information ends at the first
   * '@', where the library's parser ends it too. */
  const char *authority = scheme_end + 3;
  size_t authority_len = strcspn(authority, "/?");
  const char *at = memchr(authority, '@', authority_len);
  const char *user_end = authority;
  if (at != NULL) {
    if (memchr(authority, ':', (size_t)(at - authority)) != NULL)
      return strdup(url); /* it has a password of its own */
    user_end = at;
  }

  size_t head = (size_t)(user_end - url);
  const char *tail = at != NULL ? at : user_end;
  char *out = malloc(head + 1 + strlen(password) * 3 + 1 + strlen(tail) + 1);
  if (out == NULL)
    return NULL;
  char *o = out;
  memcpy(o, url, head);
  o += head;
  *o++ = ':';
  for (const unsigned char *p = (const unsigned char *)password; *p; p++) {
    if (unreserved(*p)) {
      *o++ = (char)*p;
    } else {
      static const char hex[] = "0123456789ABCDEF";
      *o++ = '%';
      *o++ = hex[*p >> 4];
      *o++ = hex[*p & 15];
    }
  }
  if (at == NULL)
    *o++ = '@';
  strcpy(o, tail);
  return out;
}
