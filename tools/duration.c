#include "duration.h"

#include <stdio.h>
#include <string.h>

/* The largest duration accepted: about 292 thousand years in ms would fit
 * int64_t, but nothing sensible needs more than a year, and the cap keeps
 * deadline arithmetic (now + duration) far away from overflow. */
#define DURATION_MAX_MS ((int64_t)366 * 24 * 3600 * 1000)

static int64_t unit_multiplier(const char *unit) {
  if (strcmp(unit, "ms") == 0)
    return 1;
  if (strcmp(unit, "s") == 0)
    return 1000;
  if (strcmp(unit, "m") == 0)
    return 60 * 1000;
  if (strcmp(unit, "h") == 0)
    return 3600 * 1000;
  return 0;
}

int duration_parse(const char *text, int64_t *ms, const char **why) {
  const char *p = text;
  int64_t number = 0;

  if (*p < '0' || *p > '9') {
    *why = (*p == '-') ? "durations cannot be negative"
                       : "expected a number with a unit ms, s, m or h "
                         "(e.g. 250ms, 5s, 2m, 1h)";
    return -1;
  }
  for (; *p >= '0' && *p <= '9'; p++) {
    number = number * 10 + (*p - '0');
    if (number > DURATION_MAX_MS) {
      *why = "too long (the limit is 366 days)";
      return -1;
    }
  }
  if (*p == '\0') {
    /* Zero is zero in any unit. */
    *ms = 0;
    if (number == 0)
      return 0;
    *why = "a number other than 0 needs a unit: ms, s, m or h";
    return DURATION_NO_UNIT;
  }
  int64_t multiplier = unit_multiplier(p);
  if (multiplier == 0) {
    *why = (*p == '.') ? "fractions are not supported; use a smaller unit "
                         "(1500ms rather than 1.5s)"
                       : "unknown unit; use ms, s, m or h (e.g. 250ms, 5s, "
                         "2m, 1h)";
    return -1;
  }
  if (number > DURATION_MAX_MS / multiplier) {
    *why = "too long (the limit is 366 days)";
    return -1;
  }
  *ms = number * multiplier;
  return 0;
}

void duration_format_exact(int64_t ms, char *buf, size_t size) {
  static const struct {
    int64_t ms;
    const char *unit;
  } units[] = {{3600 * 1000, "h"}, {60 * 1000, "m"}, {1000, "s"}};

  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
    if (ms != 0 && ms % units[i].ms == 0) {
      snprintf(buf, size, "%lld%s", (long long)(ms / units[i].ms),
               units[i].unit);
      return;
    }
  }
  snprintf(buf, size, "%lldms", (long long)ms);
}

void duration_format_human(int64_t ms, char *buf, size_t size) {
  long long v = (long long)ms;

  if (v < 1000)
    snprintf(buf, size, "%lldms", v);
  else if (v < 60 * 1000)
    snprintf(buf, size, "%lld.%llds", v / 1000, (v % 1000) / 100);
  else if (v < 3600 * 1000)
    snprintf(buf, size, "%lldm%02llds", v / 60000, (v % 60000) / 1000);
  else
    snprintf(buf, size, "%lldh%02lldm", v / 3600000, (v % 3600000) / 60000);
}
