#!/usr/bin/env bash
# Install what is missing, build, then run the whole test suite with CTest.
#
#   ./tests/run.sh            # every test
#   ./tests/run.sh -L formats # extra arguments go to ctest (labels, -R regex, ...)
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh

build_dir=${KILN_BUILD_DIR:-build}
echo "tests: ctest --test-dir $build_dir --output-on-failure -j2 $*"
status=0
ctest --test-dir "$build_dir" --output-on-failure -j2 "$@" || status=$?
exit "$status"
