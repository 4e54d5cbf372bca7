#!/usr/bin/env bash
# kiln quickstart: install what is missing, build, then pack, verify, inspect, show and bench the
# two datasets shipped in samples/ (Fashion-MNIST subset, 28x28 grey; photos, 224x224 RGB + zstd).
#
#   ./samples/quickstart.sh
#
# Outputs go to samples/out/ (ignored by git, recreated on every run).
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==== %s\n' "$*"; }

step "setup: Debian packages and build"
scripts/setup.sh

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

  step "$name: kiln bench $dir --epochs 5"
  "$kiln" bench "$dir" --epochs 5
}

run_dataset fashion-mnist samples/fashion-mnist --size 28 --channels 1 --format shards
run_dataset photos samples/photos --size 224 --channels 3 --format shards --compress zstd

step "done"
echo "packed datasets: $out/fashion-mnist $out/photos"
echo "grids to look at: $out/fashion-mnist-grid.png $out/photos-grid.png"
