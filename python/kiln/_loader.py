"""kiln.Loader: shuffled batches of a packed dataset as torch tensors or NumPy arrays."""

import os
import threading
from typing import (TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Sequence, Tuple,
                    Union)

from . import _core, _cuda
from ._errors import ArgumentTypeError

if TYPE_CHECKING:  # only for the type checker
    import numpy

#: What ``path`` arguments accept: a str or an ``os.PathLike`` (``pathlib.Path``).
PathLike = Union[str, "os.PathLike[str]"]
#: ``normalize=(mean, std)``: each a number or one number per channel.
Normalize = Tuple[Union[float, Sequence[float]], Union[float, Sequence[float]]]


def _fspath(path: Any, name: str = "path") -> str:
    """``os.fspath(path)`` as a str, or kiln.ArgumentTypeError naming the argument."""
    try:
        value = os.fspath(path)
    except TypeError:
        raise ArgumentTypeError(f"{name} must be a str or os.PathLike, got "
                                f"{type(path).__name__}") from None
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{name} must be a str path, got {type(value).__name__}")
    return value


def _set_options(options: Any, fields: Dict[str, Any], keep_default_if_none: Sequence[str] = ()
                 ) -> Any:
    """Sets each field of the bound C++ options struct ``options`` from ``fields``, in order (each
    setter checks its value and raises naming the field); a field in ``keep_default_if_none``
    whose value is None keeps the struct's default. Returns ``options``."""
    for name, value in fields.items():
        if value is None and name in keep_default_if_none:
            continue
        setattr(options, name, value)
    return options


def _paths(path: Any) -> Tuple[List[str], bool]:
    """``path`` as a list of str paths and whether it names a mixture (a list or tuple)."""
    if isinstance(path, (list, tuple)):
        if not path:
            from ._errors import InvalidArgumentError
            raise InvalidArgumentError("kiln.Loader: the list of datasets is empty")
        return [_fspath(p, f"path[{i}]") for i, p in enumerate(path)], True
    return [_fspath(path)], False


def _mixture_values(values: Any, name: str) -> List[float]:
    """``weights``/``repeats`` as a list of floats (the C++ side checks count and range)."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise ArgumentTypeError(f"{name} must be a sequence of numbers, got "
                                f"{type(values).__name__}")
    out = []
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, (int, float)) and not hasattr(v, "__float__"):
            raise ArgumentTypeError(f"{name}[{i}] must be a number, got {type(v).__name__}")
        f = float(v)
        if not (f > 0 and f != float("inf")):
            from ._errors import InvalidArgumentError
            raise InvalidArgumentError(f"{name}[{i}] is {f}; each must be > 0 and finite")
        out.append(f)
    return out


def _mixture_args(is_mixture: bool, count: int, weights: Any, repeats: Any,
                  samples_per_epoch: Any) -> Optional[Tuple[List[float], List[float], int]]:
    """Checks the mixture arguments: (weights, repeats, samples_per_epoch) for a mixture (repeats
    all 1 when neither is given), None for one dataset (which takes none of them)."""
    from ._errors import InvalidArgumentError
    if not is_mixture:
        for name, value in (("weights", weights), ("repeats", repeats),
                            ("samples_per_epoch", samples_per_epoch)):
            if value is not None:
                raise InvalidArgumentError(
                    f"kiln.Loader: {name} applies to a mixture; give a list of datasets "
                    f"(kiln.Loader([a, b], {name}=...))")
        return None
    if weights is not None and repeats is not None:
        raise InvalidArgumentError("kiln.Loader: give weights or repeats, not both")
    w = _mixture_values(weights, "weights") if weights is not None else []
    r = _mixture_values(repeats, "repeats") if repeats is not None else []
    if weights is None and repeats is None:
        r = [1.0] * count   # each dataset once per epoch
    n = 0
    if samples_per_epoch is not None:
        if isinstance(samples_per_epoch, bool) or not hasattr(samples_per_epoch, "__index__"):
            raise ArgumentTypeError(f"samples_per_epoch must be an int, got "
                                    f"{type(samples_per_epoch).__name__}")
        n = samples_per_epoch.__index__()
        if not 1 <= n < 1 << 64:
            raise InvalidArgumentError(f"samples_per_epoch {n} must be at least 1 (None: the "
                                       "default)")
    return w, r, n


def _shuffle_mode(shuffle: Union[bool, str, None]) -> Any:
    """Maps ``shuffle`` (True, False, None or a mode name) to what LoaderOptions.shuffle takes;
    the C++ side checks the name."""
    if shuffle is True:
        return "exact"
    if shuffle is False or shuffle is None:
        return "none"
    return shuffle


def _import_torch() -> Any:
    """torch, when importable, else None. Imported by name so that type checkers of user code
    (mypy) do not analyse all of torch for kiln's sake: batches are typed Any."""
    import importlib
    try:
        torch = importlib.import_module("torch")
        importlib.import_module("torch.utils.dlpack")
    except ImportError:
        return None
    return torch


_world_logged = False


def _world_from_environment() -> Dict[str, Any]:
    """Rank and world size from the launcher's variables; logs their source once per process."""
    global _world_logged
    world: Dict[str, Any] = _core.world_from_environment()
    if not _world_logged:
        _world_logged = True
        import logging
        logging.getLogger("kiln").info("kiln.Loader: rank %d of %d from %s", world["rank"],
                                       world["world_size"], world["source"])
    return world


def _crop_size(crop: Union[None, int, Sequence[int]]) -> Tuple[Any, Any]:
    if crop is None:
        return 0, 0
    if isinstance(crop, (str, bytes)) or not isinstance(crop, Sequence):
        return crop, crop  # an int (LoaderOptions checks it)
    if len(crop) != 2:
        raise ArgumentTypeError(f"crop must be an int or (height, width), got {crop!r}")
    return crop[0], crop[1]


def _pair(value: Sequence[float], name: str) -> Tuple[Any, Any]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or len(value) != 2:
        raise ArgumentTypeError(f"{name} must be (min, max), got {value!r}")
    return value[0], value[1]


def loader_options(*, batch_size: int = 256, shuffle: Union[bool, str] = True, seed: int = 0,
                   drop_last: bool = False, num_threads: int = 0, prefetch: int = 2,
                   pin_memory: bool = True, rank: Optional[int] = None,
                   world_size: Optional[int] = None,
                   crop: Union[None, int, Sequence[int]] = None, flip: bool = False,
                   random_resized_crop: Union[None, int, Sequence[int]] = None,
                   scale: Sequence[float] = (0.08, 1.0),
                   ratio: Sequence[float] = (3.0 / 4.0, 4.0 / 3.0),
                   interpolation: str = "bilinear",
                   center_crop: Union[None, int, Sequence[int]] = None,
                   center_crop_ratio: float = 224.0 / 256.0,
                   tail: str = "short", block_bytes: int = 4 << 20, window: int = 16,
                   read_ahead_bytes: int = 16 << 20, io: str = "auto",
                   stats_dir: Optional[PathLike] = None,
                   stats_interval: Optional[float] = None,
                   cache_dir: Optional[PathLike] = None, cache_bytes: Optional[int] = None,
                   hedge_p95_multiple: Optional[float] = None,
                   hedge_min_ms: Optional[int] = None) -> "_core.LoaderOptions":
    """Returns the ``kiln::LoaderOptions`` of ``kiln.Loader``'s keyword arguments (same names
    and defaults), checked field by field and then as a whole (``ValidateLoaderOptions``, the
    messages of ``kiln bench``). ``rank``/``world_size`` None: from the launcher's environment.
    Raises kiln.InvalidArgumentError (out of range) or kiln.ArgumentTypeError (wrong type)."""
    if rank is None or world_size is None:
        world = _world_from_environment()
        if rank is None:
            rank = world["rank"]
        if world_size is None:
            world_size = world["world_size"]
    crop_height, crop_width = _crop_size(crop)
    resize_height, resize_width = _crop_size(random_resized_crop)
    center_height, center_width = _crop_size(center_crop)
    scale_min, scale_max = _pair(scale, "scale")
    ratio_min, ratio_max = _pair(ratio, "ratio")
    o: _core.LoaderOptions = _set_options(_core.LoaderOptions(), dict(
        batch_size=batch_size, shuffle=_shuffle_mode(shuffle), seed=seed, drop_last=drop_last,
        num_threads=num_threads, prefetch=prefetch, pin_memory=pin_memory, rank=rank,
        world_size=world_size, crop_height=crop_height, crop_width=crop_width, flip=flip,
        resize_height=resize_height, resize_width=resize_width, scale_min=scale_min,
        scale_max=scale_max, ratio_min=ratio_min, ratio_max=ratio_max,
        interpolation=interpolation, center_crop_height=center_height,
        center_crop_width=center_width, center_crop_ratio=center_crop_ratio, tail=tail,
        block_bytes=block_bytes, shuffle_window=window,
        read_ahead_bytes=read_ahead_bytes, io=io))
    # Statistics export (kiln.Loader's stats_dir=, stats_interval=): None leaves the C++ default,
    # which reads KILN_STATS_DIR / KILN_STATS_INTERVAL at creation.
    if stats_dir is not None:
        o.stats_dir = _fspath(stats_dir, "stats_dir")
    if stats_interval is not None:
        o.stats_interval_s = stats_interval
    # A dataset at a URL (kiln.Loader's cache_dir=, cache_bytes=, hedge_*=): None leaves the
    # environment's KILN_REMOTE_* settings.
    if cache_dir is not None:
        o.remote_cache_dir = _fspath(cache_dir, "cache_dir")
    o.remote_cache_bytes = cache_bytes
    o.remote_hedge_p95_multiple = hedge_p95_multiple
    o.remote_hedge_min_ms = hedge_min_ms
    o.validate()
    return o


class Loader:
    """Streams shuffled batches of a kiln dataset (made by ``kiln pack``) into a training loop.

    ``Loader(path, batch_size=256, shuffle=True, seed=0, drop_last=False, num_threads=0,
    prefetch=2, pin_memory=True, device=None, rank=None, world_size=None, crop=None, flip=False,
    normalize=None, copy=False, tail="short", backend=None, block_bytes=4 << 20, window=16,
    read_ahead_bytes=16 << 20, dtype=None, io="auto", random_resized_crop=None,
    scale=(0.08, 1.0), ratio=(3/4, 4/3), interpolation="bilinear", center_crop=None,
    center_crop_ratio=224/256, weights=None, repeats=None, samples_per_epoch=None,
    stats_dir=None, stats_interval=None, cache_dir=None, cache_bytes=None,
    hedge_p95_multiple=None, hedge_min_ms=None)``

    A drop-in for the usual ``DataLoader`` loop::

        loader = kiln.Loader("/data/fmnist", batch_size=256, num_threads=4)
        for epoch in range(10):
            loader.set_epoch(epoch)            # optional: see "Epochs" below
            for images, labels in loader:      # one epoch
                ...

    Batches. Each step yields ``(images, labels)``:

    - ``images``: shape ``[B, H, W, C]`` for a dataset packed with ``--layout hwc`` (the default)
      or ``[B, C, H, W]`` for ``--layout chw``, where ``(H, W)`` is the stored size or the
      ``crop`` size; dtype as packed (``uint8`` by default; ``float16``, ``float32``), or
      ``float32`` with ``normalize``.
    - ``labels``: ``int64``, shape ``[B]``.
    - ``B`` is ``batch_size`` except for the last batch of an epoch (see ``drop_last`` and
      ``tail``), which may be shorter; with ``world_size > 1`` and ``tail="short"`` it may be 0.

    With torch importable they are ``torch.Tensor``s made through DLPack without a copy, on the
    CPU (``device=None``) or on ``device``; otherwise NumPy ``ndarray``s that view the same
    memory (their ``.base`` keeps the loader's memory alive). ``backend="numpy"`` or
    ``"torch"`` forces one.

    Lifetime of a batch. Without ``copy``, a yielded batch views one of the loader's
    ``prefetch + 1`` batch slots: its contents are valid until the next batch is requested
    (the next step of the ``for`` loop, or a new ``iter(loader)``); after that the slot is
    refilled with later samples. The memory itself stays allocated while any batch view is
    alive, so keeping a batch never crashes, but it silently changes. Keep a batch across steps
    with ``copy=True`` (every batch owns its memory: one extra memcpy per batch) or with
    ``images.clone()`` / ``np.array(images)``. Batches made by ``normalize`` or moved to a
    ``device`` are new tensors and own their memory.

    Epochs. Each ``for`` loop over the loader (each ``iter(loader)``) runs one epoch. The
    sample order depends only on ``(seed, epoch)``: ``set_epoch(e)`` picks the epoch the next
    loop runs (as with PyTorch's ``DistributedSampler.set_epoch``); without it the epoch
    advances by itself, 0, 1, 2, ..., so a new loop never repeats the previous order by accident
    (a loop broken off early counts as a pass too). The counter is the C++ loader's
    (``Loader::BeginEpoch`` in reader/loader.h); ``epoch`` reads it.
    Starting a new loop abandons the previous loop's epoch; the old iterator then raises
    ``RuntimeError``. Breaking out of a loop early is fine.
    Ctrl-C while a step waits for a batch: the wait runs Python's signal handlers every 20 ms,
    so KeyboardInterrupt is raised at once (in the main thread) and the batch it waited for is
    not lost: the next step of the same iterator returns it.

    Mixing datasets. ``Loader([path_a, path_b], weights=[0.7, 0.3], samples_per_epoch=N)``
    (or ``repeats=[1, 3]``) reads several datasets as one stream (reader/mixture.md): each epoch
    draws ``N`` samples, the exact share of each dataset given by its weight (or ``repeat x``
    its samples), interleaved evenly, a pure function of ``(seed, epoch, position)``. Every pass
    over a dataset reads each of its samples once (a small dataset is repeated with a fresh
    permutation per pass, a large one subsampled, and later epochs continue where the last one
    stopped). ``batch_sources()`` gives each sample's dataset (its position in the list) and
    ``batch_indices()`` its index there; labels are each dataset's own. The datasets must have
    the same sample schema (dtype, layout, shape: the error names both datasets and the field).
    Every other option works as for one dataset, except ``shuffle="block"`` (refused).

    Checkpoint and resume. ``state_dict()`` returns the loader's position (a plain dict: the
    epoch, the samples the ranks together consumed in it, the options that fix the order, the
    dataset's fingerprint); ``load_state_dict(d)`` makes the next loop continue from there in
    O(1), byte-identical to the run that never stopped, also on another ``world_size`` (see
    their docstrings and the README, "Checkpoint and resume").

    Arguments:
        path: dataset directory (holding ``kiln.json``), or a list of them for a mixture (see
            "Mixing datasets"; a list of one is a mixture too).
        weights: a mixture only: one number > 0 per dataset, the proportion of each epoch's
            samples drawn from it (normalised). Exclusive with ``repeats``.
        repeats: a mixture only: one number > 0 per dataset, the samples drawn from it per
            epoch as a multiple of its size (1: once, 3: upsampled 3x, 0.5: half of it).
            Neither weights nor repeats: each dataset once per epoch (``repeats`` all 1).
        samples_per_epoch: a mixture only: samples of an epoch, all ranks together. Default
            None: with weights the datasets' total samples, with repeats the sum of ``repeat x``
            samples. (The ``samples_per_epoch`` property is this rank's share.)
        batch_size: samples per batch, >= 1. Default 256.
        shuffle: the read order. ``True`` or ``"exact"`` (default): a new global permutation
            of the samples every epoch, for data in memory or on fast NVMe. ``"block"``: the
            epoch is a permutation of blocks of ``block_bytes`` of consecutive samples, dealt to
            ranks, shuffled within windows of ``window`` blocks: each rank reads mostly
            sequential runs and touches only its own blocks (1/world_size of the data), for data
            larger than memory; batches are less well mixed (see README, "Which read order").
            ``False`` or ``"none"``: dataset order. The orders are specified in
            ``reader/sampler.h``.
        block_bytes: ``shuffle="block"`` only: bytes per block (rounded down to whole samples,
            at least one), 1 to 2**40. Default 4 MiB.
        window: ``shuffle="block"`` only: blocks whose samples are shuffled together, 1 to
            2**20. Default 16.
        read_ahead_bytes: stored bytes of upcoming samples (in read order, within the epoch)
            that the fetch threads ask the kernel to read into the page cache ahead of time
            (``madvise(MADV_WILLNEED)``), so that a few threads keep many reads in flight when
            the dataset is not in memory. Given only while reads miss the page cache (a few
            upcoming samples are checked with ``mincore`` per chunk), so data in memory pays
            nothing. Bounds the page cache held by samples read ahead but not yet used to about
            this much (``shuffle="block"``: at least one window of blocks). Keep it well below
            the memory the process may use for page cache. 0 turns it off; 0 to 2**32.
            Default 16 MiB. Shards and HDF5 only (LMDB ignores it). With ``io="direct"`` it
            bounds the direct reads in flight (and their staging memory) instead.
        io: how records are read. ``"mmap"``: copied from the file mappings, kept in the page
            cache (data that fits in memory). ``"direct"``: O_DIRECT reads through io_uring,
            bypassing the page cache (data larger than memory: every epoch reads storage at the
            disk's rate); shards only, and where io_uring or O_DIRECT is unavailable (LMDB,
            HDF5, seccomp'd containers) the loader reads through the mappings instead.
            ``"auto"``: ``"direct"`` when the dataset exceeds half the memory the process may
            use (RAM or its cgroup limit), else ``"mmap"``. Batches are identical either way.
            Default ``"auto"``. See README, "Data larger than memory".
        seed: permutation and augmentation seed, identical on every rank. Default 0.
        drop_last: drop each rank's last partial batch. Default False.
        num_threads: fetch threads (threads, not processes; persistent across epochs);
            0 = the machine's hardware threads. Default 0.
        prefetch: batches filled ahead of the one you hold, 1 to 64. Default 2.
        pin_memory: allocate batch slots in pinned (page-locked) memory when kiln was built
            with CUDA and a device is present; otherwise page-aligned host memory. With
            ``device=None`` the slots are pinned on torch's current device once torch has
            initialised CUDA (call ``torch.cuda.set_device(local_rank)`` before making the
            loader), so a rank on ``cuda:N`` creates no context on GPU 0. Default True.
        device: None or ``"cpu"`` for CPU batches. ``"cuda"`` / ``"cuda:N"`` (``"cuda"``: torch's
            current device) uses the reader's own upload (reader/loader.h, "Device batches"):
            each batch is copied from pinned slots on kiln's CUDA stream as soon as it is filled,
            then, on torch's current stream of that device and ordered after the copy without a
            host wait, written into a new torch tensor (normalised by kiln's fused kernel when
            ``normalize`` is given for uint8 HWC data: crop and flip then run on the GPU too,
            with the same draws as on the CPU). The tensors are torch's own (allocated on the
            current stream), so they stay valid as long as you keep them; no ``.to(device)``,
            no host synchronisation per step. Nothing is created on another GPU (the device is
            made current for every kiln call). Without a usable GPU it raises
            ``kiln.NotSupportedError`` (a ``KilnError``) saying why ("no GPU: no NVIDIA
            driver/GPU found ..."). Not yet run on a GPU: see BENCHMARKS.md, "GPU upload".
        rank, world_size: this process's share of each epoch for distributed training. Default
            (None) from the launcher's environment, in this order: ``RANK``/``WORLD_SIZE``
            (torchrun), ``OMPI_COMM_WORLD_RANK``/``_SIZE`` (Open MPI), ``PMI_RANK``/``PMI_SIZE``
            (MPICH, Intel MPI), ``SLURM_PROCID``/``SLURM_STEP_NUM_TASKS`` inside an ``srun``
            step; else 0 and 1 (reader/world.h). The source is logged once per process. Every rank sees the same permutation and takes every
            ``world_size``-th sample; every rank gets ``len(loader)`` batches.
        crop: random crop to ``(height, width)`` (or an int for a square) at read time,
            reproducible from ``(seed, epoch, sample)``. Default None.
        flip: random horizontal flip with probability 1/2. Default False.
        random_resized_crop, scale, ratio: torchvision's ``RandomResizedCrop(size, scale,
            ratio)`` at read time (``(height, width)`` or an int; excludes ``crop``): the box
            drawn by torchvision's get_params algorithm from (seed, epoch, sample), resized
            bilinearly as ``resized_crop(..., BILINEAR, antialias=False)`` (reader/augmenter.h);
            uint8 and float32 data; always on the CPU, also with ``device``/``normalize``.
            Default None (off), scale (0.08, 1.0), ratio (3/4, 4/3).
        interpolation: RandomResizedCrop's resampling: ``"bilinear"`` (above) or ``"area"``,
            ``torch.nn.functional.interpolate(mode="area")`` on the box (each output pixel the
            mean of the box pixels its window covers), for boxes much larger than the output,
            where bilinear without antialiasing aliases. Default "bilinear".
        center_crop, center_crop_ratio: the evaluation transform (torchvision's ``Resize(256)``
            + ``CenterCrop(224)``, FFCV's ``CenterCropRGBImageDecoder``): the largest box of the
            output's aspect ratio, each side times ``center_crop_ratio``, centred, resized
            bilinearly to ``center_crop`` (``(height, width)`` or an int). Excludes ``crop`` and
            ``random_resized_crop``; on the CPU. Default None (off), ratio 224/256.
            A dataset of JPEG records (``kiln pack --codec jpeg``) needs ``random_resized_crop``
            or ``center_crop``: its images differ in size, and kiln decodes each one (with
            libjpeg-turbo, at a reduced IDCT scale when the output is small) straight into the
            batch at that size; without either, opening it raises kiln.InvalidArgumentError
            saying so.
        normalize: ``(mean, std)``, each a number or one value per channel, in [0, 1] units as
            in torchvision: yields ``float32`` ``(x / 255 - mean) / std`` for ``uint8`` data
            (``(x - mean) / std`` for float data), computed as ``x * float32(1/255)``, minus
            mean, divided by std, each rounded in float32 (so the CPU path and kiln's GPU kernel
            give the same bits). On the CPU in torch or NumPy; with ``device="cuda"`` in kiln's
            fused kernel (uint8 HWC data; other data: in torch on the GPU).
        dtype: with ``normalize``, the output dtype: ``torch.float32`` (default) or
            ``torch.float16`` (round to nearest even, on the CPU as on the GPU).
        copy: yield batches that own their memory (see "Lifetime"). Default False.
        tail: what happens to the samples that do not split evenly over ``world_size`` ranks:
            ``"short"`` (default; a rank with a smaller share gets a shorter last batch),
            ``"drop"`` (skip them) or ``"pad"`` (repeat samples from the start, as PyTorch's
            ``DistributedSampler`` does). See ``reader/sampler.h``.
        backend: ``None`` (torch when importable, else NumPy), ``"torch"`` or ``"numpy"``.
        stats_dir, stats_interval: export ``stats()`` every ``stats_interval`` seconds (0.01 to
            86400; default 10) while the loader lives, for ``kiln stats`` and Prometheus: one
            JSON line appended to ``stats_dir/kiln-stats-rank{rank}.jsonl`` and the text file
            ``stats_dir/kiln-stats-rank{rank}.prom`` rewritten, by a thread of the loader that
            never blocks fetching; a last line when the loader is destroyed
            (reader/stats_export.md). None: the environment variables ``KILN_STATS_DIR`` and
            ``KILN_STATS_INTERVAL`` when set (no code change needed), else no export. A
            directory that cannot be created or written raises ``kiln.KilnIOError`` naming it.
        cache_dir, cache_bytes: a dataset at a URL (``s3://``, ``https://``): keep its shards'
            bytes in the local directory ``cache_dir`` (shared by the processes that name it, at
            most ``cache_bytes`` bytes of it used; None or 0: what the file system allows, always
            leaving min(1 GiB, 5%) free). A thread downloads the shards in dataset order until
            the cache is full, then keeps what it holds: later epochs and later jobs read those
            pieces from local disk (``stats()["request_cache_bytes"]``), the rest from the
            network (reader/remote/disk_cache.md). None: ``KILN_REMOTE_CACHE_DIR`` /
            ``KILN_REMOTE_CACHE_BYTES`` when set, else no cache. Ignored for local datasets.
        hedge_p95_multiple, hedge_min_ms: a dataset at a URL: a range GET still running after
            max(hedge_min_ms, hedge_p95_multiple x the p95 latency) gets a second identical
            request and the first to finish wins (at most one read in ten; 0 turns it off).
            None: ``KILN_REMOTE_HEDGE_P95_MULTIPLE`` / ``KILN_REMOTE_HEDGE_MIN_MS``, else 3 and
            100 ms (reader/remote/remote.md, "Hedged requests").

    Errors:
        kiln.NotFoundError: no such directory, or no ``kiln.json`` in it.
        kiln.CorruptionError: a damaged file at open (size, header, footer); or, during
            iteration, a damaged record: raised by the step that reaches its batch, naming the
            file, record and byte offset. The next step continues with the following batch.
        kiln.InvalidArgumentError (a ``ValueError``): an option out of range (named); for a
            mixture, datasets whose sample schemas differ (both named, and the field), weights
            or repeats whose count differs from the datasets' or not all > 0, both given, or
            ``shuffle="block"``.
        kiln.NotSupportedError: ``device="cuda"`` without a usable GPU (or without torch).

    Threads. The GIL is released while a step waits for its batch (and while copying), so
    Python threads run in parallel with the fetch threads. Use one loader from one thread at a
    time. A fetch thread that cannot be started (a process or thread limit: ``ulimit -u``, a
    container's pids limit, an address-space limit) raises ``kiln.KilnIOError`` naming the
    limit and saying to lower ``num_threads``; batch slots that cannot be allocated raise
    ``kiln.OutOfRangeError`` saying to lower ``prefetch`` or ``batch_size``.

    Processes. A loader belongs to the process that created it: ``os.fork()`` copies its
    memory but not its fetch threads. In a forked child (``multiprocessing`` with the ``fork``
    start method, the workers of ``torch.utils.data.DataLoader(num_workers>0)`` on Linux) every
    step raises ``kiln.NotSupportedError`` (a ``RuntimeError``) at once, naming both processes;
    it never hangs and never yields the parent's batches. The parent's loader is unaffected.
    Cures: create the loader in the process that reads from it (in a ``DataLoader`` worker, in
    ``worker_init_fn`` or on first use inside the worker, with ``rank``/``world_size`` from
    ``torch.utils.data.get_worker_info()`` to split the samples among workers); use the
    ``spawn`` or ``forkserver`` start method; or, simplest, ``num_workers=0``: the loader's own
    threads already read in parallel. A loader cannot be pickled (``TypeError``), so the
    ``spawn`` method refuses to send one to a child: send its path and options instead.
    """

    def __init__(self, path: PathLike, batch_size: int = 256,
                 shuffle: Union[bool, str] = True, seed: int = 0, drop_last: bool = False,
                 num_threads: int = 0, prefetch: int = 2, pin_memory: bool = True,
                 device: Optional[str] = None, rank: Optional[int] = None,
                 world_size: Optional[int] = None, crop: Union[None, int, Sequence[int]] = None,
                 flip: bool = False, normalize: Optional[Normalize] = None, copy: bool = False,
                 tail: str = "short", backend: Optional[str] = None, block_bytes: int = 4 << 20,
                 window: int = 16, read_ahead_bytes: int = 16 << 20,
                 dtype: Any = None, io: str = "auto",
                 random_resized_crop: Union[None, int, Sequence[int]] = None,
                 scale: Sequence[float] = (0.08, 1.0),
                 ratio: Sequence[float] = (3.0 / 4.0, 4.0 / 3.0),
                 interpolation: str = "bilinear",
                 center_crop: Union[None, int, Sequence[int]] = None,
                 center_crop_ratio: float = 224.0 / 256.0,
                 weights: Optional[Sequence[float]] = None,
                 repeats: Optional[Sequence[float]] = None,
                 samples_per_epoch: Optional[int] = None,
                 stats_dir: Optional[PathLike] = None,
                 stats_interval: Optional[float] = None,
                 cache_dir: Optional[PathLike] = None, cache_bytes: Optional[int] = None,
                 hedge_p95_multiple: Optional[float] = None,
                 hedge_min_ms: Optional[int] = None) -> None:
        paths, is_mixture = _paths(path)
        #: Every dataset's path (one for a loader over one dataset).
        self.paths: List[str] = paths
        #: The ``path`` argument as given (a str, or the list of a mixture's paths).
        self.path: Union[str, List[str]] = paths if is_mixture else paths[0]
        self._mixture_args = _mixture_args(is_mixture, len(paths), weights, repeats,
                                           samples_per_epoch)
        if backend not in (None, "torch", "numpy"):
            raise ValueError(f"backend must be None, 'torch' or 'numpy', got {backend!r}")
        self._torch: Any = None if backend == "numpy" else _import_torch()
        if backend == "torch" and self._torch is None:
            raise ImportError("kiln.Loader(backend='torch') needs torch, which is not importable")
        self._options = loader_options(
            batch_size=batch_size, shuffle=shuffle, seed=seed, drop_last=drop_last,
            num_threads=num_threads, prefetch=prefetch, pin_memory=pin_memory, rank=rank,
            world_size=world_size, crop=crop, flip=flip, random_resized_crop=random_resized_crop,
            scale=scale, ratio=ratio, interpolation=interpolation, center_crop=center_crop,
            center_crop_ratio=center_crop_ratio, tail=tail, block_bytes=block_bytes,
            window=window, read_ahead_bytes=read_ahead_bytes, io=io,
            stats_dir=stats_dir, stats_interval=stats_interval, cache_dir=cache_dir,
            cache_bytes=cache_bytes, hedge_p95_multiple=hedge_p95_multiple,
            hedge_min_ms=hedge_min_ms)
        if not isinstance(copy, bool):
            raise ArgumentTypeError(f"copy must be a bool, got {type(copy).__name__}")
        self._device = self._check_device(device)
        if self._device is not None:
            self._options.device = self._device_index
            kernel_augment = _cuda.plan(self, normalize)
        elif pin_memory:
            self._options.pin_device = _cuda.pin_device(self._torch)
        self._core = self._make_core(self._options)
        self.shuffle: str = self._options.shuffle
        self._copy = copy
        self._normalize = self._check_normalize(normalize)
        self._out_dtype = self._check_dtype(dtype)
        self._kernel: Any = None  # device="cuda" + normalize on uint8 HWC: kiln's fused kernel
        self.batch_size: int = self._options.batch_size
        self.rank: int = self._options.rank
        self.world_size: int = self._options.world_size
        if self._device is not None:
            _cuda.setup(self, normalize, kernel_augment, self._options.seed)
        # The epoch counter is the C++ loader's (Loader::BeginEpoch); Python keeps only a
        # set_epoch() request for the next loop and which iterator is the current one.
        self._requested_epoch: Optional[int] = None
        self._looped = False        # a loop has started: `epoch` is the C++ loader's
        self._generation = 0
        self._lock = threading.Lock()

    @property
    def options(self) -> "_core.LoaderOptions":
        """A copy of the ``kiln::LoaderOptions`` this loader was made with."""
        return self._options.copy()

    def __reduce__(self) -> Any:
        raise TypeError(
            "a kiln.Loader cannot be pickled: it owns fetch threads and batch memory of this "
            "process. Send the dataset path and options to the other process and create the "
            "Loader there (for a DataLoader: on first use inside the worker, or num_workers=0)")

    # -- configuration --------------------------------------------------------------------

    def _make_core(self, options: "_core.LoaderOptions") -> "_core.Loader":
        if self._mixture_args is None:
            return _core.Loader(self.paths[0], options)
        weights, repeats, samples_per_epoch = self._mixture_args
        return _core.Loader(self.paths, weights, repeats, samples_per_epoch, options)

    def _check_device(self, device: Optional[str]) -> Any:
        self._device_index = -1
        if device is None:
            return None
        name = str(device)
        if name == "cpu":
            return None
        if not name.startswith("cuda"):
            raise ValueError(f"device must be None, 'cpu', 'cuda' or 'cuda:N', got {device!r}")
        torch_device, self._device_index = _cuda.check_device(self._torch, name)
        return torch_device

    def _check_dtype(self, dtype: Any) -> str:
        if dtype is None:
            return "float32"
        name = str(dtype).replace("torch.", "")
        if name not in ("float32", "float16"):
            raise ValueError(f"dtype must be torch.float32 or torch.float16, got {dtype!r}")
        if self._normalize is None:
            raise ValueError("dtype applies to normalize's output; give normalize=(mean, std)")
        return name

    def _check_normalize(self, normalize: Optional[Normalize]) -> Any:
        if normalize is None:
            return None
        try:
            mean, std = normalize
        except (TypeError, ValueError):
            raise ValueError("normalize must be (mean, std)") from None
        channels = self.sample_shape[-1 if self.layout == "hwc" else 0]
        as_list = []
        for name, v in (("mean", mean), ("std", std)):
            values = [float(x) for x in v] if hasattr(v, "__iter__") else [float(v)]
            if len(values) == 1:
                values = values * channels
            if len(values) != channels:
                raise ValueError(f"normalize {name} has {len(values)} values; the samples have "
                                 f"{channels} channels")
            as_list.append(values)
        if any(s == 0 for s in as_list[1]):
            raise ValueError("normalize std must not be 0")
        self._normalize_values = (as_list[0], as_list[1])
        scale = 1.0 / 255.0 if self.dtype == "uint8" else 1.0
        shape = (channels,) if self.layout == "hwc" else (channels, 1, 1)
        if self._torch is not None:
            t = self._torch
            mean_t = t.tensor(as_list[0], dtype=t.float32).reshape(shape)
            std_t = t.tensor(as_list[1], dtype=t.float32).reshape(shape)
            if self._device is not None:
                mean_t, std_t = mean_t.to(self._device), std_t.to(self._device)
        else:
            import numpy as np
            mean_t = np.asarray(as_list[0], dtype=np.float32).reshape(shape)
            std_t = np.asarray(as_list[1], dtype=np.float32).reshape(shape)
        return scale, mean_t, std_t

    # -- properties -----------------------------------------------------------------------

    def __len__(self) -> int:
        """Batches per epoch on this rank (the same on every rank)."""
        return len(self._core)

    @property
    def samples_per_epoch(self) -> int:
        """Samples this rank reads per epoch (padding included with tail="pad")."""
        return self._core.samples_per_epoch

    @property
    def num_samples(self) -> int:
        """Samples in the dataset (a mixture: in all its datasets together)."""
        return self._core.num_samples

    @property
    def classes(self) -> List[str]:
        """Class names: label i is classes[i]. A mixture: the datasets' shared class names;
        raises ValueError when they differ (each dataset's are ``mixture["classes"][s]``)."""
        mixture = self._core.mixture
        if mixture is None:
            return self._core.classes
        per_source: List[List[str]] = mixture["classes"]
        if any(c != per_source[0] for c in per_source):
            from ._errors import InvalidArgumentError
            raise InvalidArgumentError(
                "the mixture's datasets have different class names (labels are each dataset's "
                "own): use loader.mixture['classes'][source]")
        return per_source[0]

    @property
    def mixture(self) -> Optional[Dict[str, Any]]:
        """None for a loader over one dataset; for a mixture a dict of lists, one entry per
        dataset: ``paths``, ``num_samples`` (its samples), ``quotas`` (samples drawn from it
        per epoch, all ranks together; they sum to ``samples_per_epoch``), ``classes``; and
        ``samples_per_epoch`` (the epoch's samples, all ranks together)."""
        mixture: Optional[Dict[str, Any]] = self._core.mixture
        return mixture

    @property
    def sample_shape(self) -> Tuple[int, ...]:
        """Shape of one sample as yielded before any normalize: (H, W, C) or (C, H, W)."""
        shape: Tuple[int, ...] = self._core.sample_schema["shape"]
        return shape

    @property
    def dtype(self) -> str:
        """Stored dtype name of the samples: "uint8", "float16" or "float32"."""
        dtype: str = self._core.sample_schema["dtype"]
        return dtype

    @property
    def layout(self) -> str:
        """"hwc" or "chw"."""
        layout: str = self._core.sample_schema["layout"]
        return layout

    @property
    def num_threads(self) -> int:
        """Fetch threads actually running."""
        return self._core.num_threads

    @property
    def pinned(self) -> bool:
        """True when the batch slots are pinned (page-locked) memory."""
        return self._core.pinned

    @property
    def io_path(self) -> str:
        """How the fetch threads read records: ``"mmap"`` (copies from the file mappings),
        ``"direct"`` (O_DIRECT reads through io_uring) or ``"remote"`` (range GETs: a dataset at
        a URL, or a mixture with a source at one); never ``"auto"``: what ``io="auto"`` chose
        (C++ ``Loader::io_path()``; README, "Data larger than memory")."""
        path: str = self._core.io_path
        return path

    @property
    def io_reason(self) -> str:
        """Why that I/O path was chosen (C++ ``Loader::io_reason()``), e.g. ``"io mmap asked"``,
        ``"dataset of 2063 MiB > half the memory limit of 512 MiB"`` or why direct reads were
        not possible (``"io_uring_queue_init: Operation not permitted"``)."""
        reason: str = self._core.io_reason
        return reason

    @property
    def epoch(self) -> Optional[int]:
        """The epoch of the current (or last) loop; None before the first loop."""
        return self._core.epoch if self._looped else None

    def set_epoch(self, epoch: int) -> None:
        """Makes the next ``for`` loop (``iter()``) run epoch ``epoch`` (>= 0)."""
        if isinstance(epoch, bool) or not hasattr(epoch, "__index__"):
            raise ArgumentTypeError(f"epoch must be an int, got {type(epoch).__name__}")
        epoch = epoch.__index__()
        if not 0 <= epoch < 1 << 64:
            from ._errors import InvalidArgumentError
            raise InvalidArgumentError(f"epoch {epoch} is out of range [0, 2**64)")
        with self._lock:
            self._requested_epoch = epoch

    def key(self, index: int, source: Optional[int] = None) -> str:
        """Returns sample ``index``'s key: its source path relative to the packed folder. A
        mixture of several datasets needs ``source`` (``batch_sources()``): the key of sample
        ``index`` of that dataset."""
        key: str = self._core.key(index, source)
        return key

    def batch_indices(self) -> Optional["numpy.ndarray[Any, Any]"]:
        """Returns the dataset indices of the batch last yielded (NumPy int64 [B], a copy), or
        None between epochs. In a mixture each index is within the sample's own dataset
        (``batch_sources()``)."""
        return self._core.indices()

    def batch_sources(self) -> Optional["numpy.ndarray[Any, Any]"]:
        """Returns each sample's dataset in the batch last yielded: its position in the list of
        paths given to the loader (NumPy int64 [B], a copy; all 0 for a loader over one
        dataset), or None between epochs."""
        return self._core.sources()

    def batch_is_padding(self) -> Optional["numpy.ndarray[Any, Any]"]:
        """Returns which samples of the batch last yielded are padding (tail="pad"), as a NumPy
        bool [B] copy, or None between epochs."""
        return self._core.is_padding()

    def stats(self) -> Dict[str, Any]:
        """A snapshot of the reader's counters since the loader was created (``Loader::stats``
        in reader/loader.h), as a flat dict; cheap (a copy under the loader's mutex) and safe to
        call from any thread while batches are fetched. Integers, times in nanoseconds, summed
        over the fetch threads; every counter only grows.

        The counters of the statistics export (reader/stats_export.md, same names):
        ``batches``, ``samples``, ``bytes`` (delivered to this loop); ``consumer_wait_ns`` (the
        loop waited for data); ``fetch_ns`` (fetch threads filling batches), ``fetch_cpu_ns``
        (their CPU time), ``slot_wait_ns`` (waiting for a free slot: the loop is slower);
        ``decompress_ns`` and ``zstd_records``; ``augment_ns`` (crop/flip, estimated);
        ``chunks``; ``read_ahead_bytes``, ``residency_probes``, ``residency_misses`` (page-cache
        residency, mmap path); ``direct_reads``, ``direct_read_bytes`` (direct path);
        ``uploads``, ``upload_bytes``, ``upload_wait_ns`` (device batches); for datasets at a URL
        ``requests`` (attempts), ``request_retries``, ``request_failures``, ``request_bytes``,
        ``request_hedges`` and ``request_hedge_wins`` (hedged requests for the slow tail),
        ``request_latency_p50_ns``, ``request_latency_p99_ns`` (over all attempts so far).
        Derived stage times: ``storage_ns`` (``fetch_ns - fetch_cpu_ns``: off the CPU, reading
        storage) and ``copy_ns`` (``fetch_cpu_ns - decompress_ns - augment_ns``: checks, decode
        and copy). Also ``read_ahead_samples``, ``read_ahead_ns``,
        ``read_ahead_max_lead_samples``, ``direct_max_in_flight``; the local cache of a dataset
        at a URL (``cache_dir=``): ``request_cache_reads`` and ``request_cache_bytes`` (reads
        served from it, no request), ``remote_cache_pieces_held`` of
        ``remote_cache_pieces_total``, ``remote_cache_fill_done`` (bool) and
        ``remote_cache_fill_error`` (str, "" if none); and ``epoch`` (int) and ``io_path``
        (``"mmap"``, ``"direct"`` or ``"remote"``).

        To export these every few seconds to files that ``kiln stats`` and Prometheus read, give
        ``stats_dir=`` (and ``stats_interval=`` seconds, default 10) or set ``KILN_STATS_DIR``
        (and ``KILN_STATS_INTERVAL``) in the environment."""
        return self._core.stats()

    # -- checkpoint and resume ------------------------------------------------------------

    def state_dict(self) -> Dict[str, Any]:
        """Returns where the loader is in its stream, as a plain dict of ints, strings and bools
        (``torch.save``, ``json.dumps`` and ``torch.distributed.checkpoint`` store it), in the
        convention of torchdata's ``StatefulDataLoader``.

        Call it after the training step that used the last batch you took: that batch counts
        as consumed. Between loops it names the start of the epoch the next loop runs. Every
        rank returns the same dict (the position is global: after ``k`` steps the ranks
        together consumed the epoch's positions ``[0, k * batch_size * world_size)``), so save
        rank 0's. Its fields: ``epoch``, ``samples_consumed``, the options that fix the order
        (``seed``, ``shuffle``, ``block_samples``, ``window``), how the position was reached
        (``batch_size``, ``world_size``, ``tail``, ``drop_last``), augmentation (``crop``,
        ``flip``), the dataset (``num_samples``, ``dataset_fingerprint``: the manifest
        checksum), and the versions ``kiln_reader_state`` and ``order_version``. The binary
        form of the same state is 96 bytes (``reader/reader_state.md``). A mixture's state is
        version 2: ``num_samples`` is its samples per epoch, ``dataset_fingerprint`` the
        mixture's, and ``mixture_version`` and ``mixture_sources`` (per dataset its
        ``fingerprint``, ``num_samples`` and ``quota``) follow; 104 + 24 bytes per dataset.
        """
        self._core.check_process()
        with self._lock:
            requested = self._requested_epoch
        state: Dict[str, Any] = _core.state_to_dict(self._core.state())
        if requested is not None and not (state["epoch"] == requested and
                                          self._core.at_epoch_start):
            state["epoch"] = requested     # the next loop runs this epoch from its start
            state["samples_consumed"] = 0
        return state

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Makes the next loop resume where ``state_dict`` (from ``state_dict()``, possibly of
        another process or world size) left off, in O(1): no consumed batch is replayed.

        Build the loader with the same dataset, ``seed``, ``shuffle`` (and block options),
        ``crop`` and ``flip`` as the one that saved it. With the same ``world_size`` and
        ``batch_size`` the rest of the stream is byte-identical to a run that never stopped,
        whatever ``num_threads`` and ``prefetch``. With another world size or batch size
        (``shuffle="exact"`` or ``False``), the ranks split the epoch's remaining samples:
        every one is read exactly once (``tail="short"``). ``shuffle="block"`` restores
        mid-epoch only with the world size and batch size it was saved with. The next loop runs
        the saved epoch from the saved position (``set_epoch`` with that epoch keeps it;
        ``set_epoch`` with another epoch starts that one from its beginning); later loops start
        their epochs from the beginning.

        Raises ``kiln.InvalidArgumentError`` (a ``ValueError``) naming what differs: another
        dataset, seed, shuffle mode, block size, crop or flip, a missing or ill-typed field, or
        a block-order state on another world size; for a mixture also a state of one dataset
        (or the reverse), of another number of datasets, a dataset that is another one (named:
        "mixture source 1 (/data/b) is another dataset") or whose quota differs (other weights
        or samples_per_epoch); ``kiln.OutOfRangeError`` for a position past
        the end of its epoch; ``kiln.NotSupportedError`` for another state or order version.
        Old iterators stop working (they raise ``RuntimeError``).
        """
        if not isinstance(state_dict, dict):
            raise ArgumentTypeError(f"load_state_dict expects a dict from state_dict(), got "
                                    f"{type(state_dict).__name__}")
        options = self._options.copy()
        options.resume = _core.state_from_dict(state_dict)
        options.start_epoch = 0  # the state's epoch
        core = self._make_core(options)
        if self._kernel is not None:
            core.set_normalize(*self._kernel)
        with self._lock:
            self._core = core
            self._generation += 1
            self._requested_epoch = None

    # -- iteration ------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Tuple[Any, Any]]:
        self._core.check_process()  # in a forked child, before self._lock (the copy may hold it)
        with self._lock:
            requested, self._requested_epoch = self._requested_epoch, None
            self._generation += 1
            generation = self._generation
            self._looped = True
        if requested is not None:
            self._core.set_epoch(requested)  # free for a resumed epoch: its position is kept
            epoch = requested
        else:
            epoch = self._core.begin_epoch()
        return _EpochIterator(self, generation, epoch)

    def _apply_normalize(self, images: Any) -> Any:
        scale, mean, std = self._normalize
        if self._torch is not None:
            out = images.to(self._torch.float32, copy=True)  # never in place on a slot
            if scale != 1.0:
                out.mul_(scale)
            out = out.sub_(mean).div_(std)
            return out.half() if self._out_dtype == "float16" else out
        import numpy as np
        out = images.astype(np.float32)
        if scale != 1.0:
            out *= np.float32(scale)
        out -= mean
        out /= std
        return out.astype(np.float16) if self._out_dtype == "float16" else out

    def __repr__(self) -> str:
        return (f"kiln.Loader({self.path!r}, batch_size={self.batch_size}, "
                f"samples={self.num_samples}, batches_per_epoch={len(self)}, "
                f"rank={self.rank}, world_size={self.world_size}, "
                f"backend={'torch' if self._torch is not None else 'numpy'})")


class _EpochIterator:
    """One epoch of a Loader. Not a generator: after a step raises (a damaged record), the next
    step continues with the following batch."""

    def __init__(self, loader: Loader, generation: int, epoch: int) -> None:
        self._loader = loader
        self._generation = generation
        self._epoch = epoch
        self._done = False
        torch = loader._torch
        self._from_dlpack = torch.utils.dlpack.from_dlpack if torch is not None else None

    def __iter__(self) -> "_EpochIterator":
        return self

    def __len__(self) -> int:
        return len(self._loader)

    def __next__(self) -> Tuple[Any, Any]:
        loader = self._loader
        if self._done:
            raise StopIteration
        if self._generation != loader._generation:
            raise RuntimeError(f"this iterator over epoch {self._epoch} was superseded by a "
                               "newer iter(loader); one loop at a time per loader")
        loader._core.check_process()  # a forked child: raise before touching CUDA or locks
        if loader._device is not None:
            return self._next_device()
        item = loader._core.next(loader._copy, self._from_dlpack is not None)
        if item is None:
            self._done = True
            raise StopIteration
        images, labels = item
        if self._from_dlpack is not None:
            images = self._from_dlpack(images)
            labels = self._from_dlpack(labels)
        if loader._normalize is not None:
            images = loader._apply_normalize(images)
        return images, labels

    def _next_device(self) -> Tuple[Any, Any]:
        loader = self._loader
        item = _cuda.next_batch(loader)
        if item is None:
            self._done = True
            raise StopIteration
        images, labels = item
        if loader._normalize is not None and loader._kernel is None:
            images = loader._apply_normalize(images)
        return images, labels
