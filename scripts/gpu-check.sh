#!/usr/bin/env bash
# The one-shot GPU check of kiln's device path, for a GPU node that has the NVIDIA driver but
# none of kiln's libraries and no network. It cannot report a pass it did not earn: every row of
# its summary is "passed", "FAILED ...", a measured number, or "not run: <why>", and it exits
# non-zero when any required row failed or did not run (so a machine without a usable GPU
# always fails, saying "not run: no GPU").
#
# Two steps, on two machines:
#
#   1. On a CPU build machine with kiln's build dependencies and the CUDA toolkit (no GPU
#      needed):   scripts/gpu-check.sh build [BUNDLE_DIR]        (default: build-gpu-check/bundle)
#      configures a reader-only build (no tools, no Python) in build-gpu-check/ with zstd,
#      xxHash, GoogleTest, the CUDA runtime (cudart_static) and libstdc++ linked statically
#      (scripts/gpu-check-static.cmake), builds the GPU tests and the train_loop_gpu harness, and
#      copies them with this script into BUNDLE_DIR (about 13 MB; build-gpu-check/ is git-ignored,
#      so copy the bundle explicitly). The bundle needs only glibc (as new as the build
#      machine's: Debian 12 = 2.36) and libcuda.so.1 from the node's driver; `ldd` of each binary
#      is checked for anything else. It ends with a dry run of the bundle, which on a machine
#      without a GPU must say "not run: no GPU" and fail.
#   2. Copy the bundle to the node (scp -r / rsync) and run, in under 5 minutes:
#         BUNDLE_DIR/gpu-check.sh run [WORK_DIR]          (default: a fresh mktemp dir)
#      WORK_DIR gets a synthetic 224x224x3 uint8 dataset (put it on local disk), the log and
#      summary.md. Steps, each a row of the summary:
#        0  environment: glibc, GPU, driver, max SM clock, PCIe link; the test list (fail-fast)
#        1  gpu_upload_test with KILN_REQUIRE_GPU=1 (a skip is a failure; no test run is a
#           failure): byte-for-byte device vs host batches (small and full-size 256x224x224x3,
#           prefetch 1 and 4, two epochs), the release protocol under a slow consumer, SetEpoch
#           and destruction while the consumer still reads the held batch, the fused kernel fp32
#           and fp16 bit-exact against the host reference (small and 256x3x224x224 with crop and
#           flip); then device_fallback_test
#        2  compute-sanitizer memcheck and synccheck on gpu_upload_test (if on PATH)
#        3  H2D bandwidth, pinned vs pageable (256 MiB x 10)
#        4  end-to-end samples/s, the same loop with upload and host-only, device checksum
#           compared with the host's (a mismatch fails the row)
#        5  share of the copy hidden behind a step of 4x and 8x the copy time:
#           1 - (wall_upload - wall_host_only) / (timed batches x copy time), pipeline fill
#           excluded (walls are timed from the first batch)
#        6  the same loop synchronised after every step: exposed copy time per step
#        7  the fused kernel's throughput (median of 20, events) vs torch's equivalent
#           expression, when python3 with CUDA torch is on the node
#        8  the Python device="cuda" path, when the kiln Python package is importable there
#
#   Also: scripts/gpu-check.sh overlap HOST_LINE UPLOAD_LINE COPY_US  prints the hidden share
#   computed from two train_loop_gpu result lines (tested in the suite: GpuCheckScript).
#
# KILN_GPU_CHECK_BINS (colon-separated directories) lets `run` use binaries from a build tree
# instead of the bundle (the suite's dry run does this).
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
    -DKILN_WITH_LMDB=OFF -DKILN_WITH_HDF5=OFF -DKILN_WITH_REMOTE=OFF \
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
  echo "gpu-check: dry run of the bundle here (without a GPU it must fail with 'not run: no GPU'):"
  local rc=0
  "$bundle/gpu-check.sh" run || rc=$?
  echo "gpu-check: dry run exited $rc"
}

# The value of `key=value` in a result line: kv KEY LINE.
kv() {
  local key="$1" line="$2" tok
  for tok in $line; do
    if [[ $tok == "$key="* ]]; then echo "${tok#*=}"; return 0; fi
  done
  return 1
}

# Share of the copy hidden behind the step, from a host-only and an upload line of
# train_loop_gpu (same loop, same threads and prefetch): 1 - (wall_upload - wall_host) /
# (timed_batches x copy_us), clamped to [0, 1]. Prints e.g. "62%".
overlap() {
  local host="$1" up="$2" copy_us="$3"
  local wh wu n
  wh=$(kv wall_s "$host") && wu=$(kv wall_s "$up") && n=$(kv timed_batches "$up") || {
    echo "overlap: cannot parse wall_s/timed_batches from the lines" >&2; return 1; }
  awk -v wh="$wh" -v wu="$wu" -v n="$n" -v c="$copy_us" 'BEGIN {
    if (n <= 0 || c <= 0) { print "n/a"; exit 1 }
    h = 1 - (wu - wh) / (n * c / 1e6); if (h < 0) h = 0; if (h > 1) h = 1
    printf "%.0f%%\n", 100 * h }'
}

bin_path() {
  local name="$1" d
  local IFS=':'
  for d in $here ${KILN_GPU_CHECK_BINS:-}; do
    [[ -n $d && -x "$d/$name" ]] && { echo "$d/$name"; return 0; }
  done
  return 1
}

run() {
  local work="${1:-$(mktemp -d)}"
  mkdir -p "$work"
  local log="$work/gpu-check.log"
  : > "$log"
  local rows=() failed=0 missing=0
  row() { rows+=("| $1 | $2 |"); }
  fail_row() { row "$1" "FAILED: $2"; failed=1; }
  notrun_row() { row "$1" "not run: $2"; missing=1; }
  optional_row() { row "$1" "not available: $2"; }
  say() { echo "$@" | tee -a "$log"; }
  # Runs a command with its output to the log (and the terminal); returns its exit status.
  logged() { local rc=0; "$@" > >(tee -a "$log") 2>&1 || rc=$?; wait; return $rc; }

  say "== kiln gpu-check $(date -u +%FT%TZ) on $(hostname)"
  say "glibc: $(getconf GNU_LIBC_VERSION 2>/dev/null || echo unknown)"
  local smi=""
  if command -v nvidia-smi >/dev/null 2>&1; then
    smi=$(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,pcie.link.gen.max,pcie.link.gen.current,pcie.link.width.current \
      --format=csv,noheader 2>&1 || true)
  fi
  say "nvidia-smi (name, driver, max SM MHz, PCIe gen max/current, width): ${smi:-not found}"
  row "environment" "glibc $(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}'); ${smi:-no nvidia-smi}"

  local upload train fallback
  upload=$(bin_path gpu_upload_test || true)
  train=$(bin_path train_loop_gpu || true)
  fallback=$(bin_path device_fallback_test || true)
  local gpu_rows=("GPU tests (skips fail)" "compute-sanitizer memcheck" "compute-sanitizer synccheck"
    "H2D bandwidth pinned / pageable" "end to end checksum, prefetch 1 and 4"
    "end to end, upload vs host-only" "copy hidden, step 4x copy"
    "copy hidden, step 8x copy" "per-step synchronised loop" "fused kernel throughput"
    "Python device=\"cuda\"")
  # Is a GPU usable? train_loop_gpu --probe says so (exit 0) or why not (exit 1).
  local probe="" probe_rc=1
  if [[ -n $train ]]; then
    probe_rc=0; probe=$("$train" --probe 2>&1) || probe_rc=$?
    say "probe: $probe"
  fi
  if [[ -z $train || -z $upload || $probe_rc != 0 ]]; then
    local why="no GPU"
    [[ -z $train || -z $upload ]] && why="no GPU binaries (gpu_upload_test, train_loop_gpu: build with nvcc)"
    [[ $why == "no GPU" && -n $probe ]] && why="no GPU ($probe)"
    local r
    for r in "${gpu_rows[@]}"; do notrun_row "$r" "$why"; done
  else
    # 1. The GPU tests: list first (fail-fast), then every test with skips turned into failures.
    local list_rc=0 n_listed
    logged "$upload" --gtest_list_tests || list_rc=$?
    n_listed=$("$upload" --gtest_list_tests 2>/dev/null | grep -c '^  ' || true)
    local t_rc=0 out="$work/gpu_upload_test.txt"
    KILN_REQUIRE_GPU=1 "$upload" > "$out" 2>&1 || t_rc=$?
    cat "$out" >> "$log"
    local n_ok n_skip
    n_ok=$(grep -c '^\[       OK \]' "$out" || true)
    n_skip=$(grep -c '^\[  SKIPPED \]' "$out" || true)
    local f_rc=0
    [[ -n $fallback ]] && { logged "$fallback" --gtest_brief=1 || f_rc=$?; }
    if [[ $list_rc != 0 || $t_rc != 0 || $n_skip != 0 || $n_ok == 0 || $n_ok != "$n_listed" || $f_rc != 0 ]]; then
      fail_row "GPU tests (skips fail)" "gpu_upload_test rc $t_rc, $n_ok of $n_listed ok, $n_skip skipped; device_fallback_test rc $f_rc"
    else
      row "GPU tests (skips fail)" "passed: $n_ok of $n_listed, none skipped; device_fallback_test ok"
    fi
    # 2. compute-sanitizer on the protocol tests (the full-size ones take too long under it).
    local tool
    for tool in memcheck synccheck; do
      if command -v compute-sanitizer >/dev/null 2>&1; then
        local s_rc=0
        KILN_REQUIRE_GPU=1 logged compute-sanitizer --tool "$tool" --error-exitcode 9 "$upload" \
          --gtest_filter='-*FullSize*:*Past4Gi*' || s_rc=$?
        if [[ $s_rc == 0 ]]; then row "compute-sanitizer $tool" "passed (0 errors)"; else fail_row "compute-sanitizer $tool" "rc $s_rc"; fi
      else
        optional_row "compute-sanitizer $tool" "compute-sanitizer not on PATH"
      fi
    done
    # 3. H2D bandwidth.
    local bw_rc=0 bw
    bw=$("$train" --bandwidth 2>&1) || bw_rc=$?
    say "$bw"
    local pinned pageable
    pinned=$(echo "$bw" | awk '/^h2d_bandwidth/ && /kind=pinned/' | head -1)
    pageable=$(echo "$bw" | awk '/^h2d_bandwidth/ && /kind=pageable/' | head -1)
    local gbps; gbps=$(kv gbps "$pinned" || true)
    if [[ $bw_rc != 0 || -z $gbps ]]; then
      fail_row "H2D bandwidth pinned / pageable" "rc $bw_rc"
    else
      row "H2D bandwidth pinned / pageable" "$gbps / $(kv gbps "$pageable" || echo '?') GB/s"
    fi
    # 4-6. The loop. One batch is 256 x 224x224x3 bytes; its copy time at the pinned rate.
    local ds="$work/ds"
    logged "$train" --synthetic "$ds" --samples "${SAMPLES:-12800}" || true
    local copy_us=0
    [[ -n $gbps ]] && copy_us=$(awk -v g="$gbps" 'BEGIN {printf "%d", 256*224*224*3/(g*1e3)}')
    say "copy time of one batch at $gbps GB/s: $copy_us us"
    loop() {  # loop ARGS... -> prints the result line; returns non-zero on failure
      local line rc=0
      line=$("$train" "$ds" --epochs 2 --threads "${THREADS:-8}" "$@" 2>&1) || rc=$?
      echo "$line" >> "$log"
      echo "$line" | grep '^train_loop ' | tail -1
      return $rc
    }
    # Full-size correctness end to end: the device checksum of every uploaded byte (position
    # weighted) against the host's, prefetch 1 and 4, two epochs (untimed: the host sums).
    local v_rc=0 p v
    for p in 1 4; do
      v=$(loop --prefetch "$p" --step-us 0 --verify) || v_rc=$?
      if [[ $(kv checksum_ok "$v" || true) != yes && $v_rc == 0 ]]; then v_rc=1; fi
    done
    if [[ $v_rc == 0 ]]; then
      row "end to end checksum, prefetch 1 and 4" "passed: device checksum equals the host's"
    else
      fail_row "end to end checksum, prefetch 1 and 4" "rc $v_rc (see the log)"
    fi
    local e_up e_host e_rc=0
    e_up=$(loop --prefetch 4 --step-us 0) || e_rc=$?
    e_host=$(loop --prefetch 4 --step-us 0 --host-only) || e_rc=$?
    if [[ $e_rc != 0 || -z $e_up || -z $e_host ]]; then
      fail_row "end to end, upload vs host-only" "rc $e_rc"
    else
      row "end to end, upload vs host-only" "$(kv samples_per_s "$e_up") vs $(kv samples_per_s "$e_host") samples/s (pinned=$(kv pinned "$e_up"), threads $(kv threads "$e_up"), prefetch 4)"
    fi
    local mult
    for mult in 4 8; do
      local name="copy hidden, step ${mult}x copy"
      if [[ $copy_us == 0 ]]; then notrun_row "$name" "no bandwidth figure"; continue; fi
      local step=$((mult * copy_us)) h u o_rc=0
      u=$(loop --prefetch 4 --step-us "$step") || o_rc=$?
      h=$(loop --prefetch 4 --step-us "$step" --host-only) || o_rc=$?
      if [[ $o_rc != 0 || -z $u || -z $h ]]; then fail_row "$name" "rc $o_rc"; continue; fi
      row "$name" "$(overlap "$h" "$u" "$copy_us") (step $step us; wall $(kv wall_s "$u") s vs $(kv wall_s "$h") s host-only)"
    done
    if [[ $copy_us == 0 ]]; then
      notrun_row "per-step synchronised loop" "no bandwidth figure"
    else
      local step=$((4 * copy_us)) su sh s_rc=0
      su=$(loop --prefetch 4 --step-us "$step" --sync-every-step) || s_rc=$?
      sh=$(loop --prefetch 4 --step-us "$step" --sync-every-step --host-only) || s_rc=$?
      if [[ $s_rc != 0 || -z $su || -z $sh ]]; then
        fail_row "per-step synchronised loop" "rc $s_rc"
      else
        row "per-step synchronised loop" "$(awk -v a="$(kv wall_s "$su")" -v b="$(kv wall_s "$sh")" -v n="$(kv timed_batches "$su")" \
          'BEGIN {printf "%.0f us exposed per step", (a - b) / n * 1e6}') (copy $copy_us us; hidden $(overlap "$sh" "$su" "$copy_us"))"
      fi
    fi
    # 7. The fused kernel, and torch's expression on the same tensor when torch has CUDA.
    local k_rc=0 kout
    kout=$("$train" --kernel-bench 2>&1) || k_rc=$?
    say "$kout"
    local torch_txt="torch: not available"
    if command -v python3 >/dev/null 2>&1 &&
       python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
      torch_txt=$(python3 - <<'EOF' 2>&1 | tail -1
import torch
x = torch.randint(0, 256, (256, 256, 256, 3), dtype=torch.uint8, device="cuda")
m = torch.tensor([0.485, 0.456, 0.406], device="cuda").view(1, 3, 1, 1) * 255
s = torch.tensor([0.229, 0.224, 0.225], device="cuda").view(1, 3, 1, 1) * 255
ms = []
for _ in range(25):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    y = x[:, 16:240, 16:240].permute(0, 3, 1, 2).float().sub_(m).div_(s).half()
    b.record(); b.synchronize(); ms.append(a.elapsed_time(b))
med = sorted(ms[5:])[len(ms[5:]) // 2]
print("torch fp16 median_ms=%.3f gbps=%.1f" % (med, (256*224*224*3*(1+2)) / med / 1e6))
EOF
)
      say "$torch_txt"
    fi
    if [[ $k_rc != 0 ]]; then
      fail_row "fused kernel throughput" "rc $k_rc"
    else
      row "fused kernel throughput" "$(echo "$kout" | awk '/^kernel /' | tr '\n' ';') $torch_txt"
    fi
    # 8. Python device="cuda" (needs the kiln extension built for this node's python3).
    if command -v python3 >/dev/null 2>&1 && python3 -c 'import kiln' >/dev/null 2>&1; then
      local p_rc=0
      KILN_REQUIRE_GPU=1 logged python3 -m pytest -q -x -k cuda "${KILN_PYTHON_TESTS:-$here/../python/tests}" || p_rc=$?
      if [[ $p_rc == 0 ]]; then row "Python device=\"cuda\"" "passed"; else fail_row "Python device=\"cuda\"" "pytest rc $p_rc"; fi
    else
      optional_row "Python device=\"cuda\"" "the kiln Python package is not importable on this node"
    fi
  fi

  {
    echo
    echo "## kiln gpu-check, $(date -u +%F), $(hostname)"
    echo
    echo "| check | result |"
    echo "|---|---|"
    printf '%s\n' "${rows[@]}"
  } | tee "$work/summary.md" | tee -a "$log"
  echo "log: $log; summary: $work/summary.md"
  if [[ $failed != 0 ]]; then echo "gpu-check: FAILED"; return 1; fi
  if [[ $missing != 0 ]]; then echo "gpu-check: INCOMPLETE (checks not run)"; return 3; fi
  echo "gpu-check: every check ran and none failed"
  return 0
}

case "$mode" in
  build) shift; build "$@" ;;
  run) shift; run "$@" ;;
  overlap) shift; overlap "$@" ;;
  *) sed -n '2,45p' "$0"; exit 2 ;;
esac
