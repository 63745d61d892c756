#define _POSIX_C_SOURCE 200809L
#include "cli.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "duration.h"
#include "exit_codes.h"
#include "url.h"

void cli_globals_init(cli_globals_t *g) {
  const char *env_url = getenv("DLOCK_URL");

  memset(g, 0, sizeof *g);
  g->url =
      (env_url != NULL && env_url[0] != '\0') ? env_url : DLOCK_DEFAULT_URL;
  g->urls[0] = g->url;
  g->nurls = 1;
  g->watchdog_ms = 30000;
  g->outage_wait_ms = -1;
}

size_t cli_quorum(size_t n) { return n / 2 + 1; }

static void print_prefix(const cli_command_t *cmd) {
  if (cmd != NULL && cmd->name != NULL)
    fprintf(stderr, "dlock %s: ", cmd->name);
  else
    fputs("dlock: ", stderr);
}

void cli_error(const cli_command_t *cmd, const char *fmt, ...) {
  va_list ap;

  print_prefix(cmd);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

int cli_usage_error(const cli_command_t *cmd, const char *fmt, ...) {
  va_list ap;

  print_prefix(cmd);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\nusage: %s\n", cmd->usage);
  if (cmd->name != NULL)
    fprintf(stderr, "Try 'dlock %s --help' for more.\n", cmd->name);
  else
    fputs("Try 'dlock --help' for more.\n", stderr);
  return EXIT_USAGE;
}

void cli_print_global_options_help(FILE *out) {
  fputs(
      "Global options (before or after the command name):\n"
      "  --url URL       Redis server, redis://[user@]host[:port][/db] or\n"
      "                  unix:///path[?db=N], or Sentinels,\n"
      "                  redis-sentinel://host:port[,host:port...]/master\n"
      "                  (rediss-sentinel:// for TLS to Sentinels and nodes),\n"
      "                  or a Redis Cluster's seed nodes,\n"
      "                  redis-cluster://host:port[,host:port...];\n"
      "                  repeat it for a RedLock over "
      "independent\n"
      "                  masters (default: $DLOCK_URL, else " DLOCK_DEFAULT_URL
      ")\n"
      "  --watchdog DUR  lease of a held lock, renewed every third of it "
      "(default: 30s)\n"
      "TLS, for rediss:// URLs (the server's certificate and name are "
      "checked):\n"
      "  --cacert FILE   CA certificates to trust, PEM (default: the "
      "system's)\n"
      "  --cacertdir DIR directory of CA certificates (openssl rehash)\n"
      "  --cert FILE     client certificate, PEM, for servers that require "
      "one\n"
      "  --key FILE      its private key, PEM, not encrypted\n"
      "  --sni NAME      server name to send and to check instead of the "
      "URL's host\n"
      "  --insecure      check neither the certificate nor the name (tests "
      "only)\n"
      "DUR is a number with a unit: 250ms, 5s, 2m or 1h (0 alone needs "
      "none).\n"
      "\nEnvironment:\n"
      "  DLOCK_URL       the default --url\n"
      "  DLOCK_PASSWORD  the password for every URL without one of its "
      "own, kept off\n"
      "                  the command line (which ps shows to every user); "
      "if unset,\n"
      "                  REDISCLI_AUTH, as redis-cli reads it. A URL's own "
      "wins.\n",
      out);
}

void cli_print_global_options_hint(FILE *out) {
  fputs("\nGlobal options --url URL (repeatable), --watchdog DUR and the TLS\n"
        "ones (--cacert, --cert, --key...), and the environment (DLOCK_URL,\n"
        "DLOCK_PASSWORD): see 'dlock --help'.\n",
        out);
}

/* Where each TLS option is kept in 'g'; NULL for --insecure and others. */
static const char **tls_slot(cli_globals_t *g, const char *name) {
  if (strcmp(name, "cacert") == 0)
    return &g->cacert;
  if (strcmp(name, "cacertdir") == 0)
    return &g->cacertdir;
  if (strcmp(name, "cert") == 0)
    return &g->cert;
  if (strcmp(name, "key") == 0)
    return &g->key;
  if (strcmp(name, "sni") == 0)
    return &g->sni;
  return NULL;
}

int cli_is_global_option(const char *name) {
  cli_globals_t unused;
  return strcmp(name, "url") == 0 || strcmp(name, "watchdog") == 0 ||
         strcmp(name, "insecure") == 0 || tls_slot(&unused, name) != NULL;
}

int cli_set_global_option(const cli_command_t *cmd, cli_globals_t *g,
                          const char *name, const char *value) {
  if (strcmp(name, "url") == 0) {
    if (value[0] == '\0')
      return cli_usage_error(cmd, "--url: empty URL");
    /* The first --url replaces the default instead of adding to it. */
    if (!g->url_given)
      g->nurls = 0;
    g->url_given = 1;
    for (size_t i = 0; i < g->nurls; i++) {
      if (strcmp(g->urls[i], value) == 0) {
        /* Two clients on one server would each count as a RedLock node,
         * and would refuse each other the lock. */
        char *shown = url_masked(value);
        int rc =
            cli_usage_error(cmd, "--url '%s' given twice", shown ? shown : "?");
        free(shown);
        return rc;
      }
    }
    if (g->nurls == CLI_MAX_URLS)
      return cli_usage_error(cmd, "more than %d --url options", CLI_MAX_URLS);
    g->urls[g->nurls++] = value;
    g->url = g->urls[0];
    return 0;
  }
  if (strcmp(name, "insecure") == 0) {
    g->insecure = 1;
    return 0;
  }
  const char **slot = tls_slot(g, name);
  if (slot != NULL) {
    /* Before and after the command name are two parsers: the repeat is
     * caught here. */
    if (*slot != NULL)
      return cli_usage_error(cmd, "option given more than once: '--%s'", name);
    if (value[0] == '\0')
      return cli_usage_error(cmd, "--%s: empty value", name);
    *slot = value;
    return 0;
  }
  if (g->watchdog_given)
    return cli_usage_error(cmd, "option given more than once: '--watchdog'");
  g->watchdog_given = 1;
  /* Renewal runs every third of the timeout, so below a few milliseconds
   * the lock would expire between renewals. */
  return cli_parse_duration(cmd, "watchdog", value, 30, &g->watchdog_ms);
}

int cli_parse_duration(const cli_command_t *cmd, const char *name,
                       const char *value, int64_t min_ms, int64_t *ms) {
  const char *why = NULL;

  int rc = duration_parse(value, ms, &why);
  if (rc == DURATION_NO_UNIT)
    return cli_usage_error(cmd,
                           "--%s: '%s' needs a unit: %ss for seconds or "
                           "%sms for milliseconds (also m, h)",
                           name, value, value, value);
  if (rc != 0)
    return cli_usage_error(cmd, "--%s: bad duration '%s': %s", name, value,
                           why);
  if (*ms < min_ms) {
    char min_text[32];
    duration_format_exact(min_ms, min_text, sizeof min_text);
    return cli_usage_error(cmd, "--%s: '%s' is too short (at least %s)", name,
                           value, min_text);
  }
  return 0;
}

int cli_check_lock_name(const cli_command_t *cmd, const char *name) {
  size_t len = strlen(name);

  if (len == 0)
    return cli_usage_error(cmd, "the lock name is empty");
  if (len > DLOCK_NAME_MAX)
    return cli_usage_error(cmd,
                           "the lock name is %zu bytes long; the "
                           "limit is %d",
                           len, DLOCK_NAME_MAX);
  return 0;
}

int cli_exit_status_for(int err) {
  switch (err) {
  case DLOCK_ETIMEDOUT:
    return EXIT_NOT_ACQUIRED;
  case DLOCK_ELOST:
    return EXIT_LOCK_LOST;
  case DLOCK_EINVAL:
    return EXIT_USAGE;
  case DLOCK_ENOTLOCK:
    return EXIT_NOT_A_LOCK;
  case DLOCK_EIO:
  case DLOCK_EAUTH:
  case DLOCK_EPROTO:
  case DLOCK_ESERVER:
  case DLOCK_ENOQUORUM:
  case DLOCK_ENOSYNC:
    return EXIT_UNAVAILABLE;
  default:
    return EXIT_INTERNAL;
  }
}

/* The URLs whose passwords must never appear in a message; set before
 * the first client is opened, read-only afterwards. */
static const char *const *secret_urls;
static size_t nsecret_urls;

/* A copy of 'text' with every URL of the command line and its password
 * masked, and the password from the environment, as written there and as
 * the URLs carry it; freed by the caller; NULL when out of memory. */
static char *scrub(const char *text) {
  char *out = strdup(text);
  const char *password = url_env_password();

  for (size_t i = 0; i < nsecret_urls && out != NULL; i++) {
    char *next = url_scrub(out, secret_urls[i]);
    free(out);
    out = next;
    if (password != NULL && out != NULL) {
      char *with = url_with_password(secret_urls[i], password);
      next = with != NULL ? url_scrub(out, with) : NULL;
      free(with);
      free(out);
      out = next;
    }
  }
  if (out != NULL && password != NULL) {
    char *next = url_mask_secret(out, password);
    free(out);
    out = next;
  }
  return out;
}

/* Some of the library's details quote the URL they refused, hence the
 * masking. */
char *cli_last_error_detail(void) {
  const char *detail = dlock_last_error();

  if (detail == NULL || detail[0] == '\0')
    return NULL;
  return scrub(detail);
}

int cli_fail_with(const cli_command_t *cmd, int err, const char *what,
                  const char *detail) {
  if (detail != NULL)
    cli_error(cmd, "%s: %s (%s)", what, dlock_strerror(err), detail);
  else
    cli_error(cmd, "%s: %s", what, dlock_strerror(err));
  return cli_exit_status_for(err);
}

int cli_fail(const cli_command_t *cmd, int err, const char *what) {
  char *detail = cli_last_error_detail();
  int rc = cli_fail_with(cmd, err, what, detail);

  free(detail);
  return rc;
}

char *cli_effective_url(const char *url) {
  return url_with_password(url, url_env_password());
}

void cli_free_url(char *url) {
  if (url == NULL)
    return;
  /* It may carry the password from the environment. */
  memset(url, 0, strlen(url));
  free(url);
}

/* The library warns about deployments that break locks (a server that may
 * evict keys) only to whoever asks; a person at a terminal should see it. */
static void print_warning(void *data, const char *text) {
  (void)data;
  fprintf(stderr, "dlock: warning: %s\n", text);
}

/* 1 for a URL whose connections are TLS: rediss://, rediss-sentinel://,
 * rediss-cluster://. */
static int is_tls_url(const char *url) {
  return strncmp(url, "rediss://", 9) == 0 ||
         strncmp(url, "rediss-sentinel://", 18) == 0 ||
         strncmp(url, "rediss-cluster://", 17) == 0;
}

/* The client options of every command: the URL and watchdog of the command
 * line, and the callbacks for lost locks and for warnings. */
static void client_options(const cli_globals_t *g, const char *url,
                           dlock_lost_cb on_lost, void *on_lost_data,
                           dlock_options_t *o) {
  dlock_options_init(o);
  o->url = url;
  o->watchdog_timeout_ms = g->watchdog_ms;
  if (g->outage_wait_ms >= 0)
    o->outage_wait_ms = g->outage_wait_ms;
  /* A renewal stuck on an unresponsive server delays the news that the
   * lock expired until the command times out; bounding commands by one
   * renewal period keeps that delay below a third of the lease. With the
   * default 30 s watchdog the library's default timeout already is. */
  if (o->command_timeout_ms > g->watchdog_ms / 3)
    o->command_timeout_ms = g->watchdog_ms / 3;
  o->on_lost = on_lost;
  o->on_lost_data = on_lost_data;
  o->on_warning = print_warning;
  /* Only for TLS URLs: among several --url some may be plain, and the
   * library refuses TLS options with those. */
  if (is_tls_url(url)) {
    o->tls_ca_file = g->cacert;
    o->tls_ca_dir = g->cacertdir;
    o->tls_cert_file = g->cert;
    o->tls_key_file = g->key;
    o->tls_server_name = g->sni;
    o->tls_insecure = g->insecure;
  }
}

/* TLS options without any rediss:// URL are a mistake (the connection would
 * quietly be plain): EXIT_USAGE after a message, else 0. */
static int check_tls_options(const cli_command_t *cmd, const cli_globals_t *g) {
  static const char *const names[] = {"cacert", "cacertdir", "cert", "key",
                                      "sni"};
  const char *given = g->insecure ? "insecure" : NULL;
  const char *const values[] = {g->cacert, g->cacertdir, g->cert, g->key,
                                g->sni};
  for (size_t i = 0; i < sizeof names / sizeof names[0] && given == NULL; i++)
    if (values[i] != NULL)
      given = names[i];
  if (given == NULL)
    return 0;
  for (size_t i = 0; i < g->nurls; i++)
    if (is_tls_url(g->urls[i]))
      return 0;
  return cli_usage_error(cmd,
                         "--%s is for TLS, which needs a rediss:// URL "
                         "(--url or $DLOCK_URL)",
                         given);
}

int cli_open_client(const cli_command_t *cmd, const cli_globals_t *g,
                    dlock_lost_cb on_lost, void *on_lost_data,
                    dlock_client_t **out) {
  dlock_options_t o;
  *out = NULL;
  int rc = check_tls_options(cmd, g);
  if (rc != 0)
    return rc;
  char *url = cli_effective_url(g->url);
  if (url == NULL)
    return cli_fail_with(cmd, DLOCK_ENOMEM, "cannot open the Redis client",
                         NULL);
  client_options(g, url, on_lost, on_lost_data, &o);
  secret_urls = g->urls;
  nsecret_urls = g->nurls;
  rc = dlock_client_open(&o, out);
  cli_free_url(url);
  if (rc == 0)
    return 0;

  char *shown = url_masked(g->url);
  if (rc == DLOCK_EINVAL) {
    char *detail = cli_last_error_detail();
    rc = cli_usage_error(cmd, "--url: cannot use '%s': %s",
                         shown ? shown : "(out of memory)",
                         detail ? detail : "invalid URL");
    free(detail);
    free(shown);
    return rc;
  }
  char what[512];
  snprintf(what, sizeof what, "cannot use %s", shown ? shown : "the Redis URL");
  free(shown);
  return cli_fail(cmd, rc, what);
}

/* ---- several servers ------------------------------------------------ */

typedef struct node_opening {
  const cli_globals_t *g;
  cli_node_t *node;
  dlock_lost_cb on_lost;
} node_opening_t;

/* Opens one node's client. It runs on a thread of its own, so that an
 * unreachable server costs one connect timeout in all rather than one per
 * server; the library's detail is per thread, so it is taken here. */
static void *open_node(void *arg) {
  node_opening_t *a = arg;
  cli_node_t *node = a->node;
  dlock_options_t o;

  char *url = cli_effective_url(node->url);
  if (url == NULL) {
    node->client = NULL;
    node->err = DLOCK_ENOMEM;
    return NULL;
  }
  client_options(a->g, url, a->on_lost, node, &o);
  node->err = dlock_client_open(&o, &node->client);
  cli_free_url(url);
  if (node->err != 0) {
    node->client = NULL;
    node->detail = cli_last_error_detail();
  }
  return NULL;
}

void cli_report_node(const cli_command_t *cmd, const cli_node_t *node,
                     const char *what) {
  if (node->detail != NULL)
    cli_error(cmd, "%s: %s: %s (%s)", node->shown ? node->shown : "?", what,
              dlock_strerror(node->err), node->detail);
  else
    cli_error(cmd, "%s: %s: %s", node->shown ? node->shown : "?", what,
              dlock_strerror(node->err));
}

void cli_close_nodes(cli_node_t *nodes, size_t n) {
  if (nodes == NULL)
    return;
  for (size_t i = 0; i < n; i++) {
    dlock_client_close(nodes[i].client);
    free(nodes[i].shown);
    free(nodes[i].detail);
  }
  free(nodes);
}

/* Opens every node at once. */
static void open_all_nodes(const cli_globals_t *g, dlock_lost_cb on_lost,
                           cli_node_t *nodes) {
  node_opening_t args[CLI_MAX_URLS];
  pthread_t threads[CLI_MAX_URLS];
  int started[CLI_MAX_URLS] = {0};

  for (size_t i = 0; i < g->nurls; i++) {
    args[i] = (node_opening_t){g, &nodes[i], on_lost};
    started[i] = pthread_create(&threads[i], NULL, open_node, &args[i]) == 0;
    /* Without a thread, the node is opened here: slower, but the same. */
    if (!started[i])
      open_node(&args[i]);
  }
  for (size_t i = 0; i < g->nurls; i++)
    if (started[i])
      pthread_join(threads[i], NULL);
}

int cli_open_nodes(const cli_command_t *cmd, const cli_globals_t *g,
                   size_t need, dlock_lost_cb on_lost, cli_node_t **out) {
  cli_node_t *nodes = calloc(g->nurls, sizeof *nodes);
  size_t opened = 0;
  int rc;

  *out = NULL;
  if (nodes == NULL)
    return cli_fail(cmd, DLOCK_ENOMEM, "cannot open the Redis clients");
  for (size_t i = 0; i < g->nurls; i++) {
    nodes[i].url = g->urls[i];
    nodes[i].shown = url_masked(g->urls[i]);
    atomic_init(&nodes[i].lost, 0);
  }
  if (g->nurls == 1) {
    rc = cli_open_client(cmd, g, on_lost, &nodes[0], &nodes[0].client);
    if (rc != 0) {
      cli_close_nodes(nodes, g->nurls);
      return rc;
    }
    *out = nodes;
    return 0;
  }

  if ((rc = check_tls_options(cmd, g)) != 0) {
    cli_close_nodes(nodes, g->nurls);
    return rc;
  }
  secret_urls = g->urls;
  nsecret_urls = g->nurls;
  open_all_nodes(g, on_lost, nodes);
  for (size_t i = 0; i < g->nurls; i++) {
    if (nodes[i].err == DLOCK_EINVAL) {
      rc = cli_usage_error(cmd, "--url: cannot use '%s': %s",
                           nodes[i].shown ? nodes[i].shown : "?",
                           nodes[i].detail ? nodes[i].detail : "invalid URL");
      cli_close_nodes(nodes, g->nurls);
      return rc;
    }
    opened += nodes[i].client != NULL;
  }
  if (opened < need) {
    for (size_t i = 0; i < g->nurls; i++)
      if (nodes[i].client == NULL)
        cli_report_node(cmd, &nodes[i], "cannot use it");
    if (need == cli_quorum(g->nurls))
      cli_error(cmd,
                "only %zu of the %zu Redis servers could be used; a "
                "majority (%zu) is needed",
                opened, g->nurls, need);
    else if (opened == 0)
      cli_error(cmd, "none of the %zu Redis servers could be used", g->nurls);
    else
      cli_error(cmd,
                "only %zu of the %zu Redis servers could be used; %zu "
                "are needed",
                opened, g->nurls, need);
    cli_close_nodes(nodes, g->nurls);
    return EXIT_UNAVAILABLE;
  }
  *out = nodes;
  return 0;
}
