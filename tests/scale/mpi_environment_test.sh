#!/usr/bin/env bash
# Under Open MPI's mpirun -np 4: --part auto and the reader's rank detection read each rank.
#   tests/scale/mpi_environment_test.sh PROBE
set -euo pipefail
probe=$1
here=$(cd "$(dirname "$0")" && pwd)
source "$here/mpi_run.sh"
out=$(mpi_run -np 4 "$probe")
echo "$out"
[[ $(wc -l <<< "$out") -eq 4 ]] || { echo "FAIL: mpirun -np 4 ran $(wc -l <<< "$out") ranks"; exit 1; }
for r in 0 1 2 3; do
  grep -Eq "^part=$r/4 world=$r/4 local=$r \| part source: OMPI_COMM_WORLD_RANK=$r, OMPI_COMM_WORLD_SIZE=4 \(Open MPI\) \| world source: OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE \(Open MPI\)" <<< "$out" ||
    { echo "FAIL: rank $r"; exit 1; }
done
# torchrun's RANK/WORLD_SIZE win for readers over Open MPI's (torchrun inside mpirun).
out=$(RANK=1 WORLD_SIZE=2 mpi_run -np 2 -x RANK -x WORLD_SIZE "$probe")
grep -Eq "world=1/2 .*world source: RANK/WORLD_SIZE \(torchrun\)" <<< "$out" || { echo "FAIL: $out"; exit 1; }
grep -q "part=error .*disagrees" <<< "$out" || { echo "FAIL: $out"; exit 1; }
echo "mpirun environment: 4 ranks read as documented"
