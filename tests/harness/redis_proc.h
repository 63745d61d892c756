/*
 * Test harness: throwaway redis-server processes for integration tests.
 *
 * Each server runs in its own temp dir (mktemp -d), with persistence off
 * unless asked, on a free loopback port or a unix socket in that dir. The
 * harness can pause (SIGSTOP), resume (SIGCONT), kill and restart it on the
 * same address. Every process it starts is stopped by pid in rp_free().
 *
 * A test that ends early (a failed assertion calls exit()) still stops its
 * servers: every live server is on a process-wide list that an atexit
 * handler stops and removes, in the process that started it only (a child
 * forked by a test leaves its parent's servers alone). A test that dies from
 * a signal cannot run atexit handlers; its servers then die with it, because
 * each is started with PR_SET_PDEATHSIG (on Linux) and the runner kills the
 * test's whole process group when the test ends. PR_SET_PDEATHSIG fires when
 * the *thread* that started the server exits, so start servers from the
 * test's main thread, not from a helper thread that ends before them.
 *
 * The redis-server binary is $DLOCK_REDIS_SERVER if set, else the first
 * redis-server on PATH, else /usr/bin/redis-server. DLOCK_TEST_KEEP=1 keeps
 * the temp dirs (config, log, AOF) for inspection.
 *
 * The functions may be called from several threads, but not on the same
 * server at the same time.
 */
#ifndef DLOCK_TEST_REDIS_PROC_H
#define DLOCK_TEST_REDIS_PROC_H

#include <hiredis/hiredis.h>
#include <sys/types.h>

typedef struct rp_server rp_server_t;

typedef struct rp_options {
  int unix_socket;         /* 1: listen on a unix socket only (port 0) */
  const char *requirepass; /* NULL: no password */
  int appendonly;         /* 1: AOF on (appendfsync always), survives restart */
  const char *extra_conf; /* extra redis.conf lines, may be NULL */
  /* 1: run as a Sentinel ("redis-server redis.conf --sentinel"), whose
   * "sentinel monitor ..." lines go in extra_conf. Sentinel rewrites its
   * config file as it learns the deployment; it is in the temp dir. */
  int sentinel;
  /* 1: a Redis Cluster node (cluster-enabled, its nodes.conf in the temp
   * dir), on a port at most 55535 whose cluster bus port (port + 10000)
   * is free too. */
  int cluster;
} rp_options_t;

void rp_options_init(rp_options_t *o);

/* Starts a server and waits until it answers PING (up to 10 s). 0 or -1. */
int rp_start(const rp_options_t *o, rp_server_t **out);

/* "redis://127.0.0.1:PORT" or "unix:///tmp/.../redis.sock"; with
 * requirepass set: "redis://:PASS@127.0.0.1:PORT" / "unix://:PASS@/path". */
const char *rp_url(const rp_server_t *s);
int rp_port(const rp_server_t *s);           /* 0 for a unix socket */
const char *rp_socket(const rp_server_t *s); /* NULL for TCP */
pid_t rp_pid(const rp_server_t *s);          /* 0 while stopped or killed */
const char *rp_dir(const rp_server_t *s);    /* the server's temp dir */

int rp_pause(rp_server_t *s);  /* SIGSTOP, returns once it is stopped */
int rp_resume(rp_server_t *s); /* SIGCONT, returns once it runs again */
int rp_kill(rp_server_t *s);   /* SIGKILL and reap; dir kept */
int rp_stop(rp_server_t *s);   /* SHUTDOWN-like SIGTERM and reap; dir kept */
/* Stops the server (if running) and starts it on the same address. */
int rp_restart(rp_server_t *s);

/* Stops the server if running, removes its temp dir, frees 's'. NULL ok. */
void rp_free(rp_server_t *s);

/* Runs one command on a fresh or cached raw hiredis connection (for
 * assertions on the Redis layout). Caller frees with freeReplyObject.
 * Returns NULL when the server does not answer within 2 s. The connection
 * authenticates with requirepass, and is opened again after a restart or
 * an error. */
redisReply *rp_cmd(rp_server_t *s, const char *fmt, ...);
redisReply *rp_cmd_argv(rp_server_t *s, int argc, const char **argv,
                        const size_t *argvlen);

#endif
