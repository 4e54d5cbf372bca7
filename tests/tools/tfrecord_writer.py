#!/usr/bin/python3
"""An independent TFRecord writer for kiln's tests: tf.train.Example records framed as
TensorFlow's RecordWriter frames them (tensorflow/core/lib/io/record_writer.cc), with the CRC-32C
of python3-crc32c and the protobuf encoding of python3-protobuf. It shares no code with kiln.

Usage: tfrecord_writer.py SPEC.json  (prints one JSON object: each file's record offsets)

SPEC is a list of files: {"path": P, "gzip": false, "records": [RECORD, ...]}. A RECORD is
  {"raw": "TEXT"}          a record whose data is these UTF-8 bytes (no Example),
  {"raw_hex": "08ff"}      a record whose data is these bytes (no Example),
  {"header_only": N}       a header claiming N data bytes (length CRC good) and nothing after, or
  {"features": {NAME: FEATURE, ...}}  a tf.train.Example, where FEATURE is one of
    {"bytes_files": [PATH, ...]}  a BytesList of these files' contents,
    {"bytes": [TEXT, ...]}        a BytesList of these UTF-8 strings,
    {"int64": [N, ...]}           an Int64List, {"float": [X, ...]} a FloatList.
Output: {"files": [{"path": P, "offsets": [O, ...], "lengths": [L, ...]}, ...]}, where O is the
byte offset of a record's length field and L the length of its data.
"""
import gzip
import json
import os
import struct
import sys

import crc32c
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory


def example_class():
    """tf.train.Example, declared as tensorflow/core/example/{example,feature}.proto declare it."""
    f = descriptor_pb2.FileDescriptorProto()
    f.name = "kiln_test_tf_example.proto"
    f.package = "tensorflow"
    f.syntax = "proto3"
    T = descriptor_pb2.FieldDescriptorProto

    def message(name, fields, nested=()):
        m = f.message_type.add() if isinstance(name, str) else name
        if isinstance(name, str):
            m.name = name
        for fname, number, ftype, label, type_name, oneof in fields:
            x = m.field.add()
            x.name, x.number, x.type, x.label = fname, number, ftype, label
            if type_name:
                x.type_name = type_name
            if oneof is not None:
                x.oneof_index = oneof
        return m

    rep, opt = T.LABEL_REPEATED, T.LABEL_OPTIONAL
    message("BytesList", [("value", 1, T.TYPE_BYTES, rep, None, None)])
    message("FloatList", [("value", 1, T.TYPE_FLOAT, rep, None, None)])
    message("Int64List", [("value", 1, T.TYPE_INT64, rep, None, None)])
    feature = message("Feature", [
        ("bytes_list", 1, T.TYPE_MESSAGE, opt, ".tensorflow.BytesList", 0),
        ("float_list", 2, T.TYPE_MESSAGE, opt, ".tensorflow.FloatList", 0),
        ("int64_list", 3, T.TYPE_MESSAGE, opt, ".tensorflow.Int64List", 0),
    ])
    feature.oneof_decl.add().name = "kind"
    features = message("Features", [
        ("feature", 1, T.TYPE_MESSAGE, rep, ".tensorflow.Features.FeatureEntry", None)])
    entry = features.nested_type.add()
    entry.name = "FeatureEntry"
    entry.options.map_entry = True
    message(entry, [("key", 1, T.TYPE_STRING, opt, None, None),
                    ("value", 2, T.TYPE_MESSAGE, opt, ".tensorflow.Feature", None)])
    message("Example", [("features", 1, T.TYPE_MESSAGE, opt, ".tensorflow.Features", None)])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return message_factory.MessageFactory(pool).GetPrototype(
        pool.FindMessageTypeByName("tensorflow.Example"))


def masked_crc(data):
    crc = crc32c.crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def frame(data):
    length = struct.pack("<Q", len(data))
    return (length + struct.pack("<I", masked_crc(length)) + data +
            struct.pack("<I", masked_crc(data)))


def record_data(record, Example):
    if "raw" in record:
        return record["raw"].encode()
    if "raw_hex" in record:
        return bytes.fromhex(record["raw_hex"])
    ex = Example()
    for name, value in record["features"].items():
        feature = ex.features.feature[name]
        if "bytes_files" in value:
            feature.bytes_list.value.extend(open(p, "rb").read() for p in value["bytes_files"])
        elif "bytes" in value:
            feature.bytes_list.value.extend(v.encode() for v in value["bytes"])
        elif "int64" in value:
            feature.int64_list.value.extend(value["int64"])
        elif "float" in value:
            feature.float_list.value.extend(value["float"])
    return ex.SerializeToString()


def main():
    spec = json.load(open(sys.argv[1]))
    Example = example_class()
    out = {"files": []}
    for f in spec:
        stream, offsets, lengths = b"", [], []
        for record in f["records"]:
            if "header_only" in record:
                length = struct.pack("<Q", record["header_only"])
                offsets.append(len(stream))
                lengths.append(record["header_only"])
                stream += length + struct.pack("<I", masked_crc(length))
                continue
            data = record_data(record, Example)
            offsets.append(len(stream))
            lengths.append(len(data))
            stream += frame(data)
        os.makedirs(os.path.dirname(os.path.abspath(f["path"])), exist_ok=True)
        opener = gzip.open if f.get("gzip") else open
        with opener(f["path"], "wb") as w:
            w.write(stream)
        out["files"].append({"path": f["path"], "offsets": offsets, "lengths": lengths})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
