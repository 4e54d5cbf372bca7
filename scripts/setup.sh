#!/usr/bin/env bash
# One setup step for kiln: install the Debian packages that are missing, configure (once) and
# build. Idempotent and quick when everything is present.
#
#   scripts/setup.sh
#
# Environment:
#   KILN_BUILD_DIR    build folder (default: build), relative to the repository root
#   KILN_CMAKE_ARGS   extra arguments for the first cmake configure (e.g. -DKILN_WITH_CUDA=OFF)
#   KILN_BUILD_TARGETS  the CMake targets to build, space-separated (e.g. "kiln" for the CLI and
#                     the libraries it links; samples/quickstart.sh builds only that). Default:
#                     all, the test suite included.
set -euo pipefail

# Everything kiln needs to build, test and run its samples and benchmarks. Extend here.
KILN_DEBIAN_PACKAGES=(
  # build
  build-essential cmake ninja-build pkg-config git
  # scripts/format.sh and the ClangFormat test: one layout for every C++ file (.clang-format)
  clang-format
  # libraries
  libzstd-dev libxxhash-dev nlohmann-json3-dev libcli11-dev libtbb-dev libopencv-dev
  libgtest-dev libgmock-dev libbenchmark-dev liblmdb-dev libhdf5-dev
  # JPEG straight to RGB in the converter (tools/imaging/jpeg_decoder.h)
  libjpeg62-turbo-dev libexif-dev
  # first frames of GIF and animated WebP (tools/imaging/first_frame_decoder.h)
  libgif-dev libwebp-dev
  # bench/png_decode_speed: libspng and libpng against OpenCV's PNG path (BENCHMARKS.md)
  libspng-dev libpng-dev
  # WebDataset tar shards as converter input (tools/sources/tar_source.h)
  libarchive-dev
  # TFRecord files as converter input (tools/sources/tfrecord_source.h): zlib for gzip files, protobuf
  # (lite runtime, protoc) for tf.train.Example; the independent test writer's CRC-32C and
  # protobuf (tests/tools/tfrecord_writer.py)
  zlib1g-dev libprotobuf-dev protobuf-compiler python3-crc32c python3-protobuf
  # real data for tests and samples: images and reference tools from Debian packages
  dataset-fashion-mnist opencv-doc golang-1.19-src golang-github-disintegration-imaging-dev
  # tools the data scripts use
  libjpeg-turbo-progs imagemagick python3 python3-numpy python3-pil zstd
  # bench/larger_than_memory.sh: fio measures the disk; io_uring for bench/cold_read_modes.cc
  fio liburing-dev
  # xxhsum: the manifest interop test checks kiln.json's hashes without kiln
  xxhash
  # LMDB interop tests: python3-lmdb reads our environments, mdb_stat inspects them
  python3-lmdb lmdb-utils
  # Python package (python/): bindings, DLPack, and its tests and training sample
  python3-dev pybind11-dev libdlpack-dev python3-pytest python3-torch python3-torchvision
  # `pip install .` and `python3 -m build --wheel` (pyproject.toml, offline with
  # --no-build-isolation), the venv install test, and mypy --strict on the type hints
  python3-pip python3-venv python3-setuptools python3-wheel python3-build mypy
  # HDF5 interop tests: h5py (+ hdf5plugin for zstd chunks) reads our files, h5dump shows them
  python3-h5py python3-hdf5plugin hdf5-tools
  # scale tests (tests/scale/): a one-node Slurm cluster on 127.0.0.1 and Open MPI's mpirun
  slurmctld slurmd slurm-client munge openmpi-bin
  # remote reading (reader/remote/): libcurl signs S3 requests; the tests run a real one-node
  # OpenStack Swift with s3api (+ memcached) and nginx on 127.0.0.1; rclone uploads a dataset
  libcurl4-openssl-dev swift-proxy swift-object swift-container swift-account memcached nginx
  rclone
  # bench/remote_boto3.py: what a PyTorch user writes instead (DataLoader workers, boto3 GETs);
  # wrk: bench/remote.sh's bound for random small range GETs (bench/wrk_random_ranges.lua)
  python3-boto3 wrk
)

# KILN_SETUP_EXTRA_PACKAGES: more packages for one caller (bench/run.sh adds the peers' own).
read -r -a extra_packages <<<"${KILN_SETUP_EXTRA_PACKAGES:-}"
KILN_DEBIAN_PACKAGES+=("${extra_packages[@]}")

cd "$(dirname "$0")/.."
build_dir=${KILN_BUILD_DIR:-build}

# --- 1. Debian packages ------------------------------------------------------------------------
installed=$(dpkg-query -W -f='${Package} ${Status}\n' "${KILN_DEBIAN_PACKAGES[@]}" 2>/dev/null |
  awk '$NF == "installed" && $(NF-1) == "ok" { print $1 }' || true)
missing=()
for pkg in "${KILN_DEBIAN_PACKAGES[@]}"; do
  grep -qxF -- "$pkg" <<<"$installed" || missing+=("$pkg")
done

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#KILN_DEBIAN_PACKAGES[@]} Debian packages present"
else
  echo "setup: installing ${#missing[@]} missing Debian packages: ${missing[*]}"
  if [[ $(id -u) -eq 0 ]]; then
    as_root=()
  elif command -v sudo >/dev/null; then
    as_root=(sudo)
  else
    echo "setup: error: not root and no sudo; as root, run:" >&2
    echo "  apt-get update && apt-get install -y --no-install-recommends ${missing[*]}" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${as_root[@]}" apt-get update -qq
  "${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# --- 2. configure (once) -----------------------------------------------------------------------
if [[ ! -f $build_dir/CMakeCache.txt ]]; then
  echo "setup: configuring $build_dir (Ninja, Release)"
  # shellcheck disable=SC2086  # KILN_CMAKE_ARGS is a list of words on purpose.
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release ${KILN_CMAKE_ARGS:-}
elif [[ ! -f $build_dir/build.ninja && ! -f $build_dir/Makefile ]]; then
  echo "setup: finishing the configure of $build_dir"
  cmake -S . -B "$build_dir"
fi

# --- 3. build ----------------------------------------------------------------------------------
read -r -a targets <<<"${KILN_BUILD_TARGETS:-}"
if ((${#targets[@]} == 0)); then
  echo "setup: building $build_dir"
  cmake --build "$build_dir" -j"$(nproc)"
else
  echo "setup: building $build_dir, targets: ${targets[*]}"
  cmake --build "$build_dir" -j"$(nproc)" --target "${targets[@]}"
fi
echo "setup: done"
