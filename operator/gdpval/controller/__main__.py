"""`python -m gdpval.controller`: run the operator without the `gdpval` CLI (tests, debugging)."""

from __future__ import annotations

import argparse
import logging

from gdpval.controller.operator import run_operator


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m gdpval.controller", description="Run the GdpvalRun operator.")
    parser.add_argument("--namespace", "-n", action="append", default=[], help="Namespace to watch (repeatable; none = all).")
    parser.add_argument("--metrics-port", type=int, default=8080, help="Port of /metrics and /healthz (0 = off).")
    parser.add_argument("--agent-image", help="Default agent image (or GDPVAL_AGENT_IMAGE).")
    parser.add_argument("--sandbox-image", help="Default sandbox image (or GDPVAL_SANDBOX_IMAGE).")
    parser.add_argument("--verbose", "-v", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)  # one line per handled event is noise
    run_operator(args.namespace, args.metrics_port or None, args.agent_image, args.sandbox_image)


if __name__ == "__main__":
    main()
