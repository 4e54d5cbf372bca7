"""PEP 517 build backend of the kiln package: setuptools.build_meta, with the build tools that
setup.py runs (cmake, ninja; pybind11's CMake config) added to the build requirements only when
this machine lacks them, so an offline machine with Debian's packages needs nothing from an
index and a machine with an index gets what it is missing."""
import os
import shutil
import sys
from typing import Any, Dict, List, Optional

from setuptools import build_meta as _orig
from setuptools.build_meta import *  # noqa: F401,F403  (the PEP 517 hooks we do not override)

sys.dont_write_bytecode = True  # no __pycache__ for setup_cmake: the tree may be read-only
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import setup_cmake  # noqa: E402


def _extra_requires() -> List[str]:
    extra = []
    if shutil.which("cmake") is None:
        extra.append("cmake>=3.22")
    if shutil.which("ninja") is None:
        extra.append("ninja")
    if setup_cmake.system_pybind11_dir() is None:
        extra.append("pybind11>=2.10")
    return extra


def get_requires_for_build_wheel(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return list(_orig.get_requires_for_build_wheel(config_settings)) + _extra_requires()


def get_requires_for_build_editable(
        config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return list(_orig.get_requires_for_build_editable(config_settings)) + _extra_requires()
