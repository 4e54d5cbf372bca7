"""kiln: pack image folders into ready-to-train tensors once; stream them into training fast.

Reading (what a training process imports; never loads OpenCV)::

    import kiln
    loader = kiln.Loader("/data/fmnist", batch_size=256, num_threads=4)
    for epoch in range(10):
        loader.set_epoch(epoch)
        for images, labels in loader:   # torch.Tensor uint8 [B, 28, 28, 1], int64 [B]
            ...

Datasets: :func:`pack` (``kiln pack``), :func:`verify` (``kiln verify``), :func:`inspect`
(``kiln inspect``); :class:`Dataset` is a map-style view (``ds[i] -> (sample, label)``) for
``torch.utils.data.DataLoader``. Errors are :class:`KilnError` subclasses carrying kiln's message
(file, record, offset); bad arguments raise :class:`InvalidArgumentError` (a ``ValueError``) or,
for a wrong type, :class:`ArgumentTypeError` (also a ``TypeError``).

Install with ``pip install --no-build-isolation .`` from the source tree (README, "Install the
Python package"), or use the build tree with ``PYTHONPATH=BUILD/python`` or
``PYTHONPATH=PREFIX/python`` (after ``cmake --install BUILD --prefix PREFIX``); the extensions
are built for the interpreter CMake found (Debian's ``/usr/bin/python3``).
"""

import json as _json
from typing import Any, Dict, List, Optional, Sequence, Union

from . import _core
from ._core import __version__  # formats/version.h, from CMake's project(VERSION)
from ._dataset import Dataset
from ._errors import (ArgumentTypeError, CorruptionError, InvalidArgumentError, KilnError,
                      KilnIOError, NotFoundError, NotSupportedError, OutOfRangeError)
from ._loader import Loader, PathLike, _fspath, _set_options, loader_options

__all__ = [
    "Loader", "Dataset", "loader_options", "pack", "verify", "inspect", "formats", "KilnError",
    "InvalidArgumentError", "ArgumentTypeError", "NotFoundError", "CorruptionError",
    "KilnIOError", "NotSupportedError", "OutOfRangeError", "PathLike", "__version__",
]


def pack(input: PathLike, output: PathLike, *, size: Union[int, Sequence[int], str] = 224,
         resize: int = 0, crop: str = "center", channels: int = 3, layout: str = "hwc",
         dtype: str = "uint8", mean: Union[None, float, Sequence[float]] = None,
         std: Union[None, float, Sequence[float]] = None, format: str = "shards",
         shard_size: Union[int, str] = "128MiB", compress: str = "none", threads: int = 0,
         shuffle_seed: Optional[int] = None, on_error: str = "skip",
         max_pixels: Optional[int] = None, overwrite: bool = False, resume: bool = False,
         root: Optional[PathLike] = None, exact_decode: bool = False,
         image_ext: Optional[str] = None, label_from: str = "cls",
         feature_image: str = "image/encoded", feature_label: str = "image/class/label",
         feature_key: str = "", codec: str = "none", max_side: int = 0) -> Dict[str, Any]:
    """Packs an image folder, list file, WebDataset tar shards or TFRecord files into a dataset,
    like ``kiln pack`` (same code).

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
    ``"fail"``; ``max_pixels``: the one pixel limit of a pack: an image whose decoded size or
    whose size after the resize (before the crop) has more pixels is refused (None: kiln's
    default, 178956970; 0: no kiln limit on either; as ``kiln pack --max-pixels``);
    ``overwrite``: replace an existing kiln dataset; ``resume``: continue an interrupted pack of
    the same inputs and options from ``OUTPUT.partial`` (shards format; ``kiln pack --resume``):
    the result is byte-identical to an uninterrupted pack; ``exact_decode``: decode every JPEG at full
    size instead of shrink-on-load (``kiln pack --exact-decode``, tools/imaging/decode_policy.md). Tar
    shards (a ``.tar`` file, a directory of them or a pattern such as
    ``"shards/{000000..000009}.tar"``, tools/sources/pack_inputs.md): ``image_ext``, e.g. ``"jpg,png"``
    (default the ImageFolder extensions), ``label_from``: ``"cls"``, ``"json:FIELD"`` or
    ``"class-folder"``. TFRecord files of ``tf.train.Example`` records (a ``.tfrecord`` file,
    ``train-00000-of-01024``, a directory of them or a pattern such as
    ``"data/train-{00000..01023}-of-01024"``): ``feature_image`` (a bytes feature),
    ``feature_label`` (an int64 feature with one value), ``feature_key`` (a bytes feature for the
    key, e.g. ``"image/filename"``; default ``""``: ``FILE:RECORD_INDEX``). ``codec``:
    ``"none"`` (tensors of ``size``) or ``"jpeg"`` / ``"jpeg:QUALITY"`` with ``max_side``: one
    JPEG per record, each image resized to at most ``max_side`` pixels per side keeping its aspect
    ratio (``kiln pack --codec jpeg:90 --max-side 256``; read with ``kiln.Loader(...,
    random_resized_crop=...)`` or ``center_crop=...``); ``size`` does not apply then.

    The arguments become one ``kiln::PackOptions`` (``kiln._tools.PackOptions``), checked field by
    field and then by the C++ validator ``kiln pack`` uses, with its messages: a value out of range
    raises InvalidArgumentError, a value of the wrong type ArgumentTypeError.

    Returns a dict (the ``kiln pack --json`` object): listed, packed, rejected, seconds,
    output_bytes, input_bytes, images_per_s, mb_per_s, output, rejections (each with path, line
    and reason).

    The GIL is released while packing. Ctrl-C (a signal handler that raises, in the main thread)
    stops the pack between images, as ``kiln pack`` stops on SIGINT: nothing is left under
    ``output``, the finished shards stay in ``OUTPUT.partial`` for ``resume=True`` (shards
    format), and the handler's exception (KeyboardInterrupt) is raised with a note saying what
    was kept. This imports ``kiln._tools``, which loads OpenCV: keep
    packing out of training processes.

    Raises: InvalidArgumentError (bad option, named; no image found; existing output),
    NotFoundError (missing input), CorruptionError (first bad input with ``on_error="fail"``),
    KilnIOError (naming the path).
    """
    arguments = dict(locals())  # every parameter, by name (before any other local exists)
    from . import _tools  # lazily: the converter links OpenCV

    if codec != "none":  # JPEG records: the schema is max_side x max_side, as kiln pack's flags
        if not max_side:
            raise InvalidArgumentError(f"codec {codec!r} needs max_side: the longest side of "
                                       "the stored images")
        if size != 224:
            raise InvalidArgumentError(f"size does not apply to codec {codec!r}: records keep "
                                       "their aspect ratio (use max_side), and the reader "
                                       "resizes them to its output size")
        arguments["size"] = max_side
    elif max_side:
        raise InvalidArgumentError("max_side applies to codec 'jpeg' only")

    arguments.update(input=_fspath(input, "input"), output=_fspath(output, "output"),
                     root="" if root is None else _fspath(root, "root"))
    # The fields are the pack option table's names (tools/pack/pack_option_table.h), in its
    # order; test_options.py checks that they are this function's parameters.
    o = _set_options(_tools.PackOptions(), {
        row["name"]: arguments[row["name"]] for row in _tools.pack_option_table() if row["name"]},
        keep_default_if_none=("mean", "std", "max_pixels", "image_ext"))
    o.validate()
    result: Dict[str, Any] = _json.loads(_tools.pack_json(o))
    return result


def verify(path: PathLike, *, deep: bool = False) -> Dict[str, Any]:
    """Checks a dataset's files and record checksums against its manifest (``kiln verify``).

    Never raises for damaged data: returns the report as a dict with ``ok`` (bool), dir, deep,
    samples, files_checked, records_checked, bytes_checked, seconds (the verification's wall
    time) and ``problems``, a list of dicts
    ``{file, record, offset, reason}`` (record and offset None when unknown). An unreadable
    directory or manifest is itself a problem in the report. ``deep=True`` also decompresses
    every record (zstd decompressed, JPEG records decoded). The GIL is released while verifying.
    """
    if not isinstance(deep, bool):
        raise ArgumentTypeError(f"deep must be a bool, got {type(deep).__name__}")
    result: Dict[str, Any] = _json.loads(_core.verify_json(_fspath(path), deep))
    return result


def inspect(path: PathLike) -> Dict[str, Any]:
    """Describes a dataset (``kiln inspect --json``): returns a dict with dir, format, tool,
    samples, shape (list, in layout order), dtype, layout, sample_bytes, classes, compression,
    shuffle_seed, bytes, preprocessing, source and files ({file, samples, bytes}).

    Opens the dataset, validating each file's size, header and footer against the manifest.
    Raises NotFoundError (no dataset there) or CorruptionError (naming the file).
    """
    result: Dict[str, Any] = _json.loads(_core.inspect_json(_fspath(path)))
    return result


def formats(*, compiled_only: bool = True) -> List[str]:
    """Returns the names of the storage formats, from kiln's format registry (the same list as
    ``kiln pack --format``): those this build can write and read, or with
    ``compiled_only=False`` every format kiln knows. Use ``_core.formats()`` for the full rows
    (name, description, compiled_in, and why a format is missing).
    """
    return [str(f["name"]) for f in _core.formats() if f["compiled_in"] or not compiled_only]
