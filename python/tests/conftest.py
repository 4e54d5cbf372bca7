"""Shared fixtures: the sample Fashion-MNIST tree packed once per session, and torchvision's
view of the same images from Debian's dataset-fashion-mnist package."""
import gzip
import os
import shutil

import pytest

import kiln

# The installed-package run (run_installed.py) names the package directory the suite must test.
_expected = os.environ.get("KILN_EXPECT_PACKAGE_DIR")
if _expected and os.path.dirname(os.path.abspath(kiln.__file__)) != os.path.abspath(_expected):
    raise RuntimeError(f"kiln was imported from {kiln.__file__}, not from {_expected}")

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SAMPLES = os.path.join(REPO, "samples", "fashion-mnist")
IDX_DIR = "/usr/share/datasets/fashion-mnist"


@pytest.fixture(scope="session")
def packed(tmp_path_factory):
    """The 1,000-image sample tree packed as 28x28x1 uint8 HWC shards."""
    out = str(tmp_path_factory.mktemp("pack") / "fm")
    report = kiln.pack(SAMPLES, out, size=28, channels=1, threads=2)
    assert report["packed"] == 1000 and report["rejected"] == 0, report
    return out


@pytest.fixture(scope="session")
def torchvision_train(tmp_path_factory):
    """torchvision.datasets.FashionMNIST(train=True) over the IDX files of Debian's package."""
    datasets = pytest.importorskip("torchvision.datasets")
    if not os.path.isdir(IDX_DIR):
        pytest.skip(f"{IDX_DIR} missing (Debian package dataset-fashion-mnist)")
    root = tmp_path_factory.mktemp("tv")
    raw = root / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    # torchvision 0.14 checks that all four unpacked files exist in ROOT/FashionMNIST/raw.
    for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                 "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        with gzip.open(os.path.join(IDX_DIR, name + ".gz"), "rb") as src, \
                open(raw / name, "wb") as dst:
            shutil.copyfileobj(src, dst)
    return datasets.FashionMNIST(str(root), train=True, download=False)
