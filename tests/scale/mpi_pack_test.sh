#!/usr/bin/env bash
# A partitioned pack under Open MPI: `mpirun -np 4 kiln pack ... --part auto` (each rank one
# part, from OMPI_COMM_WORLD_RANK/_SIZE), then `kiln merge`: byte-identical to `kiln pack --of
# 4` on one machine and sample-identical to a plain pack.
#   tests/scale/mpi_pack_test.sh BUILD_DIR KILN
set -euo pipefail
build=$(cd "$1" && pwd)
kiln=$2
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
source "$here/mpi_run.sh"
source "$here/pack_lib.sh"
work=$build/scale/mpi_pack_test
rm -rf "$work"
mkdir -p "$work"
export PYTHONPATH=$build/python
fm=$root/samples/fashion-mnist
args=(--size 28 --channels 1 --shard-size 64KiB --threads 1 --compress zstd)
mpi_run -np 4 "$kiln" pack "$fm" "$work/out" "${args[@]}" --part auto > "$work/ranks.log" 2>&1 ||
  { cat "$work/ranks.log"; fail "mpirun -np 4 kiln pack --part auto"; }
for r in 0 1 2 3; do
  grep -q "part $r of 4 from OMPI_COMM_WORLD_RANK=$r, OMPI_COMM_WORLD_SIZE=4 (Open MPI)" "$work/ranks.log" ||
    { cat "$work/ranks.log"; fail "rank $r did not say where its part came from"; }
done
"$kiln" merge "$work/out.parts" "$work/out" > /dev/null
"$kiln" pack "$fm" "$work/one-machine" "${args[@]}" --of 4 > /dev/null 2>&1
"$kiln" pack "$fm" "$work/plain" "${args[@]}" > /dev/null 2>&1
same_bytes "$work/one-machine" "$work/out"
same_samples "$work/plain" "$work/out"
echo "mpirun -np 4 kiln pack --part auto + kiln merge == kiln pack --of 4 (bytes), == plain pack (samples)"
