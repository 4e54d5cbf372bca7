#!/bin/bash
# bench/report.py writes its report whatever one measurement returned: here a `kiln bench
# --sweep` whose every cell was too short ("recommended": null) beside one that recommends.
#   report_test.sh SOURCE_DIR
set -euo pipefail
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 "$src/bench/report.py" "$src/tests/bench/sweep_no_recommendation.jsonl" \
  "$tmp/report.md" "$tmp/charts"
expect() {
  grep -qF -- "$1" "$tmp/report.md" || { echo "FAIL: report.md lacks: $1"; cat "$tmp/report.md"; exit 1; }
}
expect "no recommendation, every cell was too short to compare"
expect "| 1 | 800,000 (consumer) * |"
expect "recommended \`--threads 2 --prefetch 4\`"
expect "| 2 | 2,000 (decode) |"
echo "report.md written with both sweeps"
