#!/usr/bin/env bash
# Hedged requests against a slow tail: exact order over HTTP through fault_proxy.py holding
# every K-th request S ms before it reaches nginx (--slow-every K --slow-ms S), hedging on (the
# default policy) and off (KILN_REMOTE_HEDGE_P95_MULTIPLE=0) alternated. Prints each run's
# seconds, samples/s, the request latency p50/p99 and the hedge counters; take medians.
#
#   bench/remote_hedge.sh
#   SAMPLES=5000 ROUNDS=5 SLOW_EVERY=50 SLOW_MS=2000 bench/remote_hedge.sh
source "$(dirname "$0")/bench_lib.sh"
samples=${SAMPLES:-2000}
bench_remote_servers work
servers=$work/servers
"$synth" "$WWW_DIR/ds" "$samples" 28x28x1 shards > /dev/null
url=$("$repo/tests/reader/remote/remote_servers.sh" start-proxy "$servers" slow "$HTTP_URL" \
  --slow-every "${SLOW_EVERY:-25}" --slow-ms "${SLOW_MS:-3000}")
bench_machine
for round in $(seq 1 "${ROUNDS:-3}"); do
  for multiple in 3 0; do
    out=$(KILN_REMOTE_HEDGE_P95_MULTIPLE=$multiple "$kiln" bench "$url/ds" --epochs 1 --shuffle exact 2>&1)
    echo "round $round hedge p95 x $multiple: $(grep -o 'in [0-9.]* s: [0-9]* samples/s' <<< "$out" | head -n 1); $(grep -o 'remote: .*' <<< "$out")"
  done
done
