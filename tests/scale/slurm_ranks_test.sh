#!/usr/bin/env bash
# Under a real one-node Slurm cluster: what --part auto and the reader's rank detection read in a
# job array's tasks, in a re-run of one task, in a batch script of 4 tasks and in its srun step;
# then 4 Python readers under `srun -n4` read one epoch of a packed dataset exactly once.
#   tests/scale/slurm_ranks_test.sh BUILD_DIR KILN PROBE
set -euo pipefail
build=$1 kiln=$2 probe=$3
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
source "$here/slurm_cluster.sh"
source "$here/check_ranks.sh"
work=$build/scale/slurm_ranks_test
rm -rf "$work"
mkdir -p "$work/readers"
"$kiln" pack "$root/samples/fashion-mnist" "$work/fm" --size 28 --channels 1 --threads 2 > /dev/null 2>&1
export PYTHONPATH=$build/python
slurm_start "$build/scale/slurm"

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
# expect FILE REGEX: FILE (one probe line per task or rank) has a line matching REGEX.
expect() {
  grep -Eq -- "$2" "$1" || { echo "--- $1:" >&2; cat "$1" >&2; fail "no line matches '$2'"; }
}

array=$(sbatch --parsable --array=0-3 -c1 -o "$work/array-%a.txt" --wrap "$probe")
rerun=$(sbatch --parsable --array=2 -c1 -o "$work/rerun.txt" --wrap "$probe; $probe --of 4")
batch=$(sbatch --parsable -n4 -O -o "$work/batch.txt" \
  --wrap "$probe; srun -n4 --overcommit $probe > $work/step.txt;
          srun -n4 --overcommit /usr/bin/python3 $here/read_rank.py $work/fm $work/readers")
slurm_wait_job "$array" "$rerun" "$batch"
for t in 0 1 2 3; do
  expect "$work/array-$t.txt" "^part=$t/4 world=0/1 local=0 \| part source: SLURM_ARRAY_TASK_ID=$t, SLURM_ARRAY_TASK_COUNT=4 \(Slurm job array\) \| world source: none"
done
# The re-run of task 2 alone reports a count of 1: refused without --of, part 2 of 4 with it.
expect "$work/rerun.txt" "^part=error .*SLURM_ARRAY_TASK_ID=2 .*pass --of N"
expect "$work/rerun.txt" "^part=2/4 world=0/1 "
# The batch script itself (SLURM_NTASKS=4, no step) is one process: no part, world 1.
expect "$work/batch.txt" "^part=error world=0/1 .*no part index in the environment"
[[ $(wc -l < "$work/step.txt") -eq 4 ]] || fail "srun -n4 ran $(wc -l < "$work/step.txt") ranks"
for r in 0 1 2 3; do
  expect "$work/step.txt" "^part=$r/4 world=$r/4 local=$r \| part source: SLURM_PROCID=$r, SLURM_STEP_NUM_TASKS=4 \(srun step\) \| world source: SLURM_PROCID/SLURM_STEP_NUM_TASKS \(srun step\)"
done
for job in "$array" "$rerun" "$batch"; do
  [[ $(slurm_job_state "$job" | sort -u) == COMPLETED ]] || fail "job $job: $(slurm_job_state "$job")"
done
check_ranks "$work/readers" 4 1000 "SLURM_PROCID/SLURM_STEP_NUM_TASKS \(srun step\)"
echo "slurm: array tasks, re-run, batch script and srun step read as documented; srun readers exactly once"
