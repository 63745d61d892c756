/*
 * The workload: one worker process runs several threads, each with its own
 * dlock client(s), each looping until the run's deadline:
 *
 *   acquire -> (sometimes a reentrant acquire) -> GET counter -> sleep ->
 *   SET counter+1 -> fenced write -> (reentrant release) -> release
 *
 * The counter and the fenced resource live on a Redis of their own that
 * the nemesis never touches: they stand for the system the lock protects,
 * so a lock server that forgets its data cannot also erase the evidence.
 * Every step is recorded in the process's history file.
 *
 * In a semaphore run (permits > 0) a thread takes a permit of the
 * expirable-permit semaphore instead, and its hold is a sleep: up to N
 * holders may read and write the counter at once, and their fencing
 * tokens need not reach the resource in order, so the counter and the
 * fenced writes say nothing there; the checker counts the holders.
 */
#include "chaos_internal.h"

#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "dlock.h"

/*
 * The protected resource: it refuses a write whose token is below the
 * highest it has accepted, and one with an equal token from another hold
 * (two holders with one token would mean the counter went backwards). It
 * logs what it accepts, in its own order, for the checker.
 */
static const char fence_script[] =
    "local max = tonumber(redis.call('get', KEYS[1]) or '0')\n"
    "local token = tonumber(ARGV[1])\n"
    "if token < max or (token == max and\n"
    "    redis.call('get', KEYS[2]) ~= ARGV[2]) then\n"
    "  return 0\n"
    "end\n"
    "redis.call('set', KEYS[1], ARGV[1])\n"
    "redis.call('set', KEYS[2], ARGV[2])\n"
    "redis.call('rpush', KEYS[3], ARGV[1] .. ' ' .. ARGV[2])\n"
    "return 1\n";

typedef struct wthread {
  const chaos_env_t *env;
  int fd;
  int pid;
  int owner;
  int index;
  int64_t lease_ms;
  dlock_client_t *clients[CHAOS_NODES_MAX];
  dlock_t *parts[CHAOS_NODES_MAX];
  dlock_t *lock;     /* parts[0], or the RedLock over the parts */
  dlock_psem_t *sem; /* a semaphore run's semaphore, on clients[0] */
  redisContext *res;
  uint64_t rng;
  pthread_t thread;
} wthread;

static void rec(const wthread *w, chaos_ev_t ev, int64_t hold, int64_t a,
                int64_t b, int64_t c) {
  chaos__record(w->fd, ev, w->owner, w->pid, hold, a, b, c);
}

static void close_clients(wthread *w) {
  dlock_psem_free(w->sem);
  w->sem = NULL;
  if (w->lock != w->parts[0])
    dlock_free(w->lock);
  w->lock = NULL;
  for (int i = 0; i < CHAOS_NODES_MAX; i++) {
    dlock_free(w->parts[i]);
    dlock_client_close(w->clients[i]);
    w->parts[i] = NULL;
    w->clients[i] = NULL;
  }
}

/* Opens one client per lock server. It can fail while the nemesis holds a
 * server down; the caller tries again later. */
static int open_clients(wthread *w) {
  const chaos_config_t *cfg = w->env->cfg;
  for (int i = 0; i < w->env->nnodes; i++) {
    char id[64];
    snprintf(id, sizeof(id), CHAOS_ID_PREFIX "%d-%d-n%d", w->pid, w->index, i);
    dlock_options_t o;
    dlock_options_init(&o);
    o.url = w->env->urls[i];
    o.tls_ca_file = w->env->tls_ca;
    o.client_id = id;
    o.connect_timeout_ms = cfg->command_timeout_ms;
    o.command_timeout_ms = cfg->command_timeout_ms;
    o.watchdog_timeout_ms = cfg->watchdog_timeout_ms;
    if (dlock_client_open(&o, &w->clients[i]) != 0 ||
        dlock_get(w->clients[i], CHAOS_LOCK, &w->parts[i]) != 0) {
      close_clients(w);
      return -1;
    }
  }
  if (cfg->permits > 0 &&
      dlock_psem_get(w->clients[0], CHAOS_SEM, &w->sem) != 0) {
    close_clients(w);
    return -1;
  }
  if (w->env->nnodes == 1) {
    w->lock = w->parts[0];
  } else if (dlock_get_red(w->parts, (size_t)w->env->nnodes, &w->lock) != 0) {
    close_clients(w);
    return -1;
  }
  return 0;
}

/* The resource connection, opened again after any error. */
static redisReply *res_cmd(wthread *w, int argc, const char **argv) {
  if (w->res == NULL) {
    struct timeval tv = {1, 0};
    w->res = redisConnectWithTimeout("127.0.0.1", w->env->resource_port, tv);
    if (w->res == NULL || w->res->err) {
      redisFree(w->res);
      w->res = NULL;
      return NULL;
    }
    redisSetTimeout(w->res, tv);
  }
  redisReply *r = redisCommandArgv(w->res, argc, argv, NULL);
  if (r == NULL) {
    redisFree(w->res);
    w->res = NULL;
  }
  return r;
}

/* GET counter; the value (nil reads 0), or -1 when the resource failed. */
static int64_t counter_get(wthread *w) {
  const char *argv[] = {"GET", CHAOS_COUNTER};
  redisReply *r = res_cmd(w, 2, argv);
  int64_t v = -1;
  if (r != NULL && r->type == REDIS_REPLY_NIL)
    v = 0;
  else if (r != NULL && r->type == REDIS_REPLY_STRING)
    v = strtoll(r->str, NULL, 10);
  freeReplyObject(r);
  return v;
}

/* SET counter; 1 when acknowledged, 0 when the outcome is unknown. */
static int counter_set(wthread *w, int64_t v) {
  char buf[24];
  snprintf(buf, sizeof(buf), "%" PRId64, v);
  const char *argv[] = {"SET", CHAOS_COUNTER, buf};
  redisReply *r = res_cmd(w, 3, argv);
  int ok = r != NULL && r->type == REDIS_REPLY_STATUS;
  freeReplyObject(r);
  return ok;
}

/* The fenced write: 1 accepted, 0 refused, -1 no answer. */
static int fenced_write(wthread *w, uint64_t token, int64_t hold) {
  char tok[24], id[48];
  snprintf(tok, sizeof(tok), "%" PRIu64, token);
  snprintf(id, sizeof(id), "%d.%" PRId64, w->owner, hold);
  const char *argv[] = {"EVAL",           fence_script,    "3", CHAOS_FENCE_MAX,
                        CHAOS_FENCE_HOLD, CHAOS_FENCE_LOG, tok, id};
  redisReply *r = res_cmd(w, 8, argv);
  int rc = r != NULL && r->type == REDIS_REPLY_INTEGER ? (int)r->integer : -1;
  freeReplyObject(r);
  return rc;
}

/* What a holder does with the lock. The sleep between the read and the
 * write is where a paused holder is most likely caught: it then writes a
 * stale counter (the lost update the lock should prevent) and sends a stale
 * token (which the resource must refuse). */
static void critical_section(wthread *w, int64_t hold, uint64_t token) {
  int reentered = 0;
  if (chaos__rand(&w->rng) % 4 == 0) {
    int rc = dlock_trylock(w->lock, 0, w->lease_ms);
    rec(w, EV_RE, hold, rc, (int64_t)dlock_token(w->lock), 0);
    reentered = rc == 0;
  }
  int64_t v = counter_get(w);
  rec(w, EV_RD, hold, v, 0, 0);
  if (v >= 0) {
    int64_t hold_ms = w->env->cfg->hold_ms;
    chaos__sleep_ms((int64_t)(chaos__rand(&w->rng) % (uint64_t)(hold_ms + 1)));
    int ok = counter_set(w, v + 1);
    rec(w, EV_WR, hold, v + 1, ok, 0);
    int64_t t0 = chaos__now_us();
    int fw = fenced_write(w, token, hold);
    rec(w, EV_FW, hold, (int64_t)token, fw, t0);
  }
  if (reentered)
    rec(w, EV_REU, hold, dlock_unlock(w->lock), 0, 0);
}

/* One hold of a permit: its grant, a sleep, its release. */
static void permit_hold(wthread *w, int64_t hold) {
  const chaos_config_t *cfg = w->env->cfg;
  dlock_permit_t p;
  rec(w, EV_ACQ, hold, 0, 0, 0);
  int rc = dlock_psem_acquire(w->sem, cfg->wait_ms, w->lease_ms, &p);
  if (rc != 0) {
    rec(w, EV_FAIL, hold, rc, 0, 0);
    if (rc != DLOCK_ETIMEDOUT)
      chaos__sleep_ms(10 + (int64_t)(chaos__rand(&w->rng) % 20));
    return;
  }
  rec(w, EV_OK, hold, (int64_t)p.token, 0, 0);
  chaos__sleep_ms(
      (int64_t)(chaos__rand(&w->rng) % (uint64_t)(cfg->hold_ms + 1)));
  rec(w, EV_REL, hold, 0, 0, 0);
  rec(w, EV_RELD, hold, dlock_psem_release(w->sem, p.id), 0, 0);
}

static void *thread_main(void *arg) {
  wthread *w = arg;
  const chaos_config_t *cfg = w->env->cfg;
  int64_t hold = 0;
  while (chaos__now_us() < w->env->deadline_us) {
    if (w->lock == NULL && open_clients(w) != 0) {
      chaos__sleep_ms(50);
      continue;
    }
    hold++;
    if (w->sem != NULL) {
      permit_hold(w, hold);
      continue;
    }
    rec(w, EV_ACQ, hold, 0, 0, 0);
    int rc = dlock_trylock(w->lock, cfg->wait_ms, w->lease_ms);
    if (rc != 0) {
      rec(w, EV_FAIL, hold, rc, 0, 0);
      /* A server that is down answers at once; do not spin on it. */
      if (rc != DLOCK_ETIMEDOUT)
        chaos__sleep_ms(10 + (int64_t)(chaos__rand(&w->rng) % 20));
      continue;
    }
    uint64_t token = dlock_token(w->lock);
    rec(w, EV_OK, hold, (int64_t)token, 0, 0);
    critical_section(w, hold, token);
    rec(w, EV_REL, hold, 0, 0, 0);
    rec(w, EV_RELD, hold, dlock_unlock(w->lock), 0, 0);
  }
  close_clients(w);
  redisFree(w->res);
  w->res = NULL;
  return NULL;
}

_Noreturn void chaos__worker_main(const chaos_env_t *env, int proc) {
  const chaos_config_t *cfg = env->cfg;
  char name[32];
  snprintf(name, sizeof(name), "w%d.log", proc);
  int fd = chaos__history_open(env->dir, name);
  int n =
      cfg->threads < CHAOS_THREADS_MAX ? cfg->threads : CHAOS_THREADS_MAX - 1;
  wthread *w = calloc((size_t)n, sizeof(*w));
  if (fd < 0 || w == NULL)
    _exit(2);
  int started = 0;
  for (int i = 0; i < n; i++) {
    w[i].env = env;
    w[i].fd = fd;
    w[i].pid = (int)getpid();
    w[i].owner = proc * CHAOS_THREADS_MAX + i;
    w[i].index = i;
    int watchdog = cfg->lease == CHAOS_LEASE_WATCHDOG ||
                   (cfg->lease == CHAOS_LEASE_BOTH && i % 2 == 0);
    w[i].lease_ms = watchdog ? DLOCK_WATCHDOG : cfg->fixed_lease_ms;
    w[i].rng = ((uint64_t)getpid() << 20) ^ (uint64_t)chaos__now_us() ^
               ((uint64_t)i * 0x9e3779b97f4a7c15ULL) ^ 1;
    if (pthread_create(&w[i].thread, NULL, thread_main, &w[i]) != 0)
      break;
    started++;
  }
  for (int i = 0; i < started; i++)
    pthread_join(w[i].thread, NULL);
  free(w);
  close(fd);
  /* _exit: the atexit handlers belong to the parent (its servers). */
  _exit(started == n ? 0 : 3);
}
