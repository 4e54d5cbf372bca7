#!/usr/bin/env bash
# Interop: datasets written by kiln with --format hdf5 are read by h5py as ordinary arrays: for
# every sample i, images[i] (its bytes and its dtype and shape) equals what kiln's reader
# returns, and labels and keys match, for raw (contiguous) and zstd (chunked, filter 32015,
# decoded by hdf5plugin) files. `h5dump -H` must show the datasets of formats/hdf5/hdf5_format.md.
# The keys checksum attribute equals `xxhsum -H3` of the keys array.
# Needs Debian's python3-h5py, python3-hdf5plugin, hdf5-tools and xxhash (scripts/setup.sh installs them);
# exits 77 (CTest: skipped) when they are missing.
# Zstandard chunks need filter 32015 in h5py: hdf5plugin provides it where it ships its filter
# binaries (PyPI); Debian 12's python3-hdf5plugin ships none, so then the test points
# HDF5_PLUGIN_PATH at PLUGIN_DIR, where CMake built formats/hdf5/h5z_zstd_plugin.c (the same
# decoding: one Zstandard frame per chunk).
# Usage: hdf5_interop_test.sh PATH/TO/hdf5_interop_writer [PLUGIN_DIR]
set -euo pipefail
writer=$1
plugin_dir=${2:-}
if ! /usr/bin/python3 -c "import h5py" 2>/dev/null; then
  echo "SKIPPED: /usr/bin/python3 cannot import h5py (apt-get install python3-h5py python3-hdf5plugin)"
  exit 77
fi
if /usr/bin/python3 -c "import hdf5plugin, h5py, sys; sys.exit(0 if h5py.h5z.filter_avail(32015) else 1)" 2>/dev/null; then
  echo "zstd filter 32015: from hdf5plugin"
elif [ -n "$plugin_dir" ]; then
  export HDF5_PLUGIN_PATH=$plugin_dir
  echo "zstd filter 32015: hdf5plugin has none here; using $plugin_dir (formats/hdf5/h5z_zstd_plugin.c)"
else
  echo "SKIPPED: no zstd filter (32015) for h5py: hdf5plugin lacks it and no PLUGIN_DIR was given"
  exit 77
fi
if ! command -v xxhsum >/dev/null; then
  echo "SKIPPED: xxhsum not found (apt-get install xxhash)"
  exit 77
fi
if ! command -v h5dump >/dev/null; then
  echo "SKIPPED: h5dump not found (apt-get install hdf5-tools)"
  exit 77
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/kiln_hdf5_interop.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$writer" "$work"

# h5dump -H: the documented schema (formats/hdf5/hdf5_format.md section 6).
h5dump -H "$work/u8-hwc-plain/data.h5" | tee "$work/plain.txt"
for want in 'DATASET "images"' 'H5T_STD_U8LE' 'DATASPACE  SIMPLE { ( 150, 5, 6, 3 ) / ( 150, 5, 6, 3 ) }' \
    'DATASET "labels"' 'H5T_STD_I64LE' 'DATASET "keys"' 'CSET H5T_CSET_UTF8' \
    'STRPAD H5T_STR_NULLPAD' 'DATASET "checksums"' 'H5T_STD_U64LE' \
    'ATTRIBUTE "kiln_manifest"' 'ATTRIBUTE "kiln_hdf5_version"' 'ATTRIBUTE "layout"'; do
  grep -qF -- "$want" "$work/plain.txt" || { echo "h5dump -H lacks: $want"; exit 1; }
done
h5dump -H -p "$work/f16-chw-zstd/data.h5" | tee "$work/zstd.txt"
for want in 'DATASPACE  SIMPLE { ( 150, 3, 5, 6 ) / ( 150, 3, 5, 6 ) }' 'CHUNKED ( 1, 3, 5, 6 )' \
    'FILTER_ID 32015' 'H5T_IEEE_F16LE'; do
  if ! grep -qF -- "$want" "$work/zstd.txt"; then
    # h5dump names the half type only in newer releases; 1.10 prints its bit fields.
    [ "$want" = 'H5T_IEEE_F16LE' ] && grep -qE 'SIZE 2|16-bit little-endian floating-point' "$work/zstd.txt" && continue
    echo "h5dump -H -p lacks: $want"; exit 1
  fi
done

/usr/bin/python3 - "$work" <<'PY'
import json, subprocess, sys
import h5py
try:
    import hdf5plugin  # registers filter 32015 (Zstandard) where it ships the filter
except ImportError:
    pass
import numpy as np

work = sys.argv[1]
dtypes = {"u8": np.uint8, "f16": np.float16, "f32": np.float32}
for name in ["u8-hwc-plain", "f16-chw-plain", "f32-hwc-plain",
             "u8-hwc-zstd", "f16-chw-zstd", "f32-hwc-zstd"]:
    expected = []
    for line in open(f"{work}/{name}.tsv", encoding="utf-8"):
        i, label, key, hexbytes = line.rstrip("\n").split("\t")
        expected.append((int(label), key, bytes.fromhex(hexbytes)))
    with h5py.File(f"{work}/{name}/data.h5", "r") as f:
        images, labels, keys = f["images"], f["labels"], f["keys"]
        assert images.dtype == dtypes[name.split("-")[0]], (name, images.dtype)
        chw = "-chw-" in name
        assert images.shape == ((150, 3, 5, 6) if chw else (150, 5, 6, 3)), images.shape
        assert images.attrs["layout"] == ("CHW" if chw else "HWC")
        assert (images.chunks is not None) == name.endswith("zstd"), images.chunks
        if name.endswith("zstd"):
            assert 32015 in images._filters or "32015" in images._filters, images._filters
            masks = [images.id.get_chunk_info(i).filter_mask for i in range(150)]
            assert 0 in masks and 1 in masks, masks  # zstd chunks and raw (filter skipped) ones
        assert labels.dtype == np.int64 and keys.shape == (150,)
        manifest = json.loads(f.attrs["kiln_manifest"])
        assert manifest["samples"] == 150 and manifest["format"] == "hdf5", manifest
        assert int(f.attrs["kiln_hdf5_version"]) == 2
        # The keys checksum (hdf5_format.md section 3) is XXH3-64 of the keys array's bytes.
        digest = subprocess.run(["xxhsum", "-H3"], input=keys[...].tobytes(), check=True,
                                capture_output=True).stdout.split()[-1].decode()
        assert int(digest, 16) == int(keys.attrs["xxh3_64"]), (name, digest)
        whole = images[...]  # one read of the whole array, and one per sample below
        for i, (label, key, raw) in enumerate(expected):
            assert images[i].tobytes() == raw, (name, i)
            assert whole[i].tobytes() == raw, (name, i)
            assert int(labels[i]) == label, (name, i)
            assert keys[i].decode("utf-8") == key, (name, i, keys[i])
    print(f"h5py read {name}: {len(expected)} samples identical to kiln's reader")
PY
