/*
 * Requests completed by callback on the command connection
 * (dlock__conn_submit, src/link/conn_submit.c), against the scripted fake
 * server (harness/fake_server.h): each completion comes exactly once, with
 * the reply, with the connection's failure and its reason, or with
 * DLOCK_EIO at the request's deadline; many complete in the order they
 * were sent; and a blocking caller reading for the connection completes
 * them too, also at their deadlines.
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
#include "url.h"

/* ---- what the completions saw ----------------------------------------- */

#define MAX_SUBMITS 256

typedef struct outcome {
  struct log *log;
  int index;
  int calls;
  int err;
  int64_t at_ms; /* when it completed */
  char reply[64];
  char detail[256];
} outcome;

typedef struct log {
  outcome o[MAX_SUBMITS];
  int order[MAX_SUBMITS]; /* indexes, in the order completed */
  int n;                  /* completions so far */
} log_t;

/* Runs with the connection's mutex held, in the thread that completes:
 * it only records. */
static void record(dlock__request *r, redisReply *reply, int err,
                   const char *detail) {
  outcome *o = r->arg;
  o->calls++;
  o->err = err;
  o->at_ms = lu_now_ms();
  snprintf(o->reply, sizeof(o->reply), "%s",
           reply != NULL && reply->str != NULL ? reply->str : "");
  snprintf(o->detail, sizeof(o->detail), "%s", detail ? detail : "");
  if (reply != NULL)
    freeReplyObject(reply);
  if (o->log->n < MAX_SUBMITS)
    o->log->order[o->log->n] = o->index;
  o->log->n++;
}

/* Submits "ECHO arg" as request 'i' of 'log', with a deadline 'within_ms'
 * from now. */
static int submit_echo(dlock__conn *c, log_t *log, int i, const char *arg,
                       int64_t within_ms) {
  char *cmd;
  int len = redisFormatCommand(&cmd, "ECHO %s", arg);
  ASSERT_GT(len, 0);
  log->o[i].log = log;
  log->o[i].index = i;
  int rc = dlock__conn_submit(c, cmd, (size_t)len,
                              dlock__now_us() + within_ms * 1000, record,
                              &log->o[i]);
  redisFreeCommand(cmd);
  return rc;
}

/* A fake server, a connection to it with 'command_ms' (opened when
 * 'open' is set) and an empty log: what every test starts with. */
typedef struct fixture {
  fs_server_t *fs;
  tconn t;
  log_t *log;
} fixture;

static void fx_start(fixture *f, int64_t command_ms, int open) {
  f->fs = fs_start();
  tc_new(&f->t, fs_url(f->fs), 1000, command_ms);
  if (open)
    ASSERT_DLOCK_OK(dlock__conn_open(f->t.c, INT64_MAX));
  f->log = calloc(1, sizeof(*f->log));
  ASSERT_NOT_NULL(f->log);
}

static void fx_end(fixture *f) {
  tc_free(&f->t);
  free(f->log);
  fs_free(f->fs);
}

/* ---- tests ------------------------------------------------------------ */

TEST(conn_submit_completes_once_with_the_reply) {
  fixture f;
  fx_start(&f, 1000, 0);
  dlock__conn *c = f.t.c;
  log_t *log = f.log;
  /* Also before the connection is open: the request waits for the
   * handshake, which the pump drives. */
  ASSERT_DLOCK_OK(submit_echo(c, log, 0, "one", 2000));
  ASSERT_DLOCK_OK(dlock__conn_pump(c, dlock__now_us() + 2000000));
  ASSERT_EQ(log->o[0].calls, 1);
  ASSERT_EQ(log->o[0].err, 0);
  ASSERT_STR_EQ(log->o[0].reply, "one");
  ASSERT_DLOCK_OK(submit_echo(c, log, 1, "two", 2000));
  ASSERT_DLOCK_OK(dlock__conn_pump(c, dlock__now_us() + 2000000));
  ASSERT_EQ(log->o[1].calls, 1);
  ASSERT_STR_EQ(log->o[1].reply, "two");
  /* Nothing in flight: the pump returns at once. */
  ASSERT_DLOCK_OK(dlock__conn_pump(c, dlock__now_us() + 2000000));
  ASSERT_EQ(log->n, 2);
  ASSERT_EQ(log->o[0].calls, 1);
  fx_end(&f);
}

TEST(conn_submit_fails_with_the_reason_when_the_server_closes) {
  fixture f;
  fx_start(&f, 5000, 1);
  dlock__conn *c = f.t.c;
  fs_server_t *fs = f.fs;
  log_t *log = f.log;
  fs_set(fs, "ECHO", &(fs_action_t){.how = FS_CLOSE_MID, .times = 1});
  int64_t t0 = lu_now_ms();
  ASSERT_DLOCK_OK(submit_echo(c, log, 0, "gone", 5000));
  ASSERT_DLOCK_OK(dlock__conn_pump(c, dlock__now_us() + 5000000));
  printf("closed: err %s, \"%s\" after %" PRId64 " ms\n",
         dlock_err_name(log->o[0].err), log->o[0].detail, lu_now_ms() - t0);
  /* Far below the 30 s command timeout: the close, not a timeout, ended
   * it (loose enough for a loaded machine). */
  ASSERT_LT(lu_now_ms() - t0, 15000);
  ASSERT_EQ(log->o[0].calls, 1);
  ASSERT_EQ(log->o[0].err, DLOCK_EIO);
  ASSERT_STR_EQ(log->o[0].reply, "");
  ASSERT_NE(log->o[0].detail[0], '\0');
  /* The next one goes out on a new connection. */
  ASSERT_DLOCK_OK(submit_echo(c, log, 1, "back", 2000));
  ASSERT_DLOCK_OK(dlock__conn_pump(c, dlock__now_us() + 2000000));
  ASSERT_EQ(log->o[1].calls, 1);
  ASSERT_STR_EQ(log->o[1].reply, "back");
  ASSERT_EQ(log->o[0].calls, 1);
  ASSERT_EQ(fs_accepted(fs), 2);
  fx_end(&f);
}

TEST(conn_submit_times_out_at_its_deadline_on_a_silent_server) {
  fixture f;
  fx_start(&f, 30000, 1);
  dlock__conn *c = f.t.c;
  fs_server_t *fs = f.fs;
  log_t *log = f.log;
  fs_set(fs, NULL, &(fs_action_t){.how = FS_SILENT});
  int64_t t0 = lu_now_ms();
  ASSERT_DLOCK_OK(submit_echo(c, log, 0, "x", 300));
  /* Completed at its deadline, long before the command timeout; the
   * reply that never comes no longer counts as in flight. */
  ASSERT_DLOCK_OK(dlock__conn_pump(c, dlock__now_us() + 5000000));
  int64_t took = lu_now_ms() - t0;
  printf("silent: err %s, \"%s\" after %" PRId64 " ms\n",
         dlock_err_name(log->o[0].err), log->o[0].detail, took);
  /* Its 300 ms deadline, far below the 30 s command timeout (loose enough
   * for a loaded machine). */
  ASSERT_GE(took, 250);
  ASSERT_LT(took, 15000);
  ASSERT_EQ(log->o[0].calls, 1);
  ASSERT_EQ(log->o[0].err, DLOCK_EIO);
  ASSERT(strstr(log->o[0].detail, "no reply from Redis") != NULL);
  /* A pump with a deadline sooner than the request's returns with the
   * request still in flight. */
  ASSERT_DLOCK_OK(submit_echo(c, log, 1, "y", 5000));
  ASSERT_EQ(dlock__conn_pump(c, dlock__now_us() + 100000), DLOCK__CONN_AGAIN);
  ASSERT_EQ(log->o[1].calls, 0);
  /* Freeing the connection completes what is left. */
  tc_free(&f.t);
  ASSERT_EQ(log->o[1].calls, 1);
  ASSERT_EQ(log->o[1].err, DLOCK_ECANCELED);
  ASSERT_EQ(log->o[0].calls, 1);
  free(log);
  fs_free(fs);
}

TEST(conn_submit_many_complete_in_order) {
  fixture f;
  fx_start(&f, 5000, 1);
  dlock__conn *c = f.t.c;
  log_t *log = f.log;
  char arg[16];
  for (int i = 0; i < 200; i++) {
    snprintf(arg, sizeof(arg), "m%d", i);
    ASSERT_DLOCK_OK(submit_echo(c, log, i, arg, 5000));
  }
  ASSERT_DLOCK_OK(dlock__conn_pump(c, dlock__now_us() + 5000000));
  ASSERT_EQ(log->n, 200);
  for (int i = 0; i < 200; i++) {
    snprintf(arg, sizeof(arg), "m%d", i);
    ASSERT_EQ(log->order[i], i);
    ASSERT_EQ(log->o[i].calls, 1);
    ASSERT_STR_EQ(log->o[i].reply, arg);
  }
  fx_end(&f);
}

TEST(conn_submit_completed_by_a_blocking_caller) {
  fixture f;
  fx_start(&f, 5000, 1);
  dlock__conn *c = f.t.c;
  log_t *log = f.log;
  char arg[16];
  for (int i = 0; i < 10; i++) {
    snprintf(arg, sizeof(arg), "s%d", i);
    ASSERT_DLOCK_OK(submit_echo(c, log, i, arg, 5000));
  }
  /* A blocking call queued behind them reads their replies first. */
  char *cmd;
  int len = redisFormatCommand(&cmd, "ECHO %s", "last");
  size_t slen = (size_t)len;
  redisReply *r = NULL;
  ASSERT_DLOCK_OK(
      dlock__conn_call(c, 1, &cmd, &slen, &r, dlock__now_us() + 2000000));
  redisFreeCommand(cmd);
  ASSERT_STR_EQ(r->str, "last");
  freeReplyObject(r);
  ASSERT_EQ(log->n, 10);
  for (int i = 0; i < 10; i++)
    ASSERT_EQ(log->order[i], i);
  fx_end(&f);
}

TEST(conn_submit_expires_while_a_blocking_caller_reads) {
  fixture f;
  fx_start(&f, 30000, 1);
  dlock__conn *c = f.t.c;
  fs_server_t *fs = f.fs;
  log_t *log = f.log;
  /* The submitted ECHO is answered after 6 s, long past its deadline of
   * 300 ms; the blocking call behind it waits up to 20 s. The margins are
   * seconds wide, so that a loaded machine keeps them. */
  fs_set(fs, "ECHO", &(fs_action_t){.delay_ms = 6000, .times = 1});
  int64_t t0 = lu_now_ms();
  ASSERT_DLOCK_OK(submit_echo(c, log, 0, "late", 300));
  char *cmd;
  int len = redisFormatCommand(&cmd, "ECHO %s", "mine");
  size_t slen = (size_t)len;
  redisReply *r = NULL;
  ASSERT_DLOCK_OK(
      dlock__conn_call(c, 1, &cmd, &slen, &r, dlock__now_us() + 20000000));
  redisFreeCommand(cmd);
  int64_t took = lu_now_ms() - t0;
  printf("expired after %" PRId64 " ms (\"%s\"), the call took %" PRId64
         " ms\n",
         log->o[0].at_ms - t0, log->o[0].detail, took);
  /* The reader completed it at its deadline, not with the late reply,
   * which was dropped: the call got its own. */
  ASSERT_EQ(log->o[0].calls, 1);
  ASSERT_EQ(log->o[0].err, DLOCK_EIO);
  ASSERT_GE(log->o[0].at_ms - t0, 250);
  ASSERT_LT(log->o[0].at_ms - t0, 5000);
  ASSERT_STR_EQ(r->str, "mine");
  ASSERT_GE(took, 5000);
  freeReplyObject(r);
  fx_end(&f);
}

/* Blocking callers in threads of their own, each making 'n' calls. */
typedef struct caller_thread {
  dlock__conn *c;
  int n;
  int failed;
  pthread_t th;
} caller_thread;

static void *caller_main(void *arg) {
  caller_thread *ct = arg;
  char *cmd;
  int len = redisFormatCommand(&cmd, "ECHO %s", "blocking");
  size_t slen = (size_t)len;
  for (int i = 0; i < ct->n; i++) {
    redisReply *r = NULL;
    if (dlock__conn_call(ct->c, 1, &cmd, &slen, &r,
                         dlock__now_us() + 5000000) != 0 ||
        strcmp(r->str, "blocking") != 0)
      ct->failed++;
    if (r != NULL)
      freeReplyObject(r);
  }
  redisFreeCommand(cmd);
  return NULL;
}

TEST(conn_submit_alongside_blocking_callers) {
  fixture f;
  fx_start(&f, 5000, 1);
  dlock__conn *c = f.t.c;
  log_t *log = f.log;
  caller_thread ct[4];
  for (int i = 0; i < 4; i++) {
    ct[i] = (caller_thread){.c = c, .n = 200};
    ASSERT_EQ(pthread_create(&ct[i].th, NULL, caller_main, &ct[i]), 0);
  }
  /* Submissions in batches, each pumped while the callers read too: who
   * reads a reply completes its request, in order, whoever asked. */
  char arg[16];
  for (int b = 0; b < 8; b++) {
    for (int i = b * 25; i < (b + 1) * 25; i++) {
      snprintf(arg, sizeof(arg), "p%d", i);
      ASSERT_DLOCK_OK(submit_echo(c, log, i, arg, 5000));
    }
    ASSERT_DLOCK_OK(dlock__conn_pump(c, dlock__now_us() + 5000000));
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(ct[i].th, NULL);
    ASSERT_EQ(ct[i].failed, 0);
  }
  ASSERT_EQ(log->n, 200);
  for (int i = 0; i < 200; i++) {
    snprintf(arg, sizeof(arg), "p%d", i);
    ASSERT_EQ(log->order[i], i);
    ASSERT_EQ(log->o[i].calls, 1);
    ASSERT_STR_EQ(log->o[i].reply, arg);
  }
  fx_end(&f);
}
