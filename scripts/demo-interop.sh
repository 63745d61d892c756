#!/usr/bin/env bash
# The MoonCake sale across languages: one lock, two libraries.
#
# 90 moon cakes are in stock and 100 buyers try to buy one each at once:
# DEMO_C_PROCS processes of DEMO_C_THREADS threads of examples/stock (C,
# dlock) and DEMO_JAVA_THREADS threads of tests/java's Buyers (Java,
# Redisson's RLock with tryLock(5, SECONDS)), all on the lock "MoonCake" of
# one redis-server that this script starts on a free loopback port and
# stops afterwards. The stock is read and written back by each buyer (not
# atomically): only the lock keeps two buyers, of either language, from
# selling the same cake.
#
# The Java buyers are built by tests/java/setup.sh into the build tree
# (Redisson from Maven Central the first time, a JDK and Maven from Debian
# when missing).
# Exit status: 0 when exactly 90 were sold, 10 refused, and no sale was lost.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
c_procs=${DEMO_C_PROCS:-2}
c_threads=${DEMO_C_THREADS:-25}
java_threads=${DEMO_JAVA_THREADS:-50}
stock=90
buyers=$((c_procs * c_threads + java_threads))
expect_sold=$((buyers < stock ? buyers : stock))

bin=$build/examples/stock
[ -x "$bin" ] || bin=$(find "$build" -type f -name stock -perm -u+x 2>/dev/null | head -n 1)
if [ -z "$bin" ]; then
  echo "demo-interop: examples/stock is not built; run 'make' first" >&2
  exit 1
fi
for tool in redis-cli redis-server; do
  command -v "$tool" >/dev/null || {
    echo "demo-interop: $tool not found (scripts/install-deps.sh installs it)" >&2
    exit 1
  }
done
java_dir=$build/redisson-java
"$root/tests/java/setup.sh" "$java_dir" >&2
cp="$java_dir/target/classes:$(cat "$java_dir/classpath")"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/dlock-demo-interop.XXXXXX")
server_pid=
pids=()
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
  # Only processes this script started are stopped, each by its pid.
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  exec 3>&- 2>/dev/null || true
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A free loopback port: redis-server fails to start on a taken one, and
# another port is tried.
port=
for _ in $(seq 20); do
  try=$((20000 + RANDOM % 40000))
  redis-server --bind 127.0.0.1 --port "$try" --save "" --appendonly no \
    --dir "$tmp" --logfile "$tmp/redis.log" &
  server_pid=$!
  for _ in $(seq 100); do
    if [ "$(redis-cli -p "$try" ping 2>/dev/null)" = PONG ]; then port=$try; break; fi
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.05
  done
  [ -n "$port" ] && break
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=
done
if [ -z "$port" ]; then
  echo "demo-interop: redis-server did not start:" >&2
  cat "$tmp/redis.log" >&2 || true
  exit 1
fi
url=redis://127.0.0.1:$port
echo "Started redis-server (pid $server_pid) on $url"
rcli() { redis-cli -p "$port" "$@"; }

outcomes=(sold refused timedout failed)
rcli SET MoonCakeStock "$stock" >/dev/null

# The JVM starts first (a second or two) and waits, connected, for the go.
mkfifo "$tmp/go"
java -cp "$cp" dlock.peer.Buyers "$url" "$java_threads" <"$tmp/go" >"$tmp/java.out" 2>"$tmp/java.err" &
java_pid=$!
pids+=("$java_pid")
exec 3>"$tmp/go"
for _ in $(seq 600); do
  grep -q '^ready' "$tmp/java.out" 2>/dev/null && break
  kill -0 "$java_pid" 2>/dev/null || break
  sleep 0.05
done
if ! grep -q '^ready' "$tmp/java.out"; then
  echo "demo-interop: the Java buyers did not start:" >&2
  cat "$tmp/java.err" >&2
  exit 1
fi

echo "Selling $stock moon cakes to $buyers buyers at once: $((c_procs * c_threads)) in C" \
  "(dlock, $c_procs processes x $c_threads threads) and $java_threads in Java" \
  "(Redisson RLock, tryLock(5, SECONDS))"
started=$(date +%s%N)
echo go >&3
exec 3>&-
c_pids=()
for i in $(seq "$c_procs"); do
  DLOCK_URL=$url "$bin" "$c_threads" >"$tmp/c.$i" 2>&1 &
  c_pids+=($!)
  pids+=($!)
done
status=0
for p in "${c_pids[@]}"; do wait "$p" || status=1; done
wait "$java_pid" || status=1
pids=()
took=$((($(date +%s%N) - started) / 1000000))
if [ "$status" != 0 ]; then
  echo "demo-interop: a buyer process failed:" >&2
  cat "$tmp"/c.* "$tmp/java.err" >&2
fi

count() { rcli GET "$1" | awk '{ print $1 + 0 }'; }
declare -A c java
for o in "${outcomes[@]}"; do
  c[$o]=$(count "MoonCake:$o")
  java[$o]=$(count "MoonCake:java:$o")
done
final=$(rcli GET MoonCakeStock)
sold=$((c[sold] + java[sold]))
refused=$((c[refused] + java[refused]))
lost=$((sold - (stock - final)))

echo
printf '  %-22s %8s %8s %8s\n' "" "C" "Java" "total"
for o in sold refused timedout failed; do
  case $o in
  sold) label=sold ;;
  refused) label="refused (no stock)" ;;
  timedout) label="timed out (5 s wait)" ;;
  failed) label="failed (errors)" ;;
  esac
  printf '  %-22s %8d %8d %8d\n' "$label" "${c[$o]}" "${java[$o]}" $((c[$o] + java[$o]))
done
# The sales in order, one letter each (C or J): the Java buyers noted the
# stock each of their sales saw; the C buyers made the others.
order=$(rcli LRANGE MoonCake:java:at 0 -1 | awk -v n="$stock" '
  { j[$1] = 1 }
  END { for (left = n; left > n - sold; left--) printf "%s", (left in j) ? "J" : "C" }' sold="$sold")
switches=$(printf '%s' "$order" | fold -w1 | uniq | wc -l)
printf '  %-22s %26d\n' "final stock" "$final"
printf '  %-22s %26d\n' "lost updates" "$lost"
echo "  ($took ms)"
echo
echo "  The sales in order (C: dlock, J: Redisson), $((switches > 0 ? switches - 1 : 0)) changes of hands between languages:"
printf '%s\n' "$order" | fold -w 45 | sed 's/^/    /'
echo

if [ "$status" = 0 ] && [ "$sold" = "$expect_sold" ] &&
  [ "$refused" = $((buyers - expect_sold)) ] && [ "$lost" = 0 ] &&
  [ "$final" = $((stock - expect_sold)) ]; then
  echo "  C and Java buyers shared one lock: every cake was sold exactly once. OK"
  exit 0
fi
echo "  The sale should have sold $expect_sold, refused $((buyers - expect_sold))" \
  "and lost none. FAILED" >&2
exit 1
