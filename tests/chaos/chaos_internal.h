/*
 * What the parts of the chaos library share: the history's event kinds and
 * line format, the environment handed to worker processes, and the
 * checker's entry point.
 */
#ifndef DLOCK_CHAOS_INTERNAL_H
#define DLOCK_CHAOS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "chaos.h"

/* The lock every worker contends for, and the resource's keys. */
#define CHAOS_LOCK "chaos-lock"
#define CHAOS_COUNTER "chaos:counter"
#define CHAOS_FENCE_MAX "chaos:fence:max"
#define CHAOS_FENCE_HOLD "chaos:fence:hold"
#define CHAOS_FENCE_LOG "chaos:fence:log"
/* The semaphore of the semaphore runs, and where it keeps its permits
 * taken (Redisson's layout, dlock.h): a permit id's first 8 bytes stand
 * for the client that took it (chaos__client_hash). */
#define CHAOS_SEM "chaos-sem"
#define CHAOS_SEM_PERMITS_KEY "{chaos-sem}:timeout"
/* Every worker client's id starts so, then "<pid>-<thread>[-n<node>]", so
 * the nemesis can tell from the lock hash which process holds the lock. */
#define CHAOS_ID_PREFIX "chaos-"

#define CHAOS_NODES_MAX 5
/* Threads per process are numbered below this; owner = proc * it + thread. */
#define CHAOS_THREADS_MAX 64

/*
 * Event kinds. A history line is
 *   "<t_us> <kind> <owner> <pid> <hold> <a> <b> <c>"
 * with t_us on CLOCK_MONOTONIC (shared by all processes of the machine).
 * Worker events: owner is the thread's owner number, hold the number of the
 * acquisition attempt within the thread. Nemesis events: owner is the
 * fault kind, pid the target process (0 for a server fault).
 */
typedef enum chaos_ev {
  EV_ACQ,   /* acquisition invoked */
  EV_OK,    /* acquired; a = fencing token */
  EV_FAIL,  /* not acquired; a = dlock error code */
  EV_RE,    /* reentrant acquisition; a = code, b = token after it */
  EV_RD,    /* counter read; a = value, -1 on error */
  EV_WR,    /* counter written; a = value, b = 1 acknowledged, 0 unknown */
  EV_FW,    /* fenced write; a = token, b = 1 accepted, 0 refused, -1 error,
               c = when it was invoked */
  EV_REU,   /* the reentrant hold released; a = code */
  EV_REL,   /* final release invoked */
  EV_RELD,  /* final release returned; a = code */
  EV_FAULT, /* a fault injected; a = detail (a node bitmask, a duration) */
  EV_HEAL,  /* the fault healed: the server is back, the process resumed */
  EV_KILL,  /* process pid killed (t is just before the signal) */
  EV_STOP,  /* process pid stopped */
  EV_CONT,  /* process pid continued */
  EV_FREE,  /* the killed holder's lock became free; a = ms, -1 never */
  EV_DOWN,  /* a RedLock majority went down */
  EV_UP,    /* ... and came back */
  EV_COUNT
} chaos_ev_t;

typedef struct chaos_event {
  int64_t t_us;
  int ev;
  int owner;
  int pid;
  int64_t hold, a, b, c;
  size_t seq; /* position in its file: orders events of equal time */
} chaos_event_t;

/* What a worker process needs; read-only, inherited through fork(). */
typedef struct chaos_env {
  const chaos_config_t *cfg;
  int nnodes;
  const char *urls[CHAOS_NODES_MAX];
  const char *tls_ca; /* a TLS run: the CA file the clients trust */
  int resource_port;  /* the resource server, on 127.0.0.1 */
  int64_t deadline_us;
  const char *dir; /* the history directory */
} chaos_env_t;

/* ---- history.c ---------------------------------------------------------- */

int64_t chaos__now_us(void);
void chaos__sleep_ms(int64_t ms);

/* A small xorshift generator; '*state' must start non-zero. */
uint64_t chaos__rand(uint64_t *state);

/* Opens (creates) the history file 'name' in 'dir' for appending; the fd,
 * or -1. */
int chaos__history_open(const char *dir, const char *name);

/* Appends one event with one write(): lines of concurrent threads and a
 * process killed mid-run never interleave or tear. */
void chaos__record(int fd, chaos_ev_t ev, int owner, int pid, int64_t hold,
                   int64_t a, int64_t b, int64_t c);

/* Reads every history file in 'dir' into a malloc'ed array sorted by time.
 * Returns 0 or -1. */
int chaos__history_load(const char *dir, chaos_event_t **out, size_t *n);

/* Removes the history files of 'dir' and the directory itself. */
void chaos__history_remove(const char *dir);

/* The 8 bytes, as a number, that begin the ids of the permits client id
 * 'id' takes: FNV-1a over the id, as the library computes them. The
 * nemesis tells by them which worker holds a permit. */
uint64_t chaos__client_hash(const char *id);

/* ---- worker.c ----------------------------------------------------------- */

/* The body of worker process number 'proc': runs its threads until the
 * deadline and exits; never returns. */
_Noreturn void chaos__worker_main(const chaos_env_t *env, int proc);

/* ---- checker.c ---------------------------------------------------------- */

/* One accepted write as the resource logged it, in its order. */
typedef struct chaos_fence_entry {
  int64_t token;
  int owner;
  int64_t hold;
} chaos_fence_entry_t;

typedef struct chaos_final {
  int64_t counter; /* the counter the workers incremented */
  const chaos_fence_entry_t *log;
  size_t nlog;
} chaos_final_t;

/* Checks the history 'ev' (sorted by time) and the resource's final state
 * into 'r' (whose fault counts the caller has filled). */
void chaos__check(const chaos_config_t *c, const chaos_event_t *ev, size_t n,
                  const chaos_final_t *fin, chaos_result_t *r);

#endif
