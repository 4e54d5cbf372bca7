#!/usr/bin/env bash
# Block order (shuffle block) over HTTP at 0 ms added round trip, one kiln build against another
# and against curl, alternated in one run (old, new, curl, old, new, curl, ...): the CPU per
# byte of reading whole blocks (BENCHMARKS.md, "Block order at a URL: where the CPU went").
# Each kiln line has samples/s, MB/s of samples, the MB of range bodies it received, its GETs
# and the process's CPU seconds (user + system, /usr/bin/time); the curl line fetches the same
# dataset's files in block-sized ranges (kiln's block: 4 MiB of samples), all in flight, into
# /dev/null, and reports MB/s of bodies. Take medians; compare body MB/s with body MB/s.
#
#   OLD_KILN=/path/to/old/tools/kiln bench/remote_block_ab.sh
#   SAMPLES=150000 EPOCHS=3 ROUNDS=7 OLD_KILN=... bench/remote_block_ab.sh
source "$(dirname "$0")/bench_lib.sh"
old=${OLD_KILN:?OLD_KILN: the kiln CLI to compare against}
samples=${SAMPLES:-200000}
epochs=${EPOCHS:-1}
bench_remote_servers work
"$synth" "$WWW_DIR/ds" "$samples" 28x28x1 shards > /dev/null
bench_machine
shards=("$WWW_DIR"/ds/shard-*.kiln)
echo "dataset: $samples samples of 28x28x1 in ${#shards[@]} shard(s), $(du -cb "${shards[@]}" | tail -n 1 | cut -f1) bytes"

# kiln's block in stored bytes: 4 MiB of sample bytes (the default --block-kib), clamped to
# N / 16 samples (reader/sampler.h), times the bytes a record takes in the file.
record=$(($(du -cb "${shards[@]}" | tail -n 1 | cut -f1) / samples))
block_samples=$((4194304 / 784))
((block_samples > samples / 16)) && block_samples=$((samples / 16))
range=$((block_samples * record))
config=$work/curl.cfg
total=0
for f in "${shards[@]}"; do
  size=$(stat -c %s "$f")
  for ((o = 64; o < size - 64; o += range)); do
    e=$((o + range - 1))
    ((e >= size)) && e=$((size - 1))
    printf 'url = "%s/ds/%s"\noutput = "/dev/null"\nheader = "Range: bytes=%d-%d"\n' \
      "$HTTP_URL" "$(basename "$f")" "$o" "$e" >> "$config"
    total=$((total + e - o + 1))
  done
done

kiln_run() {  # label binary
  local out cpu
  out=$(/usr/bin/time -f 'cpu %U %S' "$2" bench "$HTTP_URL/ds" --epochs "$epochs" --shuffle block 2>&1)
  cpu=$(awk '/^cpu / { print $2 + $3 }' <<< "$out")
  echo "round $round $1: $(grep -o '[0-9.]* samples/s, [0-9.]* MB/s' <<< "$out" | head -n 1);" \
    "$(grep -o '[0-9]* range GETs ([^)]*), [0-9.]* MB' <<< "$out" | sed 's/ ([^)]*)//');" \
    "cpu $cpu s; every sample once: $(grep -o 'every sample read once: [a-z]*' <<< "$out" | cut -d' ' -f5)"
}

for round in $(seq 1 "${ROUNDS:-5}"); do
  kiln_run old "$old"
  kiln_run new "$kiln"
  start=$(date +%s.%N)
  for _ in $(seq 1 "$epochs"); do
    curl --no-progress-meter --parallel --parallel-immediate --parallel-max 512 -K "$config"
  done
  end=$(date +%s.%N)
  awk -v b="$((total * epochs))" -v s="$start" -v e="$end" -v r="$round" \
    'BEGIN { printf "round %d curl: %.1f MB/s of bodies (%d bytes in %.3f s)\n", r, b / (e - s) / 1e6, b, e - s }'
done
