"""kiln: pack image folders into ready-to-train tensors once; stream them into training fast.

Reading (what a training process imports; never loads OpenCV)::

    import kiln
    loader = kiln.Loader("/data/fmnist", batch_size=256, num_threads=4)
    for epoch in range(10):
        loader.set_epoch(epoch)
        for images, labels in loader:   # torch.Tensor uint8 [B, 28, 28, 1], int64 [B]
            ...

Datasets: :func:`pack` (``kiln pack``), :func:`verify` (``kiln verify``), :func:`inspect`
(``kiln inspect``). Errors are :class:`KilnError` subclasses carrying kiln's message (file,
record, offset). Make the package importable with ``PYTHONPATH=BUILD/python`` (build tree) or
``PYTHONPATH=PREFIX/python`` (after ``cmake --install BUILD --prefix PREFIX``); it is built for
Debian's ``/usr/bin/python3``.
"""

import json as _json
import os as _os

from ._errors import (CorruptionError, InvalidArgumentError, KilnError, KilnIOError,
                      NotFoundError, NotSupportedError, OutOfRangeError)
from ._loader import Loader

from ._core import __version__  # formats/version.h, from CMake's project(VERSION)

__all__ = [
    "Loader", "pack", "verify", "inspect", "formats", "KilnError", "InvalidArgumentError", "NotFoundError",
    "CorruptionError", "KilnIOError", "NotSupportedError", "OutOfRangeError",
]


def _size_text(size):
    if isinstance(size, str):
        return size
    if isinstance(size, int):
        return str(size)
    h, w = size
    return f"{int(h)}x{int(w)}"


def _channel_text(values):
    if values is None:
        return ""
    if isinstance(values, str):
        return values
    if isinstance(values, (int, float)):
        return repr(float(values))
    return ",".join(repr(float(v)) for v in values)


def pack(input, output, *, size=224, resize=0, crop="center", channels=3, layout="hwc",
         dtype="uint8", mean=None, std=None, format="shards", shard_size="128MiB",
         compress="none", threads=0, shuffle_seed=None, on_error="skip", max_pixels=None,
         overwrite=False, root=None, exact_decode=False, image_ext=None, label_from="cls"):
    """Packs an image folder, list file or WebDataset tar shards into a dataset, like ``kiln pack``
    (same code).

    Arguments mirror the command's flags: ``input`` is an ImageFolder directory (one sub-folder
    per class, classes sorted by name) or a list file of ``relative/path label`` lines (paths
    relative to ``root``, default the list file's folder); ``output`` the dataset directory to
    create. ``size``: final size, an int, ``(height, width)`` or ``"HxW"`` (default 224);
    ``resize``: shorter side before the crop (0: cover ``size``); ``crop``: ``"center"`` or
    ``"none"``; ``channels``: 1 or 3; ``layout``: ``"hwc"`` or ``"chw"``; ``dtype``: ``"uint8"``,
    ``"float16"`` or ``"float32"``; ``mean``/``std``: per-channel values in [0, 1] for float
    dtypes; ``format``: one of ``formats()`` (``"shards"``, ``"lmdb"``, ``"hdf5"``); ``shard_size``: e.g. ``"64MiB"``;
    ``compress``: ``"none"``, ``"zstd"`` or ``"zstd:L"``; ``threads``: 0 = every core;
    ``shuffle_seed``: write-time shuffle; ``on_error``: ``"skip"`` (report and go on) or
    ``"fail"``; ``max_pixels``: refuse larger images (0: no limit); ``overwrite``: replace an
    existing kiln dataset; ``exact_decode``: decode JPEGs at full size instead of shrink-on-load
    (tools/decode_policy.md). Tar shards (a ``.tar`` file, a directory of them or a pattern such
    as ``"shards/{000000..000009}.tar"``, tools/tar_input.md): ``image_ext``, e.g. ``"jpg,png"``
    (default the ImageFolder extensions), ``label_from``: ``"cls"``, ``"json:FIELD"`` or
    ``"class-folder"``.

    Returns a dict (the ``kiln pack --json`` object): listed, packed, rejected, seconds,
    output_bytes, input_bytes, images_per_s, mb_per_s, output, rejections (each with path, line
    and reason).

    The GIL is released while packing. This imports ``kiln._tools``, which loads OpenCV: keep
    packing out of training processes.

    Raises: InvalidArgumentError (bad option, named; no image found; existing output),
    NotFoundError (missing input), CorruptionError (first bad input with ``on_error="fail"``),
    KilnIOError (naming the path).
    """
    from . import _tools  # lazily: the converter links OpenCV

    text = _tools.pack_json(
        _os.fspath(input), _os.fspath(output), "" if root is None else _os.fspath(root),
        _size_text(size), int(resize), str(crop), int(channels), str(layout), str(dtype),
        _channel_text(mean), _channel_text(std), str(format), str(shard_size), str(compress),
        int(threads), -1 if shuffle_seed is None else int(shuffle_seed), str(on_error),
        -1 if max_pixels is None else int(max_pixels), bool(overwrite), bool(exact_decode),
        "" if image_ext is None else str(image_ext), str(label_from))
    return _json.loads(text)


def verify(path, *, deep=False):
    """Checks a dataset's files and record checksums against its manifest (``kiln verify``).

    Never raises for damaged data: returns the report as a dict with ``ok`` (bool), dir, deep,
    samples, files_checked, records_checked, bytes_checked, seconds (the verification's wall
    time) and ``problems``, a list of dicts
    ``{file, record, offset, reason}`` (record and offset None when unknown). An unreadable
    directory or manifest is itself a problem in the report. ``deep=True`` also decompresses
    every record. The GIL is released while verifying.
    """
    return _json.loads(_core_module().verify_json(_os.fspath(path), bool(deep)))


def inspect(path):
    """Describes a dataset (``kiln inspect --json``): returns a dict with dir, format, tool,
    samples, shape (list, in layout order), dtype, layout, sample_bytes, classes, compression,
    shuffle_seed, bytes, preprocessing, source and files ({file, samples, bytes}).

    Opens the dataset, validating each file's size, header and footer against the manifest.
    Raises NotFoundError (no dataset there) or CorruptionError (naming the file).
    """
    return _json.loads(_core_module().inspect_json(_os.fspath(path)))


def formats(*, compiled_only=True):
    """Returns the names of the storage formats, from kiln's format registry (the same list as
    ``kiln pack --format``): those this build can write and read, or with
    ``compiled_only=False`` every format kiln knows. Use ``_core.formats()`` for the full rows
    (name, description, compiled_in, and why a format is missing).
    """
    return [f["name"] for f in _core_module().formats() if f["compiled_in"] or not compiled_only]


def _core_module():
    from . import _core
    return _core
