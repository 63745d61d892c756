"""Parses a Prometheus text exposition written by dlock_stats_format with
prometheus_client's parser and checks it against what the run that made it
did.

  python check.py FILE ACQUIRED TIMED_OUT LOCK_NAME SEM_ACQUIRED SEM_TIMED_OUT

ACQUIRED and TIMED_OUT are the single locks' (kind="lock"), SEM_* a
semaphore's (kind="semaphore"), whose permits were all released.
Exits 0 when it holds, 1 with every failure listed.
"""
import math
import sys

from prometheus_client.parser import text_string_to_metric_families

path, acquired, timed_out, lock_name, sem_acquired, sem_timed_out = \
    sys.argv[1:7]
acquired, timed_out = int(acquired), int(timed_out)
sem_acquired, sem_timed_out = int(sem_acquired), int(sem_timed_out)
KINDS = ("lock", "semaphore", "psem", "latch", "multilock", "redlock")
text = open(path, encoding="utf-8").read()
families = {f.name: f for f in text_string_to_metric_families(text)}
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def value(family, **labels):
    f = families.get(family)
    if f is None:
        return None
    for s in f.samples:
        if all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    return None


# The client library strips _total from counter family names.
for name, kind in [("dlock_acquisitions", "counter"),
                   ("dlock_locks_lost", "counter"),
                   ("dlock_reconnects", "counter"),
                   ("dlock_pubsub_reconnects", "counter"),
                   ("dlock_waits", "counter"),
                   ("dlock_releases", "counter"),
                   ("dlock_commands", "counter"),
                   ("dlock_lock_waits", "counter"),
                   ("dlock_acquire_seconds", "histogram"),
                   ("dlock_wait_seconds", "histogram"),
                   ("dlock_hold_seconds", "histogram")]:
    check(name in families, f"family {name} missing")
    if name in families:
        check(families[name].type == kind,
              f"{name} is {families[name].type}, expected {kind}")
        check(families[name].documentation != "", f"{name} has no HELP")

check(value("dlock_acquisitions", kind="lock", result="acquired",
            app="check") == acquired, "acquired count")
check(value("dlock_acquisitions", kind="lock", result="timed_out",
            app="check") == timed_out, "timed_out count")
check(value("dlock_acquisitions", kind="semaphore", result="acquired",
            app="check") == sem_acquired, "semaphore acquired count")
check(value("dlock_acquisitions", kind="semaphore", result="timed_out",
            app="check") == sem_timed_out, "semaphore timed_out count")
check(value("dlock_releases", kind="semaphore", app="check") == sem_acquired,
      "semaphore releases")
# Every kind has its four results, and nothing else was acquired.
for k in KINDS:
    for r in ("acquired", "refused", "timed_out", "failed"):
        v = value("dlock_acquisitions", kind=k, result=r, app="check")
        check(v is not None, f"no {k} {r} sample")
        if k not in ("lock", "semaphore"):
            check(v == 0, f"{k} {r} is {v}")

# Each kind's series of each histogram: cumulative, ending at +Inf with
# the count. A plain semaphore and a latch have no hold time.
for h in ("dlock_acquire_seconds", "dlock_wait_seconds", "dlock_hold_seconds"):
    f = families.get(h)
    if f is None:
        continue
    for s in f.samples:
        check(s.labels.get("app") == "check", f"{h}: label app missing")
    for k in KINDS:
        buckets = [(float(s.labels["le"]), s.value) for s in f.samples
                   if s.name == h + "_bucket" and s.labels.get("kind") == k]
        count = [s.value for s in f.samples
                 if s.name == h + "_count" and s.labels.get("kind") == k]
        if h == "dlock_hold_seconds" and k in ("semaphore", "latch"):
            check(not buckets, f"{h}: a {k} series")
            continue
        check(len(buckets) > 10, f"{h} {k}: {len(buckets)} buckets")
        check(buckets == sorted(buckets),
              f"{h} {k}: bounds or counts not rising")
        check(buckets and math.isinf(buckets[-1][0]),
              f"{h} {k}: no +Inf bucket last")
        check(count and buckets and buckets[-1][1] == count[0],
              f"{h} {k}: +Inf != count")


def sample(family, name, **labels):
    f = families.get(family)
    for s in f.samples if f is not None else []:
        if s.name == name and all(s.labels.get(k) == v
                                  for k, v in labels.items()):
            return s.value
    return None


# Every acquisition was released; each timed-out wait was a wait.
check(sample("dlock_hold_seconds", "dlock_hold_seconds_count",
             kind="lock") == acquired, "hold count")
check(sample("dlock_wait_seconds", "dlock_wait_seconds_count",
             kind="lock") == timed_out, "wait count")
check(sample("dlock_wait_seconds", "dlock_wait_seconds_count",
             kind="semaphore") == sem_timed_out, "semaphore wait count")
check(sample("dlock_acquire_seconds", "dlock_acquire_seconds_count",
             kind="semaphore") == sem_acquired + sem_timed_out,
      "semaphore acquire count")
waits = value("dlock_lock_waits", lock=lock_name, app="check")
check(waits == timed_out,
      f"waits of {lock_name!r}: {waits}, expected {timed_out}")

if failures:
    print("\n".join(failures))
    sys.exit(1)
print(f"parsed {len(families)} families")
