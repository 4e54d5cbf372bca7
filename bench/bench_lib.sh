# Shared preamble of the bench/*.sh scripts; source it, do not run it:
#
#   source "$(dirname "$0")/bench_lib.sh"
#
# It stops on errors (set -euo pipefail), moves to the repository root and sets:
#   repo    the repository root (absolute)
#   build   the build folder: $KILN_BUILD_DIR, default build (relative to repo)
#   kiln    the kiln CLI: $KILN if set, else $repo/$build/tools/kiln
#   synth   $repo/$build/bench/make_synthetic_dataset
# and defines:
#   bench_tmpdir VAR            VAR=a fresh mktemp -d folder, removed when the script exits
#   bench_fashion_mnist WORK    writes the full Fashion-MNIST (70,000 PNGs, Debian's
#                               dataset-fashion-mnist) into WORK/fashion-mnist once
#   bench_machine               prints "machine: N cores, M GiB, ARCH"
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$PWD
build=${KILN_BUILD_DIR:-build}
kiln=${KILN:-$repo/$build/tools/kiln}
synth=$repo/$build/bench/make_synthetic_dataset

_bench_tmpdirs=()
_bench_cleanup() { ((${#_bench_tmpdirs[@]})) && rm -rf "${_bench_tmpdirs[@]}"; return 0; }
trap _bench_cleanup EXIT

bench_tmpdir() {
  local d
  d=$(mktemp -d)
  _bench_tmpdirs+=("$d")
  printf -v "$1" '%s' "$d"
}

# bench_remote_servers VAR: starts the remote tests' nginx and Swift (s3api)
# (tests/reader/remote/remote_servers.sh) under a new temporary folder, stopped by pid at exit,
# also when the script fails; sources their environment (HTTP_URL, WWW_DIR, S3 settings) and
# sets VAR to the folder (the servers' state is in VAR/servers).
bench_remote_servers() {
  local dir
  bench_tmpdir dir
  chmod 755 "$dir"  # Swift's daemons run as user swift and must reach their files
  _bench_servers=$dir/servers
  trap '"$repo/tests/reader/remote/remote_servers.sh" stop "$_bench_servers" > /dev/null 2>&1 || true; _bench_cleanup' EXIT
  "$repo/tests/reader/remote/remote_servers.sh" start "$_bench_servers" $$ > /dev/null
  # shellcheck disable=SC1091
  source "$_bench_servers/env"
  printf -v "$1" '%s' "$dir"
}

bench_fashion_mnist() {
  mkdir -p "$1"
  if [[ ! -f $1/fashion-mnist/.complete ]]; then
    /usr/bin/python3 "$repo/samples/make_fashion_mnist.py" "$1/fashion-mnist" --split both
    touch "$1/fashion-mnist/.complete"
  fi
}

bench_machine() {
  echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -m)"
}
