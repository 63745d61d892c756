#!/usr/bin/env bash
# A/B comparison of two builds of dlock in one run, on one private
# redis-server: solo, spread and contended loops of bench_lock, the two
# builds alternating round by round so that drift in the machine's speed
# falls on both alike.
#
#   bench/ab.sh BUILD_A BUILD_B [ROUNDS] [SECONDS]
#
# AB_ARGS_A and AB_ARGS_B, when set, are extra bench_lock options for one
# side, so that one build can be compared with itself under two settings:
# "AB_ARGS_A=--no-stats bench/ab.sh build build" puts a client without
# statistics (A) against one with them (B). AB_WORKLOADS picks the
# workloads to run (default "solo spread contended"), so that a noisy one
# can be given more rounds on its own. AB_PROG=bench_async compares the
# event-loop API (one loop thread per process) instead of the threads.
#
# BUILD_A and BUILD_B are build trees holding bench_lock (for example a
# worktree of the old commit built with "make", and build/). Prints the load
# average before and after (a run that starts above 1.0 or ends above 2.0
# says so and should be repeated), every round's rate and the server's CPU
# time per acquisition (INFO cpu, user + system), and per workload the
# median of each build and their ratio B/A.
set -euo pipefail

a=${1:?usage: bench/ab.sh BUILD_A BUILD_B [ROUNDS] [SECONDS]}
b=${2:?usage: bench/ab.sh BUILD_A BUILD_B [ROUNDS] [SECONDS]}
rounds=${3:-3}
seconds=${4:-3}
prog=${AB_PROG:-bench_lock}
for d in "$a" "$b"; do
  [ -x "$d/$prog" ] || { echo "ab.sh: no $prog in $d" >&2; exit 2; }
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
# The server's CPU time so far, in us (user + system).
server_cpu_us() {
  redis-cli -p "$port" info cpu | tr -d '\r' |
    awk -F: '/^used_cpu_(user|sys):/ {t += $2} END {printf "%.0f", t * 1e6}'
}
before=$(load)
echo "load average before: $before"

declare -A rates cpus
workloads=${AB_WORKLOADS:-"solo spread contended"}
args_solo="--procs 1 --threads 1"
args_spread="--procs 1 --threads 16 --distinct"
args_contended="--procs 4 --threads 4 --work"

for r in $(seq "$rounds"); do
  for w in $workloads; do
    var="args_$w"
    for side in A B; do
      build=$a
      extra=${AB_ARGS_A:-}
      if [ "$side" = B ]; then
        build=$b
        extra=${AB_ARGS_B:-}
      fi
      # shellcheck disable=SC2086
      cpu0=$(server_cpu_us)
      out=$("$build/$prog" --url "$url" --mode loop ${!var} \
        --seconds "$seconds" --name "ab:$w" $extra)
      cpu1=$(server_cpu_us)
      rate=$(sed -n 's/.*\brate=\([0-9.]*\).*/\1/p' <<<"$out")
      acq=$(sed -n 's/.*\bacq=\([0-9]*\).*/\1/p' <<<"$out")
      cpu=$(awk -v c=$((cpu1 - cpu0)) -v n="$acq" 'BEGIN {printf "%.1f", (n > 0 ? c / n : 0)}')
      echo "round $r $w $side rate=$rate server_us_per_acq=$cpu"
      rates[$w$side]="${rates[$w$side]:-} $rate"
      cpus[$w$side]="${cpus[$w$side]:-} $cpu"
    done
  done
done

after=$(load)
echo "load average after: $after"
echo
printf '%-10s %12s %12s %8s %14s %14s %8s\n' workload 'A rate' 'B rate' B/A \
  'A server us' 'B server us' B/A
median() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {print (a > 0 ? b / a : 0)}'; }
for w in $workloads; do
  ma=$(median <<<"${rates[${w}A]}")
  mb=$(median <<<"${rates[${w}B]}")
  ca=$(median <<<"${cpus[${w}A]}")
  cb=$(median <<<"${cpus[${w}B]}")
  printf '%-10s %12.0f %12.0f %8.3f %14.1f %14.1f %8.3f\n' "$w" "$ma" "$mb" \
    "$(ratio "$ma" "$mb")" "$ca" "$cb" "$(ratio "$ca" "$cb")"
done
if awk -v s="$before" -v e="$after" 'BEGIN {exit !(s > 1.0 || e > 2.0)}'; then
  echo "the machine was not quiet (load $before -> $after): repeat this run"
fi
