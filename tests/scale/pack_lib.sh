# Helpers of the partitioned-pack tests (source this file; needs $kiln and $work set).

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# same_bytes A B: every file of dataset A and B is byte-identical, and they hold the same names.
same_bytes() {
  diff -r "$1" "$2" > /dev/null || { diff -rq "$1" "$2" >&2; fail "$1 and $2 differ"; }
}

# same_samples A B: the same samples in the same order (tensor bytes, labels, keys, classes).
same_samples() {
  /usr/bin/python3 "$(dirname "${BASH_SOURCE[0]}")/same_samples.py" "$1" "$2" > /dev/null ||
    fail "$1 and $2 do not hold the same samples"
}

# pack_parts INPUT OUT N ARGS...: packs parts 0..N-1 one after the other, as N workers would.
pack_parts() {
  local input=$1 out=$2 n=$3 i
  shift 3
  for ((i = 0; i < n; i++)); do
    "$kiln" pack "$input" "$out" "$@" --part "$i" --of "$n" > /dev/null 2> "$work/pack.log" ||
      { cat "$work/pack.log" >&2; fail "part $i of $n"; }
  done
}

# expect_exit CODE REGEX CMD...: CMD exits CODE and its stderr matches REGEX.
expect_exit() {
  local code=$1 regex=$2 rc=0
  shift 2
  "$@" > /dev/null 2> "$work/refusal.log" || rc=$?
  [[ $rc -eq $code ]] || { cat "$work/refusal.log" >&2; fail "expected exit $code, got $rc: $*"; }
  grep -Eq -- "$regex" "$work/refusal.log" ||
    { cat "$work/refusal.log" >&2; fail "message does not match /$regex/: $*"; }
  echo "refused as expected: $(head -c 300 "$work/refusal.log" | head -1)"
}
# expect_refusal REGEX CMD...: CMD exits 1 (data problem) and its stderr matches REGEX.
expect_refusal() { expect_exit 1 "$@"; }
# expect_usage REGEX CMD...: CMD exits 2 (usage) and its stderr matches REGEX.
expect_usage() { expect_exit 2 "$@"; }

# make_list_input ROOT DIR: DIR/list.txt lists the Fashion-MNIST sample tree (ROOT/samples/
# fashion-mnist, copied to DIR/images) with a corrupt image and a malformed line placed among
# items 500-749, which fall in part 2 of 4.
make_list_input() {
  local root=$1 dir=$2
  mkdir -p "$dir"
  cp -r "$root/samples/fashion-mnist" "$dir/images"
  head -c 3000 /dev/urandom > "$dir/images/3_Dress/zz_corrupt.png"
  (cd "$dir/images" && find . -name '*.png' ! -name zz_corrupt.png | sort | sed 's|^\./||' |
    awk '{ split($0, p, "_"); print $0, substr(p[1], 1, 1) + 0 }') > "$dir/all.txt"
  {
    head -n 600 "$dir/all.txt"
    echo "3_Dress/zz_corrupt.png 3"
    echo "this line has no label.png"
    tail -n +601 "$dir/all.txt"
  } > "$dir/images/list.txt"
}
