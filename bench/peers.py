#!/usr/bin/python3
"""The peers kiln is compared with in bench/run.sh. Each subcommand prints one JSON line.

    peers.py memcpy [--threads 2]                      memcpy bandwidth (numpy, GIL released)
    peers.py export KILN_LMDB_DIR OUT_PREFIX           kiln's tensors -> OUT.npy, OUT.h5
    peers.py dataloader KIND PATH [--seconds S]        torch DataLoader: imagefolder|memmap|h5py|lmdb
    peers.py ffcv-write MODE SRC OUT.beton             MODE: ndarray (from OUT.npy) | raw | jpg
                                                       (raw/jpg decode the image files in SRC)
    peers.py ffcv-read MODE OUT.beton [--seconds S]
    peers.py convert TOOL SRC OUT --size S --channels C   TOOL: cv2 (decode+resize only, bound),
                                                       cv2-write (the same + writing the
                                                       tensors to OUT: the fair bound),
                                                       pil, pil-draft, pil-h5py, pil-lmdb

Loaders: shuffled, batch 256, 2 workers (pin_memory=True, persistent_workers=True,
prefetch_factor=4 for DataLoader). Each timing skips the first epoch (worker start, FFCV's JIT)
and stops after --seconds of the next epochs, extrapolating from what it read ("extrapolated":
true in the JSON when the epoch was cut short).
Run with /usr/bin/python3 (Debian's python3-torch, -torchvision, -ffcv, -numba, -h5py, -lmdb,
-opencv, -pil).
"""

import argparse
import json
import os
import struct
import sys
import threading
import time

import numpy as np

BATCH = 256
WORKERS = 2


def emit(**kw):
    print(json.dumps(kw), flush=True)


def list_images(root):
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    files = []
    for label, c in enumerate(classes):
        for f in sorted(os.listdir(os.path.join(root, c))):
            if f.lower().endswith((".png", ".jpg", ".jpeg")):
                files.append((os.path.join(root, c, f), label))
    return files


# ---------------------------------------------------------------- memcpy
def cmd_memcpy(a):
    n = 256 << 20
    src = np.ones(n, np.uint8)
    dst = np.empty_like(src)
    parts = a.threads

    def work(i):
        s = slice(i * n // parts, (i + 1) * n // parts)
        np.copyto(dst[s], src[s])

    best = 0.0
    for _ in range(7):
        ts = [threading.Thread(target=work, args=(i,)) for i in range(parts)]
        t0 = time.perf_counter()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        dt = time.perf_counter() - t0
        best = max(best, n / dt / 1e6)
    emit(peer="memcpy", threads=parts, mb_per_s=best, bytes=n)


# ---------------------------------------------------------------- export
def read_kiln_lmdb(path):
    import lmdb
    man = json.load(open(os.path.join(path, "kiln.json")))
    sch = man["schema"]
    assert man["compression"] == "none" and sch["dtype"] == "uint8"
    shape = ((sch["channels"], sch["height"], sch["width"]) if sch["layout"] == "chw"
             else (sch["height"], sch["width"], sch["channels"]))
    n = man["samples"]
    x = np.empty((n,) + shape, np.uint8)
    y = np.empty(n, np.int64)
    env = lmdb.open(path, readonly=True, lock=False)
    with env.begin() as txn:
        for k, v in txn.cursor():
            (i,) = struct.unpack(">Q", k)
            (_, _, codec, _, raw, stored, label, _, key_size, _, _) = struct.unpack_from(
                "<4sHBBIIqQHHI", v, 0)
            assert codec == 0
            x[i] = np.frombuffer(v, np.uint8, raw, 40 + key_size).reshape(shape)
            y[i] = label
    env.close()
    return x, y


def cmd_export(a):
    import h5py
    t0 = time.perf_counter()
    x, y = read_kiln_lmdb(a.src)
    np.save(a.out + ".npy", x)
    np.save(a.out + ".labels.npy", y)
    with h5py.File(a.out + ".h5", "w") as f:
        f.create_dataset("images", data=x)  # contiguous: the fastest layout for random reads
        f.create_dataset("labels", data=y)
    emit(step="export", samples=len(x), shape=list(x.shape[1:]), seconds=time.perf_counter() - t0)


# ---------------------------------------------------------------- torch DataLoader
class TensorFileDataset:
    """Sample i of kiln's tensors from a numpy.memmap, an HDF5 file or kiln's LMDB."""

    def __init__(self, kind, path):
        self.kind, self.path = kind, path
        self.h = None
        if kind == "lmdb":
            man = json.load(open(os.path.join(path, "kiln.json")))
            self.n = man["samples"]
            s = man["schema"]
            self.shape = ((s["channels"], s["height"], s["width"]) if s["layout"] == "chw"
                          else (s["height"], s["width"], s["channels"]))
        elif kind == "memmap":
            self.n = len(np.load(path + ".labels.npy"))
        else:
            import h5py
            with h5py.File(path + ".h5", "r") as f:
                self.n = f["labels"].shape[0]

    def _open(self):  # in each worker: h5py and lmdb handles must not cross a fork
        if self.kind == "memmap":
            self.h = (np.load(self.path + ".npy", mmap_mode="r"), np.load(self.path + ".labels.npy"))
        elif self.kind == "h5py":
            import h5py
            f = h5py.File(self.path + ".h5", "r")
            self.h = (f["images"], f["labels"][:])
        else:
            import lmdb
            env = lmdb.open(self.path, readonly=True, lock=False)
            self.h = (env, env.begin(buffers=True))

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        import torch
        if self.h is None:
            self._open()
        if self.kind == "lmdb":
            v = self.h[1].get(struct.pack(">Q", i))
            (_, _, _, _, raw, _, label, _, key_size, _, _) = struct.unpack_from("<4sHBBIIqQHHI", v, 0)
            x = np.frombuffer(v, np.uint8, raw, 40 + key_size).reshape(self.shape).copy()
            return torch.from_numpy(x), label
        x = np.array(self.h[0][i])
        return torch.from_numpy(x), int(self.h[1][i])


def time_loader(make_iter, samples_per_epoch, sample_bytes, seconds, epochs_max=3):
    """Skips epoch 0, then reads epochs until `seconds` pass; returns the rate."""
    t_first = time.perf_counter()
    it = make_iter()
    first = next(iter(it))  # noqa: F841 (first-batch latency)
    first_batch = time.perf_counter() - t_first
    for _ in it:  # rest of epoch 0 (warm-up); bounded below for slow loaders
        if time.perf_counter() - t_first > seconds:
            break
    n = 0
    t0 = time.perf_counter()
    cut = False
    for _ in range(epochs_max):
        for b in make_iter():
            n += len(b[1]) if isinstance(b, (list, tuple)) else len(b)
            if time.perf_counter() - t0 > seconds:
                cut = True
                break
        if cut:
            break
    dt = time.perf_counter() - t0
    return dict(samples=n, seconds=dt, samples_per_s=n / dt, mb_per_s=n * sample_bytes / dt / 1e6,
                extrapolated=cut, first_batch_seconds=first_batch,
                epoch_seconds_estimate=samples_per_epoch / (n / dt))


def cmd_dataloader(a):
    import torch
    from torch.utils.data import DataLoader
    torch.set_num_threads(1)
    if a.kind == "imagefolder":
        import torchvision.transforms as T
        from torchvision.datasets import ImageFolder
        from PIL import Image
        mode = "L" if a.channels == 1 else "RGB"
        tf = [T.PILToTensor()]
        if a.size:
            tf = [T.Resize(a.size), T.CenterCrop(a.size)] + tf
        ds = ImageFolder(a.path, transform=T.Compose(tf),
                         loader=lambda p: Image.open(p).convert(mode))
        x0 = ds[0][0]
    else:
        ds = TensorFileDataset(a.kind, a.path)
        x0 = ds[0][0]
        ds.h = None  # reopen in each worker
    sample_bytes = x0.numel() * x0.element_size()
    dl = DataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=WORKERS, pin_memory=True,
                    persistent_workers=True, prefetch_factor=4)
    r = time_loader(lambda: iter(dl), len(ds), sample_bytes, a.seconds)
    emit(peer="dataloader-" + a.kind, sample_bytes=sample_bytes, epoch_samples=len(ds),
         pin_memory_effective=torch.cuda.is_available(), **r)


# ---------------------------------------------------------------- FFCV
def cmd_ffcv_write(a):
    from ffcv.fields import IntField, NDArrayField, RGBImageField
    from ffcv.writer import DatasetWriter
    t0 = time.perf_counter()
    if a.mode == "ndarray":
        x = np.load(a.src + ".npy", mmap_mode="r")
        y = np.load(a.src + ".labels.npy")

        class DS:
            def __len__(self):
                return len(y)

            def __getitem__(self, i):
                return np.ascontiguousarray(x[i]), int(y[i])

        fields = {"image": NDArrayField(dtype=np.dtype("uint8"), shape=tuple(x.shape[1:])),
                  "label": IntField()}
        ds = DS()
    else:  # decode the original files with PIL, as FFCV's examples do
        from PIL import Image
        files = list_images(a.src)
        size = a.size

        class DS:
            def __len__(self):
                return len(files)

            def __getitem__(self, i):
                im = Image.open(files[i][0]).convert("RGB")  # FFCV images are RGB
                if size and im.size != (size, size):
                    im = im.resize((size, size), Image.BILINEAR)
                return np.asarray(im), files[i][1]

        fields = {"image": RGBImageField(write_mode=a.mode, jpeg_quality=90), "label": IntField()}
        ds = DS()
    DatasetWriter(a.out, fields, num_workers=WORKERS).from_indexed_dataset(ds)
    dt = time.perf_counter() - t0
    emit(peer="ffcv-writer-" + a.mode, samples=len(ds), seconds=dt, samples_per_s=len(ds) / dt,
         bytes=os.path.getsize(a.out))


def cmd_ffcv_read(a):
    from ffcv.fields.decoders import IntDecoder, NDArrayDecoder, SimpleRGBImageDecoder
    from ffcv.loader import Loader, OrderOption
    from ffcv.transforms import ToTensor
    dec = NDArrayDecoder() if a.mode == "ndarray" else SimpleRGBImageDecoder()
    loader = Loader(a.path, batch_size=BATCH, num_workers=WORKERS, order=OrderOption.RANDOM,
                    os_cache=True, drop_last=False,
                    pipelines={"image": [dec, ToTensor()], "label": [IntDecoder(), ToTensor()]})
    first = next(iter(loader))
    sample_bytes = first[0][0].numel() * first[0][0].element_size()
    r = time_loader(lambda: iter(loader), len(loader.indices), sample_bytes, a.seconds, epochs_max=5)
    emit(peer="ffcv-" + a.mode, sample_bytes=sample_bytes, **r)


# ---------------------------------------------------------------- converters
def _decode_cv2(args):
    import cv2
    path, size, channels = args
    im = cv2.imread(path, cv2.IMREAD_GRAYSCALE if channels == 1 else cv2.IMREAD_COLOR)
    h, w = im.shape[:2]
    if (h, w) != (size, size):
        s = size / min(h, w)
        im = cv2.resize(im, (max(size, round(w * s)), max(size, round(h * s))),
                        interpolation=cv2.INTER_AREA)
        y0, x0 = (im.shape[0] - size) // 2, (im.shape[1] - size) // 2
        im = im[y0:y0 + size, x0:x0 + size]
    return im.shape[0]


# cv2-write: the bound made fair to a converter that stores what it computes. The same decode,
# resize and crop, then the tensor laid out as kiln packs it (C, H, W for colour) is written at
# its own offset of one output file (os.pwrite from each worker; the file is fsynced at the
# end, as kiln fsyncs its shards), so the bound pays for writing the same bytes into the page
# cache and onto the disk, and nothing else (no pickling back to the parent).
_out_fd = None


def _init_writer(path):
    global _out_fd
    _init_worker()
    _out_fd = os.open(path, os.O_WRONLY)


def _decode_cv2_write(args):
    import cv2
    path, size, channels, index = args
    im = cv2.imread(path, cv2.IMREAD_GRAYSCALE if channels == 1 else cv2.IMREAD_COLOR)
    h, w = im.shape[:2]
    if (h, w) != (size, size):
        s = size / min(h, w)
        im = cv2.resize(im, (max(size, round(w * s)), max(size, round(h * s))),
                        interpolation=cv2.INTER_AREA)
        y0, x0 = (im.shape[0] - size) // 2, (im.shape[1] - size) // 2
        im = im[y0:y0 + size, x0:x0 + size]
    if channels == 3:
        im = im.transpose(2, 0, 1)
    b = np.ascontiguousarray(im).tobytes()
    os.pwrite(_out_fd, b, index * len(b))
    return len(b)


def _decode_pil(args, draft=False):
    from PIL import Image
    path, size, channels = args
    im = Image.open(path)
    if draft:  # JPEG IDCT scaling to at least twice the resize target, kiln's shrink-on-load rule
        w, h = im.size
        s = size / min(h, w)
        im.draft("L" if channels == 1 else "RGB", (2 * max(size, round(w * s)), 2 * max(size, round(h * s))))
    im = im.convert("L" if channels == 1 else "RGB")
    if im.size != (size, size):
        w, h = im.size
        s = size / min(h, w)
        im = im.resize((max(size, round(w * s)), max(size, round(h * s))), Image.BILINEAR)
        x0, y0 = (im.size[0] - size) // 2, (im.size[1] - size) // 2
        im = im.crop((x0, y0, x0 + size, y0 + size))
    a = np.asarray(im, np.uint8)
    if channels == 3:
        a = a.transpose(2, 0, 1)  # CHW like the kiln pack runs
    return a.tobytes()


def _decode_pil_draft(args):
    return _decode_pil(args, draft=True)


def _init_worker():
    import cv2
    cv2.setNumThreads(1)


def cmd_convert(a):
    from multiprocessing import Pool
    files = list_images(a.src)
    args = [(p, a.size, a.channels) for p, _ in files]
    fn = {"cv2": _decode_cv2, "pil": _decode_pil, "pil-draft": _decode_pil_draft}.get(a.tool, _decode_pil)
    chunk = max(1, min(64, len(args) // (4 * WORKERS)))
    if a.tool == "cv2-write":
        with open(a.out, "wb"):
            pass  # created empty; the workers write at their offsets
        args = [(p, a.size, a.channels, i) for i, (p, _) in enumerate(files)]
        with Pool(WORKERS, initializer=_init_writer, initargs=(a.out,)) as pool:
            pool.map(_decode_cv2, [x[:3] for x in args[:WORKERS]])  # warm up, nothing written
            t0 = time.perf_counter()
            written = sum(pool.imap(_decode_cv2_write, args, chunksize=chunk))
            fd = os.open(a.out, os.O_WRONLY)
            os.fsync(fd)
            os.close(fd)
        dt = time.perf_counter() - t0
        emit(peer="convert-cv2-write", samples=len(files), seconds=dt,
             samples_per_s=len(files) / dt, output_bytes=written)
        return
    with Pool(WORKERS, initializer=_init_worker) as pool:
        pool.map(fn, args[:WORKERS])  # warm up
        t0 = time.perf_counter()  # started workers: the clock covers decode, resize and write
        if a.tool in ("cv2", "pil", "pil-draft"):  # decode + resize + crop, nothing written
            for _ in pool.imap(fn, args, chunksize=chunk):
                pass
        elif a.tool == "pil-h5py":
            import h5py
            shape = (a.size, a.size) if a.channels == 1 else (3, a.size, a.size)
            with h5py.File(a.out, "w") as f:
                d = f.create_dataset("images", (len(files),) + shape, np.uint8)
                f.create_dataset("labels", data=np.array([l for _, l in files], np.int64))
                for i, b in enumerate(pool.imap(_decode_pil, args, chunksize=64)):
                    d[i] = np.frombuffer(b, np.uint8).reshape(shape)
        else:  # pil-lmdb
            import lmdb
            env = lmdb.open(a.out, map_size=1 << 36, subdir=True)
            txn = env.begin(write=True)
            for i, b in enumerate(pool.imap(_decode_pil, args, chunksize=64)):
                txn.put(struct.pack(">Q", i), struct.pack("<q", files[i][1]) + b, append=True)
                if i % 4096 == 4095:
                    txn.commit()
                    txn = env.begin(write=True)
            txn.commit()
            env.sync()
            env.close()
    dt = time.perf_counter() - t0
    emit(peer="convert-" + a.tool, samples=len(files), seconds=dt, samples_per_s=len(files) / dt)


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("memcpy")
    s.add_argument("--threads", type=int, default=WORKERS)
    s = sub.add_parser("export")
    s.add_argument("src")
    s.add_argument("out")
    s = sub.add_parser("dataloader")
    s.add_argument("kind", choices=["imagefolder", "memmap", "h5py", "lmdb"])
    s.add_argument("path")
    s.add_argument("--seconds", type=float, default=15)
    s.add_argument("--channels", type=int, default=1)
    s.add_argument("--size", type=int, default=0)
    s = sub.add_parser("ffcv-write")
    s.add_argument("mode", choices=["ndarray", "raw", "jpg"])
    s.add_argument("src")
    s.add_argument("out")
    s.add_argument("--size", type=int, default=0)
    s = sub.add_parser("ffcv-read")
    s.add_argument("mode", choices=["ndarray", "raw", "jpg"])
    s.add_argument("path")
    s.add_argument("--seconds", type=float, default=15)
    s = sub.add_parser("convert")
    s.add_argument("tool", choices=["cv2", "cv2-write", "pil", "pil-draft", "pil-h5py", "pil-lmdb"])
    s.add_argument("src")
    s.add_argument("out")
    s.add_argument("--size", type=int, required=True)
    s.add_argument("--channels", type=int, default=1)
    a = p.parse_args()
    globals()["cmd_" + a.cmd.replace("-", "_")](a)


if __name__ == "__main__":
    main()
