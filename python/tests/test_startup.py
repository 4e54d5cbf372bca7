"""What `import kiln` loads: the reader side (kiln._core: Loader, verify, inspect) maps no OpenCV
library; only kiln.pack (kiln._tools, the converter) does. Each check runs in a fresh
interpreter and reads its /proc/self/maps."""
import os
import subprocess
import sys


def _mapped_libraries(code):
    """Runs `code` in a new interpreter, then returns the file names mapped into it."""
    script = code + "\nprint('\\n'.join(sorted({l.split()[-1] for l in open('/proc/self/maps')"
    script += " if len(l.split()) >= 6})))"
    out = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True,
                         text=True, env=dict(os.environ)).stdout
    return [os.path.basename(p) for p in out.split()]


def test_reader_side_maps_no_opencv(packed):
    # NumPy batches: Debian's torch links OpenCV itself (libtorch -> libopencv_*), which says
    # nothing about kiln; the script fails if anything imported torch after all.
    libs = _mapped_libraries(
        "import sys, kiln\n"
        f"kiln.inspect({packed!r}); kiln.verify({packed!r})\n"
        f"n = sum(len(b[1]) for b in kiln.Loader({packed!r}, batch_size=250, num_threads=2,"
        " backend='numpy'))\n"
        "assert n == 1000 and 'torch' not in sys.modules, (n, 'torch' in sys.modules)")
    assert any(name.startswith("_core") for name in libs), libs  # the check sees the extension
    assert not [name for name in libs if "opencv" in name], libs


def test_pack_side_maps_opencv():
    libs = _mapped_libraries("import kiln._tools")
    assert [name for name in libs if name.startswith("libopencv_core")], libs
