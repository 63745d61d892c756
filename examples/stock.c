/*
 * stock: the "MoonCake" flash sale, guarded by a dlock.
 *
 * Every worker thread takes the lock "MoonCake", reads the stock, sells one
 * item if any is left by writing back the decremented value, and unlocks.
 * The read-modify-write is deliberately not atomic: the lock is what keeps
 * two workers from selling the same item. With --no-lock the same workers
 * run unguarded, to show what goes wrong without it.
 *
 * Usage: DLOCK_URL=redis://127.0.0.1:6379 stock [--no-lock] [threads]
 * Outcomes are counted with INCR on "MoonCake:<outcome>" so that several
 * processes can share one sale (scripts/demo.sh runs four).
 */
#define _POSIX_C_SOURCE 200809L
#include <dlock.h>
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *url;
static dlock_t *lock; /* NULL with --no-lock */
static pthread_barrier_t start;
static _Atomic int failures;

/* Opens a plain hiredis connection for the sale's own data. It reads the two
 * URL forms dlock accepts, so one DLOCK_URL configures both. */
static redisContext *connect_url(const char *u) {
  char buf[1024], *db = NULL, *auth = NULL, *host, *p;
  redisContext *r;
  snprintf(buf, sizeof buf, "%s", u);
  if (strncmp(buf, "unix://", 7) == 0) {
    if ((p = strstr(buf, "?db=")))
      *p = '\0', db = p + 4;
    r = redisConnectUnix(buf + 7);
  } else {
    host = strncmp(buf, "redis://", 8) == 0 ? buf + 8 : buf;
    if ((p = strrchr(host, '@')))
      *p = '\0', auth = host, host = p + 1;
    if ((p = strchr(host, '/')))
      *p = '\0', db = p + 1;
    int port = 6379;
    if ((p = strrchr(host, ':')))
      *p = '\0', port = atoi(p + 1);
    r = redisConnect(host, port);
  }
  if (r == NULL || r->err) {
    fprintf(stderr, "stock: %s: %s\n", u, r ? r->errstr : "out of memory");
    redisFree(r);
    return NULL;
  }
  if (auth && (p = strchr(auth, ':')) != NULL) {
    *p = '\0'; /* "user:pass", or ":pass" for the default user */
    freeReplyObject(*auth ? redisCommand(r, "AUTH %s %s", auth, p + 1)
                          : redisCommand(r, "AUTH %s", p + 1));
  }
  if (db && *db)
    freeReplyObject(redisCommand(r, "SELECT %s", db));
  return r;
}

static void fail(const char *what, int rc) {
  if (rc < 0)
    fprintf(stderr, "stock: %s: %s (%s)\n", what, dlock_strerror(rc),
            dlock_last_error());
  failures++;
}

static void *worker(void *arg) {
  redisContext *r = connect_url(url);
  const char *outcome = "failed";
  (void)arg;
  pthread_barrier_wait(&start); /* all start at once, to really compete */
  if (r == NULL) {
    fail("connect", 0);
    return NULL;
  }
  int rc = lock ? dlock_trylock(lock, 5000, DLOCK_WATCHDOG) : 0;
  if (rc == DLOCK_ETIMEDOUT) {
    outcome = "timedout";
  } else if (rc < 0) {
    fail("trylock", rc);
  } else {
    redisReply *rep = redisCommand(r, "GET MoonCakeStock");
    long stock = rep && rep->type == REDIS_REPLY_STRING ? atol(rep->str) : 0;
    freeReplyObject(rep);
    if (stock > 0) {
      /* A real sale does work between reading and writing (a payment, an
       * order row). One millisecond stands in for it; without the lock it
       * is the window in which other workers read the same stale stock. */
      nanosleep(&(struct timespec){0, 1000000}, NULL);
      freeReplyObject(redisCommand(r, "SET MoonCakeStock %ld", stock - 1));
      outcome = "sold";
    } else {
      outcome = "refused";
    }
    if (lock && (rc = dlock_unlock(lock)) < 0)
      fail("unlock", rc);
  }
  freeReplyObject(redisCommand(r, "INCR MoonCake:%s", outcome));
  redisFree(r);
  return NULL;
}

int main(int argc, char **argv) {
  int use_lock = 1, nthreads = 25, rc;
  dlock_client_t *client = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--no-lock") == 0)
      use_lock = 0;
    else if ((nthreads = atoi(argv[i])) < 1 || nthreads > 1000) {
      fprintf(stderr, "usage: stock [--no-lock] [threads 1..1000]\n");
      return 2;
    }
  }
  url = getenv("DLOCK_URL") ? getenv("DLOCK_URL") : "redis://127.0.0.1:6379";
  if (use_lock) {
    dlock_options_t o;
    dlock_options_init(&o);
    o.url = url;
    if ((rc = dlock_client_open(&o, &client)) < 0 ||
        (rc = dlock_get(client, "MoonCake", &lock)) < 0) {
      fail(url, rc);
      dlock_client_close(client);
      return 1;
    }
  }
  pthread_t t[1000];
  pthread_barrier_init(&start, NULL, (unsigned)nthreads);
  for (int i = 0; i < nthreads; i++)
    if (pthread_create(&t[i], NULL, worker, NULL) != 0)
      abort();
  for (int i = 0; i < nthreads; i++)
    pthread_join(t[i], NULL);
  pthread_barrier_destroy(&start);
  dlock_free(lock);
  dlock_client_close(client);
  return failures ? 1 : 0;
}
