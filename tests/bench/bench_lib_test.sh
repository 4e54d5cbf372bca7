#!/bin/bash
# bench/bench_lib.sh, the preamble the bench scripts source: the paths it sets, the temporary
# folders it removes at exit, and that each bench/*.sh that sets up a kiln run sources it.
#   bench_lib_test.sh SOURCE_DIR
set -euo pipefail
src=$(cd "$1" && pwd)
fail() { echo "FAIL: $*"; exit 1; }
out=$(cd / && KILN_BUILD_DIR=b2 bash -c "source '$src/bench/bench_lib.sh'
  bench_tmpdir t; touch \"\$t/x\"; echo \"\$PWD|\$repo|\$build|\$kiln|\$synth|\$t\"")
IFS='|' read -r pwd repo build kiln synth tmp <<<"$out"
[[ $pwd == "$src" && $repo == "$src" ]] || fail "not at the repository root: $out"
[[ $build == b2 && $kiln == "$src/b2/tools/kiln" ]] || fail "KILN_BUILD_DIR not followed: $out"
[[ $synth == "$src/b2/bench/make_synthetic_dataset" ]] || fail "synth: $out"
[[ -n $tmp && ! -e $tmp ]] || fail "bench_tmpdir's $tmp is left after exit"
kiln=$(KILN=/opt/k bash -c "source '$src/bench/bench_lib.sh'; echo \"\$kiln\"")
[[ $kiln == /opt/k ]] || fail "KILN does not override the CLI: $kiln"
for f in ab hdf5_vs_shards lmdb_vs_shards pack_and_read_fashion_mnist partitioned_pack \
         sampler_scaling; do
  bash -n "$src/bench/$f.sh" || fail "bench/$f.sh does not parse"
  grep -q 'source "$(dirname "$0")/bench_lib.sh"' "$src/bench/$f.sh" ||
    fail "bench/$f.sh does not source bench_lib.sh"
done
echo "bench_lib.sh: paths, tmp cleanup and its users checked"
