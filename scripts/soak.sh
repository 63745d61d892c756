#!/usr/bin/env bash
# The soak run behind "make soak": dlock_soak (tests/soak/soak.c) puts mixed
# load on every lock kind from several processes and threads for
# SOAK_SECONDS (default 600), injects faults, samples the workers' memory
# and descriptors, and ends with a summary and a verdict. Its exit status is
# 0 only for "no growth" with every worker making progress and exiting
# cleanly. The output is also kept in SOAK_LOG (default BUILD_DIR/soak.log).
#
#   SOAK_SECONDS=120 scripts/soak.sh
#   SOAK_PROCESSES=4 SOAK_THREADS=8 SOAK_FAULT_EVERY_MS=5000 make soak
set -euo pipefail
cd "$(dirname "$0")/.."

build=${BUILD_DIR:-build}
bin="$build/dlock_soak"
if [ ! -x "$bin" ]; then
  echo "soak: $bin is missing; \"make soak\" builds it" >&2
  exit 1
fi

args=(--seconds "${SOAK_SECONDS:-600}")
[ -z "${SOAK_PROCESSES:-}" ] || args+=(--processes "$SOAK_PROCESSES")
[ -z "${SOAK_THREADS:-}" ] || args+=(--threads "$SOAK_THREADS")
[ -z "${SOAK_FAULT_EVERY_MS:-}" ] || args+=(--fault-every-ms "$SOAK_FAULT_EVERY_MS")
[ -z "${SOAK_SAMPLE_MS:-}" ] || args+=(--sample-ms "$SOAK_SAMPLE_MS")

log=${SOAK_LOG:-$build/soak.log}
echo "soak: $bin ${args[*]} (output also in $log)"
# pipefail: the status is dlock_soak's, not tee's.
"$bin" "${args[@]}" 2>&1 | tee "$log"
