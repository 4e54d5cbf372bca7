"""kiln.Loader(device="cuda"): the reader's own upload and fused kernel (kiln/_cuda.py).

Without a usable GPU the loader refuses with a KilnError that says so (runs everywhere). The GPU
tests compare every batch of two epochs with the CPU path bit for bit (normalise, crop and flip
in float32 and float16; raw uint8), including a loop broken off and restarted; they skip without
a GPU, and fail instead when KILN_REQUIRE_GPU=1 (scripts/gpu-check.sh runs them so: pytest -k
cuda). Not yet run on a GPU.
"""
import os

import pytest

import kiln

torch = pytest.importorskip("torch")

MEAN, STD = (0.2860,), (0.3530,)  # Fashion-MNIST's, in [0, 1] units as torchvision


def no_gpu_reason():
    reason = kiln._core.cuda_unavailable_reason()
    if not reason and not torch.cuda.is_available():
        reason = "torch has no CUDA"
    return reason


def require_gpu():
    reason = no_gpu_reason()
    if reason:
        if os.environ.get("KILN_REQUIRE_GPU", "0") not in ("", "0"):
            pytest.fail(f"KILN_REQUIRE_GPU is set and there is no GPU: {reason}")
        pytest.skip(f"no GPU: {reason}")


def test_cuda_without_gpu_raises_a_kiln_error(packed):
    reason = kiln._core.cuda_unavailable_reason()
    if not reason:
        pytest.skip("a GPU is usable here")
    for device in ("cuda", "cuda:0", "cuda:3"):
        with pytest.raises(kiln.NotSupportedError) as e:
            kiln.Loader(packed, device=device, normalize=(MEAN, STD))
        assert isinstance(e.value, kiln.KilnError)
        assert "no GPU" in str(e.value) and reason in str(e.value), str(e.value)
    with pytest.raises(ValueError, match="dtype"):
        kiln.Loader(packed, dtype=torch.float16)  # dtype without normalize


def test_cpu_normalize_float16_is_the_rne_of_float32(packed):
    a = kiln.Loader(packed, batch_size=50, num_threads=2, normalize=(MEAN, STD))
    b = kiln.Loader(packed, batch_size=50, num_threads=2, normalize=(MEAN, STD),
                    dtype=torch.float16)
    for (x, _), (y, _) in zip(a, b):
        assert y.dtype == torch.float16
        assert torch.equal(x.half(), y)


def epochs(loader, n, break_after=None):
    out = []
    for e in range(n):
        for k, (x, y) in enumerate(loader):
            out.append((x.cpu().clone(), y.cpu().clone()))
            if break_after is not None and e == 0 and k == break_after:
                break
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_cuda_normalize_crop_flip_bit_exact_with_cpu(packed, dtype):
    require_gpu()
    kw = dict(batch_size=64, num_threads=2, prefetch=2, seed=3, crop=24, flip=True,
              normalize=(MEAN, STD), dtype=dtype)
    cpu = epochs(kiln.Loader(packed, **kw), 2, break_after=4)
    gpu_loader = kiln.Loader(packed, device="cuda", **kw)
    gpu = epochs(gpu_loader, 2, break_after=4)
    assert len(gpu) == len(cpu)
    for (gx, gy), (cx, cy) in zip(gpu, cpu):
        assert gx.dtype == dtype
        # The CPU path yields HWC (28x28x1 stored HWC); the kernel writes CHW.
        assert torch.equal(gx, cx.permute(0, 3, 1, 2).contiguous())
        assert torch.equal(gy, cy)


def test_cuda_raw_uint8_equals_cpu_and_outlives_the_step(packed):
    require_gpu()
    kw = dict(batch_size=100, num_threads=2, prefetch=4, seed=1)
    cpu = epochs(kiln.Loader(packed, **kw), 2)
    loader = kiln.Loader(packed, device="cuda", **kw)
    kept = []
    for _ in range(2):
        for x, y in loader:
            assert x.device.type == "cuda" and x.dtype == torch.uint8
            kept.append((x, y))  # torch-owned: stays valid after later steps
    torch.cuda.synchronize()
    assert len(kept) == len(cpu)
    for (gx, gy), (cx, cy) in zip(kept, cpu):
        assert torch.equal(gx.cpu(), cx) and torch.equal(gy.cpu(), cy)


def test_cuda_other_device_creates_nothing_on_gpu_0(packed):
    require_gpu()
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    # A fresh process: the parent may already hold a context on GPU 0.
    import subprocess
    import sys
    code = (
        "import torch, kiln\n"
        f"l = kiln.Loader({packed!r}, device='cuda:1', batch_size=50, normalize=({MEAN}, {STD}))\n"
        "for x, y in l: pass\n"
        "del l\n"
        "import ctypes\n"
        "cuda = ctypes.CDLL('libcuda.so.1')\n"
        "flags, active = ctypes.c_uint(), ctypes.c_int()\n"
        "assert cuda.cuDevicePrimaryCtxGetState(0, ctypes.byref(flags), ctypes.byref(active)) == 0\n"
        "print('gpu0_active', active.value)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "gpu0_active 0" in out.stdout, out.stdout + out.stderr


def test_cpu_batches_pin_on_torchs_current_device(packed):
    # device=None with pin_memory: the slots are pinned with torch's current device current, and
    # only once torch has initialised CUDA; before that (and without CUDA) kiln's own current
    # device (-1).
    loader = kiln.Loader(packed, batch_size=50)
    expected = torch.cuda.current_device() if (
        torch.cuda.is_available() and torch.cuda.is_initialized()) else -1
    assert loader.options.pin_device == expected
    assert kiln.Loader(packed, batch_size=50, pin_memory=False).options.pin_device == -1
    assert kiln._cuda.pin_device(None) == -1


def test_cuda_rank_on_gpu_1_pins_nothing_on_gpu_0(packed):
    require_gpu()
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    # A DDP rank's pattern: set_device(1), CPU batches from kiln, .to() itself.
    import subprocess
    import sys
    code = (
        "import torch, kiln\n"
        "torch.cuda.set_device(1)\n"
        f"l = kiln.Loader({packed!r}, batch_size=50)\n"
        "assert l.pinned and l.options.pin_device == 1, (l.pinned, l.options.pin_device)\n"
        "for x, y in l: x.to('cuda:1', non_blocking=True)\n"
        "torch.cuda.synchronize()\n"
        "del l\n"
        "import ctypes\n"
        "cuda = ctypes.CDLL('libcuda.so.1')\n"
        "flags, active = ctypes.c_uint(), ctypes.c_int()\n"
        "assert cuda.cuDevicePrimaryCtxGetState(0, ctypes.byref(flags), ctypes.byref(active)) == 0\n"
        "print('gpu0_active', active.value)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "gpu0_active 0" in out.stdout, out.stdout + out.stderr
