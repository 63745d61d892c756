/*
 * The async client's connection against the scripted fake server
 * (harness/fake_server.h): a reply held back, one sent a byte at a time, a
 * connection closed in the middle of a reply, a server that never answers,
 * and a close while a command waits for one of these. Plain commands
 * (dlock_client_command_async) are the probe, since the fake server knows
 * no locks; what is judged is what the loop's user sees: each callback runs
 * exactly once, with the right reply or a DLOCK_E* code and its detail,
 * replies keep their order, and the client comes back by itself after a
 * failure. No assertion needs anything to happen quickly, only in order or
 * eventually, so that the tests hold under valgrind and the sanitizers.
 */
#include <string.h>

#include "harness/fake_server.h"
#include "loop_util.h"

/* What one command's callback saw. */
typedef struct seen {
  int calls;
  int status;
  int order; /* its place among the completions, from 1 */
  int *counter;
  char reply[96];
  char detail[256];
} seen;

static void on_reply(dlock_client_t *c, int status, dlock_reply_t *r,
                     void *data) {
  seen *s = data;
  (void)c;
  s->calls++;
  s->status = status;
  s->order = ++*s->counter;
  snprintf(s->reply, sizeof(s->reply), "%s",
           r != NULL && r->str != NULL ? r->str : "");
  snprintf(s->detail, sizeof(s->detail), "%s",
           status != 0 ? dlock_last_error() : "");
  dlock_reply_free(r);
}

/* Sends ECHO 'word', its outcome into 's'; what the call returned. */
static int echo_try(dlock_client_t *c, const char *word, seen *s,
                    int *counter) {
  const char *argv[] = {"ECHO", word};
  memset(s, 0, sizeof(*s));
  s->counter = counter;
  return dlock_client_command_async(c, 2, argv, NULL, on_reply, s);
}

static void echo(dlock_client_t *c, const char *word, seen *s, int *counter) {
  ASSERT_DLOCK_OK(echo_try(c, word, s, counter));
}

/* A fake server, an async client of it with 'command_ms' as its command
 * timeout, and the loop that drives it. */
typedef struct scene {
  fs_server_t *fs;
  dlock_client_t *c;
  tl_loop t;
  int n; /* completions so far */
} scene;

static void up(scene *x, int64_t command_ms) {
  x->fs = fs_start();
  dlock_options_t o;
  dlock_options_init(&o);
  o.url = fs_url(x->fs);
  o.connect_timeout_ms = 5000;
  o.command_timeout_ms = command_ms;
  x->c = tl_client_opts(&o);
  tl_init(&x->t, x->c);
  x->n = 0;
}

static void down(scene *x) {
  if (x->c != NULL)
    dlock_client_close(x->c);
  tl_close(&x->t);
  fs_free(x->fs);
}

/* 's' came once, with 'word' as its answer. */
static void answered(const seen *s, const char *word) {
  ASSERT_EQ(s->calls, 1);
  ASSERT_DLOCK_OK(s->status);
  ASSERT_STR_EQ(s->reply, word);
}

TEST(async_held_back_reply_keeps_the_order) {
  scene x;
  up(&x, 30000);
  seen a, b;
  /* The first answer waits; the second, due at once, must not pass it. */
  fs_set(x.fs, "ECHO", &(fs_action_t){.delay_ms = 300, .times = 1});
  echo(x.c, "first", &a, &x.n);
  echo(x.c, "second", &b, &x.n);
  tl_run_until(&x.t, &b.calls, 30000);
  answered(&a, "first");
  answered(&b, "second");
  ASSERT_EQ(a.order, 1);
  ASSERT_EQ(b.order, 2);
  tl_run_for(&x.t, 50);
  ASSERT_EQ(a.calls + b.calls, 2);
  down(&x);
}

TEST(async_reply_in_single_bytes_arrives_whole) {
  scene x;
  up(&x, 30000);
  seen a, b;
  /* Every byte of the answer is a read of its own for the client. */
  fs_set(x.fs, "ECHO", &(fs_action_t){.how = FS_TRICKLE, .every_ms = 2});
  echo(x.c, "a-word-of-some-length-in-pieces", &a, &x.n);
  echo(x.c, "and-another", &b, &x.n);
  tl_run_until(&x.t, &b.calls, 60000);
  answered(&a, "a-word-of-some-length-in-pieces");
  answered(&b, "and-another");
  ASSERT_EQ(a.order, 1);
  ASSERT_EQ(fs_accepted(x.fs), 1);
  down(&x);
}

TEST(async_close_mid_reply_fails_once_and_comes_back) {
  scene x;
  up(&x, 30000);
  seen a, b, later;
  echo(x.c, "warm", &a, &x.n);
  tl_run_until(&x.t, &a.calls, 30000);
  ASSERT_DLOCK_OK(a.status);
  /* Half an answer, then the server hangs up: the command fails with the
   * connection's reason, and so does the one queued behind it. */
  fs_set(x.fs, "ECHO", &(fs_action_t){.how = FS_CLOSE_MID, .times = 1});
  echo(x.c, "cut-in-the-middle", &a, &x.n);
  echo(x.c, "behind-it", &b, &x.n);
  tl_run_until(&x.t, &b.calls, 30000);
  ASSERT_EQ(a.calls, 1);
  ASSERT_DLOCK_ERR(a.status, DLOCK_EIO);
  ASSERT(a.detail[0] != '\0');
  ASSERT_EQ(b.calls, 1);
  ASSERT(b.status == 0 || b.status == DLOCK_EIO);
  /* The next command reconnects by itself. */
  echo(x.c, "again", &later, &x.n);
  tl_run_until(&x.t, &later.calls, 30000);
  answered(&later, "again");
  ASSERT_GE(fs_accepted(x.fs), 2);
  tl_run_for(&x.t, 50);
  ASSERT_EQ(a.calls + b.calls + later.calls, 3);
  down(&x);
}

TEST(async_silent_server_fails_at_the_command_timeout) {
  scene x;
  up(&x, 300);
  seen a, later;
  fs_set(x.fs, "ECHO", &(fs_action_t){.how = FS_SILENT, .times = 1});
  int64_t t0 = lu_now_ms();
  echo(x.c, "into-the-void", &a, &x.n);
  tl_run_until(&x.t, &a.calls, 30000);
  /* Not before the command timeout: the loop's timer, not a busy wait,
   * ends it. */
  ASSERT_GE(lu_now_ms() - t0, 250);
  ASSERT_DLOCK_ERR(a.status, DLOCK_EIO);
  ASSERT(strstr(a.detail, "no reply from Redis within") != NULL);
  /* The client comes back by itself. Until the reconnect's back-off has
   * passed a command is refused at once, with the reason (its callback
   * never runs); one sent behind the unanswered request, when the
   * request's own deadline ended it before the connection was given up,
   * fails with it. Either way a later one is answered. */
  int64_t until = lu_now_ms() + 30000;
  for (;;) {
    ASSERT_LT(lu_now_ms(), until);
    int rc = echo_try(x.c, "after-the-silence", &later, &x.n);
    if (rc != 0) {
      ASSERT_DLOCK_ERR(rc, DLOCK_EIO);
      tl_run_for(&x.t, 20);
      continue;
    }
    tl_run_until(&x.t, &later.calls, 30000);
    if (later.status == 0)
      break;
    ASSERT_DLOCK_ERR(later.status, DLOCK_EIO);
  }
  answered(&later, "after-the-silence");
  ASSERT_EQ(a.calls, 1);
  down(&x);
}

TEST(async_close_ends_a_command_the_server_holds) {
  scene x;
  up(&x, 30000);
  seen a, b;
  fs_set(x.fs, "ECHO", &(fs_action_t){.how = FS_SILENT});
  echo(x.c, "never-answered", &a, &x.n);
  echo(x.c, "never-sent-or-answered", &b, &x.n);
  /* Until the server has the first, so that one is surely on the wire. */
  while (fs_count(x.fs, "ECHO") < 1)
    tl_turn(&x.t, 20);
  tl_run_for(&x.t, 50);
  ASSERT_EQ(a.calls + b.calls, 0);
  int64_t t0 = lu_now_ms();
  dlock_client_close(x.c);
  x.c = NULL;
  /* Plain commands give nothing back: the close does not wait for their
   * answers (a command timeout, 30 s here). */
  ASSERT_LT(lu_now_ms() - t0, 20000);
  ASSERT_EQ(a.calls, 1);
  ASSERT_EQ(b.calls, 1);
  ASSERT_DLOCK_ERR(a.status, DLOCK_ECANCELED);
  ASSERT_DLOCK_ERR(b.status, DLOCK_ECANCELED);
  ASSERT_EQ(a.order, 1);
  down(&x);
}

TEST(async_server_gone_fails_commands_until_it_is_back) {
  scene x;
  up(&x, 30000);
  seen a;
  echo(x.c, "before", &a, &x.n);
  tl_run_until(&x.t, &a.calls, 30000);
  ASSERT_DLOCK_OK(a.status);
  /* Every connection dropped while idle: the next command finds out and
   * still gets its answer, on a new connection. */
  fs_close_all(x.fs);
  tl_run_for(&x.t, 100);
  echo(x.c, "after", &a, &x.n);
  tl_run_until(&x.t, &a.calls, 30000);
  if (a.status != 0) {
    /* It may have been written to the dead socket before the loop saw
     * the hang-up; then it fails with the reason, and the next one works. */
    ASSERT_DLOCK_ERR(a.status, DLOCK_EIO);
    echo(x.c, "after", &a, &x.n);
    tl_run_until(&x.t, &a.calls, 30000);
  }
  answered(&a, "after");
  ASSERT_GE(fs_accepted(x.fs), 2);
  down(&x);
}
