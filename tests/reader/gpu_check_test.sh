#!/usr/bin/env bash
# The GPU checks can fail (CTest GpuCheckScript, label reader): run here, on a machine with or
# without a GPU.
#   1. `ctest -N -L gpu` lists every test of gpu_upload_test (the label is really applied).
#   2. Without a usable GPU: gpu_upload_test with KILN_REQUIRE_GPU=1 fails every test and skips
#      none; scripts/gpu-check.sh run says "not run: no GPU", never "passed", and exits non-zero.
#   3. gpu-check.sh's overlap figure, from two result lines of train_loop_gpu's format.
#
#   gpu_check_test.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
src="$1" build="$2"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
upload="$build/tests/reader/gpu_upload_test"
[[ -x $upload ]] || { echo "FAIL: $upload is not built"; exit 1; }

# 1. The label.
listed=$("$upload" --gtest_list_tests | awk '/^[^ ]/ {s = $1} /^  / {print s $1}' | sort)
n_listed=$(echo "$listed" | grep -c . || true)
labelled=$(ctest --test-dir "$build" -N -L gpu 2>&1)
n_labelled=$(echo "$labelled" | awk '/Total Tests:/ {print $3}')
[[ $n_listed -ge 4 ]] || fail "gpu_upload_test lists only $n_listed tests"
[[ $n_labelled == "$n_listed" ]] ||
  fail "ctest -N -L gpu lists $n_labelled tests, gpu_upload_test has $n_listed"
while read -r t; do
  [[ -z $t ]] && continue
  grep -qF "$t" <<<"$labelled" || fail "ctest -L gpu does not select $t"
done <<<"$listed"

# Is a GPU usable here? Then step 2 cannot be asserted.
probe=""
[[ -x $build/samples/train_loop_gpu ]] && probe=$("$build/samples/train_loop_gpu" --probe 2>&1)
have_gpu=0
[[ -n $probe ]] && "$build/samples/train_loop_gpu" --probe >/dev/null 2>&1 && have_gpu=1
if [[ $have_gpu == 1 ]]; then
  echo "a GPU is usable here ($probe): the no-GPU assertions are left to scripts/gpu-check.sh run"
else
  # 2a. Skips turn into failures.
  out=$(KILN_REQUIRE_GPU=1 "$upload" 2>&1); rc=$?
  [[ $rc != 0 ]] || fail "KILN_REQUIRE_GPU=1 gpu_upload_test exited 0 without a GPU"
  grep -q '^\[  SKIPPED \]' <<<"$out" && fail "KILN_REQUIRE_GPU=1 gpu_upload_test still skips"
  n_failed=$(grep -o '^\[  FAILED  \] GpuUploadTest\.[A-Za-z0-9_]*' <<<"$out" | sort -u | grep -c . || true)
  [[ $n_failed == "$n_listed" ]] || fail "KILN_REQUIRE_GPU=1: $n_failed of $n_listed tests failed"
  grep -q 'KILN_REQUIRE_GPU is set' <<<"$out" || fail "the failure does not name KILN_REQUIRE_GPU"
  # Without the variable they skip (so the ordinary suite passes here).
  out=$("$upload" 2>&1) || fail "gpu_upload_test without KILN_REQUIRE_GPU failed: $out"
  # 2b. The dry run of the GPU script.
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  dry=$(KILN_GPU_CHECK_BINS="$build/tests/reader:$build/samples" "$src/scripts/gpu-check.sh" run "$work" 2>&1)
  rc=$?
  echo "$dry" | tail -20
  [[ $rc != 0 ]] || fail "gpu-check.sh run exited 0 without a GPU"
  grep -q 'not run: no GPU' <<<"$dry" || fail "the dry run does not say 'not run: no GPU'"
  grep -qi 'passed' <<<"$dry" && fail "the dry run prints 'passed'"
  grep -q '^| GPU tests (skips fail) | not run: no GPU' "$work/summary.md" ||
    fail "summary.md has no 'GPU tests ... not run: no GPU' row"
  if [[ -x $build/samples/train_loop_gpu ]] &&
     ! grep -qi 'no NVIDIA driver/GPU found\|no NVIDIA GPU found\|no CUDA device found\|without the CUDA runtime' <<<"$dry"; then
    fail "the dry run does not say why there is no GPU"
  fi
fi

# 3. The overlap figure: host-only 2.0 s, upload 2.5 s over 100 timed batches of a 10 ms copy:
# 0.5 s of the 1.0 s of copies was exposed, 50% hidden. (The old parser printed 100% for any.)
host='train_loop mode=host-only prefetch=4 batches=101 timed_batches=100 wall_s=2.000000 consumer_wait_s=0.900'
up='train_loop mode=upload prefetch=4 batches=101 timed_batches=100 wall_s=2.500000 consumer_wait_s=0.900'
got=$("$src/scripts/gpu-check.sh" overlap "$host" "$up" 10000)
[[ $got == "50%" ]] || fail "overlap of 2.0 s vs 2.5 s, 100 x 10 ms: got '$got', want 50%"
got=$("$src/scripts/gpu-check.sh" overlap "$host" "${up/wall_s=2.500000/wall_s=2.000000}" 10000)
[[ $got == "100%" ]] || fail "overlap with equal walls: got '$got', want 100%"
got=$("$src/scripts/gpu-check.sh" overlap "$host" "${up/wall_s=2.500000/wall_s=3.500000}" 10000)
[[ $got == "0%" ]] || fail "overlap with the whole copy exposed: got '$got', want 0%"
"$src/scripts/gpu-check.sh" overlap "garbage" "$up" 10000 >/dev/null 2>&1 &&
  fail "overlap accepted a line without wall_s"

if [[ $fails != 0 ]]; then echo "$fails failure(s)"; exit 1; fi
echo "all GPU-check assertions hold"
