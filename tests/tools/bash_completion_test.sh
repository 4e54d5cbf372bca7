#!/usr/bin/env bash
# The bash completion script that the build generates (and `cmake --install` installs) is the
# one `kiln completion` prints, and sourced in bash it completes subcommands, flags, a flag's
# choices, `kiln help`'s operand and file names.
#   tests/tools/bash_completion_test.sh KILN_BINARY COMPLETION_SCRIPT
set -euo pipefail
kiln=$1
script=$(realpath "$2")
cmp -s <("$kiln" completion) "$script" || { echo "$script is stale: not what kiln completion prints"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/fashion-mnist" "$work/other"
# complete WORD... : prints the candidates for the last word, space-separated.
complete_words() {
  bash --norc --noprofile -c '
    source "$1"; shift
    COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _kiln
    echo "${COMPREPLY[*]}"' _ "$script" "$@"
}
expect() {
  local want=$1; shift
  local got
  got=$(cd "$work" && complete_words "$@")
  [[ $got == "$want" ]] || { echo "completing '$*': got '$got', want '$want'"; exit 1; }
}
expect "verify" kiln ve
expect "pack" kiln pa
expect "merge" kiln m
expect "--shard-size" kiln pack in --sha
expect "--feature-image --feature-label --feature-key" kiln pack in --feat
expect "--feature-label" kiln pack in.tfrecord out --feature-l
expect "--deep" kiln verify --de
expect "center none" kiln pack in out --crop ""
expect "uint8 float16 float32" kiln pack in --dtype ""
expect "inspect" kiln help ins
expect "fashion-mnist" kiln verify fash
expect "--output" kiln show data --out
expect "stats" kiln st
expect "--png" kiln stats dir --pn
all=$(cd "$work" && complete_words kiln "")
for sub in pack verify inspect show bench merge plan stats completion help --version; do
  [[ " $all " == *" $sub "* ]] || { echo "kiln <TAB> lacks $sub: $all"; exit 1; }
done
echo "bash completion: subcommands, flags, choices and files complete"
