#!/usr/bin/env bash
# The benchmarks of BENCHMARKS.md in one run: kiln's reader and converter against what users would pick
# instead (PyTorch DataLoader over files, h5py, python3-lmdb, numpy.memmap; FFCV), on the same
# data, shuffled, batch 256, 2 threads or workers; memcpy bandwidth; verify vs file read rate;
# scaling from 10^3 to 10^6 samples. Writes WORKDIR/results.jsonl (one JSON object per
# measurement), WORKDIR/report.md (tables for BENCHMARKS.md) and bench/charts/*.png.
#
#   bench/run.sh [WORKDIR]        (default /tmp/kiln-bench; 4-6 minutes on 2 cores, load 3-9)
#
# Env: KILN_BUILD_DIR (default build; must hold tools/kiln and bench/make_synthetic_dataset,
# a Release build), BENCH_SECONDS (time limit per Python peer measurement, default 8),
# BENCH_SKIP_SCALING=1 to skip the 10^3..10^6 runs, BENCH_ONLY=photos to run only the full-size
# photo converters (shrink-on-load; BENCH_PHOTO_ROUNDS rounds, default 3), BENCH_ONLY=converters
# for the converter table alone: the photos, then tiles and Fashion-MNIST against their fair
# bound (BENCH_CONV_ROUNDS rounds, default 3), and FFCV's writer on each.
# Installs what it needs (scripts/setup.sh plus the peers: python3-ffcv python3-numba
# python3-opencv python3-matplotlib plasma-workspace-wallpapers), as root or through sudo;
# the wallpapers give the photo tiles (about 2,000 here).
# Not part of the test suite. A peer that fails is recorded with its error and the run goes on.
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

# One command does all the setup: kiln's own packages and build, then the peers' packages.
KILN_SETUP_EXTRA_PACKAGES="python3-ffcv python3-numba python3-opencv python3-matplotlib plasma-workspace-wallpapers" \
  scripts/setup.sh || exit 1
work=${1:-/tmp/kiln-bench}
build=${KILN_BUILD_DIR:-build}
kiln=$repo/$build/tools/kiln
synth=$repo/$build/bench/make_synthetic_dataset
py=/usr/bin/python3
secs=${BENCH_SECONDS:-8}
mkdir -p "$work/logs"
res=$work/results.jsonl
: > "$res"

# record TAG CMD...: runs CMD, appends {"tag": TAG, "result": <its last JSON line>} (or
# {"tag": TAG, "error": <its last stderr lines>}) to results.jsonl.
record() {
  local tag=$1
  shift
  local log=$work/logs/${tag//\//_}
  echo "== $tag: $*" >&2
  "$@" > "$log.out" 2> "$log.err"
  local rc=$?
  local line
  line=$(grep '^{' "$log.out" | tail -1)
  if [[ $rc -eq 0 && -n $line ]]; then
    printf '{"tag": "%s", "load": "%s", "result": %s}\n' "$tag" "$(cut -d' ' -f1-3 /proc/loadavg)" \
      "$line" >> "$res"
  else
    $py -c 'import json,sys; print(json.dumps({"tag": sys.argv[1], "error": "exit %s: %s" % (sys.argv[2], open(sys.argv[3], errors="replace").read()[-600:])}))' \
      "$tag" "$rc" "$log.err" >> "$res"
    echo "   failed (exit $rc), see $log.err" >&2
  fi
}

$py - "$res" <<'PY'
import json, os, platform, subprocess, sys
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
mem = int(next(l.split()[1] for l in open("/proc/meminfo") if l.startswith("MemTotal"))) / 2**20
import torch, numpy
try:
    import ffcv; ffcv_version = getattr(ffcv, "__version__", "?")
except Exception as e:
    ffcv_version = "import failed: %r" % e
open(sys.argv[1], "a").write(json.dumps({"tag": "machine", "result": {
    "cores": os.cpu_count(), "cpu": cpu, "mem_gib": round(mem, 1), "kernel": platform.release(),
    "load": open("/proc/loadavg").read().split()[:3], "torch": torch.__version__,
    "numpy": numpy.__version__, "ffcv": ffcv_version}}) + "\n")
PY

# ---- full-size photos (plasma-workspace-wallpapers, 22 photos of 1-15 MP, each 4 times) to
# 3x224x224: kiln pack with shrink-on-load and with --exact-decode, against the OpenCV full
# decode + resize bound, PIL without and with draft (the same IDCT scaling, to 2x the target) and
# FFCV's writer (PIL decode and resize), 2 threads or processes each. Rounds alternate the
# converters, so the load of this shared machine falls on all of them; report.py quotes medians.
photos=$work/photos
if [[ ! -f $photos/.complete ]]; then
  rm -rf "$photos"
  find /usr/share/wallpapers -type f -name '*.jpg' -size +100k | sort | while read -r f; do
    name=$(echo "$f" | cut -d/ -f5)
    mkdir -p "$photos/$name"
    for copy in 0 1 2 3; do ln -f "$f" "$photos/$name/$copy-$(basename "$f")" 2>/dev/null || cp "$f" "$photos/$name/$copy-$(basename "$f")"; done
  done
  touch "$photos/.complete"
fi
echo "photos: $(find "$photos" -name '*.jpg' | wc -l)" >&2
find "$photos" -type f -exec cat {} + > /dev/null
for round in $(seq 1 "${BENCH_PHOTO_ROUNDS:-3}"); do
  for m in shrink exact; do
    rm -rf "$work/photos-$m"
    record "photos/$round/kiln-$m" "$kiln" pack "$photos" "$work/photos-$m" --size 224 --layout chw \
      --threads 2 --json $([[ $m == exact ]] && echo --exact-decode)
  done
  for t in cv2 pil pil-draft; do
    record "photos/$round/$t" $py bench/peers.py convert $t "$photos" - --size 224 --channels 3
  done
done
for m in raw jpg; do
  rm -f "$work/photos-$m.beton"
  record "photos/1/ffcv-$m" $py bench/peers.py ffcv-write $m "$photos" "$work/photos-$m.beton" --size 224
done
if [[ ${BENCH_ONLY:-} == photos ]]; then
  $py bench/report.py "$res" "$work/report.md" bench/charts
  echo "results: $res; report: $work/report.md" >&2
  exit 0
fi

# ---- data
if [[ ! -f $work/fashion-mnist/.complete ]]; then
  $py samples/make_fashion_mnist.py "$work/fashion-mnist" --split both && touch "$work/fashion-mnist/.complete"
fi
samples/make_photo_tiles.sh "$work/tiles" >&2
ntiles=$(find "$work/tiles" -name '*.jpg' | wc -l)
echo "tiles: $ntiles" >&2

# dataset NAME: input tree and kiln pack flags
declare -A src=([fm]=$work/fashion-mnist [tiles]=$work/tiles)
declare -A shape=([fm]="--size 28 --channels 1" [tiles]="--size 224 --channels 3 --layout chw")
declare -A pyshape=([fm]="--size 28 --channels 1" [tiles]="--size 224 --channels 3")
declare -A epochs=([fm]=5 [tiles]=3)

# ---- converters against the fair bound, rounds alternating: kiln pack (shards raw) against
# OpenCV decode + resize + crop alone (cv2) and the same writing the same tensor bytes to one
# file, fsynced at the end (cv2-write: the fair bound for a converter that stores its output).
for round in $(seq 1 "${BENCH_CONV_ROUNDS:-3}"); do
  for d in fm tiles; do
    find "${src[$d]}" -type f -exec cat {} + > /dev/null
    rm -rf "$work/conv-$d"
    record "conv/$d/$round/kiln" "$kiln" pack "${src[$d]}" "$work/conv-$d" ${shape[$d]} --threads 2 --json
    rm -rf "$work/conv-$d"
    record "conv/$d/$round/cv2" $py bench/peers.py convert cv2 "${src[$d]}" - ${pyshape[$d]}
    rm -f "$work/conv-$d.bin"
    record "conv/$d/$round/cv2-write" $py bench/peers.py convert cv2-write "${src[$d]}" "$work/conv-$d.bin" ${pyshape[$d]}
    rm -f "$work/conv-$d.bin"
  done
done
if [[ ${BENCH_ONLY:-} == converters ]]; then
  for d in fm tiles; do
    size=$([[ $d == fm ]] && echo 28 || echo 224)
    for m in raw jpg; do
      rm -f "$work/$d-$m.beton"
      record "ffcv-write/$d/$m" $py bench/peers.py ffcv-write $m "${src[$d]}" "$work/$d-$m.beton" --size $size
      rm -f "$work/$d-$m.beton"
    done
  done
  $py bench/report.py "$res" "$work/report.md" bench/charts
  echo "results: $res; report: $work/report.md" >&2
  exit 0
fi

record memcpy $py bench/peers.py memcpy --threads 2

for d in fm tiles; do
  # ---- converters: kiln pack per format, then the peers on the same inputs and 2 threads.
  # Warm the inputs first (file pages, directory and inode caches), or the first converter
  # pays for reading them and the ones after it do not.
  find "${src[$d]}" -type f -exec cat {} + > /dev/null
  for f in shards-none shards-zstd lmdb-none hdf5-none; do
    fmt=${f%-*}
    comp=${f#*-}
    # A fresh output path, as for the peers below: with --overwrite, deleting the last run's
    # dataset (313 MB of page cache for the tiles) would be timed too.
    rm -rf "$work/$d-$f"
    record "pack/$d/$f" "$kiln" pack "${src[$d]}" "$work/$d-$f" ${shape[$d]} --format "$fmt" \
      --compress "$comp" --threads 2 --json
  done
  record "convert/$d/cv2" $py bench/peers.py convert cv2 "${src[$d]}" - ${pyshape[$d]}
  rm -rf "$work/$d-pil.h5" "$work/$d-pil.lmdb"
  record "convert/$d/pil-h5py" $py bench/peers.py convert pil-h5py "${src[$d]}" "$work/$d-pil.h5" ${pyshape[$d]}
  record "convert/$d/pil-lmdb" $py bench/peers.py convert pil-lmdb "${src[$d]}" "$work/$d-pil.lmdb" ${pyshape[$d]}
  size=$([[ $d == fm ]] && echo 28 || echo 224)
  for m in raw jpg; do
    rm -f "$work/$d-$m.beton"
    record "ffcv-write/$d/$m" $py bench/peers.py ffcv-write $m "${src[$d]}" "$work/$d-$m.beton" --size $size
  done

  # ---- verify rate against the file read rate (warm cache)
  for f in shards-none shards-zstd; do
    record "verify/$d/$f" $py bench/verify_rate.py "$kiln" "$work/$d-$f"
  done

  # ---- readers: kiln (each format), warm; shards raw also cold; sweep on shards raw
  for f in shards-none shards-zstd lmdb-none hdf5-none; do
    [[ -f $work/$d-$f/kiln.json ]] || continue
    # Warm: kiln pack writes shards with O_DIRECT, so they are not in the page cache yet.
    find "$work/$d-$f" -type f -exec cat {} + > /dev/null
    record "read/$d/kiln-$f" "$kiln" bench "$work/$d-$f" --threads 2 --prefetch 4 --epochs ${epochs[$d]} --json
  done
  record "read/$d/kiln-shards-none-cold" "$kiln" bench "$work/$d-shards-none" --threads 2 --prefetch 4 --epochs 1 --cold --json
  record "sweep/$d" "$kiln" bench "$work/$d-shards-none" --epochs 2 --sweep --json

  # ---- peers over the same tensors (exported from kiln's raw LMDB) and over the files
  record "export/$d" $py bench/peers.py export "$work/$d-lmdb-none" "$work/$d-tensors"
  record "read/$d/dataloader-imagefolder" $py bench/peers.py dataloader imagefolder "${src[$d]}" \
    --seconds "$secs" ${pyshape[$d]}
  record "read/$d/dataloader-memmap" $py bench/peers.py dataloader memmap "$work/$d-tensors" --seconds "$secs"
  record "read/$d/dataloader-h5py" $py bench/peers.py dataloader h5py "$work/$d-tensors" --seconds "$secs"
  record "read/$d/dataloader-lmdb" $py bench/peers.py dataloader lmdb "$work/$d-lmdb-none" --seconds "$secs"
  rm -f "$work/$d-ndarray.beton"
  record "ffcv-write/$d/ndarray" $py bench/peers.py ffcv-write ndarray "$work/$d-tensors" "$work/$d-ndarray.beton"
  for m in ndarray raw jpg; do
    record "read/$d/ffcv-$m" $py bench/peers.py ffcv-read $m "$work/$d-$m.beton" --seconds "$secs"
  done
done

# ---- scaling: open time, per-sample cost and RSS from 10^3 to 10^6 samples (28x28x1, raw)
if [[ ${BENCH_SKIP_SCALING:-0} != 1 ]]; then
  for n in 1000 10000 100000 1000000; do
    record "synth/$n" $py -c 'import json,subprocess,sys; o=subprocess.run(sys.argv[1:],check=True,capture_output=True,text=True).stdout.split(); print(json.dumps({"samples": int(o[0]), "bytes": int(o[2]), "seconds": float(o[4])}))' \
      "$synth" "$work/synth-$n" $n 28x28x1 shards
    ep=$(( 2000000 / n )); [[ $ep -lt 2 ]] && ep=2
    record "scale/$n" "$kiln" bench "$work/synth-$n" --threads 2 --prefetch 4 --epochs $ep --json
  done
fi

$py bench/report.py "$res" "$work/report.md" bench/charts
echo "results: $res; report: $work/report.md; charts: bench/charts/" >&2
