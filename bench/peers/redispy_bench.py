#!/usr/bin/python3
"""redis-py's redis.lock.Lock under the lock workloads of bench/run.sh.

Same options and the same one-line key=value output as bench_lock and
bench_handoff, so the driver treats every contender alike:

  redispy_bench.py --port P --mode loop|herd|handoff [--procs N]
      [--threads T] [--distinct] [--work] [--seconds S] [--sleep SECONDS]
      [--timeout S] [--name NAME] [--dist PREFIX]

Processes are forked; each has one redis.Redis client (a connection pool)
shared by its threads, as the C threads of a process share one dlock client.
Without --sleep the lock polls with its default sleep of 0.1 s; with it, that
interval. Every lock has a 10 s lease (the default is none at all).
Runs on Debian's python3-redis.
"""
import itertools
import multiprocessing as mp
import re
import sys
import threading
import time

import redis

LEASE = 10  # seconds
now = time.monotonic_ns  # CLOCK_MONOTONIC, comparable across processes


def parse_args(argv):
    opt = {"procs": 1, "threads": 1, "seconds": 2.0, "timeout": 120.0,
           "name": "bench:lock", "sleep": None, "distinct": False,
           "work": False, "dist": None, "mode": "loop", "port": 6379}
    it = iter(argv)
    for a in it:
        key = a[2:].replace("-", "_")
        if key in ("distinct", "work"):
            opt[key] = True
        elif key in opt:
            v = next(it)
            opt[key] = type(opt[key])(v) if opt[key] is not None and not isinstance(opt[key], str) else v
        else:
            sys.exit(f"redispy_bench: unknown option {a}")
    if opt["sleep"] is not None:
        opt["sleep"] = float(opt["sleep"])
    return opt


OPT = parse_args(sys.argv[1:])


class CountingRedis(redis.Redis):
    """Counts the SET commands the lock sends (its acquisition attempts),
    the only commands of a lock that a script could also have run, so the
    server's statistics cannot tell them from the critical section's."""
    counting = None  # a shared flag: count only while it is set
    sets = itertools.count()  # next() on it is atomic in CPython

    def execute_command(self, *args, **kw):
        if args[0] == "SET" and "NX" in args[3:] and self.counting.value:
            next(self.sets)
        return super().execute_command(*args, **kw)


def make_client():
    return CountingRedis(host="127.0.0.1", port=OPT["port"])


def make_lock(client, name):
    kw = {} if OPT["sleep"] is None else {"sleep": OPT["sleep"]}
    return client.lock(name, timeout=LEASE, **kw)


def critical(client):
    """A non-atomic read-modify-write of the counter."""
    v = int(client.get("bench:counter") or 0)
    client.set("bench:counter", v + 1)


def child(k, shared, results):
    """One worker process: T threads in a loop, or herd waiters."""
    client = make_client()
    # acq: per worker, done within the window (the rate and fairness);
    # total: all, the last lock calls finishing after it (the counter check).
    res = {"acq": [0] * OPT["threads"], "total": 0, "pair": [], "wait": [],
           "done": 0, "errors": 0}
    lock = threading.Lock()  # guards res across the threads

    def worker(i):
        name = f"{OPT['name']}:{k}:{i}" if OPT["distinct"] else OPT["name"]
        lk = make_lock(client, name)
        shared["go"].wait()
        if OPT["mode"] == "herd":
            with shared["waiting"].get_lock():
                shared["waiting"].value += 1
            t = now()
            if not lk.acquire(blocking_timeout=OPT["timeout"]):
                with lock:
                    res["errors"] += 1
                return
            got = now()
            critical(client)
            lk.release()
            done = now()
            with lock:
                res["acq"][i] = 1
                res["total"] += 1
                res["wait"].append(got - t)
                res["pair"].append(done - t)
                res["done"] = max(res["done"], done)
            return
        end = shared["start"].value + OPT["seconds"] * 1e9
        t = now()
        while t < end:
            if not lk.acquire(blocking_timeout=30):
                with lock:
                    res["errors"] += 1
                return
            got = now()
            if OPT["work"]:
                critical(client)
            lk.release()
            done = now()
            with lock:
                res["acq"][i] += done <= end
                res["total"] += 1
                res["wait"].append(got - t)
                res["pair"].append(done - t)
            t = done

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(OPT["threads"])]
    for t in threads:
        t.start()
    with shared["ready"].get_lock():
        shared["ready"].value += 1
    for t in threads:
        t.join()
    res["sets"] = next(CountingRedis.sets)
    results.put((k, res))


def handoff_side(first, peer, shared, results):
    """One side of the hand-off: the holder tells the other to wait, holds
    5-15 ms, notes the time and releases; the waiter notes when its
    acquisition returns. Roles swap each time."""
    import random
    client = make_client()
    lk = make_lock(client, OPT["name"])
    released, acquired, errors = [], [], 0
    holding = first and lk.acquire(blocking_timeout=30)
    with shared["ready"].get_lock():
        shared["ready"].value += 1
    shared["go"].wait()
    end = now() + OPT["seconds"] * 1e9
    while True:
        if holding:
            over = now() >= end
            peer.send("q" if over else "w")
            time.sleep(0.005 + random.random() * 0.010)
            released.append(now())
            lk.release()
            holding = False
            if over:
                break
        else:
            if peer.recv() == "q":
                break
            holding = lk.acquire(blocking_timeout=30)
            acquired.append(now())
            if not holding:
                errors += 1
                peer.send("q")
                break
    results.put((0 if first else 1, {"released": released, "acquired": acquired, "errors": errors}))


WIRE = re.compile(r"(eval|evalsha|eval_ro|evalsha_ro|fcall|fcall_ro|s?subscribe|s?unsubscribe|"
                  r"p(un)?subscribe|ping|auth|select|hello|quit|reset|client\|.*|script\|.*)$")


def cmdstats(r):
    """Commands the server ran (INFO excluded): 'all' with those run inside
    scripts, 'wire' only those no script can run, i.e. sent by a client."""
    n = {"all": 0, "wire": 0}
    for name, stat in r.info("commandstats").items():
        name = name[len("cmdstat_"):]
        if name != "info":
            n["all"] += stat["calls"]
        if WIRE.match(name):
            n["wire"] += stat["calls"]
    return n


def quantile(s, q):
    return s[min(len(s) - 1, round((len(s) - 1) * q))] / 1e3 if s else 0.0


def write_dist(s, suffix):
    if OPT["dist"] and s:
        with open(f"{OPT['dist']}.{suffix}", "w") as f:
            for i in range(201):
                f.write(f"{i / 200:.3f} {quantile(s, i / 200):.1f}\n")


def main():
    ctx = mp.get_context("fork")
    r = redis.Redis(host="127.0.0.1", port=OPT["port"])
    r.set("bench:counter", 0)
    shared = {"go": ctx.Event(), "ready": ctx.Value("i", 0), "waiting": ctx.Value("i", 0),
              "counting": ctx.Value("i", 0), "start": ctx.Value("d", 0.0)}
    CountingRedis.counting = shared["counting"]  # inherited by the children
    results = ctx.Queue()
    herd = OPT["mode"] == "herd"
    if OPT["mode"] == "handoff":
        a, b = ctx.Pipe()
        procs = [ctx.Process(target=handoff_side, args=(True, a, shared, results)),
                 ctx.Process(target=handoff_side, args=(False, b, shared, results))]
    else:
        procs = [ctx.Process(target=child, args=(k, shared, results)) for k in range(OPT["procs"])]
    held = None
    if herd:  # the parent holds the lock while the workers line up
        held = make_lock(make_client(), OPT["name"])
        held.acquire()
    for p in procs:
        p.start()
    deadline = time.monotonic() + 60
    while shared["ready"].value < len(procs) and time.monotonic() < deadline:
        time.sleep(0.01)
    before = cmdstats(r)
    t0 = now()
    shared["start"].value = t0
    shared["counting"].value = 0 if herd else 1
    shared["go"].set()
    if herd:
        want = OPT["procs"] * OPT["threads"]
        while shared["waiting"].value < want and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)  # the last ones make their first attempt and sleep
        before = cmdstats(r)
        shared["counting"].value = 1
        t0 = now()
        held.release()
    got = {}
    for _ in procs:
        try:
            k, res = results.get(timeout=OPT["timeout"] + 60)
        except Exception:
            break
        got[k] = res
    for p in procs:
        p.join(timeout=10)
    after = cmdstats(r)
    counter = int(r.get("bench:counter") or 0)
    failed = any(p.exitcode != 0 for p in procs) or len(got) < len(procs)
    errors = sum(res["errors"] for res in got.values()) + (len(procs) - len(got))
    if OPT["mode"] == "handoff":
        h = []
        for k in (0, 1):
            if k in got and 1 - k in got:
                rel, acq = got[k]["released"], got[1 - k]["acquired"]
                h += [acq[i] - t for i, t in enumerate(rel) if i < len(acq) and acq[i] > t]
        h.sort()
        write_dist(h, "handoff")
        print(f"handoffs={len(h)} p50={quantile(h, .5):.1f} p99={quantile(h, .99):.1f} errors={errors}")
        return 1 if failed or errors or not h else 0
    acqs = [n for res in got.values() for n in res["acq"]]
    win = sum(acqs)
    acq = sum(res["total"] for res in got.values())
    pair = sorted(v for res in got.values() for v in res["pair"])
    wait = sorted(v for res in got.values() for v in res["wait"])
    write_dist(pair, "pair")
    write_dist(wait, "wait")
    if herd:
        secs = (max([res["done"] for res in got.values()] or [t0]) - t0) / 1e9
    else:
        secs = OPT["seconds"]
    checked = OPT["work"] or herd
    ok = counter == acq
    # What the clients sent: the release scripts, the lock's SET NX attempts
    # and GET and SET per hold.
    sets = sum(res["sets"] for res in got.values())
    cmds = after["wire"] - before["wire"] + sets + (2 * acq if checked else 0)
    print(f"acq={acq} win={win} seconds={secs:.3f} rate={win / secs if secs else 0:.1f} "
          f"pair_p50={quantile(pair, .5):.1f} pair_p99={quantile(pair, .99):.1f} "
          f"wait_p50={quantile(wait, .5):.1f} wait_p99={quantile(wait, .99):.1f} "
          f"min={min(acqs or [0])} max={max(acqs or [0])} cmds={cmds} "
          f"cmds_all={after['all'] - before['all']} "
          f"counter={('ok' if ok else 'bad') if checked else '-'} errors={errors}")
    return 1 if failed or errors or (checked and not ok) else 0


if __name__ == "__main__":
    sys.exit(main())
