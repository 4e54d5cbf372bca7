"""One rank of tests/scale/stats_ranks_test.sh: a training loop that reads DATASET with
kiln.Loader(rank=None, world_size=None) (the rank from the launcher) and the stats export on
(stats_dir=STATS_DIR, stats_interval=INTERVAL seconds), for SECONDS, its training step a sleep
of STEP_MS per batch. Rank SLOW_RANK reads SLOW_PATH instead: the same dataset behind a
throttled storage path (tests/scale/throttled_http.py), so its data side is slow and its loop
waits for data. Prints "rank R: N samples in T s from PATH".
    stats_rank.py DATASET SLOW_PATH SLOW_RANK STATS_DIR INTERVAL SECONDS STEP_MS
"""
import sys
import time

import kiln
from kiln import _core


def main():
    dataset, slow_path, slow_rank, stats_dir = sys.argv[1:5]
    interval, seconds, step_ms = (float(a) for a in sys.argv[5:8])
    rank = _core.world_from_environment()["rank"]
    path = slow_path if rank == int(slow_rank) else dataset
    loader = kiln.Loader(path, batch_size=16, shuffle=True, seed=5, num_threads=1,
                         backend="numpy", pin_memory=False, stats_dir=stats_dir,
                         stats_interval=interval)
    assert loader.rank == rank, (loader.rank, rank)
    start = time.monotonic()
    samples = 0
    while time.monotonic() - start < seconds:
        for images, _labels in loader:
            samples += len(images)
            time.sleep(step_ms / 1e3)  # the training step
            if time.monotonic() - start >= seconds:
                break
    elapsed = time.monotonic() - start
    del loader  # writes the final line
    print(f"rank {rank}: {samples} samples in {elapsed:.1f} s from {path}", flush=True)


if __name__ == "__main__":
    main()
