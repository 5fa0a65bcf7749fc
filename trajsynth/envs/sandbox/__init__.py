"""Run untrusted code: ``Sandbox.run(code or argv, timeout, limits) -> SandboxResult``.

Isolation kinds, best first (``kind="auto"`` takes the first that comes up):

- ``namespace``: our own worker unshares network, mount and PID namespaces (plus a user
  namespace when not root) and pivots into a private root: the host's system folders
  (``/usr``, ``/lib``, ``/etc`` without its secrets) and the Python installation read-only,
  ``config.mounts`` read-only, a fresh ``/proc``, a minimal ``/dev`` and a private,
  size-limited ``/tmp`` that is the run folder. Nothing else of the host (its ``/tmp``, runs,
  caches, home, the project, its UNIX sockets) is reachable. Each run gets a user namespace of
  its own whose namespace limits are 0 and no capabilities, so it can neither nest a user
  namespace nor mount anything. Memory is limited for the whole execution by a cgroup of the
  worker's (v2 when the memory controller is delegated, else v1 when writable) or else by a
  watchdog that samples the execution's memory every 10 ms and kills it above the limit;
- ``bwrap``: bubblewrap, when the ``bwrap`` binary is installed and our own namespaces cannot
  start: the same private root, new user/network/PID/IPC/UTS namespaces, the watchdog;
- ``rlimit``: no namespaces available; only rlimits, a per-run uid (when root), a private
  temp folder and a scrubbed environment; memory per process only (the whole execution can
  hold up to ``max_processes × memory_mb``). ``auto`` warns once when it falls back here.
- ``docker``: a warm pool of containers (``network_mode="none"``, memory, CPU and pids
  limits), chosen only when asked for.

:meth:`Sandbox.info` says which isolation is in use and what each part of it is
(filesystem, network, memory, nested user namespaces); it is logged once when a sandbox
starts.

Every kind runs on warm workers (:mod:`.pool`): the isolation is set up once per worker and
each execution is a fork (Python code runs in the forked interpreter, without an interpreter
start-up), so short executions are cheap. Limits per execution: CPU time, address space,
file size, processes, open files, output size, and a wall-clock timeout that kills the whole
process group; anything left behind is killed before the next execution.

Example::

    with Sandbox() as sb:
        r = sb.run("print(1 + 1)")
        r.stdout, r.exit_code, r.isolation      # ('2\\n', 0, 'namespace')
        sb.run(["ls", "-la"], timeout=2).stdout
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import threading
import warnings
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from ...core.errors import ConfigError, SandboxError
from .base import Isolation, Limits, SandboxConfig, SandboxResult
from .pool import WorkerPool

__all__ = ["Isolation", "Limits", "Sandbox", "SandboxConfig", "SandboxResult", "describe"]

log = logging.getLogger("trajsynth.envs.sandbox")
_warned = threading.Event()


def _fallback_warning(reasons: list[str]) -> None:
    if _warned.is_set():
        return
    _warned.set()
    message = (
        "no namespace sandbox is available (" + "; ".join(reasons) + "); running code with "
        "rlimits only: no network or filesystem isolation"
    )
    warnings.warn(message, RuntimeWarning, stacklevel=3)
    log.warning(message)


def describe(info: dict[str, Any]) -> str:
    """One line from :meth:`Sandbox.info`."""
    return "; ".join(f"{k}: {v}" for k, v in info.items())


class Sandbox:
    """Runs code in the best available isolation (see the module docstring)."""

    def __init__(self, config: SandboxConfig | dict[str, Any] | None = None, **overrides: Any):
        try:
            if isinstance(config, SandboxConfig):
                self.config = config.model_copy(update=overrides) if overrides else config
            else:
                self.config = SandboxConfig.model_validate({**(config or {}), **overrides})
        except ValidationError as exc:
            raise ConfigError(f"invalid sandbox config: {exc.errors()[0]['msg']}") from exc
        self._pool: Any = None
        self._lock = threading.Lock()
        self.fallback_reasons: list[str] = []

    # -- selection ----------------------------------------------------------------------
    def _candidates(self) -> list[str]:
        if self.config.kind != "auto":
            return [self.config.kind]
        return ["namespace"] + (["bwrap"] if shutil.which("bwrap") else []) + ["rlimit"]

    def start(self) -> Sandbox:
        """Bring up the isolation now (otherwise the first run does)."""
        with self._lock:
            if self._pool is not None:
                return self
            for kind in self._candidates():
                if kind == "rlimit" and self.config.kind == "auto":
                    _fallback_warning(self.fallback_reasons)
                pool: Any
                if kind == "docker":
                    from .docker import DockerPool

                    pool = DockerPool(self.config)
                else:
                    pool = WorkerPool(kind, self.config)
                try:
                    pool.start()
                except SandboxError as exc:
                    if self.config.kind != "auto":
                        raise
                    self.fallback_reasons.append(str(exc))
                    continue
                self._pool = pool
                self.isolation_info = dict(pool.info)
                log.info("sandbox: %s", describe(self._info()))
                return self
            raise SandboxError("no sandbox could start: " + "; ".join(self.fallback_reasons))

    def info(self) -> dict[str, Any]:
        """What the executions get (starts the sandbox if needed): ``isolation`` and, per
        part, what holds it: ``filesystem``, ``network``, ``memory``, ``nested_userns``,
        ``proc``; plus ``fallback_reasons`` when ``auto`` had to skip a stronger kind."""
        self.start()
        return self._info()

    def _info(self) -> dict[str, Any]:
        keys = ("isolation", "filesystem", "network", "memory", "nested_userns", "proc")
        out = {k: self.isolation_info[k] for k in keys if k in self.isolation_info}
        if self.fallback_reasons:
            out["fallback_reasons"] = list(self.fallback_reasons)
        return out

    @property
    def isolation(self) -> str:
        """The isolation kind in use (starts the sandbox if needed)."""
        self.start()
        return str(self.isolation_info.get("isolation"))

    # -- running ------------------------------------------------------------------------
    def run(
        self,
        code: str | Sequence[str],
        *,
        timeout: float | None = None,
        limits: Limits | dict[str, Any] | None = None,
        stdin: str = "",
        files: dict[str, str] | None = None,
        env: dict[str, str] | None = None,
    ) -> SandboxResult:
        """Run Python ``code`` (a string) or a command (``argv``, a list) and wait for it.

        ``files`` are written into the private work folder first (relative paths); ``env``
        adds variables to the scrubbed environment. Breaking a limit is a result
        (``timed_out``, ``killed_by``), not an exception; :class:`SandboxError` means the
        sandbox itself could not run.
        """
        self.start()
        if isinstance(limits, dict):
            limits = Limits.model_validate({**self.config.limits.model_dump(), **limits})
        lim = limits or self.config.limits
        timeout = float(timeout if timeout is not None else self.config.timeout_s)
        req: dict[str, Any] = {
            "timeout": timeout,
            "limits": lim.model_dump(),
            "stdin": stdin,
            "files": files or {},
            "env": env or {},
        }
        if isinstance(code, str):
            req["code"] = code
        else:
            req["argv"] = [str(a) for a in code]
            if not req["argv"]:
                raise SandboxError("empty argv")
        resp = self._pool.run(req, timeout)
        isolation = str(self.isolation_info.get("isolation"))
        if resp is None:
            return SandboxResult(
                exit_code=None,
                timed_out=False,
                killed_by="worker_died",
                stderr="the sandbox worker died or stopped answering",
                isolation=isolation,
            )
        if "error" in resp and "exit_code" not in resp:
            raise SandboxError(f"sandbox worker failed: {resp['error']}")
        fields = {k: v for k, v in resp.items() if k in SandboxResult.model_fields}
        return SandboxResult(**fields, isolation=isolation)

    async def arun(self, code: str | Sequence[str], **kwargs: Any) -> SandboxResult:
        """:meth:`run` in a thread, for async stages (as many at once as there are workers)."""
        return await asyncio.to_thread(self.run, code, **kwargs)

    def close(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None

    def __enter__(self) -> Sandbox:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort at interpreter exit
        with contextlib.suppress(Exception):
            self.close()
