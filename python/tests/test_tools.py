"""kiln.pack, kiln.verify and kiln.inspect against the `kiln` command line."""
import json
import os
import subprocess

import pytest

import kiln

from conftest import SAMPLES


def test_pack_report(tmp_path):
    out = str(tmp_path / "fm")
    report = kiln.pack(SAMPLES, out, size=(28, 28), channels=1, threads=2, shuffle_seed=11,
                       compress="zstd")
    assert report["listed"] == report["packed"] == 1000 and report["rejections"] == []
    info = kiln.inspect(out)
    assert info["shuffle_seed"] == 11 and info["compression"].startswith("zstd")
    assert kiln.verify(out, deep=True)["ok"]
    with pytest.raises(kiln.InvalidArgumentError):
        kiln.pack(SAMPLES, out, size=28, channels=1)        # exists, no overwrite
    again = kiln.pack(SAMPLES, out, size=28, channels=1, overwrite=True, threads=2)
    assert again["packed"] == 1000


def test_pack_errors(tmp_path):
    with pytest.raises(kiln.NotFoundError):
        kiln.pack(str(tmp_path / "nothing"), str(tmp_path / "out"), size=28)
    with pytest.raises(kiln.InvalidArgumentError, match="size"):
        kiln.pack(SAMPLES, str(tmp_path / "out"), size="0x5")
    with pytest.raises(kiln.InvalidArgumentError):
        kiln.pack(SAMPLES, str(tmp_path / "out"), size=28, on_error="ignore")
    # The CLI's --threads range, with its message (before, 10**6 started ~32k threads).
    for threads in (257, 10**6):
        with pytest.raises(kiln.InvalidArgumentError, match=r"--threads \d+ must be in \[0, 256\]"):
            kiln.pack(SAMPLES, str(tmp_path / "out"), size=28, threads=threads)
    assert not (tmp_path / "out").exists()


def test_pack_tar_shards_and_exact_decode(tmp_path):
    """A tar shard of samples/photos packs like the folder; exact_decode reaches the manifest."""
    import tarfile
    photos = os.path.join(os.path.dirname(SAMPLES), "photos")
    shard = str(tmp_path / "photos-000000.tar")
    with tarfile.open(shard, "w") as t:
        for c in ("animal", "fruit"):
            t.add(os.path.join(photos, c), arcname=c)
    tar = kiln.pack(shard, str(tmp_path / "tar"), size=32, threads=2, label_from="class-folder",
                    image_ext="jpg")
    assert tar["packed"] == 7 and tar["rejected"] == 0
    for exact in (False, True):
        out = str(tmp_path / ("exact" if exact else "shrink"))
        kiln.pack(photos, out, size=32, threads=2, exact_decode=exact)
        manifest = json.load(open(os.path.join(out, "kiln.json")))
        assert manifest["preprocessing"]["jpeg_decode"] == ("exact" if exact else "shrink-on-load")
    with pytest.raises(kiln.InvalidArgumentError, match="label-from"):
        kiln.pack(shard, str(tmp_path / "bad"), size=32, label_from="txt")


def test_pack_tfrecord_files(tmp_path):
    """The golden TFRecord file (tests/data/tfrecord) packs like its two PNGs in a list file."""
    golden = os.path.join(os.path.dirname(os.path.dirname(SAMPLES)), "tests", "data", "tfrecord",
                          "golden.tfrecord")
    tf = kiln.pack(golden, str(tmp_path / "tf"), size=28, channels=1, threads=2,
                   feature_key="image/filename")
    assert tf["packed"] == 2 and tf["rejected"] == 0
    manifest = json.load(open(os.path.join(str(tmp_path / "tf"), "kiln.json")))
    assert manifest["source"]["kind"] == "tfrecord"
    keys = [kiln.Dataset(str(tmp_path / "tf")).key(i) for i in range(2)]
    assert keys == ["0_T-shirt_top/train-00001.png", "7_Sneaker/train-00006.png"]
    with pytest.raises(kiln.InvalidArgumentError, match="feature-label"):
        kiln.pack(golden, str(tmp_path / "bad"), size=28, feature_label="")
    with pytest.raises(kiln.InvalidArgumentError, match="shuffle-seed"):
        kiln.pack(golden, str(tmp_path / "bad"), size=28, shuffle_seed=1)


def test_verify_and_inspect(packed):
    report = kiln.verify(packed)
    assert report["ok"] and report["samples"] == 1000 and report["problems"] == []
    assert report["records_checked"] == 1000
    info = kiln.inspect(packed)
    assert info["samples"] == 1000 and info["shape"] == [28, 28, 1] and info["dtype"] == "uint8"
    assert info["classes"][3] == "3_Dress" and len(info["files"]) == 1
    assert not kiln.verify(os.path.join(packed, "nope"))["ok"]
    with pytest.raises(kiln.NotFoundError):
        kiln.inspect(os.path.join(packed, "nope"))


def test_same_answers_as_the_cli(packed):
    cli = os.environ.get("KILN_CLI")
    if not cli or not os.path.exists(cli):
        pytest.skip("KILN_CLI (the kiln binary) not given")
    out = subprocess.run([cli, "inspect", packed, "--json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == kiln.inspect(packed)
    out = subprocess.run([cli, "verify", packed, "--json"], capture_output=True, text=True)
    cli_report, py_report = json.loads(out.stdout), kiln.verify(packed)
    # Everything but the time each verification took.
    assert cli_report.pop("seconds") > 0 and py_report.pop("seconds") > 0
    assert cli_report == py_report


def test_formats_come_from_the_registry(tmp_path):
    # Every backend kiln knows, built or not, shards first; a new registry row adds its name
    # without this test changing.
    known = kiln.formats(compiled_only=False)
    assert known[0] == "shards" and {"lmdb", "hdf5"} <= set(known) and len(set(known)) == len(known)
    assert set(kiln.formats()) <= set(known)
    assert "shards" in kiln.formats()
    for name in kiln.formats():
        out = str(tmp_path / name)
        kiln.pack(SAMPLES, out, size=28, channels=1, threads=2, format=name)
        assert kiln.inspect(out)["format"] == name and kiln.verify(out)["ok"]


def write_pgm(path, width, height, value=128):
    """A binary PGM (P5) grey image of width x height pixels, all `value`."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"P5\n%d %d\n255\n" % (width, height) + bytes([value]) * (width * height))


def test_max_pixels_is_one_limit(tmp_path):
    """max_pixels bounds the decoded image and the resized one alike; 0 lifts both
    (tools/pack/pack_options.h, PackOptions::decode)."""
    tree = tmp_path / "tree"
    # 100 x 2 = 200 pixels decoded; covering 28 x 28 resizes it to 1400 x 28 = 39200 pixels.
    write_pgm(str(tree / "a" / "wide.pgm"), 100, 2)
    write_pgm(str(tree / "a" / "square.pgm"), 30, 30)   # 900 decoded, 28 x 28 resized
    report = kiln.pack(str(tree), str(tmp_path / "limited"), size=28, channels=1, threads=1,
                       max_pixels=1000)
    assert report["packed"] == 1 and len(report["rejections"]) == 1
    reason = report["rejections"][0]["reason"]
    assert report["rejections"][0]["path"].endswith("wide.pgm")
    assert "1400 x 28" in reason and "exceeds the limit of 1000" in reason, reason
    # The decoded size is checked against the same limit.
    with pytest.raises(kiln.CorruptionError, match="0 images could be packed") as info:
        kiln.pack(str(tree), str(tmp_path / "tiny"), size=28, channels=1, threads=1,
                  max_pixels=199)
    assert "100 x 2 = 200 pixels exceeds the limit of 199" in str(info.value), str(info.value)


def test_max_pixels_zero_lifts_the_resize_limit(tmp_path):
    """3600 x 1 covering 224 x 224 resizes to 806400 x 224 = 180633600 pixels: over the default
    limit (178956970), packed with max_pixels=0 (one grey image: 180 MB while resizing)."""
    tree = tmp_path / "tree"
    write_pgm(str(tree / "a" / "line.pgm"), 3600, 1, value=7)
    with pytest.raises(kiln.CorruptionError, match="exceeds the limit of 178956970"):
        kiln.pack(str(tree), str(tmp_path / "default"), size=224, channels=1, threads=1)
    lifted = kiln.pack(str(tree), str(tmp_path / "lifted"), size=224, channels=1, threads=1,
                       max_pixels=0)
    assert lifted["packed"] == 1 and lifted["rejections"] == [], lifted
    image, label = kiln.Dataset(str(tmp_path / "lifted"), backend="numpy")[0]
    assert image.shape == (224, 224, 1) and int(image.min()) == int(image.max()) == 7


def test_exact_decode_reaches_the_packer(tmp_path):
    photos = os.path.join(os.path.dirname(SAMPLES), "photos")
    for exact, want in ((False, "shrink-on-load"), (True, "exact")):
        out = str(tmp_path / f"photos-{exact}")
        report = kiln.pack(photos, out, size=32, threads=1, exact_decode=exact)
        assert report["packed"] > 0
        assert kiln.inspect(out)["preprocessing"]["jpeg_decode"] == want


_INTERRUPTED_PACK = r"""
import sys, kiln
src, out, root = sys.argv[1], sys.argv[2], sys.argv[3]
try:
    kiln.pack(src, out, root=root, size=160, channels=3, threads=1, compress="zstd:19",
              shard_size="64KiB")
    print("finished", flush=True)
except KeyboardInterrupt as e:
    print("KeyboardInterrupt", *getattr(e, "__notes__", []), flush=True)
"""


def _tree_bytes(root, out):
    """{name: bytes} of a dataset's files, its own path replaced by OUT (the manifest names it)."""
    files = {}
    for name in sorted(os.listdir(root)):
        data = open(os.path.join(root, name), "rb").read()
        files[name] = data.replace(out.encode(), b"OUT")
    return files


def test_pack_ctrl_c_stops_keeps_partial_and_resume_is_byte_identical(tmp_path):
    """SIGINT to a process in kiln.pack stops it between images, as `kiln pack` stops: Python's
    KeyboardInterrupt, nothing under OUT, OUT.partial kept, and resume=True continues to the
    bytes of a pack that ran through."""
    import signal
    import sys
    import time
    # 60 images (6 per class), slow to encode (160x160x3, zstd level 19, one thread): seconds
    # for the interrupted run, while a 64 KiB shard holds a few records.
    listing = tmp_path / "list.txt"
    with open(listing, "w") as f:
        classes = sorted(c for c in os.listdir(SAMPLES) if os.path.isdir(os.path.join(SAMPLES, c)))
        for label, c in enumerate(classes):
            for name in sorted(os.listdir(os.path.join(SAMPLES, c)))[:6]:
                f.write(f"{c}/{name} {label}\n")
    listing = str(listing)
    opts = dict(root=SAMPLES, size=160, channels=3, compress="zstd:19", shard_size="64KiB")
    out = str(tmp_path / "ds")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(os.path.dirname(kiln.__file__)), env.get("PYTHONPATH", "")])
    child = subprocess.Popen([sys.executable, "-c", _INTERRUPTED_PACK, listing, out, SAMPLES],
                             env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    partial = out + ".partial"
    try:
        # Started: a second shard is open, so the first (64 KiB: a few records) is finished.
        deadline = time.monotonic() + 120
        while not (os.path.isdir(partial) and
                   sum(n.startswith("shard-") for n in os.listdir(partial)) >= 2):
            assert child.poll() is None, child.communicate()
            assert time.monotonic() < deadline, "the pack did not start"
            time.sleep(0.01)
        child.send_signal(signal.SIGINT)
        stdout, stderr = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0, stderr
    assert stdout.startswith("KeyboardInterrupt"), (stdout, stderr)
    assert "resume=True" in stdout and "--resume" in stdout, stdout  # the note says what is kept
    assert not os.path.exists(out)
    kept = [n for n in os.listdir(partial) if n.startswith("shard-")]
    assert kept

    resumed = kiln.pack(listing, out, threads=2, resume=True, **opts)
    assert resumed["packed"] == 60 and not os.path.exists(partial)
    whole = str(tmp_path / "whole")
    kiln.pack(listing, whole, threads=2, **opts)
    assert len(kept) < len([n for n in os.listdir(whole) if n.startswith("shard-")])
    assert _tree_bytes(out, out) == _tree_bytes(whole, whole)


def test_pack_resume_on_a_complete_dataset_does_nothing(packed):
    before = os.stat(os.path.join(packed, "kiln.json")).st_mtime_ns
    again = kiln.pack(SAMPLES, packed, size=28, channels=1, threads=2, resume=True)
    assert again["already_complete"] is True and again["packed"] == 1000
    assert os.stat(os.path.join(packed, "kiln.json")).st_mtime_ns == before
