"""kiln.Dataset: the map-style view (ds[i] -> (sample, label)) and torch's DataLoader over it."""
import pickle

import numpy as np
import pytest

import kiln

torch = pytest.importorskip("torch")


def loader_samples(packed):
    """{dataset index: (sample bytes, label)} of one kiln.Loader epoch, for comparison."""
    loader = kiln.Loader(packed, batch_size=100, num_threads=2, shuffle=False, copy=True)
    out = {}
    for images, labels in loader:
        for k, index in enumerate(loader.batch_indices().tolist()):
            out[index] = (images[k].numpy().tobytes(), int(labels[k]))
    return out


def test_getitem_matches_the_loader(packed):
    ds = kiln.Dataset(packed)
    want = loader_samples(packed)
    assert len(ds) == 1000 == len(want)
    assert ds.sample_shape == (28, 28, 1) and ds.dtype == "uint8"
    for i in (0, 1, 517, 999):
        image, label = ds[i]
        assert isinstance(image, torch.Tensor) and image.dtype == torch.uint8
        assert tuple(image.shape) == (28, 28, 1) and isinstance(label, int)
        assert (image.numpy().tobytes(), label) == want[i]
        assert ds.classes[label] == ds.key(i).split("/")[0]
    last, label = ds[-1]
    assert (last.numpy().tobytes(), label) == want[999]
    images = [ds[i][0] for i in range(3)]      # each sample owns its memory
    assert [im.numpy().tobytes() for im in images] == [want[i][0] for i in range(3)]


def test_numpy_backend_and_transform(packed):
    ds = kiln.Dataset(packed, backend="numpy", transform=lambda x: x.astype(np.float32) / 255)
    image, _ = ds[3]
    assert isinstance(image, np.ndarray) and image.dtype == np.float32
    assert image.shape == (28, 28, 1) and 0.0 <= image.min() and image.max() <= 1.0


def test_index_errors(packed):
    ds = kiln.Dataset(packed)
    with pytest.raises(kiln.OutOfRangeError, match="sample 1000 is out of range") as info:
        ds[1000]
    assert isinstance(info.value, IndexError)
    with pytest.raises(IndexError):
        ds[-1001]
    with pytest.raises(kiln.ArgumentTypeError, match="indices must be ints, got str"):
        ds["1"]
    with pytest.raises(TypeError):
        ds[1.0]
    assert sum(1 for _ in zip(range(2000), ds)) == 1000   # iteration stops at IndexError
    with pytest.raises(kiln.NotFoundError):
        kiln.Dataset(packed + "-missing")


def test_corrupt_record_names_it(packed, tmp_path):
    import os
    import shutil
    copy = str(tmp_path / "fm")
    shutil.copytree(packed, copy)
    shard = "shard-00000.kiln"
    # Inside record 500's payload (64-byte header, 784-byte records padded to 832: see
    # test_loader.test_corrupt_record_raises_naming_it).
    offset = 64 + 500 * 832 + 100
    with open(os.path.join(copy, shard), "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))
    ds = kiln.Dataset(copy)
    errors = []
    for i in range(len(ds)):
        try:
            ds[i]
        except kiln.CorruptionError as e:
            errors.append(str(e))
    assert len(errors) == 1 and shard in errors[0] and "record 500" in errors[0], errors


def test_pickles_and_reopens(packed):
    ds = kiln.Dataset(packed)
    again = pickle.loads(pickle.dumps(ds))
    assert len(again) == 1000 and again.path == ds.path
    assert again[5][0].numpy().tobytes() == ds[5][0].numpy().tobytes()


@pytest.mark.parametrize("num_workers", [0, 2])
def test_torch_dataloader(packed, num_workers):
    """DataLoader's sampler, collate and worker processes (forked) over kiln.Dataset: every
    sample once per epoch, with the bytes and labels kiln.Loader gives."""
    want = loader_samples(packed)
    ds = kiln.Dataset(packed)
    ds[0]  # opened in the parent before the workers fork
    def sampler():
        return torch.utils.data.RandomSampler(ds, generator=torch.Generator().manual_seed(0))
    dl = torch.utils.data.DataLoader(ds, batch_size=64, sampler=sampler(),
                                     num_workers=num_workers)
    assert len(dl) == 16
    seen = 0
    order = []
    sampler_order = list(sampler())
    for images, labels in dl:
        assert images.dtype == torch.uint8 and images.shape[1:] == (28, 28, 1)
        assert labels.dtype == torch.int64
        for k in range(len(labels)):
            order.append((images[k].numpy().tobytes(), int(labels[k])))
        seen += len(labels)
    assert seen == 1000
    assert sorted(order) == sorted(want.values())
    assert order == [want[i] for i in sampler_order]


@pytest.mark.parametrize("page", [2, 3, 100, 200])
def test_lmdb_zeroed_page_raises_corruption_error(tmp_path, page):
    # A zeroed B-tree page of data.mdb used to abort the interpreter inside liblmdb
    # ("mdb.c:5921: Assertion 'IS_LEAF(mp)' failed in mdb_cursor_next()"): now every read is a
    # sample or a CorruptionError naming data.mdb, for kiln.Dataset and kiln.Loader alike.
    import os
    from conftest import SAMPLES
    out = str(tmp_path / "l")
    kiln.pack(SAMPLES, out, size=28, channels=1, threads=2, format="lmdb")
    data = os.path.join(out, "data.mdb")
    with open(data, "r+b") as f:
        f.seek(page * 4096)
        f.write(bytes(4096))
    errors = 0
    try:
        ds = kiln.Dataset(out)
        for i in range(len(ds)):
            try:
                ds[i]
            except kiln.CorruptionError as e:
                assert data in str(e), str(e)
                errors += 1
        assert errors > 0
        loader = kiln.Loader(out, batch_size=100, shuffle=False, num_threads=2)
        with pytest.raises(kiln.CorruptionError, match="data.mdb"):
            for _ in loader:
                pass
    except kiln.CorruptionError as e:  # the page is on the path every lookup takes
        assert data in str(e), str(e)
        errors += 1
    assert errors > 0
