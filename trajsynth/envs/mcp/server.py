"""One connection to an MCP server, usable from any thread: start, calls, state, stop.

1) plan (stdio): the command as written (found on PATH, ``{python}`` = trajsynth's
   interpreter), its environment (the SDK's safe variables, then a deterministic time zone,
   locale and git clock unless ``env`` sets them, then ``env``), and its on-disk state
   (:mod:`.state`): private copies of every state path, made once;
2) start: the command runs through the sandbox's launcher (:mod:`trajsynth.envs.sandbox.view`):
   killed with trajsynth and with every process it started; with ``isolate: namespace`` in a
   private view that shows the copies at the user's paths and everything else read-only
   (``copy``: the server is given the copies' paths, translated back in its results). Its
   stderr goes to a log file, whose tail every start failure shows. The SDK's client runs on
   a private event loop in its own thread, in one long-lived task; calls from any thread are
   queued to it and serialized by a lock;
3) a call: the server's answer is read by :mod:`.results` (``isError``, error-shaped text,
   the server's exception text) and failures are logged once per tool and message, naming
   the tool. A call that outlives ``timeout_s`` stops the server (the next call starts it
   again) and is a failure of that call; a server that exited (crashed) fails the call it
   was answering and is started again for the next. A server that wrote outside its declared state
   ("read-only file system" for a path of the user's, under the namespace view) is given
   that path as state, restarted, and the call made again once;
4) state: the state of an episode is the log of the calls that changed the server (a call to
   a tool not annotated read-only, that, for a server with on-disk state, changed its
   copy). :meth:`ensure` brings the server to an episode's log, by ``reset`` (see
   :class:`~.config.MCPConfig`): ``state`` restores the copy saved for that log (or for its
   longest saved prefix, then replays the rest) while the process stays warm; ``tool`` calls
   the reset tool and replays; ``restart`` starts a new process (on restored copies) and
   replays; ``none`` does nothing. Read-only calls never reset anything;
5) stop: the session ends, the SDK stops the process group, the launcher's death signal
   takes whatever is left, and the copies are removed.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures as cf
import contextlib
import json
import logging
import os
import re
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from ...core.errors import ConfigError
from ...core.ids import canonical_json, stable_hash
from ..spec import Toolset, ToolSpec
from ..tools import ToolError
from .config import DETERMINISTIC_ENV, MCPConfig
from .results import exception_message, generic, interpret, stderr_error
from .state import StateCopies, find_state, units

__all__ = ["Calls", "MCPServer"]

log = logging.getLogger("trajsynth.envs.mcp")

Calls = tuple[tuple[str, str], ...]
_EROFS = re.compile(r"read-only file system[^'\"/]*['\"]?(/[^'\"\s,]+)", re.IGNORECASE)
_ERRORS_LOGGED_PER_TOOL = 5


def _run_dir_logs() -> Path | None:
    """The run's ``logs`` folder when a pipeline run is logging (its run.log handler)."""
    for handler in logging.getLogger("trajsynth").handlers:
        if isinstance(handler, logging.FileHandler) and getattr(handler, "_trajsynth", False):
            return Path(handler.baseFilename).parent
    return None


def _safe_env() -> dict[str, str]:
    try:
        from mcp.client.stdio import get_default_environment

        return get_default_environment()
    except ImportError:  # pragma: no cover - the SDK is checked where the session starts
        return {k: os.environ[k] for k in ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")
                if k in os.environ}  # fmt: skip


class MCPServer:
    """One MCP server (see the module docstring)."""

    def __init__(self, config: MCPConfig, name: str = "mcp") -> None:
        self.config = config
        self.name = name
        self.lock = threading.RLock()
        self.current: Calls | None = None  # the log the server holds
        self.copies: StateCopies | None = None
        self.isolation = "url" if config.url else "none"
        self.restarts = 0  # processes started
        self._planned = False
        self._argv: list[str] = []
        self._env: dict[str, str] = {}
        self._cwd = os.path.abspath(config.cwd or os.getcwd())
        self._state_paths: list[Path] = []
        self._translate: list[tuple[str, str]] = []  # (user path, copy path) in copy mode
        self._scratch: Path | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue[Any] | None = None
        self._task: cf.Future[Any] | None = None
        self._tools: list[Any] | None = None
        self._states: dict[Calls, Any] = {}
        self._fingerprint: str | None = None
        self._errlog: Any = None
        self._errlog_start = 0
        self._logged: dict[str, set[str]] = {}
        self._patterns = [re.compile(p) for p in config.error_patterns]
        self.stderr_path: Path | None = None
        #: values the server accepts (:meth:`MCPEnvironment.value_hints`), found once
        self.value_hints: dict[str, Any] | None = None
        atexit.register(self.close)

    # -- 1) plan ---------------------------------------------------------------------------
    def _plan(self) -> None:
        if self._planned or self.config.url:
            return
        cfg = self.config
        argv = cfg.argv()
        env = dict(_safe_env())
        env |= {"COLUMNS": "400", "NO_COLOR": "1"}  # tracebacks in the log unwrapped, plain
        if cfg.deterministic:
            env.update({k: v for k, v in DETERMINISTIC_ENV.items() if k not in cfg.env})
        env.update(cfg.env)
        self._argv, self._env = argv, env
        self._state_paths = find_state(argv, cfg.env, self._cwd, cfg.state)
        self._make_copies()
        self._planned = True

    def _make_copies(self) -> None:
        cfg = self.config
        if self.copies is not None:
            self.copies.close()
            self.copies = None
        mode = cfg.isolate
        if mode == "auto":
            from ..sandbox.view import namespace_view

            ok, why = namespace_view()
            mode = "namespace" if ok else "copy"
            if not ok and self._state_paths:
                log.warning(
                    "MCP %s: no namespace view here (%s): the server gets copies of its "
                    "state at other paths, and the rest of the host stays writable",
                    self.name, why,
                )  # fmt: skip
        self.isolation = mode
        if self._scratch is None:
            self._scratch = Path(tempfile.mkdtemp(prefix=f"trajsynth-mcp-{self.name}-"))
            (self._scratch / "tmp").mkdir()
        if mode == "off" or not self._state_paths:
            self._translate = []
            return
        started = time.monotonic()
        self.copies = StateCopies(
            units(self._state_paths), self._scratch / "state", keep=cfg.snapshots
        )
        log.info(
            "MCP %s: state %s copied in %.2fs (%s)",
            self.name, ", ".join(str(u.path) for u in self.copies.units),
            time.monotonic() - started, mode,
        )  # fmt: skip
        self._translate = (
            sorted(((str(u), str(c)) for u, c in self.copies.mapping()), key=lambda p: -len(p[0]))
            if mode == "copy"
            else []
        )

    def state_paths(self) -> list[Path]:
        """The state the server keeps on disk (its user's paths)."""
        with self.lock:
            self._plan()
            return list(self._state_paths)

    # -- 2) start --------------------------------------------------------------------------
    def _launch_argv(self) -> tuple[list[str], dict[str, str]]:
        from ..sandbox.view import view_argv

        argv = [self._to_server(a) for a in self._argv]
        env = {k: self._to_server(v) for k, v in self._env.items()}
        assert self._scratch is not None
        private_tmp = str(self._scratch / "tmp")
        if self.isolation == "namespace" and "TMPDIR" not in self.config.env:
            env["TMPDIR"] = private_tmp  # the only writable folder besides the copies
        spec: dict[str, Any] = {
            "argv": argv,
            "env": env,
            "cwd": self._to_server(self._cwd),
            "namespace": self.isolation == "namespace",
            "scratch": str(self._scratch),  # removed by the launcher if trajsynth is killed
        }
        if self.isolation == "namespace":
            assert self.copies is not None or not self._state_paths
            binds, overlays = [], []
            if self.copies is not None:
                for unit, live in zip(self.copies.units, self.copies.live, strict=True):
                    binds.append([str(live), str(unit.path)])
                    if unit.overlay:
                        overlays.append(str(unit.path.parent))
            spec |= {"writable": [private_tmp, "/dev/shm"], "binds": binds}
            if overlays:
                layers = self._scratch / "layers"
                layers.mkdir(exist_ok=True)
                spec |= {"overlays": overlays, "layers": str(layers)}
        return view_argv(spec), env

    def _open_errlog(self) -> Any:
        cfg = self.config
        if self._errlog is None:
            if cfg.stderr_log:
                path = Path(cfg.stderr_log)
            else:
                logs = _run_dir_logs()
                folder = logs if logs is not None else Path(tempfile.gettempdir())
                suffix = "" if logs is not None else f"-{os.getpid()}"
                path = folder / f"mcp-{self.name}{suffix}.log"
            path.parent.mkdir(parents=True, exist_ok=True)
            self.stderr_path = path
            self._errlog = open(path, "a", encoding="utf-8", errors="replace")  # noqa: SIM115
        self._errlog.flush()
        self._errlog_start = self._errlog.tell()
        return self._errlog

    def _stderr_since(self, offset: int) -> str:
        """What the server wrote to stderr after ``offset`` (up to 64 KiB)."""
        if self.stderr_path is None:
            return ""
        time.sleep(0.05)  # the server writes its traceback just after it answers
        with open(self.stderr_path, "rb") as f:
            f.seek(offset)
            return f.read(65536).decode("utf-8", "replace")

    def stderr_tail(self, lines: int = 15) -> str:
        """The last lines the server wrote to stderr since it last started."""
        if self.stderr_path is None or not self.stderr_path.exists():
            return ""
        with open(self.stderr_path, "rb") as f:
            f.seek(max(self._errlog_start, os.path.getsize(self.stderr_path) - 8192))
            text = f.read().decode("utf-8", "replace")
        return "\n".join(text.strip().splitlines()[-lines:])

    def _start(self) -> None:
        try:
            from mcp import Client, StdioServerParameters
            from mcp.client.stdio import stdio_client
        except ImportError as exc:
            raise ConfigError(
                "the mcp backend needs the MCP SDK", hint="pip install 'trajsynth[mcp]'"
            ) from exc
        cfg = self.config
        self._plan()
        target: Any
        if cfg.url:
            target = cfg.url
        else:
            argv, env = self._launch_argv()
            params = StdioServerParameters(command=argv[0], args=argv[1:], env=env, cwd=self._cwd)
            target = stdio_client(params, errlog=self._open_errlog())
        loop = asyncio.new_event_loop()
        threading.Thread(target=loop.run_forever, name=f"mcp-{self.name}", daemon=True).start()
        ready: cf.Future[None] = cf.Future()

        async def serve() -> None:
            self._queue = asyncio.Queue()
            try:
                async with Client(target, cache=None) as client:
                    ready.set_result(None)
                    while True:
                        item = await self._queue.get()
                        if item is None:
                            break
                        fn, fut = item
                        try:
                            fut.set_result(await fn(client))
                        except Exception as exc:
                            fut.set_exception(exc)
            except BaseException as exc:  # said to the caller or logged, never lost
                cancelled = isinstance(exc, asyncio.CancelledError)
                if not ready.done():
                    ready.set_exception(exc)
                elif not cancelled:
                    log.warning("MCP %s: the session ended: %s", self.name, exception_message(exc))
                if cancelled:
                    raise

        self._loop = loop
        self._task = asyncio.run_coroutine_threadsafe(serve(), loop)
        self.restarts += 1
        try:
            ready.result(timeout=cfg.start_timeout_s)
        except BaseException as exc:
            self.close(keep_copies=True)
            detail = "no answer in time" if isinstance(exc, cf.TimeoutError) else (
                exception_message(exc)
            )  # fmt: skip
            tail = self.stderr_tail()
            where = f" (its stderr, in {self.stderr_path}:\n{tail})" if tail else ""
            raise ConfigError(
                f"cannot connect to the MCP server {cfg.where()}: {detail}{where}",
                hint="run the command by hand to see it start"
                if cfg.command
                else "is the server listening at that URL?",
            ) from None

    def _submit(self, fn: Callable[[Any], Awaitable[Any]], timeout: float | None = None) -> Any:
        with self.lock:
            if self._task is not None and self._task.done():  # the server ended (a crash)
                tail = self.stderr_tail(3)
                log.warning("MCP %s: the server exited; starting it again%s", self.name,
                            f" (its stderr: {tail})" if tail else "")  # fmt: skip
                self.stop()
            if self._loop is None:
                self._start()
            fut: cf.Future[Any] = cf.Future()
            assert self._loop is not None and self._queue is not None
            self._loop.call_soon_threadsafe(self._queue.put_nowait, (fn, fut))
            try:
                return fut.result(timeout=timeout or self.config.timeout_s)
            except cf.TimeoutError:
                self.stop()  # a hung call must not leave its server running
                raise

    def stop(self) -> None:
        """Stop the process (the copies stay; the next call starts a new one)."""
        self.close(keep_copies=True)

    def close(self, keep_copies: bool = False) -> None:
        """Stop the session and the server's processes; remove the copies unless asked."""
        with self.lock:
            loop, queue, task = self._loop, self._queue, self._task
            self._loop = self._queue = self._task = None
            self.current = None
            if not keep_copies:
                if self.copies is not None:
                    self.copies.close()
                    self.copies = None
                if self._scratch is not None:
                    import shutil

                    shutil.rmtree(self._scratch, ignore_errors=True)
                    self._scratch = None
                self._planned = False
                if self._errlog is not None:
                    self._errlog.close()
                    self._errlog = None
        if loop is None:
            return
        if queue is not None:
            loop.call_soon_threadsafe(queue.put_nowait, None)
        if task is not None:
            try:  # an idle session ends at once; a busy one (a hung call) is cancelled
                task.result(timeout=2)
            except BaseException:
                task.cancel()
                with contextlib.suppress(BaseException):
                    task.result(timeout=8)  # the SDK's shutdown: stdin closed, group killed
        loop.call_soon_threadsafe(loop.stop)  # the thread ends: the launcher's death signal

    # -- requests --------------------------------------------------------------------------
    def tools(self) -> list[Any]:
        """The server's tools (``mcp.types.Tool``), listed once."""
        if self._tools is None:

            async def fetch(client: Any) -> list[Any]:
                out, cursor = [], None
                while True:
                    page = await client.list_tools(cursor=cursor)
                    out += page.tools
                    cursor = page.next_cursor
                    if not cursor:
                        return out

            try:
                self._tools = self._submit(fetch)
            except cf.TimeoutError:
                raise ConfigError(
                    f"the MCP server {self.config.where()} did not list its tools in "
                    f"{self.config.timeout_s:g}s"
                ) from None
            except ConfigError:
                raise
            except Exception as exc:
                raise ConfigError(
                    f"the MCP server {self.config.where()} could not list its tools: "
                    f"{exception_message(exc)}"
                ) from None
        return self._tools

    def read_only(self, name: str) -> bool:
        """Whether ``name`` never changes the server: annotated ``readOnlyHint`` or listed in
        the config's ``read_only``."""
        if name in self.config.read_only:
            return True
        tool = next((t for t in self.tools() if t.name == name), None)
        return bool(tool and tool.annotations and tool.annotations.read_only_hint)

    def _to_server(self, value: Any) -> Any:
        """The user's paths in ``value`` → the copies' (``isolate: copy``)."""
        return self._translated(value, to_server=True)

    def _from_server(self, value: Any) -> Any:
        """The copies' paths in ``value`` → the user's."""
        return self._translated(value, to_server=False)

    def _translated(self, value: Any, *, to_server: bool) -> Any:
        if not self._translate:
            return value
        if isinstance(value, str):
            for user, copy in self._translate:
                if to_server:
                    value = re.sub(re.escape(user) + r"(?=/|\b|$)", copy, value)
                else:
                    value = value.replace(copy, user)
            return value
        if isinstance(value, list):
            return [self._translated(v, to_server=to_server) for v in value]
        if isinstance(value, dict):
            return {k: self._translated(v, to_server=to_server) for k, v in value.items()}
        return value

    def call(self, name: str, arguments: dict[str, Any]) -> tuple[Any, dict[str, str] | None]:
        """Step 3: run one call: (output, None) or (None, error)."""
        with self.lock:
            output, message = self._call(name, arguments)
            held = self.current
            if message is not None and self._learn_state(message):
                self.ensure(held or ())
                output, message = self._call(name, arguments)
        if message is None:
            return output, None
        self._log_failure(name, message)
        return None, ToolError("invalid_value", f"{name}: {message}").to_json()

    def _call(self, name: str, arguments: dict[str, Any]) -> tuple[Any, str | None]:
        args = self._to_server(arguments)

        async def run(client: Any) -> Any:
            return await client.call_tool(name, args)

        path = self.stderr_path
        offset = os.path.getsize(path) if path is not None and path.exists() else None
        try:
            result = self._submit(run)
        except cf.TimeoutError:
            return None, (
                f"no answer in {self.config.timeout_s:g}s (the server was stopped; the next "
                "call starts it again)"
            )
        except ConfigError:
            raise
        except Exception as exc:
            message = exception_message(exc)
            if "Connection closed" in message and not self.config.url:  # the process ended
                printed = self._stderr_since(offset) if offset is not None else ""
                last = [ln.strip() for ln in printed.splitlines() if ln.strip()][-1:]
                self.stop()  # the next call starts it again
                message = "the server exited" + (f": {last[0][:300]}" if last else "")
            return None, message
        output, error = interpret(
            result, error_shapes=self.config.error_text, patterns=self._patterns
        )
        if error is not None and generic(error) and offset is not None:
            detail = stderr_error(self._stderr_since(offset))
            if detail:
                error = f"{error}: {detail}"
        return self._from_server(output), (
            None if error is None else self._from_server(error)
        )  # fmt: skip

    def _log_failure(self, name: str, message: str) -> None:
        seen = self._logged.setdefault(name, set())
        first = message.strip().splitlines()[0][:300] if message.strip() else message
        if first in seen or len(seen) >= _ERRORS_LOGGED_PER_TOOL:
            return
        seen.add(first)
        log.info("MCP %s: %s failed: %s", self.name, name, first)

    def _learn_state(self, message: str) -> bool:
        """Step 3: a write refused outside the declared state becomes state (auto only)."""
        cfg = self.config
        m = _EROFS.search(message)
        if m is None or cfg.state is not None or self.isolation != "namespace":
            return False
        path = Path(m.group(1))
        if path in self._state_paths or any(p in path.parents for p in self._state_paths):
            return False
        log.warning(
            "MCP %s: the server writes to %s, which its command does not name: it becomes "
            "state (declare it in `state` to say so up front)",
            self.name, path,
        )  # fmt: skip
        self.stop()
        self._state_paths = [*self._state_paths, path]
        self._make_copies()
        self._fingerprint = None
        return True

    # -- 4) state --------------------------------------------------------------------------
    def reset_mode(self) -> str:
        """The ``reset`` in effect (``auto`` resolved)."""
        cfg = self.config
        if cfg.reset != "auto":
            return cfg.reset
        if cfg.reset_tool and any(t.name == cfg.reset_tool for t in self.tools()):
            return "tool"
        self._plan()
        if self.copies is not None:
            return "state"
        hidden = {cfg.reset_tool, cfg.state_tool}
        if all(self.read_only(t.name) for t in self.tools() if t.name not in hidden):
            return "none"
        if cfg.url:
            raise ConfigError(
                f"the MCP server at {cfg.url} has tools that change it and no reset tool "
                f"{cfg.reset_tool!r}",
                hint="episodes start from the initial state: give `reset_tool`, or "
                "`reset: none` if the server keeps no state",
            )
        return "restart"

    def changed(self, name: str) -> bool:
        """Whether the call to ``name`` just made changed the server (it enters the log)."""
        if self.read_only(name):
            return False
        if self.copies is None:
            return True
        before = self._fingerprint
        self._fingerprint = self.copies.fingerprint()
        return before is None or before != self._fingerprint

    @staticmethod
    def key(calls: Calls) -> str:
        return StateCopies.INITIAL if not calls else stable_hash(calls)

    def ensure(self, calls: Calls) -> None:
        """Step 4: bring the server to the state ``calls`` leave."""
        with self.lock:
            if self.current == calls:
                return
            mode = self.reset_mode()
            if mode == "none":
                self.current = calls
                return
            done: Calls = ()
            if self.current is not None and calls[: len(self.current)] == self.current:
                done = self.current  # the episode went on from what the server holds
            elif mode == "state":
                assert self.copies is not None
                if self.current is not None and self._loop is not None:
                    self.copies.save(self.key(self.current))
                done = next(calls[:n] for n in range(len(calls), -1, -1)
                            if self.copies.has(self.key(calls[:n])))  # fmt: skip
                self.copies.restore(self.key(done))
            elif mode == "tool":
                _, error = self._call(self.config.reset_tool or "reset", {})
                if error is not None:
                    raise ConfigError(f"the MCP server's {self.config.reset_tool} failed: {error}")
            else:  # restart: a fresh process on the initial copies
                self.stop()
                if self.copies is not None:
                    self.copies.restore(StateCopies.INITIAL)
            for name, args in calls[len(done) :]:
                _, error = self._call(name, json.loads(args))
                if error is not None:
                    log.warning("MCP %s: replay of %s(%s) failed: %s", self.name, name, args,
                                error)  # fmt: skip
            self.current = calls
            self._fingerprint = self.copies.fingerprint() if self.copies is not None else None

    def state(self, calls: Calls) -> Any:
        """The ``state_tool``'s answer after ``calls`` (None: the server has none)."""
        cfg = self.config
        if not cfg.state_tool or not any(t.name == cfg.state_tool for t in self.tools()):
            return None
        with self.lock:
            if calls not in self._states:
                self.ensure(calls)
                output, error = self._call(cfg.state_tool, {})
                self._states[calls] = output if error is None else None
            return self._states[calls]

    def toolset(self, name: str) -> Toolset:
        """The server's tools as a toolset, less the harness's reset and state tools; each
        tool's annotations (``readOnlyHint`` as ``extra.read_only``) kept."""
        hidden = {self.config.reset_tool, self.config.state_tool}
        specs = []
        for t in self.tools():
            if t.name in hidden:
                continue
            specs.append(tool_spec(t, source=self.config.where(),
                                   read_only=self.read_only(t.name)))  # fmt: skip
        return Toolset(name=name, tools=specs, format="mcp")


def tool_spec(tool: Any, *, source: str, read_only: bool) -> ToolSpec:
    """An ``mcp.types.Tool`` as a :class:`ToolSpec` (annotations in ``extra``)."""
    params = {k: v for k, v in dict(tool.input_schema).items() if k not in ("title", "$schema")}
    params.setdefault("type", "object")
    response = tool.output_schema
    extra: dict[str, Any] = {"read_only": read_only}
    if tool.annotations is not None:
        hints = {k: v for k, v in tool.annotations.model_dump(by_alias=True).items()
                 if v is not None}  # fmt: skip
        if hints:
            extra["annotations"] = hints
    return ToolSpec(
        name=tool.name,
        description=tool.description or "",
        parameters=json.loads(canonical_json(params)),
        response={k: v for k, v in response.items() if k not in ("title", "$schema")}
        if response
        else None,
        source=source,
        extra=extra,
    )


with contextlib.suppress(Exception):  # the SDK logs each stdout parse failure with a traceback
    logging.getLogger("mcp.client.stdio").setLevel(logging.CRITICAL)
