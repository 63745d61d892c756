#!/usr/bin/env bash
# Lock+unlock throughput through dlock, beside the raw limit of the server.
#
# Starts a private redis-server on a free loopback TCP port with persistence
# off (TCP rather than a unix socket, so that redis-benchmark and dlock pay
# the same transport), then for each workload measures:
#   * dlock: pairs/s and pair latency from bench/bench_lock.c;
#   * raw: redis-benchmark running the very acquire call the library sends
#     (captured on a MONITOR connection), at the same concurrency. A pair is
#     two round trips, so the raw pair limit is that rate divided by two.
# Prints a table and writes it to bench/results/latest.txt.
#
# BENCH_SECONDS (default 2) sets the duration of every measurement and
# BENCH_ROUNDS (default 3) how many times each is taken; the median counts.
# Exit status: non-zero when a run failed or the guarded counter was wrong;
# a missed speed target is reported, not treated as a failure.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
seconds=${BENCH_SECONDS:-2}
rounds=${BENCH_ROUNDS:-3}
results=$root/bench/results
mkdir -p "$results"

bin=
for c in "$build/bench/bench_lock" "$build/bin/bench_lock" "$build/bench_lock"; do
  if [ -x "$c" ] && [ -f "$c" ]; then bin=$c; break; fi
done
if [ -z "$bin" ] && [ -d "$build" ]; then
  bin=$(find "$build" -type f -name bench_lock -perm -u+x 2>/dev/null | head -n 1)
fi
if [ -z "$bin" ]; then
  echo "bench: bench_lock is not built; run 'make' (or 'make bench') first" >&2
  exit 1
fi
for tool in redis-server redis-cli redis-benchmark; do
  if ! command -v "$tool" >/dev/null; then
    echo "bench: $tool not found; install redis-server and redis-tools" >&2
    exit 1
  fi
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/dlock-bench.XXXXXX")
server_pid=
monitor_pid=
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
  # Only processes this script started are stopped, each by its pid.
  for p in $monitor_pid $server_pid; do
    kill "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A free port is found by trying: redis-server exits at once when the port
# is taken, and a few random tries in the upper range are enough.
port=
for _ in $(seq 20); do
  try=$((20000 + RANDOM % 30000))
  redis-server --bind 127.0.0.1 --port "$try" --save "" --appendonly no \
    --dir "$tmp" --logfile "$tmp/redis.log" &
  server_pid=$!
  for _ in $(seq 100); do
    if ! kill -0 "$server_pid" 2>/dev/null; then break; fi
    if [ "$(redis-cli -p "$try" ping 2>/dev/null)" = PONG ]; then
      port=$try
      break
    fi
    sleep 0.05
  done
  [ -n "$port" ] && break
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=
done
if [ -z "$port" ]; then
  echo "bench: could not start redis-server:" >&2
  cat "$tmp/redis.log" >&2 || true
  exit 1
fi
url="redis://127.0.0.1:$port"
rcli() { redis-cli -p "$port" "$@"; }

# Capture the acquire call: the first EVALSHA (or EVAL) naming the probe lock
# is the library's acquire script with its real keys and arguments.
# redis-cli is started directly, not through rcli, so that $! is its own pid
# and the kill below really ends the MONITOR, which would slow every later
# command down.
redis-cli -p "$port" monitor >"$tmp/monitor.txt" &
monitor_pid=$!
for _ in $(seq 100); do
  grep -q OK "$tmp/monitor.txt" 2>/dev/null && break
  sleep 0.02
done
"$bin" --url "$url" --probe --name bench:probe >/dev/null
sleep 0.2
kill "$monitor_pid" 2>/dev/null || true
wait "$monitor_pid" 2>/dev/null || true
monitor_pid=
line=$(grep -E '"EVAL(SHA)?" ' "$tmp/monitor.txt" | grep -F '"bench:probe"' | head -n 1 || true)
if [ -z "$line" ]; then
  echo "bench: no EVAL/EVALSHA for the probe lock was seen; commands were:" >&2
  cat "$tmp/monitor.txt" >&2
  exit 1
fi
# Monitor quotes every argument; lock names and owner ids here have no
# quotes or spaces inside, so splitting on the quotes is exact.
mapfile -t words < <(printf '%s\n' "${line#*] }" | grep -o '"[^"]*"' | sed 's/^"//; s/"$//')
if [ "${words[0]^^}" = EVALSHA ]; then
  sha=${words[1]}
else
  # The library sent the script text; load the same acquire script by file
  # so redis-benchmark can still call it by its SHA.
  sha=$(rcli -x script load <"$root/src/lua/acquire.lua")
fi
args=("${words[@]:2}")
rcli del bench:probe >/dev/null

# raw_pairs <clients>: sets raw_result to redis-benchmark's rate for the
# captured acquire call at that concurrency, halved into lock+unlock pairs.
# (A variable, not output, so that it can update raw_rate in this shell.)
raw_rps() {
  redis-benchmark -h 127.0.0.1 -p "$port" -c "$1" -n "$2" -P 1 --csv \
    EVALSHA "$sha" "${args[@]}" | awk -F'"' 'NR == 2 { print $4 }'
}
raw_pairs() {
  local n rps
  n=$(awk -v r="${raw_rate[$1]:-0}" -v s="$seconds" \
    'BEGIN { n = int(r * s); print (n < 1000 ? 1000 : n) }')
  rps=$(raw_rps "$1" "$n")
  # The next round is sized by this one: the first, short estimate may have
  # been taken while the machine was still cold.
  [ -n "$rps" ] && raw_rate[$1]=$rps
  for k in "${args[@]:1:${args[0]}}"; do rcli del "$k" >/dev/null; done
  if [ -z "$rps" ]; then
    echo "bench: redis-benchmark failed at $1 clients" >&2
    raw_result=0
    return 1
  fi
  raw_result=$(awk -v r="$rps" 'BEGIN { printf "%.1f", r / 2 }')
}
# A short first run at each concurrency sizes the real ones so they last
# about BENCH_SECONDS, and warms the server up as a side effect.
declare -A raw_rate
for c in 1 16; do raw_rate[$c]=$(raw_rps "$c" 2000); done

status=0
run_dlock() { # run_dlock <bench_lock options...>: prints the result line
  local o
  if ! o=$("$bin" --url "$url" --seconds "$seconds" "$@"); then
    echo "bench: bench_lock $* failed: $o" >&2
    status=1
  fi
  printf '%s\n' "$o"
}
field() { # field <result line> <key>: one value of the line, 0 if none
  printf '%s\n' "$1" | tr ' ' '\n' |
    awk -F= -v k="$2" '$1 == k { v = $2 } END { print v == "" ? 0 : v }'
}
median_line() { # median_line <lines>: the line with the median rate
  printf '%s\n' "$1" | awk -F'rate=' 'NF > 1 { split($2, a, " "); print a[1], $0 }' |
    sort -n | awk '{ l[NR] = $0 } END { m = l[int((NR + 1) / 2)]; sub(/^[^ ]* /, "", m); print m }'
}
median() { # median <numbers...>
  printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}

echo "dlock lock+unlock benchmark: $rounds rounds of ${seconds}s per measurement," \
  "redis $(redis-server --version | grep -o 'v=[^ ]*' | cut -c3-) on 127.0.0.1:$port," \
  "$(nproc) cores" >&2
echo "raw limit: redis-benchmark EVALSHA ${sha:0:12}... ${args[*]} (rate / 2)" >&2

# Raw and dlock runs alternate, round after round, and each side reports its
# median round: another process loading the machine for a moment then skews
# one round of one side, not the ratio.
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
workloads=(solo spread contended)
declare -A label clients opts lines raws
label[solo]="solo (1 thread, 1 name)"
label[spread]="spread (16 threads, 16 names)"
label[contended]="contended (4 procs x 4 thr, 1 name)"
clients[solo]=1 clients[spread]=16 clients[contended]=16
opts[solo]="--procs 1 --threads 1 --name bench:solo"
opts[spread]="--procs 1 --threads 16 --distinct --name bench:spread"
opts[contended]="--procs 4 --threads 4 --work --name bench:contended"
for w in "${workloads[@]}"; do
  lines[$w]='' raws[$w]=''
  for r in $(seq "$rounds"); do
    echo "  $w, round $r/$rounds ..." >&2
    raw_pairs "${clients[$w]}" || status=1
    raws[$w]+="$raw_result "
    # shellcheck disable=SC2086 # the options are words on purpose
    lines[$w]+="$(run_dlock ${opts[$w]})"$'\n'
  done
done

{
  echo "dlock $(git -C "$root" describe --always --dirty 2>/dev/null || echo '?')," \
    "$(date -u '+%Y-%m-%d %H:%M UTC'), redis $(redis-server --version |
      grep -o 'v=[^ ]*' | cut -c3-), $(nproc) cores, TCP loopback," \
    "median of $rounds rounds of ${seconds}s"
  # Other work on the machine moves these figures more than anything in
  # dlock does; the load average says how quiet the run was.
  echo "load average before / after: $load_before / $(cut -d' ' -f1-3 /proc/loadavg)"
  echo
  printf '%-36s %13s %11s %6s %9s %9s\n' workload "dlock pairs/s" "raw pairs/s" ratio \
    "p50 us" "p99 us"
  declare -A med raw
  for w in "${workloads[@]}"; do
    med[$w]=$(median_line "${lines[$w]}")
    # shellcheck disable=SC2086
    raw[$w]=$(median ${raws[$w]})
    rate=$(field "${med[$w]}" rate)
    printf '%-36s %13.0f %11.0f %6.2f %9.1f %9.1f\n' "${label[$w]}" "$rate" "${raw[$w]:-0}" \
      "$(awk -v a="$rate" -v b="${raw[$w]:-0}" 'BEGIN { print (b > 0 ? a / b : 0) }')" \
      "$(field "${med[$w]}" p50_us)" "$(field "${med[$w]}" p99_us)"
  done
  echo
  echo "rounds (dlock / raw pairs/s):"
  for w in "${workloads[@]}"; do
    printf '  %-10s %s/ %s\n' "$w" \
      "$(printf '%s' "${lines[$w]}" | grep -o 'rate=[0-9]*' | cut -c6- | tr '\n' ' ')" \
      "$(printf '%s' "${raws[$w]}" | awk '{ for (i = 1; i <= NF; i++) printf "%.0f ", $i }')"
  done
  echo
  # The raw figure for the contended case is what Redis could serve if the
  # 16 workers never waited for each other; one holder at a time, with four
  # round trips per hold (acquire, GET, SET, release), is the real ceiling.
  serial=$(awk -v r="${raw[solo]:-0}" 'BEGIN { printf "%.0f", r * 2 / 4 }')
  echo "contended: each hold does GET+SET on a counter; counter check:" \
    "$(field "${med[contended]}" counter)."
  echo "  One holder at a time and 4 round trips per hold bound it near" \
    "raw c=1 rate / 4 = $serial pairs/s; dlock reached" \
    "$(awk -v a="$(field "${med[contended]}" rate)" -v b="$serial" \
      'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }') of that."
  ratio=$(awk -v a="$(field "${med[solo]}" rate)" -v b="${raw[solo]:-0}" \
    'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')
  if [ "${raw[solo]:-0}" = 0 ]; then
    echo "target: solo ratio >= 0.90: unknown (no raw measurement)"
  elif awk -v r="$ratio" 'BEGIN { exit !(r >= 0.9) }'; then
    echo "target: solo ratio >= 0.90: met ($ratio)"
  else
    echo "target: solo ratio >= 0.90: MISSED ($ratio)"
  fi
} | tee "$results/latest.txt"
exit "$status"
