#!/usr/bin/env bash
# Installs what the benchmark needs beyond the build's own dependencies:
#   * redis-py for its Lock (Debian python3-redis, for /usr/bin/python3);
#   * gnuplot for the plots (Debian gnuplot-nox);
#   * node-redlock v4 and v5 beta, @sesamecare-oss/redlock and redis-semaphore
#     with ioredis, pinned in
#     bench/peers/package.json and package-lock.json (npm ci);
#   * Redisson, pinned in bench/peers/redisson/pom.xml, built with Maven
#     (Java 17 and Maven from Debian when missing) into its target/;
#   * go-redsync and go-redis, pinned in bench/peers/redsync/go.mod and
#     go.sum, built with go from the Go module proxy;
# and checks for node, npm, redis-server, redis-cli and redis-benchmark.
# Debian packages are installed with apt-get as root, or through sudo.
# Exits non-zero, saying what is missing, when something cannot be had:
# the benchmark compares against these peers and does not run without them.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
peers=$root/bench/peers

fail() {
  echo "bench setup: $*" >&2
  exit 1
}

apt_install() { # apt_install <package>...: as root, or with sudo
  local run=()
  if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null || ! sudo -n true 2>/dev/null; then
      fail "missing Debian packages: $*; install them (apt-get install $*) or run as root"
    fi
    run=(sudo -n)
  fi
  echo "bench setup: installing $* (apt-get)" >&2
  if ! "${run[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
    --no-install-recommends "$@" >&2; then
    "${run[@]}" apt-get update -q >&2 || true
    "${run[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
      --no-install-recommends "$@" >&2 ||
      fail "apt-get install $* failed"
  fi
}

missing=()
/usr/bin/python3 -c 'import redis.lock' 2>/dev/null || missing+=(python3-redis)
command -v gnuplot >/dev/null || missing+=(gnuplot-nox)
command -v redis-server >/dev/null || missing+=(redis-server)
command -v redis-benchmark >/dev/null || missing+=(redis-tools)
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  missing+=(nodejs npm)
fi
command -v java >/dev/null || missing+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null || missing+=(maven)
command -v go >/dev/null || missing+=(golang-go)
if [ ${#missing[@]} -gt 0 ]; then apt_install "${missing[@]}"; fi
/usr/bin/python3 -c 'import redis.lock' 2>/dev/null ||
  fail "python3-redis is installed but /usr/bin/python3 cannot import redis.lock"

# npm ci wipes node_modules and installs exactly the lock file; it is run
# again only when the lock file changed since the last install.
stamp=$peers/node_modules/.installed-from
want=$(sha256sum "$peers/package-lock.json" | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ] ||
  [ ! -d "$peers/node_modules/redlock4" ] || [ ! -d "$peers/node_modules/redlock5" ] ||
  [ ! -d "$peers/node_modules/ioredis" ] || [ ! -d "$peers/node_modules/redis-semaphore" ] ||
  [ ! -d "$peers/node_modules/@sesamecare-oss/redlock" ]; then
  echo "bench setup: npm ci in bench/peers (node-redlock v4, v5 beta, @sesamecare-oss/redlock, redis-semaphore, ioredis)" >&2
  if ! (cd "$peers" && npm ci --no-audit --no-fund --loglevel=error >&2); then
    fail "npm ci in bench/peers failed (is the npm registry reachable?); the node peers cannot run"
  fi
  echo "$want" >"$stamp"
fi
node -e 'for (const m of ["redlock4", "redlock5", "@sesamecare-oss/redlock", "redis-semaphore", "ioredis"]) require(process.argv[1] + "/node_modules/" + m)' "$peers" ||
  fail "node cannot load redlock/redis-semaphore/ioredis from bench/peers/node_modules"

# Redisson: built again only when its pom or source changed since the last
# build. The class path it runs with is written to target/classpath.txt.
jpeer=$peers/redisson
jstamp=$jpeer/target/.built-from
jwant=$(cat "$jpeer/pom.xml" "$jpeer"/src/main/java/*.java | sha256sum | cut -d' ' -f1)
if [ "$(cat "$jstamp" 2>/dev/null || true)" != "$jwant" ] || [ ! -s "$jpeer/target/classpath.txt" ]; then
  echo "bench setup: mvn package in bench/peers/redisson (Redisson)" >&2
  if ! (cd "$jpeer" && mvn -q -B package >&2); then
    fail "mvn package in bench/peers/redisson failed (is Maven Central reachable?); Redisson cannot run"
  fi
  echo "$jwant" >"$jstamp"
fi

# go-redsync: the module's pinned versions (go.sum checks them), built
# again when the source or the pins changed.
gpeer=$peers/redsync
gstamp=$gpeer/.built-from
gwant=$(cat "$gpeer/go.mod" "$gpeer/go.sum" "$gpeer/main.go" | sha256sum | cut -d' ' -f1)
if [ "$(cat "$gstamp" 2>/dev/null || true)" != "$gwant" ] || [ ! -x "$gpeer/redsync-bench" ]; then
  echo "bench setup: go build in bench/peers/redsync (go-redsync)" >&2
  if ! (cd "$gpeer" && go build -o redsync-bench . >&2); then
    fail "go build in bench/peers/redsync failed (is the Go module proxy reachable?); redsync cannot run"
  fi
  echo "$gwant" >"$gstamp"
fi
