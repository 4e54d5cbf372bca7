#!/usr/bin/python3
"""Read-time augmentation cost: kiln.Loader with no augmentation, a random crop + flip, and
RandomResizedCrop + flip, on the same stored tensors, against torchvision's RandomResizedCrop
on the same images from memory (what a PyTorch user runs per sample in a DataLoader worker).

    PYTHONPATH=build/python /usr/bin/python3 bench/augment_rate.py [--samples 2000] [--rounds 5]

Makes (once) a dataset of N synthetic 256x256x3 uint8 HWC samples with
build/bench/make_synthetic_dataset in /tmp/kiln-bench/aug256, reads it warm (one epoch first),
then alternates the configurations round by round (ABCABC...) and prints each one's median
samples/s over the rounds, per thread count, and the RandomResizedCrop / crop ratio (the goal of
issue 31: >= 0.5 at 224x224). Resizing costs the same whatever the pixels, so synthetic content
is a fair input for speed.
"""

import argparse
import os
import statistics
import subprocess
import time

import kiln

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--samples", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--dir", default="/tmp/kiln-bench/aug256")
    return p.parse_args()


def make_dataset(path, samples):
    marker = os.path.join(path, ".samples")
    if os.path.exists(marker) and open(marker).read() == str(samples):
        return
    subprocess.run(["rm", "-rf", path], check=True)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    synth = os.path.join(REPO, os.environ.get("KILN_BUILD_DIR", "build"), "bench",
                         "make_synthetic_dataset")
    subprocess.run([synth, path, str(samples), "256x256x3", "shards"], check=True,
                   stdout=subprocess.DEVNULL)
    with open(marker, "w") as f:
        f.write(str(samples))


def kiln_rate(path, threads, **augment):
    loader = kiln.Loader(path, batch_size=64, shuffle=True, num_threads=threads, prefetch=4,
                         backend="numpy", **augment)
    n = 0
    start = time.perf_counter()
    for images, _ in loader:
        n += images.shape[0]
    return n / (time.perf_counter() - start)


def torchvision_rate(images, size):
    """torchvision.transforms RandomResizedCrop(antialias=False) + RandomHorizontalFlip per
    sample on CHW uint8 tensors, one thread (what one DataLoader worker does per sample)."""
    import torch
    from torchvision import transforms
    torch.set_num_threads(1)
    t = transforms.Compose([transforms.RandomResizedCrop(size, antialias=False),
                            transforms.RandomHorizontalFlip()])
    start = time.perf_counter()
    for img in images:
        t(img)
    return len(images) / (time.perf_counter() - start)


def main():
    args = parse_args()
    make_dataset(args.dir, args.samples)
    s = args.size
    configs = {
        "none": {},
        f"crop {s} + flip": {"crop": s, "flip": True},
        f"RandomResizedCrop {s} + flip": {"random_resized_crop": s, "flip": True},
    }
    threads = [int(t) for t in args.threads.split(",")]
    kiln_rate(args.dir, threads[0])  # warm the page cache
    rates = {(name, t): [] for name in configs for t in threads}
    tv = []
    images = None
    try:
        import torch
        ds = kiln.Dataset(args.dir)
        images = [torch.as_tensor(ds[i][0]).permute(2, 0, 1).contiguous()
                  for i in range(min(500, len(ds)))]
    except Exception as e:  # torch or torchvision missing: the kiln rows still stand
        print(f"torchvision row skipped: {e}")
    for _ in range(args.rounds):
        for t in threads:
            for name, augment in configs.items():
                rates[(name, t)].append(kiln_rate(args.dir, t, **augment))
        if images is not None:
            tv.append(torchvision_rate(images, s))
    print(f"{args.samples} samples of 256x256x3 uint8, batch 64, medians of {args.rounds} rounds")
    for t in threads:
        for name in configs:
            print(f"kiln  threads {t}  {name:28s} {statistics.median(rates[(name, t)]):10.0f} samples/s")
        crop = statistics.median(rates[(f"crop {s} + flip", t)])
        rrc = statistics.median(rates[(f"RandomResizedCrop {s} + flip", t)])
        print(f"kiln  threads {t}  RandomResizedCrop / crop = {rrc / crop:.2f}")
    if tv:
        print(f"torchvision RandomResizedCrop {s} + flip, 1 thread, from memory: "
              f"{statistics.median(tv):.0f} samples/s")


if __name__ == "__main__":
    main()
