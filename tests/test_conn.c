/*
 * The command connection (src/link/conn.c) against the scripted fake server
 * (harness/fake_server.h): every call ends by its own deadline whatever the
 * server does (trickles its handshake, answers late, hangs up mid-reply),
 * and a caller's replies are read even when the thread that was to read
 * them comes too late. These tests drive the connection through its
 * internal calls, with a deadline per call, and judge only what a caller
 * sees (its result and how long it took), so that they hold for any
 * implementation of the connection.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "conn.h"
#include "conn_util.h"
#include "harness/fake_server.h"
#include "lock_util.h"
#include "monotime.h"
#include "url.h"

/* One "ECHO arg" with a deadline 'within_ms' from now; the reply's text
 * goes to 'out' (when given). */
static int tc_echo(dlock__conn *c, const char *arg, int64_t within_ms,
                   char *out, size_t outn) {
  char *cmd;
  int len = redisFormatCommand(&cmd, "ECHO %s", arg);
  ASSERT_GT(len, 0);
  size_t slen = (size_t)len;
  redisReply *r = NULL;
  int rc = dlock__conn_call(c, 1, &cmd, &slen, &r,
                            dlock__now_us() + within_ms * 1000);
  redisFreeCommand(cmd);
  if (out != NULL)
    snprintf(out, outn, "%s", rc == 0 && r->str ? r->str : "");
  if (r != NULL)
    freeReplyObject(r);
  return rc;
}

/* The same in a thread of its own. */
typedef struct echo_call {
  dlock__conn *c;
  const char *arg;
  int64_t within_ms;
  pthread_t th;
  _Atomic pid_t tid;
  int rc;
  char reply[64];
  char err[256];
  int64_t took_ms;
} echo_call;

static void *echo_main(void *arg) {
  echo_call *e = arg;
  e->tid = (pid_t)syscall(SYS_gettid);
  int64_t t0 = lu_now_ms();
  e->rc = tc_echo(e->c, e->arg, e->within_ms, e->reply, sizeof(e->reply));
  e->took_ms = lu_now_ms() - t0;
  snprintf(e->err, sizeof(e->err), "%s", e->rc ? dlock_last_error() : "");
  return NULL;
}

static void echo_start(echo_call *e, dlock__conn *c, const char *arg,
                       int64_t within_ms) {
  memset(e, 0, sizeof(*e));
  e->c = c;
  e->arg = arg;
  e->within_ms = within_ms;
  ASSERT_EQ(pthread_create(&e->th, NULL, echo_main, e), 0);
}

static void echo_join(echo_call *e, const char *who) {
  pthread_join(e->th, NULL);
  printf("%s: rc %s, reply \"%s\", %" PRId64 " ms %s\n", who,
         e->rc ? dlock_err_name(e->rc) : "0", e->reply, e->took_ms, e->err);
}

/* ---- tests ------------------------------------------------------------ */

TEST(conn_plain_calls_and_reconnect_after_close_mid_reply) {
  fs_server_t *fs = fs_start();
  tconn t;
  tc_new(&t, fs_url(fs), 1000, 1000);
  ASSERT_DLOCK_OK(dlock__conn_open(t.c, INT64_MAX));
  char got[64];
  ASSERT_DLOCK_OK(tc_echo(t.c, "one", 1000, got, sizeof(got)));
  ASSERT_STR_EQ(got, "one");

  /* Hung up on in the middle of a reply: the call fails at once, not at
   * its deadline, and the next call is served on a new connection. */
  fs_set(fs, "ECHO", &(fs_action_t){.how = FS_CLOSE_MID, .times = 1});
  int64_t t0 = lu_now_ms();
  ASSERT_DLOCK_ERR(tc_echo(t.c, "two", 5000, NULL, 0), DLOCK_EIO);
  ASSERT_LT(lu_now_ms() - t0, 2500);
  ASSERT_DLOCK_OK(tc_echo(t.c, "three", 2000, got, sizeof(got)));
  ASSERT_STR_EQ(got, "three");
  ASSERT_EQ(fs_accepted(fs), 2);
  tc_free(&t);
  fs_free(fs);
}

TEST(conn_silent_server_bounded_by_deadline) {
  fs_server_t *fs = fs_start();
  tconn t;
  tc_new(&t, fs_url(fs), 1000, 10000);
  ASSERT_DLOCK_OK(dlock__conn_open(t.c, INT64_MAX));
  /* A server that reads and never answers (paused): the caller leaves at
   * its own deadline, long before the command timeout. */
  fs_set(fs, NULL, &(fs_action_t){.how = FS_SILENT});
  int64_t t0 = lu_now_ms();
  ASSERT_DLOCK_ERR(tc_echo(t.c, "x", 300, NULL, 0), DLOCK_EIO);
  int64_t took = lu_now_ms() - t0;
  printf("silent server: the call gave up after %" PRId64 " ms\n", took);
  ASSERT_GE(took, 250);
  ASSERT_LT(took, 2500);
  tc_free(&t);
  fs_free(fs);
}

/*
 * A server that sends its handshake replies one byte every 200 ms (AUTH,
 * SELECT and PING: 17 bytes, 3.2 s) never lets a per-read socket timeout
 * of 300 ms expire. Opening a client must still end within its connect and
 * command timeouts (300 ms each, for each of its two connections), with an
 * error, instead of completing the handshake seconds later.
 */
TEST(conn_open_bounded_against_trickling_handshake) {
  fs_server_t *fs = fs_start();
  fs_password(fs, "pw");
  fs_set(fs, NULL, &(fs_action_t){.how = FS_TRICKLE, .every_ms = 200});
  char url[128];
  snprintf(url, sizeof(url), "redis://:pw@127.0.0.1:%d/2", fs_port(fs));
  dlock_options_t o;
  dlock_options_init(&o);
  o.url = url;
  o.connect_timeout_ms = 300;
  o.command_timeout_ms = 300;
  dlock_client_t *c = NULL;
  int64_t t0 = lu_now_ms();
  int rc = dlock_client_open(&o, &c);
  int64_t took = lu_now_ms() - t0;
  printf("open against a trickling handshake: %s after %" PRId64 " ms (%s)\n",
         rc ? dlock_err_name(rc) : "0", took, rc ? dlock_last_error() : "");
  ASSERT_DLOCK_ERR(rc, DLOCK_EIO);
  ASSERT_NULL(c);
  ASSERT_LT(took, 2500);
  fs_free(fs);
}

/*
 * While one caller reconnects through a handshake that trickles (AUTH and
 * PING, 12 bytes at 200 ms: 2.2 s), another caller with a 300 ms deadline
 * must get its answer (an error) by that deadline, not wait for the
 * reconnecting caller to finish.
 */
TEST(conn_caller_not_held_behind_a_reconnect) {
  fs_server_t *fs = fs_start();
  char url[128];
  snprintf(url, sizeof(url), "redis://:pw@127.0.0.1:%d", fs_port(fs));
  tconn t;
  tc_new(&t, url, 5000, 5000);
  ASSERT_DLOCK_OK(dlock__conn_open(t.c, INT64_MAX));
  fs_set(fs, NULL, &(fs_action_t){.how = FS_TRICKLE, .every_ms = 200});
  fs_close_all(fs);

  echo_call a, b;
  echo_start(&a, t.c, "a", 8000);
  /* A is in the handshake once the server has its second AUTH. */
  ASSERT(fs_wait_count(fs, "AUTH", 2, 5000));
  lu_sleep_ms(50);
  echo_start(&b, t.c, "b", 300);
  echo_join(&b, "b (300 ms)");
  echo_join(&a, "a (8000 ms)");
  ASSERT_DLOCK_ERR(b.rc, DLOCK_EIO);
  ASSERT_LT(b.took_ms, 1200);
  /* The reconnecting caller itself still gets its answer in its time. */
  ASSERT_DLOCK_OK(a.rc);
  ASSERT_STR_EQ(a.reply, "a");
  tc_free(&t);
  fs_free(fs);
}

/* ---- the reading role ---------------------------------------------------- */

/* Holds a thread in a signal handler, as a busy machine might keep it off
 * the CPU just after it was woken. */
static void stall_handler(int sig) {
  (void)sig;
  struct timespec ts = {0, 900 * 1000000L};
  nanosleep(&ts, NULL);
}

/* Waits until thread 'tid' sleeps in futex() (parked in the connection),
 * as /proc shows; gives up after a while (the test then proves less). */
static int wait_in_futex(pid_t tid) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", (int)tid);
  for (int i = 0; i < 400; i++) {
    FILE *f = fopen(path, "r");
    long nr = -1;
    if (f != NULL) {
      if (fscanf(f, "%ld", &nr) != 1)
        nr = -1;
      fclose(f);
    }
    if (nr == SYS_futex)
      return 1;
    lu_sleep_ms(5);
  }
  return 0;
}

/*
 * Three callers share the connection: A reads (its reply comes after
 * 600 ms), B (deadline 200 ms) and C (4 s) wait for theirs, which come
 * 1 s after B's command. When A has its reply it hands the reading to B,
 * the oldest waiter, but B is kept off the CPU (a signal handler) until
 * after its deadline. B must then still read, or pass the role on: C's
 * reply is on the socket and C must get it, not a false DLOCK_EIO at its
 * deadline.
 */
TEST(conn_reader_role_survives_a_late_waiter) {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = stall_handler;
  sigemptyset(&sa.sa_mask);
  ASSERT_EQ(sigaction(SIGUSR1, &sa, NULL), 0);

  fs_server_t *fs = fs_start();
  tconn t;
  tc_new(&t, fs_url(fs), 2000, 10000);
  ASSERT_DLOCK_OK(dlock__conn_open(t.c, INT64_MAX));
  /* The newest rule matches first: A's ECHO is answered after 600 ms,
   * B's after 1 s, C's at once (but after B's: replies keep order). */
  fs_set(fs, "ECHO", &(fs_action_t){.delay_ms = 1000, .times = 1});
  fs_set(fs, "ECHO", &(fs_action_t){.delay_ms = 600, .times = 1});

  echo_call a, b, c;
  echo_start(&a, t.c, "a", 5000);
  ASSERT(fs_wait_count(fs, "ECHO", 1, 5000));
  lu_sleep_ms(30);
  echo_start(&b, t.c, "b", 200);
  ASSERT(fs_wait_count(fs, "ECHO", 2, 5000));
  echo_start(&c, t.c, "c", 4000);
  ASSERT(fs_wait_count(fs, "ECHO", 3, 5000));
  while (b.tid == 0)
    lu_sleep_ms(1);
  int parked = wait_in_futex(b.tid);
  printf("b parked in futex: %d\n", parked);
  ASSERT_EQ(pthread_kill(b.th, SIGUSR1), 0);

  echo_join(&a, "a");
  echo_join(&b, "b");
  echo_join(&c, "c");
  ASSERT_DLOCK_OK(a.rc);
  ASSERT_STR_EQ(a.reply, "a");
  ASSERT_DLOCK_OK(c.rc);
  ASSERT_STR_EQ(c.reply, "c");
  ASSERT_LT(c.took_ms, 3500);
  tc_free(&t);
  fs_free(fs);
}

/*
 * Bytes the server sends unasked (a server in the wrong state, a push
 * message) must never be taken for a caller's reply. Between calls they
 * mark the connection as broken, and the next call is served on a new one;
 * during a call they fail it (or are seen as the stream out of step), but
 * the caller never gets them as its answer.
 */
TEST(conn_unsolicited_bytes_never_taken_for_a_reply) {
  fs_server_t *fs = fs_start();
  tconn t;
  tc_new(&t, fs_url(fs), 1000, 2000);
  ASSERT_DLOCK_OK(dlock__conn_open(t.c, INT64_MAX));
  char got[64];
  ASSERT_DLOCK_OK(tc_echo(t.c, "one", 1000, got, sizeof(got)));

  /* While idle. */
  fs_send_all(fs, "$8\r\nSURPRISE\r\n");
  lu_sleep_ms(50);
  ASSERT_DLOCK_OK(tc_echo(t.c, "two", 1000, got, sizeof(got)));
  ASSERT_STR_EQ(got, "two");
  ASSERT_EQ(fs_accepted(fs), 2);

  /* While a call waits for its (delayed) reply: a RESP3 push. */
  fs_set(fs, "ECHO", &(fs_action_t){.delay_ms = 300, .times = 1});
  echo_call e;
  echo_start(&e, t.c, "three", 2000);
  ASSERT(fs_wait_count(fs, "ECHO", 3, 2000));
  lu_sleep_ms(50);
  fs_send_first(fs, ">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$1\r\n0\r\n");
  echo_join(&e, "three");
  if (e.rc == 0)
    ASSERT_STR_EQ(e.reply, "three");
  ASSERT_DLOCK_OK(tc_echo(t.c, "four", 1000, got, sizeof(got)));
  ASSERT_STR_EQ(got, "four");
  tc_free(&t);
  fs_free(fs);
}

/*
 * Commands queued while another caller's request is in flight are not
 * sent one by one: the thread reading for everybody sends them, in one
 * write, with the reply it reads next (Redis could not answer them before
 * that request anyway). So a caller that comes while A's ECHO is held back
 * by the server has its ECHO reach the server only once A's answer has
 * come, and both get their replies. A lone caller always sends at once.
 */
TEST(conn_commands_queued_behind_a_request_go_out_with_its_reply) {
  fs_server_t *fs = fs_start();
  tconn t;
  tc_new(&t, fs_url(fs), 2000, 10000);
  ASSERT_DLOCK_OK(dlock__conn_open(t.c, INT64_MAX));
  fs_set(fs, "ECHO", &(fs_action_t){.delay_ms = 1500, .times = 1});
  echo_call a, b, c;
  echo_start(&a, t.c, "a", 8000);
  ASSERT(fs_wait_count(fs, "ECHO", 1, 5000));
  echo_start(&b, t.c, "b", 8000);
  echo_start(&c, t.c, "c", 8000);
  /* Both queued behind A's request, whose reply is 1.5 s away. */
  lu_sleep_ms(300);
  int early = fs_count(fs, "ECHO");
  printf("ECHOs at the server 0.3 s into A's wait: %d\n", early);
  echo_join(&a, "a");
  echo_join(&b, "b");
  echo_join(&c, "c");
  ASSERT_EQ(early, 1);
  ASSERT_DLOCK_OK(a.rc);
  ASSERT_STR_EQ(a.reply, "a");
  ASSERT_DLOCK_OK(b.rc);
  ASSERT_STR_EQ(b.reply, "b");
  ASSERT_DLOCK_OK(c.rc);
  ASSERT_STR_EQ(c.reply, "c");
  ASSERT_EQ(fs_count(fs, "ECHO"), 3);
  /* Alone again: sent at once and answered at once. */
  char out[16];
  ASSERT_DLOCK_OK(tc_echo(t.c, "d", 5000, out, sizeof(out)));
  ASSERT_STR_EQ(out, "d");
  tc_free(&t);
  fs_free(fs);
}

/*
 * A lone caller on a plain connection sleeps in recv() rather than in
 * poll(), a slice (100 ms) at a time. A reply that comes a byte every
 * 150 ms, so that every slice ends with part of it read, is still put
 * together whole; and a caller asleep in recv() on a server that never
 * answers is woken by a cancel at once, not at its deadline.
 */
TEST(conn_waits_in_recv_across_slices_and_wakes_on_cancel) {
  fs_server_t *fs = fs_start();
  tconn t;
  tc_new(&t, fs_url(fs), 1000, 5000);
  ASSERT_DLOCK_OK(dlock__conn_open(t.c, INT64_MAX));
  fs_set(fs, "ECHO",
         &(fs_action_t){.how = FS_TRICKLE, .every_ms = 150, .times = 1});
  char got[64];
  int64_t t0 = lu_now_ms();
  ASSERT_DLOCK_OK(tc_echo(t.c, "hello", 10000, got, sizeof(got)));
  int64_t took = lu_now_ms() - t0;
  printf("a reply of 11 bytes, one every 150 ms: \"%s\" after %" PRId64 " ms\n",
         got, took);
  ASSERT_STR_EQ(got, "hello");
  ASSERT_GE(took, 1400);
  /* The connection is as good as before. */
  ASSERT_DLOCK_OK(tc_echo(t.c, "again", 2000, got, sizeof(got)));
  ASSERT_STR_EQ(got, "again");

  fs_set(fs, NULL, &(fs_action_t){.how = FS_SILENT});
  echo_call e;
  echo_start(&e, t.c, "never", 20000);
  ASSERT_EQ(fs_wait_count(fs, "ECHO", 3, 5000), 1);
  lu_sleep_ms(300); /* asleep in recv() by now, for many slices */
  int64_t t1 = lu_now_ms();
  dlock__conn_cancel(t.c);
  echo_join(&e, "caller on a silent server, canceled");
  int64_t after = lu_now_ms() - t1;
  printf("canceled: the call returned %" PRId64 " ms after the cancel\n",
         after);
  ASSERT_DLOCK_ERR(e.rc, DLOCK_ECANCELED);
  ASSERT_LT(after, 5000);
  tc_free(&t);
  fs_free(fs);
}
