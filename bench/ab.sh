#!/usr/bin/env bash
# A/B comparison of two builds of dlock in one run, on one private
# redis-server: solo, spread and contended loops of bench_lock, the two
# builds alternating round by round so that drift in the machine's speed
# falls on both alike.
#
#   bench/ab.sh BUILD_A BUILD_B [ROUNDS] [SECONDS]
#
# BUILD_A and BUILD_B are build trees holding bench_lock (for example a
# worktree of the old commit built with "make", and build/). Prints the load
# average before and after (a run that starts above 1.0 or ends above 2.0
# says so and should be repeated), every round's rate, and per workload the
# median rate of each build and their ratio B/A.
set -euo pipefail

a=${1:?usage: bench/ab.sh BUILD_A BUILD_B [ROUNDS] [SECONDS]}
b=${2:?usage: bench/ab.sh BUILD_A BUILD_B [ROUNDS] [SECONDS]}
rounds=${3:-3}
seconds=${4:-3}
for d in "$a" "$b"; do
  [ -x "$d/bench_lock" ] || { echo "ab.sh: no bench_lock in $d" >&2; exit 2; }
done

dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
  --dir "$dir" --daemonize no >"$dir/redis.log" 2>&1 &
rpid=$!
cleanup() { kill "$rpid" 2>/dev/null; wait "$rpid" 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT
for _ in $(seq 50); do
  redis-cli -p "$port" ping >/dev/null 2>&1 && break
  sleep 0.1
done
url="redis://127.0.0.1:$port"

load() { cut -d' ' -f1 /proc/loadavg; }
before=$(load)
echo "load average before: $before"

declare -A rates
workloads="solo spread contended"
args_solo="--procs 1 --threads 1"
args_spread="--procs 1 --threads 16 --distinct"
args_contended="--procs 4 --threads 4 --work"

for r in $(seq "$rounds"); do
  for w in $workloads; do
    var="args_$w"
    for side in A B; do
      build=$a
      [ "$side" = B ] && build=$b
      # shellcheck disable=SC2086
      out=$("$build/bench_lock" --url "$url" --mode loop ${!var} \
        --seconds "$seconds" --name "ab:$w")
      rate=$(sed -n 's/.*\brate=\([0-9.]*\).*/\1/p' <<<"$out")
      echo "round $r $w $side rate=$rate"
      rates[$w$side]="${rates[$w$side]:-} $rate"
    done
  done
done

after=$(load)
echo "load average after: $after"
echo
printf '%-10s %12s %12s %8s\n' workload A B B/A
median() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
for w in $workloads; do
  ma=$(median <<<"${rates[${w}A]}")
  mb=$(median <<<"${rates[${w}B]}")
  printf '%-10s %12.0f %12.0f %8.3f\n' "$w" "$ma" "$mb" \
    "$(awk -v a="$ma" -v b="$mb" 'BEGIN {print (a > 0 ? b / a : 0)}')"
done
if awk -v s="$before" -v e="$after" 'BEGIN {exit !(s > 1.0 || e > 2.0)}'; then
  echo "the machine was not quiet (load $before -> $after): repeat this run"
fi
