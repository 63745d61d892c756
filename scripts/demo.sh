#!/usr/bin/env bash
# The MoonCake flash sale, with and without dlock, side by side.
#
# 90 moon cakes are in stock and 100 buyers (DEMO_PROCS processes of
# DEMO_THREADS threads of examples/stock) try to buy one each, first guarded
# by the dlock "MoonCake" and then unguarded. With the lock exactly 90 are
# sold; without it the same code sells cakes that do not exist.
#
# With DLOCK_URL set the demo uses that server (and overwrites the keys
# MoonCake, MoonCakeStock and MoonCake:* there); without it, it starts a
# private redis-server on a unix socket and stops it afterwards.
# Exit status: 0 when the locked run sold exactly 90 and refused 10.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
procs=${DEMO_PROCS:-4}
threads=${DEMO_THREADS:-25}
stock=90
workers=$((procs * threads))
expect_sold=$((workers < stock ? workers : stock))

# The binary's place depends on the CMake layout, so look where it usually
# goes first and search the build tree after.
bin=
for c in "$build/examples/stock" "$build/bin/stock" "$build/stock"; do
  if [ -x "$c" ] && [ -f "$c" ]; then bin=$c; break; fi
done
if [ -z "$bin" ] && [ -d "$build" ]; then
  bin=$(find "$build" -type f -name stock -perm -u+x 2>/dev/null | head -n 1)
fi
if [ -z "$bin" ]; then
  echo "demo: examples/stock is not built; run 'make' (or 'make demo') first" >&2
  exit 1
fi
for tool in redis-cli redis-server; do
  if ! command -v "$tool" >/dev/null; then
    echo "demo: $tool not found; install redis-tools and redis-server" \
      "(scripts/install-deps.sh does)" >&2
    exit 1
  fi
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/dlock-demo.XXXXXX")
server_pid=
worker_pids=()
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
  # Only processes this script started are stopped, each by its pid.
  for p in "${worker_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -z "${DLOCK_URL:-}" ]; then
  redis-server --port 0 --unixsocket "$tmp/redis.sock" --unixsocketperm 700 \
    --save "" --appendonly no --dir "$tmp" --logfile "$tmp/redis.log" &
  server_pid=$!
  for _ in $(seq 100); do
    if [ "$(redis-cli -s "$tmp/redis.sock" ping 2>/dev/null)" = PONG ]; then
      break
    fi
    if ! kill -0 "$server_pid" 2>/dev/null; then
      echo "demo: redis-server did not start:" >&2
      cat "$tmp/redis.log" >&2
      exit 1
    fi
    sleep 0.05
  done
  export DLOCK_URL="unix://$tmp/redis.sock"
  echo "Started a private redis-server (pid $server_pid) on $DLOCK_URL"
else
  echo "Using the redis server at $DLOCK_URL"
fi

# redis-cli on the server named by DLOCK_URL, in either URL form dlock takes.
# The URL is taken apart here rather than given to "redis-cli -u", which
# does not accept every form dlock does (a password with no user name).
rcli_args=()
case $DLOCK_URL in
unix://*)
  rest=${DLOCK_URL#unix://}
  rcli_args=(-s "${rest%%\?*}")
  case $rest in *\?db=*) rcli_args+=(-n "${rest##*\?db=}") ;; esac
  ;;
*)
  rest=${DLOCK_URL#redis://}
  if [[ $rest == *@* ]]; then
    auth=${rest%@*} rest=${rest##*@}
    if [ -n "${auth%%:*}" ]; then rcli_args+=(--user "${auth%%:*}"); fi
    rcli_args+=(-a "${auth#*:}" --no-auth-warning)
  fi
  if [[ $rest == */* ]]; then
    [ -n "${rest#*/}" ] && rcli_args+=(-n "${rest#*/}")
    rest=${rest%%/*}
  fi
  if [[ $rest == *:* ]]; then
    rcli_args+=(-h "${rest%:*}" -p "${rest##*:}")
  else
    rcli_args+=(-h "$rest")
  fi
  ;;
esac
rcli() { redis-cli "${rcli_args[@]}" "$@"; }

if ! reply=$(rcli ping 2>&1) || [ "$reply" != PONG ]; then
  echo "demo: no redis answers at $DLOCK_URL: $reply" >&2
  exit 1
fi

outcomes=(MoonCake:sold MoonCake:refused MoonCake:timedout MoonCake:failed)

draw() { # draw <finished> <label>
  local width=40 n=$(($1 * 40 / workers))
  local bar
  bar=$(printf '%*s' "$n" '' | tr ' ' '#')$(printf '%*s' $((width - n)) '' | tr ' ' '.')
  printf '\r  %-14s [%s] %3d/%d workers' "$2" "$bar" "$1" "$workers"
}

# run <label> [stock options...]: one sale; sets the r_* results.
run() {
  local label=$1 status=0 finished=0 running ticks=0
  shift
  rcli DEL MoonCake "${outcomes[@]}" >/dev/null
  rcli SET MoonCakeStock "$stock" >/dev/null
  worker_pids=()
  for i in $(seq "$procs"); do
    "$bin" "$@" "$threads" >"$tmp/out.$i" 2>&1 &
    worker_pids+=($!)
  done
  # Redraw the bar every 100 ms until every process has exited; a worker
  # counts as finished once it has recorded its outcome in Redis.
  while :; do
    running=0
    for p in "${worker_pids[@]}"; do
      if kill -0 "$p" 2>/dev/null; then running=1; fi
    done
    finished=$(rcli MGET "${outcomes[@]}" | awk '{ s += $1 } END { print s + 0 }')
    if [ -t 1 ]; then draw "$finished" "$label"; fi
    [ "$running" = 0 ] && break
    ticks=$((ticks + 1))
    if [ "$ticks" -gt 600 ]; then
      echo; echo "demo: the $label run did not finish within 60 s" >&2
      exit 1
    fi
    sleep 0.1
  done
  for p in "${worker_pids[@]}"; do wait "$p" || status=1; done
  worker_pids=()
  draw "$finished" "$label"
  echo
  if [ "$status" != 0 ]; then
    echo "demo: a $label process failed:" >&2
    cat "$tmp"/out.* >&2
  fi
  read -r r_sold r_refused r_timedout r_failed < <(rcli MGET "${outcomes[@]}" |
    awk '{ v[NR] = $1 + 0 } END { print v[1] + 0, v[2] + 0, v[3] + 0, v[4] + 0 }')
  r_final=$(rcli GET MoonCakeStock)
  r_lost=$((r_sold - (stock - r_final)))
  r_status=$status
}

echo "Selling $stock moon cakes to $workers buyers ($procs processes x $threads threads)"
run "with dlock"
l_sold=$r_sold l_refused=$r_refused l_timedout=$r_timedout l_failed=$r_failed
l_final=$r_final l_lost=$r_lost l_status=$r_status
run "without lock" --no-lock
n_sold=$r_sold n_refused=$r_refused n_timedout=$r_timedout n_failed=$r_failed
n_final=$r_final n_lost=$r_lost

echo
printf '  %-22s %12s %15s\n' "" "with dlock" "without lock"
printf '  %-22s %12d %15d\n' "sold" "$l_sold" "$n_sold"
printf '  %-22s %12d %15d\n' "refused (no stock)" "$l_refused" "$n_refused"
printf '  %-22s %12d %15d\n' "timed out (5 s wait)" "$l_timedout" "$n_timedout"
printf '  %-22s %12d %15d\n' "final stock" "$l_final" "$n_final"
printf '  %-22s %12d %15d\n' "lost updates" "$l_lost" "$n_lost"
if [ "$l_failed$n_failed" != 00 ]; then
  printf '  %-22s %12d %15d\n' "failed (errors)" "$l_failed" "$n_failed"
fi
echo

if [ "$n_sold" -gt "$expect_sold" ] || [ "$n_lost" -gt 0 ]; then
  echo "  Without the lock, $n_sold cakes were sold from a stock of $stock, and" \
    "$n_lost sales overwrote each other (the stock went down by only $((stock - n_final)))."
fi
if [ "$l_status" = 0 ] && [ "$l_sold" = "$expect_sold" ] &&
  [ "$l_refused" = $((workers - expect_sold)) ] &&
  [ "$l_final" = $((stock - expect_sold)) ] && [ "$l_timedout$l_failed" = 00 ]; then
  echo "  With dlock, every cake was sold exactly once. OK"
  exit 0
fi
echo "  With dlock the sale should have sold $expect_sold, refused" \
  "$((workers - expect_sold)) and left $((stock - expect_sold)) in stock. FAILED" >&2
exit 1
