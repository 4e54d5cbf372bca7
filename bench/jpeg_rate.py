#!/usr/bin/python3
"""JPEG records: images/s of kiln.Loader over a `kiln pack --codec jpeg` dataset with
RandomResizedCrop + flip, against torchvision's ImageFolder + RandomResizedCrop +
RandomHorizontalFlip in a DataLoader over the same JPEG files, kiln over uint8 tensors of the
same images, and FFCV's JPEG fields when python3-ffcv imports; and each dataset's size.

    PYTHONPATH=build/python /usr/bin/python3 bench/jpeg_rate.py [--rounds 3] [--threads 1,2]

Input: the 256x256 photo tiles of samples/make_photo_tiles.sh (Debian's opencv-doc and, when
installed, plasma-workspace-wallpapers), made once in /tmp/kiln-bench/tiles. Packs them once
(`kiln pack --codec jpeg:90 --max-side 256`, and `--size 256` uint8 tensors), reads everything
warm (one untimed epoch each), then alternates the configurations round by round and prints each
one's median images/s per thread count (a DataLoader's num_workers for torchvision; 0 workers is
"1 thread": the loop's own process decodes), and for 1 thread the images per CPU second of the
process (the per-core rate, less sensitive to other load on the machine than wall time). Output
224x224x3 uint8 everywhere, batch 64.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

import kiln

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
KILN = os.path.join(REPO, os.environ.get("KILN_BUILD_DIR", "build"), "tools", "kiln")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--dir", default="/tmp/kiln-bench")
    p.add_argument("--quality", type=int, default=90)
    return p.parse_args()


def du(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            total += os.path.getsize(os.path.join(root, f))
    return total


def prepare(args):
    tiles = os.path.join(args.dir, "tiles")
    subprocess.run([os.path.join(REPO, "samples", "make_photo_tiles.sh"), tiles], check=True,
                   stdout=subprocess.DEVNULL)
    jpeg = os.path.join(args.dir, f"tiles-jpeg{args.quality}")
    raw = os.path.join(args.dir, "tiles-u8")
    if not os.path.exists(os.path.join(jpeg, "kiln.json")):
        subprocess.run([KILN, "pack", tiles, jpeg, "--codec", f"jpeg:{args.quality}",
                        "--max-side", "256", "--threads", "2"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if not os.path.exists(os.path.join(raw, "kiln.json")):
        subprocess.run([KILN, "pack", tiles, raw, "--size", "256", "--threads", "2"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return tiles, jpeg, raw


def _timed(loader):
    """(images per wall second, images per CPU second of this process) over one epoch. The
    CPU figure counts every thread of the process (kiln's fetch threads, FFCV's, the loop's own)
    but not DataLoader worker processes: compare it only where everything runs in-process."""
    n = 0
    start, cpu = time.perf_counter(), time.process_time()
    for images, _ in loader:
        n += images.shape[0]
    return n / (time.perf_counter() - start), n / max(1e-9, time.process_time() - cpu)


def kiln_rate(path, threads):
    loader = kiln.Loader(path, batch_size=64, shuffle=True, num_threads=threads, prefetch=4,
                         backend="numpy", random_resized_crop=224, flip=True)
    return _timed(loader)


def torchvision_rate(tiles, threads):
    import torch
    from torch.utils.data import DataLoader
    from torchvision import datasets, transforms
    torch.set_num_threads(1)
    t = transforms.Compose([transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip(),
                            transforms.PILToTensor()])
    ds = datasets.ImageFolder(tiles, transform=t)
    workers = 0 if threads == 1 else threads
    loader = DataLoader(ds, batch_size=64, shuffle=True, num_workers=workers,
                        persistent_workers=False)
    return _timed(loader)


def ffcv_setup(tiles, args):
    """Writes the .beton (RGBImageField, jpg, max_resolution 256) once; returns its path, or the
    reason FFCV cannot run here."""
    try:
        from ffcv.fields import IntField, RGBImageField  # noqa: F401
        from ffcv.writer import DatasetWriter
        from torchvision import datasets
    except Exception as e:  # ImportError, numba errors...
        return None, f"ffcv does not import: {type(e).__name__}: {e}"
    path = os.path.join(args.dir, f"tiles-q{args.quality}.beton")
    if not os.path.exists(path):
        try:
            ds = datasets.ImageFolder(tiles)
            w = DatasetWriter(path, {"image": RGBImageField(write_mode="jpg", max_resolution=256,
                                                            jpeg_quality=args.quality),
                                     "label": IntField()}, num_workers=2)
            w.from_indexed_dataset(ds)
        except Exception as e:
            if os.path.exists(path):
                os.remove(path)
            return None, f"ffcv DatasetWriter failed: {type(e).__name__}: {e}"
    return path, ""


def ffcv_rate(path, threads):
    from ffcv.fields.basics import IntDecoder
    from ffcv.fields.rgb_image import RandomResizedCropRGBImageDecoder
    from ffcv.loader import Loader, OrderOption
    from ffcv.transforms import RandomHorizontalFlip, ToTensor
    loader = Loader(path, batch_size=64, num_workers=threads, order=OrderOption.RANDOM,
                    pipelines={"image": [RandomResizedCropRGBImageDecoder((224, 224)),
                                         RandomHorizontalFlip(), ToTensor()],
                               "label": [IntDecoder(), ToTensor()]})
    return _timed(loader)


def main():
    args = parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    tiles, jpeg, raw = prepare(args)
    files = sum(len(f) for _, _, f in os.walk(tiles))
    print(f"input: {files} JPEG tiles, {du(tiles) / 1e6:.1f} MB; kiln jpeg:{args.quality} "
          f"{du(jpeg) / 1e6:.1f} MB; kiln uint8 256x256 {du(raw) / 1e6:.1f} MB")
    configs = {"kiln jpeg": lambda t: kiln_rate(jpeg, t),
               "kiln uint8": lambda t: kiln_rate(raw, t),
               "torchvision": lambda t: torchvision_rate(tiles, t)}
    beton, why = ffcv_setup(tiles, args)
    if beton:
        print(f"ffcv .beton {os.path.getsize(beton) / 1e6:.1f} MB")
        configs["ffcv"] = lambda t: ffcv_rate(beton, t)
    else:
        print("ffcv: not measured:", why)
    rates = {(c, t): [] for c in configs for t in threads}
    for c in configs:  # warm: page cache, workers' imports, numba compilation
        for t in threads:
            try:
                configs[c](t)
            except Exception as e:
                print(f"{c}: failed: {type(e).__name__}: {e}", file=sys.stderr)
                rates = {k: v for k, v in rates.items() if k[0] != c}
                break
    cpu_rates = {k: [] for k in rates}
    for _ in range(args.rounds):
        for (c, t) in list(rates):
            wall, cpu = configs[c](t)
            rates[(c, t)].append(wall)
            cpu_rates[(c, t)].append(cpu)
    print(f"{'loader':<12} " + " ".join(f"{t} thread(s)".rjust(14) for t in threads) +
          "   1 thread, per CPU second")
    for c in configs:
        if (c, threads[0]) not in rates:
            continue
        print(f"{c:<12} " + " ".join(f"{statistics.median(rates[(c, t)]):14.0f}" for t in threads) +
              f"{statistics.median(cpu_rates[(c, threads[0])]):14.0f}")
    print("images/s, median of", args.rounds, "rounds; load average",
          " ".join(f"{v:.1f}" for v in os.getloadavg()))


if __name__ == "__main__":
    main()
