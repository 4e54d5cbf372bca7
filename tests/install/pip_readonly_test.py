#!/usr/bin/env python3
"""CTest entry B62_PipInstallFromAReadOnlyTree: `pip install --no-build-isolation --no-index` from a
source tree mounted read-only. With KILN_BUILD_DIR naming a writable build folder it installs
and nothing lands in the tree (egg-info, build/, __pycache__, setuptools' build folders: the
mount refuses any write); without KILN_BUILD_DIR it fails with an error that names the tree and
the variable.

    pip_readonly_test.py SOURCE_DIR BUILD_DIR

The read-only view is a bind mount of a copy of the packaging files (root only: it skips,
saying so, where mount is refused). BUILD_DIR is the suite's build, so pip relinks at most."""
import os
import shutil
import subprocess
import sys
import tempfile

FILES = ("setup.py", "pyproject.toml", "README.md", "CMakeLists.txt")


def run(cmd, **kwargs):
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, **kwargs)


def main():
    source, build = (os.path.abspath(a) for a in sys.argv[1:3])
    if subprocess.run(["/usr/bin/python3", "-c", "import pip, venv"]).returncode != 0:
        print("B62_PipInstallFromAReadOnlyTree: SKIPPED: /usr/bin/python3 has no pip or venv")
        return 77  # a skip (SKIP_RETURN_CODE): nothing was checked
    tmp = tempfile.mkdtemp(prefix="kiln-ro-")
    tree = os.path.join(tmp, "src")
    mounted = False
    try:
        os.makedirs(tree)
        for f in FILES:
            shutil.copy2(os.path.join(source, f), tree)
        shutil.copytree(os.path.join(source, "python"), os.path.join(tree, "python"),
                        ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyc"))
        before = sorted(os.path.relpath(os.path.join(d, n), tree)
                        for d, ds, fs in os.walk(tree) for n in ds + fs)
        if run(["mount", "--bind", tree, tree]).returncode != 0:
            print("B62_PipInstallFromAReadOnlyTree: SKIPPED: cannot bind-mount (needs root)")
            return 77  # a skip (SKIP_RETURN_CODE): nothing was checked
        mounted = True
        if run(["mount", "-o", "remount,ro,bind", tree]).returncode != 0:
            print("B62_PipInstallFromAReadOnlyTree: SKIPPED: cannot remount read-only")
            return 77  # a skip (SKIP_RETURN_CODE): nothing was checked
        if os.access(tree, os.W_OK):
            print(f"B62_PipInstallFromAReadOnlyTree: FAILED: {tree} is still writable after the remount")
            return 1
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "PYTHONHOME", "KILN_BUILD_DIR")}
        env.update(PIP_NO_INPUT="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
        venv = os.path.join(tmp, "venv")
        run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", venv], env=env,
            check=True)
        pip = [os.path.join(venv, "bin", "python"), "-m", "pip", "install",
               "--no-build-isolation", "--no-index", tree]
        # Without KILN_BUILD_DIR: refused, naming the tree and the variable.
        r = run(pip, env=env, cwd=tmp, capture_output=True, text=True)
        out = r.stdout + r.stderr
        if r.returncode == 0 or tree not in out or "KILN_BUILD_DIR" not in out:
            print(out)
            print("B62_PipInstallFromAReadOnlyTree: FAILED: without KILN_BUILD_DIR pip should fail "
                  f"naming {tree} and KILN_BUILD_DIR (exit {r.returncode})")
            return 1
        # With it: installed, and importable from the venv.
        r = run(pip, env=dict(env, KILN_BUILD_DIR=build), cwd=tmp)
        if r.returncode != 0:
            print("B62_PipInstallFromAReadOnlyTree: FAILED: pip install with KILN_BUILD_DIR set")
            return 1
        run([os.path.join(venv, "bin", "python"), "-c", "import kiln._core"], env=env, cwd=tmp,
            check=True)
        after = sorted(os.path.relpath(os.path.join(d, n), tree)
                       for d, ds, fs in os.walk(tree) for n in ds + fs)
        if after != before:
            print("B62_PipInstallFromAReadOnlyTree: FAILED: the tree changed:",
                  sorted(set(after) ^ set(before)))
            return 1
        print("B62_PipInstallFromAReadOnlyTree: installed from a read-only tree; without "
              "KILN_BUILD_DIR the error names the tree and the variable")
        return 0
    finally:
        if mounted:
            subprocess.run(["umount", tree])
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
