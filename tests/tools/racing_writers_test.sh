#!/usr/bin/env bash
# Two writers started into one output a moment apart, repeated, for every format, with the flock
# method and with the lock-file method (KILN_LOCK=file), for a plain pack, --overwrite and
# --resume, and a kiln merge into an output a pack is writing: exactly one writer runs; the other
# exits 2 at once naming the output and the running writer (host and pid); the winner's dataset
# verifies and no staging directory or lock file is left behind.
#   tests/tools/racing_writers_test.sh KILN_BINARY
set -euo pipefail
kiln=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
input=$root/samples/fashion-mnist
# Slow enough (about a second on one thread) that the second writer starts while the first runs.
args=(--size 96 --channels 3 --threads 1 --shard-size 1MiB)
host=$(hostname)
formats=$("$kiln" pack --help 2>&1 | grep -- '--format TEXT' | grep -o 'shards\|lmdb\|hdf5' | sort -u | tr '\n' ' ')
races=0

# race NAME OUT EXTRA...: starts two packs into OUT 50 ms apart; checks the outcome. On a
# loaded machine the second may start only after the first finished (it then meets a finished
# output, not a running writer): that trial proves nothing and is run again, up to 5 times.
race() {
  local attempt
  for attempt in 1 2 3 4 5; do
    race_once "$@" && return 0
    [[ " $* " == *" --overwrite "* ]] || rm -rf "$2"  # the next attempt starts from nothing
  done
  echo "$1: the two writers never overlapped in 5 attempts"
  exit 1
}

# race_once NAME OUT EXTRA...: returns 1 when the writers did not overlap; exits on a failure.
race_once() {
  local name=$1 out=$2
  shift 2
  "$kiln" pack "$input" "$out" "${args[@]}" "$@" > "$work/a.out" 2> "$work/a.err" &
  local a=$!
  sleep 0.05
  "$kiln" pack "$input" "$out" "${args[@]}" "$@" > "$work/b.out" 2> "$work/b.err" &
  local b=$!
  local ra=0 rb=0
  wait "$a" || ra=$?
  wait "$b" || rb=$?
  local winner loser err
  if ((ra == 0 && rb == 0)) || grep -q "exists and is not empty" "$work/a.err" "$work/b.err"; then
    [[ -e $out/kiln.json ]] && "$kiln" verify "$out" > /dev/null && return 1  # one after the other
  fi
  if ((ra == 0 && rb == 2)); then
    winner=$a loser=$b err=$work/b.err
  elif ((ra == 2 && rb == 0)); then
    winner=$b loser=$a err=$work/a.err
  else
    echo "$name: exit codes $ra and $rb (want one 0, one 2)"
    cat "$work/a.err" "$work/b.err"
    exit 1
  fi
  grep -q "output $out is being written by another process (host $host pid $winner " "$err" || {
    echo "$name: the loser (pid $loser) does not name the output and the writer (pid $winner):"
    cat "$err"
    exit 1
  }
  "$kiln" verify "$out" > /dev/null || { echo "$name: the winner's dataset does not verify"; exit 1; }
  [[ ! -e $out.partial && ! -e $out.partial.lock ]] || {
    echo "$name: left $(ls -d "$out".partial* 2> /dev/null)"
    exit 1
  }
  races=$((races + 1))
}

for method in flock file; do
  for format in $formats; do
    export KILN_LOCK=$method
    base=$work/$method-$format
    for trial in 1 2; do
      race "$method $format plain #$trial" "$base-$trial" --format "$format"
    done
    race "$method $format --overwrite" "$base-1" --format "$format" --overwrite
    race "$method $format --resume" "$base-resume" --format "$format" --resume
    echo "$method $format: ok"
  done
done

# kiln merge into an output that a pack is writing: refused, naming the pack.
export KILN_LOCK=flock
"$kiln" pack "$input" "$work/m" --size 28 --channels 1 --part 0 --of 2 > /dev/null 2>&1
"$kiln" pack "$input" "$work/m" --size 28 --channels 1 --part 1 --of 2 > /dev/null 2>&1
"$kiln" pack "$input" "$work/merged" "${args[@]}" > /dev/null 2> "$work/p.err" &
pack_pid=$!
for _ in $(seq 1 100); do [[ -e $work/merged.partial.lock ]] && break; sleep 0.01; done
rc=0
"$kiln" merge "$work/m.parts" "$work/merged" > /dev/null 2> "$work/merge.err" || rc=$?
wait "$pack_pid"
((rc == 2)) || { echo "merge during a pack: exit $rc (want 2)"; cat "$work/merge.err"; exit 1; }
grep -q "output $work/merged is being written by another process (host $host pid $pack_pid " \
  "$work/merge.err" || { echo "merge does not name the pack:"; cat "$work/merge.err"; exit 1; }
"$kiln" verify "$work/merged" > /dev/null
[[ -d $work/m.parts/part-00000-of-00002 ]] || { echo "the refused merge touched the parts"; exit 1; }
echo "$races races: one writer each, the other refused naming it; merge refused during a pack"
