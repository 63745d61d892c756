/*
 * The exit statuses of the dlock command, in one place so the code, the
 * help texts and the man page agree. They follow sysexits(3) where a
 * matching code exists, so scripts and supervisors can tell "try again
 * later" from "broken configuration".
 */
#ifndef DLOCK_TOOLS_EXIT_CODES_H
#define DLOCK_TOOLS_EXIT_CODES_H

enum {
  EXIT_OK = 0,
  /* EX_USAGE: bad command line (unknown option, bad duration, bad URL). */
  EXIT_USAGE = 64,
  /* EX_DATAERR: "unlock --force" found a key that is not a lock of the
   * kind named (a counter, a user's hash); nothing was deleted. */
  EXIT_NOT_A_LOCK = 65,
  /* EX_UNAVAILABLE: Redis unreachable, password refused, or an error reply. */
  EXIT_UNAVAILABLE = 69,
  /* EX_SOFTWARE: an internal failure (out of memory, fork failed). */
  EXIT_INTERNAL = 70,
  /* EX_TEMPFAIL: the lock was not acquired within --wait; try again later.
   * "run --conflict-exit-code N" picks another, as flock -E does. */
  EXIT_NOT_ACQUIRED = 75,
  /* The lock was lost while the command ran (renewal found it gone, Redis
   * stayed unreachable past the lease, or a fixed --lease ran out), so the
   * command was stopped. No sysexits code means this, so dlock owns 76. */
  EXIT_LOCK_LOST = 76,
  /* The command could not be executed / was not found, as in sh and env. */
  EXIT_CANNOT_EXECUTE = 126,
  EXIT_NOT_FOUND = 127,
  /* A command killed by signal N makes dlock exit 128 + N, as in sh. */
  EXIT_SIGNAL_BASE = 128
};

#endif
