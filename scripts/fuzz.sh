#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang, ASan and UBSan,
# replays their seed corpora and regression inputs, then fuzzes each target
# for a bounded time and prints what it did.
#
#   FUZZ_SECONDS   fuzzing time per target, in seconds (default 20; 0 only
#                  replays the corpora and regressions)
#   FUZZ_BUILD     build directory (default build-fuzz)
#   FUZZ_TARGETS   the targets to run (default: fuzz_url fuzz_reply fuzz_cli)
#
# The targets run side by side. New inputs a run finds go to the build
# directory's working corpus, not to tests/fuzz/corpus; a crash is saved as
# FUZZ_BUILD/artifacts/TARGET/crash-* and makes the script fail. Keep the
# inputs of fixed crashes in tests/fuzz/regressions/TARGET/: every run
# replays them.
#
# clang (with its libFuzzer runtime) is installed with apt-get when it is
# missing, as root or through "sudo -n", like scripts/install-deps.sh does.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${FUZZ_SECONDS:-20}
build=${FUZZ_BUILD:-$root/build-fuzz}
targets=(${FUZZ_TARGETS:-fuzz_url fuzz_reply fuzz_cli})
fuzz_dir=$root/tests/fuzz

say() { echo "fuzz: $*" >&2; }
have() { command -v "$1" >/dev/null 2>&1; }

# ---- clang with libFuzzer ------------------------------------------------

# 0 when clang links a fuzz target: the compiler alone is not enough, the
# libFuzzer runtime comes in a separate package on Debian.
libfuzzer_works() {
  have clang || return 1
  local dir rc
  dir=$(mktemp -d)
  printf '%s\n' '#include <stddef.h>' '#include <stdint.h>' \
    'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);' \
    'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) {' \
    '  (void)d, (void)n;' '  return 0;' '}' >"$dir/t.c"
  clang -fsanitize=fuzzer,address,undefined "$dir/t.c" -o "$dir/t" \
    >/dev/null 2>&1 && rc=0 || rc=1
  rm -rf "$dir"
  return $rc
}

install_clang() {
  local as_root
  if ! have apt-get; then
    say "clang with libFuzzer is missing and apt-get is not available"
    return 1
  fi
  if [ "$(id -u)" -eq 0 ]; then
    as_root=()
  elif have sudo && sudo -n true 2>/dev/null; then
    as_root=(sudo -n)
  else
    say "clang with libFuzzer is missing; not root, and sudo would ask" \
      "for a password. Please run: sudo apt-get install clang libclang-rt-dev"
    return 1
  fi
  say "installing clang and its libFuzzer runtime"
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq ||
    return 1
  # libclang-rt-dev holds libFuzzer on Debian 12 and later; older releases
  # ship it with clang itself.
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends clang libclang-rt-dev ||
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -qq --no-install-recommends clang
}

if ! libfuzzer_works; then
  install_clang || exit 1
  libfuzzer_works || {
    say "clang cannot link a libFuzzer target (-fsanitize=fuzzer)"
    exit 1
  }
fi

# ---- build ---------------------------------------------------------------

# Debug keeps the library's assertions; -O1 makes fuzzing several times
# faster than -O0 without losing the sanitizers' precision.
mkdir -p "$build"
blog=$build/build.log
cmake -S "$fuzz_dir" -B "$build" -DCMAKE_C_COMPILER=clang \
  -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG="-g -O1" >"$blog" 2>&1 ||
  { cat "$blog" >&2; say "configure failed"; exit 1; }
cmake --build "$build" -j "${JOBS:-2}" --target "${targets[@]}" \
  >>"$blog" 2>&1 ||
  { tail -n 60 "$blog" >&2; say "build failed (log: $blog)"; exit 1; }

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# Options every run gets: a bound per input, inputs no larger than the
# targets read, and the dictionary of the target when there is one.
common_flags() {
  local t=$1
  echo "-timeout=10 -rss_limit_mb=2048 -max_len=4096"
  [ -f "$fuzz_dir/$t.dict" ] && echo "-dict=$fuzz_dir/$t.dict"
  return 0
}

failed=0

# ---- replay --------------------------------------------------------------

# Every seed and every regression input, once each: these must never fail.
for t in "${targets[@]}"; do
  inputs=()
  for d in "$fuzz_dir/corpus/$t" "$fuzz_dir/regressions/$t"; do
    [ -d "$d" ] || continue
    while IFS= read -r -d '' f; do inputs+=("$f"); done \
      < <(find "$d" -type f ! -name '.*' -print0 | sort -z)
  done
  if [ ${#inputs[@]} -eq 0 ]; then
    say "$t: no seed or regression inputs"
    continue
  fi
  # shellcheck disable=SC2046
  if "$build/$t" $(common_flags "$t") "${inputs[@]}" \
    >"$build/$t.replay.log" 2>&1; then
    say "$t: replayed ${#inputs[@]} seed and regression inputs: ok"
  else
    tail -n 40 "$build/$t.replay.log" >&2
    say "$t: replaying the seeds and regressions FAILED" \
      "(log: $build/$t.replay.log)"
    failed=1
  fi
done

# ---- fuzz ----------------------------------------------------------------

if [ "$seconds" -gt 0 ]; then
  pids=()
  for t in "${targets[@]}"; do
    # Artifacts of earlier runs would be reported as this run's.
    rm -rf "$build/artifacts/$t"
    mkdir -p "$build/corpus/$t" "$build/artifacts/$t"
    seeds=()
    [ -d "$fuzz_dir/corpus/$t" ] && seeds+=("$fuzz_dir/corpus/$t")
    # shellcheck disable=SC2046
    "$build/$t" $(common_flags "$t") -max_total_time="$seconds" \
      -print_final_stats=1 -artifact_prefix="$build/artifacts/$t/" \
      "$build/corpus/$t" "${seeds[@]}" >"$build/$t.log" 2>&1 &
    pids+=($!)
  done
  for i in "${!targets[@]}"; do
    t=${targets[$i]}
    if wait "${pids[$i]}"; then
      status=ok
    else
      status=FAILED
      failed=1
    fi
    log=$build/$t.log
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
    last=$(grep -E '^#[0-9]+' "$log" | tail -n 1 || true)
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
    corp=$(sed -n 's/.* corp: \([0-9]*\/[0-9]*[a-zA-Z]*\).*/\1/p' <<<"$last")
    say "$t: ${seconds}s, ${execs:-?} execs (${rate:-?}/s), cov ${cov:-?}," \
      "ft ${ft:-?}, corpus ${corp:-?}: $status"
    if [ "$status" = FAILED ]; then
      grep -E -A 30 'ERROR|check failed|SUMMARY' "$log" | head -n 60 >&2 || true
      for a in "$build/artifacts/$t"/*; do
        [ -e "$a" ] && say "$t: crash input saved as $a"
      done
      say "$t: log: $log"
    fi
  done
fi

if [ $failed -ne 0 ]; then
  say "FAILED"
  exit 1
fi
say "all targets ok"
