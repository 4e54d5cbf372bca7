"""kiln.Dataset: a packed dataset as a map-style dataset (``ds[i] -> (sample, label)``)."""

import os
from typing import Any, Callable, Dict, List, Optional, Tuple

from . import _core
from ._errors import ArgumentTypeError, OutOfRangeError
from ._loader import PathLike, _fspath, _import_torch


class Dataset:
    """Random access to the samples of a kiln dataset, for code that wants
    ``torch.utils.data.DataLoader`` semantics (its samplers, ``collate_fn``, workers)::

        ds = kiln.Dataset("/data/fmnist")
        image, label = ds[0]          # torch.Tensor uint8 [28, 28, 1], int
        loader = torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True, num_workers=2)

    ``ds[i]`` is ``(sample, label)``: ``sample`` has the stored shape (``(H, W, C)`` for
    ``--layout hwc``, ``(C, H, W)`` for ``chw``) and dtype, and owns its memory (a copy out of
    the file, checksum checked); ``label`` is a Python ``int``. ``i`` may be negative, as for a
    list. ``transform``, when given, is applied to the sample (``transform(sample)``).
    ``backend``: ``None`` (torch when importable, else NumPy), ``"torch"`` or ``"numpy"``.

    ``kiln.Loader`` is the fast path (fetch threads, whole batches, crops and flips, no
    per-sample Python); this view reads one sample per call, releasing the GIL while it reads.

    Processes. The dataset is opened again in each process that uses it (checked by process id
    on every access), so it works with DataLoader workers whether they are forked or spawned
    (the object pickles as its arguments), and a forked child never shares state with its
    parent. Threads: any number may call ``ds[i]`` concurrently.

    Errors: ``kiln.NotFoundError`` (no dataset at ``path``), ``kiln.CorruptionError`` (a damaged
    file at open, or a damaged record, naming file, record and offset), ``kiln.OutOfRangeError``
    (an ``IndexError``) for ``i`` out of range, ``kiln.ArgumentTypeError`` (a ``TypeError``) for
    an index that is not an int.
    """

    def __init__(self, path: PathLike, *, backend: Optional[str] = None,
                 transform: Optional[Callable[[Any], Any]] = None) -> None:
        if backend not in (None, "torch", "numpy"):
            raise ValueError(f"backend must be None, 'torch' or 'numpy', got {backend!r}")
        self.path = _fspath(path)
        self.backend = backend
        self.transform = transform
        self._open()

    def _open(self) -> None:
        self._torch: Any = None if self.backend == "numpy" else _import_torch()
        if self.backend == "torch" and self._torch is None:
            raise ImportError("kiln.Dataset(backend='torch') needs torch, which is not importable")
        self._core = _core.Dataset(self.path)
        self._pid = os.getpid()

    def _dataset(self) -> Any:
        if self._pid != os.getpid():  # a forked child: open its own
            self._open()
        return self._core

    def __getstate__(self) -> Dict[str, Any]:
        return {"path": self.path, "backend": self.backend, "transform": self.transform}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.path = state["path"]
        self.backend = state["backend"]
        self.transform = state["transform"]
        self._open()

    def __len__(self) -> int:
        """Samples in the dataset."""
        return len(self._dataset())

    def __getitem__(self, index: int) -> Tuple[Any, int]:
        """Returns ``(sample, label)`` of sample ``index`` (negative: from the end)."""
        core = self._dataset()
        if isinstance(index, bool) or not hasattr(index, "__index__"):
            raise ArgumentTypeError(f"kiln.Dataset indices must be ints, got "
                                    f"{type(index).__name__}")
        i = index.__index__()
        n = len(core)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise OutOfRangeError(f"{self.path}: sample {index} is out of range (the dataset "
                                  f"has {n} samples)")
        torch = self._torch
        sample, label = core.read(i, torch is not None)
        if torch is not None:
            sample = torch.utils.dlpack.from_dlpack(sample)
        if self.transform is not None:
            sample = self.transform(sample)
        return sample, int(label)

    def key(self, index: int) -> str:
        """Returns sample ``index``'s key: its source path relative to the packed folder."""
        key: str = self._dataset().key(index)
        return key

    @property
    def classes(self) -> List[str]:
        """Class names: label i is classes[i]."""
        classes: List[str] = self._dataset().classes
        return classes

    @property
    def sample_shape(self) -> Tuple[int, ...]:
        """Shape of one sample: (H, W, C) or (C, H, W)."""
        shape: Tuple[int, ...] = self._dataset().sample_schema["shape"]
        return shape

    @property
    def dtype(self) -> str:
        """Stored dtype name of the samples: "uint8", "float16" or "float32"."""
        dtype: str = self._dataset().sample_schema["dtype"]
        return dtype

    def __repr__(self) -> str:
        return f"kiln.Dataset({self.path!r}, samples={len(self)})"
