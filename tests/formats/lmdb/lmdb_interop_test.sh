#!/usr/bin/env bash
# Interop: a dataset written by kiln with --format lmdb is read by python3-lmdb (read-only, no
# lock) and decoded by the layout in formats/lmdb/lmdb_format.md; every sample must equal what kiln's
# reader returns. mdb_stat must open it too. Needs Debian's python3-lmdb and lmdb-utils
# (scripts/setup.sh installs them).
# Usage: lmdb_interop_test.sh PATH/TO/lmdb_interop_writer
set -euo pipefail
writer=$1
work=$(mktemp -d "${TMPDIR:-/tmp}/kiln_lmdb_interop.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$writer" "$work/ds" > "$work/kiln.tsv"
mdb_stat "$work/ds" | tee "$work/stat.txt"
grep -q "Entries: 300" "$work/stat.txt"
/usr/bin/python3 - "$work/ds" "$work/kiln.tsv" <<'PY'
import struct, sys
import lmdb

ds, expected_path = sys.argv[1], sys.argv[2]
expected = {}
for line in open(expected_path, encoding="utf-8"):
    i, label, key, hexbytes = line.rstrip("\n").split("\t")
    expected[int(i)] = (int(label), key, bytes.fromhex(hexbytes))

def decode(value):
    (magic, version, codec, r0, raw_size, stored_size, label, checksum, key_size, r1,
     header_check) = struct.unpack_from("<4sHBBIIqQHHI", value, 0)
    assert magic == b"KLNV" and version == 1 and r0 == 0 and r1 == 0, (magic, version)
    assert len(value) == 40 + key_size + stored_size
    key = bytes(value[40:40 + key_size]).decode("utf-8")
    stored = bytes(value[40 + key_size:])
    assert codec == 0 and stored_size == raw_size  # raw records: stored bytes are the tensor
    return label, key, stored

for lock in (False, True):  # lock=False: no lock file needed; lock=True: lmdb's default
    env = lmdb.open(ds, readonly=True, lock=lock)
    assert env.stat()["entries"] == len(expected)
    with env.begin() as txn:
        n = 0
        for k, v in txn.cursor():
            (index,) = struct.unpack(">Q", k)
            assert index == n, (index, n)  # key order == sample order
            assert decode(v) == expected[index], index
            n += 1
        assert n == len(expected)
        assert decode(txn.get(struct.pack(">Q", 123))) == expected[123]
    env.close()
print("python3-lmdb read", len(expected), "samples identical to kiln's reader")
PY
