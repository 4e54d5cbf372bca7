#!/usr/bin/env bash
# Dataset order (shuffle none) over HTTP, one kiln build against another, alternated in one run
# (old, new, old, new, ...) with 0 and 20 ms of added round trip (fault_proxy.py --delay-ms 10:
# this kernel has no netem). Prints each run's samples/s, MB/s and range GETs; take medians.
#
#   OLD_KILN=/path/to/old/tools/kiln bench/remote_order_ab.sh
#   SAMPLES=200000 ROUNDS=5 RTTS=0 OLD_KILN=... bench/remote_order_ab.sh
source "$(dirname "$0")/bench_lib.sh"
old=${OLD_KILN:?OLD_KILN: the kiln CLI to compare against}
samples=${SAMPLES:-60000}
bench_remote_servers work
servers=$work/servers
"$synth" "$WWW_DIR/ds" "$samples" 28x28x1 shards > /dev/null
p20=$("$repo/tests/reader/remote/remote_servers.sh" start-proxy "$servers" http20 "$HTTP_URL" --delay-ms 10)
bench_machine
for round in $(seq 1 "${ROUNDS:-3}"); do
  for rtt in ${RTTS:-0 20}; do
    url=$HTTP_URL
    ((rtt > 0)) && url=$p20
    for which in old new; do
      bin=$old
      [[ $which == new ]] && bin=$kiln
      out=$("$bin" bench "$url/ds" --epochs 1 --shuffle none 2>&1)
      echo "round $round rtt $rtt $which: $(grep -o '[0-9.]* samples/s, [0-9.]* MB/s' <<< "$out" | head -n 1); $(grep -o 'remote: [0-9]* range GETs' <<< "$out")"
    done
  done
done
