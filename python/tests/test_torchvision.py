"""Every sample of the packed Fashion-MNIST equals torchvision.datasets.FashionMNIST's."""
import re

import pytest

import kiln

torch = pytest.importorskip("torch")


def test_every_sample_equals_torchvision(packed, torchvision_train):
    tv_images = torchvision_train.data          # uint8 [60000, 28, 28]
    tv_labels = torchvision_train.targets       # int64 [60000]
    loader = kiln.Loader(packed, batch_size=128, num_threads=2, seed=9)
    seen = set()
    for images, labels in loader:
        indices = loader.batch_indices()
        for k, index in enumerate(indices.tolist()):
            key = loader.key(index)             # e.g. "3_Dress/train-00012.png"
            match = re.fullmatch(r"\d+_[^/]+/train-(\d+)\.png", key)
            assert match, key
            idx = int(match.group(1))
            assert torch.equal(images[k, :, :, 0], tv_images[idx]), key
            assert int(labels[k]) == int(tv_labels[idx]), key
            seen.add(index)
    assert len(seen) == 1000
