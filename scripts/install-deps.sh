#!/usr/bin/env bash
# Installs what dlock needs to build and test, on Debian or Ubuntu:
# cmake (>= 3.25), a C compiler, make, pkg-config, libhiredis-dev,
# libssl-dev (TLS), redis-server and redis-tools (redis-cli,
# redis-benchmark), openssl (the TLS tests make their certificates with
# it), valgrind, under which "make test" runs the suite once more, and
# libuv1-dev and libevent-dev, on whose loops the tests run the event-loop
# adapters (include/dlock/adapters/; the library itself needs neither),
# nodejs and npm, for the interoperability tests' Redisson-compatible peer
# (node-redisson, which the tests' own set-up installs with npm:
# tests/node/setup.sh), and a JDK with Maven for the tests beside Redisson
# itself (which tests/java/setup.sh fetches from Maven Central).
#
# Prints nothing and exits 0 when everything is there, so "make test" can
# run it every time. Installs only what is missing, with apt-get, as root or
# through "sudo -n" (never asking for a password). Where it cannot install,
# it names the Debian packages to install and exits 1.
set -euo pipefail

min_cmake=3.25
missing=()

have() { command -v "$1" >/dev/null 2>&1; }

# "install ok installed", not merely known to dpkg: a package removed with
# its config files left is still listed by dpkg -s. The output is captured
# whole: "dpkg -s | grep -q" would fail under pipefail when grep stops
# reading early and dpkg gets SIGPIPE.
installed() {
  local status
  have dpkg || return 1
  status=$(dpkg -s "$1" 2>/dev/null) || return 1
  [[ $status == *$'\nStatus: install ok installed'* ]]
}

cmake_ok() {
  have cmake || return 1
  local v
  v=$(cmake --version | sed -n '1s/^cmake version \([0-9][0-9.]*\).*/\1/p')
  [ -n "$v" ] && [ "$(printf '%s\n%s\n' "$min_cmake" "$v" | sort -V | head -n 1)" = "$min_cmake" ]
}

cc_ok() {
  { have cc || have gcc || have clang; } || return 1
  # The compiler alone cannot build anything without the C library's headers.
  ! have dpkg || installed libc6-dev
}

hiredis_ok() {
  installed libhiredis-dev || { have pkg-config && pkg-config --exists hiredis; }
}

openssl_dev_ok() {
  installed libssl-dev || { have pkg-config && pkg-config --exists openssl; }
}

check() {
  missing=()
  cmake_ok || missing+=(cmake)
  cc_ok || missing+=(gcc libc6-dev)
  have make || missing+=(make)
  have pkg-config || missing+=(pkg-config)
  hiredis_ok || missing+=(libhiredis-dev)
  openssl_dev_ok || missing+=(libssl-dev)
  have openssl || missing+=(openssl)
  have redis-server || installed redis-server || missing+=(redis-server)
  { have redis-cli && have redis-benchmark; } || missing+=(redis-tools)
  have valgrind || missing+=(valgrind)
  installed libuv1-dev || missing+=(libuv1-dev)
  installed libevent-dev || missing+=(libevent-dev)
  { have node && have npm; } || missing+=(nodejs npm)
  { have java && have javac && have mvn; } || missing+=(default-jdk-headless maven)
}

give_up() {
  echo "install-deps: $1" >&2
  echo "install-deps: please install these Debian packages: ${missing[*]}" >&2
  echo "  sudo apt-get install ${missing[*]}" >&2
  exit 1
}

check
[ ${#missing[@]} -eq 0 ] && exit 0

have apt-get || give_up "apt-get not found (not a Debian system?)"
if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif have sudo && sudo -n true 2>/dev/null; then
  as_root=(sudo -n)
else
  give_up "not root, and sudo would ask for a password"
fi

echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq ||
  give_up "apt-get update failed"
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -qq --no-install-recommends "${missing[@]}" ||
  give_up "apt-get install failed"

check
if [ ${#missing[@]} -ne 0 ]; then
  if [[ " ${missing[*]} " == *" cmake "* ]] && have cmake; then
    give_up "cmake >= $min_cmake is needed, this system's is older"
  fi
  give_up "still missing after apt-get install"
fi
