#!/usr/bin/env bash
# Installs the Prometheus text parser of tests/test_stats_prom.c: Python's
# prometheus_client, exactly as pinned in requirements.txt, into a virtual
# environment DEST (the build tree's prom-venv, given by ctest). python3
# and its venv module come from Debian (python3, python3-venv) when
# missing. Run by ctest as the setup of that test, which needs its success:
# it exits non-zero, saying why, when the parser cannot be had, and the
# test then fails rather than pass without a parser.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
dest=${1:?usage: setup.sh DEST}

fail() {
  echo "prom setup: $*" >&2
  exit 1
}

if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
  run=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null && sudo -n true 2>/dev/null ||
      fail "python3 with venv is missing; install python3-venv"
    run=(sudo -n)
  fi
  echo "prom setup: installing python3 python3-venv (apt-get)" >&2
  "${run[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
    --no-install-recommends python3 python3-venv >&2 || {
    "${run[@]}" apt-get update -q >&2 || true
    "${run[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
      --no-install-recommends python3 python3-venv >&2 ||
      fail "apt-get install python3-venv failed"
  }
fi

# Made again only when the pins changed since the last install.
stamp="$dest/.requirements"
if [ -x "$dest/bin/python" ] && cmp -s "$here/requirements.txt" "$stamp"; then
  exit 0
fi
rm -rf "$dest"
python3 -m venv "$dest" || fail "python3 -m venv $dest failed"
"$dest/bin/python" -m pip install -q --disable-pip-version-check \
  -r "$here/requirements.txt" >&2 || fail "pip install failed"
"$dest/bin/python" -c 'import prometheus_client.parser' ||
  fail "prometheus_client does not import"
cp "$here/requirements.txt" "$stamp"
