#!/usr/bin/env bash
# kiln pack --part I --of N and kiln merge on one machine, without an engine (labels tools and
# scale): the merge of N parts is byte-identical to `kiln pack --of N` and sample-identical to a
# plain pack; `--reshard` is byte-identical to a plain pack; every refusal of tools/pack/scale_out.md names
# the part and the reason and moves nothing; a killed part resumes; a killed merge resumes.
#   tests/scale/merge_test.sh BUILD_DIR KILN
set -euo pipefail
build=$1 kiln=$2
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
source "$here/pack_lib.sh"
build=$(cd "$build" && pwd)
kiln=$(cd "$(dirname "$kiln")" && pwd)/$(basename "$kiln")
work=$build/scale/merge_test
rm -rf "$work"
mkdir -p "$work"
export PYTHONPATH=$build/python
fm=$root/samples/fashion-mnist
args=(--size 28 --channels 1 --shard-size 64KiB --threads 2)

# --- byte identity, three inputs ------------------------------------------------------------
make_list_input "$root" "$work/listed"
cases=("tree|$fm|" "zstd-shuffled|$fm|--compress zstd --shuffle-seed 3" "list|$work/listed/images/list.txt|")
for c in "${cases[@]}"; do
  IFS='|' read -r name input extra <<< "$c"
  # shellcheck disable=SC2206
  more=($extra)
  d=$work/$name
  mkdir -p "$d"
  "$kiln" pack "$input" "$d/plain" "${args[@]}" "${more[@]}" > /dev/null 2>&1
  "$kiln" pack "$input" "$d/one-machine" "${args[@]}" "${more[@]}" --of 4 > /dev/null 2>&1
  pack_parts "$input" "$d/out" 4 "${args[@]}" "${more[@]}"
  for i in 0 1 2 3; do
    "$kiln" verify "$d/out.parts/part-0000$i-of-00004" > /dev/null || fail "$name: part $i does not verify"
  done
  cp -r "$d/out.parts" "$d/copy.parts"
  "$kiln" merge "$d/out.parts" "$d/out" > /dev/null
  "$kiln" verify "$d/out" > /dev/null || fail "$name: the merge does not verify"
  same_bytes "$d/one-machine" "$d/out"
  same_samples "$d/plain" "$d/out"
  cmp -s "$d/plain/rejected.tsv" "$d/out/rejected.tsv" || fail "$name: rejected.tsv differs from a plain pack's"
  [[ ! -e $d/out.parts ]] || fail "$name: the merge left $d/out.parts"
  "$kiln" merge "$d/copy.parts" "$d/resharded" --reshard > /dev/null
  same_bytes "$d/plain" "$d/resharded"
  [[ -f $d/copy.parts/part-00000-of-00004/kiln.json ]] || fail "--reshard consumed the parts"
  echo "$name: merge == pack --of 4 (bytes), == plain pack (samples); --reshard == plain pack (bytes)"
done
# LMDB and HDF5 parts merge by copying records into one environment / file: a plain pack's bytes.
for fmt in lmdb hdf5; do
  d=$work/$fmt
  mkdir -p "$d"
  if ! "$kiln" pack "$fm" "$d/plain" "${args[@]}" --format "$fmt" > /dev/null 2> "$work/pack.log"; then
    grep -q "has no .* support" "$work/pack.log" || { cat "$work/pack.log"; fail "$fmt pack"; }
    echo "$fmt: not in this build ($(cat "$work/pack.log"))"
    continue
  fi
  pack_parts "$fm" "$d/out" 3 "${args[@]}" --format "$fmt"
  "$kiln" merge "$d/out.parts" "$d/out" > /dev/null
  same_bytes "$d/plain" "$d/out"
  echo "$fmt: merge of 3 parts (records copied) == plain pack (bytes)"
done

# The corrupt image is rejected by part 2, the malformed line (a listing problem) by part 0.
grep -q "zz_corrupt.png" "$work/list/copy.parts/part-00002-of-00004/rejected.tsv" || fail "corrupt image not in part 2"
grep -q "line 602" "$work/list/copy.parts/part-00000-of-00004/rejected.tsv" || fail "bad line not in part 0"
[[ $(grep -c . "$work/list/out/rejected.tsv") -eq 3 ]] || fail "merged rejected.tsv: $(cat "$work/list/out/rejected.tsv")"

# --- refusals: each names the part and the reason, and nothing moves ------------------------
d=$work/faults
mkdir -p "$d"
pack_parts "$fm" "$d/out" 4 "${args[@]}"
cp -r "$d/out.parts" "$d/good.parts"
reset_parts() { rm -rf "$d/out.parts" "$d/out" "$d/out.partial"; cp -r "$d/good.parts" "$d/out.parts"; }
untouched() {
  for i in 0 1 2 3; do
    [[ ! -e $d/good.parts/part-0000$i-of-00004 ]] ||
      diff -r "$d/good.parts/part-0000$i-of-00004" "$d/out.parts/part-0000$i-of-00004" > /dev/null ||
      fail "a refused merge changed part $i"
  done
  [[ ! -e $d/out && ! -e $d/out.partial ]] || fail "a refused merge left output"
}
p2=$d/out.parts/part-00002-of-00004

mv "$p2" "$d/aside"
expect_refusal "part 2 of 4 is missing" "$kiln" merge "$d/out.parts" "$d/out"
mv "$d/aside" "$p2"
untouched

# An output inside a part, inside the parts directory or holding it is a usage error (exit 2)
# before anything is written; before, the merged dataset was moved into the part and deleted
# with the parts, and the merge reported success.
for out in "$p2/inside" "$d/out.parts/beside" "$d/out.parts/part-00000-of-00004/x/.." "$d"; do
  rc=0
  "$kiln" merge "$d/out.parts" "$out" > /dev/null 2> "$work/refusal.log" || rc=$?
  [[ $rc -eq 2 ]] || { cat "$work/refusal.log" >&2; fail "merge into $out: expected exit 2, got $rc"; }
  grep -q "overlap; write the merged dataset outside the parts" "$work/refusal.log" ||
    { cat "$work/refusal.log" >&2; fail "merge into $out: no overlap message"; }
  [[ ! -e $out.partial.lock && ! -e $out.partial ]] || fail "a refused merge into $out left files"
done
(cd "$p2" && rc=0 && "$kiln" merge .. inside > /dev/null 2>&1 || rc=$? && [[ $rc -eq 2 ]]) ||
  fail "a merge from .. into a directory inside a part was not refused"
[[ ! -e $p2/inside ]] || fail "a refused merge created $p2/inside"
untouched

"$kiln" pack "$fm" "$d/out" "${args[@]}" --part 2 --of 8 > /dev/null 2>&1
expect_refusal "part 2 of 8.*different --of" "$kiln" merge "$d/out.parts" "$d/out"
rm -rf "$d/out.parts/part-00002-of-00008"*
untouched

"$kiln" pack "$fm" "$d/out" --size 32 --channels 1 --shard-size 64KiB --threads 2 --part 2 --of 4 --overwrite > /dev/null 2>&1
expect_refusal 'part 2 of 4 was packed with --size "32x32" but part 0 of 4 with --size "28x28"' \
  "$kiln" merge "$d/out.parts" "$d/out"
reset_parts

"$kiln" pack "$fm" "$d/out" "${args[@]}" --compress zstd --part 1 --of 4 --overwrite > /dev/null 2>&1
expect_refusal 'part 1 of 4 was packed with --compress "zstd:3" but part 0 of 4 with --compress "none"' \
  "$kiln" merge "$d/out.parts" "$d/out"
reset_parts

# A file added to the tree between parts: part 3 saw another listing.
cp -r "$fm" "$d/tree"
pack_parts "$d/tree" "$d/grown" 3 "${args[@]}"
cp "$fm/0_T-shirt_top/$(ls "$fm/0_T-shirt_top" | head -1)" "$d/tree/0_T-shirt_top/added.png"
"$kiln" pack "$d/tree" "$d/grown" "${args[@]}" --part 2 --of 3 --overwrite > /dev/null 2>&1
expect_refusal "part 2 of 3 saw another listing than part 0 of 3 \(1001 images.*vs 1000 images" \
  "$kiln" merge "$d/grown.parts" "$d/grown"

# Duplicated parts, and a part directory whose name disagrees with its manifest.
expect_refusal "part 1 of 4 is given twice" "$kiln" merge "$d/out.parts/part-00000-of-00004" \
  "$d/out.parts/part-00001-of-00004" "$d/good.parts/part-00001-of-00004" \
  "$d/out.parts/part-00002-of-00004" "$d/out.parts/part-00003-of-00004" "$d/out"
rm -rf "$p2"
cp -r "$d/out.parts/part-00001-of-00004" "$p2"
expect_refusal "name says part 2 of 4 but its kiln.json says part 1 of 4" "$kiln" merge "$d/out.parts" "$d/out"
reset_parts

# A flipped byte in a shard's records: found by the whole-file hash before anything moves.
shard=$p2/shard-00001.kiln
printf '\x5a' | dd of="$shard" bs=1 seek=200 conv=notrunc status=none
expect_refusal "part 2 of 4: .*shard-00001.kiln is damaged: whole-file hash" "$kiln" merge "$d/out.parts" "$d/out"
cmp -s "$shard" "$d/good.parts/part-00002-of-00004/shard-00001.kiln" && fail "flip did not happen"
reset_parts

# A damaged part manifest; a part made by another OpenCV (manifest edited, checksum redone).
sed -i 's/"packed": 250/"packed": 251/' "$p2/kiln.json"
expect_refusal "part .*part-00002-of-00004 is damaged: .*manifest checksum mismatch" "$kiln" merge "$d/out.parts" "$d/out"
reset_parts
/usr/bin/python3 - "$p2/kiln.json" << 'PY'
import json, subprocess, sys
path = sys.argv[1]
doc = json.load(open(path))
doc["source"]["partition"]["versions"]["opencv"] = "4.5.1"
doc.pop("manifest_xxh3_64")
canon = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
out = subprocess.run(["xxhsum", "-H3"], input=canon, capture_output=True, check=True).stdout
doc["manifest_xxh3_64"] = out.decode().split()[-1]  # "XXH3 (stdin) = <16 hex digits>"
json.dump(doc, open(path, "w"), indent=2)
PY
expect_refusal 'part 2 of 4 was made with opencv "4.5.1" but part 0 of 4 with opencv' "$kiln" merge "$d/out.parts" "$d/out"
reset_parts

# The same part started twice at once: the second attempt fails at once, naming the writer, and
# the first finishes untouched. The first is paused (SIGSTOP) while it holds the lock.
big=(--size 96 --channels 3 --shard-size 64KiB --threads 1)
for try in 1 2 3 4 5; do
  rm -rf "$d/twice" "$d/twice.parts"
  "$kiln" pack "$fm" "$d/twice" "${big[@]}" --part 1 --of 2 > /dev/null 2>&1 &
  first=$!
  lock=$d/twice.parts/part-00001-of-00002.lock
  for _ in $(seq 1 2000); do grep -q "pid $first " "$lock" 2> /dev/null && break; sleep 0.005; done
  kill -STOP "$first" 2> /dev/null || true
  if [[ -d $d/twice.parts/part-00001-of-00002.partial ]] && kill -0 "$first" 2> /dev/null; then break; fi
  kill -CONT "$first" 2> /dev/null || true
  wait "$first" || true
done
expect_refusal "part 1 of 2 is being written by another process \(host $(hostname) pid $first " \
  "$kiln" pack "$fm" "$d/twice" "${big[@]}" --part 1 --of 2
expect_refusal "part 1 of 2 is being written by another process" "$kiln" merge "$d/twice.parts" "$d/twice"
kill -CONT "$first"
wait "$first" || fail "the first writer of part 1 failed after the second attempt"
"$kiln" verify "$d/twice.parts/part-00001-of-00002" > /dev/null || fail "the first writer's part does not verify"
# A finished part is final without --overwrite.
rc=0
"$kiln" pack "$fm" "$d/twice" "${big[@]}" --part 1 --of 2 > /dev/null 2> "$work/refusal.log" || rc=$?
[[ $rc -eq 2 ]] && grep -q "part 1 of 2 is already complete" "$work/refusal.log" || fail "finished part re-packed (rc $rc)"

# A part killed with SIGKILL: the merge refuses ("rerun it with --resume"); --resume finishes it
# with the same bytes.
for try in 1 2 3 4 5; do
  rm -rf "$p2" "$p2.partial"
  "$kiln" pack "$fm" "$d/out" "${big[@]}" --part 2 --of 4 > /dev/null 2>&1 &
  victim=$!
  for _ in $(seq 1 2000); do [[ -f $p2.partial/progress.json ]] && break; sleep 0.005; done
  kill -KILL "$victim" 2> /dev/null || true
  wait "$victim" 2> /dev/null || true
  [[ -d $p2.partial && ! -e $p2 ]] && break
done
[[ -d $p2.partial ]] || fail "could not kill part 2 while it ran"
expect_refusal "part 2 of 4 is incomplete .*rerun it with --resume" "$kiln" merge "$d/out.parts" "$d/out"
"$kiln" pack "$fm" "$d/out" "${big[@]}" --part 2 --of 4 --resume 2> "$work/resume.log" > /dev/null ||
  { cat "$work/resume.log"; fail "--resume of part 2"; }
grep -q "resumed after" "$work/resume.log" || { cat "$work/resume.log"; fail "part 2 did not resume"; }
"$kiln" pack "$fm" "$d/fresh" "${big[@]}" --part 2 --of 4 > /dev/null 2>&1
same_bytes "$d/fresh.parts/part-00002-of-00004" "$p2"
reset_parts

# A merge killed while it renumbers headers: nothing complete under OUT; a plain re-run refuses;
# --resume finishes with the same bytes as an uninterrupted merge.
"$kiln" pack "$fm" "$d/one-machine" "${args[@]}" --of 4 > /dev/null 2>&1
rc=0
KILN_FAULT_MERGE_KILL_AFTER=6 "$kiln" merge "$d/out.parts" "$d/out" > /dev/null 2>&1 || rc=$?
[[ $rc -eq 137 ]] || fail "the merge was not killed (rc $rc)"
[[ ! -e $d/out && -d $d/out.partial ]] || fail "a killed merge left $d/out or no $d/out.partial"
[[ ! -e $d/out.parts/part-00000-of-00004/kiln.json ]] || fail "a consumed part still looks complete"
rc=0
"$kiln" merge "$d/out.parts" "$d/out" > /dev/null 2> "$work/refusal.log" || rc=$?
[[ $rc -eq 2 ]] && grep -q "was interrupted .* --resume" "$work/refusal.log" || fail "merge without --resume (rc $rc)"
"$kiln" merge "$d/out.parts" "$d/out" --resume > /dev/null
same_bytes "$d/one-machine" "$d/out"
[[ ! -e $d/out.parts && ! -e $d/out.partial ]] || fail "a resumed merge left its parts or staging"
# Killed at the last moment, the finished staging directory just before its rename: the parts
# are consumed, so only the journal can finish the merge, and it must still be there (it was once
# removed before the rename, which left a complete dataset under OUT.partial that nothing took).
reset_parts
rc=0
KILN_FAULT_KILL_AT=merge-rename "$kiln" merge "$d/out.parts" "$d/out" > /dev/null 2>&1 || rc=$?
[[ $rc -eq 137 && ! -e $d/out && -d $d/out.partial ]] || fail "the merge was not killed before its rename (rc $rc)"
"$kiln" merge "$d/out.parts" "$d/out" --resume > /dev/null 2> "$work/resume.log" ||
  { cat "$work/resume.log"; fail "--resume of a merge killed before its rename"; }
same_bytes "$d/one-machine" "$d/out"
[[ ! -e $d/out.partial && ! -e $d/out/.kiln-staging && ! -e $d/out/merge-journal.json ]] ||
  fail "a resumed merge left its staging, marker or journal"
echo "merge: byte identity and every refusal as documented"
