"""kiln.Loader(device="cuda"): the reader's own upload and fused kernel, handed to torch.

The C++ loader (reader/loader.h, "Device batches") uploads each batch from pinned slots on its own
CUDA stream as soon as the batch is filled. Each step, ``_core.Loader.next_device`` makes torch's
current stream of the loader's device wait for that upload (``Batch::WaitOn``: an event, no host
wait), then on that stream either runs the fused normalise/crop/flip kernel
(reader/normalize_kernel.h) or copies the uploaded bytes into tensors torch allocated on that
stream. So the tensors are torch's own memory, ordered on torch's stream, valid for as long as
they are kept; the loader reuses its device buffer only after the work torch's stream had queued
when the batch was released (the next step, ``iter(loader)`` or ``set_epoch``), and a host slot
only after its copy is done (so ``break`` and a new loop are safe). kiln makes the device current
for each of its calls and restores the caller's, creating nothing on another GPU.
"""

from typing import Any, Dict, Optional, Tuple

from . import _core
from ._errors import NotSupportedError


def check_device(torch: Any, name: str) -> Tuple[Any, int]:
    """Returns (torch.device, index) for ``name`` ("cuda" / "cuda:N"), or raises
    NotSupportedError saying why no GPU can be used."""
    reason = _core.cuda_unavailable_reason()
    if reason:
        raise NotSupportedError(f"kiln.Loader(device={name!r}): no GPU: {reason}. Use "
                                "device=None for CPU batches.")
    if torch is None:
        raise NotSupportedError(f"kiln.Loader(device={name!r}) needs torch with CUDA; torch is "
                                "not importable (the NumPy backend yields CPU arrays only)")
    if not torch.cuda.is_available():
        raise NotSupportedError(f"kiln.Loader(device={name!r}): kiln sees a GPU but this torch "
                                "has no CUDA (torch.cuda.is_available() is False)")
    device = torch.device(name)
    index = device.index if device.index is not None else torch.cuda.current_device()
    if not 0 <= index < torch.cuda.device_count():
        raise ValueError(f"kiln.Loader(device={name!r}): no such device "
                         f"({torch.cuda.device_count()} devices)")
    return torch.device("cuda", index), index


def pin_device(torch: Any) -> int:
    """The device to allocate pinned CPU-batch slots on (LoaderOptions.pin_device): torch's
    current device when torch has initialised CUDA (so a DDP rank on cuda:N that called
    torch.cuda.set_device gets no context on GPU 0: kiln's CUDA runtime may keep its own current
    device, 0, apart from torch's, as torch often loads its own libcudart), else -1 (kiln's
    current device)."""
    if torch is None or not hasattr(torch, "cuda"):
        return -1
    try:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            return int(torch.cuda.current_device())
    except (RuntimeError, AssertionError):  # a torch built without CUDA, or a broken driver
        pass
    return -1


_TORCH_DTYPES = {"uint8": "uint8", "float16": "float16", "float32": "float32"}


def plan(loader: Any, normalize: Any) -> Tuple[int, int, bool]:
    """Before the core loader is opened on the device: when the fused kernel will apply
    (normalize on uint8 HWC data), moves the crop and flip out of the CPU loader's options into
    the kernel, so that the core loader is opened once, with the options it keeps. Returns the
    (crop_h, crop_w, flip) asked for, which setup() hands to the kernel when it applies.

    Only a crop or flip makes the choice matter before the open; then the dataset's stored
    schema (a crop keeps its dtype and layout) is read from a ``_core.Dataset``, which opens the
    files but starts no threads and allocates no batch slots."""
    options = loader._options
    if (options.resize_height or options.resize_width or options.center_crop_height
            or options.center_crop_width):
        # RandomResizedCrop, the center crop and their flip stay on the CPU loader. The C++ kernel
        # can resize bilinearly (reader/normalize_kernel.h), but set_normalize does not pass a
        # resize yet, and JPEG-record datasets (records of differing sizes) need the CPU path.
        return (0, 0, False)
    augment = (options.crop_height, options.crop_width, options.flip)
    if normalize is None or not any(augment):
        return augment
    if not _kernel_applies(_core.Dataset(loader.paths[0]).sample_schema):
        return augment  # the CPU loader crops and flips
    options = options.copy()
    options.crop_height, options.crop_width, options.flip = 0, 0, False  # in the kernel
    loader._options = options
    return augment


def _kernel_applies(schema: Dict[str, Any]) -> bool:
    return bool(schema["dtype"] == "uint8" and schema["layout"] == "hwc")


def setup(loader: Any, normalize: Any, augment: Tuple[int, int, bool], seed: int) -> None:
    """After the core loader is open on the device: the fused kernel when it applies (normalize
    on uint8 HWC data, with the crop and flip ``augment`` that plan() took from the CPU loader),
    and the shape and dtype of the tensors each step writes."""
    torch = loader._torch
    schema = loader._core.sample_schema
    if normalize is not None and _kernel_applies(schema):
        crop_h, crop_w, flip = augment
        mean, std = loader._normalize_values
        loader._kernel = (mean, std, loader._out_dtype, crop_h, crop_w, flip, seed)
        shape = loader._core.set_normalize(*loader._kernel)
        loader._gpu_shape = (loader.batch_size,) + tuple(shape)
        loader._gpu_dtype = getattr(torch, loader._out_dtype)
    else:
        loader._gpu_shape = (loader.batch_size,) + tuple(schema["shape"])
        loader._gpu_dtype = getattr(torch, _TORCH_DTYPES[schema["dtype"]])


def next_batch(loader: Any) -> Optional[Tuple[Any, Any]]:
    """One step on the device: (images, labels) tensors on loader._device, or None at the end
    of the epoch."""
    torch = loader._torch
    device = loader._device
    stream = torch.cuda.current_stream(device)
    with torch.cuda.device(device):
        images = torch.empty(loader._gpu_shape, dtype=loader._gpu_dtype, device=device)
        labels = torch.empty((loader.batch_size,), dtype=torch.int64, device=device)
    n = loader._core.next_device(stream.cuda_stream, images.data_ptr(), labels.data_ptr())
    if n < 0:
        return None
    if n < loader.batch_size:
        images, labels = images[:n], labels[:n]
    return images, labels
