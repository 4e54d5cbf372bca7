#!/usr/bin/env bash
# Reading one dataset from local disk, from nginx (HTTP range GETs) and from OpenStack Swift's S3
# layer (SigV4), in one run, against the bound curl gets from the same server with the same
# range sizes and concurrency (curl --parallel, the same number of requests in flight as kiln's
# fetch threads keep). Servers: tests/reader/remote/remote_servers.sh on 127.0.0.1, stopped by
# pid when the script exits. Prints one line per (order, location) and the curl bound.
#
#   bench/remote.sh                       # 60,000 samples of 28x28x1
#   SAMPLES=20000 SHAPE=32x32x3 EPOCHS=2 bench/remote.sh
#
# Orders: none (dataset order: kiln merges neighbouring records into GETs of up to 8 MiB; the
# bound is curl reading the file in 8 MiB ranges) and exact (one GET per record; the bound is
# curl fetching the same number of record-sized ranges at random offsets, 256 in flight).
# S3 in exact order is skipped unless S3_EXACT=1 (Swift's Python proxy on a small machine takes
# minutes for one GET per record).
source "$(dirname "$0")/bench_lib.sh"

samples=${SAMPLES:-60000}
shape=${SHAPE:-28x28x1}
epochs=${EPOCHS:-1}
inflight=${INFLIGHT:-512}  # kiln: 256 per fetch thread, 2 threads by default
bench_tmpdir work
chmod 755 "$work"  # Swift's daemons run as user swift and must reach their files
servers=$work/servers
stop_servers() { "$repo/tests/reader/remote/remote_servers.sh" stop "$servers" > /dev/null 2>&1 || true; }
trap 'stop_servers; _bench_cleanup' EXIT
"$repo/tests/reader/remote/remote_servers.sh" start "$servers" $$ > /dev/null
# shellcheck disable=SC1091
source "$servers/env"

"$synth" "$work/ds" "$samples" "$shape" shards > /dev/null
cp -r "$work/ds" "$WWW_DIR/ds"
export AWS_ACCESS_KEY_ID=test:tester AWS_SECRET_ACCESS_KEY=testing AWS_REGION=us-east-1
export AWS_ENDPOINT_URL=$S3_ENDPOINT AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null
unset AWS_CA_BUNDLE AWS_PROFILE AWS_SESSION_TOKEN
env RCLONE_CONFIG_KS3_TYPE=s3 RCLONE_CONFIG_KS3_PROVIDER=Other \
  RCLONE_CONFIG_KS3_ACCESS_KEY_ID=test:tester RCLONE_CONFIG_KS3_SECRET_ACCESS_KEY=testing \
  RCLONE_CONFIG_KS3_REGION=us-east-1 RCLONE_CONFIG_KS3_FORCE_PATH_STYLE=true \
  RCLONE_CONFIG_KS3_ENDPOINT="$S3_ENDPOINT" sh -c \
  'rclone --config /dev/null -q mkdir ks3:kiln-bench && rclone --config /dev/null -q copy "$0" ks3:kiln-bench/ds' \
  "$work/ds"

shard=$work/ds/shard-00000.kiln
bytes=$(stat -c %s "$shard")
record=$(("$bytes" / "$samples"))
bench_machine
echo "dataset: $samples samples of $shape, one shard of $bytes bytes (about $record bytes a record)"

kiln_line() {  # order location
  local out rate remote
  out=$("$kiln" bench "$2" --epochs "$epochs" --shuffle "$1" 2>&1) || {
    echo "$1 $2: kiln bench failed: $(tail -n 1 <<< "$out")"
    return 0
  }
  rate=$(grep -o '[0-9.]* samples/s' <<< "$out" | head -n 1)
  remote=$(grep -o 'remote: .*' <<< "$out" || true)
  echo "kiln  $1 $2: $rate ${remote:+| $remote}"
}

# curl's bound: N ranges of LEN bytes (sequential, or at random offsets), INFLIGHT in flight.
curl_line() {  # label url ranges_file
  local label=$1 url=$2 ranges=$3
  local config=$work/curl.cfg n start end
  n=$(wc -l < "$ranges")
  awk -v u="$url" '{ print "url = \"" u "\"\noutput = \"/dev/null\"\nheader = \"Range: bytes=" $1 "\"" }' \
    "$ranges" > "$config"
  start=$(date +%s.%N)
  curl --no-progress-meter --parallel --parallel-immediate --parallel-max "$inflight" -K "$config"
  end=$(date +%s.%N)
  awk -v n="$n" -v s="$start" -v e="$end" -v label="$label" \
    'BEGIN { t = e - s; printf "curl  %s: %d range GETs in %.2f s = %.0f GET/s\n", label, n, t, n / t }'
}

seq_ranges=$work/seq.txt
awk -v b="$bytes" 'BEGIN { for (o = 0; o < b; o += 8388608) { e = o + 8388607; if (e >= b) e = b - 1; print o "-" e } }' > "$seq_ranges"
rand_ranges=$work/rand.txt
# curl --parallel's own CPU grows with the transfer count (measured: 20,000 ranges took 331 s of
# curl CPU on 2 cores, 60 GET/s), so the random-range bound uses 2,000 of them.
awk -v b="$bytes" -v r="$record" -v n="$((samples < 2000 ? samples : 2000))" \
  'BEGIN { srand(1); for (i = 0; i < n; ++i) { o = 64 + int(rand() * ((b - 64) / r - 1)) * r; print o "-" (o + r - 1) } }' > "$rand_ranges"

for order in none exact; do
  kiln_line "$order" "$work/ds"
  kiln_line "$order" "$HTTP_URL/ds"
  if [[ $order == none || ${S3_EXACT:-0} == 1 ]]; then kiln_line "$order" "s3://kiln-bench/ds"; fi
done
curl_line "http 8 MiB ranges in order" "$HTTP_URL/ds/shard-00000.kiln" "$seq_ranges"
curl_line "http $record-byte ranges at random" "$HTTP_URL/ds/shard-00000.kiln" "$rand_ranges"
# No curl bound for s3: Swift's access key (test:tester) holds a colon, which curl's --user
# (access key:secret for --aws-sigv4) cannot carry.
