#!/usr/bin/env bash
# Runs kiln's tests under sanitizers: the whole CTest suite under AddressSanitizer +
# UndefinedBehaviorSanitizer (all but the `python` label: see the asan case below), then the
# `reader` and `tools` labelled tests under ThreadSanitizer.
# Prints one summary line per pass; exits non-zero if any test fails or a sanitizer reports.
#
#   scripts/sanitizers.sh            # both passes
#   scripts/sanitizers.sh asan       # only address;undefined
#   scripts/sanitizers.sh tsan       # only thread
#
# Environment:
#   KILN_SANITIZER_JOBS   parallel build and ctest jobs (default 2)
#   KILN_CMAKE_ARGS       extra configure arguments (e.g. -DKILN_WITH_HDF5=OFF -DKILN_BUILD_PYTHON=OFF)
#   KILN_TSAN_TBB_DIR     install prefix of a ThreadSanitizer-instrumented oneTBB for the tsan pass
#                         (scripts/build-tbb-tsan.sh PREFIX makes one). Default: build-tsan/tbb-tsan,
#                         built there on first use (needs deb-src lines for `apt-get source`).
#                         `system` uses Debian's uninstrumented libtbb: TSan then cannot see oneTBB's
#                         own synchronisation and reports false races in tools/pack/packer.cc's pipeline.
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
# The same for TSan: with its default handle_sigbus=1 the unguarded SIGBUS ends in a TSan report
# and exit 66 instead.
# tests/tsan.supp: reports inside third-party code (libgdal's lock order, OpenCV's task_arena), not kiln's.
# allocator_may_return_null=1: libhdf5 allocates what a damaged header claims (hundreds of GB,
# tests/fuzz/README.md H2); as with malloc, it gets NULL and fails the read, where ASan would
# otherwise abort the corruption sweep's child.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:handle_sigbus=0:strict_string_checks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:handle_sigbus=0:suppressions=$PWD/tests/tsan.supp}

summary=()
failed=0
pass_cmake_args=()  # extra configure arguments of the current pass

run_pass() {  # name build_dir sanitize ctest-args...
  local name=$1 dir=$2 sanitize=$3
  shift 3
  local start=$SECONDS
  echo "sanitizers: [$name] configuring $dir with KILN_SANITIZE=$sanitize"
  mkdir -p "$dir"
  # shellcheck disable=SC2086  # KILN_CMAKE_ARGS is a list of words on purpose.
  if ! cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DKILN_SANITIZE=$sanitize" \
      "${pass_cmake_args[@]}" ${KILN_CMAKE_ARGS:-} >"$dir/configure.log" 2>&1; then
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
  if [[ -x $dir/tools/kiln ]]; then
    echo "sanitizers: [$name] $dir/tools/kiln loads $(ldd "$dir/tools/kiln" | grep -o 'libtbb\.so\.12 => [^ ]*')"
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

# The tsan pass links a TSan-instrumented oneTBB (KILN_TSAN_TBB_DIR above). Debian's libtbb is
# not instrumented, so TSan does not see the hand-off between parallel_pipeline stages and
# reported races between tools/pack/packer.cc's serial_in_order filters on different workers; with
# an instrumented libtbb and the same kiln binaries those reports are gone (tests/SANITIZERS.md).
# LD_LIBRARY_PATH as well as TBB_DIR: OpenCV loads libtbb.so.12 too, the installed `kiln` of
# InstallAndFindPackage has no RUNPATH, and one process must not mix the two libraries.
tsan_setup_tbb() {
  local tbb=${KILN_TSAN_TBB_DIR:-build-tsan/tbb-tsan}
  if [[ $tbb == system ]]; then
    echo "sanitizers: [tsan] KILN_TSAN_TBB_DIR=system: Debian's uninstrumented libtbb; expect" \
      "false races in tools/pack/packer.cc's parallel_pipeline" >&2
    pass_cmake_args=(-UTBB_DIR)
    return 0
  fi
  if [[ -z ${KILN_TSAN_TBB_DIR:-} && ! -d $tbb/lib ]]; then
    echo "sanitizers: [tsan] building a TSan-instrumented oneTBB into $tbb" \
      "(log: build-tsan/tbb-tsan-build.log)"
    mkdir -p build-tsan
    if ! KILN_TBB_WORK_DIR=$PWD/build-tsan/tbb-tsan-work scripts/build-tbb-tsan.sh "$PWD/$tbb" \
        >build-tsan/tbb-tsan-build.log 2>&1; then
      tail -n 20 build-tsan/tbb-tsan-build.log >&2
      rm -rf "$tbb"
      return 1
    fi
  fi
  tbb=$(cd "$tbb" 2>/dev/null && pwd) || { echo "sanitizers: no folder $tbb" >&2; return 1; }
  local config lib
  config=$(find "$tbb" -name TBBConfig.cmake -print -quit)
  lib=$(find "$tbb" -name libtbb.so.12 -print -quit)
  if [[ -z $config || -z $lib ]] || (($(nm -D "$lib" | grep -c ' U __tsan_') == 0)); then
    echo "sanitizers: $tbb holds no TSan-instrumented oneTBB (scripts/build-tbb-tsan.sh)" >&2
    return 1
  fi
  echo "sanitizers: [tsan] oneTBB: $lib"
  pass_cmake_args=("-DTBB_DIR=$(dirname "$config")")
  LD_LIBRARY_PATH=$(dirname "$lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export LD_LIBRARY_PATH
}

for pass in "${passes[@]}"; do
  pass_cmake_args=()
  case $pass in
    # The Python test is left out: python3 is not built with ASan, so the runtime would have to
    # be preloaded into the interpreter (LD_PRELOAD of libasan) and CPython's own allocations
    # then fill LeakSanitizer's report. The C++ code it calls runs under ASan in the other tests.
    asan)
      echo "sanitizers: [asan] python_tests is not run under ASan (uninstrumented python3)"
      run_pass asan build-asan 'address;undefined' -LE python ;;
    tsan)
      saved_ld_library_path=${LD_LIBRARY_PATH-unset}
      if tsan_setup_tbb; then
        run_pass tsan build-tsan thread -L 'reader|tools'
      else
        summary+=("tsan: NO INSTRUMENTED oneTBB (KILN_TSAN_TBB_DIR, scripts/build-tbb-tsan.sh)")
        failed=1
      fi
      # The instrumented libtbb is for this pass only.
      if [[ $saved_ld_library_path == unset ]]; then
        unset LD_LIBRARY_PATH
      else
        export LD_LIBRARY_PATH=$saved_ld_library_path
      fi
      ;;
    *) echo "sanitizers: unknown pass '$pass' (asan or tsan)" >&2; exit 2 ;;
  esac
done

echo
echo "sanitizers: summary ($(date -u +%Y-%m-%dT%H:%MZ))"
printf '  %s\n' "${summary[@]}"
exit "$failed"
