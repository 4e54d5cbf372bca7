#!/usr/bin/env bash
# Before/after comparison of two kiln binaries, alternating so that drift on a shared machine
# hits both alike (BENCHMARKS.md, "Converter: JPEG straight to RGB" and "Verify: ...").
#
#   bench/ab.sh pack   OLD_KILN NEW_KILN INPUT_TREE  [ROUNDS=6] [kiln pack flags...]
#   bench/ab.sh verify OLD_KILN NEW_KILN DATASET_DIR [ROUNDS=5]
#   bench/ab.sh bench  OLD_KILN NEW_KILN DATASET_DIR [ROUNDS=6] [kiln bench flags...]
#
# pack: each run packs INPUT_TREE into a fresh directory (default flags: --size 224 --channels 3
#   --layout chw --threads 2) and prints images/s (kiln's --json), wall, user and system CPU.
# bench: each run is kiln bench --json (default flags: --threads 2 --epochs 3) and prints
#   samples/s and MB/s; AB_OLD_FLAGS / AB_NEW_FLAGS add flags to one side only (the same binary
#   twice with --read-ahead-mib 0 on one side isolates read-ahead, say).
# verify: each run is bench/verify_rate.py (kiln verify --deep --json, then cat) and prints the
#   process rate, verification's own rate and cat's rate, in MB/s.
# shellcheck source=bench/bench_lib.sh
source "$(dirname "$0")/bench_lib.sh"
mode=$1 old=$2 new=$3 target=$4
rounds=${5:-$([[ $mode == verify ]] && echo 5 || echo 6)}
shift $(($# < 5 ? $# : 5))
flags=("$@")
if ! ((${#flags[@]})); then
  if [[ $mode == bench ]]; then
    flags=(--threads 2 --epochs 3)
  else
    flags=(--size 224 --channels 3 --layout chw --threads 2)
  fi
fi
bench_tmpdir out
for ((r = 1; r <= rounds; r++)); do
  for v in before after; do
    bin=$old
    [[ $v == after ]] && bin=$new
    case $mode in
      pack)
        rm -rf "$out/ds"
        sync
        /usr/bin/time -f "%e %U %S" -o "$out/time" "$bin" pack "$target" "$out/ds" "${flags[@]}" \
          --json 2>/dev/null >"$out/pack.json"
        /usr/bin/python3 -c '
import json, sys
j = json.load(open(sys.argv[1])); w, u, s = open(sys.argv[2]).read().split()
print("%s images/s %.0f wall %s user %s sys %s" % (sys.argv[3], j["images_per_s"], w, u, s))' \
          "$out/pack.json" "$out/time" "$v"
        ;;
      verify)
        /usr/bin/python3 bench/verify_rate.py "$bin" "$target" | /usr/bin/python3 -c '
import json, sys
j = json.load(sys.stdin)
print("%s process %.0f MB/s, verify %.0f MB/s, cat %.0f MB/s" % (
    sys.argv[1], j["verify_mb_per_s"], j["verify_inner_mb_per_s"], j["cat_mb_per_s"]))' "$v"
        ;;
      bench)
        side_flags=${AB_OLD_FLAGS:-}
        [[ $v == after ]] && side_flags=${AB_NEW_FLAGS:-}
        # shellcheck disable=SC2086  # side flags are words
        "$bin" bench "$target" "${flags[@]}" $side_flags --json 2>/dev/null | /usr/bin/python3 -c '
import json, sys
j = json.load(sys.stdin)
print("%s samples/s %.0f MB/s %.1f" % (sys.argv[1], j["samples_per_s"], j["mb_per_s"]))' "$v"
        ;;
      *) echo "bench/ab.sh: mode is pack, verify or bench, not '$mode'" >&2; exit 2 ;;
    esac
  done
done
