/*
 * stock_async: the "MoonCake" flash sale with 100 buyers as operations in
 * flight on one thread, through dlock's event-loop API and a plain epoll
 * loop (the README's "Event loops" section walks through it).
 *
 * Each buyer takes the lock "MoonCake:lock" (waiting up to 5 s, as the
 * seed's tryLock(5, SECONDS)), reads the stock, sells one item if any is
 * left by writing back the decremented value, and unlocks; the reads and
 * writes go through the client's own connection (dlock_client_command_
 * async), so the program needs no second Redis client. The read-modify-
 * write is not atomic: the lock is what keeps two buyers from selling the
 * same item.
 *
 * Usage: DLOCK_URL=redis://127.0.0.1:6379 stock_async [buyers] [stock]
 * Prints what was sold and refused, and exits 1 unless every item was
 * sold exactly once.
 */
#define _POSIX_C_SOURCE 200809L
#include <dlock.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#define STOCK_KEY "MoonCake"

/* ---- the loop: a plain epoll loop driving the client -------------------- */

typedef struct loop {
  int ep;
  long long timer_at_ms; /* -1: no timer */
} loop;

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The client says which descriptor to watch for what. */
static void on_socket(dlock_client_t *c, int fd, int what, void *data) {
  loop *lp = data;
  (void)c;
  if (fd < 0)
    return; /* the client is closed: nothing of ours to free */
  if (what & DLOCK_POLL_REMOVE) {
    epoll_ctl(lp->ep, EPOLL_CTL_DEL, fd, NULL);
    return;
  }
  struct epoll_event ev = {0};
  ev.events = ((what & DLOCK_POLL_IN) ? EPOLLIN : 0) |
              ((what & DLOCK_POLL_OUT) ? EPOLLOUT : 0);
  ev.data.fd = fd;
  if (epoll_ctl(lp->ep, EPOLL_CTL_MOD, fd, &ev) != 0)
    epoll_ctl(lp->ep, EPOLL_CTL_ADD, fd, &ev);
}

/* ... and when it next needs to be called. */
static void on_timer(dlock_client_t *c, int64_t timeout_ms, void *data) {
  loop *lp = data;
  (void)c;
  lp->timer_at_ms = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
}

/* One turn: wait for a descriptor or the timer, tell the client. */
static void turn(loop *lp, dlock_client_t *c) {
  long long wait = 1000;
  if (lp->timer_at_ms >= 0) {
    wait = lp->timer_at_ms - now_ms();
    wait = wait < 0 ? 0 : wait;
  }
  struct epoll_event evs[8];
  int n = epoll_wait(lp->ep, evs, 8, (int)wait);
  for (int i = 0; i < n; i++) {
    int what = 0;
    if (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP))
      what |= DLOCK_POLL_IN;
    if (evs[i].events & EPOLLOUT)
      what |= DLOCK_POLL_OUT;
    dlock_loop_action(c, evs[i].data.fd, what);
  }
  if (lp->timer_at_ms >= 0 && now_ms() >= lp->timer_at_ms) {
    lp->timer_at_ms = -1;
    dlock_loop_action(c, DLOCK_SOCKET_TIMEOUT, 0);
  }
}

/* ---- the sale ----------------------------------------------------------- */

typedef struct sale {
  dlock_client_t *c;
  dlock_t *lock;
  int buyers, done, sold, refused, timed_out, failed;
} sale;

typedef struct buyer {
  sale *s;
  uint64_t owner;
  char left[24];
} buyer;

static void finished(buyer *b) { b->s->done++; }

static void unlocked(dlock_t *l, uint64_t owner, int status, void *data) {
  buyer *b = data;
  (void)l;
  (void)owner;
  if (status != 0) {
    fprintf(stderr, "unlock: %s\n", dlock_last_error());
    b->s->failed++;
  }
  finished(b);
}

static void unlock(buyer *b) {
  if (dlock_unlock_async(b->s->lock, b->owner, unlocked, b) != 0) {
    b->s->failed++;
    finished(b);
  }
}

static void written(dlock_client_t *c, int status, dlock_reply_t *r,
                    void *data) {
  buyer *b = data;
  (void)c;
  dlock_reply_free(r);
  if (status == 0)
    b->s->sold++;
  else
    b->s->failed++;
  unlock(b);
}

/* The stock as read under the lock: one sold if any is left. */
static void read_stock(dlock_client_t *c, int status, dlock_reply_t *r,
                       void *data) {
  buyer *b = data;
  long left = status == 0 && r->type == DLOCK_REPLY_STRING ? atol(r->str) : -1;
  dlock_reply_free(r);
  if (left <= 0) {
    if (left < 0)
      b->s->failed++;
    else
      b->s->refused++;
    unlock(b);
    return;
  }
  snprintf(b->left, sizeof(b->left), "%ld", left - 1);
  const char *set[] = {"SET", STOCK_KEY, b->left};
  if (dlock_client_command_async(c, 3, set, NULL, written, b) != 0) {
    b->s->failed++;
    unlock(b);
  }
}

static void locked(dlock_t *l, uint64_t owner, int status, void *data) {
  buyer *b = data;
  (void)l;
  (void)owner;
  if (status == DLOCK_ETIMEDOUT) {
    b->s->timed_out++;
    finished(b);
    return;
  }
  const char *get[] = {"GET", STOCK_KEY};
  if (status != 0 ||
      dlock_client_command_async(b->s->c, 2, get, NULL, read_stock, b) != 0) {
    fprintf(stderr, "lock: %s\n", dlock_last_error());
    b->s->failed++;
    if (status == 0)
      unlock(b);
    else
      finished(b);
  }
}

static void stocked(dlock_client_t *c, int status, dlock_reply_t *r,
                    void *data) {
  int *ok = data;
  (void)c;
  dlock_reply_free(r);
  *ok = status == 0 ? 1 : -1;
}

/* The stock read at the end (-1: could not be read). */
static void read_left(dlock_client_t *c, int status, dlock_reply_t *r,
                      void *data) {
  long *left = data;
  (void)c;
  *left = status == 0 && r->type == DLOCK_REPLY_STRING ? atol(r->str) : -1;
  dlock_reply_free(r);
}

int main(int argc, char **argv) {
  const char *url = getenv("DLOCK_URL");
  int nbuyers = argc > 1 ? atoi(argv[1]) : 100;
  const char *stock = argc > 2 ? argv[2] : "90";
  if (nbuyers < 1 || nbuyers > 100000 || atoi(stock) < 0) {
    fprintf(stderr, "usage: stock_async [buyers] [stock]\n");
    return 2;
  }
  dlock_options_t o;
  dlock_options_init(&o);
  if (url != NULL)
    o.url = url;
  sale s = {0};
  s.buyers = nbuyers;
  loop lp = {epoll_create1(0), -1};
  int rc = dlock_client_open_async(&o, &s.c);
  if (rc == 0)
    rc = dlock_loop_attach(s.c, on_socket, on_timer, &lp);
  if (rc == 0)
    rc = dlock_get(s.c, STOCK_KEY ":lock", &s.lock);
  if (rc != 0) {
    fprintf(stderr, "stock_async: %s\n", dlock_last_error());
    return 1;
  }
  /* Put the stock up for sale. */
  int ok = 0;
  const char *set[] = {"SET", STOCK_KEY, stock};
  if (dlock_client_command_async(s.c, 3, set, NULL, stocked, &ok) != 0)
    return 1;
  while (ok == 0)
    turn(&lp, s.c);
  if (ok < 0) {
    fprintf(stderr, "stock_async: SET: %s\n", dlock_last_error());
    return 1;
  }
  buyer *buyers = calloc((size_t)nbuyers, sizeof(*buyers));
  if (buyers == NULL)
    return 1;
  for (int i = 0; i < nbuyers; i++) {
    buyers[i].s = &s;
    buyers[i].owner = dlock_owner_new();
    if (dlock_trylock_async(s.lock, buyers[i].owner, 5000, 10000, locked,
                            &buyers[i]) != 0) {
      s.failed++;
      s.done++;
    }
  }
  while (s.done < nbuyers)
    turn(&lp, s.c);
  /* What is left, read the same way: every sale must show in it. */
  long left = -2;
  const char *get[] = {"GET", STOCK_KEY};
  if (dlock_client_command_async(s.c, 2, get, NULL, read_left, &left) != 0)
    return 1;
  while (left == -2)
    turn(&lp, s.c);
  long lost = atol(stock) - s.sold - left;
  printf("sold %d, refused %d (sold out), timed out %d, failed %d, of %d "
         "buyers; %ld left, %ld lost updates\n",
         s.sold, s.refused, s.timed_out, s.failed, nbuyers, left, lost);
  dlock_free(s.lock);
  dlock_client_close(s.c);
  close(lp.ep);
  free(buyers);
  int expected = atoi(stock) < nbuyers ? atoi(stock) : nbuyers;
  return s.sold == expected && s.failed == 0 && lost == 0 ? 0 : 1;
}
