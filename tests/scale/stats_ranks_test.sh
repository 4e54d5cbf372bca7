#!/usr/bin/env bash
# kiln stats on a real multi-rank run: 4 ranks of a Python training loop (stats_rank.py) with the
# loader's stats export on, rank 2's data behind a throttled storage path (throttled_http.py:
# the same dataset over HTTP at 100 kB/s); `kiln stats --json DIR` must name rank 2 the worst
# rank, storage-bound, waiting for data far more than the others, and slowest in most intervals.
#   tests/scale/stats_ranks_test.sh BUILD_DIR KILN [LAUNCHER]
# LAUNCHER: env (the default: 4 processes with torchrun's variables RANK, WORLD_SIZE, LOCAL_RANK,
# TORCHELASTIC_RUN_ID; no engine needed), mpi (Open MPI's mpirun -np 4, tests/scale/mpi_run.sh)
# or srun (srun -n 4 inside a running Slurm allocation or cluster, tests/scale/slurm_cluster.sh).
# Exit 77 (skip) with a message when the build's kiln.Loader has no stats export (stats_dir), or
# the reader was built without remote reads (libcurl).
set -euo pipefail
build=$1 kiln=$2 launcher=${3:-env}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
python=/usr/bin/python3
export PYTHONPATH=$build/python
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

rc=0
"$python" - << 'PY' || rc=$?
import inspect, sys
import kiln
if "stats_dir" not in inspect.signature(kiln.Loader).parameters:
    print("SKIP: this build's kiln.Loader has no stats export (no stats_dir option): "
          "kiln stats has nothing to read yet")
    sys.exit(3)
PY
[[ $rc -eq 3 ]] && exit 77
[[ $rc -eq 0 ]] || fail "cannot import kiln from $build/python"

work=$build/scale/stats_ranks_test
rm -rf "$work"
mkdir -p "$work/www" "$work/stats"
"$kiln" pack "$root/samples/fashion-mnist" "$work/www/ds" --size 28 --channels 1 --threads 2 \
  > /dev/null 2> "$work/pack.log" || { cat "$work/pack.log"; fail "kiln pack"; }

# The throttled storage path, stopped by its pid however the test ends.
"$python" "$here/throttled_http.py" "$work/www" --port-file "$work/port" --rate 100000 \
  > "$work/http.log" 2>&1 &
server=$!
trap 'kill "$server" 2> /dev/null || true; wait "$server" 2> /dev/null || true' EXIT
for _ in $(seq 1 100); do
  [[ -s $work/port ]] && break
  sleep 0.1
done
[[ -s $work/port ]] || { cat "$work/http.log"; fail "throttled_http.py did not start"; }
url=http://127.0.0.1:$(cat "$work/port")/ds
"$python" -c "import kiln, sys; kiln.Dataset(sys.argv[1])" "$url" 2> "$work/remote.log" || {
  if grep -qi "remote\|not supported\|curl" "$work/remote.log"; then
    cat "$work/remote.log"
    echo "SKIP: this build reads no URLs (KILN_WITH_REMOTE off or no libcurl)"
    exit 77
  fi
  cat "$work/remote.log"
  fail "cannot open $url"
}

# 4 ranks, 6 s each, intervals of 0.5 s, a 5 ms training step per batch of 16 (at most 3,200
# samples/s: the healthy ranks wait little); rank 2 gets about 100 samples/s from its storage.
args=("$here/stats_rank.py" "$work/www/ds" "$url" 2 "$work/stats" 0.5 6 5)
case $launcher in
  env)
    pids=()
    for r in 0 1 2 3; do
      RANK=$r WORLD_SIZE=4 LOCAL_RANK=$r LOCAL_WORLD_SIZE=4 TORCHELASTIC_RUN_ID=kiln-stats-test \
        "$python" "${args[@]}" > "$work/rank$r.log" 2>&1 &
      pids+=($!)
    done
    for r in 0 1 2 3; do
      wait "${pids[$r]}" || { cat "$work/rank$r.log"; fail "rank $r"; }
      cat "$work/rank$r.log"
    done
    ;;
  mpi)
    source "$here/mpi_run.sh"
    mpi_run -np 4 -x PYTHONPATH "$python" "${args[@]}" || fail "mpirun"
    ;;
  srun)
    srun -n 4 --export=ALL "$python" "${args[@]}" || fail "srun"
    ;;
  *) fail "unknown launcher $launcher (env, mpi or srun)" ;;
esac

ls "$work/stats"
"$kiln" stats "$work/stats" --png "$work/wait.png" || fail "kiln stats"
"$kiln" stats --json "$work/stats" > "$work/stats.json" || fail "kiln stats --json"
"$python" - "$work/stats.json" "$work/wait.png" << 'PY' || fail "kiln stats did not name rank 2"
import json, os, sys
j = json.load(open(sys.argv[1]))
ranks = {r["rank"]: r for r in j["summary"]["ranks"]}
assert sorted(ranks) == [0, 1, 2, 3], sorted(ranks)
assert j["world_size"] == 4, j["world_size"]
slow = ranks[2]
print("worst rank", j["summary"]["worst_rank"], {r: (round(v["samples_per_s"]), round(v["wait_share"], 2),
      v["bottleneck"]) for r, v in ranks.items()})
assert j["summary"]["worst_rank"] == 2, j["summary"]["worst_rank"]
assert slow["bottleneck"] == "storage", slow["verdict"]
for r in (0, 1, 3):
    assert slow["samples_per_s"] < 0.5 * ranks[r]["samples_per_s"], (r, ranks[r])
    assert slow["wait_share"] > ranks[r]["wait_share"] + 0.3, (r, ranks[r])
assert slow["slowest_in"] >= 0.5 * slow["intervals"] > 0, slow
assert os.path.getsize(sys.argv[2]) > 1000
PY
echo "kiln stats: rank 2 of 4 named the worst, storage-bound ($launcher launcher)"
