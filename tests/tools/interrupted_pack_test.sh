#!/usr/bin/env bash
# `kiln pack` killed with SIGKILL or SIGINT at random points (20 trials) never leaves
# output that opens as complete, and `kiln pack --resume` then finishes the job with output
# byte-identical to an uninterrupted run.
#   tests/tools/interrupted_pack_test.sh KILN_BINARY
set -euo pipefail
kiln=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
args=(--size 128 --channels 1 --shard-size 256KiB --compress zstd --threads 2)
"$kiln" pack "$root/samples/fashion-mnist" "$work/reference" "${args[@]}" > /dev/null 2>&1
RANDOM=7  # reproducible kill times
for trial in $(seq 1 20); do
  out="$work/trial-$trial"
  signal=KILL
  ((trial % 2 == 0)) && signal=INT
  delay_ms=$((RANDOM % 1500))
  "$kiln" pack "$root/samples/fashion-mnist" "$out" "${args[@]}" > /dev/null 2>&1 &
  pid=$!
  sleep "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))"
  kill -s "$signal" "$pid" 2> /dev/null || true
  wait "$pid" 2> /dev/null || true
  if [[ -e $out ]]; then
    # Only a finished run may leave the output name, and then it must verify.
    "$kiln" verify "$out" > /dev/null || { echo "trial $trial: incomplete output under $out"; exit 1; }
  fi
  "$kiln" pack "$root/samples/fashion-mnist" "$out" "${args[@]}" --resume > /dev/null 2> "$work/resume.log" ||
    { [[ -e $out/kiln.json ]] && grep -q "not empty" "$work/resume.log"; } ||
    { echo "trial $trial: --resume failed"; cat "$work/resume.log"; exit 1; }
  for f in "$work/reference"/*.kiln; do
    cmp -s "$f" "$out/$(basename "$f")" || { echo "trial $trial ($signal after ${delay_ms} ms): $(basename "$f") differs"; exit 1; }
  done
  [[ ! -e $out.partial ]] || { echo "trial $trial: $out.partial left behind"; exit 1; }
  resumed=$(grep -c "resumed after" "$work/resume.log" || true)
  echo "trial $trial: $signal after ${delay_ms} ms: ok (resumed: $resumed)"
done
echo "20 interrupted packs: no incomplete output, every --resume byte-identical"
