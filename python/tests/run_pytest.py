#!/usr/bin/env python3
"""CTest entry for the Python package's tests: runs pytest over python/tests, or skips cleanly
(exit 0 with a message) when pytest is not installed (Debian: python3-pytest). Tests that need
torch or torchvision skip themselves when those are absent."""
import os
import sys


def main():
    try:
        import pytest
    except ImportError:
        print("python_tests: SKIPPED: pytest is not importable (install python3-pytest)")
        return 0
    here = os.path.dirname(os.path.abspath(__file__))
    return pytest.main(["-q", "-p", "no:cacheprovider", "-rs", here] + sys.argv[1:])


# A child started by multiprocessing's spawn method imports this module again as __mp_main__:
# it must not run the suite a second time.
if __name__ == "__main__":
    sys.exit(main())
