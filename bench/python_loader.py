#!/usr/bin/python3
"""kiln.Loader (Python) throughput against `kiln bench` (the C++ reader) on the same dataset.

    PYTHONPATH=build/python /usr/bin/python3 bench/python_loader.py [DATASET] [--kiln build/tools/kiln]

DATASET: a packed dataset (default: /tmp/kiln-bench/fmnist-none, the full Fashion-MNIST that
bench/pack_and_read_fashion_mnist.sh packs, else the 1,000 sample images packed into /tmp).
For each thread count both run the same options (batch 256, prefetch 4, shuffled, --epochs
epochs after one warm-up epoch) and touch nothing but the batch handles, so the figures are the
loaders' own rates; the Python side adds the per-batch cost of the binding, DLPack and the
iterator. Prints one line per configuration and the Python/C++ ratio. --imagefolder TREE also
times one epoch of DataLoader(ImageFolder(TREE)) with as many worker processes.
"""

import argparse
import json
import os
import subprocess
import sys
import time

import kiln

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dataset", nargs="?")
    p.add_argument("--kiln", default=os.path.join(REPO, os.environ.get("KILN_BUILD_DIR", "build"),
                                                  "tools", "kiln"))
    p.add_argument("--threads", default="1,2")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--prefetch", type=int, default=4)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--imagefolder", help="also time DataLoader(ImageFolder(TREE)) for one epoch")
    return p.parse_args()


def default_dataset():
    full = "/tmp/kiln-bench/fmnist-none"
    if os.path.exists(os.path.join(full, "kiln.json")):
        return full
    small = "/tmp/kiln-python-bench/fm"
    if not os.path.exists(os.path.join(small, "kiln.json")):
        kiln.pack(os.path.join(REPO, "samples", "fashion-mnist"), small, size=28, channels=1)
    return small


def cpp_rate(args, dataset, threads):
    out = subprocess.run([args.kiln, "bench", dataset, "--threads", str(threads),
                          "--batch-size", str(args.batch_size), "--prefetch", str(args.prefetch),
                          "--epochs", str(args.epochs), "--json"],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["samples_per_s"]


def python_rate(args, dataset, threads, **kw):
    loader = kiln.Loader(dataset, batch_size=args.batch_size, num_threads=threads,
                         prefetch=args.prefetch, **kw)
    for _ in loader:  # warm-up epoch (page cache, first fills)
        pass
    samples = 0
    start = time.perf_counter()
    for _ in range(args.epochs):
        for _images, labels in loader:
            samples += len(labels)
    return samples / (time.perf_counter() - start)


def imagefolder_rate(tree, threads, batch_size):
    import torch
    from torchvision import datasets, transforms
    dataset = datasets.ImageFolder(tree, transform=transforms.Compose(
        [transforms.Grayscale(1), transforms.PILToTensor()]))
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=True,
                                         num_workers=threads)
    start = time.perf_counter()
    samples = sum(len(y) for _, y in loader)
    return samples / (time.perf_counter() - start)


def main():
    args = parse_args()
    dataset = args.dataset or default_dataset()
    info = kiln.inspect(dataset)
    print(f"dataset {dataset}: {info['samples']} samples {info['shape']} {info['dtype']}; "
          f"batch {args.batch_size}, prefetch {args.prefetch}, {args.epochs} epochs, "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    print(f"{'threads':>7s} {'kiln bench (C++)':>18s} {'kiln.Loader torch':>18s} {'ratio':>6s} "
          f"{'numpy':>12s} {'torch copy':>12s}")
    for threads in [int(t) for t in args.threads.split(",")]:
        cpp = cpp_rate(args, dataset, threads)
        torch_rate = python_rate(args, dataset, threads)
        numpy_rate = python_rate(args, dataset, threads, backend="numpy")
        copy_rate = python_rate(args, dataset, threads, copy=True)
        print(f"{threads:7d} {cpp:14.0f} /s {torch_rate:14.0f} /s {torch_rate / cpp:6.2f} "
              f"{numpy_rate:10.0f} /s {copy_rate:10.0f} /s", flush=True)
        if args.imagefolder:
            rate = imagefolder_rate(args.imagefolder, threads, args.batch_size)
            print(f"{'':7s} DataLoader(ImageFolder), {threads} workers: {rate:.0f} samples/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
