/*
 * Helpers shared by the benchmark programs: clocks, a plain hiredis
 * connection for data and for server statistics, latency samples, and the
 * pipes that carry results from forked workers to their parent.
 */
#ifndef BENCH_COMMON_H
#define BENCH_COMMON_H

#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdint.h>

/* CLOCK_MONOTONIC in ns: one clock for every process on the machine, so a
 * time taken in one process can be compared with one taken in another. */
uint64_t bench_now_ns(void);

/* Prints "bench: ..." and the library's last error, and exits 1. */
void bench_die(const char *what, int rc);
/* Prints "bench: ..." and exits 1. */
void bench_fail(const char *fmt, ...)
    __attribute__((format(printf, 1, 2), noreturn));

/* A plain hiredis connection to the server named by 'url' (redis://host:port
 * [/db] or unix:///path); the benchmark's own data and statistics go
 * through it, outside the library, as a user's data would. */
redisContext *bench_connect(const char *url);

/* Sends the command and returns its integer or numeric string reply; any
 * other reply ends the run. */
long long bench_number(redisContext *r, const char *fmt, ...);

/* Sleeps 'us' microseconds. */
void bench_sleep_us(uint64_t us);

/*
 * Server-side command counts from INFO commandstats.
 *   all:  every command executed, commands run inside scripts included
 *         (INFO itself excluded);
 *   wire: commands that can only come from a client (EVAL*, SUBSCRIBE*,
 *         PING, SCRIPT, CLIENT, AUTH, SELECT, HELLO): with the plain commands
 *         a program sends itself, what the clients sent over the wire.
 */
typedef struct bench_cmdstats {
  uint64_t all, wire, evals;
} bench_cmdstats_t;

void bench_cmdstats(redisContext *r, bench_cmdstats_t *out);

/* A growing array of latency samples in ns. */
typedef struct bench_samples {
  uint64_t *v;
  size_t n, cap;
} bench_samples_t;

void bench_samples_add(bench_samples_t *s, uint64_t ns);
/* Sorts in place; then bench_quantile() works. */
void bench_samples_sort(bench_samples_t *s);
/* The q-quantile (0..1) of sorted samples, in microseconds; 0 when empty. */
double bench_quantile(const bench_samples_t *s, double q);
/* Writes the distribution of sorted samples to 'path' as "quantile us"
 * lines (200 steps and the maximum), for the report's plots. NULL: no-op. */
void bench_write_dist(const bench_samples_t *s, const char *path);

int bench_write_all(int fd, const void *buf, size_t len);
int bench_read_all(int fd, void *buf, size_t len);
/* Reads 'n' samples (uint64_t each, as a worker process writes them) from
 * 'fd' into 's', in large reads: one read per sample would put thousands
 * of system calls on the client's CPU figure. 0, or -1 when 'fd' ends
 * first. */
int bench_read_samples(int fd, uint64_t n, bench_samples_t *s);

#endif
