"""`python -m gdpval.api`: write the CRDs to `crds/`, or with `--check` fail when one is stale."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gdpval.api.crd import RESOURCES, render_all, render_crd


def default_dir() -> Path:
    """`crds/` at the repository root (this file lives in operator/gdpval/api/)."""
    return Path(__file__).resolve().parents[3] / "crds"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gdpval.api", description="Write or check the GdpvalRun and GdpvalPool CRDs.")
    parser.add_argument("--dir", type=Path, default=default_dir(), help="Folder of the CRD files (default: crds/).")
    parser.add_argument("--check", action="store_true", help="Fail if a file differs from the models.")
    parser.add_argument("--stdout", action="store_true", help="Print the CRDs instead of writing them.")
    args = parser.parse_args(argv)
    if args.stdout:
        sys.stdout.write(render_all())
        return 0
    stale = 0
    for resource in RESOURCES:
        path, text = args.dir / resource.file, render_crd(resource)
        if args.check:
            if (path.read_text() if path.exists() else "") != text:
                print(f"{path} is stale: run `python -m gdpval.api`", file=sys.stderr)
                stale = 1
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path}")
    return stale


if __name__ == "__main__":
    sys.exit(main())
