#!/usr/bin/python3
"""Train a small CNN on Fashion-MNIST on the CPU, fed once by kiln.Loader and once by the usual
DataLoader(ImageFolder), and print accuracy and throughput of both.

    PYTHONPATH=build/python /usr/bin/python3 samples/train_fashion_mnist.py [--epochs 3]

Data: the full 70,000-image tree when it exists (made by samples/make_fashion_mnist.py; default
/tmp/kiln-bench/fashion-mnist, as bench/pack_and_read_fashion_mnist.sh leaves it), else the 1,000
images shipped in samples/fashion-mnist. Only `train-*` files are used for training (at most
--train-samples of them, spread over the classes); accuracy is measured on the 10,000 t10k
images read straight from Debian's IDX files, the same for both loaders. The kiln dataset is
packed once with kiln.pack (cached in --work) from a list file of the chosen images.

Both loops use the same model, seed, batch size, optimiser and torch.set_num_threads(2); kiln
uses --threads fetch threads, the DataLoader --threads worker processes. The default run takes
about a minute on an idle 2-core machine.

While it trains, the kiln loader exports its statistics every 2 s to --stats-dir (default
<work>/stats): kiln-stats-rank0.jsonl (one JSON line per interval: samples, the loop's wait for
data, time in storage, decompression, augmentation, copy) and kiln-stats-rank0.prom (for
Prometheus' textfile collector). Watch it live from another shell with `kiln stats DIR`.
"""

import argparse
import gzip
import os
import sys
import time

import numpy as np
import torch
from torch import nn

import kiln

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
FULL_TREE = "/tmp/kiln-bench/fashion-mnist"
SAMPLE_TREE = os.path.join(REPO, "samples", "fashion-mnist")
IDX_DIR = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530  # Fashion-MNIST train pixel statistics, in [0, 1] units


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", help="ImageFolder tree (default: the full tree if present, else "
                   "samples/fashion-mnist)")
    p.add_argument("--work", default="/tmp/kiln-train", help="where the packed dataset goes")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--threads", type=int, default=2, help="kiln fetch threads / DataLoader workers")
    p.add_argument("--train-samples", type=int, default=10000,
                   help="train-* images used (spread over classes); 0 = all")
    p.add_argument("--torch-threads", type=int, default=2, help="torch.set_num_threads")
    p.add_argument("--only", choices=["kiln", "imagefolder"], help="run one loader only")
    p.add_argument("--stats-dir", help="where kiln.Loader exports its statistics (default: "
                   "<work>/stats; '' turns the export off)")
    return p.parse_args()


def list_train_files(root, limit):
    """Returns [(relative path, label)] of train-* PNGs, classes sorted, `limit` spread evenly."""
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    per_class = [sorted(f for f in os.listdir(os.path.join(root, c)) if f.startswith("train-"))
                 for c in classes]
    if limit:
        per_class = [files[:max(1, limit // len(classes))] for files in per_class]
    return [(f"{c}/{f}", label) for label, (c, files) in enumerate(zip(classes, per_class))
            for f in files], classes


def load_test_set():
    with gzip.open(os.path.join(IDX_DIR, "t10k-images-idx3-ubyte.gz")) as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(os.path.join(IDX_DIR, "t10k-labels-idx1-ubyte.gz")) as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8).astype(np.int64)
    x = (torch.from_numpy(images.copy()).float() / 255 - MEAN) / STD
    return x, torch.from_numpy(labels)


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),      # 8 x 14 x 14
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),     # 16 x 7 x 7
        nn.Flatten(), nn.Linear(16 * 7 * 7, 64), nn.ReLU(), nn.Linear(64, 10))


def accuracy(model, test_x, test_y):
    model.eval()
    with torch.no_grad():
        correct = sum(int((model(test_x[i:i + 1000]).argmax(1) == test_y[i:i + 1000]).sum())
                      for i in range(0, len(test_y), 1000))
    model.train()
    return correct / len(test_y)


def train(name, batches_of_epoch, epochs, test_x, test_y):
    """batches_of_epoch(epoch) yields (float32 [B, 1, 28, 28] normalised, int64 [B])."""
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    total_samples, total_s = 0, 0.0
    for epoch in range(epochs):
        start = time.perf_counter()
        samples = 0
        for x, y in batches_of_epoch(epoch):
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            samples += len(y)
        seconds = time.perf_counter() - start
        total_samples += samples
        total_s += seconds
        print(f"  {name:12s} epoch {epoch}: loss {float(loss):.3f}  "
              f"{samples / seconds:8.0f} samples/s  test accuracy "
              f"{accuracy(model, test_x, test_y):.4f}", flush=True)
    return total_samples / total_s, accuracy(model, test_x, test_y)


def data_only(batches_of_epoch, epoch):
    start = time.perf_counter()
    n = sum(len(y) for _, y in batches_of_epoch(epoch))
    return n / (time.perf_counter() - start)


def main():
    args = parse_args()
    torch.set_num_threads(args.torch_threads)
    data = args.data or (FULL_TREE if os.path.isdir(FULL_TREE) else SAMPLE_TREE)
    files, classes = list_train_files(data, args.train_samples)
    print(f"data: {data}: {len(files)} train images, {len(classes)} classes; "
          f"batch {args.batch_size}, {args.epochs} epochs, torch {torch.__version__}, "
          f"{args.threads} loader threads")
    test_x, test_y = load_test_set()
    results = {}

    if args.only in (None, "kiln"):
        os.makedirs(args.work, exist_ok=True)
        list_file = os.path.join(args.work, "train.txt")
        packed = os.path.join(args.work, f"fmnist-{len(files)}")
        content = "".join(f"{path} {label}\n" for path, label in files)
        previous = open(list_file).read() if os.path.exists(list_file) else None
        if previous != content or not os.path.exists(os.path.join(packed, "kiln.json")):
            with open(list_file, "w") as f:
                f.write(content)
            report = kiln.pack(list_file, packed, root=data, size=28, channels=1,
                               layout="chw", overwrite=True, threads=args.threads)
            print(f"kiln.pack: {report['packed']} images in {report['seconds']:.2f} s "
                  f"({report['images_per_s']:.0f} images/s)")
        stats_dir = os.path.join(args.work, "stats") if args.stats_dir is None else args.stats_dir
        # The statistics export (reader/stats_export.md): one JSON line every 2 s per rank, and
        # a final one when the loader is destroyed. Without these two arguments, setting
        # KILN_STATS_DIR (and KILN_STATS_INTERVAL) in the environment does the same; '' here
        # leaves the choice to the environment.
        loader = kiln.Loader(packed, batch_size=args.batch_size, num_threads=args.threads,
                             seed=0, normalize=(MEAN, STD), stats_dir=stats_dir or None,
                             stats_interval=2)
        if stats_dir:
            print(f"kiln.Loader statistics: {stats_dir}/kiln-stats-rank{loader.rank}.jsonl "
                  f"(watch with: kiln stats {stats_dir})")

        def kiln_epoch(epoch):
            loader.set_epoch(epoch)
            return loader                      # float32 [B, 1, 28, 28], int64 [B]

        results["kiln.Loader"] = (data_only(kiln_epoch, 100),) + train(
            "kiln.Loader", kiln_epoch, args.epochs, test_x, test_y)
        s = loader.stats()  # the same counters, in-process
        print(f"kiln.Loader: {s['samples']} samples; the loop waited "
              f"{s['consumer_wait_ns'] / 1e9:.2f} s for data; fetch threads: storage "
              f"{s['storage_ns'] / 1e9:.2f} s, decode and copy {s['copy_ns'] / 1e9:.2f} s "
              f"({s['io_path']} path)")

    if args.only in (None, "imagefolder"):
        from torchvision import datasets, transforms
        tf = transforms.Compose([transforms.Grayscale(1), transforms.ToTensor(),
                                 transforms.Normalize((MEAN,), (STD,))])
        keep = {os.path.join(data, p) for p, _ in files}
        dataset = datasets.ImageFolder(data, transform=tf, is_valid_file=lambda p: p in keep)
        generator = torch.Generator()

        def folder_epoch(epoch):
            generator.manual_seed(epoch)
            return torch.utils.data.DataLoader(
                dataset, batch_size=args.batch_size, shuffle=True, generator=generator,
                num_workers=args.threads, persistent_workers=False)

        results["DataLoader(ImageFolder)"] = (data_only(folder_epoch, 100),) + train(
            "ImageFolder", folder_epoch, args.epochs, test_x, test_y)

    print(f"\n{'feed':26s} {'data only':>14s} {'training':>14s} {'test accuracy':>14s}")
    for name, (read, rate, acc) in results.items():
        print(f"{name:26s} {read:9.0f} smp/s {rate:9.0f} smp/s {acc:14.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
