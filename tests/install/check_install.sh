#!/usr/bin/env bash
# Installs kiln from BUILD_DIR into a fresh prefix, builds a stand-alone project against it with
# find_package(kiln) + kiln::reader, and runs it on a dataset packed by the installed `kiln`;
# then builds one against kiln::tools (find_package(kiln COMPONENTS tools)) that packs a tar shard.
#   tests/install/check_install.sh BUILD_DIR
set -euo pipefail
build_dir=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" > /dev/null
test -x "$work/prefix/bin/kiln"
# The image plugin that the installed kiln opens for pack and show (found from bin/ through the
# libdir), and the bash completion where bash-completion looks for it.
find "$work/prefix" -path "*/kiln/kiln_imaging.so" | grep -q . ||
  { echo "kiln_imaging.so not installed"; exit 1; }
completion="$work/prefix/share/bash-completion/completions/kiln"
bash --norc --noprofile -c 'source "$1" && complete -p kiln' _ "$completion" | grep -q "_kiln"
test -f "$work/prefix/include/kiln/reader/loader.h"
cmake -S "$here/consumer" -B "$work/consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_DISABLE_FIND_PACKAGE_OpenCV=ON \
  -DCMAKE_DISABLE_FIND_PACKAGE_TBB=ON > /dev/null
cmake --build "$work/consumer" > /dev/null
"$work/prefix/bin/kiln" pack "$root/samples/fashion-mnist" "$work/data" --size 28 --channels 1 \
  > /dev/null 2>&1
"$work/prefix/bin/kiln" verify "$work/data" > /dev/null
out=$("$work/consumer/consumer" "$work/data" 2 2>/dev/null)
echo "$out"
# 1,000 samples, 100 per class: labels 0..9 sum to 4500 in every epoch.
grep -q "epoch 1: 1000 samples, label sum 4500" <<<"$out"
# The converter library: find_package(kiln COMPONENTS tools) must find every library that the
# installed (static) kiln::tools links, libarchive included, and pack a WebDataset tar shard.
cmake -S "$here/tools_consumer" -B "$work/tools_consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" > /dev/null
cmake --build "$work/tools_consumer" > /dev/null
tar -C "$root/samples/photos" -cf "$work/photos.tar" animal fruit letter_f scene
tools_out=$("$work/tools_consumer/tools_consumer" "$work/photos.tar" "$work/from_tar")
echo "$tools_out"
# 23 photos; the four directory entries are skipped.
grep -q "packed 23, rejected 0, skipped 4" <<<"$tools_out"
"$work/prefix/bin/kiln" verify "$work/from_tar" > /dev/null
echo "install check passed"
