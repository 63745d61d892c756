/*
 * One caller waiting on several servers' requests at once
 * (dlock__conn_wait_any, src/link/conn_many.c), against scripted fake
 * servers (harness/fake_server.h): the wait ends with whichever server
 * answers first, however long another stays silent; a reply that another
 * thread reads for the caller ends it too; and a wait that runs out leaves
 * the requests to be taken or given up on later.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>

#include <hiredis/hiredis.h>

#include "conn.h"
#include "conn_util.h"
#include "harness/fake_server.h"
#include "lock_util.h"
#include "monotime.h"

/* Sends "ECHO arg" on 'c' with a deadline 'within_ms' from now. */
static void send_echo(dlock__conn *c, const char *arg, int64_t within_ms,
                      dlock__pending *p) {
  char *cmd;
  int len = redisFormatCommand(&cmd, "ECHO %s", arg);
  ASSERT_GT(len, 0);
  size_t slen = (size_t)len;
  ASSERT_DLOCK_OK(
      dlock__conn_send(c, 1, &cmd, &slen, dlock__deadline_ms(within_ms), p));
  redisFreeCommand(cmd);
}

/* Takes the reply of 'p' and checks it says 'want'. */
static void take_echo(dlock__pending *p, const char *want) {
  redisReply *r = NULL;
  ASSERT_DLOCK_OK(dlock__conn_wait(p, &r));
  ASSERT_NOT_NULL(r);
  ASSERT_STR_EQ(r->str, want);
  freeReplyObject(r);
}

/* Connections to two fake servers, opened. */
static void open_two(tconn *a, fs_server_t *fa, tconn *b, fs_server_t *fb) {
  tc_new(a, fs_url(fa), 5000, 60000);
  tc_new(b, fs_url(fb), 5000, 60000);
  ASSERT_DLOCK_OK(dlock__conn_open(a->c, INT64_MAX));
  ASSERT_DLOCK_OK(dlock__conn_open(b->c, INT64_MAX));
}

TEST(conn_wait_any_ends_with_whichever_server_answers_first) {
  fs_server_t *silent = fs_start(), *quick = fs_start();
  fs_set(silent, "ECHO", &(fs_action_t){.how = FS_SILENT});
  tconn a, b;
  open_two(&a, silent, &b, quick);
  /* The silent server first: a wait on it alone would last its whole
   * minute of deadline, and the test's limit ends it long before. */
  dlock__pending pa, pb;
  send_echo(a.c, "a", 60000, &pa);
  send_echo(b.c, "b", 60000, &pb);
  dlock__pending *ps[2] = {&pa, &pb};
  ASSERT_EQ(dlock__conn_wait_any(ps, 2, INT64_MAX), 1);
  take_echo(&pb, "b");
  /* What is left runs out of time, still the caller's ... */
  ps[1] = NULL;
  ASSERT_EQ(dlock__conn_wait_any(ps, 2, dlock__deadline_ms(100)), -1);
  ASSERT_EQ(fs_count(silent, "ECHO"), 1);
  /* ... and is given up on when the caller says so. */
  dlock__conn_expire(&pa);
  redisReply *r = NULL;
  ASSERT_EQ(dlock__conn_wait(&pa, &r), DLOCK_EIO);
  ASSERT_NULL(r);
  tc_free(&a);
  tc_free(&b);
  fs_free(silent);
  fs_free(quick);
}

typedef struct reader {
  dlock__conn *c;
  int rc;
  pthread_t th;
} reader;

/* A blocking caller of the same connection: it reads while it waits. */
static void *reader_main(void *arg) {
  reader *rd = arg;
  char *cmd;
  int len = redisFormatCommand(&cmd, "ECHO %s", "slow");
  size_t slen = (size_t)len;
  redisReply *r = NULL;
  rd->rc = dlock__conn_call(rd->c, 1, &cmd, &slen, &r, INT64_MAX);
  if (rd->rc == 0 && (r == NULL || strcmp(r->str, "slow") != 0))
    rd->rc = -1;
  if (r != NULL)
    freeReplyObject(r);
  redisFreeCommand(cmd);
  return NULL;
}

TEST(conn_wait_any_hears_a_reply_another_thread_reads) {
  fs_server_t *shared = fs_start(), *silent = fs_start();
  /* The other thread's call is answered late, so that it is still the
   * one reading when this caller's request goes out behind it. */
  fs_set(shared, "ECHO", &(fs_action_t){.delay_ms = 300, .times = 1});
  fs_set(silent, "ECHO", &(fs_action_t){.how = FS_SILENT});
  tconn a, b;
  open_two(&a, shared, &b, silent);
  reader rd = {.c = a.c};
  ASSERT_EQ(pthread_create(&rd.th, NULL, reader_main, &rd), 0);
  ASSERT_EQ(fs_wait_count(shared, "ECHO", 1, 10000), 1);
  dlock__pending pa, pb;
  send_echo(b.c, "never", 60000, &pb);
  send_echo(a.c, "mine", 60000, &pa);
  dlock__pending *ps[2] = {&pb, &pa};
  /* Whoever reads the shared connection, its reply ends the wait, and
   * the silent server does not hold it. */
  ASSERT_EQ(dlock__conn_wait_any(ps, 2, INT64_MAX), 1);
  take_echo(&pa, "mine");
  pthread_join(rd.th, NULL);
  ASSERT_EQ(rd.rc, 0);
  dlock__conn_expire(&pb);
  redisReply *r = NULL;
  ASSERT_EQ(dlock__conn_wait(&pb, &r), DLOCK_EIO);
  tc_free(&a);
  tc_free(&b);
  fs_free(shared);
  fs_free(silent);
}
