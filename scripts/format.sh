#!/usr/bin/env bash
# Formats kiln's C and C++ sources with the repository's .clang-format, or checks them.
#
#   scripts/format.sh            rewrite every tracked .h/.cc/.c file in place
#   scripts/format.sh --check    change nothing; list the files that differ, exit 1 if any
#   scripts/format.sh [--check] FILE...   only these files
#
# Environment: CLANG_FORMAT (default: clang-format, else the newest clang-format-NN on PATH).
set -euo pipefail
cd "$(dirname "$0")/.."

check=0
if [[ ${1:-} == --check ]]; then
  check=1
  shift
fi

clang_format=${CLANG_FORMAT:-}
if [[ -z $clang_format ]]; then
  if command -v clang-format > /dev/null; then
    clang_format=clang-format
  else
    clang_format=$(compgen -c clang-format- | grep -E '^clang-format-[0-9]+$' | sort -t- -k3 -n | tail -1 || true)
  fi
fi
if [[ -z $clang_format ]] || ! command -v "$clang_format" > /dev/null; then
  echo "format.sh: clang-format not found (apt-get install clang-format, or set CLANG_FORMAT)" >&2
  exit 2
fi

if (($# > 0)); then
  files=("$@")
else
  # Tracked sources only; fuzz corpora and test data are not C++.
  mapfile -t files < <(git ls-files -- '*.h' '*.cc' '*.c' | grep -v '^tests/fuzz/corpus/')
fi

if ((check == 0)); then
  "$clang_format" -i --style=file "${files[@]}"
  exit 0
fi
drift=()
for f in "${files[@]}"; do
  if ! "$clang_format" --style=file --dry-run --Werror "$f" > /dev/null 2>&1; then
    drift+=("$f")
  fi
done
if ((${#drift[@]} > 0)); then
  printf 'format.sh: %d of %d files differ from .clang-format:\n' "${#drift[@]}" "${#files[@]}" >&2
  printf '  %s\n' "${drift[@]}" >&2
  echo "format.sh: run scripts/format.sh to fix" >&2
  exit 1
fi
echo "format.sh: ${#files[@]} files match .clang-format"
