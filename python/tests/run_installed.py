#!/usr/bin/env python3
"""CTest entry python_installed: kiln as a user installs it. In a fresh virtual environment
(`/usr/bin/python3 -m venv --system-site-packages`, for Debian's torch, numpy and pytest) it runs
`pip install --no-build-isolation --no-index .`, checks that `import kiln` comes from the venv's
site-packages, runs the Python test suite against that installed package (no PYTHONPATH, not
from the source or build tree), builds a wheel with `python3 -m build --wheel --no-isolation`
and checks its contents, then `pip uninstall kiln` and checks that nothing is left.

    run_installed.py SOURCE_DIR BUILD_DIR

BUILD_DIR is handed to the package build as KILN_BUILD_DIR, so pip reuses the build's objects
(the extensions are the build tree's, relinked at most) instead of compiling kiln again."""
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile


def run(cmd, **kwargs):
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, check=True, **kwargs)


def main():
    source, build = (os.path.abspath(a) for a in sys.argv[1:3])
    try:
        import pytest  # noqa: F401
    except ImportError:
        print("python_installed: SKIPPED: pytest is not importable (install python3-pytest)")
        return 0
    for module in ("pip", "venv"):
        if subprocess.run(["/usr/bin/python3", "-c", f"import {module}"]).returncode != 0:
            print(f"python_installed: SKIPPED: /usr/bin/python3 has no {module} "
                  "(Debian: python3-pip, python3-venv)")
            return 0
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["KILN_BUILD_DIR"] = build
    env["PIP_NO_INPUT"] = "1"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    tmp = tempfile.mkdtemp(prefix="kiln-venv-")
    try:
        venv = os.path.join(tmp, "venv")
        run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", venv], env=env)
        py = os.path.join(venv, "bin", "python")
        run([py, "-m", "pip", "install", "--no-build-isolation", "--no-index", source],
            env=env, cwd=tmp)
        where = subprocess.run([py, "-c", "import kiln, kiln._core; print(kiln.__file__); "
                                "print(kiln._core.__file__)"], env=env, cwd=tmp, check=True,
                               capture_output=True, text=True).stdout.split()
        site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                              env=env, cwd=tmp, check=True, capture_output=True,
                              text=True).stdout.strip()
        print("python_installed: kiln from", where, flush=True)
        for path in where:
            if not path.startswith(os.path.join(site, "kiln") + os.sep):
                print(f"python_installed: FAILED: {path} is not in the venv's {site}")
                return 1
        # The suite against the installed package; conftest checks KILN_EXPECT_PACKAGE_DIR.
        test_env = dict(env, KILN_EXPECT_PACKAGE_DIR=os.path.join(site, "kiln"))
        if "KILN_CLI" in os.environ:
            test_env["KILN_CLI"] = os.environ["KILN_CLI"]
        tests = os.path.join(source, "python", "tests")
        code = subprocess.run([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", tests],
                              env=test_env, cwd=tmp).returncode
        if code != 0:
            print(f"python_installed: FAILED: the suite against the installed package: {code}")
            return 1
        # A wheel, as `python3 -m build --wheel` makes it (offline: --no-isolation).
        has_build = subprocess.run([py, "-c", "import build"], env=env).returncode == 0
        if has_build:
            dist = os.path.join(tmp, "dist")
            run([py, "-m", "build", "--wheel", "--no-isolation", "--outdir", dist, source],
                env=env, cwd=tmp)
            wheels = glob.glob(os.path.join(dist, "kiln-*.whl"))
            assert len(wheels) == 1, wheels
            names = set(zipfile.ZipFile(wheels[0]).namelist())
            for want in ("kiln/__init__.py", "kiln/py.typed", "kiln/_core.pyi", "kiln/_tools.pyi",
                         "kiln/_dataset.py"):
                assert want in names, (want, sorted(names))
            assert any(n.startswith("kiln/_core.") and n.endswith(".so") for n in names), names
            assert any(n.startswith("kiln/_tools.") and n.endswith(".so") for n in names), names
            print("python_installed: wheel", os.path.basename(wheels[0]), "ok", flush=True)
        else:
            print("python_installed: no python3-build: the wheel check was skipped")
        run([py, "-m", "pip", "uninstall", "-y", "kiln"], env=env, cwd=tmp)
        gone = subprocess.run([py, "-c", "import kiln"], env=env, cwd=tmp,
                              capture_output=True, text=True)
        left = glob.glob(os.path.join(site, "kiln*"))
        if gone.returncode == 0 or left:
            print(f"python_installed: FAILED: after pip uninstall: import ok={gone.returncode == 0}, "
                  f"left {left}")
            return 1
        print("python_installed: install, suite, wheel and uninstall: ok")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
