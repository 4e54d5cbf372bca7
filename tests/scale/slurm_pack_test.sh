#!/usr/bin/env bash
# A partitioned pack under a real one-node Slurm cluster (tests/scale/slurm_cluster.sh): a 4-task
# job array packs the sample images with `kiln pack --part auto`, a dependent job merges and
# verifies, and the result is byte-identical to `kiln pack --of 4` on one machine and
# sample-identical to a plain pack; the same with --compress zstd --shuffle-seed, and with a
# list file whose corrupt image and malformed line fall in part 2. Then a task cancelled with
# scancel while it packs: the merge job never runs; the task re-run alone with --resume
# finishes the part, and the merge gives the same bytes. And a plan (`kiln plan`) packed by
# `kiln pack --plan PLAN --part auto` in arrays that do not tell N.
#   tests/scale/slurm_pack_test.sh BUILD_DIR KILN
set -euo pipefail
build=$(cd "$1" && pwd)
kiln=$2
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
source "$here/slurm_cluster.sh"
source "$here/pack_lib.sh"
work=$build/scale/slurm_pack_test
rm -rf "$work"
mkdir -p "$work/logs"
export PYTHONPATH=$build/python
fm=$root/samples/fashion-mnist
args="--size 28 --channels 1 --shard-size 64KiB"  # samples/cluster/slurm_pack.sh adds --threads
make_list_input "$root" "$work/listed"
slurm_start "$build/scale/slurm"

# submit NAME INPUT EXTRA: the array and its dependent merge; prints "ARRAY MERGE". The first
# case goes through samples/cluster/slurm_pack.sh, as the README shows it.
submit() {
  local name=$1 input=$2 extra=$3 out=$work/$1/out array merge
  mkdir -p "$work/$name"
  if [[ $name == tree ]]; then
    # shellcheck disable=SC2086
    (cd "$work/$name" && KILN=$kiln KILN_CPUS=1 "$root/samples/cluster/slurm_pack.sh" "$input" "$out" 4 $args) |
      sed -n 's/^pack array: \([0-9]*\) .* merge: \([0-9]*\) .*/\1 \2/p'
    return
  fi
  array=$(sbatch --parsable --array=0-3 -c1 -J "pack-$name" -o "$work/logs/$name-%a.txt" \
    --wrap "$kiln pack $input $out $args $extra --threads 1 --part auto")
  merge=$(sbatch --parsable -c1 -J "merge-$name" -o "$work/logs/$name-merge.txt" \
    --dependency=afterok:$array --kill-on-invalid-dep=yes \
    --wrap "$kiln merge $out.parts $out && $kiln verify $out")
  echo "$array $merge"
}
jobs=()
for c in "tree|$fm|" "zstd-shuffled|$fm|--compress zstd --shuffle-seed 3" \
         "list|$work/listed/images/list.txt|"; do
  IFS='|' read -r name input extra <<< "$c"
  read -r a m <<< "$(submit "$name" "$input" "$extra")"
  jobs+=("$name|$input|$extra|$a|$m")
done
# A plan made once (as on a login node), then `kiln pack --plan PLAN --part auto` in two arrays
# (tasks 0,1,3, then task 2 alone: neither reports the job's count, so N comes from the plan)
# and a merge after both.
planned=$work/planned
mkdir -p "$planned"
# shellcheck disable=SC2086
"$kiln" plan "$fm" "$planned/plan.json" --of 4 $args > "$planned/plan.txt"
plan_pack="$kiln pack --plan $planned/plan.json --part auto $planned/out --threads 1"
plan_a=$(sbatch --parsable --array=0,1,3 -c1 -J pack-planned -o "$work/logs/planned-%a.txt" --wrap "$plan_pack")
plan_b=$(sbatch --parsable --array=2 -c1 -J pack-planned-2 -o "$work/logs/planned-%a.txt" --wrap "$plan_pack")
plan_m=$(sbatch --parsable -c1 -J merge-planned -o "$work/logs/planned-merge.txt" \
  --dependency=afterok:$plan_a:$plan_b --kill-on-invalid-dep=yes \
  --wrap "$kiln merge $planned/out.parts $planned/out && $kiln verify $planned/out")
# The one-machine references, while Slurm runs the jobs.
for j in "${jobs[@]}"; do
  IFS='|' read -r name input extra _ _ <<< "$j"
  # shellcheck disable=SC2086
  "$kiln" pack "$input" "$work/$name/one-machine" $args $extra --threads 1 --of 4 > /dev/null 2>&1
  # shellcheck disable=SC2086
  "$kiln" pack "$input" "$work/$name/plain" $args $extra --threads 1 > /dev/null 2>&1
done
# log NAME ARRAY MERGE TASK: a task's output file (TASK "merge": the merge job's).
log() {
  if [[ $1 == tree ]]; then
    [[ $4 == merge ]] && echo "$work/tree/slurm-$3.out" || echo "$work/tree/slurm-$2_$4.out"
  else
    echo "$work/logs/$1-$4.txt"
  fi
}
for j in "${jobs[@]}"; do
  IFS='|' read -r name _ _ a m <<< "$j"
  [[ -n $a && -n $m ]] || fail "$name: no job ids"
  slurm_wait_job "$a" "$m"
  [[ $(slurm_job_state "$a" | sort -u) == COMPLETED && $(slurm_job_state "$m") == COMPLETED ]] ||
    { tail -n 5 "$(log "$name" "$a" "$m" 0)" "$(log "$name" "$a" "$m" merge)" >&2; fail "$name: array $(slurm_job_state "$a" | tr '\n' ' ') merge $(slurm_job_state "$m")"; }
  for t in 0 1 2 3; do
    grep -q "part $t of 4 from SLURM_ARRAY_TASK_ID=$t, SLURM_ARRAY_TASK_COUNT=4" "$(log "$name" "$a" "$m" "$t")" ||
      { cat "$(log "$name" "$a" "$m" "$t")" >&2; fail "$name: task $t did not say where its part came from"; }
  done
  grep -q "^OK" "$(log "$name" "$a" "$m" merge)" || { cat "$(log "$name" "$a" "$m" merge)" >&2; fail "$name: verify"; }
  same_bytes "$work/$name/one-machine" "$work/$name/out"
  same_samples "$work/$name/plain" "$work/$name/out"
  echo "$name: 4-task array + dependent merge == kiln pack --of 4 (bytes), == plain pack (samples)"
done
slurm_wait_job "$plan_a" "$plan_b" "$plan_m"
[[ $(slurm_job_state "$plan_a" | sort -u) == COMPLETED && $(slurm_job_state "$plan_b") == COMPLETED &&
   $(slurm_job_state "$plan_m") == COMPLETED ]] ||
  { tail -n 5 "$work/logs/planned-"*.txt >&2; fail "planned: arrays $(slurm_job_state "$plan_a" | tr '\n' ' ') $(slurm_job_state "$plan_b"), merge $(slurm_job_state "$plan_m")"; }
for t in 0 1 2 3; do
  grep -q "part $t of 4 from SLURM_ARRAY_TASK_ID=$t .*(the plan's number of parts)" "$work/logs/planned-$t.txt" ||
    { cat "$work/logs/planned-$t.txt" >&2; fail "planned: task $t did not take N from the plan"; }
done
same_bytes "$work/tree/one-machine" "$planned/out"
echo "planned: kiln plan + arrays 0,1,3 and 2 of kiln pack --plan --part auto + merge == kiln pack --of 4 (bytes)"
grep -q "zz_corrupt.png" "$work/list/out/rejected.tsv" || fail "corrupt image not rejected"
cmp -s "$work/list/plain/rejected.tsv" "$work/list/out/rejected.tsv" || fail "rejected.tsv differs"

# --- a task cancelled with scancel while it packs -------------------------------------------
big="--size 96 --channels 3 --shard-size 64KiB --threads 1"
d=$work/cancelled
mkdir -p "$d"
"$kiln" pack "$fm" "$d/one-machine" $big --of 4 > /dev/null 2>&1 &
reference=$!
array=$(sbatch --parsable --array=0-3 -c1 -J pack-cancelled -o "$work/logs/cancelled-%a.txt" \
  --wrap "$kiln pack $fm $d/out $big --part auto")
merge=$(sbatch --parsable -c1 -J merge-cancelled -o "$work/logs/cancelled-merge.txt" \
  --dependency=afterok:$array --kill-on-invalid-dep=yes --wrap "$kiln merge $d/out.parts $d/out")
p2=$d/out.parts/part-00002-of-00004
for _ in $(seq 1 3000); do [[ -f $p2.partial/progress.json ]] && break; sleep 0.01; done
[[ -f $p2.partial/progress.json ]] || fail "task 2 never started packing"
scancel "${array}_2"
slurm_wait_job "$array" "$merge"
wait "$reference"
[[ $(scontrol -o show job "${array}_2" | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p') == CANCELLED ]] ||
  fail "task 2 is not CANCELLED"
[[ $(slurm_job_state "$merge") != COMPLETED && ! -e $d/out ]] || fail "the merge ran after a cancelled task"
[[ -d $p2.partial && ! -e $p2 ]] || fail "the cancelled part left no $p2.partial, or looks complete"
expect_refusal "part 2 of 4 is incomplete .*rerun it with --resume" "$kiln" merge "$d/out.parts" "$d/out"
# The re-run of task 2 alone reports an array of one task: --of 4 is needed.
rerun=$(sbatch --parsable --array=2 -c1 -J rerun -o "$work/logs/cancelled-rerun.txt" \
  --wrap "$kiln pack $fm $d/out $big --part auto --of 4 --resume")
merge=$(sbatch --parsable -c1 -J merge-rerun -o "$work/logs/cancelled-merge2.txt" \
  --dependency=afterok:$rerun --kill-on-invalid-dep=yes --wrap "$kiln merge $d/out.parts $d/out")
slurm_wait_job "$rerun" "$merge"
[[ $(slurm_job_state "$merge") == COMPLETED ]] || { cat "$work/logs/cancelled-"*.txt >&2; fail "merge after the re-run"; }
grep -q "resumed after" "$work/logs/cancelled-rerun.txt" || { cat "$work/logs/cancelled-rerun.txt" >&2; fail "task 2 did not resume"; }
same_bytes "$d/one-machine" "$d/out"
echo "cancelled task: merge never ran; task 2 re-run alone with --resume; merge == kiln pack --of 4"
