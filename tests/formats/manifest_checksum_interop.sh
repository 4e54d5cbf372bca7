#!/usr/bin/env bash
# Interop: the hashes in kiln.json can be checked without kiln, with Python's json module and
# xxHash's own command-line tool (formats/manifest.md, "Manifest checksum"; shard_format.md
# section 10). For every golden dataset: manifest_xxh3_64 equals `xxhsum -H3` of the canonical
# form, each files[].xxh3_64 equals `xxhsum -H3` of that file, and each files[].index_xxh3_64
# equals the footer's index checksum (bytes 32..39 of the last 64).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
command -v xxhsum >/dev/null || { echo "SKIP: xxhsum not installed (Debian package xxhash)"; exit 77; }
shopt -s nullglob
manifests=("$root"/tests/data/golden*/*/kiln.json)
((${#manifests[@]} >= 8)) || { echo "FAIL: expected the 8 golden datasets, found ${#manifests[@]}"; exit 1; }
for manifest in "${manifests[@]}"; do
  /usr/bin/python3 - "$manifest" <<'PY'
import json, os, subprocess, sys

def xxh3(data):
    out = subprocess.run(["xxhsum", "-H3"], input=data, capture_output=True, check=True).stdout
    return out.split()[-1].decode()  # "XXH3 (stdin) = <16 hex digits>"

path = sys.argv[1]
doc = json.load(open(path, encoding="utf-8"))
stored = doc.pop("manifest_xxh3_64")
canonical = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
computed = xxh3(canonical.encode("utf-8"))
if computed != stored:
    sys.exit(f"FAIL {path}: manifest_xxh3_64 {stored}, xxhsum of the canonical form {computed}")
for f in doc["files"]:
    with open(os.path.join(os.path.dirname(path), f["file"]), "rb") as data:
        whole = xxh3(data.read())
    if whole != f["xxh3_64"]:
        sys.exit(f"FAIL {path}: {f['file']} xxh3_64 {f['xxh3_64']}, xxhsum {whole}")
    if "index_xxh3_64" in f:  # the shard footer's index_checksum (shard_format.md section 11)
        with open(os.path.join(os.path.dirname(path), f["file"]), "rb") as data:
            footer = data.read()[-64:]
        index = f"{int.from_bytes(footer[32:40], 'little'):016x}"
        if index != f["index_xxh3_64"]:
            sys.exit(f"FAIL {path}: {f['file']} index_xxh3_64 {f['index_xxh3_64']}, footer {index}")
print(f"ok {path}: manifest {stored}, {len(doc['files'])} file hash(es)")
PY
done
