"""A root runner's sandbox over the full runtime is not host root either: the runtime, unpacked under
root's private home, is read by the dropped uid all the same, and /etc/shadow and /etc/gshadow stay
unreadable (the host runtime's twin is in tests/security/test_root_runner.py)."""

from __future__ import annotations

from gdpval.sandbox import runtime
from support.attacks import READ_ROOT_ONLY, assert_root_only_files_refused


def test_root_only_files_are_refused_in_the_full_runtime(run_script) -> None:
    full = runtime.current()
    assert full is not None and full.root is not None, f"no full runtime in {runtime.runtimes_dir()}: {runtime.BUILD_IT}"
    run = run_script([{"bash": READ_ROOT_ONLY + "; soffice --version | head -c 11"}], 0, "--sandbox-runtime", str(full.root.parent))
    assert "sandbox runtime: full sandbox image" in run.stderr
    assert_root_only_files_refused(run)
    assert run.tool_results()[0].rstrip().splitlines()[-2] == "LibreOffice", run.tool_results()
