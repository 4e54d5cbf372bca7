#!/usr/bin/env bash
# Packs the full 70,000-file Fashion-MNIST tree and reads it back: the numbers in BENCHMARKS.md.
# Usage: bench/pack_and_read_fashion_mnist.sh [WORKDIR]   (default /tmp/kiln-bench)
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-/tmp/kiln-bench}
kiln=${KILN_BUILD_DIR:-build}/tools/kiln
mkdir -p "$work"
if [ ! -f "$work/fashion-mnist/.complete" ]; then
  /usr/bin/python3 samples/make_fashion_mnist.py "$work/fashion-mnist" --split both
  touch "$work/fashion-mnist/.complete"
fi
echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -m)"
# Drop nothing from the page cache: the files were just written, so this is a warm-cache pack.
for compress in none zstd; do
  out="$work/fmnist-$compress"
  rm -rf "$out"
  echo "== kiln pack (compress $compress)"
  "$kiln" pack "$work/fashion-mnist" "$out" --size 28 --channels 1 --compress "$compress" --json
  echo "== kiln verify --deep"
  /usr/bin/time -f "verify wall %e s, max RSS %M KiB" "$kiln" verify "$out" --deep
  for threads in 1 2; do
    echo "== kiln bench (threads $threads, batch 256, prefetch 4, shuffled, 5 epochs)"
    "$kiln" bench "$out" --threads "$threads" --batch-size 256 --prefetch 4 --epochs 5 --json
  done
done
