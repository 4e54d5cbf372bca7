#!/usr/bin/python3
"""Unpack Fashion-MNIST from Debian's `dataset-fashion-mnist` into an ImageFolder tree of PNGs.

    /usr/bin/python3 samples/make_fashion_mnist.py OUT [--split train|t10k|both] [--limit-per-class N]

writes OUT/<class folder>/<split>-<index>.png, one 28x28 8-bit greyscale PNG per image, where
<index> is the image's position (5 digits) in the split's IDX file, so a test can find the
original pixels. Class folders sort (byte order) into the Fashion-MNIST label order 0..9.

With no options it writes all 70,000 images (60,000 train + 10,000 t10k). `--limit-per-class N`
keeps the first N images of each class of each split, in file order; the tree shipped in
samples/fashion-mnist/ is `--split train --limit-per-class 100`.

Idempotent: a file whose bytes are already what would be written is left alone. Writes nothing
outside OUT. Needs only Debian's python3-numpy and python3-pil (run it with /usr/bin/python3).
"""

import argparse
import gzip
import os
import struct
import sys
import tempfile
from io import BytesIO

import numpy as np
from PIL import Image

DEFAULT_SRC = "/usr/share/datasets/fashion-mnist"

# Index = Fashion-MNIST label; the digit prefix makes byte-order sorting give label order.
CLASS_FOLDERS = [
    "0_T-shirt_top",
    "1_Trouser",
    "2_Pullover",
    "3_Dress",
    "4_Coat",
    "5_Sandal",
    "6_Shirt",
    "7_Sneaker",
    "8_Bag",
    "9_Ankle_boot",
]
assert sorted(CLASS_FOLDERS) == CLASS_FOLDERS


def read_idx(path, magic, ndim):
    """Read a gzipped IDX file (big-endian header) into a uint8 numpy array."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    got_magic = struct.unpack_from(">I", data, 0)[0]
    if got_magic != magic:
        raise ValueError(f"{path}: IDX magic {got_magic:#x}, expected {magic:#x}")
    dims = struct.unpack_from(">" + "I" * ndim, data, 4)
    header = 4 + 4 * ndim
    count = int(np.prod(dims))
    if len(data) != header + count:
        raise ValueError(f"{path}: {len(data)} bytes, expected {header + count} for shape {dims}")
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(dims)


def load_split(src, split):
    images = read_idx(os.path.join(src, f"{split}-images-idx3-ubyte.gz"), 0x00000803, 3)
    labels = read_idx(os.path.join(src, f"{split}-labels-idx1-ubyte.gz"), 0x00000801, 1)
    if images.shape[0] != labels.shape[0] or images.shape[1:] != (28, 28):
        raise ValueError(f"{split}: images {images.shape} do not match labels {labels.shape}")
    if labels.max() >= len(CLASS_FOLDERS):
        raise ValueError(f"{split}: label {labels.max()} out of range")
    return images, labels


def encode_png(pixels):
    buf = BytesIO()
    Image.fromarray(np.ascontiguousarray(pixels), mode="L").save(buf, format="PNG")
    return buf.getvalue()


def write_if_changed(path, data):
    """Write data to path atomically unless the file already holds exactly these bytes."""
    try:
        with open(path, "rb") as f:
            if f.read() == data:
                return False
    except FileNotFoundError:
        pass
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".png", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return True


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="output folder (created if missing)")
    p.add_argument("--split", choices=["train", "t10k", "both"], default="both",
                   help="which IDX split(s) to unpack (default: both)")
    p.add_argument("--limit-per-class", type=int, default=0, metavar="N",
                   help="keep the first N images of each class of each split (default: all)")
    p.add_argument("--src", default=DEFAULT_SRC,
                   help=f"folder with the gzipped IDX files (default: {DEFAULT_SRC})")
    args = p.parse_args(argv)
    if args.limit_per_class < 0:
        p.error("--limit-per-class must be >= 0")

    splits = ["train", "t10k"] if args.split == "both" else [args.split]
    for name in CLASS_FOLDERS:
        os.makedirs(os.path.join(args.out, name), exist_ok=True)

    total_written = total_same = 0
    for split in splits:
        try:
            images, labels = load_split(args.src, split)
        except FileNotFoundError as e:
            sys.exit(f"make_fashion_mnist: {e.filename} not found; "
                     "install it with: apt-get install -y dataset-fashion-mnist")
        per_class = [0] * len(CLASS_FOLDERS)
        written = same = 0
        for index in range(images.shape[0]):
            label = int(labels[index])
            if args.limit_per_class and per_class[label] >= args.limit_per_class:
                continue
            per_class[label] += 1
            path = os.path.join(args.out, CLASS_FOLDERS[label], f"{split}-{index:05d}.png")
            if write_if_changed(path, encode_png(images[index])):
                written += 1
            else:
                same += 1
        print(f"{split}: {sum(per_class)} images of {images.shape[0]} "
              f"({written} written, {same} unchanged); per class: "
              + " ".join(str(c) for c in per_class))
        total_written += written
        total_same += same
    print(f"total: {total_written + total_same} PNGs in {args.out} "
          f"({total_written} written, {total_same} unchanged)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
