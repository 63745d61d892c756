/*
 * A server that accepts connections and never answers (the scripted fake
 * server, silent) holds nobody but the callers waiting for it: a call
 * waiting for its connection's handshake, and the pub/sub thread
 * reconnecting, both end at once when the client is shut down and closed,
 * far sooner than the connect and command timeouts.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdatomic.h>

#include "harness/fake_server.h"
#include "lock_util.h"

/* Connect and command timeouts far above every bound asserted here. */
enum { LONG_TIMEOUT_MS = 10000, PROMPT_MS = 1500 };

typedef struct call_run {
  dlock_t *l;
  pthread_t thread;
  int rc;
  _Atomic int64_t done_ms; /* when the call returned; 0 before */
} call_run;

static void *call_main(void *arg) {
  call_run *r = arg;
  r->rc = dlock_trylock(r->l, 0, 5000);
  atomic_store(&r->done_ms, lu_now_ms());
  return NULL;
}

/* A client of the fake server, which answers while the client opens. */
static dlock_client_t *fake_client(fs_server_t *fs) {
  dlock_options_t o;
  dlock_options_init(&o);
  o.url = fs_url(fs);
  o.connect_timeout_ms = LONG_TIMEOUT_MS;
  o.command_timeout_ms = LONG_TIMEOUT_MS;
  return lu_client_opts(&o);
}

TEST(shutdown_ends_a_call_waiting_for_a_silent_handshake) {
  fs_server_t *fs = fs_start();
  dlock_client_t *c = fake_client(fs);
  dlock_t *l = lu_get(c, "link:silent");
  /* Opening took a PING on the command connection and one on pub/sub's. */
  int pings = fs_count(fs, "PING");
  /* From now on the server accepts and reads, and answers nothing; the
   * connections it had are gone, so both are opened again. */
  fs_set(fs, NULL, &(fs_action_t){.how = FS_SILENT});
  fs_close_all(fs);
  call_run r = {.l = l};
  ASSERT_EQ(pthread_create(&r.thread, NULL, call_main, &r), 0);
  /* Both reconnects are in their handshake, waiting for the PING. */
  ASSERT(fs_wait_count(fs, "PING", pings + 2, 20000));
  lu_sleep_ms(50);
  ASSERT_EQ(atomic_load(&r.done_ms), 0);

  int64_t t0 = lu_now_ms();
  dlock_client_shutdown(c);
  int64_t shutdown_ms = lu_now_ms() - t0;
  pthread_join(r.thread, NULL);
  int64_t call_ms = atomic_load(&r.done_ms) - t0;
  printf("shutdown %" PRId64 " ms; the call ended %" PRId64
         " ms after it with %s\n",
         shutdown_ms, call_ms, dlock_err_name(r.rc));
  ASSERT_LT(shutdown_ms, PROMPT_MS);
  ASSERT_LT(call_ms, PROMPT_MS);
  ASSERT(r.rc == DLOCK_ECANCELED || r.rc == DLOCK_EIO);

  dlock_free(l);
  t0 = lu_now_ms();
  dlock_client_close(c);
  int64_t close_ms = lu_now_ms() - t0;
  printf("close during the pub/sub thread's handshake: %" PRId64 " ms\n",
         close_ms);
  ASSERT_LT(close_ms, PROMPT_MS);
  fs_free(fs);
}
