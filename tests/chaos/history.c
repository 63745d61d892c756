/*
 * The history: one append-only text file per process, one line per event,
 * merged and sorted by time when the run is over.
 *
 * Text lines rather than a binary format, so that a kept history can be
 * read, grepped and sorted by hand when a check fails.
 */
#include "chaos_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *const ev_names[EV_COUNT] = {
    "acq",  "ok",    "fail", "re",   "rd",   "wr",   "fw",   "reu",  "rel",
    "reld", "fault", "heal", "kill", "stop", "cont", "free", "down", "up"};

int64_t chaos__now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void chaos__sleep_ms(int64_t ms) {
  if (ms <= 0)
    return;
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

uint64_t chaos__rand(uint64_t *state) {
  uint64_t x = *state;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  *state = x;
  return x;
}

int chaos__history_open(const char *dir, const char *name) {
  char path[512];
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  return open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
}

void chaos__record(int fd, chaos_ev_t ev, int owner, int pid, int64_t hold,
                   int64_t a, int64_t b, int64_t c) {
  char line[200];
  int n = snprintf(line, sizeof(line),
                   "%" PRId64 " %s %d %d %" PRId64 " %" PRId64 " %" PRId64
                   " %" PRId64 "\n",
                   chaos__now_us(), ev_names[ev], owner, pid, hold, a, b, c);
  if (n <= 0 || (size_t)n >= sizeof(line) || fd < 0)
    return;
  /* A regular file opened with O_APPEND takes each write() whole. */
  ssize_t w = write(fd, line, (size_t)n);
  (void)w;
}

static int ev_of(const char *name) {
  for (int i = 0; i < EV_COUNT; i++)
    if (strcmp(name, ev_names[i]) == 0)
      return i;
  return -1;
}

static int by_time(const void *pa, const void *pb) {
  const chaos_event_t *a = pa, *b = pb;
  if (a->t_us != b->t_us)
    return (a->t_us > b->t_us) - (a->t_us < b->t_us);
  return (a->seq > b->seq) - (a->seq < b->seq);
}

static int is_history(const char *name) {
  size_t n = strlen(name);
  return n > 4 && strcmp(name + n - 4, ".log") == 0;
}

static int load_file(const char *path, chaos_event_t **ev, size_t *n,
                     size_t *cap) {
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return -1;
  char line[256], name[16];
  while (fgets(line, sizeof(line), f) != NULL) {
    chaos_event_t e;
    if (sscanf(line,
               "%" SCNd64 " %15s %d %d %" SCNd64 " %" SCNd64 " %" SCNd64
               " %" SCNd64,
               &e.t_us, name, &e.owner, &e.pid, &e.hold, &e.a, &e.b,
               &e.c) != 8 ||
        (e.ev = ev_of(name)) < 0)
      continue;
    e.seq = *n;
    if (*n == *cap) {
      size_t ncap = *cap ? *cap * 2 : 4096;
      chaos_event_t *grown = realloc(*ev, ncap * sizeof(*grown));
      if (grown == NULL) {
        fclose(f);
        return -1;
      }
      *ev = grown;
      *cap = ncap;
    }
    (*ev)[(*n)++] = e;
  }
  fclose(f);
  return 0;
}

int chaos__history_load(const char *dir, chaos_event_t **out, size_t *n) {
  *out = NULL;
  *n = 0;
  size_t cap = 0;
  DIR *d = opendir(dir);
  if (d == NULL)
    return -1;
  int rc = 0;
  struct dirent *de;
  while (rc == 0 && (de = readdir(d)) != NULL) {
    if (!is_history(de->d_name))
      continue;
    char path[768];
    snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
    rc = load_file(path, out, n, &cap);
  }
  closedir(d);
  if (rc == 0 && *n > 0)
    qsort(*out, *n, sizeof(**out), by_time);
  return rc;
}

void chaos__history_remove(const char *dir) {
  DIR *d = opendir(dir);
  if (d == NULL)
    return;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (!is_history(de->d_name))
      continue;
    char path[768];
    snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
    unlink(path);
  }
  closedir(d);
  rmdir(dir);
}

uint64_t chaos__client_hash(const char *id) {
  uint64_t h = 1469598103934665603ULL;
  for (const char *p = id; *p != '\0'; p++) {
    h ^= (unsigned char)*p;
    h *= 1099511628211ULL;
  }
  return h;
}
