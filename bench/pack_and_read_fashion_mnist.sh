#!/usr/bin/env bash
# Packs the full 70,000-file Fashion-MNIST tree and reads it back: the numbers in BENCHMARKS.md.
# Usage: bench/pack_and_read_fashion_mnist.sh [WORKDIR]   (default /tmp/kiln-bench)
# shellcheck source=bench/bench_lib.sh
source "$(dirname "$0")/bench_lib.sh"
work=${1:-/tmp/kiln-bench}
bench_fashion_mnist "$work"
bench_machine
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
