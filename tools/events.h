/*
 * The one place "dlock run" waits: a self-pipe that signal handlers and the
 * library's threads (the lock acquisition, the watchdog's lost-lock
 * callback) write one-byte events into, and that the main loop polls with a
 * timeout. Writing to a pipe is async-signal-safe and thread-safe, so every
 * source of news funnels through here and the main loop never races them.
 */
#ifndef DLOCK_TOOLS_EVENTS_H
#define DLOCK_TOOLS_EVENTS_H

#include <signal.h>
#include <stddef.h>

enum {
  /* A signal N arrives as the byte N; sent by the terminal as N | this. */
  EVENT_FROM_TERMINAL = 0x80,
  /* The acquisition thread finished (successfully or not). */
  EVENT_ACQUIRE_DONE = 0xF0,
  /* The library reported that the held lock was lost. */
  EVENT_LOCK_LOST = 0xF1
};

/* The signals "dlock run" passes on to its command. */
extern const int events_forwarded_signals[];
extern const size_t events_nforwarded_signals;

/* The signal an event stands for, or 0 when it is not a signal. */
int event_signal(unsigned char event);

/* 1 when the event is a signal typed at the terminal (see events.c). */
int event_from_terminal(unsigned char event);

/* "SIGTERM" for SIGTERM and the other forwarded signals, else "signal N"
 * in a static buffer. */
const char *signal_name(int signo);

/* Creates the pipe (close-on-exec, so the command does not inherit it). */
int events_open(void);
void events_close(void);

/* Queues 'event'; async-signal-safe, callable from any thread. */
void events_post(unsigned char event);

/*
 * Installs handlers that post forwarded signals and SIGCHLD as events.
 * Signals in 'leave_alone' (those ignored when dlock started, as under
 * nohup) keep their disposition, which the command then inherits.
 */
int events_catch_signals(const sigset_t *leave_alone);

/*
 * Waits up to 'timeout_ms' (-1: no limit) for events and stores up to 'cap'
 * of them in 'out'. Returns how many (0 on timeout).
 */
size_t events_wait(int timeout_ms, unsigned char *out, size_t cap);

#endif
