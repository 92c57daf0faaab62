"""Before a batch: can bubblewrap make the kernel's namespaces here, and can the kernel's Python
start in the sandbox the way every kernel will start?"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from .kernel_setup import LAUNCHER, kernel_python, sandbox_environment


def sandbox_available() -> bool:
    """True when bubblewrap can create the namespaces the kernel sandbox needs.

    It says nothing about whether a kernel can start in there: `kernel_start_problem` does.
    """
    if shutil.which("bwrap") is None:
        return False
    probe = os.system(
        "bwrap --ro-bind / / --unshare-pid --unshare-net --die-with-parent true >/dev/null 2>&1"
    )
    return probe == 0


def kernel_start_problem(limits, sandbox: bool) -> str | None:
    """Start the kernel's interpreter the way every kernel will start (sandbox, memory limit)
    and import ipykernel; None when that works, else what went wrong, for the instructor."""
    with tempfile.TemporaryDirectory(prefix="ch34-check-") as scratch:
        env = {**os.environ, **sandbox_environment(Path(scratch), limits.memory_bytes, sandbox)}
        run = subprocess.run(
            [kernel_python(), str(LAUNCHER), "--check"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    if run.returncode == 0:
        return None
    return (
        f"the kernel's Python ({kernel_python()}) could not start "
        f"{'inside bubblewrap' if sandbox else 'without a sandbox'} "
        f"(exit {run.returncode}): {run.stderr.strip()[-1500:] or 'no message'}"
    )
