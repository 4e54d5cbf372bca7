"""One reader rank for the scale tests: opens DATASET with kiln.Loader(rank=None,
world_size=None), so that the rank comes from the launcher (mpirun, srun), reads one epoch and
writes OUT_DIR/rank-R.txt: "rank world_size batches source" on the first line, then the dataset
index of every sample it got, one per line.
    read_rank.py DATASET OUT_DIR
"""
import os
import sys

import kiln
from kiln import _core


def main():
    dataset, out_dir = sys.argv[1], sys.argv[2]
    loader = kiln.Loader(dataset, batch_size=32, shuffle=True, seed=11, num_threads=1,
                         backend="numpy", pin_memory=False)
    source = _core.world_from_environment()["source"]
    indices, batches = [], 0
    for _images, _labels in loader:
        batches += 1
        indices += [int(i) for i in loader.batch_indices()]
    assert batches == len(loader), (batches, len(loader))
    path = os.path.join(out_dir, f"rank-{loader.rank}.txt")
    with open(path + ".tmp", "w") as f:
        f.write(f"{loader.rank} {loader.world_size} {len(loader)} {source}\n")
        f.writelines(f"{i}\n" for i in indices)
    os.rename(path + ".tmp", path)


if __name__ == "__main__":
    main()
