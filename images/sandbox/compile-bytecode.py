"""Compile every module under the given folders to bytecode, hash-based and unchecked.

The image's root is read-only in a sandbox, so what is not compiled here is compiled again by every
Python start that imports it. Unchecked hash-based files hold no timestamp (the layer is the same on
every build) and spare each import a stat of its source. Files that are not Python 3 (a few packages
ship Python 2 examples) cannot compile and are skipped: no import can reach them either.
"""

import compileall
import py_compile
import sys

for folder in sys.argv[1:]:
    compileall.compile_dir(folder, quiet=2, workers=0, force=True, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
