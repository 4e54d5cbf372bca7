#!/usr/bin/env bash
# The GPU check of kiln's device upload, for a GPU node that has the NVIDIA driver but
# none of kiln's libraries and no network.
#
# Two steps, on two machines:
#
#   1. On a CPU build machine with kiln's build dependencies and the CUDA toolkit (no GPU
#      needed):   scripts/gpu-check.sh build [BUNDLE_DIR]        (default: build-gpu-check/bundle)
#      configures a reader-only build (no tools, no Python) in build-gpu-check/ with zstd,
#      xxHash, GoogleTest, the CUDA runtime (cudart_static) and libstdc++ linked statically
#      (scripts/gpu-check-static.cmake), builds the GPU tests and the train_loop_gpu harness, and
#      copies them with this script into BUNDLE_DIR. The bundle needs only glibc (as new as the
#      build machine's: Debian 12 = 2.36) and libcuda.so.1 from the node's driver; `ldd` of each
#      binary is checked for anything else.
#   2. Copy the bundle to the node (scp -r / rsync) and run, in a few minutes:
#         BUNDLE_DIR/gpu-check.sh run [WORK_DIR]          (default: a fresh mktemp dir)
#      It runs the GPU tests (gtest, label `gpu`), measures host-to-device bandwidth from pinned
#      vs pageable memory, the loader's end-to-end rate with upload (a synthetic 224x224x3 uint8
#      dataset written to WORK_DIR, which should be on local disk), and how much of the copy time
#      hides behind a simulated training step, and prints a summary for BENCHMARKS.md.
#
# A node that has the CUDA toolkit, cmake and ninja but no zstd/xxHash: step 1 can also run on
# the node if the two static archives and GoogleTest are carried along; the bundle is simpler.
#
# Status: written and its build step dry-run on a machine without a GPU (the bundle builds and
# its tests skip there); `run` has NOT been executed on a GPU yet: no GPU numbers exist.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mode="${1:-}"

build() {
  local root; root="$(cd "$here/.." && pwd)"
  local bdir="$root/build-gpu-check"
  local bundle="${1:-$bdir/bundle}"
  local nvcc="${CUDACXX:-/usr/local/cuda/bin/nvcc}"
  cmake -S "$root" -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DKILN_BUILD_TOOLS=OFF -DKILN_BUILD_PYTHON=OFF -DKILN_WITH_CUDA=ON \
    -DKILN_WITH_LMDB=OFF -DKILN_WITH_HDF5=OFF \
    -DCMAKE_CUDA_COMPILER="$nvcc" \
    -DCMAKE_PROJECT_INCLUDE="$root/scripts/gpu-check-static.cmake" \
    -DCMAKE_EXE_LINKER_FLAGS="-static-libstdc++ -static-libgcc"
  ninja -C "$bdir" -j"${JOBS:-2}" gpu_upload_test device_fallback_test train_loop_gpu
  mkdir -p "$bundle"
  cp "$bdir/tests/reader/gpu_upload_test" "$bdir/tests/reader/device_fallback_test" \
     "$bdir/samples/train_loop_gpu" "$here/gpu-check.sh" "$bundle/"
  local bad=0
  for bin in gpu_upload_test device_fallback_test train_loop_gpu; do
    # Allowed at run time: glibc's libraries, the dynamic loader, the vDSO.
    if ldd "$bundle/$bin" | grep -vE 'linux-vdso|ld-linux|lib(c|m|dl|rt|pthread)\.so' | grep -q .; then
      echo "gpu-check: $bin needs more than glibc:"; ldd "$bundle/$bin"; bad=1
    fi
  done
  [[ $bad == 0 ]] || exit 1
  echo "gpu-check: bundle ready in $bundle ($(du -sh "$bundle" | cut -f1)); copy it to the GPU node"
  echo "gpu-check: then run: <bundle>/gpu-check.sh run"
  # Dry run of the bundle here: without a GPU the tests must skip and the fallback must pass.
  "$bundle/device_fallback_test" --gtest_brief=1
  "$bundle/gpu_upload_test" --gtest_brief=1 | tail -3
}

run() {
  local work="${1:-$(mktemp -d)}"
  mkdir -p "$work"
  local log="$work/gpu-check.log"
  exec > >(tee "$log") 2>&1
  echo "== kiln gpu-check $(date -u +%FT%TZ) on $(hostname)"
  nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current \
    --format=csv,noheader 2>/dev/null || echo "(nvidia-smi not available)"
  echo "== GPU tests"
  local tests_rc=0
  "$here/gpu_upload_test" || tests_rc=$?
  "$here/device_fallback_test" --gtest_brief=1 || tests_rc=$?
  echo "== H2D bandwidth"
  "$here/train_loop_gpu" --bandwidth | tee "$work/bw.txt"
  echo "== loader end to end with upload (synthetic 224x224x3 uint8, batch 256)"
  "$here/train_loop_gpu" --synthetic "$work/ds" --samples "${SAMPLES:-20000}"
  : > "$work/loop.txt"
  for p in 1 4; do
    "$here/train_loop_gpu" "$work/ds" --epochs 2 --prefetch $p --step-us 0 | tee -a "$work/loop.txt"
  done
  # Copy time of one batch at the pinned bandwidth; a step of 2x that should hide it entirely.
  local gbps; gbps=$(awk '/pinned/ {print $3}' "$work/bw.txt")
  local copy_us; copy_us=$(awk -v g="$gbps" 'BEGIN {printf "%d", 256*224*224*3/(g*1e3)}')
  for step in "$copy_us" $((2 * copy_us)) $((8 * copy_us)); do
    "$here/train_loop_gpu" "$work/ds" --epochs 2 --prefetch 4 --step-us "$step" | tee -a "$work/loop.txt"
  done
  echo
  echo "== summary for BENCHMARKS.md (copy time hidden = 1 - (wall - step-bound) / copy time)"
  echo "| measure | value |"
  echo "|---|---|"
  awk '/h2d_bandwidth/ {printf "| H2D %s | %s GB/s |\n", $2, $3}' "$work/bw.txt"
  awk -v c="$copy_us" '/^train_loop/ {
      for (i = 1; i <= NF; ++i) { if ($i == "in") w = $(i + 1); if ($i == "samples/s,") r = $(i - 1);
        if ($i == "time") s = $(i + 1); if ($i ~ /^batches$/) n = $(i - 1) }
      sub("prefetch=", "", $2); sub("step_us=", "", $4); sub(":", "", $4)
      hidden = ""
      if ($4 > 0 && n > 0) { h = 1 - (w - s) / (n * c / 1e6); if (h < 0) h = 0; if (h > 1) h = 1;
        hidden = sprintf(", copy hidden %.0f%%", 100 * h) }
      printf "| loader + upload, prefetch %s, step %s us | %s samples/s%s |\n", $2, $4, r, hidden }' \
    "$work/loop.txt"
  echo "| GPU tests | $([[ $tests_rc == 0 ]] && echo passed || echo "FAILED (rc $tests_rc)") |"
  echo "log: $log"
  return $tests_rc
}

case "$mode" in
  build) shift; build "$@" ;;
  run) shift; run "$@" ;;
  *) sed -n '2,30p' "$0"; exit 2 ;;
esac
