/*
 * Fuzzes the dlock command's handling of its command line, compiled from
 * the command's own sources: durations (tools/duration.c), the option
 * parser (tools/args.c), URL masking (tools/url.c), and the whole of
 * main() (tools/dlock.c, renamed dlock_tool_main by the build) with the
 * global and per-command options of every command.
 *
 * Input: the arguments, separated by NUL bytes.
 *
 * Beyond "no crash, no leak, no undefined behaviour", every input checks:
 *  - duration_parse agrees with an independent reading of the documented
 *    format (digits, then ms, s, m or h, at most 366 days; or 0 alone), and
 *    what duration_format_exact writes parses back to the same value;
 *  - the option parser keeps its index within argv, returns an option of
 *    the table or an ARG_* value, points values into argv, and ends;
 *  - url_masked hides the password where the documented URL syntax puts
 *    it, and url_scrub removes it from a message quoting the URL;
 *  - main() exits 0, 64 (usage) or 69 (unavailable), and prints the
 *    password of the URL it was given on neither stdout nor stderr.
 *
 * main() never reaches a server: $DLOCK_URL names a socket path that does
 * not exist, and every --url value the library would accept is replaced
 * by another such path (the same value by the same path, so repeated
 * --url options stay repeated), so no command ever gets a lock, runs a
 * program or deletes a key. Values the library refuses are kept, for the
 * command's error paths. Each --url value gets the secret password too,
 * in place of its own, so that every message about it is checked.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/proto/url.h"
#include "../../tools/args.h"
#include "../../tools/duration.h"
#include "../../tools/exit_codes.h"
#include "../../tools/url.h"
#include "fuzz_common.h"

int dlock_tool_main(int argc, char **argv);

#define FUZZ_MAX_INPUT 4096
#define MAX_ARGS 32
/* The largest duration accepted, as documented: 366 days. */
#define DURATION_LIMIT_MS ((int64_t)366 * 24 * 3600 * 1000)

/* The password of the URL main() sees; it must never be printed. */
#define SECRET "Kx4SecretPw"
static const char secret_url[] =
    "unix://fuzzuser:" SECRET "@/nonexistent-dlock-fuzz/redis.sock";

/* ---- durations ------------------------------------------------------- */

/* The documented format, read independently of duration.c. */
static int oracle_duration(const char *s, int64_t *out) {
  static const struct {
    const char *unit;
    int64_t ms;
  } units[] = {{"", 1}, {"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}};
  size_t digits = strspn(s, "0123456789");
  if (digits == 0)
    return 0;
  int64_t mult = 0;
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
    if (strcmp(s + digits, units[i].unit) == 0)
      mult = units[i].ms;
  if (mult == 0)
    return 0;
  int64_t v = 0;
  for (size_t i = 0; i < digits; i++) {
    v = v * 10 + (s[i] - '0');
    if (v > DURATION_LIMIT_MS)
      return 0;
  }
  if (v > DURATION_LIMIT_MS / mult)
    return 0;
  /* Only 0 may go without a unit. */
  if (s[digits] == '\0' && v != 0)
    return 0;
  *out = v * mult;
  return 1;
}

/* Formats into a heap buffer of exactly 'n' bytes, so ASan sees overflows. */
static void check_format_fits(void (*fmt)(int64_t, char *, size_t), int64_t ms,
                              size_t n) {
  char *buf = malloc(n);
  FUZZ_CHECK(buf != NULL, "out of memory");
  fmt(ms, buf, n);
  FUZZ_CHECK(memchr(buf, '\0', n) != NULL, "formatted duration unterminated");
  free(buf);
}

static void check_duration(const char *text) {
  int64_t ms = -42, want = 0;
  const char *why = NULL;
  int rc = duration_parse(text, &ms, &why);
  int ok = oracle_duration(text, &want);
  FUZZ_CHECK((rc == 0) == ok, "duration_parse(\"%s\") returned %d", text, rc);
  if (rc != 0) {
    FUZZ_CHECK(why != NULL && why[0] != '\0', "refused without a reason");
    return;
  }
  FUZZ_CHECK(ms == want, "\"%s\" parsed as %lld ms, expected %lld", text,
             (long long)ms, (long long)want);
  char exact[32];
  duration_format_exact(ms, exact, sizeof exact);
  int64_t again = -1;
  FUZZ_CHECK(duration_parse(exact, &again, &why) == 0 && again == ms,
             "%lld ms formatted as \"%s\", which does not parse back",
             (long long)ms, exact);
  for (size_t n = 1; n <= 24; n += 5) {
    check_format_fits(duration_format_exact, ms, n);
    check_format_fits(duration_format_human, ms, n);
  }
}

/* ---- URL masking ----------------------------------------------------- */

/*
 * Where the documented syntax, redis://[user[:pass]@]host... and
 * unix://[user[:pass]@]/path, puts the password: after the first ':' of
 * the user information, which ends at the first '@' of the authority (up
 * to the first '/' for redis://, the first '?' for unix://). Returns 0
 * when the URL has no password.
 */
static int documented_password(const char *url, size_t *start, size_t *end) {
  size_t scheme;
  const char *authority_end;
  if (strncmp(url, "redis://", 8) == 0) {
    scheme = 8;
    authority_end = strchr(url + scheme, '/');
  } else if (strncmp(url, "unix://", 7) == 0) {
    scheme = 7;
    authority_end = strchr(url + scheme, '?');
  } else {
    return 0;
  }
  if (authority_end == NULL)
    authority_end = url + strlen(url);
  const char *info = url + scheme;
  const char *at = memchr(info, '@', (size_t)(authority_end - info));
  if (at == NULL)
    return 0;
  const char *colon = memchr(info, ':', (size_t)(at - info));
  if (colon == NULL || colon + 1 == at)
    return 0;
  *start = (size_t)(colon + 1 - url);
  *end = (size_t)(at - url);
  return 1;
}

/* What url.h documents url_masked and url_scrub to hide: everything from
 * after "user:" (or after "://" without a ':') to the last '@'. */
static int tool_password(const char *url, size_t *start, size_t *len) {
  const char *scheme_end = strstr(url, "://");
  const char *at = strrchr(url, '@');
  if (scheme_end == NULL || at == NULL || at < scheme_end)
    return 0;
  const char *info = scheme_end + 3;
  const char *colon = memchr(info, ':', (size_t)(at - info));
  const char *secret = colon ? colon + 1 : info;
  *start = (size_t)(secret - url);
  *len = (size_t)(at - secret);
  return 1;
}

static void check_masking(const char *url, const char *other) {
  char *masked = url_masked(url);
  FUZZ_CHECK(masked != NULL, "url_masked returned NULL");

  /* The password, where a redis:// or unix:// parser finds it, is shown as
   * "***": the masked URL keeps what comes before it and shows "***" in
   * its place, followed by a tail of the URL from its end or later. */
  size_t start, end;
  if (documented_password(url, &start, &end)) {
    size_t url_len = strlen(url), masked_len = strlen(masked);
    FUZZ_CHECK(masked_len >= start + 3 && memcmp(masked, url, start) == 0 &&
                   memcmp(masked + start, "***", 3) == 0,
               "\"%s\" masked as \"%s\"", url, masked);
    size_t tail = masked_len - start - 3;
    FUZZ_CHECK(tail <= url_len - end &&
                   memcmp(masked + start + 3, url + url_len - tail, tail) == 0,
               "\"%s\" masked as \"%s\" shows its password", url, masked);
  }

  /* A message quoting the URL, as the library's details may. */
  size_t n = strlen(other) + strlen(url) + 16;
  char *message = malloc(n);
  FUZZ_CHECK(message != NULL, "out of memory");
  snprintf(message, n, "%s (%s)", other, url);
  char *scrubbed = url_scrub(message, url);
  FUZZ_CHECK(scrubbed != NULL, "url_scrub returned NULL");
  size_t pstart, plen;
  /* url.h: passwords of 4 bytes or more are removed wherever they occur.
   * One that contains '*' can be re-formed by the "***" put in its place
   * (the password "a***" in "aa***"), so only others are checked. */
  if (tool_password(url, &pstart, &plen) && plen >= 4) {
    char *pw = strndup(url + pstart, plen);
    FUZZ_CHECK(pw != NULL, "out of memory");
    if (strchr(pw, '*') == NULL)
      FUZZ_CHECK(strstr(scrubbed, pw) == NULL,
                 "url_scrub(\"%s\", \"%s\") gave \"%s\": password shown",
                 message, url, scrubbed);
    free(pw);
  }
  free(scrubbed);
  free(message);
  free(masked);
}

/* ---- the option parser ----------------------------------------------- */

/* Tables shaped like the commands' (flags, values, repeatable values,
 * short names), plus one full table to exercise the size limit. */
static const arg_option_t table_main[] = {{"help", 'h', ARG_FLAG},
                                          {"version", 'V', ARG_FLAG},
                                          {"url", 0, ARG_VALUES},
                                          {"watchdog", 0, ARG_VALUE}};
static const arg_option_t table_run[] = {
    {"wait", 0, ARG_VALUE},    {"lease", 0, ARG_VALUE},
    {"grace", 0, ARG_VALUE},   {"fair", 0, ARG_FLAG},
    {"read", 0, ARG_FLAG},     {"write", 0, ARG_FLAG},
    {"help", 'h', ARG_FLAG},   {"url", 0, ARG_VALUES},
    {"watchdog", 0, ARG_VALUE}};
static const arg_option_t table_many[] = {
    {"a", 'a', ARG_FLAG}, {"b", 'b', ARG_VALUE}, {"c", 'c', ARG_VALUES},
    {"d", 0, ARG_FLAG},   {"e", 0, ARG_VALUE},   {"f", 0, ARG_VALUES},
    {"g", 0, ARG_FLAG},   {"h", 0, ARG_VALUE},   {"i", 0, ARG_VALUES},
    {"j", 0, ARG_FLAG},   {"k", 0, ARG_VALUE},   {"l", 0, ARG_VALUES},
    {"m", 0, ARG_FLAG},   {"n", 0, ARG_VALUE},   {"o", 0, ARG_VALUES},
    {"p", 'p', ARG_FLAG}, {"q", 'q', ARG_VALUE}, {"", 'r', ARG_VALUE}};

/* 1 when 'v' points into one of the arguments. */
static int inside_argv(const char *v, int argc, char **argv) {
  for (int i = 0; i < argc; i++)
    if (v >= argv[i] && v <= argv[i] + strlen(argv[i]))
      return 1;
  return 0;
}

static void check_parser(const arg_option_t *table, size_t n, int argc,
                         char **argv) {
  arg_parser_t p;
  arg_parser_init(&p, table, n, argc, argv);
  size_t usable = n < ARG_MAX_OPTIONS ? n : ARG_MAX_OPTIONS;
  int after_dashdash = 0;
  for (int calls = 0;; calls++) {
    FUZZ_CHECK(calls <= argc + 1, "the parser does not end");
    int before = p.index;
    int opt = arg_next(&p);
    FUZZ_CHECK(p.index >= before && p.index <= argc, "index %d of %d", p.index,
               argc);
    FUZZ_CHECK(arg_remaining_count(&p) == argc - p.index &&
                   arg_remaining(&p) == argv + p.index,
               "remaining arguments");
    if (opt == ARG_END) {
      FUZZ_CHECK(before == argc, "ARG_END with arguments left");
      return;
    }
    FUZZ_CHECK(p.index > before, "an argument was not consumed");
    if (after_dashdash)
      FUZZ_CHECK(opt == ARG_POSITIONAL, "an option after \"--\"");
    if (opt == ARG_ERROR) {
      FUZZ_CHECK(memchr(p.problem, '\0', sizeof p.problem) != NULL &&
                     p.problem[0] != '\0',
                 "error without a problem");
      return; /* the commands stop at the first error */
    }
    if (opt == ARG_DASHDASH) {
      after_dashdash = 1;
      continue;
    }
    if (opt == ARG_POSITIONAL) {
      FUZZ_CHECK(p.value == argv[p.index - 1], "positional value");
      continue;
    }
    FUZZ_CHECK(opt >= 0 && (size_t)opt < usable, "option %d of %zu", opt,
               usable);
    if (table[opt].takes_value == ARG_FLAG)
      FUZZ_CHECK(p.value == NULL, "a flag with a value");
    else
      FUZZ_CHECK(p.value != NULL && inside_argv(p.value, argc, argv),
                 "a value outside argv");
  }
}

/* ---- main() ---------------------------------------------------------- */

static const int saved_signals[] = {SIGINT,  SIGTERM, SIGHUP,
                                    SIGQUIT, SIGCHLD, SIGPIPE};
#define NSAVED (sizeof saved_signals / sizeof saved_signals[0])

/* FNV-1a, to name the stand-in socket of a --url value. */
static uint32_t hash_of(const char *s) {
  uint32_t h = 2166136261u;
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 16777619u;
  return h;
}

/* The --url value main() gets instead of 'v' (see the top of the file). */
static void neutralize_url(const char *v, char *out, size_t size) {
  size_t start, len;
  if (tool_password(v, &start, &len))
    snprintf(out, size, "%.*s%s%s", (int)start, v, SECRET, v + start + len);
  else
    snprintf(out, size, "%s", v);
  dlock__endpoint e;
  if (dlock__url_parse(out, &e) == 0) {
    dlock__endpoint_free(&e);
    snprintf(out, size,
             "unix://fuzz:" SECRET "@/nonexistent-dlock-fuzz/%08x.sock",
             (unsigned)hash_of(v));
  }
}

static void run_tool(int argc, char **argv, int check_secret) {
  /* The --url values are found as the commands' option parsers find
   * them: "--url V" and "--url=V" are options until a "--"; the argument
   * after any option that takes a value is that value, whatever it looks
   * like. A few too many (the command's arguments under "run") do no harm;
   * one too many that the command prints as something else (a bad
   * --watchdog value) would show the planted password, hence the care. */
  static const char *const value_options[] = {
      "--url",   "--watchdog",  "--wait",  "--lease",
      "--grace", "--processes", "--stock", "--workers"};
  static char rewritten[MAX_ARGS + 2][FUZZ_MAX_INPUT + 96];
  char *args[MAX_ARGS + 2];
  for (int i = 0; i <= argc; i++)
    args[i] = argv[i];
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--") == 0)
      break;
    int takes_value = 0;
    for (size_t k = 1; k < sizeof value_options / sizeof value_options[0]; k++)
      takes_value |= strcmp(argv[i], value_options[k]) == 0;
    if (takes_value) {
      i++; /* its value, not an option */
    } else if (strcmp(argv[i], "--url") == 0 && i + 1 < argc) {
      neutralize_url(argv[i + 1], rewritten[i + 1], sizeof rewritten[i + 1]);
      args[i + 1] = rewritten[i + 1];
      i++;
    } else if (strncmp(argv[i], "--url=", 6) == 0) {
      memcpy(rewritten[i], "--url=", 6);
      neutralize_url(argv[i] + 6, rewritten[i] + 6, sizeof rewritten[i] - 6);
      args[i] = rewritten[i];
    }
  }
  argv = args;

  /* The command's output is caught in memory, through the stdio streams
   * (sanitizer and libFuzzer reports are written to the descriptors, so
   * they still show), and its signal handlers are put back afterwards. */
  struct sigaction old[NSAVED];
  for (size_t i = 0; i < NSAVED; i++)
    sigaction(saved_signals[i], NULL, &old[i]);
  char *out_buf = NULL, *err_buf = NULL;
  size_t out_len = 0, err_len = 0;
  FILE *out = open_memstream(&out_buf, &out_len);
  FILE *err = open_memstream(&err_buf, &err_len);
  FUZZ_CHECK(out != NULL && err != NULL, "open_memstream");
  FILE *real_out = stdout, *real_err = stderr;
  stdout = out;
  stderr = err;
  int rc = dlock_tool_main(argc, argv);
  stdout = real_out;
  stderr = real_err;
  fclose(out);
  fclose(err);
  for (size_t i = 0; i < NSAVED; i++)
    sigaction(saved_signals[i], &old[i], NULL);

  /* FUZZ_CLI_SHOW=1 shows what the command did with an input, for looking
   * into a report: ./fuzz_cli crash-... */
  if (getenv("FUZZ_CLI_SHOW") != NULL)
    fprintf(stderr, "exit %d\n-- stdout:\n%s-- stderr:\n%s--\n", rc, out_buf,
            err_buf);
  FUZZ_CHECK(rc == EXIT_OK || rc == EXIT_USAGE || rc == EXIT_UNAVAILABLE,
             "exit status %d; stderr: %s", rc, err_buf);
  if (check_secret) {
    FUZZ_CHECK(memmem(out_buf, out_len, SECRET, strlen(SECRET)) == NULL,
               "password on stdout: %s", out_buf);
    FUZZ_CHECK(memmem(err_buf, err_len, SECRET, strlen(SECRET)) == NULL,
               "password on stderr: %s", err_buf);
  }
  free(out_buf);
  free(err_buf);
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  setenv("DLOCK_URL", secret_url, 1);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > FUZZ_MAX_INPUT)
    return 0;
  char buf[FUZZ_MAX_INPUT + 1];
  memcpy(buf, data, size);
  buf[size] = '\0';
  char prog[] = "dlock";
  char *argv[MAX_ARGS + 2];
  int argc = 0;
  argv[argc++] = prog;
  for (char *p = buf; p < buf + size && argc <= MAX_ARGS; p += strlen(p) + 1)
    argv[argc++] = p;
  argv[argc] = NULL;

  for (int i = 1; i < argc; i++) {
    check_duration(argv[i]);
    check_masking(argv[i], argv[i + 1 < argc ? i + 1 : 0]);
  }
  check_parser(table_main, sizeof table_main / sizeof table_main[0], argc - 1,
               argv + 1);
  check_parser(table_run, sizeof table_run / sizeof table_run[0], argc - 1,
               argv + 1);
  check_parser(table_many, sizeof table_many / sizeof table_many[0], argc - 1,
               argv + 1);
  /* An input that spells part of the password could print it itself. */
  int check_secret = memmem(data, size, "Kx4", 3) == NULL &&
                     memmem(data, size, "Secret", 6) == NULL;
  run_tool(argc, argv, check_secret);
  return 0;
}
