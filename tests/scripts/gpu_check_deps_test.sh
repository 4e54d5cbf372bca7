#!/bin/bash
# The GPU check bundle (scripts/gpu-check.sh build) carries only what a bare GPU node has:
# glibc and the driver's libcuda.so.1. Rebuilding the bundle is too slow for the suite, so this
# reads the shared libraries that the suite's own build of the bundled targets needs (readelf
# NEEDED) and fails for any that neither the node has nor the bundle build links statically:
# -static-libstdc++/-static-libgcc, the static CUDA runtime, and every archive named in
# scripts/gpu-check-static.cmake. A new dependency of the reader shows up here first.
# What the bundle's configure switches off (LMDB, HDF5, the remote reader's libcurl) is allowed too.
#   gpu_check_deps_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1 build=$2
static_cmake="$src/scripts/gpu-check-static.cmake"
bins=("$build/tests/reader/gpu_upload_test" "$build/tests/reader/device_fallback_test"
      "$build/samples/train_loop_gpu")
checked=0 bad=0
# switched_off BACKEND BIN SONAME: the bundle's configure turns BACKEND off (no such library).
switched_off() {
  grep -qF -- "-DKILN_WITH_$1=OFF" "$src/scripts/gpu-check.sh" && return
  echo "FAIL: $2 needs $3 and scripts/gpu-check.sh build keeps KILN_WITH_$1 on"
  bad=1
}
for bin in "${bins[@]}"; do
  [[ -x $bin ]] || { echo "skip: $bin is not built in this configuration"; continue; }
  checked=$((checked + 1))
  while read -r soname; do
    case $soname in
      libc.so.*|libm.so.*|libdl.so.*|librt.so.*|libpthread.so.*|ld-linux*|libcuda.so.*) ;;
      libstdc++.so.*|libgcc_s.so.*) ;;  # -static-libstdc++ -static-libgcc
      libcudart.so.*) ;;                # CMAKE_CUDA_RUNTIME_LIBRARY Static
      liblmdb.so.*) switched_off LMDB "$bin" "$soname" ;;
      libhdf5*.so.*) switched_off HDF5 "$bin" "$soname" ;;
      libcurl.so.*) switched_off REMOTE "$bin" "$soname" ;;  # reading from URLs (reader/remote)
      *)
        stem=${soname%%.so*}
        if ! grep -qF "/$stem.a\"" "$static_cmake"; then
          echo "FAIL: $bin needs $soname; scripts/gpu-check-static.cmake links no $stem.a," \
               "so the bundle would not start on a GPU node without it"
          bad=1
        fi ;;
    esac
  done < <(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
done
if [[ $checked == 0 ]]; then
  echo "none of the bundled targets is built (no CUDA in this configuration)"
  exit 77  # a skip (SKIP_RETURN_CODE): nothing was checked
fi
[[ $bad == 0 ]] || exit 1
echo "every library the bundled targets need is on a bare GPU node or linked statically"
