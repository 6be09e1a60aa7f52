"""`python -m gdpval.controller`: the same as `gdpval operator` (tests, debugging)."""

from __future__ import annotations

import sys

from gdpval.cli import main

if __name__ == "__main__":
    sys.argv[1:1] = ["operator"]
    main()
