#!/usr/bin/env bash
# Builds oneTBB's libtbb with ThreadSanitizer, from the Debian source package of the installed
# libtbb-dev (same version, same Debian patches), for `scripts/sanitizers.sh tsan`.
#
# Why: Debian's libtbb is not built with -fsanitize=thread, so TSan cannot see the
# synchronisation inside oneTBB (task hand-off between parallel_pipeline stages, the arena's
# queues) and reports races between tools/pack/packer.cc's serial_in_order filters that run on
# different worker threads one after the other. With an instrumented libtbb those hand-offs are
# visible and only real races remain (tests/SANITIZERS.md has the run that showed this).
#
#   scripts/build-tbb-tsan.sh [PREFIX]      # default PREFIX: /opt/tbb-tsan
#   KILN_TSAN_TBB_DIR=/opt/tbb-tsan scripts/sanitizers.sh tsan
#
# Needs: deb-src lines for the Debian mirror in /etc/apt/sources.list(.d), dpkg-dev, cmake,
# ninja-build, g++. About 15 s on 2 cores, plus the 2 MB download. Builds only libtbb (no tests,
# no examples, no tbbmalloc: without libtbbmalloc.so.2 next to it libtbb allocates with malloc,
# which TSan intercepts, instead of a pool allocator that would reuse memory behind TSan's back).
#
# Environment:
#   KILN_TBB_WORK_DIR   where the source is unpacked and built (default /tmp/kiln-tbb-tsan)
#   KILN_TBB_JOBS       parallel build jobs (default 2)
set -euo pipefail

prefix=${1:-/opt/tbb-tsan}
work=${KILN_TBB_WORK_DIR:-/tmp/kiln-tbb-tsan}
jobs=${KILN_TBB_JOBS:-2}

src_pkg=$(dpkg-query -W -f='${source:Package}' libtbb-dev)
version=$(dpkg-query -W -f='${source:Version}' libtbb-dev)
upstream=${version%%-*}
upstream=${upstream#*:}
echo "build-tbb-tsan: $src_pkg $version (the installed libtbb-dev) -> $prefix"

mkdir -p "$work"
cd "$work"
if [[ ! -d $src_pkg-$upstream ]]; then
  if ! apt-get source --download-only "$src_pkg=$version"; then
    echo "build-tbb-tsan: 'apt-get source' failed. Add a deb-src line for the same mirror as" \
      "the deb lines (e.g. 'Types: deb-src' next to 'Types: deb' in" \
      "/etc/apt/sources.list.d/debian.sources), then run 'apt-get update'." >&2
    exit 1
  fi
  dpkg-source -x "${src_pkg}_${version#*:}.dsc" "$src_pkg-$upstream"  # applies Debian's patches
fi

# TBB_SANITIZE=thread adds -fsanitize=thread to the compile and executable link flags (and turns
# IPO off, which would drop the instrumentation with g++); the shared-library link gets it too,
# so libtbb.so.12 depends on libtsan itself.
cmake -S "$src_pkg-$upstream" -B build -G Ninja \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_INSTALL_PREFIX="$prefix" \
  -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread \
  -DTBB_SANITIZE=thread \
  -DTBB_TEST=OFF -DTBB_EXAMPLES=OFF -DTBB_STRICT=OFF -DTBB4PY_BUILD=OFF \
  -DTBBMALLOC_BUILD=OFF -DTBBMALLOC_PROXY_BUILD=OFF
cmake --build build -j"$jobs"
cmake --install build

lib=$(find "$prefix" -name 'libtbb.so.12' -print -quit)
tsan_imports=0
[[ -n $lib ]] && tsan_imports=$(nm -D "$lib" | grep -c ' U __tsan_' || true)
if ((tsan_imports == 0)); then
  echo "build-tbb-tsan: $prefix has no TSan-instrumented libtbb.so.12" >&2
  exit 1
fi
echo "build-tbb-tsan: done: $lib ($tsan_imports __tsan_ imports);" \
  "TBBConfig.cmake under $(dirname "$(find "$prefix" -name TBBConfig.cmake -print -quit)")"
