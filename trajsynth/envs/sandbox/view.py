"""A private view of the host for long-lived commands (MCP servers): the launcher
(:mod:`._view`) and whether this machine can make one.

``view_argv(spec)`` is the command line that runs ``spec["argv"]`` through the launcher:
always killed with trajsynth (with every process it starts) and, with ``namespace``, in
private mount and PID namespaces where everything but its private copies is read-only.
``namespace_view()`` says once per process whether that works here (root, or unprivileged
user namespaces, and a kernel that mounts them), and why not.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["LAUNCHER", "namespace_view", "view_argv"]

LAUNCHER = Path(__file__).resolve().with_name("_view.py")


def view_argv(spec: dict[str, Any], python: str | None = None) -> list[str]:
    """The argv that starts ``spec["argv"]`` through the launcher."""
    return [python or sys.executable, "-I", "-S", str(LAUNCHER), json.dumps(spec)]


@functools.cache
def namespace_view() -> tuple[bool, str]:
    """(whether a namespace view can be made here, why not)."""
    if not sys.platform.startswith("linux"):
        return False, "not Linux"
    try:
        proc = subprocess.run(
            view_argv({"probe": True, "namespace": True}),
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    if proc.returncode == 0:
        return True, ""
    return False, (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
