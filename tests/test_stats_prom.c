/*
 * The Prometheus text of a client's statistics, parsed by a real parser:
 * Python's prometheus_client (pinned in tests/prom/requirements.txt,
 * installed by tests/prom/setup.sh as this test's ctest fixture), which
 * tests/prom/check.py runs on the text of a scripted run. Built in the
 * plain tree only.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lock_util.h"

/* A name with every character the format must escape, and bytes it may
 * not carry: the checker finds it as the text spells it. */
static const char weird[] = "st:prom \"q\" \\ \n \xc3\xa9";
static const char weird_label[] = "st:prom \"q\" \\ \n %C3%A9";

TEST(stats_prometheus_parses) {
  enum { N = 5, M = 2, SN = 3, SM = 1 };
  rp_server_t *s = lu_server(1);
  dlock_client_t *a = lu_client(s), *b = lu_client(s);
  dlock_t *l = lu_get(a, "st:prom:free");
  for (int i = 0; i < N; i++) {
    ASSERT_DLOCK_OK(dlock_lock(l, 10000));
    ASSERT_DLOCK_OK(dlock_unlock(l));
  }
  dlock_t *hb = NULL, *ha = NULL;
  ASSERT_DLOCK_OK(dlock_getn(b, weird, strlen(weird), &hb));
  ASSERT_DLOCK_OK(dlock_getn(a, weird, strlen(weird), &ha));
  ASSERT_DLOCK_OK(dlock_lock(hb, 60000));
  for (int i = 0; i < M; i++)
    ASSERT_DLOCK_ERR(dlock_trylock(ha, 50, 10000), DLOCK_ETIMEDOUT);
  /* A semaphore of SN permits: SN taken one by one, one more waited for
   * in vain, all given back. */
  dlock_sem_t *sem = NULL;
  ASSERT_DLOCK_OK(dlock_sem_get(a, "st:prom:sem", &sem));
  ASSERT_EQ(dlock_sem_try_set_permits(sem, SN), 1);
  for (int i = 0; i < SN; i++)
    ASSERT_DLOCK_OK(dlock_sem_acquire(sem, 1, 1000));
  for (int i = 0; i < SM; i++)
    ASSERT_DLOCK_ERR(dlock_sem_acquire(sem, 1, 50), DLOCK_ETIMEDOUT);
  for (int i = 0; i < SN; i++)
    ASSERT_DLOCK_OK(dlock_sem_release(sem, 1));

  dlock_stats_t st;
  dlock_client_stats(a, &st);
  size_t need = dlock_stats_format(&st, "app=\"check\"", NULL, 0);
  char *text = malloc(need + 1);
  ASSERT_NOT_NULL(text);
  ASSERT_EQ(dlock_stats_format(&st, "app=\"check\"", text, need + 1), need);
  char path[] = "/tmp/dlock-prom-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, text, need), (ssize_t)need);
  close(fd);

  char n[16], m[16], sn[16], sm[16];
  snprintf(n, sizeof(n), "%d", N);
  snprintf(m, sizeof(m), "%d", M);
  snprintf(sn, sizeof(sn), "%d", SN);
  snprintf(sm, sizeof(sm), "%d", SM);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    execl(DLOCK_PROM_PYTHON, DLOCK_PROM_PYTHON, DLOCK_PROM_CHECK, path, n, m,
          weird_label, sn, sm, (char *)NULL);
    _exit(127);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  unlink(path);
  ASSERT(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);

  free(text);
  dlock_sem_free(sem);
  ASSERT_DLOCK_OK(dlock_unlock(hb));
  dlock_free(ha);
  dlock_free(hb);
  dlock_free(l);
  dlock_client_close(a);
  dlock_client_close(b);
  rp_free(s);
}
