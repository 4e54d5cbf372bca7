#!/usr/bin/env bash
# Cut the real photos of Debian's packages into 256x256 JPEG tiles, an ImageNet-like ImageFolder
# tree of a few thousand files, without re-encoding (jpegtran crops losslessly on iMCU bounds).
#
#   samples/make_photo_tiles.sh OUT
#
# Sources (each used if installed):
#   opencv-doc                   /usr/share/doc/opencv-doc/examples/data/*.jpg
#   plasma-workspace-wallpapers  /usr/share/wallpapers/*/contents/images/*.jpg (largest per wallpaper)
# Writes OUT/<class>/<x>_<y>.jpg, one class folder per source photo (opencv-<name> or
# wallpaper-<name>), tiles on a non-overlapping 256-pixel grid centred in the photo, every offset a
# multiple of 16. Idempotent: existing tiles are kept. Needs jpegtran (libjpeg-turbo-progs) and
# identify (imagemagick). Prints the number of tiles.
set -euo pipefail

if [[ $# -ne 1 || $1 == -* ]]; then
  echo "usage: $0 OUT" >&2
  exit 2
fi
out=$1
tile=256
for tool in jpegtran identify; do
  command -v "$tool" >/dev/null || {
    echo "$0: $tool not found; run scripts/setup.sh (packages libjpeg-turbo-progs, imagemagick)" >&2
    exit 1
  }
done

opencv_dir=/usr/share/doc/opencv-doc/examples/data
wallpaper_dir=/usr/share/wallpapers

# Lines "class<TAB>path".
list_sources() {
  local f name best best_px w h
  if [[ -d $opencv_dir ]]; then
    for f in "$opencv_dir"/*.jpg; do
      [[ -f $f ]] || continue
      name=$(basename "$f" .jpg)
      printf 'opencv-%s\t%s\n' "$name" "$f"
    done
  fi
  if [[ -d $wallpaper_dir ]]; then
    for d in "$wallpaper_dir"/*/contents/images; do
      [[ -d $d ]] || continue
      best='' best_px=0
      for f in "$d"/*.jpg; do
        [[ -f $f ]] || continue
        read -r w h < <(identify -format '%w %h\n' "$f" 2>/dev/null | head -n1) || continue
        if (( w * h > best_px )); then best=$f best_px=$((w * h)); fi
      done
      [[ -n $best ]] || continue
      name=$(basename "$(dirname "$(dirname "$d")")")
      printf 'wallpaper-%s\t%s\n' "${name// /_}" "$best"
    done
  fi
}

mkdir -p "$out"
sources=0 written=0 kept=0 skipped=0
while IFS=$'\t' read -r class src; do
  if ! read -r w h < <(identify -format '%w %h\n' "$src" 2>/dev/null | head -n1); then
    echo "skip (unreadable): $src" >&2
    skipped=$((skipped + 1))
    continue
  fi
  nx=$((w / tile)) ny=$((h / tile))
  if (( nx == 0 || ny == 0 )); then
    echo "skip (smaller than ${tile}x${tile}): $src (${w}x${h})" >&2
    skipped=$((skipped + 1))
    continue
  fi
  # Centre the grid; round each margin down to a multiple of 16 so the crop stays lossless.
  x0=$(((w - nx * tile) / 2 / 16 * 16)) y0=$(((h - ny * tile) / 2 / 16 * 16))
  sources=$((sources + 1))
  mkdir -p "$out/$class"
  for ((j = 0; j < ny; j++)); do
    for ((i = 0; i < nx; i++)); do
      x=$((x0 + i * tile)) y=$((y0 + j * tile))
      dst=$(printf '%s/%s/%04d_%04d.jpg' "$out" "$class" "$x" "$y")
      if [[ -s $dst ]]; then
        kept=$((kept + 1))
        continue
      fi
      jpegtran -crop "${tile}x${tile}+${x}+${y}" -copy none -outfile "$dst.tmp" "$src"
      mv -f "$dst.tmp" "$dst"
      written=$((written + 1))
    done
  done
done < <(list_sources)

echo "$((written + kept)) tiles of ${tile}x${tile} from $sources photos in $out" \
  "($written written, $kept already there, $skipped photos skipped)"
if [[ ! -d $wallpaper_dir ]]; then
  echo "note: plasma-workspace-wallpapers is not installed; install it for about 2,000 more tiles" >&2
fi
