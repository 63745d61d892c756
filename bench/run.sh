#!/usr/bin/env bash
# The dlock benchmark: installs what the contenders need (bench/setup.sh),
# then runs bench/driver.py, which prints the table as it goes and writes
# bench/results/latest.json, report.md and the plots.
#
#   bench/run.sh            the full run (make bench)
#   bench/run.sh --quick    every workload briefly, as a smoke test
#                           (make bench-quick; results in bench/results/quick)
#
# BUILD_DIR (default build/) is where the bench programs were built;
# BENCH_SECONDS and BENCH_ROUNDS change the length and number of rounds.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
"$root/bench/setup.sh"
exec /usr/bin/python3 "$root/bench/driver.py" --build "$build" "$@"
