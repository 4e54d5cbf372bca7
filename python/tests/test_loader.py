"""kiln.Loader: batches, epochs, determinism, lifetimes, ranks, errors, GIL."""
import os
import re
import shutil
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import kiln

torch = pytest.importorskip("torch")


def epoch_order(loader):
    """Dataset indices of one epoch, in the order the loader yields them."""
    order = []
    for _images, labels in loader:
        indices = loader.batch_indices().tolist()
        assert len(indices) == len(labels)
        order.extend(indices)
    return order


def test_batches_are_torch_tensors(packed):
    loader = kiln.Loader(packed, batch_size=100, num_threads=2)
    assert len(loader) == 10 and loader.num_samples == 1000
    assert loader.sample_shape == (28, 28, 1) and loader.dtype == "uint8"
    images, labels = next(iter(loader))
    assert isinstance(images, torch.Tensor) and isinstance(labels, torch.Tensor)
    assert images.shape == (100, 28, 28, 1) and images.dtype == torch.uint8
    assert labels.shape == (100,) and labels.dtype == torch.int64
    assert images.device.type == "cpu" and images.is_contiguous()
    assert 0 <= int(labels.min()) and int(labels.max()) <= 9


def test_every_sample_once_per_epoch_and_labels_match_keys(packed):
    loader = kiln.Loader(packed, batch_size=64, num_threads=2, seed=3)
    seen = []
    for images, labels in loader:
        indices = loader.batch_indices()
        for k, index in enumerate(indices):
            folder = loader.key(index).split("/")[0]   # e.g. "3_Dress"
            assert int(folder.split("_")[0]) == int(labels[k])
            assert loader.classes[int(labels[k])] == folder
        seen.extend(indices.tolist())
    assert sorted(seen) == list(range(1000))


def test_len_and_drop_last(packed):
    keep = kiln.Loader(packed, batch_size=64, num_threads=2)
    drop = kiln.Loader(packed, batch_size=64, num_threads=2, drop_last=True)
    assert len(keep) == 16 and len(drop) == 15          # 1000 = 15 * 64 + 40
    assert [len(l) for _, l in keep] == [64] * 15 + [40]
    assert [len(l) for _, l in drop] == [64] * 15
    assert len(kiln.Loader(packed, batch_size=1000, num_threads=1)) == 1
    assert len(kiln.Loader(packed, batch_size=5000, num_threads=1, drop_last=True)) == 0


def test_epoch_order_is_deterministic(packed):
    a = kiln.Loader(packed, batch_size=100, num_threads=2, seed=7)
    b = kiln.Loader(packed, batch_size=33, num_threads=1, seed=7, prefetch=5)
    first_a, first_b = epoch_order(a), epoch_order(b)   # epoch 0 each
    assert first_a == first_b                            # whatever batch size, threads, prefetch
    assert sorted(first_a) == list(range(1000)) and first_a != list(range(1000))
    second_a = epoch_order(a)                            # no set_epoch: advances to epoch 1
    assert a.epoch == 1 and second_a != first_a and sorted(second_a) == list(range(1000))
    a.set_epoch(0)
    assert epoch_order(a) == first_a and a.epoch == 0
    a.set_epoch(1)
    assert epoch_order(a) == second_a
    other_seed = kiln.Loader(packed, batch_size=100, num_threads=2, seed=8)
    assert epoch_order(other_seed) != first_a
    in_order = kiln.Loader(packed, batch_size=100, num_threads=2, shuffle=False)
    assert epoch_order(in_order) == list(range(1000))


def test_same_epoch_gives_identical_bytes(packed):
    loader = kiln.Loader(packed, batch_size=128, num_threads=2, seed=1, copy=True)
    loader.set_epoch(4)
    first = [(x.clone(), y.clone()) for x, y in loader]
    loader.set_epoch(4)
    again = list(loader)
    assert len(first) == len(again) == 8
    for (x0, y0), (x1, y1) in zip(first, again):
        assert torch.equal(x0, x1) and torch.equal(y0, y1)


def test_breaking_out_and_superseded_iterator(packed):
    loader = kiln.Loader(packed, batch_size=100, num_threads=2)
    it = iter(loader)
    next(it)
    full = epoch_order(loader)      # a new loop abandons the first one's epoch
    assert sorted(full) == list(range(1000))
    with pytest.raises(RuntimeError, match="superseded"):
        next(it)


def test_copy_mode_batches_stay_intact(packed):
    loader = kiln.Loader(packed, batch_size=50, num_threads=2, prefetch=1, copy=True)
    kept = []
    for images, labels in loader:
        kept.append((images, labels, images.clone(), labels.clone()))
    assert len(kept) == 20
    for images, labels, images_then, labels_then in kept:
        assert torch.equal(images, images_then) and torch.equal(labels, labels_then)
    assert len({x.data_ptr() for x, _, _, _ in kept}) == 20   # each owns its memory


def test_zero_copy_batches_reuse_slots(packed):
    """Documented: without copy a batch is valid until the next one is requested; its slot is
    refilled later. The memory stays allocated, so reading it never crashes."""
    loader = kiln.Loader(packed, batch_size=50, num_threads=2, prefetch=1)
    it = iter(loader)
    first_images, first_labels = next(it)
    snapshot = first_images.clone()
    pointers = {first_images.data_ptr()}
    for _ in range(4):   # prefetch + 1 = 2 slots: the first batch's slot is refilled
        images, _labels = next(it)
        pointers.add(images.data_ptr())
    assert len(pointers) == 2
    assert not torch.equal(first_images, snapshot)
    del loader, it       # views keep the loader's memory alive
    assert int(first_images.sum()) >= 0 and first_labels.shape == (50,)


def test_batch_outlives_loader(packed):
    loader = kiln.Loader(packed, batch_size=10, num_threads=1)
    images, labels = next(iter(loader))
    copy = images.clone()
    del loader
    import gc
    gc.collect()
    assert torch.equal(images, copy) and labels.shape == (10,)


def test_crop_flip_and_normalize(packed):
    plain = kiln.Loader(packed, batch_size=100, num_threads=2, shuffle=False)
    images, _ = next(iter(plain))
    cropped = kiln.Loader(packed, batch_size=100, num_threads=2, crop=(20, 24), flip=True)
    x, _ = next(iter(cropped))
    assert x.shape == (100, 20, 24, 1) and x.dtype == torch.uint8
    norm = kiln.Loader(packed, batch_size=100, num_threads=2, shuffle=False,
                       normalize=(0.286, 0.353))
    z, _ = next(iter(norm))
    assert z.dtype == torch.float32 and z.shape == (100, 28, 28, 1)
    expected = (images.float() / 255 - 0.286) / 0.353
    assert torch.allclose(z, expected, atol=1e-5)
    with pytest.raises(ValueError, match="channels"):
        kiln.Loader(packed, normalize=((0.5, 0.5, 0.5), (0.2, 0.2, 0.2)))


def test_random_resized_crop_area_interpolation(packed):
    """interpolation="area": with the whole 28x28 image as the box (scale 1, ratio 1) and a 7x7
    output, each output pixel is its 4x4 block's mean (sum / 4 / 4 in float32, rounded half to
    even); bilinear samples two of the four rows and columns instead."""
    plain = kiln.Loader(packed, batch_size=100, num_threads=2, shuffle=False, backend="numpy")
    images, _ = next(iter(plain))
    whole = dict(batch_size=100, num_threads=2, shuffle=False, backend="numpy",
                 random_resized_crop=7, scale=(1.0, 1.0), ratio=(1.0, 1.0))
    area, _ = next(iter(kiln.Loader(packed, interpolation="area", **whole)))
    sums = images.reshape(100, 7, 4, 7, 4, 1).astype(np.float32).sum(axis=(2, 4))
    expected = np.round(sums / np.float32(4) / np.float32(4)).astype(np.uint8)
    assert area.shape == (100, 7, 7, 1) and area.dtype == np.uint8
    np.testing.assert_array_equal(area, expected)
    bilinear, _ = next(iter(kiln.Loader(packed, **whole)))
    assert (bilinear != area).any()
    with pytest.raises(kiln.InvalidArgumentError, match="bilinear"):
        kiln.Loader(packed, random_resized_crop=7, interpolation="cubic")


def test_corrupt_record_raises_naming_it(packed, tmp_path):
    bad = str(tmp_path / "bad")
    shutil.copytree(packed, bad)
    shard = os.path.join(bad, "shard-00000.kiln")
    # Records start after the 64-byte header, 784 bytes each padded to 832 (64-byte alignment):
    # this byte is inside record 500's payload (formats/shards/shard_format.md, section 3).
    offset = 64 + 500 * 832 + 100
    with open(shard, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))
    loader = kiln.Loader(bad, batch_size=100, num_threads=2, shuffle=False)
    it = iter(loader)
    for _ in range(5):
        next(it)                                   # records 0..499 are fine
    with pytest.raises(kiln.CorruptionError) as info:
        next(it)                                   # the batch holding record 500
    message = str(info.value)
    assert "shard-00000.kiln" in message and "record 500" in message, message
    assert info.value.code == "Corruption" and isinstance(info.value, kiln.KilnError)
    # The same place in attributes of their own (kiln::Status::location()).
    assert info.value.path == shard and info.value.record == 500, vars(info.value)
    assert info.value.offset == 64 + 500 * 832, vars(info.value)   # the record's payload
    images, _ = next(it)                           # the next step goes on
    assert loader.batch_indices()[0] == 600 and images.shape[0] == 100
    report = kiln.verify(bad)
    assert not report["ok"]
    assert any(p["record"] == 500 and p["file"].endswith("shard-00000.kiln")
               for p in report["problems"]), report["problems"]


def test_rank_and_world_size_from_environment(packed, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "3")
    shares = []
    for rank in range(3):
        monkeypatch.setenv("RANK", str(rank))
        loader = kiln.Loader(packed, batch_size=100, num_threads=1, seed=5)
        assert loader.rank == rank and loader.world_size == 3
        assert len(loader) == 4              # ceil(334 / 100) on every rank
        shares.append(epoch_order(loader))
    assert [len(s) for s in shares] == [334, 333, 333]
    assert sorted(sum(shares, [])) == list(range(1000))
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    assert kiln.Loader(packed, num_threads=1).world_size == 1
    explicit = kiln.Loader(packed, num_threads=1, rank=1, world_size=2)
    assert explicit.samples_per_epoch == 500
    padded = kiln.Loader(packed, batch_size=400, num_threads=1, rank=2, world_size=3, tail="pad")
    sizes = [len(y) for _, y in padded]
    assert sizes == [334] and padded.samples_per_epoch == 334
    short = kiln.Loader(packed, batch_size=111, num_threads=1, rank=1, world_size=3)
    shapes = [tuple(x.shape) for x, _ in short]     # 333 samples in 4 steps: the last is empty
    assert len(short) == 4 and shapes[-1] == (0, 28, 28, 1) and shapes[0] == (111, 28, 28, 1)


def test_errors_are_kiln_exceptions(packed, tmp_path):
    with pytest.raises(kiln.NotFoundError) as info:
        kiln.Loader(str(tmp_path / "missing"))
    assert isinstance(info.value, FileNotFoundError) and "missing" in str(info.value)
    with pytest.raises(kiln.NotFoundError, match="kiln.json"):
        kiln.Loader(str(tmp_path))
    with pytest.raises(kiln.InvalidArgumentError):
        kiln.Loader(packed, batch_size=0)
    with pytest.raises(ValueError):
        kiln.Loader(packed, rank=2, world_size=2)
    with pytest.raises(ValueError):
        kiln.Loader(packed, crop=(40, 40))
    with pytest.raises(ValueError):
        kiln.Loader(packed, tail="wrap")


def test_cuda_device_without_gpu_raises(packed):
    if not kiln._core.cuda_unavailable_reason():
        pytest.skip("a CUDA device is present (python/tests/test_cuda.py covers it)")
    with pytest.raises(kiln.NotSupportedError, match="no GPU"):
        kiln.Loader(packed, device="cuda")
    with pytest.raises(ValueError):
        kiln.Loader(packed, device="tpu")
    assert kiln.Loader(packed, device="cpu", num_threads=1) is not None


def test_numpy_backend(packed):
    t = kiln.Loader(packed, batch_size=100, num_threads=2, seed=2, copy=True)
    n = kiln.Loader(packed, batch_size=100, num_threads=2, seed=2, backend="numpy")
    for (ti, tl), (ni, nl) in zip(t, n):
        assert isinstance(ni, np.ndarray) and isinstance(nl, np.ndarray)
        assert ni.dtype == np.uint8 and ni.shape == (100, 28, 28, 1)
        assert nl.dtype == np.int64 and nl.shape == (100,)
        assert ni.base is not None and not ni.flags.owndata      # a view of the slot
        assert np.array_equal(ti.numpy(), ni) and np.array_equal(tl.numpy(), nl)
    norm = kiln.Loader(packed, batch_size=10, num_threads=1, shuffle=False, backend="numpy",
                       normalize=(0.5, 0.25))
    raw = kiln.Loader(packed, batch_size=10, num_threads=1, shuffle=False, backend="numpy")
    z, _ = next(iter(norm))
    x, _ = next(iter(raw))
    assert z.dtype == np.float32
    assert np.allclose(z, (x.astype(np.float32) / 255 - 0.5) / 0.25, atol=1e-5)


def test_numpy_fallback_without_torch(packed):
    """With torch not importable, `import kiln` works and batches are NumPy arrays."""
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import kiln, numpy as np\n"
        f"loader = kiln.Loader({packed!r}, batch_size=100, num_threads=1)\n"
        "x, y = next(iter(loader))\n"
        "assert isinstance(x, np.ndarray) and x.shape == (100, 28, 28, 1), type(x)\n"
        "assert y.dtype == np.int64\n"
        "print('numpy', sum(len(y) for _, y in loader))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ), timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "numpy 1000"


def test_reader_never_loads_opencv(packed):
    code = (
        "import sys; sys.modules['torch'] = None  # Debian's torch loads OpenCV itself\n"
        "import kiln\n"
        f"for _ in kiln.Loader({packed!r}, batch_size=100, num_threads=1): pass\n"
        f"kiln.verify({packed!r}); kiln.inspect({packed!r})\n"
        "maps = open('/proc/self/maps').read()\n"
        "print('opencv' in maps, '_tools' in maps)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False False"


def test_gil_released_while_waiting(tmp_path):
    """A Python thread runs while the consumer is inside a loader step.

    The switch interval is set to 1 s, so while the consumer holds the GIL the other thread
    cannot run (the interpreter would force a hand-over only after 1 s). The busy thread yields
    the GIL often by itself (sleep(0)), so the consumer gets it back at once. A step that
    waits for its batch and copies 6 MB with the GIL released lets the busy thread count."""
    from conftest import SAMPLES
    path = str(tmp_path / "rgb64")
    kiln.pack(SAMPLES, path, size=64, channels=3, threads=2)      # 12 KiB samples
    loader = kiln.Loader(path, batch_size=500, num_threads=1, prefetch=1, copy=True,
                         backend="numpy")
    count = 0
    stop = False

    def spin():
        nonlocal count
        while not stop:
            count += 1
            if count % 256 == 0:
                time.sleep(0)        # releases the GIL: the consumer never waits long

    old = sys.getswitchinterval()
    sys.setswitchinterval(1.0)
    thread = threading.Thread(target=spin)
    thread.start()
    moved = steps = 0
    try:
        for _epoch in range(6):
            it = iter(loader)
            while True:
                before = count
                try:
                    next(it)
                except StopIteration:
                    break
                moved += count != before
                steps += 1
    finally:
        stop = True
        thread.join()
        sys.setswitchinterval(old)
    assert steps == 12
    assert moved >= steps // 2, (moved, steps)


def test_shuffle_modes(packed):
    """shuffle=True/False keep working; "exact", "block" and "none" name the read orders."""
    def order(**kw):
        return epoch_order(kiln.Loader(packed, batch_size=50, num_threads=2, seed=4, **kw))
    exact = order(shuffle=True)
    assert exact == order(shuffle="exact") and sorted(exact) == list(range(1000))
    assert order(shuffle=False) == order(shuffle="none") == list(range(1000))
    # 28x28x1 = 784-byte samples: 7840-byte blocks hold 10 samples; windows of 4 blocks.
    block = order(shuffle="block", block_bytes=7840, window=4)
    assert sorted(block) == list(range(1000)) and block != exact
    for start in range(0, 1000, 40):       # each window of 40 positions holds 4 whole blocks
        blocks = {i // 10 for i in block[start:start + 40]}
        assert len(blocks) == 4, (start, blocks)
    two = [kiln.Loader(packed, batch_size=50, num_threads=t, seed=4, shuffle="block",
                       block_bytes=7840, window=4) for t in (1, 3)]
    assert epoch_order(two[0]) == epoch_order(two[1]) == block
    with pytest.raises(ValueError):
        kiln.Loader(packed, shuffle="random")
    with pytest.raises(ValueError):
        kiln.Loader(packed, shuffle="block", block_bytes=0)


def test_io_paths_give_the_same_batches(packed):
    """io="direct" and io="mmap" serve identical batches; other values are refused."""
    def epoch(**kw):
        loader = kiln.Loader(packed, batch_size=64, num_threads=2, seed=5, copy=True, **kw)
        return [(images.numpy().tobytes(), labels.tolist()) for images, labels in loader]
    want = epoch(io="mmap")
    assert epoch(io="direct") == want
    assert epoch(io="direct", shuffle="block", block_bytes=7840) == \
        epoch(io="mmap", shuffle="block", block_bytes=7840)
    assert epoch() == want
    assert kiln.Loader(packed, io="direct").options.io == "direct"
    with pytest.raises(kiln.InvalidArgumentError):
        kiln.Loader(packed, io="uring")


def test_read_ahead_bytes(packed):
    """read_ahead_bytes changes what is read ahead, never the batches; its range is checked."""
    def epoch(**kw):
        loader = kiln.Loader(packed, batch_size=64, num_threads=2, seed=3, copy=True, **kw)
        return [(images.numpy().tobytes(), labels.tolist()) for images, labels in loader]
    want = epoch(read_ahead_bytes=0)
    assert epoch() == want
    assert epoch(read_ahead_bytes=1) == want
    assert epoch(read_ahead_bytes=1 << 32) == want
    with pytest.raises(ValueError):
        kiln.Loader(packed, read_ahead_bytes=-1)
    with pytest.raises(ValueError):
        kiln.Loader(packed, read_ahead_bytes=(1 << 32) + 1)


def test_ctrl_c_while_waiting_for_a_batch_raises_and_keeps_the_batch(tmp_path):
    """A signal whose handler raises (Ctrl-C's KeyboardInterrupt) interrupts a step blocked
    waiting for its batch, instead of being seen only once the batch has come; the batch it
    waited for is not lost. The one batch of the epoch (1000 zstd samples of 160x160x3, one
    fetch thread: tens of ms to decompress) takes longer than the 5 ms timer."""
    import signal
    from conftest import SAMPLES
    out = str(tmp_path / "big")
    kiln.pack(SAMPLES, out, size=160, channels=3, threads=2, compress="zstd")

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        loader = kiln.Loader(out, batch_size=1000, shuffle=False, num_threads=1, prefetch=1,
                             backend="numpy")
        it = iter(loader)
        signal.setitimer(signal.ITIMER_REAL, 0.005)
        with pytest.raises(KeyboardInterrupt):
            next(it)
        # Without the interruptible wait, the batch was taken before the handler ran: the
        # epoch's only batch was gone and the next step raised StopIteration.
        images, labels = next(it)
        assert images.shape == (1000, 160, 160, 3) and len(labels) == 1000
        assert list(loader.batch_indices()) == list(range(1000))
        with pytest.raises(StopIteration):
            next(it)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_io_path_and_reason(packed):
    mapped = kiln.Loader(packed, batch_size=100, io="mmap", backend="numpy")
    assert mapped.io_path == "mmap" and mapped.io_reason == "io mmap asked"
    auto = kiln.Loader(packed, batch_size=100, backend="numpy")
    assert auto.io_path in ("mmap", "direct") and auto.io_reason  # small: fits in memory
    assert auto.io_path == "mmap", auto.io_reason


def test_shard_of_another_pack_is_refused(tmp_path):
    """The trial case: a same-size shard copied in from a pack of another input (same names, one
    image replaced) was served silently; now Loader and Dataset raise CorruptionError naming it,
    and verify reports it (formats/shards/shard_format.md, section 11)."""
    from conftest import SAMPLES
    src_a, src_b = tmp_path / "src_a", tmp_path / "src_b"
    shutil.copytree(SAMPLES, src_a)
    shutil.copytree(SAMPLES, src_b)
    pngs = sorted((src_b / "0_T-shirt_top").iterdir())
    shutil.copyfile(pngs[9], pngs[3])              # same name, another image's bytes
    a, b = str(tmp_path / "A"), str(tmp_path / "B")
    for src, out in ((src_a, a), (src_b, b)):
        kiln.pack(str(src), out, size=28, channels=1, threads=2, shard_size="64KiB")
    shard = os.path.join(b, "shard-00000.kiln")
    assert os.path.getsize(os.path.join(a, "shard-00000.kiln")) == os.path.getsize(shard)
    assert sum(1 for _ in kiln.Loader(b, batch_size=100, num_threads=2)) == 10
    shutil.copyfile(os.path.join(a, "shard-00000.kiln"), shard)
    with pytest.raises(kiln.CorruptionError) as info:
        kiln.Loader(b, batch_size=100, num_threads=2)
    message = str(info.value)
    assert "shard-00000.kiln belongs to another pack" in message, message
    assert "run kiln verify" in message and info.value.path == shard, message
    with pytest.raises(kiln.CorruptionError, match="belongs to another pack"):
        kiln.Dataset(b)
    report = kiln.verify(b)
    assert not report["ok"]
    assert any(p["file"] == shard and "belongs to another pack" in p["reason"]
               for p in report["problems"]), report["problems"]
