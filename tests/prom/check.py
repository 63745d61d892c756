"""Parses a Prometheus text exposition written by dlock_stats_format with
prometheus_client's parser and checks it against what the run that made it
did.

  python check.py FILE ACQUIRED TIMED_OUT LOCK_NAME

Exits 0 when it holds, 1 with every failure listed.
"""
import math
import sys

from prometheus_client.parser import text_string_to_metric_families

path, acquired, timed_out, lock_name = sys.argv[1:5]
acquired, timed_out = int(acquired), int(timed_out)
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

check(value("dlock_acquisitions", result="acquired", app="check") == acquired,
      "acquired count")
check(value("dlock_acquisitions", result="timed_out", app="check") ==
      timed_out, "timed_out count")

for h in ("dlock_acquire_seconds", "dlock_wait_seconds", "dlock_hold_seconds"):
    f = families.get(h)
    if f is None:
        continue
    buckets = [(float(s.labels["le"]), s.value) for s in f.samples
               if s.name == h + "_bucket"]
    count = [s.value for s in f.samples if s.name == h + "_count"]
    check(len(buckets) > 10, f"{h}: {len(buckets)} buckets")
    check(buckets == sorted(buckets), f"{h}: bounds or counts not rising")
    check(math.isinf(buckets[-1][0]), f"{h}: no +Inf bucket last")
    check(count and buckets[-1][1] == count[0], f"{h}: +Inf != count")
    for s in f.samples:
        check(s.labels.get("app") == "check", f"{h}: label app missing")


def sample(family, name, **labels):
    f = families.get(family)
    for s in f.samples if f is not None else []:
        if s.name == name and all(s.labels.get(k) == v
                                  for k, v in labels.items()):
            return s.value
    return None


# Every acquisition was released; each timed-out wait was a wait.
check(sample("dlock_hold_seconds", "dlock_hold_seconds_count") == acquired,
      "hold count")
check(sample("dlock_wait_seconds", "dlock_wait_seconds_count") == timed_out,
      "wait count")
waits = value("dlock_lock_waits", lock=lock_name, app="check")
check(waits == timed_out,
      f"waits of {lock_name!r}: {waits}, expected {timed_out}")

if failures:
    print("\n".join(failures))
    sys.exit(1)
print(f"parsed {len(families)} families")
