"""kiln.Loader.stats() and the statistics export (reader/stats_export.md) from Python: the full
set of counters, counters that add up, stats_dir= / stats_interval=, the environment variables
without code changes, and the errors."""
import gc
import json
import os
import subprocess
import sys
import time

import pytest

import kiln

# The counters of a kiln.stats v1 line, in order (reader/stats_export.md, section 3).
COUNTERS = [
    "batches", "samples", "bytes", "consumer_wait_ns", "fetch_ns", "fetch_cpu_ns",
    "slot_wait_ns", "decompress_ns", "zstd_records", "augment_ns", "chunks", "read_ahead_bytes",
    "residency_probes", "residency_misses", "direct_reads", "direct_read_bytes", "uploads",
    "upload_bytes", "upload_wait_ns", "requests", "request_retries", "request_failures",
    "request_bytes", "request_hedges", "request_hedge_wins", "request_latency_p50_ns",
    "request_latency_p99_ns", "request_cache_reads", "request_cache_bytes"]


def read_epoch(loader):
    return sum(len(labels) for _images, labels in loader)


def lines_of(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def wait_for_lines(path, n):
    give_up = time.monotonic() + 60  # only keeps a broken build from hanging
    while len(lines_of(path)) < n:
        assert time.monotonic() < give_up, f"{path} never reached {n} lines"
        time.sleep(0.005)


def test_stats_has_every_counter_and_they_add_up(packed):
    start = time.monotonic_ns()
    loader = kiln.Loader(packed, batch_size=64, num_threads=2, backend="numpy", crop=20, flip=True)
    received = read_epoch(loader) + read_epoch(loader)
    s = loader.stats()
    wall = time.monotonic_ns() - start
    assert list(s)[:len(COUNTERS)] == COUNTERS
    for key in COUNTERS + ["storage_ns", "copy_ns", "read_ahead_samples", "read_ahead_ns",
                           "read_ahead_max_lead_samples", "direct_max_in_flight", "epoch"]:
        assert isinstance(s[key], int) and s[key] >= 0, key
    assert s["io_path"] in ("mmap", "direct") and s["io_path"] == loader.io_path
    assert s["samples"] == received == 2000
    assert s["batches"] == 2 * len(loader)
    assert s["bytes"] == received * 20 * 20
    assert s["epoch"] == 1
    assert s["fetch_cpu_ns"] <= s["fetch_ns"]
    assert s["storage_ns"] == s["fetch_ns"] - s["fetch_cpu_ns"]
    assert s["copy_ns"] <= s["fetch_cpu_ns"]
    assert s["augment_ns"] > 0  # crop and flip ran
    assert s["fetch_ns"] + s["slot_wait_ns"] <= 2 * wall
    assert s["consumer_wait_ns"] <= wall
    assert s["requests"] == 0  # a local dataset


def test_stats_dir_option_exports_lines_and_a_final_line(packed, tmp_path):
    out = tmp_path / "stats"
    loader = kiln.Loader(packed, batch_size=100, num_threads=2, backend="numpy", rank=0,
                         world_size=1, stats_dir=out, stats_interval=0.02)
    assert loader.options.stats_dir == str(out)
    assert loader.options.stats_interval_s == 0.02
    jsonl = out / "kiln-stats-rank0.jsonl"
    received = read_epoch(loader)
    wait_for_lines(jsonl, 2)
    received += read_epoch(loader)
    at_close = loader.stats()
    del loader
    gc.collect()
    lines = lines_of(jsonl)
    assert len(lines) >= 3
    for k, line in enumerate(lines):
        assert line["schema"] == "kiln.stats" and line["version"] == 1
        assert line["rank"] == 0 and line["pid"] == os.getpid()
        assert line["interval_ns"] == 20_000_000
        assert line["final"] == (k == len(lines) - 1)
        assert list(line["counters"]) == COUNTERS
        if k:
            for name in COUNTERS:
                if "latency" not in name:
                    assert line["counters"][name] >= lines[k - 1]["counters"][name], name
    assert {name: lines[-1]["counters"][name] for name in COUNTERS} == \
        {name: at_close[name] for name in COUNTERS}
    assert lines[-1]["counters"]["samples"] == received
    prom = (out / "kiln-stats-rank0.prom").read_text()
    assert f'kiln_samples_total{{rank="0"}} {received}\n' in prom
    assert "# TYPE kiln_samples_total counter\n" in prom


def test_environment_variables_need_no_code_change(packed, tmp_path):
    out = tmp_path / "env-stats"
    script = ("import kiln, sys\n"
              "loader = kiln.Loader(sys.argv[1], batch_size=100, num_threads=1, "
              "backend='numpy')\n"
              "print(sum(len(y) for _x, y in loader))\n")
    env = dict(os.environ, KILN_STATS_DIR=str(out), KILN_STATS_INTERVAL="0.05", RANK="1",
               WORLD_SIZE="2")
    done = subprocess.run([sys.executable, "-c", script, packed], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = lines_of(out / "kiln-stats-rank1.jsonl")  # the rank from the launcher's RANK
    assert lines and lines[-1]["final"] is True
    assert lines[-1]["rank"] == 1 and lines[-1]["world_size"] == 2
    assert lines[-1]["interval_ns"] == 50_000_000
    assert lines[-1]["counters"]["samples"] == int(done.stdout) == 500


def test_unwritable_stats_dir_raises_naming_it(packed, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(kiln.KilnIOError, match="a-file/stats"):
        kiln.Loader(packed, backend="numpy", stats_dir=blocker / "stats")


def test_bad_interval_raises(packed, tmp_path):
    with pytest.raises(kiln.InvalidArgumentError, match="stats_interval_s"):
        kiln.Loader(packed, backend="numpy", stats_dir=tmp_path, stats_interval=0.001)
