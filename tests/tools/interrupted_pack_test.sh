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
same_as_reference() {
  for f in "$work/reference"/*.kiln; do
    cmp -s "$f" "$1/$(basename "$f")" || { echo "$2: $(basename "$f") differs"; exit 1; }
  done
}
# Killed at the last moment, the finished staging directory just before its rename: a plain
# re-run and --resume both accept the staging directory as kiln's (it was once refused as "not
# made by kiln", which left the user to delete it by hand).
for rerun in "" --resume; do
  out="$work/killed-before-rename$rerun"
  rc=0
  KILN_FAULT_KILL_AT=dataset-rename "$kiln" pack "$root/samples/fashion-mnist" "$out" "${args[@]}" \
    > /dev/null 2>&1 || rc=$?
  [[ $rc -eq 137 && ! -e $out && -d $out.partial ]] ||
    { echo "the pack was not killed before its rename (rc $rc)"; exit 1; }
  "$kiln" pack "$root/samples/fashion-mnist" "$out" "${args[@]}" $rerun > /dev/null 2> "$work/rerun.log" ||
    { echo "re-run ${rerun:-without --resume} after a kill before the rename failed:"; cat "$work/rerun.log"; exit 1; }
  same_as_reference "$out" "re-run ${rerun:-without --resume} after a kill before the rename"
  [[ ! -e $out.partial && ! -e $out/.kiln-staging ]] || { echo "staging or its marker left behind"; exit 1; }
done
echo "killed just before the rename: a re-run and --resume both finish"
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
  same_as_reference "$out" "trial $trial ($signal after ${delay_ms} ms)"
  [[ ! -e $out.partial ]] || { echo "trial $trial: $out.partial left behind"; exit 1; }
  resumed=$(grep -c "resumed after" "$work/resume.log" || true)
  echo "trial $trial: $signal after ${delay_ms} ms: ok (resumed: $resumed)"
done
echo "20 interrupted packs: no incomplete output, every --resume byte-identical"
