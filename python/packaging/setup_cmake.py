"""Building kiln's extensions (kiln._core, kiln._tools) through the project's CMake build, for
setup.py.

Environment:
    KILN_BUILD_DIR     an existing or new CMake build folder to build in (absolute, or relative
                       to the repository root), e.g. the build/ of scripts/setup.sh: only the
                       two extension targets are (re)built there, so an installed package is
                       the same binary as the build tree's; setuptools' scratch files go to its
                       setuptools/ subfolder. Nothing else is written under the source tree, so
                       a read-only tree installs with KILN_BUILD_DIR set to a writable folder.
                       Default: build/python-package.
    KILN_CMAKE_ARGS    extra arguments for the first configure of a new build folder.
    CMAKE_BUILD_PARALLEL_LEVEL   jobs for the build (default: CMake's).
"""
import glob
import os
import shlex
import shutil
import subprocess
import sys
from typing import List, Optional

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
EXTENSIONS = ("_core", "_tools")


def system_pybind11_dir() -> Optional[str]:
    """pybind11's CMake config directory: Debian's pybind11-dev, else the pybind11 Python
    package's (pip), else None."""
    for d in ("/usr/lib/cmake/pybind11", "/usr/share/cmake/pybind11",
              "/usr/local/lib/cmake/pybind11"):
        if os.path.isfile(os.path.join(d, "pybind11Config.cmake")):
            return d
    try:
        import pybind11  # type: ignore[import]
    except ImportError:
        return None
    return str(pybind11.get_cmake_dir())


def version() -> str:
    """kiln's version: project(kiln VERSION ...) of the root CMakeLists.txt (the one place)."""
    import re
    with open(os.path.join(ROOT, "CMakeLists.txt"), encoding="utf-8") as f:
        m = re.search(r"project\(kiln\s+VERSION\s+([0-9.]+)", f.read())
    if not m:
        raise RuntimeError("kiln: no project(kiln VERSION ...) in CMakeLists.txt")
    return m.group(1)


def build_dir() -> str:
    d = os.environ.get("KILN_BUILD_DIR", os.path.join("build", "python-package"))
    return d if os.path.isabs(d) else os.path.join(ROOT, d)


def scratch_dir() -> str:
    """setuptools' build folder (egg-info, build/lib, bdist): BUILD_DIR/setuptools, created.
    Raises SystemExit naming the tree and KILN_BUILD_DIR when it cannot be created (a read-only
    source tree without KILN_BUILD_DIR)."""
    d = os.path.join(build_dir(), "setuptools")
    try:
        os.makedirs(d, exist_ok=True)
    except OSError as e:
        where = "KILN_BUILD_DIR" if "KILN_BUILD_DIR" in os.environ else \
            f"the source tree {ROOT} (no KILN_BUILD_DIR set)"
        raise SystemExit(f"kiln: cannot create the build folder {d} in {where}: {e.strerror}. "
                         "To install from a read-only source tree, set KILN_BUILD_DIR to a "
                         "writable folder (e.g. KILN_BUILD_DIR=/tmp/kiln-build pip install ...)")
    return d


def build_extensions() -> List[str]:
    """Configures (once) and builds the extension targets; returns their paths."""
    cmake = shutil.which("cmake")
    if cmake is None:
        raise RuntimeError("kiln: cmake is not on PATH (Debian: apt-get install cmake; or let "
                           "pip install it from an index without --no-build-isolation)")
    out = build_dir()
    if not os.path.isfile(os.path.join(out, "CMakeCache.txt")):
        args = [cmake, "-S", ROOT, "-B", out, "-DCMAKE_BUILD_TYPE=Release",
                f"-DPython3_EXECUTABLE={sys.executable}", "-DKILN_BUILD_PYTHON=ON",
                "-DKILN_BUILD_TESTS=OFF"]
        if shutil.which("ninja"):
            args += ["-G", "Ninja"]
        pybind11_dir = system_pybind11_dir()
        if pybind11_dir:
            args.append(f"-Dpybind11_DIR={pybind11_dir}")
        args += shlex.split(os.environ.get("KILN_CMAKE_ARGS", ""))
        print("kiln: configuring", out, flush=True)
        subprocess.run(args, check=True)
    # _tools (kiln.pack) exists where OpenCV and the tools layer are configured.
    listing = subprocess.run([cmake, "--build", out, "--target", "help"], check=True,
                             capture_output=True, text=True).stdout
    targets = [t for t in EXTENSIONS if any(line.split(":")[0].strip(" .") == t
                                            for line in listing.splitlines())]
    if "_core" not in targets:
        raise RuntimeError(f"kiln: {out} has no _core target (python3-dev, pybind11-dev and "
                           "libdlpack-dev are needed; see the configure output)")
    if "_tools" not in targets:
        print("kiln: no _tools target (no tools layer in this configuration): kiln.pack() "
              "will raise ImportError", flush=True)
    subprocess.run([cmake, "--build", out, "--target", *targets], check=True)
    paths = []
    for name in targets:
        found = glob.glob(os.path.join(out, "python", "kiln", name + ".*.so")) or \
            glob.glob(os.path.join(out, "python", "kiln", name + ".so"))
        if not found:
            raise RuntimeError(f"kiln: {name} was built but no {name}*.so is in {out}/python/kiln")
        paths.append(found[0])
    return paths
