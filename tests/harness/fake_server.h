/*
 * A scripted fake Redis server, for the connection and pub/sub layers' own
 * tests: it misbehaves on purpose (delays, replies one byte at a time,
 * silence, a connection closed in the middle of a reply, bytes nobody asked
 * for) in ways a real redis-server cannot be made to. Lock behaviour is
 * tested against real redis-server processes (redis_proc.h); this server
 * knows no locks.
 *
 * It listens on a free loopback port and runs in a thread of the test. It
 * parses what it receives with hiredis's reader, records every command, and
 * answers by rules that the test may change at any time:
 *
 *   fs_server_t *fs = fs_start();
 *   dlock_options_t o; ...; o.url = fs_url(fs);    // "redis://127.0.0.1:P"
 *
 *   // From now on every command is answered one byte every 100 ms.
 *   fs_set(fs, NULL, &(fs_action_t){.how = FS_TRICKLE, .every_ms = 100});
 *   // The next ECHO gets this canned reply after 50 ms (then the rule goes).
 *   fs_set(fs, "ECHO", &(fs_action_t){.reply = "$2\r\nhi\r\n",
 *                                      .delay_ms = 50, .times = 1});
 *   // Every EVALSHA is read and never answered.
 *   fs_set(fs, "EVALSHA", &(fs_action_t){.how = FS_SILENT});
 *   fs_clear(fs);                                   // back to plain answers
 *
 *   fs_count(fs, "PING");                // PINGs received so far
 *   fs_wait_count(fs, "PING", 2, 1000);  // waits until 2 came (1 or 0)
 *   fs_send_all(fs, "+SURPRISE\r\n");    // unsolicited bytes on every conn.
 *   fs_send_first(fs, ">3\r\n...");        // the same, before queued replies
 *   fs_close_all(fs);                    // hangs up on every connection
 *   fs_free(fs);                         // stops the thread, closes all
 *
 * The newest rule that matches a command decides (a rule for NULL matches
 * every command; one for "NAME ARG", such as "SENTINEL REPLICAS", only
 * that command with that first argument, in any case). Without a matching rule
 * a command gets its plain answer: PING +PONG (or its argument), AUTH +OK (or
 * WRONGPASS when fs_password set another password), SELECT/CLIENT/QUIT +OK,
 * ECHO its argument, HELLO an error (clients fall back to RESP2),
 * SUBSCRIBE/UNSUBSCRIBE their confirmations, anything else "-ERR unknown
 * command". Replies leave in the order the commands came, as from a real
 * server: a delayed or trickled reply holds back the ones after it on its
 * connection.
 *
 * Every function may be called from any thread of the test.
 */
#ifndef DLOCK_TEST_FAKE_SERVER_H
#define DLOCK_TEST_FAKE_SERVER_H

#include <stddef.h>
#include <stdint.h>

typedef struct fs_server fs_server_t;

typedef enum fs_how {
  FS_REPLY = 0, /* answer (after delay_ms) */
  FS_TRICKLE,   /* answer one byte every every_ms, the first after delay_ms */
  FS_SILENT,    /* read the command and never answer it */
  FS_CLOSE,     /* close the connection at once, without answering */
  FS_CLOSE_MID, /* send the first half of the answer, then close */
} fs_how_t;

typedef struct fs_action {
  fs_how_t how;
  const char *reply; /* raw RESP bytes to send; NULL: the plain answer */
  int64_t delay_ms;  /* before the first byte of the answer */
  int64_t every_ms;  /* FS_TRICKLE: between bytes (default 100) */
  int times;         /* > 0: only the next 'times' matching commands */
} fs_action_t;

/* Starts a server on 127.0.0.1 (a free port). Ends the test on failure. */
fs_server_t *fs_start(void);

/* Stops the thread and closes every socket. NULL is ignored. */
void fs_free(fs_server_t *fs);

int fs_port(const fs_server_t *fs);
const char *fs_url(const fs_server_t *fs); /* "redis://127.0.0.1:PORT" */

/* Adds a rule for commands named 'cmd' (any case; NULL: every command).
 * The action is copied, its reply too. */
void fs_set(fs_server_t *fs, const char *cmd, const fs_action_t *a);

/* Removes every rule. */
void fs_clear(fs_server_t *fs);

/* The password AUTH must give (NULL: any is accepted). */
void fs_password(fs_server_t *fs, const char *pass);

/* Commands named 'cmd' received so far (NULL: all commands). */
int fs_count(fs_server_t *fs, const char *cmd);

/* Waits up to 'timeout_ms' until fs_count(fs, cmd) >= n; 1 when it did. */
int fs_wait_count(fs_server_t *fs, const char *cmd, int n, int64_t timeout_ms);

/* The i-th command received (0 first) as "NAME arg arg", arguments cut to
 * 40 bytes; NULL past the end. The string is the server's until fs_free. */
const char *fs_command(fs_server_t *fs, int i);

/* Connections accepted so far, and those still open. */
int fs_accepted(fs_server_t *fs);
int fs_open_connections(fs_server_t *fs);

/* Sends raw bytes on every open connection now, after the replies already
 * queued on it (a push message, a reply nobody asked for). */
void fs_send_all(fs_server_t *fs, const char *raw);

/* The same, but ahead of the replies still waiting to be sent (a push
 * message that arrives while a call waits for its delayed reply). */
void fs_send_first(fs_server_t *fs, const char *raw);

/* Closes every open connection now (replies not yet sent are dropped). */
void fs_close_all(fs_server_t *fs);

#endif
