#!/usr/bin/env bash
# Builds the Java peer of tests/test_redisson_jvm.c and scripts/demo-interop.sh:
# Redisson itself, as pinned in tests/java/pom.xml, fetched from Maven Central
# into the local Maven repository (~/.m2, or MAVEN_REPO) on the first run and
# read from there, offline, afterwards. The classes go to DEST/target and the
# class path to DEST/classpath (DEST: the build tree's redisson-java
# directory, given by ctest). A JDK and Maven come from Debian
# (default-jdk-headless, maven) when missing, with apt-get as root or through
# sudo. Run by ctest as the setup of the Java interoperability tests, which
# need its success: it exits non-zero, saying why, when the peer cannot be
# had, and those tests then fail rather than pass without a peer.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
dest=${1:?usage: setup.sh DEST}

fail() {
  echo "redisson-java setup: $*" >&2
  exit 1
}

if ! command -v java >/dev/null || ! command -v javac >/dev/null ||
  ! command -v mvn >/dev/null; then
  run=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null && sudo -n true 2>/dev/null ||
      fail "a JDK or Maven is missing; install the Debian packages default-jdk-headless and maven"
    run=(sudo -n)
  fi
  echo "redisson-java setup: installing default-jdk-headless maven (apt-get)" >&2
  "${run[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
    --no-install-recommends default-jdk-headless maven >&2 || {
    "${run[@]}" apt-get update -q >&2 || true
    "${run[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
      --no-install-recommends default-jdk-headless maven >&2 ||
      fail "apt-get install default-jdk-headless maven failed"
  }
fi

mkdir -p "$dest"
dest=$(cd "$dest" && pwd)
repo=()
[ -n "${MAVEN_REPO:-}" ] && repo=("-Dmaven.repo.local=$MAVEN_REPO")
# Built again only when the project changed since the last build.
stamp=$dest/.built-from
want=$( (cat "$here/pom.xml" && find "$here/src" -name '*.java' -print0 | sort -z |
  xargs -0 cat) | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ] || [ ! -s "$dest/classpath" ]; then
  rm -f "$stamp"
  build=(mvn -B -q -f "$here/pom.xml" "${repo[@]}" "-Dpeer.build.dir=$dest/target"
    compile dependency:build-classpath "-Dmdep.outputFile=$dest/classpath")
  # Offline first: after the first fetch nothing needs the network.
  if ! "${build[@]}" -o >"$dest/mvn-offline.log" 2>&1; then
    echo "redisson-java setup: fetching Redisson and its dependencies (Maven Central)" >&2
    "${build[@]}" >&2 || fail "mvn failed (is Maven Central reachable?)"
  fi
  echo "$want" >"$stamp"
fi
version=$(tr ':' '\n' <"$dest/classpath" | sed -n 's#.*/redisson-\([0-9][0-9.]*\)\.jar$#\1#p')
[ -n "$version" ] || fail "Redisson is not on the class path in $dest/classpath"
[ -f "$dest/target/classes/dlock/peer/Peer.class" ] || fail "the peer did not compile"
echo "redisson-java setup: Redisson $version ready in $dest"
