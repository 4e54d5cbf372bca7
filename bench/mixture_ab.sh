#!/usr/bin/env bash
# Two kiln builds (OLD, NEW) alternated on a mixture and one dataset of the same size: the cost
# a mixture adds to each sample's read, before and after a change. Writes synthetic datasets of
# raw 28x28x1 uint8 tensors A (N_A samples), B (N_B) and C (N_A + N_B) under WORKDIR once, then
# runs, round after round (the builds' order swapping each round), `kiln bench` with each build
# on: the mixture A B --weights 0.7,0.3 --samples-per-epoch N_A+N_B, C mixed with itself
# (C C --repeats 0.5,0.5: two mappings of the same files) and C alone. Prints each run (label,
# samples/s, process CPU ns/sample, exactly-once check, fetch threads' CPU ns/sample), then per
# build the medians and the median over rounds of (mixture - C) in CPU and of mixture / C in
# samples/s, each round's runs being seconds apart.
#
# Usage: OLD=path/to/kiln [NEW=path/to/kiln] bench/mixture_ab.sh [WORKDIR [N_A [N_B [ROUNDS
#        [EPOCHS [THREADS]]]]]]
#   (defaults /tmp/kiln-mixture-ab, 300000, 150000, 20 rounds, 4 epochs, 2 threads; NEW: this
#   checkout's build/tools/kiln, KILN_BUILD_DIR: build)
# shellcheck source=bench/bench_lib.sh
source "$(dirname "$0")/bench_lib.sh"
old=${OLD:?OLD=path to the kiln binary to compare against}
new=${NEW:-$kiln}
work=${1:-/tmp/kiln-mixture-ab}
n_a=${2:-300000}
n_b=${3:-150000}
rounds=${4:-20}
epochs=${5:-4}
threads=${6:-2}
mkdir -p "$work"
for spec in a:$n_a b:$n_b c:$((n_a + n_b)); do
  name=${spec%%:*}
  if [[ ! -f $work/$name/kiln.json ]]; then
    "$synth" "$work/$name" "${spec#*:}" 28x28x1 shards
  fi
done
bench_machine
echo "old: $old"
echo "new: $new"
common=(--threads "$threads" --batch-size 256 --prefetch 4 --epochs "$epochs" --json)
results=$(mktemp)
_bench_tmpdirs+=("$results")
run() {  # run LABEL KILN ARGS...
  local label=$1 bin=$2
  shift 2
  "$bin" bench "$@" "${common[@]}" 2>/dev/null |
    /usr/bin/python3 -c '
import json, sys
j = json.load(sys.stdin)
print(sys.argv[1], round(j["samples_per_s"]), round(j["cpu_seconds"] / j["samples"] * 1e9, 1),
      "ok" if j["every_sample_once"] else "NOT-EXACTLY-ONCE",
      round(j["fetch_cpu_seconds"] / j["samples"] * 1e9, 1))' "$label" | tee -a "$results"
}
for ((round = 1; round <= rounds; ++round)); do
  if ((round % 2)); then builds=(old new); else builds=(new old); fi
  for b in "${builds[@]}"; do
    if [[ $b == old ]]; then bin=$old; else bin=$new; fi
    run "$b-mix" "$bin" "$work/a" "$work/b" --weights 0.7,0.3 --samples-per-epoch $((n_a + n_b))
    run "$b-cc" "$bin" "$work/c" "$work/c" --repeats 0.5,0.5
    run "$b-c" "$bin" "$work/c"
  done
done
/usr/bin/python3 - "$results" <<'EOF'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
med = statistics.median
for v in ("old", "new"):
    for w in ("mix", "cc", "c"):
        r = [x for x in rows if x[0] == f"{v}-{w}"]
        print(f"{v} {w:3s} median {med(float(x[1]) for x in r) / 1e6:.3f} M samples/s, CPU "
              f"{med(float(x[2]) for x in r):.0f} ns/sample, fetch threads "
              f"{med(float(x[4]) for x in r):.0f} ns/sample")
    d_fetch, d_cpu, ratio = [], [], []
    for i in range(len(rows) - 2):  # a build's mix, cc, c of one round are consecutive rows
        if rows[i][0] == f"{v}-mix" and rows[i + 2][0] == f"{v}-c":
            d_fetch.append(float(rows[i][4]) - float(rows[i + 2][4]))
            d_cpu.append(float(rows[i][2]) - float(rows[i + 2][2]))
            ratio.append(float(rows[i][1]) / float(rows[i + 2][1]))
    print(f"{v}: per-round medians, mixture - C: fetch {med(d_fetch):+.0f} ns/sample, process "
          f"CPU {med(d_cpu):+.0f} ns/sample; mixture / C {med(ratio):.3f} (samples/s)")
print("every run read each sample exactly once:", all(r[3] == "ok" for r in rows))
EOF
