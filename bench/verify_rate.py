#!/usr/bin/env python3
"""Verify rate against the file read rate: `kiln verify DIR --deep --json`, then `cat DIR/*`.

    python3 bench/verify_rate.py KILN DATASET_DIR

Prints one JSON object: bytes, verify_seconds and verify_mb_per_s (the kiln process, start-up
included), verify_inner_seconds and verify_inner_mb_per_s (the report's own `seconds`), and
cat_seconds and cat_mb_per_s. Warm page cache: run it after the dataset was written or read.
"""
import json
import os
import subprocess
import sys
import time


def main():
    kiln, d = sys.argv[1], sys.argv[2]
    b = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)
    t = time.perf_counter()
    report = json.loads(subprocess.run([kiln, "verify", d, "--deep", "--json"], check=True,
                                       capture_output=True, text=True).stdout)
    v = time.perf_counter() - t
    t = time.perf_counter()
    subprocess.run("cat %s/* > /dev/null" % d, shell=True, check=True)
    c = time.perf_counter() - t
    print(json.dumps({"bytes": b, "verify_seconds": v, "verify_mb_per_s": b / v / 1e6,
                      "verify_inner_seconds": report["seconds"],
                      "verify_inner_mb_per_s": b / report["seconds"] / 1e6,
                      "cat_seconds": c, "cat_mb_per_s": b / c / 1e6}))


if __name__ == "__main__":
    main()
