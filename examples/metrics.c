/*
 * metrics: a service that takes locks and shows what they cost, on a
 * Prometheus /metrics page and in a log line per event.
 *
 * Worker threads take one of a few "report:N" locks (the first much more
 * often than the others), hold it a moment and let it go, some with a
 * short wait that can run out. The client's statistics are served over
 * HTTP on 127.0.0.1:PORT/metrics in the Prometheus text format, and with
 * --log every event is written to stderr, to show how on_event is bridged
 * to a log.
 *
 * Usage: DLOCK_URL=redis://127.0.0.1:6379 metrics [--port PORT]
 *          [--threads N] [--seconds S] [--log] [--once]
 * --once runs the workload for --seconds and prints the page instead of
 * serving it. Without --seconds it serves until killed.
 */
#define _POSIX_C_SOURCE 200809L
#include <dlock.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static dlock_client_t *client;
static atomic_int stopping;

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* The event hook as a log: one line per event. It runs on the thread that
 * raised the event with none of dlock's locks held; it must be quick, and
 * fprintf to stderr is. A tracer would start or end a span here instead,
 * keyed by name and owner. */
static void log_event(void *data, const dlock_event_t *e) {
  (void)data;
  fprintf(stderr,
          "dlock event=%s lock=%.*s owner=%llu token=%llu "
          "wait_us=%lld hold_us=%lld err=%s\n",
          dlock_event_kind_name(e->kind), (int)e->name_len,
          e->name != NULL ? e->name : "", (unsigned long long)e->owner,
          (unsigned long long)e->token, (long long)e->wait_us,
          (long long)e->hold_us, e->err != 0 ? dlock_err_name(e->err) : "-");
}

static void *worker(void *arg) {
  unsigned seed = (unsigned)(uintptr_t)arg * 2654435761u;
  dlock_t *locks[4];
  for (int i = 0; i < 4; i++) {
    char name[32];
    snprintf(name, sizeof name, "report:%d", i);
    if (dlock_get(client, name, &locks[i]) != 0)
      return NULL;
  }
  while (!atomic_load(&stopping)) {
    /* Half the work goes to report:0, the hot lock operators look for. */
    int r = rand_r(&seed) % 8, which = r < 4 ? 0 : r % 4;
    int64_t wait = rand_r(&seed) % 4 == 0 ? 20 : 2000;
    if (dlock_trylock(locks[which], wait, 10000) == 0) {
      sleep_ms(1 + rand_r(&seed) % 10);
      dlock_unlock(locks[which]);
    }
    sleep_ms(rand_r(&seed) % 20);
  }
  for (int i = 0; i < 4; i++)
    dlock_free(locks[i]);
  return NULL;
}

/* The page: the statistics in the text format, in a buffer of its own
 * (the caller frees it). */
static char *render(size_t *len) {
  dlock_stats_t s;
  dlock_client_stats(client, &s);
  size_t need = dlock_stats_format(&s, "service=\"metrics-example\"", NULL, 0);
  char *text = malloc(need + 1);
  if (text != NULL)
    *len =
        dlock_stats_format(&s, "service=\"metrics-example\"", text, need + 1);
  return text;
}

/* A minimal HTTP server: every request gets the page. */
static void serve(int port, int seconds) {
  int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
      listen(fd, 16) != 0) {
    perror("metrics: listen");
    exit(1);
  }
  fprintf(stderr, "metrics: serving http://127.0.0.1:%d/metrics\n", port);
  time_t end = seconds > 0 ? time(NULL) + seconds : 0;
  while (end == 0 || time(NULL) < end) {
    /* A bounded wait, so that --seconds ends the server without a last
     * request. */
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 200) != 1)
      continue;
    int c = accept(fd, NULL, NULL);
    if (c < 0)
      continue;
    char req[2048];
    (void)read(c, req, sizeof req);
    size_t len = 0;
    char *page = render(&len);
    char head[160];
    int n = snprintf(head, sizeof head,
                     "HTTP/1.0 200 OK\r\nContent-Type: text/plain; "
                     "version=0.0.4\r\nContent-Length: %zu\r\n\r\n",
                     page != NULL ? len : 0);
    (void)write(c, head, (size_t)n);
    if (page != NULL)
      (void)write(c, page, len);
    free(page);
    close(c);
  }
  close(fd);
}

int main(int argc, char **argv) {
  int port = 9464, threads = 8, seconds = 0, log = 0, once = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--port") == 0 && i + 1 < argc)
      port = atoi(argv[++i]);
    else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
      threads = atoi(argv[++i]);
    else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
      seconds = atoi(argv[++i]);
    else if (strcmp(argv[i], "--log") == 0)
      log = 1;
    else if (strcmp(argv[i], "--once") == 0)
      once = 1;
    else {
      fprintf(stderr, "usage: metrics [--port PORT] [--threads N] "
                      "[--seconds S] [--log] [--once]\n");
      return 2;
    }
  }
  if (threads < 1 || threads > 256)
    threads = 8;
  if (once && seconds == 0)
    seconds = 3;
  dlock_options_t o;
  dlock_options_init(&o);
  o.url = getenv("DLOCK_URL") ? getenv("DLOCK_URL") : "redis://127.0.0.1:6379";
  if (log)
    o.on_event = log_event;
  int rc = dlock_client_open(&o, &client);
  if (rc != 0) {
    fprintf(stderr, "metrics: %s: %s\n", dlock_strerror(rc),
            dlock_last_error());
    return 1;
  }
  pthread_t t[256];
  for (int i = 0; i < threads; i++)
    pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1));
  if (once) {
    sleep_ms(seconds * 1000L);
  } else {
    serve(port, seconds);
  }
  atomic_store(&stopping, 1);
  for (int i = 0; i < threads; i++)
    pthread_join(t[i], NULL);
  if (once) {
    size_t len = 0;
    char *page = render(&len);
    if (page != NULL)
      fwrite(page, 1, len, stdout);
    free(page);
  }
  dlock_client_close(client);
  return 0;
}
