#!/usr/bin/env bash
# Packs the 70,000-image Fashion-MNIST tree as shards and as HDF5 (plain and zstd) and reads them back with
# `kiln bench` (shuffled, 2 threads, 5 epochs), in one run: the HDF5 numbers in BENCHMARKS.md.
# Usage: bench/hdf5_vs_shards.sh [WORKDIR]   (default /tmp/kiln-bench; KILN_BUILD_DIR: build)
# shellcheck source=bench/bench_lib.sh
source "$(dirname "$0")/bench_lib.sh"
work=${1:-/tmp/kiln-bench}
bench_fashion_mnist "$work"
bench_machine
# name format compression
variants=("shards shards none" "hdf5 hdf5 none" "hdf5-zstd hdf5 zstd")
for v in "${variants[@]}"; do
  read -r name format compress <<<"$v"
  out="$work/fmnist-$name"
  rm -rf "$out"
  echo "== kiln pack --format $format --compress $compress"
  "$kiln" pack "$work/fashion-mnist" "$out" --size 28 --channels 1 --format "$format" \
    --compress "$compress" --json 2>/dev/null
  "$kiln" verify "$out" --deep
done
for round in 1 2 3; do
  for v in "${variants[@]}"; do
    read -r name _ _ <<<"$v"
    echo "== kiln bench $name (round $round: threads 2, batch 256, shuffled, 5 epochs)"
    "$kiln" bench "$work/fmnist-$name" --threads 2 --epochs 5 --json 2>/dev/null
  done
done
