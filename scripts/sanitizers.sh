#!/usr/bin/env bash
# Runs kiln's tests under sanitizers (issue 7): the whole CTest suite under AddressSanitizer +
# UndefinedBehaviorSanitizer, then the `reader` and `tools` labelled tests under ThreadSanitizer.
# Prints one summary line per pass; exits non-zero if any test fails or a sanitizer reports.
#
#   scripts/sanitizers.sh            # both passes
#   scripts/sanitizers.sh asan       # only address;undefined
#   scripts/sanitizers.sh tsan       # only thread
#
# Environment:
#   KILN_SANITIZER_JOBS   parallel build and ctest jobs (default 2)
#   KILN_CMAKE_ARGS       extra configure arguments (e.g. -DKILN_WITH_HDF5=OFF -DKILN_BUILD_PYTHON=OFF)
# Build folders: build-asan/ and build-tsan/ (Debug-with-symbols, configured once, rebuilt each run).
# Takes about 15-25 minutes from scratch on 2 cores; the summary is also written to
# build-asan/sanitizers-summary.txt and build-tsan/sanitizers-summary.txt.
set -uo pipefail
cd "$(dirname "$0")/.."

jobs=${KILN_SANITIZER_JOBS:-2}
passes=("$@")
((${#passes[@]})) || passes=(asan tsan)

# halt_on_error makes any UBSan report a test failure instead of a line in a log nobody reads.
# handle_sigbus=0: kiln installs its own SIGBUS handler (formats/fault_guard.h) and its tests
# check that an unguarded SIGBUS still kills the process; ASan's handler would turn it into exit 1.
# tests/tsan.supp silences lock-order reports inside libgdal (OpenCV's imgcodecs), not kiln's.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:handle_sigbus=0:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/tsan.supp}

summary=()
failed=0

run_pass() {  # name build_dir sanitize ctest-args...
  local name=$1 dir=$2 sanitize=$3
  shift 3
  local start=$SECONDS
  echo "sanitizers: [$name] configuring $dir with KILN_SANITIZE=$sanitize"
  mkdir -p "$dir"
  # shellcheck disable=SC2086  # KILN_CMAKE_ARGS is a list of words on purpose.
  if ! cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DKILN_SANITIZE=$sanitize" \
      ${KILN_CMAKE_ARGS:-} >"$dir/configure.log" 2>&1; then
    cat "$dir/configure.log" >&2
    summary+=("$name: CONFIGURE FAILED (see $dir/configure.log)")
    failed=1
    return
  fi
  echo "sanitizers: [$name] building $dir"
  if ! cmake --build "$dir" -j"$jobs" >"$dir/build.log" 2>&1; then
    tail -n 40 "$dir/build.log" >&2
    summary+=("$name: BUILD FAILED (see $dir/build.log)")
    failed=1
    return
  fi
  echo "sanitizers: [$name] ctest $*"
  local log=$dir/ctest.log
  ctest --test-dir "$dir" --output-on-failure -j"$jobs" "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  local line
  line=$(grep -E '^[0-9]+% tests passed' "$log" | tail -n 1)
  local reports
  reports=$(grep -cE 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|WARNING: ThreadSanitizer' \
    "$log" || true)
  local result="PASS"
  if ((rc != 0 || reports > 0)); then
    result="FAIL"
    failed=1
  fi
  summary+=("$name ($sanitize): $result: ${line:-no tests ran}; sanitizer reports: $reports; $((SECONDS - start)) s")
  printf '%s\n' "${summary[-1]}" >"$dir/sanitizers-summary.txt"
}

for pass in "${passes[@]}"; do
  case $pass in
    asan) run_pass asan build-asan 'address;undefined' ;;
    tsan) run_pass tsan build-tsan thread -L 'reader|tools' ;;
    *) echo "sanitizers: unknown pass '$pass' (asan or tsan)" >&2; exit 2 ;;
  esac
done

echo
echo "sanitizers: summary ($(date -u +%Y-%m-%dT%H:%MZ))"
printf '  %s\n' "${summary[@]}"
exit "$failed"
