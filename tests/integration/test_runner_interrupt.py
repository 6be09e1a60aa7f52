"""Ctrl-C reaches a runner whose main thread waits on a sample, even when a worker thread takes the signal."""

from __future__ import annotations

import subprocess
import sys

from support.processes import interruptible

SCRIPT = """
import signal, threading, time
from concurrent.futures import ThreadPoolExecutor
from gdpval.runner.local import _result

def sample():
    time.sleep(1)  # the main thread is in its wait by then
    signal.pthread_kill(threading.get_ident(), signal.SIGINT)  # the kernel may pick any thread
    time.sleep(60)

pool = ThreadPoolExecutor(1)
try:
    _result(pool.submit(sample))
except KeyboardInterrupt:
    print("interrupted", flush=True)
    import os; os._exit(130)
"""


def test_a_sigint_taken_by_a_worker_thread_still_interrupts_the_wait():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=30, preexec_fn=interruptible)
    assert (done.returncode, done.stdout) == (130, "interrupted\n"), done.stderr
