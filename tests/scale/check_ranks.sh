# check_ranks DIR WORLD SAMPLES SOURCE_REGEX: DIR holds rank-0.txt .. rank-(WORLD-1).txt from
# read_rank.py; every rank read as WORLD ranks from SOURCE, got the same number of batches, and
# together they read every one of SAMPLES samples exactly once. Source this file.
check_ranks() {
  local dir=$1 world=$2 samples=$3 source=$4 r lens=()
  for ((r = 0; r < world; r++)); do
    [[ -f $dir/rank-$r.txt ]] || { echo "FAIL: rank $r wrote nothing" >&2; return 1; }
    read -r rank w len src < "$dir/rank-$r.txt"
    [[ $rank == "$r" && $w == "$world" ]] || { echo "FAIL: rank-$r.txt says rank $rank of $w" >&2; return 1; }
    [[ $src =~ $source ]] || { echo "FAIL: rank $r's source is '$src', expected /$source/" >&2; return 1; }
    lens+=("$len")
  done
  [[ $(printf '%s\n' "${lens[@]}" | sort -u | wc -l) -eq 1 ]] ||
    { echo "FAIL: ranks got different numbers of batches: ${lens[*]}" >&2; return 1; }
  local all
  all=$(for ((r = 0; r < world; r++)); do tail -n +2 "$dir/rank-$r.txt"; done | sort -n)
  [[ $(wc -l <<< "$all") -eq $samples ]] || { echo "FAIL: $(wc -l <<< "$all") samples read, not $samples" >&2; return 1; }
  [[ $all == "$(seq 0 $((samples - 1)))" ]] ||
    { echo "FAIL: the ranks' samples are not 0..$((samples - 1)) exactly once" >&2; return 1; }
  echo "$world ranks ($source): ${lens[0]} batches each, all $samples samples exactly once"
}
