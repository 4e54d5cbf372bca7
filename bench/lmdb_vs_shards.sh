#!/usr/bin/env bash
# Packs the 70,000-image Fashion-MNIST tree as shards and as LMDB and reads both back with
# `kiln bench` (shuffled, 2 threads, 5 epochs), in one run: the LMDB numbers in BENCHMARKS.md.
# Usage: bench/lmdb_vs_shards.sh [WORKDIR]   (default /tmp/kiln-bench; KILN_BUILD_DIR: build)
# shellcheck source=bench/bench_lib.sh
source "$(dirname "$0")/bench_lib.sh"
work=${1:-/tmp/kiln-bench}
bench_fashion_mnist "$work"
bench_machine
for format in shards lmdb; do
  out="$work/fmnist-$format"
  rm -rf "$out"
  echo "== kiln pack --format $format"
  "$kiln" pack "$work/fashion-mnist" "$out" --size 28 --channels 1 --format "$format" --json \
    2>/dev/null
  "$kiln" verify "$out" --deep
done
for round in 1 2 3; do
  for format in shards lmdb; do
    echo "== kiln bench $format (round $round: threads 2, batch 256, shuffled, 5 epochs)"
    "$kiln" bench "$work/fmnist-$format" --threads 2 --epochs 5 --json 2>/dev/null
  done
done
