#!/usr/bin/env bash
# Reading a dataset larger than the memory the reader may use, against the disk's own rate
# (BENCHMARKS.md, "Larger than memory").
#
#   bench/larger_than_memory.sh [--limit-mib 512] [--factor 4] [--rounds 3] [--threads 2]
#                               [--dir DIR] [--kiln PATH] [--baseline]
#
# 1. Builds (or reuses) a dataset of 3x224x224 uint8 records (bench/make_synthetic_dataset) of
#    at least --factor times the memory limit.
# 2. Makes a memory cgroup (v1, /sys/fs/cgroup/memory/<child>, memory.limit_in_bytes = the
#    limit) and runs everything below inside it. Without a writable v1 memory controller it
#    sizes the dataset at 1.2x the machine's RAM instead and runs without a limit (slow).
# 3. Per round, alternating so that drift on a shared machine hits all alike:
#      fio sequential  buffered reads of 1 MiB, 1 job (the kernel's read-ahead, as kiln's
#                      block order uses it), and O_DIRECT 1 MiB at queue depth 16;
#      fio random      reads of one record's size at random record offsets: 2 jobs x depth 1
#                      (two threads faulting one record at a time) and 2 jobs x depth 16 with
#                      O_DIRECT (what read-ahead can keep in flight); sequential and random
#                      O_DIRECT again at depth 64, as many reads in flight as kiln's direct
#                      path keeps (the disk's limit);
#      kiln bench      --shuffle exact and --shuffle block, --threads T, one cold epoch each,
#                      with --io direct (O_DIRECT io_uring reads) and --io mmap (the mappings
#                      with madvise read-ahead) (--cold drops the files' pages first; fio's
#                      invalidate=1 does the same).
#    --baseline adds kiln exact, mmap, with read-ahead off (--read-ahead-mib 0): slow, minutes.
# 4. Prints the medians, and each kiln rate as a share of the matching fio figure: block order
#    against the better fio sequential figure, exact order against the better fio random one.
#
# Needs root (cgroups, dropping pages), fio, and a build (scripts/setup.sh). Default run: about
# 3 minutes on a disk reading about 1 GB/s.
set -euo pipefail
cd "$(dirname "$0")/.."
limit_mib=512 factor=4 rounds=3 threads=2 dir="" kiln=build/tools/kiln baseline=0
while (($#)); do
  case $1 in
    --limit-mib) limit_mib=$2; shift 2 ;;
    --factor) factor=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --kiln) kiln=$2; shift 2 ;;
    --baseline) baseline=1; shift ;;
    *) echo "larger_than_memory.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
make_ds=build/bench/make_synthetic_dataset
for tool in "$kiln" "$make_ds"; do
  [[ -x $tool ]] || { echo "missing $tool: build first (scripts/setup.sh)" >&2; exit 2; }
done
command -v fio >/dev/null || { echo "fio is not installed (apt-get install fio)" >&2; exit 2; }

record=$((3 * 224 * 224))  # bytes per record, stored raw and 64-byte aligned (a multiple of 64)
cgroot=/sys/fs/cgroup/memory
cg=""
if [[ -w $cgroot ]] && mkdir "$cgroot/kiln-ltm-$$" 2>/dev/null; then
  cg=$cgroot/kiln-ltm-$$
  echo $((limit_mib << 20)) >"$cg/memory.limit_in_bytes"
  target=$((factor * (limit_mib << 20)))
  memory="cgroup v1 memory limit $limit_mib MiB ($cg)"
else
  ram=$(awk '/MemTotal/ {print $2 * 1024}' /proc/meminfo)
  target=$((ram * 12 / 10))
  memory="no writable cgroup v1 memory controller: dataset 1.2x RAM ($((ram >> 20)) MiB), no limit"
fi
cleanup() { [[ -n $cg ]] && rmdir "$cg" 2>/dev/null || true; }
trap cleanup EXIT
# Runs "$@" inside the cgroup (when there is one).
in_limit() {
  if [[ -n $cg ]]; then
    (echo $BASHPID >"$cg/cgroup.procs" && exec "$@")
  else
    "$@"
  fi
}

n=$(((target + record - 1) / record + 64))
dir=${dir:-${TMPDIR:-/tmp}/kiln-larger-than-memory-$n}
if ! [[ -f $dir/kiln.json ]] || ! grep -q "\"samples\": *$n," "$dir/kiln.json"; then
  echo "building $dir: $n records of 3x224x224 uint8" >&2
  "$make_ds" "$dir" "$n" 224x224x3 >&2
fi
mapfile -t files < <(ls "$dir"/shard-*.kiln)
bytes=$(du -cb "${files[@]}" | tail -1 | cut -f1)
fio_files=$(IFS=:; echo "${files[*]}")
echo "dataset: $dir, $n samples, $bytes bytes in ${#files[@]} shards; $memory" >&2

out=$(mktemp -d)
# fio NAME ARGS...: one fio job over all the shards, prints MB/s (10^6 bytes per second).
run_fio() {
  local name=$1
  shift
  in_limit fio --name="$name" --filename="$fio_files" --invalidate=1 --runtime=8 --time_based \
    --group_reporting --output-format=json "$@" >"$out/fio.json" 2>/dev/null
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print("%.1f" % (j["jobs"][0]["read"]["bw_bytes"] / 1e6))' \
    "$out/fio.json"
}
# kiln_bench ARGS...: one cold epoch, prints MB/s and major faults.
run_kiln() {
  in_limit "$kiln" bench "$dir" --threads "$threads" --epochs 1 --cold --json "$@" \
    >"$out/kiln.json" 2>/dev/null
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print("%.1f %d" % (j["mb_per_s"], j["major_faults"]))' \
    "$out/kiln.json"
}

# One record's size, at record offsets (after the 64-byte shard header; fio's offsets are a
# multiple of blockalign from `offset`).
# O_DIRECT needs 512-byte aligned offsets, so the direct runs align to 4 KiB from the start
# instead (the same size, straddling records as often as not).
rand=(--rw=randread --bs=$record --blockalign=$record --offset=64)
rand_direct=(--rw=randread --bs=$record --blockalign=4096)
declare -A results
loads=""
for ((r = 1; r <= rounds; r++)); do
  loads+="$(cut -d' ' -f1 /proc/loadavg) "
  results[fio_seq]+="$(run_fio seq --rw=read --bs=1M --ioengine=psync --numjobs=1) "
  results[fio_seq_direct]+="$(run_fio seqd --rw=read --bs=1M --ioengine=libaio --direct=1 --iodepth=16 --numjobs=1) "
  results[fio_rand]+="$(run_fio rand "${rand[@]}" --ioengine=psync --numjobs=2) "
  results[fio_rand_deep]+="$(run_fio randd "${rand_direct[@]}" --ioengine=libaio --direct=1 --iodepth=16 --numjobs=2) "
  # As many reads in flight as kiln's direct path keeps (up to 55 a thread): the disk's limit.
  results[fio_seq_q64]+="$(run_fio seqq --rw=read --bs=1M --ioengine=libaio --direct=1 --iodepth=64 --numjobs=1) "
  results[fio_rand_q64]+="$(run_fio randq "${rand_direct[@]}" --ioengine=libaio --direct=1 --iodepth=64 --numjobs=2) "
  read -r mb faults < <(run_kiln --shuffle exact --io direct)
  results[kiln_exact]+="$mb "
  results[faults_exact]+="$faults "
  read -r mb faults < <(run_kiln --shuffle block --io direct)
  results[kiln_block]+="$mb "
  results[faults_block]+="$faults "
  read -r mb faults < <(run_kiln --shuffle exact --io mmap)
  results[kiln_exact_mmap]+="$mb "
  results[faults_exact_mmap]+="$faults "
  read -r mb faults < <(run_kiln --shuffle block --io mmap)
  results[kiln_block_mmap]+="$mb "
  results[faults_block_mmap]+="$faults "
  if ((baseline)); then
    read -r mb faults < <(run_kiln --shuffle exact --io mmap --read-ahead-mib 0)
    results[kiln_exact_off]+="$mb "
    results[faults_exact_off]+="$faults "
  fi
  echo "round $r of $rounds done" >&2
done

python3 - "$rounds" "$n" "$bytes" "$memory" "$threads" "$loads" <<EOF
import statistics, sys
rounds, n, nbytes, memory, threads, loads = sys.argv[1:]
r = {k: [float(x) for x in v.split()] for k, v in {
$(for k in "${!results[@]}"; do echo "  '$k': '${results[$k]}',"; done)
}.items()}
med = {k: statistics.median(v) for k, v in r.items()}
print("dataset: %s samples of 3x224x224 uint8, %.2f GB; %s; %s rounds, medians (MB/s, 10^6 B/s)"
      % (n, int(nbytes) / 1e9, memory, rounds))
print("load average at the start of each round: %s" % loads.strip())
rows = [
    ("fio sequential, buffered 1 MiB, 1 job", "fio_seq", None),
    ("fio sequential, O_DIRECT 1 MiB, depth 16", "fio_seq_direct", None),
    ("fio random %d B, buffered, 2 jobs x depth 1" % (3 * 224 * 224), "fio_rand", None),
    ("fio random %d B, O_DIRECT, 2 jobs x depth 16" % (3 * 224 * 224), "fio_rand_deep", None),
    ("fio sequential, O_DIRECT 1 MiB, depth 64", "fio_seq_q64", None),
    ("fio random %d B, O_DIRECT, 2 jobs x depth 64" % (3 * 224 * 224), "fio_rand_q64", None),
    ("kiln bench --shuffle exact --io direct --threads %s" % threads, "kiln_exact", "rand"),
    ("kiln bench --shuffle block --io direct --threads %s" % threads, "kiln_block", "seq"),
    ("kiln bench --shuffle exact --io mmap --threads %s" % threads, "kiln_exact_mmap", "rand"),
    ("kiln bench --shuffle block --io mmap --threads %s" % threads, "kiln_block_mmap", "seq"),
    ("kiln bench --shuffle exact --io mmap --read-ahead-mib 0", "kiln_exact_off", "rand"),
]
best = {"seq": max(med["fio_seq"], med["fio_seq_direct"], med["fio_seq_q64"]),
        "rand": max(med["fio_rand"], med["fio_rand_deep"], med["fio_rand_q64"])}
for label, key, match in rows:
    if key not in med:
        continue
    runs = " ".join("%.0f" % x for x in r[key])
    share = ""
    if match:
        share = "  %3.0f%% of fio %s (%.0f)" % (100 * med[key] / best[match],
                                               "sequential" if match == "seq" else "random",
                                               best[match])
        fk = "faults_" + key.split("_", 1)[1]
        if fk in med:
            share += ", %d major faults" % med[fk]
    print("%-58s %7.0f   [%s]%s" % (label, med[key], runs, share))
EOF
rm -rf "$out"
