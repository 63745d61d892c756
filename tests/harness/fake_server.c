/*
 * The scripted fake Redis server (see fake_server.h).
 *
 * One thread polls the listening socket, a wake-up pipe and every
 * connection. Everything is guarded by 'mu', which the thread releases only
 * around poll(); the test's threads change the rules or queue work under it
 * and write to the pipe so that the thread looks again. Each connection has
 * a queue of segments to send, each with the time its next byte may leave
 * and, when trickled, the pause between bytes.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "fake_server.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>
#include <hiredis/read.h>

#include "test.h"

typedef struct seg {
  struct seg *next;
  char *data;
  size_t len, off;
  int64_t at_us;    /* the next byte leaves no earlier than this */
  int64_t every_us; /* > 0: one byte at a time, this far apart */
  int close_after;  /* close the connection once this is sent */
} seg;

typedef struct fconn {
  struct fconn *next;
  int fd;
  redisReader *rd;
  seg *head, *tail;
  int closing;  /* close as soon as the thread sees it */
  int want_out; /* the socket was full: poll for POLLOUT */
} fconn;

typedef struct rule {
  struct rule *next; /* newer rules first */
  char *cmd;         /* upper case; NULL: every command */
  fs_action_t a;
  char *reply;
} rule;

struct fs_server {
  pthread_mutex_t mu;
  pthread_cond_t cv; /* commands logged, close requests done */
  pthread_t thread;
  int lfd;
  int wake[2];
  int port;
  char url[64];
  int stopping;
  fconn *conns;
  rule *rules;
  char *password;
  char **log;
  size_t nlog, caplog;
  int accepted;
  unsigned close_req, close_done;
};

static int64_t now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static char *xstrdup(const char *s, size_t n) {
  char *d = malloc(n + 1);
  if (d == NULL)
    TEST_FAIL("fake server: out of memory");
  memcpy(d, s, n);
  d[n] = '\0';
  return d;
}

static void poke(fs_server_t *fs) {
  char b = 1;
  ssize_t n = write(fs->wake[1], &b, 1);
  (void)n; /* a full pipe already wakes the thread */
}

static void queue_seg(fconn *k, const char *data, size_t len, int64_t at_us,
                      int64_t every_us, int close_after) {
  seg *s = calloc(1, sizeof(*s));
  if (s == NULL)
    TEST_FAIL("fake server: out of memory");
  s->data = xstrdup(data, len);
  s->len = len;
  s->at_us = at_us;
  s->every_us = every_us;
  s->close_after = close_after;
  if (k->tail != NULL)
    k->tail->next = s;
  else
    k->head = s;
  k->tail = s;
}

static void free_conn(fconn *k) {
  close(k->fd);
  redisReaderFree(k->rd);
  for (seg *s = k->head; s != NULL;) {
    seg *next = s->next;
    free(s->data);
    free(s);
    s = next;
  }
  free(k);
}

/* ---- plain answers ------------------------------------------------------ */

static char *bulk(const char *s, size_t n, size_t *len) {
  char *out = malloc(n + 32);
  if (out == NULL)
    TEST_FAIL("fake server: out of memory");
  int h = snprintf(out, 32, "$%zu\r\n", n);
  memcpy(out + h, s, n);
  memcpy(out + h + n, "\r\n", 2);
  *len = (size_t)h + n + 2;
  return out;
}

static char *status(const char *s, size_t *len) {
  *len = strlen(s);
  return xstrdup(s, *len);
}

/* The plain answer to a command, as a real server would give it. */
static char *plain_answer(fs_server_t *fs, const redisReply *cmd,
                          const char *name, size_t *len) {
  size_t argc = cmd->elements;
  if (strcmp(name, "PING") == 0)
    return argc > 1 ? bulk(cmd->element[1]->str, cmd->element[1]->len, len)
                    : status("+PONG\r\n", len);
  if (strcmp(name, "ECHO") == 0 && argc == 2)
    return bulk(cmd->element[1]->str, cmd->element[1]->len, len);
  if (strcmp(name, "AUTH") == 0) {
    const redisReply *pass = cmd->element[argc - 1];
    if (fs->password != NULL && (strlen(fs->password) != pass->len ||
                                 memcmp(fs->password, pass->str, pass->len)))
      return status("-WRONGPASS invalid username-password pair\r\n", len);
    return status("+OK\r\n", len);
  }
  if (strcmp(name, "SELECT") == 0 || strcmp(name, "CLIENT") == 0 ||
      strcmp(name, "QUIT") == 0)
    return status("+OK\r\n", len);
  if (strcmp(name, "HELLO") == 0)
    return status("-ERR unknown command 'HELLO'\r\n", len);
  if ((strcmp(name, "SUBSCRIBE") == 0 || strcmp(name, "UNSUBSCRIBE") == 0) &&
      argc > 1) {
    /* One confirmation per channel; the count is just the position. */
    size_t cap = 64, n = 0;
    char *out = malloc(cap);
    for (size_t i = 1; out != NULL && i < argc; i++) {
      const redisReply *ch = cmd->element[i];
      size_t need = n + ch->len + 96;
      if (need > cap) {
        cap = need * 2;
        char *grown = realloc(out, cap);
        if (grown == NULL) {
          free(out);
          out = NULL;
          break;
        }
        out = grown;
      }
      const char *kind = name[0] == 'S' ? "subscribe" : "unsubscribe";
      n += (size_t)snprintf(out + n, cap - n, "*3\r\n$%zu\r\n%s\r\n$%zu\r\n",
                            strlen(kind), kind, ch->len);
      memcpy(out + n, ch->str, ch->len);
      n += ch->len;
      n += (size_t)snprintf(out + n, cap - n, "\r\n:%zu\r\n",
                            name[0] == 'S' ? i : argc - 1 - i);
    }
    if (out == NULL)
      TEST_FAIL("fake server: out of memory");
    *len = n;
    return out;
  }
  char msg[128];
  snprintf(msg, sizeof(msg), "-ERR unknown command '%.40s'\r\n", name);
  return status(msg, len);
}

/* ---- commands ------------------------------------------------------------ */

static void log_command(fs_server_t *fs, const redisReply *cmd,
                        const char *name) {
  char line[512];
  size_t n = (size_t)snprintf(line, sizeof(line), "%s", name);
  for (size_t i = 1; i < cmd->elements && n < sizeof(line) - 48; i++) {
    const redisReply *a = cmd->element[i];
    size_t take = a->len < 40 ? a->len : 40;
    line[n++] = ' ';
    for (size_t j = 0; j < take; j++)
      line[n++] = isprint((unsigned char)a->str[j]) ? a->str[j] : '.';
    line[n] = '\0';
  }
  if (fs->nlog == fs->caplog) {
    size_t cap = fs->caplog ? fs->caplog * 2 : 64;
    char **grown = realloc(fs->log, cap * sizeof(*grown));
    if (grown == NULL)
      TEST_FAIL("fake server: out of memory");
    fs->log = grown;
    fs->caplog = cap;
  }
  fs->log[fs->nlog++] = xstrdup(line, strlen(line));
  pthread_cond_broadcast(&fs->cv);
}

/* 'name2' is the name and the first argument ("SENTINEL REPLICAS"), or
 * NULL for a command without arguments. */
static rule *find_rule(fs_server_t *fs, const char *name, const char *name2) {
  for (rule **p = &fs->rules; *p != NULL; p = &(*p)->next)
    if ((*p)->cmd == NULL || strcmp((*p)->cmd, name) == 0 ||
        (name2 != NULL && strcmp((*p)->cmd, name2) == 0))
      return *p;
  return NULL;
}

static void use_rule(fs_server_t *fs, rule *r) {
  if (r->a.times <= 0 || --r->a.times > 0)
    return;
  for (rule **p = &fs->rules; *p != NULL; p = &(*p)->next) {
    if (*p == r) {
      *p = r->next;
      free(r->cmd);
      free(r->reply);
      free(r);
      return;
    }
  }
}

static void handle_command(fs_server_t *fs, fconn *k, const redisReply *cmd) {
  if (cmd->type != REDIS_REPLY_ARRAY || cmd->elements == 0 ||
      cmd->element[0]->type != REDIS_REPLY_STRING) {
    k->closing = 1; /* not a command: a real server hangs up too */
    return;
  }
  char name[64];
  size_t nl = cmd->element[0]->len < 63 ? cmd->element[0]->len : 63;
  for (size_t i = 0; i < nl; i++)
    name[i] = (char)toupper((unsigned char)cmd->element[0]->str[i]);
  name[nl] = '\0';
  log_command(fs, cmd, name);
  char name2[160];
  int has2 = cmd->elements > 1 && cmd->element[1]->type == REDIS_REPLY_STRING;
  if (has2) {
    size_t al = cmd->element[1]->len < 90 ? cmd->element[1]->len : 90;
    memcpy(name2, name, nl);
    name2[nl] = ' ';
    for (size_t i = 0; i < al; i++)
      name2[nl + 1 + i] = (char)toupper((unsigned char)cmd->element[1]->str[i]);
    name2[nl + 1 + al] = '\0';
  }

  fs_action_t a = {0};
  size_t len;
  char *answer;
  rule *r = find_rule(fs, name, has2 ? name2 : NULL);
  if (r != NULL) {
    a = r->a;
    answer = r->reply != NULL ? status(r->reply, &len)
                              : plain_answer(fs, cmd, name, &len);
    use_rule(fs, r); /* may free the rule: 'a' and 'answer' are copies */
  } else {
    answer = plain_answer(fs, cmd, name, &len);
  }
  int64_t at = now_us() + a.delay_ms * 1000;
  switch (a.how) {
  case FS_REPLY:
    queue_seg(k, answer, len, at, 0, 0);
    break;
  case FS_TRICKLE:
    queue_seg(k, answer, len, at, (a.every_ms > 0 ? a.every_ms : 100) * 1000,
              0);
    break;
  case FS_SILENT:
    break;
  case FS_CLOSE:
    k->closing = 1;
    break;
  case FS_CLOSE_MID:
    queue_seg(k, answer, len / 2 > 0 ? len / 2 : 1, at, 0, 1);
    break;
  }
  if (strcmp(name, "QUIT") == 0 && a.how == FS_REPLY)
    k->tail->close_after = 1;
  free(answer);
}

/* ---- the thread ---------------------------------------------------------- */

/* Reads what the connection has; 0, or -1 when it must be closed. */
static int read_conn(fs_server_t *fs, fconn *k) {
  char buf[16384];
  ssize_t n = recv(k->fd, buf, sizeof(buf), MSG_DONTWAIT);
  if (n == 0)
    return -1;
  if (n < 0)
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
  if (redisReaderFeed(k->rd, buf, (size_t)n) != REDIS_OK)
    return -1;
  for (;;) {
    void *cmd = NULL;
    if (redisReaderGetReply(k->rd, &cmd) != REDIS_OK)
      return -1;
    if (cmd == NULL)
      return 0;
    handle_command(fs, k, cmd);
    freeReplyObject(cmd);
    if (k->closing)
      return -1;
  }
}

/* Sends what is due; 0, or -1 when the connection must be closed. Sets
 * '*next_us' to when something is due next (unchanged when nothing is) and
 * '*want_out' when the socket is full. */
static int write_conn(fconn *k, int64_t now, int64_t *next_us, int *want_out) {
  *want_out = 0;
  while (k->head != NULL) {
    seg *s = k->head;
    if (s->at_us > now) {
      if (s->at_us < *next_us)
        *next_us = s->at_us;
      return 0;
    }
    size_t want = s->every_us > 0 ? 1 : s->len - s->off;
    ssize_t n =
        send(k->fd, s->data + s->off, want, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
        *want_out = 1;
        return 0;
      }
      return -1;
    }
    s->off += (size_t)n;
    if (s->off < s->len) {
      if (s->every_us > 0)
        s->at_us = now + s->every_us;
      continue;
    }
    int close_after = s->close_after;
    k->head = s->next;
    if (k->head == NULL)
      k->tail = NULL;
    free(s->data);
    free(s);
    if (close_after)
      return -1;
  }
  return 0;
}

static void accept_conn(fs_server_t *fs) {
  int fd = accept(fs->lfd, NULL, NULL);
  if (fd < 0)
    return;
  fconn *k = calloc(1, sizeof(*k));
  if (k == NULL || (k->rd = redisReaderCreate()) == NULL)
    TEST_FAIL("fake server: out of memory");
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  k->fd = fd;
  k->next = fs->conns;
  fs->conns = k;
  fs->accepted++;
}

static void *server_main(void *arg) {
  fs_server_t *fs = arg;
  pthread_mutex_lock(&fs->mu);
  while (!fs->stopping) {
    if (fs->close_done != fs->close_req) {
      for (fconn *k = fs->conns; k != NULL; k = k->next)
        k->closing = 1;
    }
    /* Close what must go, send what is due, then wait for the rest. */
    int64_t now = now_us(), next = INT64_MAX;
    size_t nconn = 0;
    for (fconn **p = &fs->conns; *p != NULL;) {
      fconn *k = *p;
      if (!k->closing && write_conn(k, now, &next, &k->want_out) != 0)
        k->closing = 1;
      if (k->closing) {
        *p = k->next;
        free_conn(k);
        continue;
      }
      nconn++;
      p = &k->next;
    }
    if (fs->close_done != fs->close_req) {
      fs->close_done = fs->close_req;
      pthread_cond_broadcast(&fs->cv);
    }
    struct pollfd *pf = calloc(nconn + 2, sizeof(*pf));
    fconn **ks = calloc(nconn + 1, sizeof(*ks));
    if (pf == NULL || ks == NULL)
      TEST_FAIL("fake server: out of memory");
    pf[0] = (struct pollfd){.fd = fs->lfd, .events = POLLIN};
    pf[1] = (struct pollfd){.fd = fs->wake[0], .events = POLLIN};
    size_t i = 0;
    for (fconn *k = fs->conns; k != NULL; k = k->next, i++) {
      ks[i] = k;
      pf[i + 2] = (struct pollfd){
          .fd = k->fd, .events = (short)(POLLIN | (k->want_out ? POLLOUT : 0))};
    }
    int timeout = -1;
    if (next != INT64_MAX) {
      int64_t ms = (next - now + 999) / 1000;
      timeout = ms < 0 ? 0 : ms > 60000 ? 60000 : (int)ms;
    }
    pthread_mutex_unlock(&fs->mu);
    int n = poll(pf, nconn + 2, timeout);
    pthread_mutex_lock(&fs->mu);
    if (n > 0) {
      if (pf[1].revents & POLLIN) {
        char drain[64];
        while (read(fs->wake[0], drain, sizeof(drain)) > 0) {
        }
      }
      if (pf[0].revents & POLLIN)
        accept_conn(fs);
      for (i = 0; i < nconn; i++)
        if ((pf[i + 2].revents & (POLLIN | POLLHUP | POLLERR)) &&
            read_conn(fs, ks[i]) != 0)
          ks[i]->closing = 1;
    }
    free(pf);
    free(ks);
  }
  while (fs->conns != NULL) {
    fconn *k = fs->conns;
    fs->conns = k->next;
    free_conn(k);
  }
  pthread_mutex_unlock(&fs->mu);
  return NULL;
}

/* ---- the test's side ------------------------------------------------------
 */

fs_server_t *fs_start(void) {
  fs_server_t *fs = calloc(1, sizeof(*fs));
  if (fs == NULL)
    TEST_FAIL("fake server: out of memory");
  pthread_mutex_init(&fs->mu, NULL);
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&fs->cv, &attr);
  pthread_condattr_destroy(&attr);
  if (pipe2(fs->wake, O_NONBLOCK | O_CLOEXEC) != 0)
    TEST_FAIL("fake server: pipe: %s", strerror(errno));
  fs->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fs->lfd < 0)
    TEST_FAIL("fake server: socket: %s", strerror(errno));
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t sl = sizeof(sa);
  if (bind(fs->lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
      listen(fs->lfd, 64) != 0 ||
      getsockname(fs->lfd, (struct sockaddr *)&sa, &sl) != 0)
    TEST_FAIL("fake server: bind/listen: %s", strerror(errno));
  fs->port = ntohs(sa.sin_port);
  snprintf(fs->url, sizeof(fs->url), "redis://127.0.0.1:%d", fs->port);
  if (pthread_create(&fs->thread, NULL, server_main, fs) != 0)
    TEST_FAIL("fake server: pthread_create failed");
  return fs;
}

void fs_free(fs_server_t *fs) {
  if (fs == NULL)
    return;
  pthread_mutex_lock(&fs->mu);
  fs->stopping = 1;
  poke(fs);
  pthread_mutex_unlock(&fs->mu);
  pthread_join(fs->thread, NULL);
  close(fs->lfd);
  close(fs->wake[0]);
  close(fs->wake[1]);
  fs_clear(fs);
  for (size_t i = 0; i < fs->nlog; i++)
    free(fs->log[i]);
  free(fs->log);
  free(fs->password);
  pthread_cond_destroy(&fs->cv);
  pthread_mutex_destroy(&fs->mu);
  free(fs);
}

int fs_port(const fs_server_t *fs) { return fs->port; }

const char *fs_url(const fs_server_t *fs) { return fs->url; }

void fs_set(fs_server_t *fs, const char *cmd, const fs_action_t *a) {
  rule *r = calloc(1, sizeof(*r));
  if (r == NULL)
    TEST_FAIL("fake server: out of memory");
  r->a = *a;
  if (cmd != NULL) {
    r->cmd = xstrdup(cmd, strlen(cmd));
    for (char *p = r->cmd; *p; p++)
      *p = (char)toupper((unsigned char)*p);
  }
  if (a->reply != NULL)
    r->reply = xstrdup(a->reply, strlen(a->reply));
  r->a.reply = NULL;
  pthread_mutex_lock(&fs->mu);
  r->next = fs->rules;
  fs->rules = r;
  pthread_mutex_unlock(&fs->mu);
}

void fs_clear(fs_server_t *fs) {
  pthread_mutex_lock(&fs->mu);
  while (fs->rules != NULL) {
    rule *r = fs->rules;
    fs->rules = r->next;
    free(r->cmd);
    free(r->reply);
    free(r);
  }
  pthread_mutex_unlock(&fs->mu);
}

void fs_password(fs_server_t *fs, const char *pass) {
  pthread_mutex_lock(&fs->mu);
  free(fs->password);
  fs->password = pass != NULL ? xstrdup(pass, strlen(pass)) : NULL;
  pthread_mutex_unlock(&fs->mu);
}

static int count_locked(fs_server_t *fs, const char *cmd) {
  if (cmd == NULL)
    return (int)fs->nlog;
  size_t n = strlen(cmd);
  int count = 0;
  for (size_t i = 0; i < fs->nlog; i++)
    if (strncasecmp(fs->log[i], cmd, n) == 0 &&
        (fs->log[i][n] == '\0' || fs->log[i][n] == ' '))
      count++;
  return count;
}

int fs_count(fs_server_t *fs, const char *cmd) {
  pthread_mutex_lock(&fs->mu);
  int n = count_locked(fs, cmd);
  pthread_mutex_unlock(&fs->mu);
  return n;
}

int fs_wait_count(fs_server_t *fs, const char *cmd, int n, int64_t timeout_ms) {
  int64_t end = now_us() + timeout_ms * 1000;
  struct timespec ts = {.tv_sec = (time_t)(end / 1000000),
                        .tv_nsec = (long)(end % 1000000) * 1000};
  pthread_mutex_lock(&fs->mu);
  int ok;
  while (!(ok = count_locked(fs, cmd) >= n) && now_us() < end)
    pthread_cond_timedwait(&fs->cv, &fs->mu, &ts);
  pthread_mutex_unlock(&fs->mu);
  return ok;
}

const char *fs_command(fs_server_t *fs, int i) {
  pthread_mutex_lock(&fs->mu);
  const char *s = i >= 0 && (size_t)i < fs->nlog ? fs->log[i] : NULL;
  pthread_mutex_unlock(&fs->mu);
  return s;
}

int fs_accepted(fs_server_t *fs) {
  pthread_mutex_lock(&fs->mu);
  int n = fs->accepted;
  pthread_mutex_unlock(&fs->mu);
  return n;
}

int fs_open_connections(fs_server_t *fs) {
  pthread_mutex_lock(&fs->mu);
  int n = 0;
  for (fconn *k = fs->conns; k != NULL; k = k->next)
    n++;
  pthread_mutex_unlock(&fs->mu);
  return n;
}

void fs_send_all(fs_server_t *fs, const char *raw) {
  pthread_mutex_lock(&fs->mu);
  for (fconn *k = fs->conns; k != NULL; k = k->next)
    queue_seg(k, raw, strlen(raw), now_us(), 0, 0);
  poke(fs);
  pthread_mutex_unlock(&fs->mu);
}

void fs_send_first(fs_server_t *fs, const char *raw) {
  pthread_mutex_lock(&fs->mu);
  for (fconn *k = fs->conns; k != NULL; k = k->next) {
    /* Queued last, then moved ahead of every reply not yet begun. */
    queue_seg(k, raw, strlen(raw), now_us(), 0, 0);
    seg *s = k->tail, **at = &k->head;
    if (*at != NULL && (*at)->off > 0)
      at = &(*at)->next;
    if (*at == s)
      continue;
    seg **p = at;
    while ((*p)->next != s)
      p = &(*p)->next;
    (*p)->next = NULL;
    k->tail = *p;
    s->next = *at;
    *at = s;
  }
  poke(fs);
  pthread_mutex_unlock(&fs->mu);
}

void fs_close_all(fs_server_t *fs) {
  pthread_mutex_lock(&fs->mu);
  unsigned want = ++fs->close_req;
  poke(fs);
  while ((int)(fs->close_done - want) < 0)
    pthread_cond_wait(&fs->cv, &fs->mu);
  pthread_mutex_unlock(&fs->mu);
}
