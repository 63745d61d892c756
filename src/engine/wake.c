/*
 * What the messages of each kind's channel wake (see cohort.h): the
 * decoders that the acquisition machine passes to pub/sub when it joins a
 * channel, which pub/sub calls for each message with its mutex held.
 */
#include "cohort.h"

#include <string.h>

static int is_text(const char *msg, size_t len, const char *s) {
  return msg != NULL && len == strlen(s) && memcmp(msg, s, len) == 0;
}

/* The number a message of a counted channel carries (a semaphore's free
 * permits): 1 for one that is not a number, so that a message of an
 * unknown form still wakes someone. */
static int64_t count_of(const char *msg, size_t len) {
  if (msg == NULL || len == 0 || len > 18)
    return 1;
  int64_t n = 0;
  size_t i = msg[0] == '-' ? 1 : 0;
  if (i == len)
    return 1;
  for (; i < len; i++) {
    if (msg[i] < '0' || msg[i] > '9')
      return 1;
    n = n * 10 + (msg[i] - '0');
  }
  return msg[0] == '-' ? -n : n;
}

/* The token of a "grant:<token>" message, or 0 for any other message. */
static uint64_t grant_of(const char *msg, size_t len) {
  static const char prefix[] = "grant:";
  size_t n = sizeof(prefix) - 1;
  if (msg == NULL || len <= n || len > n + 20 || memcmp(msg, prefix, n) != 0)
    return 0;
  uint64_t token = 0;
  for (size_t i = n; i < len; i++) {
    if (msg[i] < '0' || msg[i] > '9')
      return 0;
    token = token * 10 + (uint64_t)(msg[i] - '0');
  }
  return token;
}

dlock__wakeup dlock__wake_lock(const char *msg, size_t len) {
  dlock__wakeup up = {DLOCK__WAKE_ALL, 0, 0};
  if (is_text(msg, len, "1"))
    return up;
  /* A hand-over goes to the first waiter, which is its owner's: it comes
   * on the owner's own channel. */
  up.how = DLOCK__WAKE_FIRST;
  up.value = grant_of(msg, len);
  return up;
}

dlock__wakeup dlock__wake_count(const char *msg, size_t len) {
  /* A semaphore's release announces the free permits: that many waiters
   * may succeed, and no more. */
  dlock__wakeup up = {DLOCK__WAKE_SOME, count_of(msg, len), 0};
  return up;
}

dlock__wakeup dlock__wake_latch(const char *msg, size_t len) {
  /* A latch at zero opens for everyone; "1" (a new count) closes it,
   * which a waiter finds out by looking. */
  dlock__wakeup up = {
      is_text(msg, len, "0") ? DLOCK__WAKE_ALL : DLOCK__WAKE_NONE, 0, 0};
  return up;
}
