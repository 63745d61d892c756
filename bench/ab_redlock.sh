#!/usr/bin/env bash
# A/B comparison of two builds' RedLock in one run: bench_redlock (a
# RedLock over 5 private redis-servers against a plain lock on one, and a
# RedLock whose last node is a sixth server stopped with SIGSTOP) from the
# two builds alternating round by round, so that drift in the machine's
# speed falls on both alike.
#
#   bench/ab_redlock.sh BUILD_A BUILD_B [ROUNDS] [SECONDS]
#
# BUILD_A and BUILD_B are build trees holding bench_redlock. Prints the
# load average before and after, every round's line, and per figure the
# median of each build and their ratio B/A (lower is better: latencies).
set -euo pipefail

a=${1:?usage: bench/ab_redlock.sh BUILD_A BUILD_B [ROUNDS] [SECONDS]}
b=${2:?usage: bench/ab_redlock.sh BUILD_A BUILD_B [ROUNDS] [SECONDS]}
rounds=${3:-3}
seconds=${4:-3}
for d in "$a" "$b"; do
  [ -x "$d/bench_redlock" ] || { echo "ab_redlock.sh: no bench_redlock in $d" >&2; exit 2; }
done

dir=$(mktemp -d)
pids=()
urls=()
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
start_server() {
  local port
  port=$(free_port)
  mkdir -p "$dir/$port"
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$dir/$port" --daemonize no >"$dir/$port/redis.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 50); do
    redis-cli -p "$port" ping >/dev/null 2>&1 && break
    sleep 0.1
  done
  last_url="redis://127.0.0.1:$port"
}
cleanup() {
  for p in "${pids[@]}"; do
    kill -CONT "$p" 2>/dev/null || true
    kill "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  rm -rf "$dir"
}
trap cleanup EXIT
for _ in 1 2 3 4 5; do
  start_server
  urls+=(--url "$last_url")
done
start_server
paused_url=$last_url
kill -STOP "${pids[-1]}"

load() { cut -d' ' -f1 /proc/loadavg; }
echo "load average before: $(load)"
keys="red_p50 red_p99 single_p50 bare_p50 red_paused_p50 red_paused_p99"
declare -A vals
for r in $(seq "$rounds"); do
  for side in A B; do
    d=$a
    [ "$side" = B ] && d=$b
    line=$("$d/bench_redlock" --seconds "$seconds" --paused "$paused_url" "${urls[@]}")
    echo "round $r $side: $line"
    for k in $keys; do
      v=$(tr ' ' '\n' <<<"$line" | awk -F= -v k="$k" '$1 == k {print $2}')
      vals[$side.$k]="${vals[$side.$k]:-} $v"
    done
  done
done
echo "load average after: $(load)"
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
for k in $keys; do
  ma=$(median <<<"${vals[A.$k]}")
  mb=$(median <<<"${vals[B.$k]}")
  ratio=$(awk -v a="$ma" -v b="$mb" 'BEGIN {if (a > 0) printf "%.3f", b / a; else print "-"}')
  echo "$k (us, median): A $ma  B $mb  B/A $ratio"
done
