#!/usr/bin/env python3
"""Regenerates the seed corpus in tests/fuzz/corpus/ from the golden files (tests/data/golden*/).

Seeds are the golden shards, manifests, records and LMDB values plus a few hand-made mutations
that reach the checks behind them. Checksums are not recomputed here: the shard and LMDB
targets recompute them themselves on a second pass (fuzz_util.h). Files found by fuzzing
(crash-*, regression-*) are kept; only seed-* files are rewritten.

    python3 tests/fuzz/make_corpus.py
"""
import os
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN = os.path.join(ROOT, "tests", "data", "golden")
GOLDEN_LMDB = os.path.join(ROOT, "tests", "data", "golden-lmdb")
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus")


def read(*parts):
    with open(os.path.join(*parts), "rb") as f:
        return f.read()


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def clear_seeds():
    for target in os.listdir(CORPUS) if os.path.isdir(CORPUS) else []:
        for name in os.listdir(os.path.join(CORPUS, target)):
            if name.startswith("seed-"):
                os.remove(os.path.join(CORPUS, target, name))


def set_u64(b, off, v):
    b[off:off + 8] = struct.pack("<Q", v & 0xFFFFFFFFFFFFFFFF)


def set_u32(b, off, v):
    b[off:off + 4] = struct.pack("<I", v & 0xFFFFFFFF)


def entries(shard):
    footer = shard[-64:]
    index_offset, count = struct.unpack_from("<QQ", footer, 0)
    out = []
    for i in range(count):
        e = index_offset + 40 * i
        off, stored, raw, label = struct.unpack_from("<QIIq", shard, e)
        codec = shard[e + 38]
        out.append((e, off, stored, raw, label, codec))
    return out


def shard_seeds():
    shards = {
        "raw": read(GOLDEN, "raw", "shard-00000.kiln"),
        "zstd": read(GOLDEN, "zstd", "shard-00000.kiln"),
        "split0": read(GOLDEN, "split", "shard-00000.kiln"),
        "split1": read(GOLDEN, "split", "shard-00001.kiln"),
    }
    seeds = dict(shards)
    raw, z = shards["raw"], shards["zstd"]
    seeds["empty"] = b""
    seeds["header-only"] = raw[:64]
    seeds["cut-mid"] = raw[: len(raw) // 2]
    seeds["footer-only"] = raw[:64] + raw[-64:]
    b = bytearray(raw)
    b[entries(raw)[1][1]] ^= 0x01  # record 1's first payload byte
    seeds["payload-flip"] = bytes(b)
    b = bytearray(raw)
    set_u64(b, len(b) - 64 + 8, 1000)  # record_count far too large
    seeds["count-huge"] = bytes(b)
    b = bytearray(raw)
    e = entries(raw)[0][0]
    set_u64(b, e, 2**64 - 64)  # record 0's offset wraps
    seeds["offset-wrap"] = bytes(b)
    b = bytearray(z)
    e = entries(z)
    for (entry, off, stored, raw_size, label, codec) in e:
        if codec == 1:
            b[off + stored // 2] ^= 0xFF  # inside a zstd frame
            break
    seeds["zstd-frame-flip"] = bytes(b)
    b = bytearray(z)
    for (entry, off, stored, raw_size, label, codec) in e:
        set_u32(b, entry + 8, stored - 1)  # frame cut by one byte
        b[entry + 38] = 1
    seeds["zstd-stored-short"] = bytes(b)
    b = bytearray(raw)
    b[24] = 3  # dtype float32: raw sizes no longer match the schema
    seeds["schema-dtype"] = bytes(b)
    b = bytearray(raw)
    set_u32(b, 28, 0x10000)  # height 65536 x width 3 x 1
    seeds["schema-huge"] = bytes(b)
    for name, data in seeds.items():
        put("shard_reader_fuzzer", name, data)
        put("verify_fuzzer", name, data)
    return shards


def manifest_seeds():
    for d in ("raw", "zstd", "split"):
        put("manifest_fuzzer", d, read(GOLDEN, d, "kiln.json"))
    for d in ("raw", "zstd"):
        put("manifest_fuzzer", "lmdb-" + d, read(GOLDEN_LMDB, d, "kiln.json"))
    base = read(GOLDEN, "raw", "kiln.json").decode()
    mutations = {
        "not-json": "{\"kiln_manifest_version\": 1,",
        "array": "[1, 2, 3]",
        "version-2": base.replace("\"kiln_manifest_version\": 1", "\"kiln_manifest_version\": 2"),
        "samples-negative": base.replace("\"samples\": 3,", "\"samples\": -3,", 1),
        "height-huge": base.replace("\"height\": 2", "\"height\": 4294967296"),
        "height-float": base.replace("\"height\": 2", "\"height\": 2.5"),
        "channels-2": base.replace("\"channels\": 1", "\"channels\": 2"),
        "dtype-bad": base.replace("\"uint8\"", "\"int7\""),
        "file-slash": base.replace("\"shard-00000.kiln\"", "\"../shard-00000.kiln\""),
        "file-empty": base.replace("\"shard-00000.kiln\"", "\"\""),
        "hash-short": base.replace("c28ca2daa5fbf228", "c28ca2"),
        "hash-nonhex": base.replace("c28ca2daa5fbf228", "c28ca2daa5fbf2zz"),
        "hash-sign": base.replace("c28ca2daa5fbf228", "-28ca2daa5fbf228"),
        "classes-number": base.replace("\"cat\"", "7"),
        "seed-string": base.replace("\"shuffle_seed\": null", "\"shuffle_seed\": \"7\""),
        "alignment-negative": base.replace("\"record_alignment\": 64", "\"record_alignment\": -64"),
        "preprocessing-array": base.replace("\"preprocessing\": {}", "\"preprocessing\": [1]"),
        "files-object": base.replace("\"files\": [", "\"files\": {\"a\": ").replace("}\n  ]", "}}"),
        "format-hdf5": base.replace("\"shards\"", "\"hdf5\""),
    }
    for name, text in mutations.items():
        put("manifest_fuzzer", name, text.encode())


def decoder_seeds(shards):
    def rec(codec, raw_size, stored):
        return bytes([codec]) + struct.pack("<I", raw_size)[:3] + stored

    for name in ("raw", "zstd", "split0"):
        s = shards[name]
        for i, (entry, off, stored, raw_size, label, codec) in enumerate(entries(s)[:2]):
            data = s[off:off + stored]
            put("record_decoder_fuzzer", "%s-%d" % (name, i), rec(codec, raw_size, data))
            if codec == 1:
                put("record_decoder_fuzzer", "%s-%d-short-raw" % (name, i),
                    rec(1, raw_size - 1, data))
                put("record_decoder_fuzzer", "%s-%d-long-raw" % (name, i),
                    rec(1, raw_size + 100, data))
                put("record_decoder_fuzzer", "%s-%d-cut" % (name, i),
                    rec(1, raw_size, data[: len(data) // 2]))
                put("record_decoder_fuzzer", "%s-%d-as-none" % (name, i), rec(0, raw_size, data))
    put("record_decoder_fuzzer", "codec-7", rec(7, 6, b"abcdef"))
    # rec(0, 0, b"") (codec none, raw size 0) is finding F1: tests/fuzz/findings/.
    put("record_decoder_fuzzer", "zstd-empty", rec(1, 16, b""))


def lmdb_seeds():
    for d in ("raw", "zstd"):
        mdb = read(GOLDEN_LMDB, d, "data.mdb")
        n = 0
        pos = mdb.find(b"KLNV")
        while pos >= 0 and n < 3:
            stored = struct.unpack_from("<I", mdb, pos + 12)[0]
            key_size = struct.unpack_from("<H", mdb, pos + 32)[0]
            value = mdb[pos:pos + 40 + key_size + stored]
            put("lmdb_value_fuzzer", "%s-%d" % (d, n), value)
            if n == 0:
                put("lmdb_value_fuzzer", "%s-cut" % d, value[:-1])
                put("lmdb_value_fuzzer", "%s-header-only" % d, value[:40])
                v = bytearray(value)
                v[7] = 1  # reserved byte
                put("lmdb_value_fuzzer", "%s-reserved" % d, bytes(v))
                v = bytearray(value)
                v[6] = 9  # unknown codec
                put("lmdb_value_fuzzer", "%s-codec-9" % d, bytes(v))
                v = bytearray(value)
                set_u32(v, 12, 0xFFFFFFFF)  # stored_size overflow candidate
                put("lmdb_value_fuzzer", "%s-stored-huge" % d, bytes(v))
            n += 1
            pos = mdb.find(b"KLNV", pos + 1)
    put("lmdb_value_fuzzer", "key-only", struct.pack(">Q", 42))


def main():
    clear_seeds()
    shards = shard_seeds()
    manifest_seeds()
    decoder_seeds(shards)
    lmdb_seeds()


if __name__ == "__main__":
    main()
