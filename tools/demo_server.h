/*
 * The private redis-server of "dlock demo" when no server is named: one
 * process on a unix socket in a fresh temp dir, without persistence,
 * stopped by its pid and cleaned up afterwards, so the demo needs nothing
 * but an installed redis-server and leaves nothing behind.
 */
#ifndef DLOCK_TOOLS_DEMO_SERVER_H
#define DLOCK_TOOLS_DEMO_SERVER_H

#include <stddef.h>
#include <sys/types.h>

typedef struct demo_server {
  pid_t pid;
  char dir[64];
  char url[160]; /* "unix:///tmp/dlock-demo.XXXXXX/redis.sock" */
} demo_server_t;

/* Starts the server and waits until it answers PING (up to 5 s). Returns 0,
 * or -1 with the reason in 'why'. */
int demo_server_start(demo_server_t *s, char *why, size_t why_size);

/* Stops the server (SIGTERM, SIGKILL after 5 s) and removes its files. */
void demo_server_stop(demo_server_t *s);

#endif
