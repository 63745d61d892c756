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
# BENCH_SECONDS (default 3) sets the duration of every measurement.
# Exit status: non-zero when a run failed or the guarded counter was wrong;
# a missed speed target is reported, not treated as a failure.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
seconds=${BENCH_SECONDS:-3}
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
rcli monitor >"$tmp/monitor.txt" &
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

# raw_pairs <clients>: redis-benchmark's rate for the captured acquire call
# at that concurrency, halved into lock+unlock pairs. A short first run sizes
# the real one so that it lasts about BENCH_SECONDS.
raw_rps() {
  redis-benchmark -h 127.0.0.1 -p "$port" -c "$1" -n "$2" -P 1 --csv \
    EVALSHA "$sha" "${args[@]}" | awk -F'"' 'NR == 2 { print $4 }'
}
raw_pairs() {
  local probe n rps
  probe=$(raw_rps "$1" 2000)
  n=$(awk -v r="${probe:-0}" -v s="$seconds" 'BEGIN { n = int(r * s); print (n < 1000 ? 1000 : n) }')
  rps=$(raw_rps "$1" "$n")
  for k in "${args[@]:1:${args[0]}}"; do rcli del "$k" >/dev/null; done
  if [ -z "$rps" ]; then
    echo "bench: redis-benchmark failed at $1 clients" >&2
    echo 0
    return 1
  fi
  awk -v r="$rps" 'BEGIN { printf "%.1f", r / 2 }'
}

status=0
declare -A out raw
run_dlock() { # run_dlock <workload> <bench_lock options...>
  local w=$1 o
  shift
  if ! o=$("$bin" --url "$url" --seconds "$seconds" "$@"); then
    echo "bench: the $w workload failed: $o" >&2
    status=1
  fi
  out[$w]=$o
}
field() { # field <workload> <key>
  printf '%s\n' "${out[$1]}" | tr ' ' '\n' | awk -F= -v k="$2" '$1 == k { print $2 }'
}

echo "dlock lock+unlock benchmark: ${seconds}s per measurement, redis $(redis-server --version |
  grep -o 'v=[^ ]*' | cut -c3-) on 127.0.0.1:$port, $(nproc) cores" >&2
echo "raw limit: redis-benchmark EVALSHA ${sha:0:12}... ${args[*]} (rate / 2)" >&2

echo "  solo ..." >&2
raw[solo]=$(raw_pairs 1) || status=1
run_dlock solo --procs 1 --threads 1 --name bench:solo
echo "  spread ..." >&2
raw[spread]=$(raw_pairs 16) || status=1
run_dlock spread --procs 1 --threads 16 --distinct --name bench:spread
echo "  contended ..." >&2
raw[contended]=$(raw_pairs 16) || status=1
run_dlock contended --procs 4 --threads 4 --work --name bench:contended

{
  echo "dlock $(git -C "$root" describe --always --dirty 2>/dev/null || echo '?')," \
    "$(date -u '+%Y-%m-%d %H:%M UTC'), redis $(redis-server --version |
      grep -o 'v=[^ ]*' | cut -c3-), $(nproc) cores, ${seconds}s per run, TCP loopback"
  echo
  printf '%-34s %12s %12s %6s %9s %9s\n' workload "dlock pairs/s" "raw pairs/s" ratio \
    "p50 us" "p99 us"
  for w in solo spread contended; do
    case $w in
    solo) label="solo (1 thread, 1 name)" ;;
    spread) label="spread (16 threads, 16 names)" ;;
    contended) label="contended (4 procs x 4 thr, 1 name)" ;;
    esac
    rate=$(field "$w" rate)
    printf '%-34s %12.0f %12.0f %6.2f %9.1f %9.1f\n' "$label" "${rate:-0}" "${raw[$w]:-0}" \
      "$(awk -v a="${rate:-0}" -v b="${raw[$w]:-0}" 'BEGIN { print b > 0 ? a / b : 0 }')" \
      "$(field "$w" p50_us)" "$(field "$w" p99_us)"
  done
  echo
  echo "contended: GET+SET of a counter inside each hold; counter check:" \
    "$(field contended counter) ($(field contended pairs) acquisitions)"
  ratio=$(awk -v a="$(field solo rate)" -v b="${raw[solo]}" 'BEGIN { printf "%.2f", b > 0 ? a / b : 0 }')
  if [ "${raw[solo]}" = 0 ]; then
    echo "target: solo ratio >= 0.90: unknown (no raw measurement)"
  elif awk -v r="$ratio" 'BEGIN { exit !(r >= 0.9) }'; then
    echo "target: solo ratio >= 0.90: met ($ratio)"
  else
    echo "target: solo ratio >= 0.90: MISSED ($ratio)"
  fi
} | tee "$results/latest.txt"
exit "$status"
