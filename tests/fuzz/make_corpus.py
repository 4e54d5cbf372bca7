#!/usr/bin/env python3
"""Regenerates the seed corpus in tests/fuzz/corpus/ from the golden files (tests/data/golden*/).

Seeds are the golden shards, manifests, records, LMDB values and HDF5 files plus hand-made
mutations that reach the checks behind them. Checksums are not recomputed here: the shard, LMDB
and HDF5 targets recompute them themselves on a second pass (fuzz_util.h, hdf5_fuzzer.cc). Files found by fuzzing
(crash-*, regression-*) are kept; only seed-* files are rewritten.

    python3 tests/fuzz/make_corpus.py
"""
import os
import re
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN = os.path.join(ROOT, "tests", "data", "golden")
GOLDEN_LMDB = os.path.join(ROOT, "tests", "data", "golden-lmdb")
GOLDEN_HDF5 = os.path.join(ROOT, "tests", "data", "golden-hdf5")
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
    put("manifest_fuzzer", "hdf5-raw", read(GOLDEN_HDF5, "raw", "kiln.json"))
    golden = read(GOLDEN, "raw", "kiln.json").decode()
    # Mutations start from the golden manifest in version-1 form (no manifest_xxh3_64), so that
    # they reach the field checks and, when still valid, the round trip, instead of stopping at
    # the manifest checksum; the golden (version 2) manifests above carry the checksum.
    base = re.sub(r',\n  "manifest_xxh3_64": "[0-9a-f]{16}"', "", golden)
    base = base.replace("\"kiln_manifest_version\": 2", "\"kiln_manifest_version\": 1")
    mutations = {
        "version-1": base,
        "checksum-class-renamed": golden.replace("\"cat\"", "\"cow\""),
        "checksum-short": re.sub(r'("manifest_xxh3_64": ")[0-9a-f]{16}', r"\g<1>9c14", golden),
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
        "index-hash-nonhex": base.replace("ae25305bd925e13f", "ae25305bd925e13g"),
        "index-hash-number": base.replace("\"ae25305bd925e13f\"", "12345"),
        "index-hash-other": base.replace("ae25305bd925e13f", "0000000000000001"),
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


def hdf5_seeds():
    """data.h5 of the golden HDF5 datasets (formats/hdf5/hdf5_format.md) and mutations of them."""
    raw = read(GOLDEN_HDF5, "raw", "data.h5")
    z = read(GOLDEN_HDF5, "zstd", "data.h5")
    seeds = {"raw": raw, "zstd": z}
    seeds["superblock-only"] = raw[:96]
    seeds["raw-cut-half"] = raw[: len(raw) // 2]
    seeds["zstd-cut-1"] = z[:-1]  # the last chunk runs past the end
    # Offsets of the golden raw file (h5dump -p; formats/hdf5/hdf5_format.md section 7): images at
    # 6144, keys at 8640. Pass 2 of the target recomputes the checksums these flips break.
    b = bytearray(raw)
    b[6144 + 100] ^= 0x01  # sample 0: checksum mismatch
    seeds["raw-sample-flip"] = bytes(b)
    b = bytearray(raw)
    b[8640 + 1] ^= 0x01  # key 0: keys checksum mismatch
    seeds["raw-key-flip"] = bytes(b)
    # kiln_hdf5_version (scalar int32, the attribute's data follows name, type and space).
    for name, version in (("version-1", 1), ("version-3", 3)):
        b = bytearray(raw)
        at = b.find(b"kiln_hdf5_version\0")
        v = b.find(struct.pack("<i", 2), at + 24, at + 64)
        set_u32(b, v, version)
        seeds["raw-" + name] = bytes(b)
    b = bytearray(raw)
    at = b.find(b'"samples": 12')  # inside the kiln_manifest attribute's text
    b[at + 11:at + 13] = b"13"
    seeds["raw-attr-samples"] = bytes(b)
    # The chunk index of the zstd file: a v1 B-tree node of type 1, "TREE", type, level,
    # entries (u16), two siblings, then (key, child) * entries + key; a key is size (u32),
    # filter mask (u32), 5 element offsets (u64).
    node = z.find(b"TREE\x01")
    key_bytes = 8 + 8 * 5

    def entry(e):
        return node + 24 + e * (key_bytes + 8)

    mutations = {
        "entries-huge": lambda b: struct.pack_into("<H", b, node + 6, 0xFFFF),
        "child-wrap": lambda b: set_u64(b, entry(3) + key_bytes, 2**64 - 64),
        "child-self": lambda b: set_u64(b, entry(3) + key_bytes, node),
        "dup-element": lambda b: set_u64(b, entry(2) + 8, 1),
        "element-12": lambda b: set_u64(b, entry(11) + 8, 12),
        "size-huge": lambda b: set_u32(b, entry(4), 0xFFFFFFF0),
        "mask-0": lambda b: set_u32(b, entry(0) + 4, 0),  # a raw chunk claimed as zstd
        "mask-1": lambda b: set_u32(b, entry(1) + 4, 1),  # a zstd chunk claimed as raw
    }
    for name, mutate in mutations.items():
        b = bytearray(z)
        mutate(b)
        seeds["zstd-btree-" + name] = bytes(b)
    b = bytearray(z)
    child = struct.unpack_from("<Q", z, entry(1) + key_bytes)[0]
    b[child + 20] ^= 0xFF  # inside a zstd frame
    seeds["zstd-frame-flip"] = bytes(b)
    for name, data in seeds.items():
        put("hdf5_fuzzer", name, data)


GO_IMAGES = "/usr/share/go-1.19/src/image/testdata"


def app1_orientation(value, big_endian=True):
    """An APP1 Exif segment whose IFD0 holds only Orientation = value (SHORT)."""
    e = ">" if big_endian else "<"
    tiff = (b"MM" if big_endian else b"II") + struct.pack(e + "HI", 42, 8)
    tiff += struct.pack(e + "H", 1) + struct.pack(e + "HHIHH", 0x0112, 3, 1, value, 0)
    tiff += struct.pack(e + "I", 0)
    payload = b"Exif\0\0" + tiff
    return b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload


def image_seeds():
    """image_decoder_fuzzer: byte 0 = options (bit 0: 1 channel, bit 1: black background), then
    the file. Small JPEGs of every subsampling from golang-1.19-src, EXIF orientations, a CMYK
    JPEG, PNGs with alpha and 16-bit samples, and cut files."""
    import io
    from PIL import Image
    seeds = {}
    if os.path.isdir(GO_IMAGES):
        for name in ["video-001.q50.420.jpeg", "video-001.q50.422.progressive.jpeg",
                     "video-001.q50.444.jpeg", "video-001.q50.410.jpeg",
                     "video-001.q50.440.progressive.jpeg", "video-005.gray.q50.jpeg",
                     "video-001.rgb.jpeg", "video-001.cmyk.jpeg"]:
            seeds[name.replace("video-", "go-")] = b"\x00" + read(GO_IMAGES, name)
        seeds["go-gray-as-grey"] = b"\x01" + read(GO_IMAGES, "video-005.gray.q50.2x2.jpeg")
        seeds["go-progressive-truncated"] = b"\x00" + read(
            GO_IMAGES, "video-001.progressive.truncated.jpeg")
    pic = Image.new("RGB", (12, 8))
    pic.putdata([((x * 20) % 256, (y * 30) % 256, (x * y * 7) % 256)
                 for y in range(8) for x in range(12)])
    out = io.BytesIO()
    pic.save(out, "JPEG", quality=90)
    jpeg = out.getvalue()
    app0_end = 4 + struct.unpack(">H", jpeg[4:6])[0]
    for v in (3, 6, 8):
        seeds["exif-orientation-%d" % v] = (
            b"\x00" + jpeg[:app0_end] + app1_orientation(v, v != 8) + jpeg[app0_end:])
    seeds["jpeg-small"] = b"\x01" + jpeg
    seeds["jpeg-cut"] = b"\x00" + jpeg[: len(jpeg) // 2]
    rgba = Image.new("RGBA", (6, 5), (10, 200, 30, 128))
    out = io.BytesIO()
    rgba.save(out, "PNG")
    seeds["png-rgba"] = b"\x02" + out.getvalue()
    grey16 = Image.new("I;16", (5, 4), 0x1234)
    out = io.BytesIO()
    grey16.save(out, "PNG")
    seeds["png-16bit"] = b"\x00" + out.getvalue()
    for name, data in seeds.items():
        put("image_decoder_fuzzer", name, data)


def tfrecord_seeds():
    """TFRecord files (tfrecord_fuzzer: byte 0 = options, bit 0 --feature-key, bit 1 fix CRCs)."""
    import gzip
    golden = read(ROOT, "tests", "data", "tfrecord", "golden.tfrecord")
    seeds = {
        "golden": b"\x00" + golden,
        "golden-key": b"\x01" + golden,
        "golden-key-fixed": b"\x03" + golden,
        "cut": b"\x00" + golden[:-10],
        "cut-header": b"\x00" + golden[:693],
        "gzip": b"\x00" + gzip.compress(golden, mtime=0),
        "huge-length": b"\x02" + struct.pack("<Q", 1 << 63) + bytes(4),
        "over-limit": b"\x02" + struct.pack("<Q", (1 << 30) + 1) + bytes(4) + b"x" * 16,
        "short-example": b"\x02" + struct.pack("<Q", 5) + bytes(4) + golden[12:17] + bytes(4),
        "empty-record": b"\x02" + bytes(16),
    }
    for name, data in seeds.items():
        put("tfrecord_fuzzer", name, data)


def main():
    clear_seeds()
    shards = shard_seeds()
    manifest_seeds()
    decoder_seeds(shards)
    lmdb_seeds()
    hdf5_seeds()
    image_seeds()
    tfrecord_seeds()


if __name__ == "__main__":
    main()
