"""Running the server: :func:`serve` in this process until a signal, or
:func:`spawn_server`, a ``trajsynth serve`` subprocess (tests, benchmarks, scripts)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from dataclasses import dataclass
from typing import Any

from ..base import Backend
from .chat import ChatServer
from .options import ServerOptions


def serve(
    backend: Backend,
    options: ServerOptions,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    use_uvloop: bool = True,
    on_ready: Any = None,
) -> None:
    """Run the server until SIGINT/SIGTERM. ``on_ready(host, port)`` is called once listening."""

    async def main() -> None:
        server = ChatServer(backend, options)
        bound = await server.start(host, port)
        if on_ready is not None:
            on_ready(*bound)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):  # non-POSIX
                loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await server.close()

    if use_uvloop:
        try:
            import uvloop

            uvloop.run(main())
            return
        except ImportError:
            pass
    asyncio.run(main())


#: what ``trajsynth serve`` prints, followed by its base URL, once it accepts requests
READY_LINE = "listening on "


@dataclass
class ServeProcess:
    """A ``trajsynth serve`` running in a subprocess (see :func:`spawn_server`)."""

    proc: Any  # subprocess.Popen[str]
    base_url: str  # http://HOST:PORT/v1

    def metrics(self) -> dict[str, Any]:
        """The server's ``/metrics`` counters."""
        import urllib.request

        url = self.base_url.rsplit("/v1", 1)[0] + "/metrics"
        with urllib.request.urlopen(url, timeout=10) as r:
            return json.loads(r.read())

    def stop(self) -> None:
        import subprocess

        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> ServeProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def spawn_server(*args: str, host: str = "127.0.0.1", timeout: float = 120.0) -> ServeProcess:
    """Start ``trajsynth serve --host HOST --port 0 ARGS`` (a free port) in a subprocess of
    this interpreter and wait until it listens; its stderr is in the error if it does not.
    ``with spawn_server("--backend", "sim") as server: ... server.base_url``."""
    import os
    import subprocess
    import sys
    import threading
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[3])  # the folder holding the package
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(
        [sys.executable, "-m", "trajsynth", "serve", "--host", host, "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    line: list[str] = []
    stdout, stderr = proc.stdout, proc.stderr
    assert stdout is not None and stderr is not None  # both piped
    reader = threading.Thread(target=lambda: line.append(stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    if not line or READY_LINE not in line[0]:
        proc.kill()
        err = proc.stderr.read() if proc.stderr else ""
        raise RuntimeError(f"trajsynth serve did not start: {line} {err[-2000:]}")
    # stderr is not read while it runs: keep it from filling the pipe
    threading.Thread(target=stderr.read, daemon=True).start()
    return ServeProcess(proc=proc, base_url=line[0].strip().split(READY_LINE, 1)[1])
