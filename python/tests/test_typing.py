"""The package's type information (inline hints, the extensions' .pyi stubs, py.typed) checked
with Debian's mypy --strict on a user script, and a script with type errors is refused."""
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import kiln

GOOD = '''
import pathlib
from typing import Any, Dict, List, Optional, Tuple

import kiln


def train(path: pathlib.Path) -> Dict[str, Any]:
    report: Dict[str, Any] = kiln.pack("images", path, size=(28, 28), channels=1,
                                       mean=None, shard_size="64MiB", max_pixels=0)
    info: Dict[str, Any] = kiln.inspect(path)
    ok: bool = kiln.verify(str(path), deep=True)["ok"]
    names: List[str] = kiln.formats(compiled_only=False)
    loader = kiln.Loader(path, batch_size=64, shuffle="block", crop=(24, 24), flip=True,
                         normalize=(0.5, [0.25]), rank=None, world_size=1)
    steps: int = len(loader)
    for epoch in range(2):
        loader.set_epoch(epoch)
        for images, labels in loader:
            indices = loader.batch_indices()
            if indices is not None:
                first: int = int(indices[0])
    state: Dict[str, Any] = loader.state_dict()
    loader.load_state_dict(state)
    current: Optional[int] = loader.epoch
    shape: Tuple[int, ...] = loader.sample_shape
    ds = kiln.Dataset(path, backend="numpy")
    sample, label = ds[0]
    n: int = len(ds) + label
    key: str = ds.key(3)
    options = kiln.loader_options(batch_size=8)
    size: int = options.batch_size
    try:
        kiln.Loader(str(path), batch_size=0)
    except kiln.InvalidArgumentError as e:
        code: str = e.code
    except kiln.KilnError:
        pass
    version: str = kiln.__version__
    return state
'''

BAD = '''
import kiln

loader = kiln.Loader("/data", batch_size="64")
count: str = len(kiln.Dataset("/data"))
kiln.pack("in", "out", size=28, threads=2.5)
epoch: int = loader.epoch
'''


@pytest.fixture(scope="module")
def mypy_errors(tmp_path_factory):
    """{script name: [(line, message)]} from one mypy --strict run over both scripts."""
    if shutil.which("mypy") is None:
        pytest.skip("mypy is not installed (Debian: mypy)")
    tmp = tmp_path_factory.mktemp("mypy")
    for name, source in (("good.py", GOOD), ("bad.py", BAD)):
        (tmp / name).write_text(textwrap.dedent(source))
    # The kiln package the tests import: an installed one mypy finds through the interpreter's
    # site-packages (PEP 561: py.typed), or the build tree's, named with MYPYPATH.
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(kiln.__file__)))
    env = dict(os.environ)
    if os.path.basename(package_root) not in ("site-packages", "dist-packages"):
        env["MYPYPATH"] = package_root
    out = subprocess.run(
        ["mypy", "--strict", "--no-error-summary", "--cache-dir", str(tmp / "cache"),
         "--python-executable", sys.executable, "good.py", "bad.py"],
        capture_output=True, text=True, env=env, cwd=str(tmp), timeout=600)
    assert out.returncode in (0, 1), out.stdout + out.stderr
    errors = {"good.py": [], "bad.py": [], "other": []}
    for line in out.stdout.splitlines():
        if ": error:" not in line:
            continue
        path, number, message = line.split(":", 2)
        errors.get(path, errors["other"]).append((int(number), line))
    return errors


def test_user_script_passes_mypy_strict(mypy_errors):
    assert mypy_errors["good.py"] == [] and mypy_errors["other"] == [], mypy_errors


def test_type_errors_are_found(mypy_errors):
    # One error per wrong line (the script's lines 4 to 7), none elsewhere.
    assert {n for n, _ in mypy_errors["bad.py"]} == {4, 5, 6, 7}, mypy_errors["bad.py"]


def test_stubs_and_marker_ship_with_the_package():
    here = os.path.dirname(os.path.abspath(kiln.__file__))
    for name in ("py.typed", "_core.pyi", "_tools.pyi"):
        assert os.path.isfile(os.path.join(here, name)), name
