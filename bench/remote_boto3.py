#!/usr/bin/python3
"""What a PyTorch user writes instead of kiln for a packed dataset in S3: a DataLoader whose
workers fetch each record with a boto3 range GET (Debian's python3-boto3, python3-torch); with
--http, the same over plain HTTP with urllib3 (boto3's own HTTP library: one pool of keep-alive
connections per worker), for a server that is not the bottleneck.

    remote_boto3.py BUCKET PREFIX [--samples N] [--workers W] [--batch-size B]
    remote_boto3.py --http http://HOST/PATH/ds [--samples N] [--workers W]

The record offsets come from the shard's index, read once with boto3 (the byte layout of
formats/shards/shard_format.md: footer at the end, 40-byte index entries). Samples are read in
a random order (RandomSampler, as kiln's exact order) and decoded to uint8 tensors; prints one
line: samples, seconds, samples/s, GETs. Credentials and endpoint as boto3 takes them
(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL is read here explicitly: boto3 1.26
predates its support).
"""

import argparse
import warnings
import json
import os
import struct
import time

import boto3
import botocore.config
import urllib3
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler


def client():
    return boto3.client(
        "s3", endpoint_url=os.environ.get("AWS_ENDPOINT_URL"),
        config=botocore.config.Config(s3={"addressing_style": "path"},
                                      retries={"max_attempts": 9, "mode": "standard"}))


def get_range(s3, bucket, key, start, length):
    r = s3.get_object(Bucket=bucket, Key=key, Range=f"bytes={start}-{start + length - 1}")
    return r["Body"].read()


class HttpObjects:
    """get_range/get_object over plain HTTP range GETs (urllib3), keys relative to a base URL."""

    def __init__(self, base):
        self.base = base.rstrip("/")
        self.pool = urllib3.PoolManager(maxsize=4, retries=urllib3.Retry(8, backoff_factor=0.05))

    def get(self, key, start=None, length=None):
        headers = {} if start is None else {"Range": f"bytes={start}-{start + length - 1}"}
        r = self.pool.request("GET", f"{self.base}/{key}", headers=headers)
        if r.status not in (200, 206):
            raise IOError(f"{self.base}/{key}: HTTP {r.status}")
        return r.data


def fetch(store, bucket, key, start=None, length=None):
    if isinstance(store, HttpObjects):
        return store.get(key, start, length)
    if start is None:
        return store.get_object(Bucket=bucket, Key=key)["Body"].read()
    return get_range(store, bucket, key, start, length)


def read_index(s3, bucket, prefix):
    """(key, offset, stored_size, label) of every record, in dataset order."""
    manifest = json.loads(fetch(s3, bucket, f"{prefix}/kiln.json".lstrip("/")))
    records = []
    for f in manifest["files"]:
        key = f"{prefix}/{f['file']}".lstrip("/")
        size = f["bytes"]
        footer = fetch(s3, bucket, key, size - 64, 64)
        index_offset, count = struct.unpack_from("<QQ", footer, 0)
        index = fetch(s3, bucket, key, index_offset, 40 * count)
        for i in range(count):
            offset, stored, _raw, label = struct.unpack_from("<QIIq", index, 40 * i)
            records.append((key, offset, stored, label))
    return records, manifest


class S3Records(Dataset):
    def __init__(self, bucket, records, shape, http=None):
        self.bucket, self.records, self.shape, self.http = bucket, records, shape, http
        self.s3 = None  # one client per worker process, made on first use

    def __len__(self):
        return len(self.records)

    def __getitem__(self, i):
        if self.s3 is None:
            self.s3 = HttpObjects(self.http) if self.http else client()
        key, offset, stored, label = self.records[i]
        data = fetch(self.s3, self.bucket, key, offset, stored)
        return torch.from_numpy(np.frombuffer(bytearray(data), np.uint8).reshape(self.shape)), label


def main():
    warnings.filterwarnings("ignore", message="This DataLoader will create")
    p = argparse.ArgumentParser()
    p.add_argument("bucket", nargs="?", default="")
    p.add_argument("prefix", nargs="?", default="")
    p.add_argument("--http", default="", help="a dataset's base URL: urllib3 instead of boto3")
    p.add_argument("--samples", type=int, default=0, help="0: all")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=256)
    a = p.parse_args()
    store = HttpObjects(a.http) if a.http else client()
    records, manifest = read_index(store, a.bucket, a.prefix)
    schema = manifest["schema"]
    if manifest.get("compression", "none") not in ("none", None):
        raise SystemExit("remote_boto3.py reads uncompressed records only")
    shape = (schema["height"], schema["width"], schema["channels"])
    n = a.samples or len(records)
    ds = S3Records(a.bucket, records, shape, a.http or None)
    loader = DataLoader(ds, batch_size=a.batch_size, num_workers=a.workers,
                        sampler=RandomSampler(ds, num_samples=n,
                                              generator=torch.Generator().manual_seed(0)))
    start = time.monotonic()
    seen = 0
    for x, _ in loader:
        seen += x.shape[0]
    t = time.monotonic() - start
    print(f"{'urllib3' if a.http else 'boto3'} DataLoader: {seen} samples in {t:.2f} s = {seen / t:.0f} samples/s "
          f"({a.workers} workers, one range GET per record, {seen} GETs)")


if __name__ == "__main__":
    main()
