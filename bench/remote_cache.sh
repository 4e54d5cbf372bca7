#!/usr/bin/env bash
# The local cache of a dataset at a URL (reader/remote/disk_cache.md): exact order over HTTP
# (nginx on 127.0.0.1, and through fault_proxy.py with 20 ms added round trip), EPOCHS epochs,
# with no cache, with an empty cache (the first epoch fills it), with a full one (a restarted
# job), with one of about half the dataset, and the same dataset read from local disk (the
# direct path, and the page cache); the runs of a round alternate. Each line: the run's
# samples/s, the requests and bytes fetched, the reads and bytes served from the cache, and the
# process's CPU seconds (user + system). Take medians over the rounds.
#
#   bench/remote_cache.sh
#   SAMPLES=200000 EPOCHS=3 ROUNDS=5 RTTS="0 20" bench/remote_cache.sh
source "$(dirname "$0")/bench_lib.sh"
samples=${SAMPLES:-200000}
epochs=${EPOCHS:-3}
bench_remote_servers work
servers=$work/servers
"$synth" "$work/ds" "$samples" 28x28x1 shards > /dev/null
cp -r "$work/ds" "$WWW_DIR/ds"
bytes=$(stat -c %s "$work/ds"/shard-*.kiln | awk '{ s += $1 } END { print s }')
bench_machine
echo "dataset: $samples samples of 28x28x1, $bytes bytes of shards; $epochs epochs of exact order"

run() {  # label location [VAR=VALUE...] [-- kiln bench options...]
  local label=$1 location=$2 out vars=() args=()
  shift 2
  while (($#)) && [[ $1 != -- ]]; do vars+=("$1"); shift; done
  (($#)) && shift && args=("$@")
  out=$(env "${vars[@]}" /usr/bin/time -f 'cpu %U %S' "$kiln" bench "$location" --epochs "$epochs" \
    --shuffle exact "${args[@]}" 2>&1) || {
    echo "$label: failed: $(tail -n 1 <<< "$out")"
    return 0
  }
  echo "$label: $(grep -o '[0-9]* samples/s' <<< "$out" | head -n 1);" \
    "$(grep -o 'remote: [0-9]* range GETs' <<< "$out" | sed 's/remote: //')" \
    "$(grep -o '[0-9.]* MB, latency' <<< "$out" | sed 's/, latency/ fetched/')" \
    "$(grep -o 'local cache: .*' <<< "$out" | sed 's/ (no request)//')" \
    "$(grep -o 'cpu [0-9.]* [0-9.]*' <<< "$out" | awk '{ printf "cpu %.2f s", $2 + $3 }')"
}

for rtt in ${RTTS:-0 20}; do
  url=$HTTP_URL
  if ((rtt > 0)); then
    url=$("$repo/tests/reader/remote/remote_servers.sh" start-proxy "$servers" "rtt$rtt" "$HTTP_URL" \
      --delay-ms $((rtt / 2)))
  fi
  echo "== $rtt ms added round trip"
  for round in $(seq 1 "${ROUNDS:-3}"); do
    cache=$work/cache-$rtt-$round
    half=$work/half-$rtt-$round
    run "round $round, no cache" "$url/ds"
    run "round $round, empty cache" "$url/ds" KILN_REMOTE_CACHE_DIR="$cache"
    run "round $round, full cache" "$url/ds" KILN_REMOTE_CACHE_DIR="$cache"
    # Half the shards' bytes: a cache smaller than the dataset; filled, then read again.
    run "round $round, half cache (filling)" "$url/ds" KILN_REMOTE_CACHE_DIR="$half" KILN_REMOTE_CACHE_BYTES=$((bytes / 2))
    run "round $round, half cache (filled)" "$url/ds" KILN_REMOTE_CACHE_DIR="$half" KILN_REMOTE_CACHE_BYTES=$((bytes / 2))
    if ((rtt == 0)); then
      run "round $round, local direct" "$work/ds" -- --io direct
      "$kiln" bench "$work/ds" --epochs 1 --shuffle none > /dev/null 2>&1  # into the page cache
      run "round $round, local mmap (page cache)" "$work/ds"
    fi
    rm -rf "$cache" "$half"
  done
done
