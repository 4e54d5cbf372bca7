"""Exits 0 when two datasets hold the same samples in the same order: the same tensor bytes,
labels, keys and classes, whatever their shard boundaries. Prints the first difference.
    same_samples.py DATASET_A DATASET_B
"""
import sys

import numpy as np

import kiln


def samples(path):
    loader = kiln.Loader(path, batch_size=4096, shuffle=False, num_threads=1, backend="numpy",
                         pin_memory=False)
    images, labels, keys = [], [], []
    for x, y in loader:
        images.append(np.array(x, copy=True))
        labels.append(np.array(y, copy=True))
        keys += [loader.key(int(i)) for i in loader.batch_indices()]
    return loader.classes, np.concatenate(images), np.concatenate(labels), keys


def main():
    a, b = samples(sys.argv[1]), samples(sys.argv[2])
    for name, x, y in zip(("classes", "images", "labels", "keys"), a, b):
        same = np.array_equal(x, y) if isinstance(x, np.ndarray) else x == y
        if not same:
            print(f"{sys.argv[1]} and {sys.argv[2]} differ in their {name}")
            return 1
    print(f"same {len(a[3])} samples (bytes, labels, keys, order, classes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
