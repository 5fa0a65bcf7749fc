"""The warm worker pool: pre-started, pre-isolated workers (``_worker.py``) that fork one
child per execution, so a short execution pays a fork, not an interpreter start.

Steps:

1) a *launcher* builds the worker's command line for an isolation kind: ``namespace`` (the
   worker unshares itself), ``bwrap`` (bubblewrap isolates it: read-only root, tmpfs,
   new namespaces, the worker as PID 1) or ``rlimit`` (no isolation);
2) a worker is started with an empty environment and answers a handshake saying whether its
   isolation came up; :meth:`WorkerPool.start` raises :class:`SandboxError` if not, which is
   how ``auto`` falls back from one kind to the next;
3) :meth:`WorkerPool.run` takes an idle worker (or starts one, up to ``size``), sends the
   request, and waits for the answer with a deadline of the execution's timeout plus a grace;
   a worker that dies or hangs is killed and replaced, and the execution is reported as
   ``killed_by="worker_died"``;
4) ``size=0`` means no warm workers: each execution gets a new worker (the cold path the
   benchmark measures) and stops it in the background;
5) new ``namespace`` and ``rlimit`` workers are forked from a *zygote*, a clean warmed-up
   process started once per pool, so a cold worker costs a fork and its isolation set-up
   rather than an interpreter start (``bwrap`` workers are exec'd by bubblewrap).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from ...core.errors import SandboxError
from . import _worker
from .base import SandboxConfig

__all__ = ["WORKER_PATH", "Worker", "WorkerPool", "worker_command"]

WORKER_PATH = Path(__file__).with_name("_worker.py")
_CLEAN_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
_HANDSHAKE_S = 10.0
#: what a worker that died during set-up without a word is reported as
_SILENT_EXIT = "the worker exited during set-up"
log = logging.getLogger("trajsynth.sandbox")
_GRACE_S = 5.0


#: imported once per warm worker in rlimit mode, where a run's uid may be unable to read the
#: standard library (a Python under /root); the namespace kinds expose the library instead
RLIMIT_PRELOAD = (
    "warnings", "socket", "json", "re", "math", "random", "collections", "itertools",
    "functools", "datetime", "decimal", "fractions", "statistics", "string", "textwrap",
    "traceback", "struct", "hashlib", "base64", "heapq", "bisect", "typing", "dataclasses",
    "csv", "copy", "subprocess", "pathlib", "tempfile", "shutil", "glob", "fnmatch",
)  # fmt: skip


def _worker_log() -> Any:
    """Where workers' own stderr goes: ``$TRAJSYNTH_SANDBOX_LOG`` (appended) when set, for
    debugging the sandbox itself; otherwise nowhere."""
    path = os.environ.get("TRAJSYNTH_SANDBOX_LOG")
    return open(path, "ab") if path else subprocess.DEVNULL


def worker_command(kind: str, scratch: str, config: SandboxConfig) -> list[str]:
    """Step 1: the command that starts one worker."""
    python = [config.python or sys.executable, "-I"] + ([] if config.site_packages else ["-S"])
    settings = worker_settings(kind, config)
    if kind == "bwrap":  # inside, the worker is PID 1: derive its runs' uid from the scratch
        settings["uid"] = _worker.UID_BASE + os.stat(scratch).st_ino % 100_000_000
    args = [str(WORKER_PATH), kind, scratch, json.dumps(settings)]
    if kind != "bwrap":
        return [*python, *args]
    bwrap = shutil.which("bwrap") or "bwrap"
    # the same private root as the namespace kind: host system paths read-only, /etc without
    # its secrets, the interpreter, the configured mounts, this worker script; own /tmp
    cmd = [bwrap]
    for kind_, path, target in _worker.root_plan(config.mounts, config.python):
        if kind_ == "bind":
            cmd += ["--ro-bind", path, path]
        elif kind_ == "symlink":
            cmd += ["--symlink", target, path]
        elif target == "dir":
            cmd += ["--tmpfs", path, "--remount-ro", path]
        else:
            cmd += ["--ro-bind", "/dev/null", path]
    cmd += [
        "--ro-bind", str(WORKER_PATH), str(WORKER_PATH),
        "--dev", "/dev",
        "--proc", "/proc",
        "--size", str(config.tmpfs_mb << 20), "--perms", "1777", "--tmpfs", "/tmp",
        "--remount-ro", "/",
        "--chdir", "/",
        "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
        "--unshare-cgroup-try",
        "--as-pid-1",
        "--new-session",
        "--clearenv",
        "--setenv", "PATH", _CLEAN_ENV["PATH"],
    ]  # fmt: skip
    # no --die-with-parent: it is tied to the *thread* that started bwrap, so a worker would
    # die with whichever thread happened to grow the pool; a worker ends at end of input
    if os.geteuid() == 0:  # stay real root inside (no user namespace), so runs get own uids
        cmd += ["--cap-add", "ALL"]
    else:
        cmd += ["--unshare-user"]
    return [*cmd, "--", *python, *args]


def _send(fd: int, obj: dict[str, Any]) -> None:
    data = json.dumps(obj).encode()
    view = memoryview(struct.pack(">I", len(data)) + data)
    while view:
        view = view[os.write(fd, view) :]


def _read(fd: int, n: int, deadline: float) -> bytes | None:
    buf = b""
    while len(buf) < n:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise TimeoutError
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def _recv(fd: int, deadline: float) -> dict[str, Any] | None:
    """One framed message, or None on EOF; TimeoutError past ``deadline``."""
    head = _read(fd, 4, deadline)
    if head is None:
        return None
    body = _read(fd, struct.unpack(">I", head)[0], deadline)
    return None if body is None else json.loads(body)


class Zygote:
    """A warmed-up process that forks new workers (``_worker.zygote``): a new namespace
    worker then costs a fork plus its isolation set-up, not an interpreter start."""

    def __init__(self, config: SandboxConfig) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        settings = {"preload": ["warnings"]}
        python = config.python or sys.executable
        cmd = [python, "-I", "-S", str(WORKER_PATH), "zygote", json.dumps(settings)]
        if config.site_packages:
            cmd.remove("-S")
        try:
            self.proc = subprocess.Popen(
                cmd,
                stdin=theirs.fileno(),
                stdout=subprocess.DEVNULL,
                stderr=_worker_log(),
                env=dict(_CLEAN_ENV),
                close_fds=True,
                start_new_session=True,
            )
        except OSError as exc:
            raise SandboxError(f"cannot start the sandbox zygote: {exc}") from exc
        finally:
            theirs.close()
        self.sock = ours
        self._lock = threading.Lock()
        ours.settimeout(_HANDSHAKE_S)
        try:
            hello = json.loads(ours.recv(65536) or b"{}")
        except (TimeoutError, OSError, ValueError):
            hello = {}
        if not hello.get("ready"):
            self.close()
            raise SandboxError("the sandbox zygote did not start")

    def spawn(self, kind: str, scratch: str, settings: dict[str, Any]) -> socket.socket:
        """A new worker; returns our end of its control socket."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        msg = json.dumps({"mode": kind, "scratch": scratch, "config": settings}).encode()
        try:
            with self._lock:
                socket.send_fds(self.sock, [msg], [theirs.fileno()])
        except OSError as exc:
            ours.close()
            raise SandboxError(f"the sandbox zygote is gone: {exc}") from exc
        finally:
            theirs.close()
        return ours

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        self.sock.close()
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def worker_settings(kind: str, config: SandboxConfig) -> dict[str, Any]:
    preload = ["warnings"] + (list(RLIMIT_PRELOAD) if kind == "rlimit" else [])
    return {
        "tmpfs_mb": config.tmpfs_mb,
        "preload": preload if config.pool_size else [],
        "mounts": [os.path.abspath(p) for p in config.mounts],
    }


class Worker:
    """One worker process and its control channel (pipes, or a socket from the zygote)."""

    def __init__(self, kind: str, config: SandboxConfig, zygote: Zygote | None = None) -> None:
        self.kind = kind
        self.scratch = tempfile.mkdtemp(prefix="trajsynth-sandbox-")
        os.chmod(self.scratch, 0o755)
        self.proc: subprocess.Popen[bytes] | None = None
        self.sock: socket.socket | None = None
        try:
            if zygote is not None:
                self.sock = zygote.spawn(kind, self.scratch, worker_settings(kind, config))
                self.in_fd = self.out_fd = self.sock.fileno()
            else:
                self.proc = subprocess.Popen(
                    worker_command(kind, self.scratch, config),
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=_worker_log(),
                    env=dict(_CLEAN_ENV),
                    close_fds=True,
                    start_new_session=True,
                )
                assert self.proc.stdin is not None and self.proc.stdout is not None
                self.in_fd = self.proc.stdin.fileno()
                self.out_fd = self.proc.stdout.fileno()
        except OSError as exc:
            self._remove_scratch()
            raise SandboxError(f"cannot start a {kind} sandbox worker: {exc}") from exc
        except SandboxError:
            self._remove_scratch()
            raise
        try:
            hello = _recv(self.out_fd, time.monotonic() + _HANDSHAKE_S)
        except TimeoutError:
            hello = {"ready": False, "error": "no handshake within 10 s"}
        # the host pid: of the process we started, or (from the zygote) the pid the worker
        # reported before entering its namespaces; never a pid from inside a namespace
        self.pid = self.proc.pid if self.proc is not None else int((hello or {}).get("pid") or 0)
        if not hello or not hello.get("ready"):
            self.kill()
            why = (hello or {}).get("error") or _SILENT_EXIT
            raise SandboxError(f"{kind} sandbox unavailable: {why}")
        self.info: dict[str, Any] = hello
        self.requests = 0
        self._dead = False

    def request(self, req: dict[str, Any], timeout: float) -> dict[str, Any] | None:
        """Send one execution; None if the worker died or hung (it is killed then)."""
        self.requests += 1
        try:
            _send(self.in_fd, req)
            resp = _recv(self.out_fd, time.monotonic() + timeout + _GRACE_S)
        except (TimeoutError, OSError):
            resp = None
        if resp is None:
            self.kill()
        return resp

    def alive(self) -> bool:
        if self._dead:
            return False
        if self.proc is not None:
            return self.proc.poll() is None
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return True

    def kill(self) -> None:
        if self.pid > 1 and self.pid != os.getpgrp():  # the worker leads its own session
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
        self._dead = True
        self._reap()

    def close(self) -> None:
        """End of input ends the worker's loop; it is killed if it lingers."""
        try:
            if self.sock is not None:
                self.sock.shutdown(socket.SHUT_RDWR)
            elif self.proc is not None and self.proc.stdin is not None:
                self.proc.stdin.close()
            if self.proc is not None:
                self.proc.wait(timeout=2)
        except (subprocess.TimeoutExpired, OSError):
            pass
        self.kill()

    def _reap(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)
            for f in (self.proc.stdin, self.proc.stdout):
                try:
                    if f is not None:
                        f.close()
                except OSError:
                    pass
        if self.sock is not None:
            self.sock.close()
        self._remove_scratch()
        self._remove_cgroup()

    def _remove_cgroup(self) -> None:
        """The worker's memory cgroup, once its processes are gone (a later worker removes
        what is left, see ``_worker.MemoryCgroup``)."""
        path = getattr(self, "info", {}).get("cgroup")
        for _ in range(20):
            if not path:
                return
            try:
                os.rmdir(path)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.01)

    def _remove_scratch(self) -> None:
        shutil.rmtree(self.scratch, ignore_errors=True)


class WorkerPool:
    """Up to ``size`` warm workers of one isolation kind, shared by threads."""

    def __init__(self, kind: str, config: SandboxConfig) -> None:
        self.kind = kind
        self.config = config
        self.size = config.pool_size
        self._idle: queue.LifoQueue[Worker] = queue.LifoQueue()
        self._lock = threading.Lock()
        self._started = 0
        self._closed = False
        self.info: dict[str, Any] = {}
        self._zygote: Zygote | None = None

    def _new_worker(self) -> Worker:
        """A started worker. One that died during set-up without saying why (a fork that
        failed on a loaded machine, a signal) is started once more before the sandbox is
        declared unavailable; a set-up that reports its error is not retried."""
        try:
            return self._start_worker()
        except SandboxError as exc:
            if _SILENT_EXIT not in str(exc):
                raise
            log.warning("a %s sandbox worker exited during set-up; starting another", self.kind)
            time.sleep(0.1)
            return self._start_worker()

    def _start_worker(self) -> Worker:
        if self.kind == "bwrap":  # bubblewrap must exec the worker itself
            return Worker(self.kind, self.config)
        if self._zygote is None or not self._zygote.alive():
            self._zygote = Zygote(self.config)
        return Worker(self.kind, self.config, self._zygote)

    def start(self) -> None:
        """Start one worker now (so a failing isolation shows at once, step 2)."""
        worker = self._new_worker()
        self.info = worker.info
        if self.size > 0:
            with self._lock:
                self._started += 1
            self._idle.put(worker)
        else:
            worker.close()

    def _acquire(self) -> Worker:
        if self.size == 0:
            return self._new_worker()
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            pass
        with self._lock:
            grow = self._started < self.size
            if grow:
                self._started += 1
        if grow:
            try:
                return self._new_worker()
            except SandboxError:
                with self._lock:
                    self._started -= 1
                raise
        return self._idle.get()

    def _release(self, worker: Worker) -> None:
        if self.size == 0 or self._closed or not worker.alive():
            if worker.alive():  # one-shot workers end in the background: no wait on the path
                threading.Thread(target=worker.close, daemon=True).start()
            else:
                worker.kill()
            if self.size > 0:
                with self._lock:
                    self._started -= 1
            return
        self._idle.put(worker)

    def run(self, req: dict[str, Any], timeout: float) -> dict[str, Any] | None:
        """Step 3: one execution on a warm worker (None: the worker died)."""
        if self._closed:
            raise SandboxError("the sandbox is closed")
        worker = self._acquire()
        try:
            return worker.request(req, timeout)
        finally:
            self._release(worker)

    def close(self) -> None:
        self._closed = True
        while True:
            try:
                worker = self._idle.get_nowait()
            except queue.Empty:
                break
            worker.close()
        if self._zygote is not None:
            self._zygote.close()
            self._zygote = None
