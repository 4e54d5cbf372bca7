#!/usr/bin/env bash
# Reading one dataset from local disk, from nginx (HTTP range GETs) and from OpenStack Swift's S3
# layer (SigV4), in one run, against the bound curl gets from the same server with the same
# range sizes and concurrency (curl --parallel, as many requests in flight as kiln's fetch
# threads keep), with 0 and with 20 ms of added round trip (tests/reader/remote/fault_proxy.py,
# 10 ms each way: this kernel has no netem; kiln and curl both go through it), and beside what
# a PyTorch user writes instead (bench/remote_boto3.py: a DataLoader whose workers fetch each
# record with a boto3 range GET from S3, or with urllib3 from the HTTP server). Servers: tests/reader/remote/remote_servers.sh on 127.0.0.1,
# stopped by pid when the script exits. Each kiln line has the client's CPU seconds (user +
# system, /usr/bin/time) per GB read, to compare with the local direct path's.
#
#   bench/remote.sh                       # 60,000 samples of 28x28x1
#   SAMPLES=20000 SHAPE=32x32x3 EPOCHS=2 bench/remote.sh
#   RTTS="0 20" S3_SAMPLES=4000 bench/remote.sh
#
# Orders: none (dataset order: extents of block_bytes, 4 MiB, one GET each, several read ahead;
# bound: curl reading the file in 8 MiB ranges), block (one GET per block; bound: curl reading block-sized
# ranges) and exact (records one GET each, merged where a chunk's records neighbour; bound: curl
# fetching record-sized ranges at random offsets, and wrk doing the same with 128 connections). S3 reads a smaller dataset (S3_SAMPLES):
# Swift's Python proxy serves about a thousand GETs a second on a small machine.
source "$(dirname "$0")/bench_lib.sh"

samples=${SAMPLES:-60000}
shape=${SHAPE:-28x28x1}
epochs=${EPOCHS:-1}
inflight=${INFLIGHT:-512}  # kiln: 256 per fetch thread, 2 threads by default
rtts=${RTTS:-0 20}
s3_samples=${S3_SAMPLES:-4000}
bench_remote_servers work
servers=$work/servers

"$synth" "$work/ds" "$samples" "$shape" shards > /dev/null
"$synth" "$work/s3ds" "$s3_samples" "$shape" shards > /dev/null
cp -r "$work/ds" "$WWW_DIR/ds"
export AWS_ACCESS_KEY_ID=test:tester AWS_SECRET_ACCESS_KEY=testing AWS_REGION=us-east-1
export AWS_ENDPOINT_URL=$S3_ENDPOINT AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null
unset AWS_CA_BUNDLE AWS_PROFILE AWS_SESSION_TOKEN
env RCLONE_CONFIG_KS3_TYPE=s3 RCLONE_CONFIG_KS3_PROVIDER=Other \
  RCLONE_CONFIG_KS3_ACCESS_KEY_ID=test:tester RCLONE_CONFIG_KS3_SECRET_ACCESS_KEY=testing \
  RCLONE_CONFIG_KS3_REGION=us-east-1 RCLONE_CONFIG_KS3_FORCE_PATH_STYLE=true \
  RCLONE_CONFIG_KS3_ENDPOINT="$S3_ENDPOINT" sh -c \
  'rclone --config /dev/null -q mkdir ks3:kiln-bench && rclone --config /dev/null -q copy "$0" ks3:kiln-bench/ds' \
  "$work/s3ds"

shard=$work/ds/shard-00000.kiln
bytes=$(stat -c %s "$shard")
record=$(("$bytes" / "$samples"))
bench_machine
echo "dataset: $samples samples of $shape, one shard of $bytes bytes (about $record bytes a record)"

kiln_line() {  # order location label [kiln bench options...]
  local out rate remote cpu order=$1 location=$2 label=$3
  shift 3
  out=$(/usr/bin/time -f 'cpu %U %S' "$kiln" bench "$location" --epochs "$epochs" --shuffle "$order" "$@" 2>&1) || {
    echo "$label: kiln bench failed: $(tail -n 1 <<< "$out")"
    return 0
  }
  rate=$(grep -o '[0-9.]* samples/s, [0-9.]* MB/s' <<< "$out" | head -n 1)
  remote=$(grep -o 'remote: [0-9]* range GETs ([0-9]* retries' <<< "$out" | sed 's/remote: //; s/(/, /' || true)
  cpu=$(awk -v mb="$(grep -o '[0-9.]* MB/s' <<< "$out" | head -n 1 | cut -d' ' -f1)" \
    -v secs="$(grep -o 'in [0-9.]* s:' <<< "$out" | head -n 1 | tr -dc '0-9.')" \
    '/^cpu / { c = $2 + $3; gb = mb * secs / 1000; if (gb > 0) printf "%.1f CPU s/GB", c / gb }' <<< "$out")
  echo "kiln  $label: $rate, $cpu${remote:+, $remote}"
}

# curl's bound: the ranges of RANGES_FILE (START-END lines), each REPEAT times, INFLIGHT in
# flight; GET/s and MB/s of body bytes.
curl_line() {  # label url ranges_file repeat
  local label=$1 url=$2 ranges=$3 repeat=$4
  local config=$work/curl.cfg n bytes start end
  for _ in $(seq 1 "$repeat"); do cat "$ranges"; done > "$work/ranges.rep"
  n=$(wc -l < "$work/ranges.rep")
  bytes=$(awk -F- '{ b += $2 - $1 + 1 } END { print b }' "$work/ranges.rep")
  awk -v u="$url" '{ print "url = \"" u "\"\noutput = \"/dev/null\"\nheader = \"Range: bytes=" $1 "\"" }' \
    "$work/ranges.rep" > "$config"
  start=$(date +%s.%N)
  curl --no-progress-meter --parallel --parallel-immediate --parallel-max "$inflight" -K "$config"
  end=$(date +%s.%N)
  awk -v n="$n" -v b="$bytes" -v s="$start" -v e="$end" -v label="$label" \
    'BEGIN { t = e - s; printf "curl  %s: %d range GETs in %.2f s = %.0f GET/s, %.1f MB/s\n", label, n, t, n / t, b / t / 1e6 }'
}

# wrk's bound for exact order: random record-sized ranges (bench/wrk_random_ranges.lua), as many
# connections as kiln's fetch threads use (64 each), for WRK_SECONDS; curl --parallel is no bound
# there (its own CPU, see below).
wrk_line() {  # label url
  local out
  out=$(OBJECT_BYTES=$bytes RANGE_BYTES=$record wrk -t 2 -c "${WRK_CONNECTIONS:-128}" \
    -d "${WRK_SECONDS:-10}s" -s "$repo/bench/wrk_random_ranges.lua" "$2" 2>&1 | grep '^wrk:')
  echo "wrk   $1: ${out#wrk: }"
}

seq_ranges=$work/seq.txt
awk -v b="$bytes" 'BEGIN { for (o = 0; o < b; o += 8388608) { e = o + 8388607; if (e >= b) e = b - 1; print o "-" e } }' > "$seq_ranges"
# kiln's block: 4 MiB of samples, clamped to N / 16 samples (reader/sampler.h)
block_samples=$((4194304 / record))
((block_samples > samples / 16)) && block_samples=$((samples / 16))
block=$((block_samples * record))
block_ranges=$work/block.txt
awk -v b="$bytes" -v s="$block" 'BEGIN { for (o = 64; o < b - 64; o += s) { e = o + s - 1; if (e >= b) e = b - 1; print o "-" e } }' > "$block_ranges"
rand_ranges=$work/rand.txt
# curl --parallel's own CPU grows with the transfer count (measured: 20,000 ranges took 331 s of
# curl CPU on 2 cores, 60 GET/s), so the random-range bound uses 2,000 of them.
awk -v b="$bytes" -v r="$record" -v n="$((samples < 2000 ? samples : 2000))" \
  'BEGIN { srand(1); for (i = 0; i < n; ++i) { o = 64 + int(rand() * ((b - 64) / r - 1)) * r; print o "-" (o + r - 1) } }' > "$rand_ranges"

for order in none block exact; do kiln_line "$order" "$work/ds" "local $order (direct)" --io direct; done
for rtt in $rtts; do
  http=$HTTP_URL s3=$S3_ENDPOINT
  if ((rtt > 0)); then
    half=$((rtt / 2))
    http=$("$repo/tests/reader/remote/remote_servers.sh" start-proxy "$servers" http$rtt "$HTTP_URL" --delay-ms "$half")
    s3=$("$repo/tests/reader/remote/remote_servers.sh" start-proxy "$servers" s3$rtt "$S3_ENDPOINT" --delay-ms "$half")
  fi
  echo "-- $rtt ms added round trip"
  for order in none block exact; do kiln_line "$order" "$http/ds" "http $order"; done
  curl_line "http 8 MiB ranges in order" "$http/ds/shard-00000.kiln" "$seq_ranges" "$epochs"
  curl_line "http $block-byte ranges (kiln's block)" "$http/ds/shard-00000.kiln" "$block_ranges" "$epochs"
  curl_line "http $record-byte ranges at random" "$http/ds/shard-00000.kiln" "$rand_ranges" 1
  command -v wrk > /dev/null && wrk_line "http $record-byte ranges at random" "$http/ds/shard-00000.kiln"
  for w in 2 8 32; do
    /usr/bin/python3 "$repo/bench/remote_boto3.py" --http "$http/ds" --samples "${HTTP_PY_SAMPLES:-4000}" \
      --workers "$w" | sed 's/^/urllib3 http exact: /'
  done
  export AWS_ENDPOINT_URL=$s3
  for order in none block exact; do kiln_line "$order" "s3://kiln-bench/ds" "s3 ($s3_samples samples) $order"; done
  /usr/bin/python3 "$repo/bench/remote_boto3.py" kiln-bench ds --workers 2 | sed 's/^/boto3 s3 exact: /'
  /usr/bin/python3 "$repo/bench/remote_boto3.py" kiln-bench ds --workers 8 | sed 's/^/boto3 s3 exact: /'
  export AWS_ENDPOINT_URL=$S3_ENDPOINT
done
# No curl bound for s3: Swift's access key (test:tester) holds a colon, which curl's --user
# (access key:secret for --aws-sigv4) cannot carry.
