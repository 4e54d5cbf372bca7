#!/usr/bin/env bash
# Sampler scaling, before/after: `kiln bench` on synthetic 8x8x1 datasets of 10^3..10^7 samples
# with two kiln binaries, alternating so that drift on a shared machine hits both alike
# (BENCHMARKS.md, "Sampler scaling"). Prints one line per run and a table of medians: open ms
# (Dataset::Open + Loader::Create), ns per sample over the timed epochs, anonymous RSS
# (RssAnon of /proc/self/status at the end, loader open).
#
#   bench/sampler_scaling.sh OLD_KILN NEW_KILN [WORKDIR=/tmp/kiln-scaling] [ROUNDS=3] [SHUFFLE_FLAG]
#
# The datasets are made once with build/bench/make_synthetic_dataset (the new build's).
# Environment: KILN_SCALING_SHAPE, the samples' HxWxC (default 8x8x1; 1x1x1 makes the read-ahead
# window span the whole epoch, where per-sample bookkeeping shows most); KILN_SCALING_CACHE=cold
# reads one epoch per run with the dataset's files dropped from the page cache first (`kiln
# bench --cold`: posix_fadvise DONTNEED), through the mappings (--io mmap), the cold case of
# BENCHMARKS.md "Loader restructure: before/after"; default warm.
# shellcheck source=bench/bench_lib.sh
source "$(dirname "$0")/bench_lib.sh"
old=$1 new=$2 work=${3:-/tmp/kiln-scaling} rounds=${4:-3}
shape=${KILN_SCALING_SHAPE:-8x8x1}
cache=${KILN_SCALING_CACHE:-warm}
cache_flags=()
[[ $cache == cold ]] && cache_flags=(--cold --io mmap)
mkdir -p "$work"
sizes=(1000 10000 100000 1000000 10000000)
for n in "${sizes[@]}"; do
  [[ -f "$work/s$n/kiln.json" ]] || "$synth" "$work/s$n" "$n" "$shape" shards >&2
done
res="$work/scaling.jsonl"
: >"$res"
for ((r = 1; r <= rounds; r++)); do
  for n in "${sizes[@]}"; do
    ep=$((4000000 / n)); ((ep < 2)) && ep=2
    [[ $cache == cold ]] && ep=1
    for v in before after; do
      bin=$old; [[ $v == after ]] && bin=$new
      "$bin" bench "$work/s$n" --threads 2 --prefetch 4 --epochs "$ep" "${cache_flags[@]}" --json 2>/dev/null |
        /usr/bin/python3 -c '
import json, sys
j = json.load(sys.stdin); v, n = sys.argv[1], int(sys.argv[2])
row = {"v": v, "n": n, "open_ms": j["open_seconds"] * 1e3, "ns": 1e9 / j["samples_per_s"],
       "anon_mb": j["rss_anon_mb"], "samples_per_s": j["samples_per_s"]}
print(json.dumps(row))' "$v" "$n" | tee -a "$res"
    done
  done
done
/usr/bin/python3 - "$res" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| samples | open ms before | open ms after | ns/sample before | ns/sample after | after/before | anon RSS MB before | anon RSS MB after |")
print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for n in sorted({r["n"] for r in rows}):
    m = {v: {k: statistics.median(r[k] for r in rows if r["n"] == n and r["v"] == v)
             for k in ("open_ms", "ns", "anon_mb")} for v in ("before", "after")}
    b, a = m["before"], m["after"]
    print(f"| {n:,} | {b['open_ms']:.2f} | {a['open_ms']:.2f} | {b['ns']:.0f} | {a['ns']:.0f} | "
          f"{a['ns'] / b['ns']:.2f} | {b['anon_mb']:.1f} | {a['anon_mb']:.1f} |")
PY
