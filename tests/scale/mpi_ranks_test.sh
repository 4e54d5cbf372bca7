#!/usr/bin/env bash
# Under Open MPI's mpirun -np 4: --part auto and the reader's rank detection read each rank, and
# 4 Python readers read one epoch of a packed dataset exactly once, with equal batch counts.
#   tests/scale/mpi_ranks_test.sh BUILD_DIR KILN PROBE
set -euo pipefail
build=$1 kiln=$2 probe=$3
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
source "$here/mpi_run.sh"
source "$here/check_ranks.sh"
work=$build/scale/mpi_ranks_test
rm -rf "$work"
mkdir -p "$work/readers"
out=$(mpi_run -np 4 "$probe")
echo "$out"
[[ $(wc -l <<< "$out") -eq 4 ]] || { echo "FAIL: mpirun -np 4 ran $(wc -l <<< "$out") ranks"; exit 1; }
for r in 0 1 2 3; do
  grep -Eq "^part=$r/4 world=$r/4 local=$r \| part source: OMPI_COMM_WORLD_RANK=$r, OMPI_COMM_WORLD_SIZE=4 \(Open MPI\) \| world source: OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE \(Open MPI\)" <<< "$out" ||
    { echo "FAIL: rank $r"; exit 1; }
done
# A RANK/WORLD_SIZE exported into every rank (mpirun -x) without torchrun's TORCHELASTIC_RUN_ID
# disagrees with Open MPI on rank 0: both detections refuse, naming the variables.
out=$(RANK=1 WORLD_SIZE=2 mpi_run -np 2 -x RANK -x WORLD_SIZE "$probe")
[[ $(grep -c "part=error world=error .*TORCHELASTIC_RUN_ID is not set" <<< "$out") -eq 1 ]] || { echo "FAIL: $out"; exit 1; }
grep -q "part=1/2 world=1/2 " <<< "$out" || { echo "FAIL: $out"; exit 1; }
# With TORCHELASTIC_RUN_ID (torchrun inside mpirun) RANK wins for both.
out=$(RANK=1 WORLD_SIZE=2 TORCHELASTIC_RUN_ID=x mpi_run -np 2 -x RANK -x WORLD_SIZE -x TORCHELASTIC_RUN_ID "$probe")
[[ $(grep -c "^part=1/2 world=1/2 .*world source: RANK/WORLD_SIZE (torchrun)" <<< "$out") -eq 2 ]] || { echo "FAIL: $out"; exit 1; }
# 1019 samples (Fashion-MNIST and the photos), so the 4 shares differ by one.
mkdir -p "$work/mixed"
cp -r "$root/samples/fashion-mnist/." "$work/mixed/"
cp -r "$root/samples/photos/." "$work/mixed/"
rm -f "$work/mixed/LICENSE.md"
"$kiln" pack "$work/mixed" "$work/ds" --size 28 --channels 1 --threads 2 > /dev/null 2>&1
samples=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['samples'])" "$work/ds/kiln.json")
PYTHONPATH=$build/python mpi_run -np 4 -x PYTHONPATH /usr/bin/python3 "$here/read_rank.py" "$work/ds" "$work/readers"
check_ranks "$work/readers" 4 "$samples" "OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE \(Open MPI\)"
# kiln bench under mpirun: each rank reads its own share, every sample of it once.
# Each rank writes its JSON to its own file: mpirun forwards the ranks' stdout through one pipe,
# where two reports of several KiB can interleave mid-line.
mpi_run -np 2 bash -c 'exec "$0" bench "$1" --epochs 1 --threads 1 --json > "$2.$OMPI_COMM_WORLD_RANK"' \
  "$kiln" "$work/ds" "$work/bench.out" 2> "$work/bench.err" ||
  { cat "$work/bench.err"; echo "FAIL: kiln bench under mpirun"; exit 1; }
for r in 0 1; do
  grep -q "kiln bench: rank $r of 2 (from OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE (Open MPI))" "$work/bench.err" ||
    { cat "$work/bench.err"; echo "FAIL: bench rank $r"; exit 1; }
done
for r in 0 1; do
  grep -q '"every_sample_once":true' "$work/bench.out.$r" ||
    { cat "$work/bench.out.$r"; echo "FAIL: bench share of rank $r"; exit 1; }
done
echo "mpirun: 4 ranks read as documented; readers exactly once; kiln bench per rank"
