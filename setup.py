"""setuptools glue for pyproject.toml: the package is python/kiln, and its two extensions are
built by CMake (python/packaging/setup_cmake.py), not by setuptools' compiler."""
import os
import shutil
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

sys.dont_write_bytecode = True  # no __pycache__ in python/packaging: the tree may be read-only
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "python", "packaging"))
import setup_cmake  # noqa: E402


class CMakeBuildExt(build_ext):
    """Builds every extension with one CMake build and copies the results into place."""

    def run(self) -> None:
        built = {os.path.basename(p).split(".")[0]: p for p in setup_cmake.build_extensions()}
        for ext in list(self.extensions):
            name = ext.name.rsplit(".", 1)[-1]
            if name not in built:  # no tools layer: kiln.pack() raises ImportError
                self.extensions.remove(ext)
                continue
            dest = self.get_ext_fullpath(ext.name)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            shutil.copyfile(built[name], dest)


# setuptools' scratch space (egg-info, build/lib, bdist) lives beside CMake's, never in the
# source tree's root: under KILN_BUILD_DIR where it is set, so a read-only tree stays untouched.
scratch = setup_cmake.scratch_dir()
setup(
    version=setup_cmake.version(),
    packages=["kiln"],
    package_dir={"kiln": "python/kiln"},
    package_data={"kiln": ["py.typed", "*.pyi"]},
    ext_modules=[Extension("kiln._core", sources=[]), Extension("kiln._tools", sources=[])],
    cmdclass={"build_ext": CMakeBuildExt},
    options={"build": {"build_base": scratch}, "egg_info": {"egg_base": scratch}},
    zip_safe=False,
)
