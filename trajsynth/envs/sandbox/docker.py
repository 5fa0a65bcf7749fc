"""Docker sandbox: a warm pool of containers, one execution at a time per container.

Steps:

1) connect with the ``docker`` SDK (``docker.from_env()``) and ping the daemon; no package or
   no daemon is a :class:`SandboxError` with the reason (tests skip on it);
2) keep up to ``pool_size`` containers running ``sleep infinity`` from ``image`` with
   ``network_mode="none"``, a memory limit, a CPU quota (one CPU), a pids limit, a read-only
   root with a tmpfs work folder, every capability dropped, ``no-new-privileges``, and user
   nobody;
3) per execution: copy the request's files (and stdin) into a fresh folder under ``/work``
   with ``put_archive``, run ``sh -c 'ulimit ...; exec "$@" < stdin'`` under ``timeout -s
   KILL`` with ``exec_run``, read the exit code, and remove the folder; a container that died
   is replaced.
"""

from __future__ import annotations

import contextlib
import io
import queue
import shlex
import tarfile
import threading
import time
from typing import Any

from ...core.errors import SandboxError
from .base import SandboxConfig

__all__ = ["DockerPool"]

_TIMEOUT_EXIT = 137  # SIGKILL from `timeout -s KILL`


class DockerPool:
    """Warm containers (steps 1-3)."""

    def __init__(self, config: SandboxConfig) -> None:
        try:
            import docker
            from docker.errors import DockerException
        except ImportError as exc:
            raise SandboxError(
                "the docker sandbox needs the docker package",
                hint="pip install 'trajsynth[docker]'",
            ) from exc
        self._errors: tuple[type[BaseException], ...] = (DockerException,)
        try:
            self.client = docker.from_env(timeout=10)
            self.client.ping()
        except DockerException as exc:
            raise SandboxError(f"no Docker daemon answers: {exc}") from exc
        self.config = config
        self._idle: queue.LifoQueue[Any] = queue.LifoQueue()
        self._lock = threading.Lock()
        self._started = 0
        self._runs = 0
        self.info = {"isolation": "docker", "image": config.image}

    def _new_container(self) -> Any:
        lim = self.config.limits
        try:
            return self.client.containers.run(
                self.config.image,
                ["sleep", "infinity"],
                detach=True,
                network_mode="none",
                mem_limit=f"{lim.memory_mb}m",
                nano_cpus=1_000_000_000,
                pids_limit=lim.max_processes,
                read_only=True,
                tmpfs={"/work": f"size={self.config.tmpfs_mb}m,mode=1777", "/tmp": "size=16m"},
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                user="65534:65534",
                labels={"trajsynth.sandbox": "1"},
                auto_remove=True,
            )
        except self._errors as exc:
            raise SandboxError(f"cannot start a container from {self.config.image}: {exc}") from exc

    def _acquire(self) -> Any:
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            pass
        with self._lock:
            grow = self._started < max(1, self.config.pool_size)
            if grow:
                self._started += 1
        return self._new_container() if grow else self._idle.get()

    def start(self) -> None:
        self._idle.put(self._acquire())

    def run(self, req: dict[str, Any], timeout: float) -> dict[str, Any] | None:
        container = self._acquire()
        healthy = True
        try:
            return self._run(container, req, timeout)
        except self._errors:
            healthy = False
            return None
        finally:
            if healthy:
                self._idle.put(container)
            else:
                with self._lock:
                    self._started -= 1
                with contextlib.suppress(*self._errors):
                    container.remove(force=True)

    def _run(self, container: Any, req: dict[str, Any], timeout: float) -> dict[str, Any]:
        with self._lock:
            self._runs += 1
            run_dir = f"/work/run-{self._runs}"
        files = dict(req.get("files") or {})
        files[".stdin"] = req.get("stdin") or ""
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for rel, content in files.items():
                data = content.encode()
                info = tarfile.TarInfo(f"run-{self._runs}/{rel}")
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data))
        container.put_archive("/work", buf.getvalue())
        lim = req.get("limits") or {}
        argv = req.get("argv") or ["python", "-c", req.get("code", "")]
        ulimits = (
            f"ulimit -t {max(1, int(float(lim.get('cpu_seconds', 10)) + 0.999))}; "
            f"ulimit -f {int(lim.get('file_size_mb', 16)) * 1024}; "
            f"ulimit -n {int(lim.get('max_open_files', 256))}; "
            'exec "$@" < .stdin'
        )
        cmd = ["timeout", "-s", "KILL", f"{timeout:g}", "sh", "-c", ulimits, "sh", *argv]
        start = time.monotonic()
        res = container.exec_run(
            cmd, workdir=run_dir, environment=req.get("env") or {}, demux=True, user="65534"
        )
        duration = time.monotonic() - start
        container.exec_run(["rm", "-rf", run_dir], user="65534")
        out, err = res.output if isinstance(res.output, tuple) else (res.output, b"")
        cap = int(lim.get("output_bytes", 1_000_000))
        stdout, stderr = (out or b""), (err or b"")
        timed_out = res.exit_code == _TIMEOUT_EXIT and duration >= timeout * 0.95
        return {
            "stdout": stdout[:cap].decode("utf-8", "replace"),
            "stderr": stderr[:cap].decode("utf-8", "replace"),
            "exit_code": res.exit_code,
            "signal": 9 if res.exit_code == _TIMEOUT_EXIT else None,
            "timed_out": timed_out,
            "killed_by": "timeout" if timed_out else None,
            "duration_s": round(duration, 6),
            "stdout_truncated": len(stdout) > cap,
            "stderr_truncated": len(stderr) > cap,
            "command": shlex.join(cmd[:6]),
        }

    def close(self) -> None:
        while True:
            try:
                container = self._idle.get_nowait()
            except queue.Empty:
                break
            with contextlib.suppress(*self._errors):
                container.remove(force=True)
