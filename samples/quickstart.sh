#!/usr/bin/env bash
# kiln quickstart: install what is missing, build the kiln CLI (only: the test suite builds with
# scripts/setup.sh), then pack, verify, inspect and show the two datasets shipped in samples/
# (Fashion-MNIST subset, 28x28 grey; photos, 224x224 RGB + zstd), and bench the full
# Fashion-MNIST (70,000 PNGs from Debian's dataset-fashion-mnist) against what a PyTorch user
# would have had: DataLoader(ImageFolder) over the same PNG files (samples/dataloader_rate.py;
# skipped, saying so, without python3-torch and python3-torchvision).
#
#   ./samples/quickstart.sh
#
# Outputs go to samples/out/ (ignored by git; the packed samples are recreated on every run, the
# 70,000 PNGs are written once and reused).
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==== %s\n' "$*"; }

step "setup: Debian packages and build (the kiln CLI)"
KILN_BUILD_TARGETS=${KILN_BUILD_TARGETS:-kiln} scripts/setup.sh

build_dir=${KILN_BUILD_DIR:-build}
kiln=$build_dir/tools/kiln
out=samples/out
mkdir -p "$out"

# run_dataset NAME INPUT PACK-OPTIONS...
run_dataset() {
  local name=$1 input=$2
  shift 2
  local dir=$out/$name grid=$out/$name-grid.png
  rm -rf "$dir" "$grid"

  step "$name: kiln pack $input $dir $*"
  "$kiln" pack "$input" "$dir" "$@"

  step "$name: kiln verify $dir"
  "$kiln" verify "$dir"

  step "$name: kiln inspect $dir"
  "$kiln" inspect "$dir"

  step "$name: kiln show $dir --grid 4x8 -o $grid"
  "$kiln" show "$dir" --grid 4x8 -o "$grid"
}

run_dataset fashion-mnist samples/fashion-mnist --size 28 --channels 1 --format shards
run_dataset photos samples/photos --size 224 --channels 3 --format shards --compress zstd

# The bench: the full Fashion-MNIST, large enough for a steady rate, as PNG files and packed.
threads=2
step "full Fashion-MNIST: 70,000 PNGs in $out/fashion-mnist-full-png (written once)"
/usr/bin/python3 samples/make_fashion_mnist.py "$out/fashion-mnist-full-png"
full=$out/fashion-mnist-full
rm -rf "$full"
step "full Fashion-MNIST: kiln pack $out/fashion-mnist-full-png $full --size 28 --channels 1"
"$kiln" pack "$out/fashion-mnist-full-png" "$full" --size 28 --channels 1 --format shards

step "full Fashion-MNIST: kiln bench $full --epochs 10 --threads $threads"
"$kiln" bench "$full" --epochs 10 --threads "$threads" | tee "$out/bench-kiln.txt"

step "full Fashion-MNIST, what you would have had: DataLoader(ImageFolder) over the PNGs, $threads workers"
/usr/bin/python3 samples/dataloader_rate.py "$out/fashion-mnist-full-png" --workers "$threads" |
  tee "$out/bench-dataloader.txt"

step "done"
echo "packed datasets: $out/fashion-mnist $out/photos $full"
echo "bench, same images, batch 256, $threads threads/workers:"
echo "  kiln:       $(grep -m1 -o '[0-9,.]* samples/s' "$out/bench-kiln.txt" || echo '(see above)')"
echo "  DataLoader: $(grep -m1 -o '[0-9,.]* samples/s' "$out/bench-dataloader.txt" || cat "$out/bench-dataloader.txt")"
echo "grids to look at: $out/fashion-mnist-grid.png $out/photos-grid.png"
