#!/usr/bin/env bash
# kiln plan and kiln pack --plan on one machine (labels tools and scale): plan, then pack every
# part from the plan, then merge, equals `kiln pack --of N` byte for byte and a plain pack
# sample for sample; each part's kiln.json equals the part packed without a plan (so parts with
# and without a plan merge, and parts of two plans with different listings do not); a tree that
# grows after planning is not walked again; an option other than the plan's, another --of or
# INPUT are refused naming both values; a pinned class map travels in the plan; a planned file
# that vanished or changed size is a rejection naming it; a truncated, flipped or foreign plan is
# refused naming the file; the CLI writes the golden plan of tests/data/plan/.
#   tests/scale/plan_test.sh BUILD_DIR KILN
set -euo pipefail
build=$1 kiln=$2
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
source "$here/pack_lib.sh"
build=$(cd "$build" && pwd)
kiln=$(cd "$(dirname "$kiln")" && pwd)/$(basename "$kiln")
work=$build/scale/plan_test
rm -rf "$work"
mkdir -p "$work"
export PYTHONPATH=$build/python
fm=$root/samples/fashion-mnist
args=(--size 28 --channels 1 --shard-size 64KiB)

# plan_parts PLAN OUT N: packs parts N-1..0 from the plan (any order works), as N workers would.
plan_parts() {
  local plan=$1 out=$2 n=$3 i
  for ((i = n - 1; i >= 0; i--)); do
    "$kiln" pack --plan "$plan" --part "$i" "$out" --threads 2 > /dev/null 2> "$work/pack.log" ||
      { cat "$work/pack.log" >&2; fail "part $i of $n from $plan"; }
  done
}

# --- byte identity, three inputs ------------------------------------------------------------
make_list_input "$root" "$work/listed"
cases=("tree|$fm|" "zstd-shuffled|$fm|--compress zstd --shuffle-seed 3" "list|$work/listed/images/list.txt|")
for c in "${cases[@]}"; do
  IFS='|' read -r name input extra <<< "$c"
  # shellcheck disable=SC2206
  more=($extra)
  d=$work/$name
  mkdir -p "$d"
  "$kiln" plan "$input" "$d/plan.json" --of 4 "${args[@]}" "${more[@]}" > "$d/plan.txt"
  grep -q "in 4 parts into $d/plan.json" "$d/plan.txt" || { cat "$d/plan.txt"; fail "$name: plan report"; }
  grep -q "part 3: items \[750, " "$d/plan.txt" || { cat "$d/plan.txt"; fail "$name: plan ranges"; }
  [[ ! -e $d/plan.json.tmp ]] || fail "$name: kiln plan left plan.json.tmp"
  "$kiln" pack "$input" "$d/plain" "${args[@]}" "${more[@]}" --threads 2 > /dev/null 2>&1
  "$kiln" pack "$input" "$d/one-machine" "${args[@]}" "${more[@]}" --of 4 --threads 2 > /dev/null 2>&1
  pack_parts "$input" "$d/unplanned" 4 "${args[@]}" "${more[@]}" --threads 2
  plan_parts "$d/plan.json" "$d/out" 4
  for i in 0 1 2 3; do
    p=part-0000$i-of-00004
    cmp -s "$d/unplanned.parts/$p/kiln.json" "$d/out.parts/$p/kiln.json" ||
      fail "$name: part $i's kiln.json differs with and without the plan"
    same_bytes "$d/unplanned.parts/$p" "$d/out.parts/$p"
  done
  "$kiln" merge "$d/out.parts" "$d/out" > /dev/null 2>&1
  "$kiln" verify "$d/out" > /dev/null 2>&1 || fail "$name: the merge does not verify"
  same_bytes "$d/one-machine" "$d/out"
  same_samples "$d/plain" "$d/out"
  cmp -s "$d/plain/rejected.tsv" "$d/out/rejected.tsv" || fail "$name: rejected.tsv differs from a plain pack's"
  # Without --part: all N parts in this process, as kiln pack --of N.
  "$kiln" pack --plan "$d/plan.json" "$d/all-here" --threads 2 > /dev/null 2>&1
  same_bytes "$d/one-machine" "$d/all-here"
  echo "$name: plan + 4 parts from it + merge == pack --of 4 (bytes), == plain pack (samples); parts == parts without the plan"
done
grep -q "zz_corrupt.png" "$work/list/out/rejected.tsv" || fail "corrupt image not rejected"

# --- a pinned class map travels in the plan: its parts are those of kiln pack --classes ------
c=$work/classes
mkdir -p "$c"
find "$fm" -mindepth 1 -maxdepth 1 -type d -printf '%f\n' | sort -r > "$c/classes.txt"
"$kiln" plan "$fm" "$c/plan.json" --of 2 "${args[@]}" --classes "$c/classes.txt" > /dev/null
pack_parts "$fm" "$c/unplanned" 2 "${args[@]}" --classes "$c/classes.txt" --threads 2
plan_parts "$c/plan.json" "$c/out" 2
for i in 0 1; do same_bytes "$c/unplanned.parts/part-0000$i-of-00002" "$c/out.parts/part-0000$i-of-00002"; done
grep -q '"class_map": *"'"$c"'/classes.txt"' "$c/out.parts/part-00000-of-00002/kiln.json" ||
  fail "the plan's class map is not in the part's manifest"
expect_usage "the class map dataset .* \(10 classes\) is not the plan's classes \(10 classes from $c/classes.txt\)" \
  "$kiln" pack --plan "$c/plan.json" --part 0 "$c/x" --classes-from "$work/tree/out"
echo "a plan made with --classes: parts == parts of kiln pack --classes; another map refused"

# --- parts with and without a plan merge; parts of two plans of other listings do not --------
d=$work/tree
mkdir -p "$d/mixed.parts"
cp -r "$d/unplanned.parts/part-00000-of-00004" "$d/unplanned.parts/part-00001-of-00004" "$d/mixed.parts/"
for i in 2 3; do
  "$kiln" pack --plan "$d/plan.json" --part "$i" "$d/mixed" --threads 2 > /dev/null 2>&1 || fail "mixed part $i"
done
"$kiln" merge "$d/mixed.parts" "$d/mixed" > /dev/null 2>&1
same_bytes "$d/one-machine" "$d/mixed"
echo "parts packed with and without the plan merge into the same bytes"

g=$work/grown
mkdir -p "$g"
cp -r "$fm" "$g/tree"
"$kiln" plan "$g/tree" "$g/before.json" --of 3 "${args[@]}" > /dev/null
"$kiln" pack "$g/tree" "$g/reference" "${args[@]}" --threads 2 > /dev/null 2>&1
cp "$fm/0_T-shirt_top/$(ls "$fm/0_T-shirt_top" | head -1)" "$g/tree/0_T-shirt_top/added.png"
# The tree grew after planning: parts from the plan do not walk it again.
plan_parts "$g/before.json" "$g/planned" 3
"$kiln" merge "$g/planned.parts" "$g/planned" > /dev/null 2>&1
same_samples "$g/reference" "$g/planned"
echo "a file added after planning: the parts pack the planned listing (1000 images)"
"$kiln" plan "$g/tree" "$g/after.json" --of 3 "${args[@]}" > /dev/null
plan_parts "$g/before.json" "$g/two" 3
"$kiln" pack --plan "$g/after.json" --part 2 "$g/two" --overwrite --threads 2 > /dev/null 2>&1
expect_refusal "part 2 of 3 saw another listing than part 0 of 3 \(1001 images.*vs 1000 images" \
  "$kiln" merge "$g/two.parts" "$g/two"

# --- refusals of kiln pack --plan -----------------------------------------------------------
p=$work/tree/plan.json
expect_usage '--plan .*plan.json: this pack.s options differ from the plan.s: --size is "32x32" here but "28x28" in the plan' \
  "$kiln" pack --plan "$p" --part 1 "$work/x" --size 32
expect_usage '--compress is "zstd:3" here but "none" in the plan' \
  "$kiln" pack --plan "$p" --part 1 "$work/x" --compress zstd
expect_usage "--of 8, but the plan .*plan.json cuts the input into 4 parts" \
  "$kiln" pack --plan "$p" --part 1 --of 8 "$work/x"
expect_usage "lists $fm, not $work/listed: with --plan give only OUTPUT" \
  "$kiln" pack --plan "$p" "$work/listed" "$work/x"
# The same flags as the plan's are fine, and INPUT may be repeated; --part auto takes N from it.
KILN_PART=2 "$kiln" pack "$fm" --plan "$p" --part auto -o "$work/auto" --size 28 --threads 2 \
  > /dev/null 2> "$work/auto.log" || { cat "$work/auto.log"; fail "--part auto with --plan"; }
grep -q "part 2 of 4 from KILN_PART=2 with --of 4 (the plan's number of parts)" "$work/auto.log" ||
  { cat "$work/auto.log"; fail "--part auto did not say it took N from the plan"; }
same_bytes "$work/tree/unplanned.parts/part-00002-of-00004" "$work/auto.parts/part-00002-of-00004"

# --- planned files that vanished or changed size --------------------------------------------
v=$work/vanished
mkdir -p "$v"
cp -r "$fm" "$v/tree"
"$kiln" plan "$v/tree" "$v/plan.json" --of 4 "${args[@]}" > /dev/null
# --on-error is one of the plan's options: a plan made with --on-error fail fails the part.
"$kiln" plan "$v/tree" "$v/failing.json" --of 4 "${args[@]}" --on-error fail > /dev/null
gone=$v/tree/4_Coat/$(ls "$v/tree/4_Coat" | sed -n 3p)     # items 400-499: part 1
grown=$v/tree/6_Shirt/$(ls "$v/tree/6_Shirt" | sed -n 5p)  # items 600-699: part 2
rm "$gone"
printf 'xx' >> "$grown"
"$kiln" pack --plan "$v/plan.json" --part 1 "$v/out" --threads 2 > /dev/null 2> "$v/part1.log" ||
  { cat "$v/part1.log"; fail "part 1 with a vanished file"; }
grep -q "$gone	0	not found: it vanished since the plan $v/plan.json was made (it had [0-9]* bytes then)" \
  "$v/out.parts/part-00001-of-00004/rejected.tsv" || { cat "$v/out.parts/part-00001-of-00004/rejected.tsv"; fail "vanished file not rejected by name"; }
grep -q "rejected $gone: not found: it vanished" "$v/part1.log" || { cat "$v/part1.log"; fail "vanished file not reported"; }
"$kiln" pack --plan "$v/plan.json" --part 2 "$v/out" --threads 2 > /dev/null 2>&1
grep -Eq "$grown	0	changed size since the plan $v/plan.json was made \(([0-9]+) bytes then, [0-9]+ now\)" \
  "$v/out.parts/part-00002-of-00004/rejected.tsv" || { cat "$v/out.parts/part-00002-of-00004/rejected.tsv"; fail "resized file not rejected by name"; }
expect_refusal "$gone: not found: it vanished since the plan .* \(--on-error fail\)" \
  "$kiln" pack --plan "$v/failing.json" --part 1 "$v/failing"
[[ ! -e $v/failing.parts/part-00001-of-00004 ]] || fail "a failed part was left complete"
echo "a planned file that vanished or changed size: rejected by name (skip), fails the part (fail)"

# --- damaged, truncated and foreign plans ---------------------------------------------------
b=$work/bad
mkdir -p "$b"
head -c 2000 "$p" > "$b/truncated.json"
expect_refusal "$b/truncated.json is not JSON \(truncated or damaged\?\): .*\(byte 2001 of 2000\)" \
  "$kiln" pack --plan "$b/truncated.json" --part 0 "$b/out"
sed 's/^\(\["[^"]*",[0-9]*,\)\([0-9]\)/\19\2/' "$p" > "$b/flipped.json"  # every item's size changes
cmp -s "$p" "$b/flipped.json" && fail "the flip did not happen"
expect_refusal "$b/flipped.json: plan checksum mismatch \(stored [0-9a-f]{16}, computed [0-9a-f]{16}\)" \
  "$kiln" pack --plan "$b/flipped.json" --part 0 "$b/out"
expect_refusal "$work/tree/out/kiln.json is not a kiln plan" \
  "$kiln" pack --plan "$work/tree/out/kiln.json" --part 0 "$b/out"
expect_refusal "$b/none.json" "$kiln" pack --plan "$b/none.json" --part 0 "$b/out"
[[ ! -e $b/out && ! -e $b/out.parts ]] || fail "a refused plan left output"

# --- kiln plan itself -----------------------------------------------------------------------
expect_usage "plan .*plan.json exists \(pass --overwrite" "$kiln" plan "$fm" "$p" --of 4 "${args[@]}"
expect_usage "tar shards and TFRecord files are split by file" "$kiln" plan "$b/x.tar" "$b/t.json" --of 2
"$kiln" plan "$fm" "$b/p.json" --of 2 --json > "$b/plan.out"
/usr/bin/python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["ranges"]==[[0,500],[500,1000]], r' "$b/plan.out" ||
  fail "kiln plan --json: $(cat "$b/plan.out")"
# The checksum without kiln (tools/pack/plan_format.md, "Checksum").
sum=$(/usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d.pop("plan_xxh3_64")
sys.stdout.write(json.dumps(d, sort_keys=True, separators=(",",":"), ensure_ascii=False))' "$b/p.json" | xxhsum -H3 | awk '{print $NF}')
grep -q "\"plan_xxh3_64\":\"$sum\"}" "$b/p.json" || fail "python3 + xxhsum do not reproduce plan_xxh3_64 ($sum)"
# The golden plan, made by the CLI from the source tree's root (tests/data/plan/README.md).
(cd "$root" && "$kiln" plan tests/data/plan/list.txt --root samples/fashion-mnist --of 3 \
  --size 28 --channels 1 --shuffle-seed 7 --shard-size 64KiB "$b/golden.plan.json" > /dev/null 2>&1)
cmp "$root/tests/data/plan/golden.plan.json" "$b/golden.plan.json" || fail "kiln plan no longer writes the golden plan"
echo "plan: byte identity, mixed parts, refusals, vanished files, damaged plans, golden plan"
