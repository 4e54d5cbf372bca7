#!/usr/bin/env bash
# Packs INPUT into the dataset OUT on a Slurm cluster: a job array of N tasks, each packing one
# part (`kiln pack --part auto` reads SLURM_ARRAY_TASK_ID / _COUNT), then one job that merges
# the parts once every task has succeeded (and is cancelled if one fails).
#
#   samples/cluster/slurm_pack.sh INPUT OUT N [kiln pack flags...]
#   e.g. samples/cluster/slurm_pack.sh /data/imagenet/train /data/imagenet-224 64 --size 224
#
# OUT's parts go to OUT.parts/ beside OUT, on a file system every node sees. Environment:
# KILN (the kiln binary, default `kiln` on PATH), KILN_CPUS (CPUs per task, default 8). A task that failed
# or was cancelled: re-run it alone, with --of N and --resume, then submit the merge again:
#   sbatch --array=I --wrap "kiln pack INPUT OUT FLAGS --part auto --of N --resume"
#   sbatch --dependency=afterok:JOB --wrap "kiln merge OUT.parts OUT"
set -euo pipefail
input=$1 out=$2 n=$3
shift 3
kiln=$(printf %q "${KILN:-kiln}") cpus=${KILN_CPUS:-8}
flags=$(printf ' %q' "$@")
# Each task is one copy on one node (--nodes=1 --ntasks=1, whatever SBATCH_* defaults say): a
# task of several copies would have them all pack its one part, which --part auto refuses.
array=$(sbatch --parsable --array=0-$((n - 1)) --nodes=1 --ntasks=1 --cpus-per-task="$cpus" -J kiln-pack \
  --wrap "$kiln pack $(printf %q "$input") $(printf %q "$out")$flags --threads $cpus --part auto")
merge=$(sbatch --parsable --nodes=1 --ntasks=1 --dependency=afterok:"$array" --kill-on-invalid-dep=yes -J kiln-merge \
  --wrap "$kiln merge $(printf %q "$out.parts") $(printf %q "$out") && $kiln verify $(printf %q "$out")")
echo "pack array: $array (tasks 0-$((n - 1))), merge: $merge (after the array succeeds)"
