#!/usr/bin/python3
"""What a PyTorch user would have had: the samples/s of a DataLoader over an ImageFolder of
PNGs, the same images, batch size and worker count that `kiln bench` was given.

    /usr/bin/python3 samples/dataloader_rate.py TREE [--workers 2] [--batch-size 256]

Times one shuffled epoch (decode with PIL, greyscale, to a uint8 tensor: the same bytes kiln's
batches hold) after the workers have started, and prints one line:
    DataLoader(ImageFolder) TREE: N samples in S s = R samples/s (W workers, batch B)
Exits 0 with a line saying why when torch or torchvision is missing (Debian: python3-torch,
python3-torchvision), so the quickstart goes on without them.
"""
import argparse
import os
import sys
import time


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("tree")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=256)
    args = p.parse_args()
    try:
        import torch
        from torchvision import datasets, transforms
    except ImportError as e:
        print(f"DataLoader(ImageFolder): not run: {e} (Debian: python3-torch python3-torchvision)")
        return 0
    dataset = datasets.ImageFolder(args.tree, transform=transforms.Compose(
        [transforms.Grayscale(1), transforms.PILToTensor()]))
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, shuffle=True,
                                         num_workers=args.workers)
    it = iter(loader)
    _, labels = next(it)  # workers started, first batch in: time the rest, like kiln bench
    samples = 0
    start = time.perf_counter()
    for _, labels in it:
        samples += len(labels)
    seconds = time.perf_counter() - start
    print(f"DataLoader(ImageFolder) {args.tree}: {samples} samples in {seconds:.1f} s = "
          f"{samples / seconds:,.0f} samples/s ({args.workers} workers, batch "
          f"{args.batch_size})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
