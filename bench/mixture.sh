#!/usr/bin/env bash
# A two-source mixture against each source read alone (issue 29's goal: the mixture reads within
# 10% of the slower source alone). Writes three synthetic datasets of raw 28x28x1 uint8 tensors
# with make_synthetic_dataset: A (300,000 samples, 266 MB), B (150,000, 133 MB) and, as a
# control, C (450,000: one dataset as large as A and B together, so the mixture's extra cost can
# be told apart from its larger working set). All are in the page cache after the first round:
# the runs time the reader's CPU and memory path, where a mixture's per-sample work shows most.
# Then runs `kiln bench` on A alone, B alone, C alone and the mixture A B --weights 0.7,0.3
# --samples-per-epoch 450000, in an order that alternates from round to round (A B C mix, then
# mix C B A), prints each run's samples/s, process CPU ns per sample, the exactly-once check
# and the fetch threads' CPU ns per sample, then the medians and the ratios mixture / slower
# source alone (the goal) and mixture / C.
#
# Usage: bench/mixture.sh [WORKDIR [ROUNDS [EPOCHS [THREADS]]]]
#   (defaults /tmp/kiln-mixture, 8 rounds, 4 epochs per run, 2 threads; KILN_BUILD_DIR: build;
#   KILN: another kiln binary)
# shellcheck source=bench/bench_lib.sh
source "$(dirname "$0")/bench_lib.sh"
work=${1:-/tmp/kiln-mixture}
rounds=${2:-8}
epochs=${3:-4}
threads=${4:-2}
mkdir -p "$work"
for spec in a:300000 b:150000 c:450000; do
  name=${spec%%:*}
  n=${spec#*:}
  if [[ ! -f $work/$name/kiln.json ]]; then
    "$synth" "$work/$name" "$n" 28x28x1 shards
  fi
done
bench_machine
echo "kiln: $kiln"
common=(--threads "$threads" --batch-size 256 --prefetch 4 --epochs "$epochs" --json)
results=$(mktemp)
_bench_tmpdirs+=("$results")
run() {  # run LABEL ARGS...: one `kiln bench`, its samples/s and CPU ns/sample appended
  local label=$1
  shift
  "$kiln" bench "$@" "${common[@]}" 2>/dev/null |
    /usr/bin/python3 -c '
import json, sys
j = json.load(sys.stdin)
ok = j["every_sample_once"]
print(sys.argv[1], round(j["samples_per_s"]), round(j["cpu_seconds"] / j["samples"] * 1e9, 1),
      "ok" if ok else "NOT-EXACTLY-ONCE", round(j["fetch_cpu_seconds"] / j["samples"] * 1e9, 1))
' "$label" | tee -a "$results"
}
for ((round = 1; round <= rounds; ++round)); do
  echo "== round $round (threads $threads, batch 256, prefetch 4, shuffled, $epochs epochs)"
  if ((round % 2)); then
    order=(a b c mix)
  else
    order=(mix c b a)
  fi
  for what in "${order[@]}"; do
    case $what in
      a) run a "$work/a" ;;
      b) run b "$work/b" ;;
      c) run c "$work/c" ;;
      mix) run mix "$work/a" "$work/b" --weights 0.7,0.3 --samples-per-epoch 450000 ;;
    esac
  done
done
/usr/bin/python3 - "$results" <<'EOF'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
keys = ("a", "b", "c", "mix")
rate = {k: [float(r[1]) for r in rows if r[0] == k] for k in keys}
cpu = {k: [float(r[2]) for r in rows if r[0] == k] for k in keys}
med = {k: statistics.median(v) for k, v in rate.items()}
cmed = {k: statistics.median(v) for k, v in cpu.items()}
fmed = {k: statistics.median([float(r[4]) for r in rows if r[0] == k]) for k in keys}
slower = min(("a", "b"), key=lambda k: med[k])
for k in keys:
    print(f"{k:4s} median {med[k] / 1e6:.3f} M samples/s (min {min(rate[k]) / 1e6:.3f}, "
          f"max {max(rate[k]) / 1e6:.3f}), median CPU {cmed[k]:.0f} ns/sample "
          f"(fetch threads {fmed[k]:.0f})")
print(f"mixture / slower alone ({slower}): {med['mix'] / med[slower]:.3f} (samples/s medians); "
      f"CPU ns/sample mixture / {slower}: {cmed['mix'] / cmed[slower]:.3f}")
print(f"mixture / C (one dataset of the same size): {med['mix'] / med['c']:.3f} (samples/s); "
      f"CPU ns/sample {cmed['mix'] / cmed['c']:.3f}, fetch CPU {fmed['mix'] / fmed['c']:.3f}")
# Each round's own ratio, to show the spread (runs of a round are minutes apart at most).
per_round = []
for i in range(0, len(rows) - 3, 4):
    r = {row[0]: float(row[1]) for row in rows[i:i + 4]}
    if len(r) == 4:
        per_round.append(r["mix"] / min(r["a"], r["b"]))
print("per-round mixture / slower alone:", ", ".join(f"{x:.2f}" for x in per_round))
print("every run read each sample exactly once:",
      all(r[3] == "ok" for r in rows))
EOF
