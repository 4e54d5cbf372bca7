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
    assert kiln.formats(compiled_only=False) == ["shards", "lmdb", "hdf5"]
    assert "shards" in kiln.formats()
    for name in kiln.formats():
        out = str(tmp_path / name)
        kiln.pack(SAMPLES, out, size=28, channels=1, threads=2, format=name)
        assert kiln.inspect(out)["format"] == name and kiln.verify(out)["ok"]
