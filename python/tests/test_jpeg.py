"""kiln.Loader over JPEG records (``kiln pack --codec jpeg:QUALITY --max-side N``): the output size
it needs, random resized and center crops, every order, two ranks, state_dict() resume, and a
damaged record named by file, record and offset."""
import json
import os
import shutil
import subprocess

import numpy as np
import pytest

import kiln

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
GOLDEN = os.path.join(REPO, "tests", "data", "golden-jpeg")
PHOTOS = os.path.join(REPO, "samples", "photos")


def _kiln_cli():
    """The kiln executable of the build whose package is imported (build/python -> build/tools)."""
    package = os.path.dirname(os.path.abspath(kiln.__file__))
    for candidate in (os.path.join(package, "..", "..", "tools", "kiln"),
                      os.path.join(REPO, "build", "tools", "kiln")):
        if os.access(candidate, os.X_OK):
            return os.path.abspath(candidate)
    return None


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """samples/photos (23 images, 4 classes) packed as JPEG records of max side 96."""
    cli = _kiln_cli()
    if cli is None:
        pytest.skip("no kiln executable beside this package to pack JPEG records with")
    out = str(tmp_path_factory.mktemp("jpeg") / "photos")
    subprocess.run([cli, "pack", PHOTOS, out, "--codec", "jpeg:90", "--max-side", "96",
                    "--threads", "2"], check=True, capture_output=True)
    return out


def epoch(loader):
    images, labels, indices = [], [], []
    for x, y in loader:
        images.append(np.asarray(x).copy())
        labels.append(np.asarray(y).copy())
        indices.append(loader.batch_indices().copy())
    return np.concatenate(images), np.concatenate(labels), np.concatenate(indices)


def test_needs_an_output_size():
    with pytest.raises(ValueError, match="random_resized_crop=.*center_crop="):
        kiln.Loader(GOLDEN, batch_size=2, num_threads=1, backend="numpy")


def test_golden_center_crop_is_its_colours():
    loader = kiln.Loader(GOLDEN, batch_size=2, num_threads=1, shuffle=False, backend="numpy",
                         center_crop=(4, 8), center_crop_ratio=1.0)
    x, y, idx = epoch(loader)
    assert x.shape == (2, 4, 8, 3) and x.dtype == np.uint8
    assert list(y) == [0, 1] and list(idx) == [0, 1]
    # Record 0: left half red (200, 30, 30), right half blue (20, 40, 220).
    assert abs(int(x[0, 1, 0, 0]) - 200) < 12 and abs(int(x[0, 1, 7, 2]) - 220) < 12


def test_every_order_and_two_ranks(photos):
    kw = dict(batch_size=5, num_threads=2, seed=4, backend="numpy",
              random_resized_crop=(32, 40), flip=True, block_bytes=3 * 96 * 96 * 3, window=2)
    for shuffle in (False, "block", True):
        x, _, idx = epoch(kiln.Loader(photos, shuffle=shuffle, **kw))
        assert x.shape == (23, 32, 40, 3)
        assert sorted(idx) == list(range(23))
        x1, _, idx1 = epoch(kiln.Loader(photos, shuffle=shuffle, **dict(kw, num_threads=1)))
        assert (x1 == x).all() and (idx1 == idx).all()
    whole, _, idx = epoch(kiln.Loader(photos, shuffle=True, **kw))
    by_index = {int(i): whole[k] for k, i in enumerate(idx)}
    seen = set()
    for rank in range(2):
        x, _, idx = epoch(kiln.Loader(photos, shuffle=True, rank=rank, world_size=2, **kw))
        for k, i in enumerate(idx):
            assert (x[k] == by_index[int(i)]).all()  # the crop is drawn per sample, not per rank
            seen.add(int(i))
    assert seen == set(range(23))


def test_state_dict_resumes_byte_identical(photos):
    kw = dict(batch_size=4, seed=8, backend="numpy", random_resized_crop=48)
    loader = kiln.Loader(photos, num_threads=1, **kw)
    full, _, _ = epoch(loader)
    loader = kiln.Loader(photos, num_threads=1, **kw)
    it = iter(loader)
    head = [np.asarray(next(it)[0]).copy() for _ in range(2)]
    state = json.loads(json.dumps(loader.state_dict()))
    fresh = kiln.Loader(photos, num_threads=2, **kw)
    fresh.load_state_dict(state)
    tail, _, _ = epoch(fresh)
    assert (np.concatenate(head + [tail]) == full).all()
    with pytest.raises(ValueError):
        kiln.Loader(photos, num_threads=1, **dict(kw, random_resized_crop=32)).load_state_dict(
            state)


def test_kiln_pack_writes_the_clis_bytes(photos, tmp_path):
    out = str(tmp_path / "py")
    report = kiln.pack(PHOTOS, out, codec="jpeg:90", max_side=96, threads=2)
    assert report["packed"] == 23
    for name in ("shard-00000.kiln",):
        assert open(os.path.join(out, name), "rb").read() == \
            open(os.path.join(photos, name), "rb").read()
    with pytest.raises(ValueError, match="needs max_side"):
        kiln.pack(PHOTOS, str(tmp_path / "x"), codec="jpeg")
    with pytest.raises(ValueError, match="size does not apply"):
        kiln.pack(PHOTOS, str(tmp_path / "x"), codec="jpeg", max_side=64, size=32)
    with pytest.raises(ValueError, match="jpeg' only"):
        kiln.pack(PHOTOS, str(tmp_path / "x"), max_side=64)


def test_verify_deep_decodes_jpeg_records(photos):
    report = kiln.verify(photos, deep=True)
    assert report["ok"], report
    assert report["records_checked"] == 23


def test_damaged_record_is_named(photos, tmp_path):
    damaged = str(tmp_path / "damaged")
    shutil.copytree(photos, damaged)
    shard = os.path.join(damaged, "shard-00000.kiln")
    data = bytearray(open(shard, "rb").read())
    data[200] ^= 0x40  # inside record 0 (records start at 64)
    open(shard, "wb").write(bytes(data))
    loader = kiln.Loader(damaged, batch_size=23, num_threads=1, shuffle=False, backend="numpy",
                         center_crop=32)
    with pytest.raises(kiln.CorruptionError, match=r"shard-00000.kiln record 0 \(offset 64\)"):
        epoch(loader)
