"""``python_exec``: a code-execution tool on the sandbox, usable in any domain.

The model sends Python source; it runs in :class:`~trajsynth.envs.sandbox.Sandbox` (no
network; a private file system: the system folders and Python read-only, nothing else of the
host, a private ``/tmp`` as working folder; a memory limit on the whole execution, other
resource limits and a wall-clock timeout) and the tool returns stdout, stderr, the exit code
and whether a limit stopped it. What the tool's description promises holds only with a
namespace isolation: with ``kind="rlimit"`` the host's files are readable.
The code's own failures (an exception, a timeout) are part of the output the model reads; a
sandbox that cannot run at all is an ``execution_failed`` tool error. The tool does not touch
the environment's state, so snapshots and state hashes are unaffected; record/replay
(:mod:`trajsynth.envs.recording`) keeps re-executions identical.
"""

from __future__ import annotations

from typing import Annotated, TypedDict

from ..core.errors import SandboxError
from .sandbox import Sandbox
from .state import State
from .tools import ToolError, ToolImpl, tool

__all__ = ["ExecOutput", "make_python_exec"]


class ExecOutput(TypedDict):
    stdout: Annotated[str, "What the code printed."]
    stderr: Annotated[str, "Error output (tracebacks)."]
    exit_code: Annotated[int | None, "0 on success; -N when killed by signal N."]
    timed_out: Annotated[bool, "True when the wall-clock timeout stopped the code."]
    killed_by: Annotated[str | None, "The limit that stopped it: timeout, cpu, memory, ..."]


#: the longest timeout a model may ask for
MAX_TIMEOUT_S = 30.0


def make_python_exec(sandbox: Sandbox) -> ToolImpl:
    """The ``python_exec`` tool bound to ``sandbox``."""

    @tool(name="python_exec")
    def python_exec(
        db: State,
        code: Annotated[str, "Python 3 source to run; print what you need to see."],
        timeout_s: Annotated[
            float, "Wall-clock limit in seconds.", {"minimum": 0.1, "maximum": MAX_TIMEOUT_S}
        ] = 5.0,
    ) -> ExecOutput:
        """Run Python code in an isolated sandbox (no network; no files but the standard
        library and a private, empty /tmp working folder) and return its output."""
        try:
            r = sandbox.run(code, timeout=timeout_s)
        except SandboxError as exc:
            raise ToolError("execution_failed", str(exc)) from exc
        return {
            "stdout": r.stdout,
            "stderr": r.stderr,
            "exit_code": r.exit_code,
            "timed_out": r.timed_out,
            "killed_by": r.killed_by,
        }

    return python_exec
