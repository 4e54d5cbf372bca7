#!/usr/bin/env python3
"""Start-up cost of the `kiln` command line: two binaries run in turn, A B A B ..., each as a
whole process, and the median wall and CPU time (user + sys, from the kernel's rusage) of each
with the median of the per-pair ratios A/B.

  bench/startup_time.py [--rounds 40] OLD_KILN NEW_KILN -- ARGS...
  bench/startup_time.py /tmp/old/kiln build/tools/kiln -- inspect /tmp/fm

Prints one table; the command's own output is discarded (it must exit 0).
"""
import argparse
import os
import statistics
import subprocess
import sys
import time


def run_once(binary, args):
    """Runs BINARY ARGS; returns (wall seconds, cpu seconds)."""
    start = time.perf_counter()
    proc = subprocess.Popen([binary] + args, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"{binary} {' '.join(args)} exited {proc.returncode}")
    return wall, usage.ru_utime + usage.ru_stime


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--rounds", type=int, default=40)
    argv = sys.argv[1:]
    if "--" not in argv:
        parser.error("give the subcommand to time after --")
    split = argv.index("--")
    opts = parser.parse_args(argv[:split])
    args = argv[split + 1:]
    for binary in (opts.old, opts.new):  # warm-up: page cache, dynamic loader cache
        run_once(binary, args)
    old, new = [], []
    for _ in range(opts.rounds):
        old.append(run_once(opts.old, args))
        new.append(run_once(opts.new, args))
    med = statistics.median
    print(f"kiln {' '.join(args)}: {opts.rounds} rounds, old and new alternating")
    print("| | old | new | old/new (median of pairs) |")
    print("| --- | --- | --- | --- |")
    for i, name in ((0, "wall"), (1, "cpu (user+sys)")):
        ratio = med(a[i] / b[i] for a, b in zip(old, new) if b[i] > 0)
        print(f"| {name}, median | {med(a[i] for a in old) * 1e3:.1f} ms "
              f"| {med(b[i] for b in new) * 1e3:.1f} ms | {ratio:.1f}x |")


if __name__ == "__main__":
    main()
