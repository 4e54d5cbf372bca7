#!/usr/bin/env bash
# kiln pack, kiln bench and kiln.Loader where threads cannot be had: under RLIMIT_NPROC 0 (as an
# unprivileged user of its own when run as root, for whom the limit is not enforced) no thread
# can start. `kiln pack --threads 4` must exit 1 naming the limit and --threads, leaving no
# OUT and no OUT.partial, and `--threads 1` (no extra thread) must still pack; `kiln bench`
# must exit 1 naming --threads; kiln.Loader must raise kiln.KilnIOError naming num_threads.
# Each check first proves that the limit bites (the command fails), so it cannot pass vacuously.
#   tests/tools/thread_limits_test.sh KILN_BINARY [PYTHONPATH]
set -euo pipefail
kiln=$1
pythonpath=${2:-}
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
chmod 0777 "$work"
input=$root/samples/fashion-mnist
"$kiln" pack "$input" "$work/data" --size 28 --channels 1 > /dev/null 2>&1
chmod -R a+rX "$work/data"

uid=$((61000 + $$ % 2000))  # as root: a user id of this test's own, that no process has
# The limit is enforced only for an unprivileged user, who must reach the build tree: a checkout
# under a 0700 directory (a `mktemp -d`, a home directory) cannot be tested this way. Say so and
# skip (CTest SKIP_RETURN_CODE 77) rather than report a failure of kiln.
if [[ $(id -u) == 0 ]] && ! setpriv --reuid="$uid" --regid="$uid" --clear-groups -- test -x "$kiln"; then
  echo "skipped: user id $uid cannot execute $kiln (a parent directory of it is not" \
    "searchable by others); RLIMIT_NPROC is not enforced for root" >&2
  exit 77
fi
# limited CMD...: runs CMD with no thread to be had.
limited() {
  if [[ $(id -u) == 0 ]]; then
    setpriv --reuid="$uid" --regid="$uid" --clear-groups -- prlimit --nproc=0 -- "$@"
  else
    prlimit --nproc=0 -- "$@"
  fi
}

rc=0
limited "$kiln" pack "$input" "$work/out" --size 28 --channels 1 --threads 4 > /dev/null \
  2> "$work/pack.err" || rc=$?
((rc == 1)) || { echo "kiln pack --threads 4 under the limit: exit $rc (want 1)"; cat "$work/pack.err"; exit 1; }
grep -q "cannot start 3 worker threads for --threads 4" "$work/pack.err" &&
  grep -q "RLIMIT_NPROC" "$work/pack.err" && grep -q "lower --threads" "$work/pack.err" ||
  { echo "kiln pack: the message does not name the limit and --threads:"; cat "$work/pack.err"; exit 1; }
[[ ! -e $work/out && ! -e $work/out.partial && ! -e $work/out.partial.lock ]] ||
  { echo "kiln pack left $(ls -d "$work"/out* )"; exit 1; }
limited "$kiln" pack "$input" "$work/out" --size 28 --channels 1 --threads 1 > /dev/null 2>&1 ||
  { echo "kiln pack --threads 1 under the limit failed"; exit 1; }
"$kiln" verify "$work/out" > /dev/null
echo "kiln pack: ok"

if [[ $(id -u) == 0 ]]; then
  # Some threads but not all: oneTBB starts workers from its workers, where a failure aborts
  # the process; the pack must refuse before that. As the only process of its user, kiln may
  # run 4 threads (itself and 3) under RLIMIT_NPROC 4.
  rm -rf "$work/out"
  rc=0
  setpriv --reuid="$uid" --regid="$uid" --clear-groups -- prlimit --nproc=4 -- \
    "$kiln" pack "$input" "$work/out" --size 28 --channels 1 --threads 8 > /dev/null \
    2> "$work/pack.err" || rc=$?
  ((rc == 1)) && grep -q "lower --threads (4 would run now)" "$work/pack.err" ||
    { echo "kiln pack --threads 8 under RLIMIT_NPROC 4: exit $rc"; cat "$work/pack.err"; exit 1; }
  [[ ! -e $work/out && ! -e $work/out.partial ]] || { echo "kiln pack left its output"; exit 1; }
  setpriv --reuid="$uid" --regid="$uid" --clear-groups -- prlimit --nproc=4 -- \
    "$kiln" pack "$input" "$work/out" --size 28 --channels 1 --threads 4 > /dev/null 2>&1 ||
    { echo "kiln pack --threads 4 under RLIMIT_NPROC 4 failed"; exit 1; }
  "$kiln" verify "$work/out" > /dev/null
  echo "kiln pack, partial limit: ok"
fi

rc=0
limited "$kiln" bench "$work/data" --threads 2 --epochs 1 > /dev/null 2> "$work/bench.err" || rc=$?
((rc == 1)) || { echo "kiln bench under the limit: exit $rc (want 1)"; cat "$work/bench.err"; exit 1; }
grep -q "cannot start fetch thread 1 of 2" "$work/bench.err" && grep -q -- "--threads" "$work/bench.err" ||
  { echo "kiln bench: the message does not name the threads:"; cat "$work/bench.err"; exit 1; }
echo "kiln bench: ok"

if [[ -n $pythonpath && -d $pythonpath/kiln ]]; then
  cat > "$work/loader.py" << 'PY'
import sys
import kiln
try:
    kiln.Loader(sys.argv[1], batch_size=10, num_threads=2, backend="numpy")
except kiln.KilnIOError as e:
    assert "cannot start fetch thread 1 of 2" in str(e) and "num_threads" in str(e), str(e)
    print("raised KilnIOError")
    sys.exit(0)
print("no error")
sys.exit(1)
PY
  out=$(limited env PYTHONPATH="$pythonpath" OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 \
    /usr/bin/python3 "$work/loader.py" "$work/data" 2>&1) ||
    { echo "kiln.Loader under the limit: $out"; exit 1; }
  echo "kiln.Loader: ok"
fi
