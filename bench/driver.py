#!/usr/bin/python3
"""The dlock benchmark: dlock, the raw limit of the server and the lock
libraries people would pick instead, side by side on one redis-server, in one
run. bench/run.sh sets things up and runs this; see bench/README.md.

  driver.py --build DIR [--quick] [--seconds S] [--rounds R] [--out DIR]

Every contender runs every workload it can, in rounds; the order of the
contenders rotates from round to round and each reports its median round,
so a burst of load from elsewhere on the machine skews one round of one
contender rather than a ratio. Writes latest.json, report.md and PNG plots
to the output directory, and prints the table as it goes.

Exit status: 1 when a run failed, a counter guarded by a lock came out
wrong, or a contender did not run; a missed speed target is reported, not
treated as a failure.
"""
import argparse
import csv
import io
import json
import os
import platform
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import redis  # Debian python3-redis, installed by bench/setup.sh

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEERS = os.path.join(ROOT, "bench", "peers")
PYTHON = "/usr/bin/python3"  # Debian's, with python3-redis

# The peers in their two settings. "delay" is the retry delay in ms; None
# means the library's default (node-redlock and its successor 200 +- 100 ms,
# redis-semaphore's Mutex 10 ms, redis-py 0.1 s).
PEER_BASES = ("redlock4", "redlock5", "sesame", "mutex", "redis-py")
# The node peers that redlock_bench.js runs, by its --lib argument.
NODE_LOCK_LIBS = {"redlock4": "4", "redlock5": "5", "sesame": "sesame", "mutex": "mutex"}
PEERS_ALL = [p + s for p in PEER_BASES for s in ("", "-tuned")]
DLOCKS = ["dlock", "dlock-fair"]
# The semaphore workloads' contenders: dlock's two semaphores, and
# redis-semaphore's Semaphore with its defaults and tuned like the others.
SEM_PEER_BASES = ("redis-semaphore",)
SEM_PEERS_ALL = [p + s for p in SEM_PEER_BASES for s in ("", "-tuned")]
SEM_DLOCKS = ["dlock-sem", "dlock-psem"]
SEM_WORKLOADS = ("sem-solo", "sem-threads", "sem-contended")
# Redisson (Java, bench/peers/redisson, built by bench/setup.sh with Maven)
# and go-redsync (Go, bench/peers/redsync): each with its defaults, never
# tuned. Redisson runs its reentrant lock (RLock), its fair lock
# (RFairLock) and its semaphore (RSemaphore); redsync has a mutex only.
REDISSON_DIR = os.path.join(PEERS, "redisson")
REDSYNC_BIN = os.path.join(PEERS, "redsync", "redsync-bench")
JAVA_LOCKS = ["redisson", "redisson-fair"]
GO_LOCKS = ["redsync"]
SEM_JAVA = ["redisson-sem"]
# Retry delays tried when tuning a peer, longest first (ms).
SWEEP_MS = [100, 50, 20, 10, 5, 2, 1]
# Tuning stops short of this: the Redis server busy more than half the time
# doubles every other client's latency (at utilisation u, a queue's response
# time grows as 1 / (1 - u)).
OVERLOAD_CPU = 0.5

LABELS = {
    "raw": "raw limit (redis-benchmark)",
    "raw-pipelined": "raw limit, pipelined (-P 16)",
    "raw-pairs": "raw pairs, bare hiredis threads",
    "raw-loop": "raw pairs, one event loop",
    "dlock": "dlock",
    "dlock-fair": "dlock fair lock",
    "dlock-async": "dlock, event-loop API (one thread)",
    "dlock-interleaved": "dlock, turn about with raw",
    "redlock4": "node-redlock 4.2.0",
    "redlock4-tuned": "node-redlock 4.2.0 tuned",
    "redlock5": "node-redlock 5.0.0-beta.2",
    "redlock5-tuned": "node-redlock 5.0.0-beta.2 tuned",
    "sesame": "@sesamecare-oss/redlock 1.4.0",
    "sesame-tuned": "@sesamecare-oss/redlock 1.4.0 tuned",
    "mutex": "redis-semaphore 5.8.0 Mutex",
    "mutex-tuned": "redis-semaphore 5.8.0 Mutex tuned",
    "redis-py": "redis-py Lock",
    "redis-py-tuned": "redis-py Lock tuned",
    "dlock-sem": "dlock semaphore",
    "dlock-psem": "dlock expirable-permit semaphore",
    "redis-semaphore": "redis-semaphore 5.8.0 Semaphore",
    "redis-semaphore-tuned": "redis-semaphore 5.8.0 Semaphore tuned",
    "redisson": "Redisson 4.7.0 RLock",
    "redisson-fair": "Redisson 4.7.0 RFairLock",
    "redisson-sem": "Redisson 4.7.0 RSemaphore",
    "redsync": "go-redsync 4.18.1 Mutex",
    "dlock-sync": "dlock, 1 replica, replica sync on",
    "dlock-nosync": "dlock, 1 replica, replica sync off",
    "raw-tls": "raw limit over TLS (redis-benchmark --tls)",
    "dlock-tls": "dlock, rediss://",
    "one-spread": "dlock, 1 server",
    "cluster-spread": "dlock, cluster, replica sync off",
    "cluster-spread-sync": "dlock, cluster, replica sync on",
    "one-solo": "dlock, 1 server",
    "cluster-solo": "dlock, cluster, replica sync off",
    "cluster-solo-sync": "dlock, cluster, replica sync on",
    "rs-solo-sync": "dlock, 1 master + 1 replica, sync on",
    "rs-solo": "dlock, 1 master + 1 replica, sync off",
}
def lua_script(name, text=None, depth=0):
    """A script as the library embeds it (cmake/embed_lua.cmake): the text
    of src/lua/NAME with every line "--@include PIECE" (spaces may come
    before it), newline and all, replaced by src/lua/lib/PIECE.lua with its
    own includes expanded. Read as bytes are, so that the digest is the
    library's."""
    if text is None:
        text = open(os.path.join(ROOT, "src", "lua", name), encoding="utf-8", newline="").read()
    lines = text.split("\n")
    out = []
    for i, line in enumerate(lines):
        last = i == len(lines) - 1
        if not line.lstrip(" ").startswith("--@include"):
            out.append(line if last else line + "\n")
            continue
        m = re.fullmatch(r" *--@include ([a-z0-9_]+) *", line)
        if m is None or last or depth >= 16:
            raise SystemExit("bench: %s: not an include of a piece: %r" % (name, line))
        path = os.path.join(ROOT, "src", "lua", "lib", m.group(1) + ".lua")
        piece = open(path, encoding="utf-8", newline="").read()
        out.append(lua_script(m.group(1) + ".lua", piece, depth + 1))
    return "".join(out)


# The lock name the library's calls are captured with (capture_calls).
PROBE_NAME = "bench:probe"
# The cluster row's contenders, by workload: a spread or solo run on the
# one server, on the cluster, and (solo) on a master with one replica, with
# replica sync off and on: the cluster's masters each feed a replica, which
# on a machine of few cores competes with the client and the master for
# them, whether or not the client waits for it.
CLUSTER_CONTENDERS = ["one-spread", "cluster-spread", "cluster-spread-sync",
                      "one-solo", "cluster-solo", "cluster-solo-sync", "rs-solo", "rs-solo-sync"]


def log(msg):
    print(msg, file=sys.stderr, flush=True)


class Progress:
    """One progress line on stderr: rewritten in place on a terminal, a line
    per step otherwise."""

    def __init__(self, total):
        self.total, self.done, self.tty = total, 0, sys.stderr.isatty()

    def step(self, what):
        self.done += 1
        line = f"[{self.done:3d}/{self.total}] {what}"
        if self.tty:
            sys.stderr.write("\r\033[K" + line[:150])
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def clear(self):
        if self.tty:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


class Server:
    """A private redis-server on a free loopback port, persistence off."""

    def __init__(self, tmp, tag, extra=(), conf=None):
        """'extra': more redis-server arguments; 'conf': the text of a
        config file to start from (a Sentinel's, which it rewrites)."""
        self.dir = os.path.join(tmp, tag)
        os.makedirs(self.dir)
        self.proc = None
        head = []
        if conf is not None:
            path = os.path.join(self.dir, "redis.conf")
            with open(path, "w") as f:
                f.write(conf)
            head = [path]
        for _ in range(20):
            port = random.randint(20000, 49999)
            proc = subprocess.Popen(
                ["redis-server"] + head + ["--bind", "127.0.0.1", "--port", str(port),
                                           "--save", "", "--appendonly", "no", "--dir", self.dir,
                                           "--logfile", os.path.join(self.dir, "redis.log")] + list(extra),
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            r = redis.Redis(host="127.0.0.1", port=port)
            for _ in range(100):
                if proc.poll() is not None:
                    break
                try:
                    try:
                        r.ping()
                    except redis.ResponseError:
                        pass  # up, as a replica not yet in step (MASTERDOWN)
                    self.proc, self.port, self.r = proc, port, r
                    self.url = f"redis://127.0.0.1:{port}"
                    return
                except redis.ConnectionError:
                    time.sleep(0.05)
            proc.kill()
            proc.wait()
        raise RuntimeError("could not start redis-server")

    def commandstats(self):
        """Calls per command name (commands run by scripts included), and
        under "script_usec" the microseconds spent in scripts (EVAL*)."""
        stats = self.r.info("commandstats")
        out = {k[len("cmdstat_"):]: v["calls"] for k, v in stats.items()}
        out["script_usec"] = sum(v["usec"] for k, v in stats.items() if k.startswith("cmdstat_eval"))
        return out

    def cpu(self):
        info = self.r.info("cpu")
        return info["used_cpu_user"] + info["used_cpu_sys"]

    def stop(self):
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None


class ClusterView:
    """The masters of a cluster standing in for the one server in
    Bench.run: flushed together, their CPU time and command counts
    summed."""

    def __init__(self, nodes):
        self.nodes = nodes
        self.r = self
        self.url = "redis-cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in nodes[:2])

    def masters(self):
        out = []
        for n in self.nodes:
            if n.proc is not None and n.r.info("replication")["role"] == "master":
                out.append(n)
        return out

    def owner(self, key):
        """The master that serves 'key' (the others answer MOVED)."""
        for n in self.masters():
            try:
                n.r.exists(key)
                return n
            except redis.ResponseError:
                pass
        raise RuntimeError(f"no master serves {key}")

    def flushall(self):
        for n in self.masters():
            n.r.flushall()

    def cpu(self):
        return sum(n.cpu() for n in self.masters())

    def commandstats(self):
        out = {}
        for n in self.masters():
            for k, v in n.commandstats().items():
                out[k] = out.get(k, 0) + v
        return out


def parse_line(text):
    """The last line of key=value pairs a benchmark program printed."""
    for line in reversed(text.strip().splitlines()):
        pairs = re.findall(r"(\w+)=(\S+)", line)
        if pairs:
            out = {}
            for k, v in pairs:
                try:
                    out[k] = float(v)
                except ValueError:
                    out[k] = v
            return out
    return {}


class Bench:
    def __init__(self, args):
        self.args = args
        self.quick = args.quick
        self.seconds = args.seconds
        self.rounds = args.rounds
        self.out = args.out
        self.tmp = tempfile.mkdtemp(prefix="dlock-bench.")
        self.dist_dir = os.path.join(self.out, "dist")
        shutil.rmtree(self.dist_dir, ignore_errors=True)
        os.makedirs(self.dist_dir)
        self.servers = []
        self.failures = []
        self.results = {}  # workload -> contender -> {"rounds": [...], "median": {...}}
        self.tuned = {}  # peer base -> delay in ms
        self.sweep = {}  # peer base -> [{delay, rate, cpu, ok}]
        self.bin = {}
        for prog in ("bench_lock", "bench_async", "bench_handoff", "bench_interleave", "bench_raw", "bench_watchdog",
                     "bench_redlock", "bench_sem", "bench_failover"):
            path = self.find_binary(prog)
            if path is None:
                raise SystemExit(f"bench: {prog} is not built in {args.build}; run 'make' first")
            self.bin[prog] = path

    def find_binary(self, prog):
        for d in (self.args.build, os.path.join(self.args.build, "bench")):
            p = os.path.join(d, prog)
            if os.path.isfile(p) and os.access(p, os.X_OK):
                return p
        return None

    def server(self, tag, extra=(), conf=None):
        s = Server(self.tmp, tag, extra, conf)
        self.servers.append(s)
        return s

    def cleanup(self):
        for s in self.servers:
            s.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # ---- running one program ------------------------------------------------

    def run(self, argv, timeout, what):
        """Runs one benchmark program against the main server (flushed
        first) and returns its key=value line, plus the server's CPU use
        and the run's status."""
        self.main.r.flushall()
        cpu0, stats0 = self.main.cpu(), self.main.commandstats()
        ru0 = client_cpu()
        t0 = time.monotonic()
        # A session of its own, so that on a time-out the program and the
        # workers it forked are stopped together, by its process group id.
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, start_new_session=True)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            err += f"\n(stopped after {timeout} s)"
        wall = time.monotonic() - t0
        ru1 = client_cpu()
        v = parse_line(out)
        secs = v.get("seconds") if isinstance(v.get("seconds"), float) else None
        v["redis_cpu"] = (self.main.cpu() - cpu0) / (secs if secs and secs > 0.05 else wall)
        v["wall"] = wall
        # Per command name over the whole run, set-up included: which
        # commands the figures above are made of.
        stats1 = self.main.commandstats()
        v["commands"] = {k: n - stats0.get(k, 0) for k, n in sorted(stats1.items())
                         if n - stats0.get(k, 0) > 0 and k not in ("info", "flushall", "script_usec")}
        v["script_usec"] = stats1["script_usec"] - stats0["script_usec"]
        v["cpu_sec"] = self.main.cpu() - cpu0
        # The contender's own CPU time, every process it forked included.
        v["client_cpu_sec"] = ru1 - ru0
        v["ok"] = p.returncode == 0 and bool(v) and v.get("counter") != "bad"
        if not v["ok"]:
            msg = f"{what}: exit status {p.returncode}; {err.strip()[-600:] or out.strip()[-600:]}"
            self.failures.append(msg)
            log(f"\nbench: FAILED {msg}")
        return v

    def sem_argv(self, contender, w, dist):
        """The command line of 'contender' for semaphore workload spec 'w'."""
        common = ["--seconds", str(self.seconds), "--name", f"bench:{w['name']}", "--dist", dist,
                  "--procs", str(w["procs"]), "--threads", str(w["threads"]),
                  "--permits", str(w["permits"])] + (["--work"] if w.get("work") else [])
        if contender in SEM_DLOCKS:
            kind = "psem" if contender == "dlock-psem" else "sem"
            return [self.bin["bench_sem"], "--url", self.main.url, "--kind", kind] + common
        if contender in SEM_JAVA:
            return self.redisson_argv() + ["--mode", "sem"] + common
        base = contender.replace("-tuned", "")
        argv = ["node", os.path.join(PEERS, "semaphore_bench.js"), "--port", str(self.main.port)] + common
        return argv + (["--retry-delay", str(self.tuned[base])] if contender.endswith("-tuned") else [])

    def lock_argv(self, contender, w, dist):
        """The command line of 'contender' for workload spec 'w'."""
        if w["mode"] == "sem":
            return self.sem_argv(contender, w, dist)
        mode = w["mode"]
        s = str(self.seconds)
        common = ["--seconds", s, "--name", f"bench:{w['name']}", "--dist", dist]
        if mode != "handoff":
            common += ["--mode", mode, "--procs", str(w["procs"]), "--threads", str(w["threads"])]
            common += ["--distinct"] if w.get("distinct") else []
            common += ["--work"] if w.get("work") else []
            common += ["--timeout", str(w["timeout"])] if mode == "herd" else []
        base = contender.replace("-tuned", "")
        tuned = contender.endswith("-tuned")
        if contender == "dlock-interleaved":
            raw = " ".join(["EVALSHA", self.sha] + self.sha_args)
            return [self.bin["bench_interleave"], "--url", self.main.url, "--seconds", s,
                    "--name", f"bench:{w['name']}", "--raw", raw]
        if contender in ("raw-pairs", "raw-loop"):
            # The library's own two calls, made by bare hiredis: one thread
            # and one connection per worker, a lock name each; or (raw-loop)
            # every worker's pair in flight on one connection from one
            # thread, as an event loop would make them.
            return [self.bin["bench_raw"], "--url", self.main.url, "--seconds", s,
                    "--acquire", " ".join(["EVALSHA", self.sha] + self.sha_args),
                    "--release", " ".join(self.release_call), "--name", PROBE_NAME,
                    "--clients", str(w["threads"]), "--dist", dist] + \
                (["--event-loop"] if contender == "raw-loop" else [])
        if contender == "dlock-async":
            # One process per --procs, each one thread running a loop with
            # its workers as operations in flight.
            return [self.bin["bench_async"], "--url", self.main.url] + common
        if contender in JAVA_LOCKS or contender in GO_LOCKS:
            argv = self.redisson_argv() if contender in JAVA_LOCKS else [REDSYNC_BIN, "--port", str(self.main.port)]
            argv += common + (["--mode", mode] if mode == "handoff" else [])
            return argv + (["--fair"] if contender == "redisson-fair" else [])
        if contender in DLOCKS:
            prog = self.bin["bench_handoff" if mode == "handoff" else "bench_lock"]
            return [prog, "--url", self.main.url] + common + (["--fair"] if contender == "dlock-fair" else [])
        if base in NODE_LOCK_LIBS:
            # bench_handoff has no --mode; the peers' scripts need it.
            argv = ["node", os.path.join(PEERS, "redlock_bench.js"), "--lib", NODE_LOCK_LIBS[base],
                    "--port", str(self.main.port)] + common
            argv += ["--mode", mode] if mode == "handoff" else []
            return argv + (["--retry-delay", str(self.tuned[base])] if tuned else [])
        argv = [PYTHON, os.path.join(PEERS, "redispy_bench.py"), "--port", str(self.main.port)] + common
        argv += ["--mode", mode] if mode == "handoff" else []
        return argv + (["--sleep", str(self.tuned[base] / 1000)] if tuned else [])

    def redisson_argv(self):
        """java running RedissonBench against the main server, after a
        warm-up of its own in each JVM (the JIT compiles the workload's
        calls before anything is counted)."""
        cp = open(os.path.join(REDISSON_DIR, "target", "classpath.txt")).read().strip()
        cp = os.path.join(REDISSON_DIR, "target", "classes") + os.pathsep + cp
        return ["java", "-cp", cp, "RedissonBench", "--port", str(self.main.port),
                "--warmup", "1" if self.quick else "3"]

    # ---- the raw limit ----------------------------------------------------

    def capture_calls(self):
        """The library's real acquire and release calls, seen on a MONITOR
        connection: (sha, acquire's arguments, the release's words)."""
        mon_path = os.path.join(self.tmp, "monitor.txt")
        with open(mon_path, "w") as f:
            mon = subprocess.Popen(["redis-cli", "-p", str(self.main.port), "monitor"], stdout=f)
        try:
            for _ in range(100):
                if "OK" in open(mon_path).read():
                    break
                time.sleep(0.02)
            subprocess.run([self.bin["bench_lock"], "--url", self.main.url, "--probe",
                            "--name", PROBE_NAME], check=True, stdout=subprocess.DEVNULL)
            time.sleep(0.2)
        finally:
            mon.terminate()
            mon.wait()
        calls = []
        for line in open(mon_path):
            if re.search(r'"EVAL(SHA)?" ', line, re.I) and f'"{PROBE_NAME}"' in line:
                words = re.findall(r'"((?:[^"\\]|\\.)*)"', line.split("] ", 1)[1])
                # A script not loaded yet is refused (NOSCRIPT) and sent
                # again whole: the same call twice, once as EVAL.
                if calls and calls[-1][2:] == words[2:]:
                    if words[0].upper() == "EVALSHA":
                        calls[-1] = words
                    continue
                calls.append(words)
        if len(calls) < 2:
            raise SystemExit("bench: the probe lock's acquire and release were not seen on MONITOR")
        # The probe takes the lock once and releases it: its first call is
        # the acquire, its second the release.
        acq_sha, acq_args = self.as_evalsha(calls[0], "acquire.lua")
        rel_sha, rel_args = self.as_evalsha(calls[1], "release.lua")
        return acq_sha, acq_args, ["EVALSHA", rel_sha] + rel_args

    def as_evalsha(self, words, script):
        """A call seen on MONITOR as (sha, arguments): an EVAL (the script
        was not loaded yet) is loaded and named by its SHA."""
        if words[0].upper() == "EVALSHA":
            return words[1], words[2:]
        body = lua_script(script)
        return self.main.r.script_load(body), words[2:]

    def raw(self, clients, pipeline, n, port=None, extra=()):
        """redis-benchmark running the acquire call: calls/s and per-call
        p50/p99 in us. 'port' and 'extra' (its TLS options): another port
        of the main server."""
        argv = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port or self.main.port), "-c", str(clients),
                "-n", str(n), "-P", str(pipeline)] + list(extra) + ["--csv", "EVALSHA", self.sha] + self.sha_args
        self.main.r.flushall()
        cpu0, t0, ru0 = self.main.cpu(), time.monotonic(), client_cpu()
        stats0 = self.main.commandstats()
        p = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        wall = time.monotonic() - t0
        ru1, stats1 = client_cpu(), self.main.commandstats()
        rows = list(csv.reader(io.StringIO(p.stdout)))
        if p.returncode != 0 or len(rows) < 2:
            self.failures.append(f"redis-benchmark -c {clients} -P {pipeline}: {p.stderr.strip()[-300:]}")
            return {"ok": False, "rate": 0.0}
        head, row = rows[0], rows[1]
        col = {h: i for i, h in enumerate(head)}
        rps = float(row[col.get("rps", 1)])
        get = lambda k: float(row[col[k]]) * 1000 if k in col else 0.0  # noqa: E731
        # A pair is two calls: the raw pair limit is half the call rate.
        return {"ok": True, "calls_per_s": rps, "rate": rps / 2, "call_p50": get("p50_latency_ms"),
                "call_p99": get("p99_latency_ms"), "pair_p50": 2 * get("p50_latency_ms"),
                "pair_p99": 2 * get("p99_latency_ms"), "redis_cpu": (self.main.cpu() - cpu0) / wall,
                "clients": clients, "pipeline": pipeline, "n": n, "acq": n / 2,
                "cpu_sec": self.main.cpu() - cpu0, "client_cpu_sec": ru1 - ru0,
                "script_usec": stats1["script_usec"] - stats0["script_usec"]}

    def raw_run(self, clients, pipeline):
        key = (clients, pipeline)
        est = self.raw_rate.get(key) or self.raw(clients, pipeline, 2000)["rate"] * 2
        n = max(1000, int(est * self.seconds))
        v = self.raw(clients, pipeline, n)
        if v["ok"]:
            self.raw_rate[key] = v["calls_per_s"]
        return v

    # ---- workloads ----------------------------------------------------------

    def workloads(self):
        q = self.quick
        herd_procs, herd_threads = (10, 10) if q else (10, 100)
        return [
            {"name": "solo", "mode": "loop", "procs": 1, "threads": 1,
             "raw": [(1, 1, "raw"), (1, 16, "raw-pipelined")],
             "contenders": ["dlock", "dlock-async", "dlock-interleaved", "raw-pairs"] + PEERS_ALL + ["redisson"] + GO_LOCKS},
            {"name": "spread", "mode": "loop", "procs": 1, "threads": 16, "distinct": True,
             "raw": [(16, 1, "raw"), (16, 16, "raw-pipelined")],
             "contenders": ["dlock", "dlock-async", "raw-pairs", "raw-loop"] + PEERS_ALL + ["redisson"] + GO_LOCKS},
            {"name": "contended", "mode": "loop", "procs": 4, "threads": 4, "work": True,
             "raw": [], "contenders": DLOCKS + ["dlock-async"] + PEERS_ALL + JAVA_LOCKS + GO_LOCKS},
            {"name": "handoff", "mode": "handoff", "raw": [],
             "contenders": DLOCKS + PEERS_ALL + JAVA_LOCKS + GO_LOCKS},
            {"name": "herd", "mode": "herd", "procs": herd_procs, "threads": herd_threads,
             "timeout": 30 if q else 120, "raw": [],
             "contenders": DLOCKS + ["dlock-async"] + PEERS_ALL + JAVA_LOCKS + GO_LOCKS,
             # A round takes a minute (the slowest pollers): three are enough.
             "rounds": min(self.rounds, 3)},
            # Semaphores: one permit per acquisition. The first two never
            # wait (as many permits as workers); the last is 16 workers on
            # 4 permits, each hold counting the holders (INCR on entry,
            # DECR on exit), which must never exceed 4.
            {"name": "sem-solo", "mode": "sem", "procs": 1, "threads": 1, "permits": 4,
             "raw": [], "contenders": SEM_DLOCKS + SEM_PEERS_ALL + SEM_JAVA},
            {"name": "sem-threads", "mode": "sem", "procs": 1, "threads": 16, "permits": 16,
             "raw": [], "contenders": SEM_DLOCKS + SEM_PEERS_ALL + SEM_JAVA},
            {"name": "sem-contended", "mode": "sem", "procs": 4, "threads": 4, "permits": 4, "work": True,
             "raw": [], "contenders": SEM_DLOCKS + SEM_PEERS_ALL + SEM_JAVA},
        ]

    def timeout_for(self, w):
        return (w["timeout"] + 60) if w["mode"] == "herd" else self.seconds * 3 + 60

    def run_workload(self, w, progress):
        name = w["name"]
        entries = [(c, None) for c in w["contenders"]] + [(lbl, (c, p)) for c, p, lbl in w["raw"]]
        res = {c: {"rounds": []} for c, _ in entries}
        rounds = w.get("rounds", self.rounds)
        for r in range(rounds):
            # The order rotates, so no contender always follows the same one.
            k = r % len(entries)
            for c, rawspec in entries[k:] + entries[:k]:
                progress.step(f"{name}, round {r + 1}/{rounds}: {LABELS[c]}")
                if rawspec:
                    v = self.raw_run(*rawspec)
                else:
                    dist = os.path.join(self.dist_dir, f"{name}.{c}.{r}")
                    v = self.run(self.lock_argv(c, w, dist), self.timeout_for(w), f"{name}/{c}")
                    v["dist"] = dist
                res[c]["rounds"].append(v)
        for c, d in res.items():
            d["median"] = median_round(d["rounds"], key_for(name))
        self.results[name] = res
        return res

    def tune_workload(self, base):
        """Where a peer's retry delay is swept: the contended workload of
        its kind (16 pollers on one lock, or on a semaphore of 4 permits)."""
        name = "sem-contended" if base in SEM_PEER_BASES else "contended"
        return dict(next(w for w in self.workloads() if w["name"] == name))

    def swept(self, ws):
        """The peers whose retry delay this run sweeps: those that run in
        one of the workloads 'ws'."""
        if self.quick or self.args.tuned is not None:
            return []
        used = {c.replace("-tuned", "") for w in ws for c in w["contenders"]}
        return [b for b in PEER_BASES + SEM_PEER_BASES if b in used]

    def tune(self, progress, ws):
        """Each peer's shortest retry delay that keeps the server's CPU under
        OVERLOAD_CPU on the contended workload of its kind."""
        sweep = self.swept(ws)
        for base in PEER_BASES + SEM_PEER_BASES:
            w = self.tune_workload(base)
            self.sweep[base] = []
            if base not in sweep:
                # The smoke test does not sweep (it checks the setting
                # runs), nor a run without the peer.
                self.tuned[base] = self.args.tuned or 5
                continue
            best = None
            for d in SWEEP_MS:
                progress.step(f"tuning {LABELS[base]}: retry delay {d} ms")
                self.tuned[base] = d
                v = self.run(self.lock_argv(base + "-tuned", w, os.path.join(self.tmp, "sweep")),
                             self.timeout_for(w), f"tuning {base} {d} ms")
                self.sweep[base].append({"delay_ms": d, "rate": v.get("rate", 0),
                                         "redis_cpu": v["redis_cpu"], "ok": v["ok"],
                                         "cmds_per_acq": per(v.get("cmds"), v.get("acq"))})
                if not v["ok"] or v["redis_cpu"] > OVERLOAD_CPU:
                    progress.total -= len(SWEEP_MS) - 1 - SWEEP_MS.index(d)
                    break
                best = d
            self.tuned[base] = best if best is not None else SWEEP_MS[0]

    def watchdog(self, progress):
        locks, rounds = (2000, 3) if self.quick else (10000, 10)
        runs = []
        for r in range(self.rounds):
            progress.step(f"watchdog, round {r + 1}/{self.rounds}: {locks} locks")
            runs.append(self.run([self.bin["bench_watchdog"], "--url", self.main.url, "--locks",
                                  str(locks), "--rounds", str(rounds)], 600, "watchdog"))
        # Redisson renews on its own timer, with its default watchdog
        # timeout (30 s: a round every 10 s); a few of its rounds are watched.
        # It holds 2 000 locks: its renewals send about a thousand commands
        # per lock and round at that count (more per lock with more locks),
        # and at 10 000 the server cannot keep up and locks expire.
        jlocks = 2000
        jruns = []
        for r in range(self.rounds):
            progress.step(f"watchdog, round {r + 1}/{self.rounds}: Redisson, {jlocks} locks")
            jruns.append(self.run(self.redisson_argv() + ["--mode", "watchdog", "--locks", str(jlocks),
                                                          "--rounds", "1" if self.quick else "3"],
                                  600, "watchdog/redisson"))
        self.results["watchdog"] = {"dlock": {"rounds": runs, "median": median_round(runs, "round_p50")},
                                    "redisson": {"rounds": jruns, "median": median_round(jruns, "round_p50")}}

    def redlock(self, progress):
        extra = [self.server(f"node{i}") for i in range(1, 5)]
        urls = [self.main.url] + [s.url for s in extra]
        # A sixth server, stopped (SIGSTOP) for the whole run: it accepts
        # connections (the kernel does) and answers nothing. It stands in
        # for the last node in a second RedLock taken in turn with the first.
        paused = self.server("paused")
        os.kill(paused.proc.pid, signal.SIGSTOP)
        runs = []
        try:
            for r in range(self.rounds):
                progress.step(f"RedLock, round {r + 1}/{self.rounds}: 5 servers vs 1, and 1 of 5 paused")
                for s in extra:
                    s.r.flushall()
                dist = os.path.join(self.dist_dir, f"redlock.dlock.{r}")
                argv = [self.bin["bench_redlock"], "--seconds", str(self.seconds), "--dist", dist,
                        "--paused", paused.url]
                for u in urls:
                    argv += ["--url", u]
                v = self.run(argv, self.seconds * 3 + 60, "redlock")
                v["dist"] = dist
                runs.append(v)
        finally:
            os.kill(paused.proc.pid, signal.SIGCONT)
            for s in extra + [paused]:
                s.stop()
        self.results["redlock"] = {"dlock": {"rounds": runs, "median": median_round(runs, "red_p50")}}

    def replica_of(self, master, tag):
        """A replica of 'master' (redis-server --replicaof), in step with it.
        Like the test harness's, it serves nothing stale while its master is
        gone."""
        rep = self.server(tag, ["--replicaof", "127.0.0.1", str(master.port),
                                "--replica-serve-stale-data", "no"])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            master.r.set("bench:probe", 1)
            if master.r.execute_command("WAIT", 1, 500) >= 1:
                return rep
            time.sleep(0.05)
        raise RuntimeError(f"replica {tag} did not come in step with its master")

    def replsync(self, progress):
        """solo lock+unlock on a master with one replica, replica sync on
        (WAIT 1 after every write, in the same round trip) and off."""
        master = self.server("rs-master")
        rep = self.replica_of(master, "rs-replica")
        main, self.main = self.main, master
        w = {"name": "replsync", "mode": "loop", "procs": 1, "threads": 1}
        res = {"dlock-sync": {"rounds": []}, "dlock-nosync": {"rounds": []}}
        try:
            for r in range(self.rounds):
                order = ["dlock-sync", "dlock-nosync"]
                for c in order if r % 2 == 0 else order[::-1]:
                    progress.step(f"replsync, round {r + 1}/{self.rounds}: {LABELS[c]}")
                    dist = os.path.join(self.dist_dir, f"replsync.{c}.{r}")
                    argv = self.lock_argv("dlock", w, dist) + (["--no-sync"] if c == "dlock-nosync" else [])
                    v = self.run(argv, self.timeout_for(w), f"replsync/{c}")
                    v["dist"] = dist
                    res[c]["rounds"].append(v)
        finally:
            self.main = main
            rep.stop()
            master.stop()
        for d in res.values():
            d["median"] = median_round(d["rounds"], "rate")
        self.results["replsync"] = res

    def tls_files(self):
        """A CA and a certificate for 127.0.0.1 that it signed, made with
        openssl as the tests do. Returns (ca, cert, key) paths."""
        d = os.path.join(self.tmp, "tls-files")
        os.makedirs(d)
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        run = lambda argv: subprocess.run(argv, cwd=d, check=True, capture_output=True)  # noqa: E731
        run(["openssl", "req", "-x509"] + ec + ["-keyout", "ca.key", "-out", "ca.crt", "-days", "3",
                                               "-subj", "/CN=dlock bench CA"])
        with open(os.path.join(d, "server.ext"), "w") as f:
            f.write("subjectAltName=IP:127.0.0.1\n")
        run(["openssl", "req"] + ec + ["-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1"])
        run(["openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "server.crt", "-days", "3", "-extfile", "server.ext"])
        return tuple(os.path.join(d, n) for n in ("ca.crt", "server.crt", "server.key"))

    def tls(self, progress):
        """solo lock+unlock over TLS (rediss://) against redis-benchmark
        --tls running the same acquire call on the same server, turn about
        round by round."""
        ca, crt, key = self.tls_files()
        tls_port = random.randint(20000, 49999)
        srv = self.server("tls-server", ["--tls-port", str(tls_port), "--tls-cert-file", crt, "--tls-key-file", key,
                                  "--tls-ca-cert-file", ca, "--tls-auth-clients", "no"])
        # redis-benchmark calls the script by its digest: load it first, as
        # the library would at its first call.
        body = lua_script("acquire.lua")
        if srv.r.script_load(body) != self.sha:
            raise SystemExit("bench: the acquire script's digest differs from the library's")
        w = {"name": "tls", "mode": "loop", "procs": 1, "threads": 1}
        res = {"raw-tls": {"rounds": []}, "dlock-tls": {"rounds": []}}
        main, self.main = self.main, srv
        est = None
        try:
            for r in range(self.rounds):
                order = ["dlock-tls", "raw-tls"]
                for c in order if r % 2 == 0 else order[::-1]:
                    progress.step(f"tls, round {r + 1}/{self.rounds}: {LABELS[c]}")
                    if c == "raw-tls":
                        extra = ["--tls", "--cacert", ca]
                        est = est or self.raw(1, 1, 2000, tls_port, extra)["calls_per_s"]
                        v = self.raw(1, 1, max(1000, int(est * self.seconds)), tls_port, extra)
                    else:
                        dist = os.path.join(self.dist_dir, f"tls.{c}.{r}")
                        argv = self.lock_argv("dlock", w, dist)
                        argv[argv.index("--url") + 1] = f"rediss://127.0.0.1:{tls_port}"
                        argv += ["--cacert", ca, "--stats-url", srv.url]
                        v = self.run(argv, self.timeout_for(w), f"tls/{c}")
                        v["dist"] = dist
                    res[c]["rounds"].append(v)
        finally:
            self.main = main
            srv.stop()
        for c, d in res.items():
            d["median"] = median_round(d["rounds"], "rate")
        self.results["tls"] = res

    # Sentinel timing of the failover rows, as in tests/harness/sentinel_group.c.
    DOWN_AFTER_MS = 1000
    FAILOVER_TIMEOUT_MS = 3000

    def sentinel_group(self, tag):
        """A master, one replica and 3 Sentinels (quorum 2) that agree on
        them. Returns (master, replica, sentinels)."""
        master = self.server(f"{tag}-master", ["--replica-serve-stale-data", "no"])
        rep = self.replica_of(master, f"{tag}-replica")
        conf = (f"sentinel monitor fo 127.0.0.1 {master.port} 2\n"
                f"sentinel down-after-milliseconds fo {self.DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout fo {self.FAILOVER_TIMEOUT_MS}\n")
        sents = [self.server(f"{tag}-sentinel{i}", ["--sentinel"], conf) for i in range(3)]
        deadline = time.monotonic() + 60
        while True:
            ok = True
            for s in sents:
                try:
                    raw = s.r.execute_command("SENTINEL", "MASTER", "fo")
                except redis.RedisError:
                    ok = False
                    break
                f = dict(zip(raw[::2], raw[1::2])) if isinstance(raw, list) else raw
                f = {(k.decode() if isinstance(k, bytes) else k): v for k, v in f.items()}
                if int(f.get("num-slaves", 0)) < 1 or int(f.get("num-other-sentinels", 0)) < 2:
                    ok = False
            if ok:
                return master, rep, sents
            if time.monotonic() > deadline:
                raise RuntimeError("the Sentinels did not learn the deployment in time")
            time.sleep(0.1)

    def failover_round(self, r):
        """SIGKILL of the master while a dlock client is connected through
        the Sentinels: the time until the client has a lock again, and until
        a Sentinel names the new master."""
        master, rep, sents = self.sentinel_group(f"fo{r}")
        url = "redis-sentinel://" + ",".join(f"127.0.0.1:{s.port}" for s in sents) + "/fo"
        t0 = time.monotonic()
        p = subprocess.Popen([self.bin["bench_failover"], "--url", url, "--wait", "30000"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, start_new_session=True)
        v = {"ok": False}
        try:
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError("bench_failover did not get ready")
            killed = time.monotonic_ns()
            os.kill(master.proc.pid, signal.SIGKILL)
            p.stdin.write(f"{killed}\n")
            p.stdin.flush()
            sentinel_ms = None
            while sentinel_ms is None and time.monotonic_ns() - killed < 60e9:
                for s in sents:
                    try:
                        addr = s.r.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", "fo")
                    except redis.RedisError:
                        continue
                    if addr and int(addr[1]) == rep.port:
                        sentinel_ms = (time.monotonic_ns() - killed) / 1e6
                        break
                time.sleep(0.005)
            out, err = p.communicate(timeout=90)
            v = parse_line(out)
            v["sentinel_ms"] = sentinel_ms
            v["ok"] = p.returncode == 0 and sentinel_ms is not None and "recovery_ms" in v
            if not v["ok"]:
                raise RuntimeError(f"exit status {p.returncode}, sentinel {sentinel_ms} ms; "
                                   f"{err.strip()[-600:]}")
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.communicate()
            self.failures.append(f"failover round {r + 1}: {e}")
            log(f"\nbench: FAILED failover round {r + 1}: {e}")
        finally:
            v["wall"] = time.monotonic() - t0
            for s in sents + [rep, master]:
                s.stop()
        return v

    def failover(self, progress):
        runs = []
        for r in range(self.rounds):
            progress.step(f"failover, round {r + 1}/{self.rounds}: SIGKILL of the master")
            runs.append(self.failover_round(r))
        self.results["failover"] = {"dlock": {"rounds": runs, "median": median_round(runs, "recovery_ms")}}

    # ---- Redis Cluster ------------------------------------------------------

    # As in tests/harness/redis_proc.c: a master is failed over 2 s after
    # its replica and the other masters stop hearing from it.
    CLUSTER_NODE_TIMEOUT_MS = 2000

    def cluster_nodes(self, tag):
        """3 masters with one replica each (redis-cli --cluster create),
        every slot served and every replica in step."""
        nodes = [self.server(f"{tag}{i}", ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                                           "--cluster-node-timeout", str(self.CLUSTER_NODE_TIMEOUT_MS),
                                           "--cluster-require-full-coverage", "no"]) for i in range(6)]
        try:
            subprocess.run(["redis-cli", "--cluster", "create"] + [f"127.0.0.1:{n.port}" for n in nodes] +
                           ["--cluster-replicas", "1", "--cluster-yes"],
                           check=True, capture_output=True, timeout=120)
            deadline = time.monotonic() + 60
            while not self.cluster_ready(nodes):
                if time.monotonic() > deadline:
                    raise RuntimeError("the cluster did not come up in time")
                time.sleep(0.1)
        except (RuntimeError, subprocess.SubprocessError):
            for n in nodes:
                n.stop()
            raise
        return nodes

    @staticmethod
    def cluster_ready(nodes):
        masters = 0
        for n in nodes:
            try:
                info = n.r.execute_command("CLUSTER", "INFO")
                if isinstance(info, bytes):
                    info = info.decode()
                if isinstance(info, str):
                    info = dict(x.split(":", 1) for x in info.split() if ":" in x)
                info = {k: str(v) for k, v in info.items()}
                if info.get("cluster_state") != "ok" or info.get("cluster_slots_assigned") != "16384" or \
                        info.get("cluster_known_nodes") != "6":
                    return False
                rep = n.r.info("replication")
                if rep["role"] == "master":
                    masters += 1
                    if rep.get("connected_slaves", 0) < 1 or rep.get("slave0", {}).get("state") != "online":
                        return False
                elif rep.get("master_link_status") != "up":
                    return False
            except redis.RedisError:
                return False
        return masters == 3

    def cluster(self, progress):
        """spread and solo on a 3+3 cluster beside the one server (and,
        for solo with replica sync on, beside a master with one replica:
        on the cluster every write waits for a replica, on the one server
        there is none to wait for)."""
        nodes = self.cluster_nodes("cl")
        view = ClusterView(nodes)
        master = self.server("cl-rs-master")
        rep = self.replica_of(master, "cl-rs-replica")
        main = self.main
        spread = {"name": "cluster-spread", "mode": "loop", "procs": 1, "threads": 16, "distinct": True}
        solo = {"name": "cluster-solo", "mode": "loop", "procs": 1, "threads": 1}
        plan = {"one-spread": (main, spread, False), "cluster-spread": (view, spread, True),
                "cluster-spread-sync": (view, spread, False), "one-solo": (main, solo, False),
                "cluster-solo": (view, solo, True), "cluster-solo-sync": (view, solo, False),
                "rs-solo": (master, solo, True), "rs-solo-sync": (master, solo, False)}
        res = {c: {"rounds": []} for c in CLUSTER_CONTENDERS}
        try:
            for r in range(self.rounds):
                k = r % len(CLUSTER_CONTENDERS)
                for c in CLUSTER_CONTENDERS[k:] + CLUSTER_CONTENDERS[:k]:
                    target, w, nosync = plan[c]
                    progress.step(f"cluster, round {r + 1}/{self.rounds}: {w['name']}, {LABELS[c]}")
                    dist = os.path.join(self.dist_dir, f"cluster.{c}.{r}")
                    self.main = target
                    argv = self.lock_argv("dlock", w, dist) + (["--no-sync"] if nosync else [])
                    if target is view:
                        # bench_lock's own connection (its counter and
                        # statistics) speaks plain Redis to one node; the
                        # driver sums the commands over the masters.
                        argv += ["--stats-url", view.owner("bench:counter").url]
                    v = self.run(argv, self.timeout_for(w), f"cluster/{c}")
                    v["dist"] = dist
                    res[c]["rounds"].append(v)
        finally:
            self.main = main
            for n in nodes + [rep, master]:
                n.stop()
        for d in res.values():
            d["median"] = median_round(d["rounds"], "rate")
        self.results["cluster"] = res

    def cluster_failover_round(self, r):
        """SIGKILL of the master holding a lock while a client on the
        redis-cluster:// URL waits to take another lock of the same slot:
        the time until it has it, and until the replica calls itself master."""
        nodes = self.cluster_nodes(f"clfo{r}-")
        url = ClusterView(nodes).url
        name = "{bench:failover}"  # one hash tag: the held lock and the next on one master
        t0 = time.monotonic()
        # Replica sync off: the shard that lost its master has no replica
        # left until the old master comes back, and with sync on dlock
        # refuses (DLOCK_ENOSYNC) every write there that no replica keeps.
        p = subprocess.Popen([self.bin["bench_failover"], "--url", url, "--wait", "30000", "--name", name,
                              "--no-sync"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, start_new_session=True)
        v = {"ok": False}
        try:
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError("bench_failover did not get ready")
            victim = None
            for n in nodes:
                try:
                    if n.r.exists(name + ":held"):
                        victim = n
                except redis.ResponseError:
                    pass  # MOVED: not this node's slot
            if victim is None:
                raise RuntimeError("no master holds the lock")
            rep = [n for n in nodes if n is not victim and
                   int(n.r.info("replication").get("master_port", 0)) == victim.port]
            if not rep:
                raise RuntimeError("the master holding the lock has no replica")
            rep = rep[0]
            killed = time.monotonic_ns()
            os.kill(victim.proc.pid, signal.SIGKILL)
            p.stdin.write(f"{killed}\n")
            p.stdin.flush()
            promoted_ms = None
            while promoted_ms is None and time.monotonic_ns() - killed < 60e9:
                try:
                    if rep.r.info("replication")["role"] == "master":
                        promoted_ms = (time.monotonic_ns() - killed) / 1e6
                except redis.RedisError:
                    pass
                time.sleep(0.005)
            out, err = p.communicate(timeout=90)
            v = parse_line(out)
            v["promoted_ms"] = promoted_ms
            v["ok"] = p.returncode == 0 and promoted_ms is not None and "recovery_ms" in v
            if not v["ok"]:
                raise RuntimeError(f"exit status {p.returncode}, promoted {promoted_ms} ms; "
                                   f"{err.strip()[-600:]}")
        except (RuntimeError, subprocess.TimeoutExpired, redis.RedisError) as e:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.communicate()
            self.failures.append(f"cluster-failover round {r + 1}: {e}")
            log(f"\nbench: FAILED cluster-failover round {r + 1}: {e}")
        finally:
            v["wall"] = time.monotonic() - t0
            for n in nodes:
                n.stop()
        return v

    def cluster_failover(self, progress):
        runs = []
        for r in range(self.rounds):
            progress.step(f"cluster-failover, round {r + 1}/{self.rounds}: SIGKILL of a master")
            runs.append(self.cluster_failover_round(r))
        self.results["cluster-failover"] = {"dlock": {"rounds": runs,
                                                      "median": median_round(runs, "recovery_ms")}}

    # ---- the whole run ------------------------------------------------------

    def main_run(self):
        self.main = self.server("main")
        self.load_before = open("/proc/loadavg").read().split()[:3]
        self.started = time.time()
        self.sha, self.sha_args, self.release_call = self.capture_calls()
        self.raw_rate = {}
        only = set(self.args.only.split(",")) if self.args.only else None
        ws = [w for w in self.workloads() if only is None or w["name"] in only]
        steps = sum(w.get("rounds", self.rounds) * (len(w["contenders"]) + len(w["raw"])) for w in ws)
        steps += self.rounds * sum(only is None or n in only
                                   for n in ("watchdog", "watchdog", "redlock", "failover", "cluster-failover"))
        steps += len(CLUSTER_CONTENDERS) * self.rounds * (only is None or "cluster" in only)
        steps += 2 * self.rounds * (only is None or "replsync" in only)
        steps += 2 * self.rounds * (only is None or "tls" in only)
        steps += len(self.swept(ws)) * len(SWEEP_MS)
        progress = Progress(steps)
        machine = machine_info()
        print(f"dlock benchmark: {machine['cpu']} x {machine['nproc']}, redis {machine['redis']}, "
              f"{'quick smoke test, ' if self.quick else ''}median of {self.rounds} round(s) of "
              f"{self.seconds:g} s; load average {' '.join(self.load_before)}", flush=True)
        print(f"raw limit: redis-benchmark EVALSHA {self.sha[:12]}... (dlock's acquire call), "
              "pairs/s = calls/s / 2", flush=True)
        if ws:
            self.tune(progress, ws)
        progress.clear()
        if self.sweep and any(self.sweep.values()):
            print("tuned retry delays (shortest keeping Redis under "
                  f"{OVERLOAD_CPU:.0%} CPU, contended workload): " +
                  ", ".join(f"{LABELS[b]} {self.tuned[b]} ms" for b in self.sweep if self.sweep[b]),
                  flush=True)
        print_header()
        for w in ws:
            res = self.run_workload(w, progress)
            progress.clear()
            for row in table_rows(w["name"], res, self.results):
                print_row(row)
        for name, fn in (("watchdog", self.watchdog), ("redlock", self.redlock), ("replsync", self.replsync),
                         ("tls", self.tls), ("failover", self.failover), ("cluster", self.cluster),
                         ("cluster-failover", self.cluster_failover)):
            if only is None or name in only:
                fn(progress)
                progress.clear()
                for row in table_rows(name, self.results[name], self.results):
                    print_row(row)
        self.load_after = open("/proc/loadavg").read().split()[:3]
        self.machine = machine
        self.finish()

    def finish(self):
        targets = evaluate_targets(self.results)
        missing = [f"{w}/{c}" for w, res in self.results.items() for c, d in res.items()
                   if not d["median"].get("ok")]
        doc = {
            "dlock": git_describe(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(self.started)),
            "command": "make bench-quick" if self.quick else "make bench",
            "machine": self.machine,
            "load_before": self.load_before, "load_after": self.load_after,
            "config": {"seconds": self.seconds, "rounds": self.rounds, "quick": self.quick,
                       "overload_cpu": OVERLOAD_CPU, "sweep_ms": SWEEP_MS},
            "raw_call": {"sha": self.sha, "args": self.sha_args},
            "tuned_ms": self.tuned, "sweep": self.sweep,
            "results": self.results, "targets": targets, "failures": self.failures,
        }
        print()
        for t in targets:
            print(f"target: {t['text']}: {verdict(t)} ({t['detail']})")
        print(f"load average before / after: {' '.join(self.load_before)} / {' '.join(self.load_after)}")
        stem = "quick" if self.quick else "latest"
        with open(os.path.join(self.out, f"{stem}.json"), "w") as f:
            json.dump(doc, f, indent=1, default=str)
        plots = make_plots(doc, self.out)
        with open(os.path.join(self.out, "report.md"), "w") as f:
            f.write(report_markdown(doc, plots))
        print(f"wrote {os.path.relpath(self.out, os.getcwd())}/{{{stem}.json,report.md,"
              f"{','.join(os.path.basename(p) for p in plots)}}}")
        if missing:
            self.failures.append("no successful round: " + ", ".join(missing))
        if self.failures:
            print("bench: FAILED:\n  " + "\n  ".join(self.failures), file=sys.stderr)
            return 1
        return 0


# ---- medians, rows, targets ---------------------------------------------------

def key_for(workload):
    """The figure that ranks a contender's rounds."""
    return {"handoff": "p50", "herd": "seconds"}.get(workload, "rate")


def median_round(rounds, key):
    """The round with the median 'key' among the successful ones (the whole
    round, so its figures stay consistent with each other)."""
    ok = [r for r in rounds if r.get("ok") and isinstance(r.get(key), float)]
    if not ok:
        return rounds[0] if rounds else {"ok": False}
    ok.sort(key=lambda r: r[key])
    return ok[(len(ok) - 1) // 2]


def per(a, b):
    return a / b if isinstance(a, float) and isinstance(b, float) and b > 0 else None


def fmt(v, digits=None):
    """A number for the table: thousands spaced, small ones to 0.1."""
    if v is None or v == "":
        return "-"
    if isinstance(v, str):
        return v
    if digits is not None:
        return f"{v:.{digits}f}"
    if abs(v) >= 100 or float(v).is_integer():
        return f"{v:,.0f}".replace(",", " ")
    return f"{v:.1f}"


def us(v):
    """A latency in us, shown in the unit that reads best."""
    if v is None:
        return "-"
    if v >= 10000:
        return f"{v / 1000:.0f} ms"
    if v >= 1000:
        return f"{v / 1000:.1f} ms"
    return f"{v:.0f} us"


COLUMNS = [("workload", 13), ("contender", 37), ("throughput", 15), ("p50", 9), ("p99", 9),
           ("cmds/op", 8), ("fairness", 9), ("Redis CPU", 9), ("note", 0)]


def print_header():
    line = "  ".join(f"{n:<{w}}" if w else n for n, w in COLUMNS)
    print(line)
    print("-" * len(line), flush=True)


def print_row(row):
    print("  ".join(f"{str(v):<{w}}" if w else str(v) for v, (_, w) in zip(row, COLUMNS)).rstrip(),
          flush=True)


def table_rows(workload, res, results):
    """The table rows of one workload: the median round of each contender."""
    rows = []
    order = [c for c in ["raw", "raw-pipelined", "raw-pairs", "raw-loop", "dlock-interleaved"] + DLOCKS + ["dlock-async"] + PEERS_ALL
             + JAVA_LOCKS + GO_LOCKS + SEM_DLOCKS + SEM_PEERS_ALL + SEM_JAVA + ["dlock-sync", "dlock-nosync", "raw-tls", "dlock-tls"] + CLUSTER_CONTENDERS
             if c in res]
    for c in order:
        m = res[c]["median"]
        label = LABELS[c]
        cpu = f"{m['redis_cpu'] * 100:.0f}%" if isinstance(m.get("redis_cpu"), float) \
            and workload not in ("watchdog", "redlock") else "-"
        if not m.get("ok"):
            rows.append([workload, label, "FAILED", "-", "-", "-", "-", cpu, ""])
            continue
        if c == "dlock-interleaved":
            rows.append([workload, "raw, hiredis, turn about", f"{fmt(m['raw_rate'])}/s", us(m["raw_p50"]),
                         us(m["raw_p99"]), "2", "-", "-", "the same call twice from one thread, "
                         "alternating with dlock's pairs below"])
            rows.append([workload, label, f"{fmt(m['rate'])}/s", us(m["p50"]), us(m["p99"]), "2", "-",
                         cpu, f"{m['rate'] / m['raw_rate']:.2f} x raw above"])
        elif workload == "tls" and c == "raw-tls":
            rows.append([workload, label, f"{fmt(m['rate'])}/s", us(m["pair_p50"]), us(m["pair_p99"]),
                         "2", "-", cpu, f"{fmt(m['calls_per_s'])} calls/s, c=1 P=1; latency = 2 calls"])
        elif workload == "tls":
            raw = res.get("raw-tls", {}).get("median", {})
            note = f"{m['rate'] / raw['rate']:.2f} x raw over TLS" if raw.get("ok") and raw.get("rate") else ""
            rows.append([workload, label, f"{fmt(m['rate'])}/s", us(m.get("pair_p50")), us(m.get("pair_p99")),
                         fmt(per(m.get("cmds"), m.get("acq")), 1), "-", cpu, note])
        elif c == "raw-pairs":
            rows.append([workload, label, f"{fmt(m['rate'])}/s", us(m["pair_p50"]), us(m["pair_p99"]),
                         "2", "-", cpu, f"dlock's acquire and release calls, {int(m.get('threads', 0))} "
                         "thread(s), a connection each; no library"])
        elif c == "raw-loop":
            rows.append([workload, label, f"{fmt(m['rate'])}/s", us(m["pair_p50"]), us(m["pair_p99"]),
                         "2", "-", cpu, "dlock's acquire and release calls, 16 pairs in flight on one "
                         "connection from one thread; no library: the floor of an event-loop client"])
        elif workload in ("solo", "spread") and c.startswith("raw"):
            rows.append([workload, label, f"{fmt(m['rate'])}/s", us(m["pair_p50"]), us(m["pair_p99"]),
                         "2", "-", cpu, f"{fmt(m['calls_per_s'])} calls/s, c={m['clients']} "
                         f"P={m['pipeline']}; latency = 2 calls"])
        elif workload in SEM_WORKLOADS:
            contended = workload == "sem-contended"
            p50, p99 = (m.get("wait_p50"), m.get("wait_p99")) if contended else \
                (m.get("pair_p50"), m.get("pair_p99"))
            note = f"{fmt(m.get('permits'))} permits"
            if contended:
                note = f"at most {fmt(m.get('max_holders'))} of {fmt(m.get('permits'))} held at once, " \
                       f"permits {m.get('counter')}; wait shown"
            fair = f"{fmt(m.get('min'))}/{fmt(m.get('max'))}" if contended else "-"
            rows.append([workload, label, f"{fmt(m['rate'])}/s", us(p50), us(p99),
                         fmt(per(m.get("cmds"), m.get("acq")), 1), fair, cpu, note])
        elif workload in ("solo", "spread", "contended"):
            note = ""
            raw = res.get("raw", {}).get("median", {})
            pairs = res.get("raw-pairs", {}).get("median", {})
            if c == "dlock" and raw.get("ok") and raw.get("rate"):
                note = f"{m['rate'] / raw['rate']:.2f} x raw"
            if c == "dlock" and pairs.get("ok") and pairs.get("rate"):
                note += f", {m['rate'] / pairs['rate']:.2f} x raw pairs"
            if workload == "contended":
                note = f"counter {m.get('counter')}; wait shown"
            p50, p99 = (m.get("wait_p50"), m.get("wait_p99")) if workload == "contended" else \
                (m.get("pair_p50"), m.get("pair_p99"))
            fair = f"{fmt(m.get('min'))}/{fmt(m.get('max'))}" if workload == "contended" else "-"
            rows.append([workload, label, f"{fmt(m['rate'])}/s", us(p50), us(p99),
                         fmt(per(m.get("cmds"), m.get("acq")), 1), fair, cpu, note])
        elif workload == "handoff":
            ping = results["handoff"].get("dlock", {}).get("median", {}).get("ping_p50")
            note = f"{m['p50'] / ping:.1f} round trips (PING p50 {ping:.0f} us)" if ping else ""
            if c == "dlock" and m.get("bare_p50") and ping:
                rows.append([workload, "bare PUBLISH, then SET NX", "-", us(m["bare_p50"]), us(m["bare_p99"]),
                             "-", "-", "-", f"{m['bare_p50'] / ping:.1f} round trips: hiredis, no library, "
                             "the floor (same run as dlock's)"])
            rows.append([workload, label, f"{fmt(m['handoffs'])} hand-offs", us(m["p50"]), us(m["p99"]),
                         "-", "-", cpu, note])
        elif workload == "herd":
            rows.append([workload, label, f"{fmt(m['acq'])} in {m['seconds']:.2f} s", us(m["wait_p50"]),
                         us(m["wait_p99"]), fmt(per(m.get("cmds"), m.get("acq")), 1), "-", cpu,
                         f"{fmt(m['rate'])} served/s; counter {m.get('counter')}; wait shown"])
        elif workload == "watchdog" and c == "redisson":
            rows.append([workload, label, f"{fmt(m['locks'])} locks", f"{m['round_p50']:.1f} ms",
                         f"{m['round_max']:.1f} ms", fmt(m["cmds"]), "-", cpu,
                         f"per renewal round, over {fmt(m['rounds'])} round(s) of its own timer (watchdog "
                         f"timeout 30 s, its default); the round's length is the spread of the locks' TTLs read at one "
                         f"instant (smallest / largest of {fmt(m['rounds'])} readings); "
                         f"{fmt(m['cmds_all'])} commands with the scripts' own"])
        elif workload == "watchdog":
            rows.append([workload, label, f"{fmt(m['locks'])} locks", f"{m['round_p50']:.1f} ms",
                         f"{m['round_max']:.1f} ms", fmt(m["cmds"]), "-", cpu,
                         f"per renewal round (p50 / max of {fmt(m['rounds'])}); "
                         f"{fmt(m['cmds_all'])} commands with the scripts' own"])
        elif workload == "replsync":
            off = res.get("dlock-nosync", {}).get("median", {})
            note = "WAIT 1 in the same round trip as each write" if c == "dlock-sync" else "no WAIT"
            if c == "dlock-sync" and off.get("ok") and off.get("pair_p50"):
                note += f"; p50 {m['pair_p50'] / off['pair_p50']:.2f} x sync off"
            rows.append([workload, label, f"{fmt(m['rate'])}/s", us(m.get("pair_p50")), us(m.get("pair_p99")),
                         fmt(per(m.get("cmds"), m.get("acq")), 1), "-", cpu, note])
        elif workload == "cluster":
            kind = "spread" if "spread" in c else "solo"
            one = res.get(f"one-{kind}", {}).get("median", {})
            note = "3 masters + 3 replicas" if c.startswith("cluster") else \
                "1 master, 1 replica" if c.startswith("rs-") else "no replica"
            key = "rate" if kind == "spread" else "pair_p50"
            if c.startswith("cluster") and one.get("ok") and one.get(key):
                note += f"; {m[key] / one[key]:.2f} x 1 server" + (" (p50)" if kind == "solo" else "")
            rs = res.get("rs-solo-sync" if c == "cluster-solo-sync" else "rs-solo", {}).get("median", {})
            if c in ("cluster-solo", "cluster-solo-sync") and rs.get("ok") and rs.get("pair_p50"):
                note += f", {m['pair_p50'] / rs['pair_p50']:.2f} x 1 master + 1 replica"
            rows.append([f"cluster {kind}", label, f"{fmt(m['rate'])}/s", us(m.get("pair_p50")),
                         us(m.get("pair_p99")), "-", "-", cpu, note])
        elif workload == "cluster-failover":
            rs = [x for x in results["cluster-failover"]["dlock"]["rounds"] if x.get("ok")]
            kept = sum(int(x.get("held_kept", 0)) for x in rs)
            rows.append([workload, "the replica calls itself master", "-", f"{m['promoted_ms']:.0f} ms", "-",
                         "-", "-", "-", "from SIGKILL of a master to its replica's INFO role saying master "
                         "(cluster-node-timeout 2000 ms)"])
            rows.append([workload, "dlock, redis-cluster://, sync off", "-", f"{m['recovery_ms']:.0f} ms", "-",
                         "-", "-", "-", f"from SIGKILL to the first acquisition on that master's slot (a "
                         f"trylock with a 30 s wait started at the kill); "
                         f"{m['recovery_ms'] - m['promoted_ms']:+.0f} ms after the promotion; a watchdog lock "
                         f"of that slot held across kept in {kept}/{len(rs)} round(s); median of {len(rs)}: "
                         + ", ".join(f"{x['recovery_ms']:.0f}" for x in rs) + " ms"])
        elif workload == "failover":
            rs = [x for x in results["failover"]["dlock"]["rounds"] if x.get("ok")]
            kept = sum(int(x.get("held_kept", 0)) for x in rs)
            rows.append([workload, "Sentinels name the new master", "-", f"{m['sentinel_ms']:.0f} ms", "-",
                         "-", "-", "-", "from SIGKILL of the master to GET-MASTER-ADDR-BY-NAME naming the "
                         "replica (down-after 1000 ms, failover-timeout 3000 ms)"])
            rows.append([workload, "dlock, redis-sentinel://, sync on", "-", f"{m['recovery_ms']:.0f} ms", "-",
                         "-", "-", "-", f"from SIGKILL to the first acquisition (a trylock with a 30 s wait "
                         f"started at the kill); {m['recovery_ms'] - m['sentinel_ms']:+.0f} ms after the "
                         f"Sentinels; a watchdog lock held across kept in {kept}/{len(rs)} round(s); "
                         f"median of {len(rs)}: " + ", ".join(f"{x['recovery_ms']:.0f}" for x in rs) + " ms"])
        elif workload == "redlock":
            rows.append([workload, "dlock, 1 server", "-", us(m["single_p50"]), us(m["single_p99"]),
                         "-", "-", "-", "lock+unlock"])
            rows.append([workload, "dlock RedLock, 5 servers", "-", us(m["red_p50"]), us(m["red_p99"]),
                         "-", "-", "-", f"{m['red_p50'] / m['single_p50']:.2f} x 1 server"])
            if m.get("red_paused_p50"):
                rows.append([workload, "dlock RedLock, 5 servers, 1 paused", "-", us(m["red_paused_p50"]),
                             us(m["red_paused_p99"]), "-", "-", "-",
                             f"{m['red_paused_p50'] / m['red_p50']:.2f} x all healthy; the first "
                             f"acquisition, which finds the paused one out, {m['red_paused_first_ms']:.0f} ms"])
            if m.get("bare_p50"):
                rows.append([workload, "bare SET NX/DEL, 1 server", "-", us(m["bare1_p50"]),
                             us(m["bare1_p99"]), "-", "-", "-", "hiredis, no library: the floor"])
                rows.append([workload, "bare SET NX/DEL, 5 servers", "-", us(m["bare_p50"]),
                             us(m["bare_p99"]), "-", "-", "-",
                             f"{m['bare_p50'] / m['bare1_p50']:.2f} x 1 server: this machine's floor"])
    return rows


def evaluate_targets(results):
    """The issue's targets, from the median rounds of this run."""
    def m(w, c):
        return results.get(w, {}).get(c, {}).get("median", {})

    out = []

    def target(text, value, limit, higher, detail):
        met = None if value is None else (value >= limit if higher else value <= limit)
        if value is None:
            detail = "not measured in this run"
        elif not met:
            miss = (limit - value) / limit if higher else (value - limit) / limit
            detail += f"; short by {miss:.0%}" if higher else f"; over by {miss:.0%}"
        out.append({"text": text, "value": value, "limit": limit, "met": met, "detail": detail})

    def per_round(wl, c, num, den):
        """The median over the rounds of num/den, both from the same run."""
        rs = [per(r.get(num), r.get(den)) for r in results.get(wl, {}).get(c, {}).get("rounds", [])
              if r.get("ok")]
        rs = sorted(x for x in rs if x is not None)
        return (rs[(len(rs) - 1) // 2] if rs else None), rs

    def ratio_target(text, wl, a, bs, limit, unit, extra=""):
        """a's rate over the best of bs: the median of the ratios of each
        round (whose runs were close in time), beside the medians' ratio."""
        rs = round_ratios(results, wl, a, bs)
        v = sorted(rs)[(len(rs) - 1) // 2] if rs else None
        ma = m(wl, a)
        bc, mb = max(((b, m(wl, b)) for b in bs if m(wl, b).get("ok")),
                      key=lambda x: x[1].get("rate", 0), default=("-", {}))
        target(text, v, limit, True,
               f"{fmt(v, 2)}, the median of the rounds' ratios ({', '.join(f'{x:.2f}' for x in rs)}); "
               f"medians {fmt(ma.get('rate'))} / {fmt(mb.get('rate'))} {unit}"
               + (f" ({LABELS.get(bc, bc)})" if len(bs) > 1 else "") + extra)

    redlocks = [c for c in PEERS_ALL if c.startswith(("redlock", "sesame"))]
    ratio_target("solo >= 0.95 x raw two-round-trip limit (redis-benchmark)", "solo", "dlock", ["raw"], 0.95,
                 "pairs/s")
    ratio_target("solo >= 1.1 x node-redlock", "solo", "dlock", redlocks, 1.1, "pairs/s")
    ratio_target("solo over TLS >= 0.9 x raw two-round-trip limit (redis-benchmark --tls)", "tls",
                 "dlock-tls", ["raw-tls"], 0.9, "pairs/s")
    # The same limit measured head to head: one thread taking turns, so that
    # the machine's ups and downs fall on both sides alike.
    v, rs = per_round("solo", "dlock-interleaved", "rate", "raw_rate")
    it = m("solo", "dlock-interleaved")
    target("solo >= 0.95 x raw two-round-trip limit (turn about in one thread)", v, 0.95, True,
           f"{fmt(v, 2)}, the median of the rounds' ratios ({', '.join(f'{x:.2f}' for x in rs)}); "
           f"median round {fmt(it.get('rate'))} / {fmt(it.get('raw_rate'))} pairs/s")
    # The same two calls the library makes, from bare hiredis with a thread
    # and a connection per worker: the floor of a blocking client, which
    # redis-benchmark's event loop running one call over and over is not.
    ratio_target("solo >= 0.95 x raw pairs (bare hiredis, dlock's two calls)", "solo", "dlock", ["raw-pairs"],
                 0.95, "pairs/s")
    ratio_target("spread >= 1.0 x raw at 16 clients, not pipelined", "spread", "dlock", ["raw"], 1.0, "pairs/s")
    ratio_target("spread >= 1.0 x raw pairs (16 bare hiredis threads, dlock's two calls)", "spread", "dlock",
                 ["raw-pairs"], 1.0, "pairs/s")
    # Beside it, where the floor of the two models lies: dlock's own calls
    # made by bare hiredis from 16 threads (blocking, as dlock's API is), and
    # from one event loop (as node's peers run).
    best = max((m("spread", c).get("rate") or 0 for c in redlocks if m("spread", c).get("ok")), default=0)
    floors = [(lbl, m("spread", c).get("rate")) for c, lbl in (("raw-pairs", "16 bare hiredis threads"),
                                                                ("raw-loop", "one event loop"))]
    floors = "; ".join(f"{lbl} making dlock's calls: {r / best:.2f} x (medians)" for lbl, r in floors
                       if r and best)
    ratio_target("spread >= 1.5 x node-redlock", "spread", "dlock", redlocks, 1.5, "pairs/s",
                 f"; {floors}" if floors else "")
    ratio_target("spread, event-loop API >= 1.5 x node-redlock", "spread", "dlock-async", redlocks, 1.5,
                 "pairs/s", f"; {floors}" if floors else "")
    ratio_target("spread, event-loop API >= 1.0 x raw pairs, one event loop", "spread", "dlock-async",
                 ["raw-loop"], 1.0, "pairs/s")
    ratio_target("contended, event-loop API >= 1.0 x dlock's threads", "contended", "dlock-async", ["dlock"],
                 1.0, "acquisitions/s")
    ratio_target("herd, event-loop API >= 1.0 x dlock's threads", "herd", "dlock-async", ["dlock"],
                 1.0, "served/s")
    ratio_target("contended >= 1.0 x best peer", "contended", "dlock", PEERS_ALL, 1.0, "acquisitions/s")
    ratio_target("contended, fair lock >= 1.0 x best peer", "contended", "dlock-fair", PEERS_ALL, 1.0,
                 "acquisitions/s")
    # Against Redisson, the system dlock reimplements, with its defaults in
    # the same run: throughput, latency and commands per acquisition.
    for wl, a, b, unit in (("solo", "dlock", "redisson", "pairs/s"), ("spread", "dlock", "redisson", "pairs/s"),
                           ("contended", "dlock", "redisson", "acquisitions/s"),
                           ("contended", "dlock-fair", "redisson-fair", "acquisitions/s"),
                           ("sem-contended", "dlock-sem", "redisson-sem", "acquisitions/s")):
        ratio_target(f"{wl}, {LABELS[a]} >= 1.0 x {LABELS[b]}", wl, a, [b], 1.0, unit)
    for wl, a, b, key in (("solo", "dlock", "redisson", "pair_p50"), ("spread", "dlock", "redisson", "pair_p50"),
                          ("contended", "dlock", "redisson", "wait_p50"),
                          ("contended", "dlock-fair", "redisson-fair", "wait_p50"),
                          ("handoff", "dlock", "redisson", "p50"),
                          ("handoff", "dlock-fair", "redisson-fair", "p50"),
                          ("herd", "dlock", "redisson", "seconds"),
                          ("herd", "dlock-fair", "redisson-fair", "seconds"),
                          ("sem-contended", "dlock-sem", "redisson-sem", "wait_p50")):
        x, y = m(wl, a).get(key), m(wl, b).get(key)
        target(f"{wl}, {LABELS[a]}: {key} <= {LABELS[b]}'s", per(x, y), 1.0, False,
               f"{fmt(per(x, y), 2)} = {fmt(x)} / {fmt(y)} ({'s' if key == 'seconds' else 'us'}, median rounds)")
    for wl, a, b in (("solo", "dlock", "redisson"), ("spread", "dlock", "redisson"),
                     ("contended", "dlock", "redisson"), ("contended", "dlock-fair", "redisson-fair"),
                     ("sem-contended", "dlock-sem", "redisson-sem")):
        x, y = per(m(wl, a).get("cmds"), m(wl, a).get("acq")), per(m(wl, b).get("cmds"), m(wl, b).get("acq"))
        target(f"{wl}, {LABELS[a]}: commands per acquisition <= {LABELS[b]}'s", per(x, y), 1.0, False,
               f"{fmt(x, 2)} / {fmt(y, 2)} sent per acquisition")
    x = m("herd", "dlock-fair").get("seconds")
    target("herd, fair lock: every waiter served in <= 0.5 s", x, 0.5, False, f"{fmt(x, 2)} s")
    # CPU per lock+unlock pair, the server's and the clients', against the
    # cheapest node-redlock-like peer in the same workload.
    for wl in ("solo", "spread"):
        for side, key in (("server", "cpu_sec"), ("client", "client_cpu_sec")):
            v = per(m(wl, "dlock").get(key), m(wl, "dlock").get("acq"))
            peers = [(c, per(m(wl, c).get(key), m(wl, c).get("acq"))) for c in redlocks if m(wl, c).get("ok")]
            peers = [(c, x) for c, x in peers if x]
            bc, bv = min(peers, key=lambda p: p[1], default=("-", None))
            target(f"{wl}: {side} CPU per pair <= node-redlock's", None if bv is None else v / bv if v else None,
                   1.0, False, f"{us_or_dash(v)} / {us_or_dash(bv)} per pair ({LABELS.get(bc, bc)})")
    for c, lbl in (("dlock", "dlock"), ("dlock-fair", "dlock fair lock")):
        x = m("contended", c)
        v = per(x.get("cmds"), x.get("acq"))
        target(f"contended, {lbl}: <= 5 commands per acquisition", v, 5.0, False,
               f"{fmt(v, 2)} sent per acquisition (GET and SET included); "
               f"{fmt(per(x.get('cmds_all'), x.get('acq')), 1)} with the scripts' own")
    for c, lim in (("dlock", 0.5), ("dlock-fair", 0.9)):
        x = m("contended", c)
        v = per(x.get("min"), x.get("max"))
        target(f"contended, {LABELS[c]}: fewest/most acquisitions >= {lim}", v, lim, True,
               f"{fmt(v, 2)} = {fmt(x.get('min'))} / {fmt(x.get('max'))}")
    for c in ("dlock", "dlock-fair"):
        h = m("handoff", c)
        v, rs = per_round("handoff", c, "p50", "ping_p50")
        floor, _ = per_round("handoff", c, "bare_p50", "ping_p50")
        target("hand-off p50 <= 3 round trips" + (", fair lock" if c == "dlock-fair" else ""), v, 3.0,
               False, f"{fmt(v, 2)}, the median of the rounds' hand-off p50 / PING p50 "
               f"({', '.join(f'{x:.1f}' for x in rs)}); median round {fmt(h.get('p50'))} us / "
               f"PING {fmt(h.get('ping_p50'))} us; bare PUBLISH then SET NX on plain connections, "
               f"the same way: {fmt(floor, 2)} round trips")
    wd = m("watchdog", "dlock")
    locks = fmt(wd.get("locks"))
    target(f"renewal of {locks} locks <= 100 ms per round", wd.get("round_p50"), 100.0, False,
           f"{fmt(wd.get('round_p50'), 1)} ms (p50; max {fmt(wd.get('round_max'), 1)} ms)")
    target(f"renewal of {locks} locks <= 100 commands per round", wd.get("cmds"), 100.0, False,
           f"{fmt(wd.get('cmds'))} sent per round")
    jwd = m("watchdog", "redisson")
    x, y = per(wd.get("cmds"), wd.get("locks")), per(jwd.get("cmds"), jwd.get("locks"))
    target("renewal: commands per lock and round <= Redisson's", per(x, y), 1.0, False,
           f"{fmt(x, 4)} ({locks} locks) / {fmt(y, 4)} ({fmt(jwd.get('locks'))} locks) sent per lock and round")
    rl = m("redlock", "dlock")
    v, rs = per_round("redlock", "dlock", "red_p50", "single_p50")
    floor, _ = per_round("redlock", "dlock", "bare_p50", "bare1_p50")
    target("RedLock 5 servers <= 1.5 x 1 server", v, 1.5, False,
           f"{fmt(v, 2)}, the median of the rounds' p50 ratios ({', '.join(f'{x:.2f}' for x in rs)}); "
           f"median round {fmt(rl.get('red_p50'))} / {fmt(rl.get('single_p50'))} us; "
           f"bare SET NX/DEL on plain connections, the same way: {fmt(floor, 2)} x on this machine")
    v, rs = per_round("redlock", "dlock", "red_paused_p50", "red_p50")
    target("RedLock 5 servers, 1 paused <= 1.5 x all healthy", v, 1.5, False,
           f"{fmt(v, 2)}, the median of the rounds' p50 ratios ({', '.join(f'{x:.2f}' for x in rs)}); "
           f"median round {fmt(rl.get('red_paused_p50'))} / {fmt(rl.get('red_p50'))} us; the first "
           f"acquisition {fmt(rl.get('red_paused_first_ms'))} ms")
    if "cluster" in results:
        a, b = m("cluster", "cluster-solo"), m("cluster", "one-solo")
        v = per(a.get("pair_p50"), b.get("pair_p50"))
        target("cluster solo p50 <= 1.1 x 1 server (replica sync off)", v, 1.1, False,
               f"{fmt(v, 2)}: median rounds {fmt(a.get('pair_p50'))} / {fmt(b.get('pair_p50'))} us")
        b = m("cluster", "rs-solo")
        v = per(a.get("pair_p50"), b.get("pair_p50"))
        target("cluster solo p50 <= 1.1 x 1 master + 1 replica (replica sync off on both)", v, 1.1, False,
               f"{fmt(v, 2)}: median rounds {fmt(a.get('pair_p50'))} / {fmt(b.get('pair_p50'))} us")
    return out


def us_or_dash(sec):
    return "-" if sec is None else f"{sec * 1e6:.1f} us"


def client_cpu():
    """CPU seconds of this driver's reaped children (and theirs)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def redis_time(m):
    """CPU time per acquisition: the server's, its scripts', the client's."""
    if not m.get("acq") or m.get("cpu_sec") is None:
        return ""
    return (f" server {m['cpu_sec'] * 1e6 / m['acq']:.1f} us (scripts {m.get('script_usec', 0) / m['acq']:.1f}"
            f" us), clients {m.get('client_cpu_sec', 0) * 1e6 / m['acq']:.1f} us")


def round_ratios(results, wl, a, bs):
    """For each round, a's rate over the best rate among bs in that round."""
    res = results.get(wl, {})
    out = []
    for r, va in enumerate(res.get(a, {}).get("rounds", [])):
        best = max((res[b]["rounds"][r].get("rate", 0) for b in bs
                    if b in res and r < len(res[b]["rounds"]) and res[b]["rounds"][r].get("ok")),
                   default=0)
        if va.get("ok") and va.get("rate") and best:
            out.append(va["rate"] / best)
    return out


def verdict(t, md=False):
    if t["met"] is None:
        return "n/a"
    return "met" if t["met"] else ("**missed**" if md else "MISSED")


# ---- machine, report, plots ---------------------------------------------------

def machine_info():
    cpu = "?"
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    ver = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout
    node = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
    lockfile = json.load(open(os.path.join(PEERS, "package-lock.json")))["packages"]
    return {"nproc": os.cpu_count(), "cpu": cpu,
            "redis": (re.search(r"v=(\S+)", ver) or re.search(r"(\S+)", "?")).group(1),
            "kernel": platform.release(), "node": node, "python": platform.python_version(),
            "redis_py": redis.__version__,
            "ioredis": lockfile["node_modules/ioredis"]["version"],
            "redlock4": lockfile["node_modules/redlock4"]["version"],
            "redlock5": lockfile["node_modules/redlock5"]["version"],
            "sesame": lockfile["node_modules/@sesamecare-oss/redlock"]["version"],
            "redis_semaphore": lockfile["node_modules/redis-semaphore"]["version"],
            "java": (subprocess.run(["java", "-version"], capture_output=True, text=True).stderr
                     .splitlines() or ["?"])[0],
            "redisson": re.search(r"<redisson.version>([^<]+)<", open(os.path.join(REDISSON_DIR, "pom.xml"))
                                  .read()).group(1),
            "redsync": re.search(r"go-redsync/redsync/v4 (\S+)", open(os.path.join(PEERS, "redsync", "go.mod"))
                                 .read()).group(1),
            "go": subprocess.run(["go", "version"], capture_output=True, text=True).stdout.strip()}


def git_describe():
    p = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True, text=True)
    return p.stdout.strip() or "?"


def report_markdown(doc, plots):
    mc = doc["machine"]
    res = doc["results"]
    out = io.StringIO()
    w = out.write
    w("# dlock benchmark report\n\n")
    w(f"dlock {doc['dlock']}, {doc['date']}. Machine: {mc['nproc']} x {mc['cpu']}, Linux {mc['kernel']}, "
      f"redis-server {mc['redis']} (TCP loopback, persistence off), node {mc['node']} "
      f"(ioredis {mc['ioredis']}), Python {mc['python']} (redis-py {mc['redis_py']}), "
      f"{mc.get('java', '?')} (Redisson {mc.get('redisson', '?')}), "
      f"{mc.get('go', '?')} (go-redsync {mc.get('redsync', '?')}). "
      f"Load average before / after: {' '.join(doc['load_before'])} / {' '.join(doc['load_after'])}.\n\n")
    cfg = doc["config"]
    w(f"Median of {cfg['rounds']} round(s) of {cfg['seconds']:g} s per contender and workload"
      f"{' (quick smoke test: short runs, fewer waiters, no tuning sweep)' if cfg['quick'] else ''}. "
      f"Reproduce with `{doc['command']}`.\n\n")
    w("## Results\n\n")
    w("| " + " | ".join(n for n, _ in COLUMNS) + " |\n")
    w("|" + "---|" * len(COLUMNS) + "\n")
    for wl in ["solo", "spread", "contended", "handoff", "herd", "watchdog", "redlock"] + list(SEM_WORKLOADS) + \
            ["replsync", "failover", "cluster", "cluster-failover"]:
        if wl in res:
            for row in table_rows(wl, res[wl], res):
                w("| " + " | ".join(str(v) for v in row) + " |\n")
    w("\n## Targets\n\n| target | result | detail |\n|---|---|---|\n")
    for t in doc["targets"]:
        w(f"| {t['text']} | {verdict(t, md=True)} | {t['detail']} |\n")
    w("\n## Plots\n\n")
    for p in plots:
        w(f"![{os.path.basename(p)}]({os.path.basename(p)})\n\n")
    w("## What was measured\n\n")
    w("""* **solo**: 1 thread, lock+unlock pairs on one name. **spread**: 16 threads of one
  process, each its own name. **contended**: 16 workers (4 processes x 4 threads) on one
  name, each hold a GET then a SET of a counter; the counter must end equal to the
  acquisitions. Latency: lock+unlock for solo and spread, the wait for the lock for
  contended and herd. **hand-off**: two processes pass a lock back and forth; the
  holder keeps it 5-15 ms (random) after telling the other to wait, and the time from
  its unlock call to the waiter's lock call returning is one hand-off; PING round trips
  are timed in the same processes meanwhile. **herd**: workers in 10 processes all
  wait for a lock the driver holds, then take it once each (GET+SET inside); time from
  the release to the last one done. **watchdog**: one client holds the locks; a
  renewal round is timed (the library's own round function, called directly).
  **RedLock**: lock+unlock over 5 servers and over 1, alternately, one thread.
* A thread in node is an async worker; the workers of a process share one client, as
  the threads of a C process share one dlock client. So are the workers of dlock's
  event-loop rows: operations in flight on one async client, one loop thread per process.
* **cmds/op**: commands the clients sent per acquisition (per renewal round for the
  watchdog), from INFO commandstats deltas: the commands no script can run (EVAL*,
  SUBSCRIBE*, PING, ...) plus the GET and SET of each hold and, for redis-py, its SET NX
  attempts (counted in the client, since a script may also run SET). The commands run
  inside the scripts are in latest.json as `cmds_all`.
* **raw limit**: redis-benchmark calling the very EVALSHA of dlock's acquire script
  (captured on MONITOR) at the workload's concurrency; a pair is two calls, so the raw
  pair rate is half the call rate.
* **fairness**: acquisitions of the least / most served worker.
* **Redis CPU**: the server's CPU time over the run's measured window.
* **tuned**: the peer's shortest retry delay that kept Redis under
  %d%% CPU on the contended workload (16 pollers), sweeping %s ms;
  node-redlock with jitter half the delay and unlimited retries. Defaults:
  node-redlock 10 retries 200 +- 100 ms apart (the worker asks again when they run
  out), redis-py polling every 0.1 s. Every peer lock has a 10 s lease; dlock's are
  held by its watchdog (30 s).
* **sem-solo**, **sem-threads**, **sem-contended**: one permit per acquisition, acquire
  then release, on one semaphore: 1 thread with 4 permits; 16 threads of one process with
  16 permits (nobody waits); 16 workers (4 processes x 4 threads) on 4 permits, each hold
  an INCR then a DECR of a count of holders, whose largest value ("held at once") must not
  exceed 4, and every permit free again at the end. dlock's semaphore (no lease) and its
  expirable-permit semaphore (each permit held by the watchdog, 30 s, released by its id)
  wait by pub/sub; redis-semaphore's Semaphore (a zset of holders, 10 s lease refreshed
  every 8 s) polls, by default every 10 ms, tuned as above on sem-contended; its release
  is a ZREM, counted in cmds/op.
* **replsync**: solo on a master with one replica, replica sync on (WAIT 1 in the same
  round trip as each write) and off.
* **failover**: a master, one replica and 3 Sentinels (down-after 1000 ms, failover-timeout
  3000 ms), fresh each round; SIGKILL of the master while a client on the
  redis-sentinel:// URL holds a watchdog lock; the time from the kill to the first
  acquisition of another lock (a trylock with a 30 s wait started at the kill), beside the
  time until a Sentinel names the new master.
* **cluster**: a Redis Cluster of 3 masters with one replica each (cluster-node-timeout
  2000 ms) beside the one server: spread (16 threads, a name each, spread over the slots)
  and solo. On the cluster replica sync makes every write wait for a replica (WAIT 1),
  which the one server, with no replica, never does: the fair comparison with the one
  server is the cluster with replica sync off; with it on, the fair comparison is a
  master with one replica and sync on, also measured. A replica costs even with sync off:
  it applies every write, a third busy process on a machine of few cores; so a master
  with one replica and sync off is measured too, the like-for-like counterpart of the
  cluster with sync off.
* **cluster-failover**: a fresh cluster each round; SIGKILL of the master holding a
  watchdog lock while a client on the redis-cluster:// URL starts a trylock (30 s wait)
  on another lock of the same slot: the time from the kill to that acquisition, beside
  the time until the replica calls itself master. Replica sync off: once promoted, the
  replica has no replica of its own until the old master returns, and with sync on
  dlock refuses writes there that no replica keeps (DLOCK_ENOSYNC).
""" % (int(cfg["overload_cpu"] * 100), ", ".join(str(x) for x in cfg["sweep_ms"])))
    if doc["sweep"] and any(doc["sweep"].values()):
        w("\n## Tuning sweep (contended workload of the peer's kind)\n\n| peer | retry delay | acquisitions/s | Redis CPU | "
          "cmds/acq |\n|---|---|---|---|---|\n")
        for base, rows in doc["sweep"].items():
            for s in rows:
                w(f"| {LABELS[base]} | {s['delay_ms']} ms | {fmt(s['rate'])} | {s['redis_cpu'] * 100:.0f}% | "
                  f"{fmt(s['cmds_per_acq'], 1)} |\n")
        w("\nChosen: " + ", ".join(f"{LABELS[b]} {doc['tuned_ms'][b]} ms" for b, rows in doc["sweep"].items()
                                  if rows) + ".\n")
    w("\n## Where the CPU time goes\n\nCPU time per lock+unlock pair (per acquisition for contended "
      "and herd; raw: per two calls) over the median round, set-up included: the server's (INFO cpu), "
      "of which running scripts (INFO commandstats usec of EVAL*, the commands they call included), "
      "and the contender's own processes (their rusage). On 2 cores, server and clients share the "
      "machine: rate x (server + clients) cannot exceed 2 s per second.\n\n")
    for wl in ("solo", "spread", "contended", "herd") + SEM_WORKLOADS:
        for c, d in res.get(wl, {}).items():
            m = d["median"]
            if m.get("ok") and m.get("acq") and m.get("cpu_sec") is not None:
                w(f"* {wl}, {LABELS[c]}:{redis_time(m)}\n")
    w("\n## Where the commands go\n\nCommands per acquisition by name, from INFO commandstats "
      "over the median round (set-up included; commands run by scripts included, which is why "
      "this counts more than cmds/op): a failed acquire attempt of dlock's reentrant lock shows "
      "as a PTTL, a release as a PUBLISH.\n\n")
    for wl in ("contended", "herd", "sem-contended"):
        for c, d in res.get(wl, {}).items():
            m = d["median"]
            if m.get("ok") and m.get("commands") and m.get("acq"):
                top = sorted(m["commands"].items(), key=lambda kv: -kv[1])[:12]
                w(f"* {wl}, {LABELS[c]}: " + ", ".join(f"{k} {n / m['acq']:.2f}" for k, n in top) + "\n")
    w("\n## Every round\n\n")
    for wl, cs in res.items():
        k = {"watchdog": "round_p50", "redlock": "red_p50", "failover": "recovery_ms",
             "cluster-failover": "recovery_ms"}.get(wl, key_for(wl))
        w(f"* {wl} ({k}): " + "; ".join(
            f"{LABELS.get(c, c)} " + " ".join(fmt(r.get(k)) if r.get("ok") else "failed" for r in d["rounds"])
            for c, d in cs.items()) + "\n")
    if doc["failures"]:
        w("\n## Failures\n\n" + "".join(f"* {f}\n" for f in doc["failures"]))
    return out.getvalue()


def make_plots(doc, outdir):
    """Throughput bars and latency distributions, drawn by gnuplot."""
    if shutil.which("gnuplot") is None:
        log("bench: gnuplot not found; no plots")
        return []
    res = doc["results"]
    # One colour per contender: a colour used twice would make the legend
    # ambiguous.
    pal = ["#1b9e77", "#66a61e", "#d95f02", "#e6ab02", "#7570b3", "#a6761d", "#e7298a", "#666666",
           "#1f78b4", "#b2df8a", "#e31a1c", "#000000", "#6a3d9a", "#fb9a99", "#17becf",
           "#bcbd22", "#8c564b", "#9edae5"]
    names = ["raw", "dlock", "dlock-fair"] + PEERS_ALL + JAVA_LOCKS + GO_LOCKS
    colour = {c: pal[i % len(pal)] for i, c in enumerate(names)}
    tmp = tempfile.mkdtemp(prefix="dlock-plot.")
    files = []
    # Throughput: one group per workload, one bar per contender.
    wls = [("solo", "solo\\npairs/s"), ("spread", "spread\\npairs/s"),
           ("contended", "contended\\nacquisitions/s"), ("herd", "herd\\nserved/s")]
    data = os.path.join(tmp, "throughput.dat")
    with open(data, "w") as f:
        f.write("workload " + " ".join(f'"{LABELS[c]}"' for c in names) + "\n")
        for wl, title in wls:
            vals = []
            for c in names:
                m = res.get(wl, {}).get(c, {}).get("median", {})
                vals.append(f"{m['rate']:.1f}" if m.get("ok") and m.get("rate") else "NaN")
            f.write(f'"{title}" ' + " ".join(vals) + "\n")
    hand = os.path.join(tmp, "handoff.dat")
    with open(hand, "w") as f:
        for c in names:
            m = res.get("handoff", {}).get(c, {}).get("median", {})
            if m.get("ok"):
                f.write(f'"{LABELS[c]}" {m["p50"]:.1f} {m["p99"]:.1f}\n')

    def cdf_plot(wl, suffix, title, contenders, key="bottom right"):
        lines = []
        for c in contenders:
            m = res.get(wl, {}).get(c, {}).get("median", {})
            path = f"{m.get('dist', '')}.{suffix}"
            if m.get("ok") and os.path.exists(path):
                lines.append(f"'{path}' using 2:1 with lines lw 2 lc rgb '{colour[c]}' title '{LABELS[c]}'")
        if not lines:
            return None
        return (f"set title '{title}'\nset logscale x\nset xlabel 'microseconds (log scale)'\n"
                f"set ylabel 'fraction of samples'\nset yrange [0:1]\nset key inside {key} font ',8'\n"
                f"set grid\nplot " + ", \\\n  ".join(lines) + "\nunset logscale x\n")

    bars = (f"set title 'Throughput per contender and workload (higher is better)'\n"
            f"set style data histograms\nset style histogram clustered gap 1\nset style fill solid 0.9 border -1\n"
            f"set logscale y\nset ylabel 'per second (log scale)'\nset yrange [10:*]\nset grid ytics\n"
            f"set key outside right top vertical font ',8'\nset xtics font ',9'\n"
            f"plot '{data}' using 2:xtic(1) lc rgb '{colour[names[0]]}' title columnheader(2)"
            + "".join(f", '' using {i + 2} lc rgb '{colour[c]}' title columnheader({i + 2})"
                      for i, c in enumerate(names) if i > 0) + "\nunset logscale y\nunset yrange\n")
    cdfs = {
        "latency-solo": cdf_plot("solo", "pair", "solo: lock+unlock latency",
                                 ["dlock"] + PEERS_ALL + ["redisson"] + GO_LOCKS),
        "latency-contended": cdf_plot("contended", "wait", "contended: wait for the lock",
                                      DLOCKS + PEERS_ALL + JAVA_LOCKS + GO_LOCKS),
        "latency-handoff": cdf_plot("handoff", "handoff", "hand-off: from unlock to acquisition by the waiter",
                                    DLOCKS + PEERS_ALL + JAVA_LOCKS + GO_LOCKS, "top left"),
        "latency-herd": cdf_plot("herd", "wait", "herd: wait of each waiter",
                                 DLOCKS + PEERS_ALL + JAVA_LOCKS + GO_LOCKS),
    }
    scripts = {}
    if any(res.get(wl) for wl, _ in wls):
        scripts["throughput"] = (bars, "1100,500")
    for k, body in cdfs.items():
        if body:
            scripts[k] = (body, "900,500")
    # The summary figure: throughput on top, two latency distributions below.
    if scripts.get("throughput") and cdfs["latency-contended"] and cdfs["latency-handoff"]:
        summary = ("set multiplot\nset size 1,0.5\nset origin 0,0.5\n" + bars +
                   "set size 0.5,0.5\nset origin 0,0\n" + cdfs["latency-contended"] +
                   "set origin 0.5,0\n" + cdfs["latency-handoff"] + "unset multiplot\n")
        scripts["summary"] = (summary, "1400,1000")
    for name, (body, size) in scripts.items():
        png = os.path.join(outdir, f"{name}.png")
        script = f"set terminal pngcairo size {size} font 'sans,10'\nset output '{png}'\n" + body
        p = subprocess.run(["gnuplot"], input=script, capture_output=True, text=True)
        if p.returncode != 0 or not os.path.exists(png):
            log(f"bench: gnuplot failed for {name}: {p.stderr.strip()[-400:]}")
            continue
        files.append(png)
    shutil.rmtree(tmp, ignore_errors=True)
    return files


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seconds", type=float)
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--out")
    ap.add_argument("--only", help="comma-separated workloads to run (default: all)")
    ap.add_argument("--tuned", type=float, help="the peers' tuned retry delay in ms (default: swept)")
    args = ap.parse_args()
    if args.seconds is None:
        args.seconds = float(os.environ.get("BENCH_SECONDS", 0.5 if args.quick else 2))
    if args.rounds is None:
        args.rounds = int(os.environ.get("BENCH_ROUNDS", 1 if args.quick else 5))
    if args.out is None:
        args.out = os.path.join(ROOT, "bench", "results", "quick" if args.quick else "")
    args.out = os.path.abspath(args.out)
    os.makedirs(args.out, exist_ok=True)
    # A signal ends the run through the cleanup below, servers included.
    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, lambda *_: sys.exit(130))
    b = Bench(args)
    try:
        b.main_run()
        return 1 if b.failures else 0
    except KeyboardInterrupt:
        return 130
    finally:
        b.cleanup()


if __name__ == "__main__":
    sys.exit(main())
