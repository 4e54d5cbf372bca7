#!/usr/bin/env bash
# Packs the 70,000 Fashion-MNIST files and the photo tiles as 1 part (one Slurm job, 2 threads)
# and as 4 parts (a 4-task Slurm job array, 1 thread each, then a dependent `kiln merge`) on the
# one-node Slurm cluster of tests/scale/slurm_cluster.sh, alternating the two in each round: the
# "1 part vs 4 parts" table in BENCHMARKS.md. Also times `cat` of the merged shards, the floor
# for the merge's one sequential read.
#   bench/partitioned_pack.sh [WORKDIR] [ROUNDS]     (defaults /tmp/kiln-bench, 3)
# shellcheck source=bench/bench_lib.sh
source "$(dirname "$0")/bench_lib.sh"
work=${1:-/tmp/kiln-bench}
rounds=${2:-3}
bench_fashion_mnist "$work"
[[ -d $work/tiles ]] || samples/make_photo_tiles.sh "$work/tiles"
source tests/scale/slurm_cluster.sh
slurm_start "$work/slurm"
now() { date +%s.%N; }
results=$work/partitioned_pack.tsv
echo -e "input\tmode\tround\timages\twall_s\tpack_s_max\tmerge_s\tmerge_read_mb\tcat_s" > "$results"
run() {  # run INPUT_NAME MODE ROUND ARGS...
  local name=$1 mode=$2 round=$3 out=$work/pp-$1-$2 t0 t1 images merge_s=0 mb=0 cat_s=0 pack_s
  shift 3
  rm -rf "$out" "$out.parts" "$out.partial" "$work/logs-$name-$mode"
  mkdir -p "$work/logs-$name-$mode"
  t0=$(now)
  if [[ $mode == 1part ]]; then
    job=$(sbatch --parsable -c2 -o "$work/logs-$name-$mode/pack.json" \
      --wrap "$kiln pack $work/$name $out $* --threads 2 --json")
    slurm_wait_job "$job"
  else
    array=$(sbatch --parsable --array=0-3 -c1 -o "$work/logs-$name-$mode/pack-%a.json" \
      --wrap "$kiln pack $work/$name $out $* --threads 1 --part auto --json")
    merge=$(sbatch --parsable -c1 --dependency=afterok:$array --kill-on-invalid-dep=yes \
      -o "$work/logs-$name-$mode/merge.json" --wrap "$kiln merge $out.parts $out --json")
    slurm_wait_job "$array" "$merge"
  fi
  t1=$(now)
  [[ -f $out/kiln.json ]] || { cat "$work/logs-$name-$mode"/*; echo "run failed" >&2; exit 1; }
  images=$(/usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['samples'])" "$out/kiln.json")
  pack_s=$(cat "$work/logs-$name-$mode"/pack*.json | grep -o '"seconds":[0-9.e+-]*' | cut -d: -f2 | sort -g | tail -1)
  if [[ $mode == 4part ]]; then
    merge_s=$(grep -o '"seconds":[0-9.e+-]*' "$work/logs-$name-$mode/merge.json" | cut -d: -f2)
    mb=$(grep -o '"bytes_read":[0-9]*' "$work/logs-$name-$mode/merge.json" | cut -d: -f2)
    mb=$(awk -v b="$mb" 'BEGIN { printf "%.1f", b / 1e6 }')
    local c0 c1
    c0=$(now); cat "$out"/*.kiln > /dev/null; c1=$(now)
    cat_s=$(awk -v a="$c0" -v b="$c1" 'BEGIN { printf "%.4f", b - a }')
  fi
  printf '%s\t%s\t%s\t%s\t%.3f\t%s\t%s\t%s\t%s\n' "$name" "$mode" "$round" "$images" \
    "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" "$pack_s" "$merge_s" "$mb" "$cat_s" | tee -a "$results"
}
for ((r = 1; r <= rounds; r++)); do
  for name in fashion-mnist tiles; do
    [[ $name == fashion-mnist ]] && args="--size 28 --channels 1" || args="--size 224"
    if ((r % 2)); then order="1part 4part"; else order="4part 1part"; fi
    for mode in $order; do
      # shellcheck disable=SC2086
      run "$name" "$mode" "$r" $args
    done
  done
done
/usr/bin/python3 - "$results" << 'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
print("\ninput          mode   images  wall s (median)  images/s  merge s  merge MB/s  cat MB/s")
for name in ("fashion-mnist", "tiles"):
    for mode in ("1part", "4part"):
        rs = [r for r in rows if r["input"] == name and r["mode"] == mode]
        if not rs:
            continue
        wall = statistics.median(float(r["wall_s"]) for r in rs)
        n = int(rs[0]["images"])
        line = f"{name:14} {mode:6} {n:6}  {wall:15.2f}  {n / wall:8.0f}"
        if mode == "4part":
            m = statistics.median(float(r["merge_s"]) for r in rs)
            mb = float(rs[0]["merge_read_mb"])
            c = statistics.median(float(r["cat_s"]) for r in rs)
            line += f"  {m:7.3f}  {mb / m:10.0f}  {mb / c:8.0f}"
        print(line)
PY
