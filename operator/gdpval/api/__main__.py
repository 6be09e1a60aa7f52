"""`python -m gdpval.api`: write the GdpvalRun CRD to `crds/`, or with `--check` fail when it is stale."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gdpval.api.crd import CRD_FILE, render_crd


def default_dir() -> Path:
    """`crds/` at the repository root (this file lives in operator/gdpval/api/)."""
    return Path(__file__).resolve().parents[3] / "crds"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gdpval.api", description="Write or check the GdpvalRun CRD.")
    parser.add_argument("--dir", type=Path, default=default_dir(), help="Folder of the CRD file (default: crds/).")
    parser.add_argument("--check", action="store_true", help="Fail if the file differs from the models.")
    parser.add_argument("--stdout", action="store_true", help="Print the CRD instead of writing it.")
    args = parser.parse_args(argv)
    text = render_crd()
    if args.stdout:
        sys.stdout.write(text)
        return 0
    path = args.dir / CRD_FILE
    if args.check:
        current = path.read_text() if path.exists() else ""
        if current != text:
            print(f"{path} is stale: run `python -m gdpval.api`", file=sys.stderr)
            return 1
        return 0
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
