/*
 * The dlock command over TLS: rediss:// URLs with redis-cli's option names
 * (--cacert, --cacertdir, --cert, --key, --sni, --insecure), the exit
 * status and message of each mistake, and TLS options without a TLS URL
 * refused as bad usage.
 */
#include "harness/redis_proc.h"
#include "harness/test.h"
#include "harness/tls_server.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

typedef struct cli_env {
  tls_files_t *f;
  rp_server_t *s;
  int port;
  char err[4096]; /* the last run's stderr */
} cli_env;

static void env_start(cli_env *e, const char *auth_clients) {
  memset(e, 0, sizeof(*e));
  ASSERT_EQ(tls_files_make(&e->f), 0);
  ASSERT_EQ(tls_server_start(e->f, auth_clients, NULL, &e->s, &e->port), 0);
}

static void env_free(cli_env *e) {
  rp_free(e->s);
  tls_files_free(e->f);
}

/* Runs "dlock ARGS" (a shell word list, printf-style) with no password in
 * its environment; returns its exit status, its stderr in e->err. */
static int run(cli_env *e, const char *fmt, ...) {
  char args[2048], cmd[3072], path[300];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(args, sizeof(args), fmt, ap);
  va_end(ap);
  snprintf(path, sizeof(path), "%s/cli.err", e->f->dir);
  snprintf(cmd, sizeof(cmd),
           "env -u DLOCK_URL -u DLOCK_PASSWORD -u REDISCLI_AUTH '%s' %s "
           ">/dev/null 2>'%s'",
           DLOCK_CLI_PATH, args, path);
  int st = system(cmd);
  ASSERT(st != -1 && WIFEXITED(st));
  FILE *f = fopen(path, "r");
  ASSERT_NOT_NULL(f);
  size_t n = fread(e->err, 1, sizeof(e->err) - 1, f);
  e->err[n] = '\0';
  fclose(f);
  return WEXITSTATUS(st);
}

static void assert_err_has(const cli_env *e, const char *part) {
  if (strstr(e->err, part) == NULL)
    TEST_FAIL("stderr \"%s\" lacks \"%s\"", e->err, part);
}

TEST(cli_tls_run_and_status) {
  cli_env e;
  env_start(&e, "no");
  /* The command runs under the lock, whose key is on the server. */
  ASSERT_EQ(run(&e,
                "--url rediss://127.0.0.1:%d --cacert '%s' run cli:tls -- "
                "sh -c \"test \\$(redis-cli -p %d exists cli:tls) = 1\"",
                e.port, e.f->ca_crt, rp_port(e.s)),
            0);
  ASSERT_EQ(run(&e,
                "status --url rediss://localhost:%d --cacertdir '%s' cli:tls",
                e.port, e.f->ca_dir),
            0);
  ASSERT_EQ(
      run(&e, "--url rediss://127.0.0.1:%d --insecure status cli:tls", e.port),
      0);
  env_free(&e);
}

TEST(cli_tls_mistakes_exit_69_with_the_reason) {
  cli_env e;
  env_start(&e, "yes");
  /* Mutual TLS: with the client certificate it works... */
  ASSERT_EQ(run(&e,
                "--url rediss://127.0.0.1:%d --cacert '%s' --cert '%s' --key "
                "'%s' status cli:tls",
                e.port, e.f->ca_crt, e.f->client_crt, e.f->client_key),
            0);
  /* ... without, it is refused. */
  ASSERT_EQ(run(&e, "--url rediss://127.0.0.1:%d --cacert '%s' status cli:tls",
                e.port, e.f->ca_crt),
            69);
  assert_err_has(&e, "requires a client certificate");
  /* The system's CAs do not know the test CA. */
  ASSERT_EQ(run(&e,
                "--url rediss://127.0.0.1:%d --cert '%s' --key '%s' status "
                "cli:tls",
                e.port, e.f->client_crt, e.f->client_key),
            69);
  assert_err_has(&e, "not trusted");
  ASSERT_EQ(run(&e,
                "--url rediss://127.0.0.1:%d --cacert '%s' --cert '%s' --key "
                "'%s' --sni redis.example.com status cli:tls",
                e.port, e.f->ca_crt, e.f->client_crt, e.f->client_key),
            69);
  assert_err_has(&e, "host name mismatch");
  /* A plain URL on the TLS port. */
  ASSERT_EQ(run(&e, "--url redis://127.0.0.1:%d status cli:tls", e.port), 69);
  assert_err_has(&e, "rediss://");
  env_free(&e);
}

TEST(cli_tls_options_need_a_tls_url) {
  cli_env e;
  env_start(&e, "no");
  ASSERT_EQ(run(&e, "--url redis://127.0.0.1:%d --cacert '%s' status cli:tls",
                rp_port(e.s), e.f->ca_crt),
            64);
  assert_err_has(&e, "--cacert is for TLS");
  ASSERT_EQ(run(&e, "status --insecure --url redis://127.0.0.1:%d cli:tls",
                rp_port(e.s)),
            64);
  assert_err_has(&e, "--insecure is for TLS");
  /* A file that cannot be read, named. */
  ASSERT_EQ(run(&e,
                "--url rediss://127.0.0.1:%d --cacert /nonexistent/ca.pem "
                "status cli:tls",
                e.port),
            64);
  assert_err_has(&e, "/nonexistent/ca.pem");
  ASSERT_EQ(run(&e,
                "--url rediss://127.0.0.1:%d --cacert '%s' status --cacert "
                "'%s' cli:tls",
                e.port, e.f->ca_crt, e.f->ca_crt),
            64);
  assert_err_has(&e, "more than once");
  env_free(&e);
}
