"""Compile the modules under the given folders to bytecode, hash-based and unchecked.

The image's root is read-only in a sandbox, so what is not compiled here is compiled again by every
Python start that imports it. Unchecked hash-based files hold no timestamp (the layer is the same on
every build) and spare each import a stat of its source. A module that already has such a file is
left alone, so a later stage (full-torch on full) writes only its own packages' bytecode, not a second
copy of everything below it; timestamp-based files (pip's own, from `pip check`) are replaced. Files
that are not Python 3 (a few packages ship Python 2 examples) cannot compile and are skipped: no
import can reach them either.
"""

import compileall
import importlib.util
import py_compile
import sys

UNCHECKED_HASH = 0b01  # the flags word of a pyc header (PEP 552): hash-based, source not checked


class Compiled:
    """Passed as compileall's `rx`: a match means skip, here a module whose bytecode is already hash-based."""

    def search(self, source: str) -> bool:
        try:
            with open(importlib.util.cache_from_source(source), "rb") as pyc:
                return int.from_bytes(pyc.read(8)[4:], "little") == UNCHECKED_HASH
        except OSError:
            return False


for folder in sys.argv[1:]:
    compileall.compile_dir(folder, quiet=2, workers=0, rx=Compiled(), force=True, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
